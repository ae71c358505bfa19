"""Driving the peers (harness/bench/peerlink.py): finding Mahimahi and refusing it in one line,
its command line, the processes whose CPU is counted, and one case through ours end to end
(the client side as the unprivileged user, as for Mahimahi)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.bench import peerlink
from harness.bench.peerlink import (
    MahimahiHost,
    Peers,
    find_mahimahi,
    mahimahi_argv,
    measure_slot,
)
from harness.bench.peers import (
    CHAPTER_RATE_BPS,
    PeerCase,
    PeerConfig,
    PeerRun,
    rows_from_dicts,
    table,
    trace_case,
)
from netem.trace import load, resolve_path
from tbcore.errors import SpecError


def _tools(directory: Path, mode: int) -> None:
    for tool in ("mm-delay", "mm-link"):
        path = directory / tool
        path.write_text("#!/bin/sh\nexit 0\n")
        os.chmod(path, mode)


def test_mahimahi_missing_is_one_line_naming_the_option(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    for bin_dir in (None, str(tmp_path)):
        with pytest.raises(SpecError, match="no mm-delay") as err:
            find_mahimahi(bin_dir)
        assert err.value.field == "mahimahi_bin" and "\n" not in str(err.value)


def test_mahimahi_must_be_setuid_root(tmp_path: Path) -> None:
    _tools(tmp_path, 0o755)
    with pytest.raises(SpecError, match="not setuid root"):
        find_mahimahi(str(tmp_path))


@pytest.mark.root
def test_setuid_root_tools_are_found(tmp_path: Path) -> None:
    _tools(tmp_path, 0o4755)
    assert find_mahimahi(str(tmp_path)) == {
        "mm-delay": str(tmp_path / "mm-delay"),
        "mm-link": str(tmp_path / "mm-link"),
    }


def test_mahimahis_command_line_has_the_cases_delay_trace_and_queues(tmp_path: Path) -> None:
    host = MahimahiHost({"mm-delay": "/b/mm-delay", "mm-link": "/b/mm-link"}, "tb-x-mm", tmp_path)
    argv = mahimahi_argv(host, PeerCase("tcp", CHAPTER_RATE_BPS), ["iperf3", "-c", "a"])
    trace = str(tmp_path / "const-333000000.trace")
    assert argv == [
        "/b/mm-delay",
        "100",
        "/b/mm-link",
        trace,
        trace,
        "--uplink-queue=droptail",
        "--uplink-queue-args=bytes=8325000",
        "--downlink-queue=droptail",
        "--downlink-queue-args=bytes=8325000",
        "--",
        "iperf3",
        "-c",
        "a",
    ]
    # the constant trace: 27.75 opportunities a millisecond over one second
    lines = Path(trace).read_text().split()
    assert len(lines) == 27_750 and lines[-1] == "1000"
    assert oct(Path(trace).stat().st_mode & 0o777) == "0o644"
    path = resolve_path("cell-markov.down")
    _, parsed = load(path, "capacity")
    replay = mahimahi_argv(host, trace_case(path, list(parsed.stamps_ms)), ["true"])
    assert replay[3:5] == [path, path]


def test_the_unprivileged_side_runs_a_readable_copy_with_the_standard_library(
    tmp_path: Path,
) -> None:
    tree = peerlink.client_tree(tmp_path)
    argv = peerlink.inner_python(tree)
    assert argv[0] == "env" and argv[1] == f"PYTHONPATH={tree}"
    assert all(oct(p.stat().st_mode & 0o777) in ("0o644", "0o755") for p in tree.rglob("*"))
    # the copy is closed under its imports, and imports nothing outside the standard library
    code = (
        "import sys, netem.probe, harness.bench.udpblast; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('netem', 'tbcore', 'harness', 'numpy', 'scipy', 'pandas')))"
    )
    done = subprocess.run([*argv, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    loaded = {name.replace(".", "/") for name in eval(done.stdout)}
    wanted = {m.removesuffix(".py").removesuffix("/__init__") for m in peerlink.CLIENT_MODULES}
    assert loaded == wanted


def test_netem_absent_here_and_no_guest_stage_is_one_line(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(peerlink, "netem_here", lambda: (False, "no sch_netem"))
    monkeypatch.setattr(peerlink, "STAGE", tmp_path / "netem-vm")
    with pytest.raises(SpecError, match=r"netem: no sch_netem, and no .*netem-vm") as err:
        peerlink.run_compare(("ours", "netem"), PeerConfig.quick())
    assert "\n" not in str(err.value)


def test_netem_absent_here_runs_beside_ours_in_the_guest(monkeypatch) -> None:
    """The guest's rows come back marked @guest, and divide by ours in the guest."""
    monkeypatch.setattr(peerlink, "netem_here", lambda: (False, "no sch_netem"))

    def here(emulators, config, **kwargs):
        assert list(emulators) == []  # no peer to compare with here: ours runs in the guest
        return {"host": {}, "emulators": [], "runs": []}

    calls = []

    def guest(argv, name, timeout_s):
        calls.append(argv)
        part = [_slot("ours", 100e6, 0.9), _slot("netem", 50e6, None)]
        return {"host": {"kernel": "6.1.0-guest"}, "emulators": ["ours", "netem"], "runs": part}, {
            "vm_stage_s": 1.0
        }

    monkeypatch.setattr(peerlink, "measure_here", here)
    monkeypatch.setattr(peerlink, "run_in_guest", guest)
    doc = peerlink.run_compare(("ours", "netem"), PeerConfig.quick(), traces=())
    assert "--emulators" in calls[0] and calls[0][calls[0].index("--emulators") + 1] == "ours,netem"
    assert doc["emulators"] == ["ours@guest", "netem@guest"]
    assert doc["guest"] == {"kernel": "6.1.0-guest", "vm_stage_s": 1.0}
    rows = {row.emulator: row for row in table(rows_from_dicts(doc["runs"]))}
    assert rows["netem@guest"].values["delivered_ratio"] == pytest.approx(0.5)
    assert rows["ours@guest"].values["delivered_ratio"] == pytest.approx(1.0)


def _slot(emulator: str, delivered: float, cpu: float | None) -> dict:
    return PeerRun(1, "tcp 333 Mbit/s", "tcp", emulator, 333e6, delivered, cpu_cores=cpu).to_dict()


@pytest.mark.root
@pytest.mark.slow
def test_one_case_of_each_kind_through_ours(tmp_path: Path) -> None:
    config = PeerConfig(
        rounds=1, rates_bps=(20e6,), duration_s=2.0, omit_s=1.0, probes=50, trace_duration_s=3.0
    )
    path = resolve_path("cell-markov.down")
    _, parsed = load(path, "capacity")
    peers = Peers("tpl", python=peerlink.inner_python(peerlink.client_tree(tmp_path)))
    runs = {
        kind: measure_slot(peers, "ours", case, config, 1)
        for kind, case in (
            ("rtt", PeerCase("rtt", 20e6)),
            ("tcp", PeerCase("tcp", 20e6)),
            ("trace", trace_case(path, list(parsed.stamps_ms))),
        )
    }
    for run in runs.values():
        assert run.error is None, run.error
        assert run.cpu_cores is not None and run.cpu_cores >= 0
        assert run.softirq_cores is not None
    assert abs(runs["rtt"].rtt_err_p50_s) < 5e-3 and runs["rtt"].probes >= 45
    assert 0.7 * 20e6 < runs["tcp"].delivered_bps < 1.02 * 20e6
    assert runs["trace"].trace_delivered_ratio == pytest.approx(1.0, abs=0.05)
    assert runs["trace"].trace_err_p50 < 0.1


def test_a_failing_slot_is_recorded_not_raised(monkeypatch) -> None:
    @contextlib.contextmanager
    def session(self, emulator, case):
        yield object()

    def broken(session, case, config):
        raise OSError("iperf3 exited 1: unable to connect\nsecond line")

    monkeypatch.setattr(Peers, "session", session)
    monkeypatch.setitem(peerlink.MEASURES, "tcp", broken)
    run = measure_slot(Peers("x"), "mahimahi", PeerCase("tcp", 1e6), PeerConfig.quick(), 2)
    assert run.error == "OSError: iperf3 exited 1: unable to connect"
    assert (run.round, run.emulator, run.delivered_bps) == (2, "mahimahi", None)


def test_the_client_modules_run_without_the_venv(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            *peerlink.inner_python(peerlink.client_tree(tmp_path)),
            "-m",
            "harness.bench.udpblast",
            "--help",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and "--rate-bps" in done.stdout


def _mahimahi_bin() -> str | None:
    """Where a built Mahimahi is (TB_MAHIMAHI_BIN, or mm-link on the PATH), if anywhere."""
    given = os.environ.get("TB_MAHIMAHI_BIN")
    if given:
        return given
    found = shutil.which("mm-link")
    return os.path.dirname(found) if found else None


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(_mahimahi_bin() is None, reason="Mahimahi is not built (TB_MAHIMAHI_BIN)")
def test_mahimahi_and_ours_alternate_through_every_kind() -> None:
    config = PeerConfig(
        rounds=1, rates_bps=(20e6,), duration_s=2.0, omit_s=1.0, probes=50, trace_duration_s=3.0
    )
    doc = peerlink.run_compare(
        ("ours", "mahimahi"), config, name="tpm", mahimahi_bin=_mahimahi_bin()
    )
    runs = doc["runs"]
    assert [(r["kind"], r["emulator"]) for r in runs[:2]] == [("rtt", "ours"), ("rtt", "mahimahi")]
    assert all(r["error"] is None for r in runs), [r["error"] for r in runs]
    mm = {r["kind"]: r for r in runs if r["emulator"] == "mahimahi"}
    assert mm["tcp"]["delivered_bps"] > 0.7 * 20e6 and mm["tcp"]["cpu_cores"] > 0
    assert mm["trace"]["trace_delivered_ratio"] == pytest.approx(1.0, abs=0.05)
    # Mahimahi's clock counts whole milliseconds: its idle RTT is late by about them
    assert mm["rtt"]["rtt_err_p50_s"] > 0

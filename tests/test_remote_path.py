"""harness.run.remote.path: a real path in the link's place. The server's arguments for the
other host, its files merged back on this clock, the one-way delays across the clocks and
what a real path refuses; then (root) experiments/connection.toml --quick against an sshd
in a namespace behind an emulated path, and a killed harness that leaves nothing there."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import support_sshd

from harness.run.remote import path as remote_path
from harness.run.remote.channel import ControlChannel
from harness.run.remote.clocksync import ClockOffset
from harness.run.stacks import server_argv
from harness.spec.experiment import load as load_spec
from netem import nsexec
from netem.linkspec import parse_link
from tbcore.control import DIR_PLACEHOLDER
from tbcore.errors import SpecError
from tbcore.records import RequestRecord, ServerEvent
from tbcore.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
OFFSET = ClockOffset(offset_s=500.0, error_s=0.01, min_rtt_s=0.02, samples=8, at_client_s=10.0)


def test_the_servers_arguments_for_the_other_host(tmp_path: Path) -> None:
    settings = Settings.from_table({"protocol": "h3", "qlog": True}, "fixed")
    argv = server_argv(
        settings, parse_link("rtt=40ms"), bind="198.18.2.2", port=4433, run_dir=tmp_path
    )
    args, files, dirs = remote_path.remote_args(argv, tmp_path)
    assert str(tmp_path) not in " ".join(args)
    assert f"{DIR_PLACEHOLDER}/server.jsonl" in args and "198.18.2.2" in args
    assert json.loads(files["server-settings.json"])["settings"]["protocol"] == "h3"
    assert dirs == ["qlog/server"]
    with pytest.raises(SpecError, match=r"^remote: not a testbed serve"):
        remote_path.remote_args(["sh", "-c", "id"], tmp_path)


def event(t: float, name: str, stream: int | None = 1) -> str:
    fields = {f: None for f in ServerEvent.field_names()}
    return ServerEvent(**{**fields, "t": t, "event": name, "stream": stream}).to_json()


def test_the_servers_files_come_back_on_this_clock(tmp_path: Path) -> None:
    landing = tmp_path / remote_path.SERVER_FILES_DIR
    (landing / "qlog" / "server").mkdir(parents=True)
    (landing / "qlog" / "server" / "a.qlog").write_text("{}")
    (landing / "server.jsonl").write_text(event(510.5, "request_first_byte") + "\n")
    (landing / "keys.log").write_text("SERVER_KEY x\n")
    (landing / "server-settings.json").write_text("{}")
    (tmp_path / "keys.log").write_text("CLIENT_KEY y\n")
    remote_path.merge_server_files(landing, tmp_path, OFFSET)
    moved = ServerEvent.from_dict(json.loads((tmp_path / "server.jsonl").read_text()))
    assert moved.t == pytest.approx(10.5)  # 510.5 on the server's clock, 500 s ahead
    assert (tmp_path / "keys.log").read_text() == "CLIENT_KEY y\nSERVER_KEY x\n"
    assert (tmp_path / "qlog" / "server" / "a.qlog").exists() and not landing.exists()
    assert not (tmp_path / "server-settings.json").exists()


def request(**times: float) -> str:
    base = {f: None for f in RequestRecord.field_names()}
    values = {"request_id": 0, "protocol": "h2", "connection": "reused", "workload": "asr"}
    return RequestRecord(**{**base, **values, "warmup": False, "stream_id": 3, **times}).to_json()


@pytest.mark.parametrize(
    ("server_in", "flag"), [(10.02, None), (9.995, "negative"), (9.95, "impossible")]
)
def test_one_way_delays_across_the_clocks(
    tmp_path: Path, server_in: float, flag: str | None
) -> None:
    (tmp_path / "records.jsonl").write_text(
        request(request_first_byte=10.0, response_first_byte=10.1) + "\n"
    )
    events = [
        event(9.5, "request_first_byte", stream=1),  # a warm-up request's, another stream
        event(server_in, "request_first_byte", stream=3),
        event(10.08, "response_first_byte", stream=3),
    ]
    (tmp_path / "server.jsonl").write_text("\n".join(events) + "\n")
    delays = remote_path.one_way_delays(tmp_path, OFFSET)
    assert delays["one_way_up_s"] == pytest.approx(server_in - 10.0)
    assert delays["one_way_down_s"] == pytest.approx(0.02)
    assert delays["one_way_up_flag"] == flag and delays["one_way_down_flag"] is None


@pytest.mark.parametrize(
    ("experiment", "field"),
    [("loss.toml", "link"), ("initcwnd.toml", "remote"), ("agent-outage.toml", "remote")],
)
def test_what_a_real_path_cannot_do_is_refused(experiment: str, field: str, tmp_path: Path) -> None:
    text = (ROOT / "experiments" / experiment).read_text()
    # an agent's blackout is a link event; a real path has no link to give it to
    text = text.replace('outage_mode = "break"', 'outage_mode = "blackout"')
    path = tmp_path / experiment
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        remote_path.check_spec(load_spec(str(path)))
    assert err.value.field == field


@pytest.mark.parametrize("experiment", ["connection.toml", "agent-outage.toml"])
def test_what_a_real_path_can_do_runs(experiment: str) -> None:
    """The connection file, and the agent's connection break (the ends' own reset, no link
    event) on a real path."""
    remote_path.check_spec(load_spec(str(ROOT / "experiments" / experiment)))


# --- root: a namespace plays the remote host, behind an emulated path --------------------

LINK = "rtt=40ms,rate=100mbit"


def _testbed_run(host: support_sshd.SshdHost, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "harness.cli", "run", *extra, "--remote", host.target,
        "--ssh-config", str(host.ssh_config), "--remote-command",
        support_sshd.TESTBED_COMMAND, "--output", str(out),
    ]  # fmt: skip


@pytest.mark.root
@pytest.mark.timeout(900)
def test_connection_quick_on_a_remote_host(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """One repetition of each level (two with --full, and so two blocks and their probes)."""
    experiment = str(ROOT / "experiments" / "connection.toml")
    reps = 2 if request.config.getoption("--full") else 1
    with support_sshd.sshd_across("rpc", LINK, tmp_path / "sshd") as (host, up):
        # six attempts a run: on a host in a spell of steal three were not always enough for
        # a valid run of each level (the judge is the same; the runner waits for the steal to
        # fall before each new attempt)
        argv = _testbed_run(host, tmp_path / "out", experiment, "--quick", "--reps", str(reps),
                            "--attempts", "6")  # fmt: skip
        done = nsexec.run(up.client_ns, argv, capture_output=True, text=True, timeout=850)
    assert done.returncode == 0, done.stderr[-2000:]
    (result,) = (tmp_path / "out" / "connection").iterdir()
    rows = list(csv.DictReader((result / "runs.csv").open()))
    levels = len(load_spec(experiment).quick_form().levels or load_spec(experiment).levels)
    assert len({r["run_id"][:4] for r in rows}) == levels * reps
    for row in rows:
        assert row["backend"] == "real" and row["remote_host"] == host.target
        # the measured path is the namespace's: 40 ms, no loss, 100 Mbit/s
        assert 0.040 <= float(row["rtt_s"]) < 0.042 and float(row["loss"]) == 0
        assert 80e6 < float(row["up_bps"]) <= 100e6
        # one kernel clock on both "hosts": the offset is 0 within its bound
        assert abs(float(row["server_clock_offset_s"])) <= float(row["server_clock_error_s"])
        # one way is half the round trip (20 ms), never the whole of it: the rest is the
        # server's wake-up to read the request on a shared, busy host
        assert 0.019 < float(row["one_way_up_s"]) < 0.035 and row["one_way_flag"] == ""
        assert float(row["total_s"]) >= 0.98 * float(row["bound_s"]) and row["sha256_ok"] == "True"
    for row in rows:  # the upload's sender is here: its capture gives the ACKs (h2)
        if row["protocol"] == "h2":
            assert int(row["acks"]) > 0 and 0.040 <= float(row["measured_rtt_s"]) < 0.045
    new = [float(r["total_s"]) for r in rows if r["level"] == "h2-new"]
    reused = [float(r["total_s"]) for r in rows if r["level"] == "h2-reused"]
    assert min(new) > max(reused) + 0.1  # set-up and slow start: more than two round trips
    report = (result / "report.md").read_text()
    assert "## The real path (measured, not emulated)" in report and "Clocks:" in report
    probes = json.loads((result / "path_probes.json").read_text())
    # one probe before and one after each visit of a block; a re-run of an invalid run
    # (the host's steal) goes back to its block after the others, and that visit too
    before = [p["block"] for p in probes if p["when"] == "before"]
    after = [p["block"] for p in probes if p["when"] == "after"]
    blocks = sorted({int(row["block"]) for row in rows})
    assert before == after and set(before) == set(blocks) and len(probes) == 2 * len(before)
    if all(row["attempt"] == "1" for row in rows):
        assert before == blocks


def test_the_lease_is_kept_while_a_long_run_sends_nothing() -> None:
    argv = [sys.executable, "-m", "harness.cli", "remote", "agent", "--lease", "1.5"]
    with ControlChannel(argv, name="local") as channel:
        with remote_path.keep_alive(channel, 1.5):
            time.sleep(2.5)  # longer than the lease, no request of the run's own
            assert channel.request("time")[0].error is None
        assert channel.process is not None
        channel.process.wait(timeout=10)  # once the renewals stop, the lease runs out
        assert channel.process.returncode == 0


def test_the_runs_port_from_its_run_file(tmp_path: Path) -> None:
    argv = ["python", "-m", "harness.cli", "client", "--host", "198.18.2.2", "--port", "20007"]
    (tmp_path / "run.json").write_text(json.dumps({"client_argv": argv}))
    assert remote_path.run_port(tmp_path) == 20007


def _tb_remote_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("tb-remote-*")}


def _new_dirs(before: set[str]) -> set[str]:
    """The run directories made there since ``before`` (one another test left to its
    lease may go meanwhile: not this test's)."""
    return _tb_remote_dirs() - before


def _testbed_pids() -> set[int]:
    pids = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in cmdline and any(b"tb-remote-" in arg for arg in cmdline):
            pids.add(int(proc.name))
    return pids


@pytest.mark.root
@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_a_killed_or_interrupted_harness_leaves_nothing_there(tmp_path: Path, sig: int) -> None:
    before = _tb_remote_dirs()
    experiment = str(ROOT / "experiments" / "connection.toml")
    stderr_path = tmp_path / "harness.stderr"
    with (
        support_sshd.sshd_across(f"rpk{int(sig)}", LINK, tmp_path / "sshd") as (host, up),
        stderr_path.open("wb") as stderr,
    ):
        argv = _testbed_run(host, tmp_path / "out", experiment, "--quick", "--reps", "2")
        # as from a terminal: pytest started as a background job of a non-interactive
        # shell (`.ci/run &`) has SIGINT ignored, which exec keeps and Python then leaves
        # alone; a handler here is reset to the default at exec, where Python makes it
        # KeyboardInterrupt
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            harness = nsexec.popen(
                up.client_ns, argv, stdout=subprocess.DEVNULL, stderr=stderr,
                start_new_session=True,
            )  # fmt: skip
        finally:
            signal.signal(signal.SIGINT, previous)
        deadline = time.monotonic() + 120
        while not _testbed_pids() and time.monotonic() < deadline:  # a server runs there
            time.sleep(0.05)
        assert _testbed_pids(), "no server started there"
        os.killpg(harness.pid, sig) if sig == signal.SIGKILL else harness.send_signal(sig)
        try:
            harness.wait(timeout=120)
        except subprocess.TimeoutExpired:
            harness.send_signal(signal.SIGUSR1)  # harness.cli: every thread's stack
            time.sleep(2)
            os.killpg(harness.pid, signal.SIGKILL)
            harness.wait()
            pytest.fail("the harness did not end: " + stderr_path.read_text()[-4000:])
        if sig == signal.SIGINT:
            assert harness.returncode == 130, stderr_path.read_text()[-2000:]
        deadline = time.monotonic() + 30
        while (_testbed_pids() or _new_dirs(before)) and time.monotonic() < deadline:
            time.sleep(0.1)
    assert _testbed_pids() == set()
    assert _new_dirs(before) == set()

"""The emulator process end to end, on the contract the topology relies on (see __main__)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from netem import names, topology
from netem.emulator.control import EmulatorClient
from netem.emulator.pcap import read_pcap
from netem.linkspec import parse_link
from netem.probe import Echo, ProbeResult, run_probe

pytestmark = [pytest.mark.root, pytest.mark.timeout(90)]

LINK = "em8"


@pytest.fixture
def tun_path() -> Iterator[None]:
    topology.remove_path(LINK)
    try:
        topology.build_tun_path(LINK, mtu_bytes=1500)
        yield
    finally:
        topology.remove_path(LINK)


def start(tmp_path: Path, spec: str, *extra: str) -> tuple[subprocess.Popen, Path]:
    control = tmp_path / f"{LINK}.sock"
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "netem.emulator",
            "--name",
            LINK,
            "--client-ns",
            names.namespace(LINK, "client"),
            "--server-ns",
            names.namespace(LINK, "server"),
            "--spec-json",
            json.dumps(parse_link(spec).to_dict()),
            "--control",
            str(control),
            "--ready-fd",
            str(write_end),
            *extra,
        ],
        pass_fds=(write_end,),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    os.close(write_end)
    with os.fdopen(read_end, "rb") as ready:
        line = ready.readline()
    if line != b"ready\n":
        proc.kill()
        raise AssertionError(f"not ready: {proc.communicate()}")
    return proc, control


def probe(count: int = 50) -> ProbeResult:
    with Echo(names.SERVER_ADDR, netns=names.namespace(LINK, "server")) as echo:
        return run_probe(
            client_ns=names.namespace(LINK, "client"),
            client_addr=names.CLIENT_ADDR,
            server_addr=names.SERVER_ADDR,
            count=count,
            interval_s=0.002,
            drain_s=0.3,
            echo=echo,
        )


@pytest.mark.parametrize("path", ["c", "python"])
@pytest.mark.parametrize("processes", ["1", "2"])
def test_contract_round_trip(tun_path: None, tmp_path: Path, processes: str, path: str) -> None:
    proc, control = start(
        tmp_path, "up.delay=20ms,down.delay=10ms", "--processes", processes, "--path", path
    )
    pid_file = control.with_suffix(".pid")
    try:
        assert pid_file.read_text().strip() == str(proc.pid)
        assert Path(f"/proc/{proc.pid}/comm").read_text().strip() == f"tb-{LINK}-emu"
        assert f"tb-{LINK}-client" in Path(f"/proc/{proc.pid}/cmdline").read_text()
        client = EmulatorClient(control, timeout_s=10)
        before = client.stats()
        assert before.processes == int(processes)
        assert client.request("path")["path"] == path
        client.capture_start(tmp_path / "cap", snaplen=200)
        client.packet_log_start(tmp_path / "log")
        result = probe()
        assert result.received == 50, (result, client.stats() - before)
        assert min(result.rtt_s) >= 0.030
        assert min(result.up_s) >= 0.020 and min(result.down_s) >= 0.010
        capture = client.capture_stop()
        logs = client.packet_log_stop()
        delta = client.stats() - before
        assert delta.up.packets_out == 50 and delta.down.packets_out == 50
        assert delta.up.lateness_samples == 50
        for end in ("client", "server"):
            header, packets = read_pcap(Path(capture[end]["path"]))
            assert header["snaplen"] == 200
            assert len(packets) == capture[end]["records"] == 100
            times = [t for t, _ in packets]
            assert times == sorted(times)
        assert isinstance(capture["offset_ns"], int) and capture["offset_ns"] > 0
        assert logs["up"]["records"] == 50 and logs["down"]["records"] == 50
        client.set_spec(parse_link("delay=1ms,loss=50%,seed=3"))
        lossy = probe(200)
        assert 0 < lossy.received < 200
        assert max(lossy.rtt_s) < 0.030
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    final = json.loads(out.decode().strip().splitlines()[-1])["final_stats"]
    assert final["up"]["packets_out"] >= 50
    assert not control.exists() and not pid_file.exists()


def test_capture_left_running_is_written_at_exit(tun_path: None, tmp_path: Path) -> None:
    proc, control = start(tmp_path, "delay=5ms")
    EmulatorClient(control).capture_start(tmp_path / "cap")
    result = probe(10)
    EmulatorClient(control).shutdown()
    proc.communicate(timeout=20)
    assert proc.returncode == 0
    _, packets = read_pcap(tmp_path / "cap" / "client.pcap")
    assert (result.sent, result.received) == (10, 10), result
    assert len(packets) == result.sent + result.received


def test_bad_spec_and_missing_devices_fail_in_one_line(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "netem.emulator", "--name", LINK, "--client-ns", "tb-em8-x"]
    base += ["--server-ns", "tb-em8-y", "--control", str(tmp_path / "c.sock")]
    bad = subprocess.run(
        [*base, "--spec-json", '{"up": {"loss": 1.5}}'], capture_output=True, timeout=30
    )
    assert bad.returncode == 2
    assert bad.stderr.decode().strip() == "emulator: error: up.loss: must lie in [0, 1), got 1.5"
    early = subprocess.run(
        [*base, "--spec-json", "{}", "--early-us", "nan"], capture_output=True, timeout=30
    )
    assert early.returncode == 2
    assert (
        early.stderr.decode().strip()
        == "emulator: error: early-us: must be finite and >= 0, got nan"
    )
    air = json.dumps(parse_link("air=54mbit/6mbit").to_dict())
    split = subprocess.run(
        [*base, "--spec-json", air, "--processes", "2"], capture_output=True, timeout=30
    )
    assert split.returncode == 2
    assert split.stderr.decode().strip() == (
        "emulator: error: processes: an air= link shares one medium: it runs in one process"
    )
    for extra, message in (
        (["--path", "python", "--offload", "on"], "offload: only the C path takes it (path c)"),
        (["--path", "python", "--coalesce-us", "50"], "coalesce-us: only the C path takes it"),
        (["--coalesce-us", "5000"], "coalesce-us: must lie in [0, 1 ms], got 0.005"),
        (["--offload", "off", "--gro", "on"], "gro: super-packets need the offloads"),
    ):
        refused = subprocess.run([*base, "--spec-json", "{}", *extra], capture_output=True)
        assert refused.returncode == 2
        assert refused.stderr.decode().strip().startswith(f"emulator: error: {message}")
    missing = subprocess.run([*base, "--spec-json", "{}"], capture_output=True, timeout=30)
    assert missing.returncode == 1
    lines = missing.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "namespace" in lines[0]
    assert not (tmp_path / "c.pid").exists()


@pytest.mark.parametrize("processes", ["1", "2"])
def test_both_processes_share_the_traces_origin(
    tun_path: None, tmp_path: Path, processes: str
) -> None:
    (tmp_path / "c").write_text("1\n")
    (tmp_path / "d").write_text("0 5\n10 8\n")
    spec = f"up.rate=trace:{tmp_path / 'c'},down.delay=trace:{tmp_path / 'd'},trace_offset=2s"
    proc, control = start(tmp_path, spec, "--processes", processes)
    try:
        client = EmulatorClient(control, timeout_s=10)
        first = client.trace()
        assert first["up"]["rate_trace"]["path"] == str(tmp_path / "c")
        assert first["down"]["delay_trace"]["path"] == str(tmp_path / "d")
        assert first["up"]["origin_s"] == first["down"]["origin_s"]  # one origin at start
        assert first["up"]["offset_s"] == first["down"]["offset_s"] == 2.0
        again = client.set_spec(parse_link(spec))
        assert again == client.trace()
        assert again["up"]["origin_s"] == again["down"]["origin_s"] > first["up"]["origin_s"]
        result = probe(20)  # packets cross both traced directions
        assert result.received == 20, result
        assert min(result.down_s) >= 0.005
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    assert proc.returncode == 0

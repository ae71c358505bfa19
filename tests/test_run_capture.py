"""The capture of a run: whole packets where the run's bytes are small, the pcapng written."""

from __future__ import annotations

import struct
from pathlib import Path

from harness.run import capture
from netem import pcapng
from tbcore.settings import Settings


def test_auto_keeps_whole_packets_of_small_runs_and_headers_of_large() -> None:
    voice = capture.capture_plan(Settings(workload="asr", warmup_requests=3))
    assert (voice.mode, voice.snaplen_bytes) == ("full", 65535)
    assert voice.run_bytes == 4 * 354_640 and "at most 32 MiB" in voice.reason
    image = capture.capture_plan(Settings(workload="retouch"))
    assert (image.mode, image.snaplen_bytes) == ("headers", 128)
    assert "above 32 MiB" in image.reason
    # the agent: 30 rounds of 0.8 MB, and the ten an outage makes it redo, still whole
    agent = Settings(workload="agent", agent_rounds=30, outage_after_round=9, outage_s=1.0)
    assert capture.exchanges(agent) == 40
    assert capture.capture_plan(agent).mode == "full"
    assert capture.capture_plan(Settings(workload="agent", agent_rounds=50)).mode == "headers"


def test_a_mode_given_is_kept_whatever_the_bytes() -> None:
    assert capture.capture_plan(Settings(workload="retouch", capture="full")).mode == "full"
    assert capture.capture_plan(Settings(workload="asr", capture="headers")).mode == "headers"
    off = capture.capture_plan(Settings(capture="off"))
    assert (off.mode, off.snaplen_bytes) == ("off", 0)


def test_finish_writes_pcapng_with_the_secrets_and_removes_the_pcap(tmp_path: Path) -> None:
    header = struct.pack("<IHHiIII", pcapng.PCAP_MAGIC_NS, 2, 4, 0, 0, 128, 101)
    record = struct.pack("<IIII", 1, 5, 3, 60) + b"\x45ab"
    for end in ("client", "server"):
        (tmp_path / f"{end}.pcap").write_bytes(header + record)
    (tmp_path / "keys.log").write_text(
        "CLIENT_TRAFFIC_SECRET_0 r s\nCLIENT_TRAFFIC_SECRET_0 r s\nSERVER_TRAFFIC_SECRET_0 r t\n"
    )
    written = capture.finish(tmp_path)
    assert written == {
        "secret_lines": 2,
        "files": {"client.pcapng": 1, "server.pcapng": 1},
    }
    assert not (tmp_path / "client.pcap").exists()
    back = pcapng.read_capture(tmp_path / "server.pcapng")
    assert back.secrets.count(b"\n") == 2 and back.packets == [(1_000_000_005, b"\x45ab", 60)]

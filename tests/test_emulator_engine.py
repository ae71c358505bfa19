"""The asyncio edge with datagram socket pairs standing in for the TUN devices.

A SOCK_DGRAM socket pair keeps message boundaries as a TUN fd does (one read, one packet),
so the real pumps, timerfds and event loop run here without root.
"""

from __future__ import annotations

import asyncio
import csv
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import uvloop

from netem.emulator.core import LinkDirection
from netem.emulator.engine import DirectionPump, Engine
from netem.linkspec import LinkSpec, parse_link

pytestmark = pytest.mark.timeout(30)


class Wire:
    """Two fake TUN ends: the test writes at ``client``/``server``, the pumps at the others."""

    def __init__(self) -> None:
        self.client, self.client_dev = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.server, self.server_dev = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        for s in (self.client_dev, self.server_dev, self.client, self.server):
            s.setblocking(False)

    def close(self) -> None:
        for s in (self.client, self.client_dev, self.server, self.server_dev):
            s.close()


@pytest.fixture
def wire() -> Iterator[Wire]:
    w = Wire()
    yield w
    w.close()


def make_engine(spec: LinkSpec, wire: Wire) -> Engine:
    pumps = {
        "up": DirectionPump(
            LinkDirection("up", spec.up, spec.queue_limit_bytes("up")),
            wire.client_dev.fileno(),
            wire.server_dev.fileno(),
        ),
        "down": DirectionPump(
            LinkDirection("down", spec.down, spec.queue_limit_bytes("down")),
            wire.server_dev.fileno(),
            wire.client_dev.fileno(),
        ),
    }
    return Engine(spec, pumps)


def ip_packet(i: int) -> bytes:
    from scapy.layers.inet import IP, UDP

    return bytes(IP(src="198.18.1.2", dst="198.18.2.2", id=i) / UDP(sport=5, dport=6) / b"p")


async def collect(sock: socket.socket, count: int, timeout_s: float) -> list[tuple[float, bytes]]:
    out: list[tuple[float, bytes]] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        try:
            data = sock.recv(65535)
        except BlockingIOError:
            await asyncio.sleep(0.001)
            continue
        out.append((time.monotonic(), data))
    return out


def run(coro_fn: Callable[[], Awaitable[None]]) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(coro_fn())


def test_packets_cross_both_ways_with_the_delay_in_order(wire: Wire) -> None:
    spec = parse_link("up.delay=30ms,down.delay=10ms")
    engine = make_engine(spec, wire)

    async def main() -> None:
        for pump in engine.pumps.values():
            pump.start(asyncio.get_running_loop())
        sent = time.monotonic()
        for i in range(20):
            wire.client.send(ip_packet(i))
        wire.server.send(ip_packet(99))
        got_up = await collect(wire.server, 20, 5.0)
        got_down = await collect(wire.client, 1, 5.0)
        for pump in engine.pumps.values():
            pump.stop()
        assert [p for _, p in got_up] == [ip_packet(i) for i in range(20)]
        assert min(t for t, _ in got_up) - sent >= 0.030
        assert got_down[0][1] == ip_packet(99)
        assert got_down[0][0] - sent >= 0.010

    run(main)
    stats = engine.handle({"cmd": "stats"})
    up = stats["directions"]["up"]
    assert up["packets_in"] == up["packets_out"] == 20
    assert sum(up["lateness_hist"]) == 20
    assert stats["cpu"]["user_s"] > 0


def test_capture_and_log_through_engine_commands(wire: Wire, tmp_path: Path) -> None:
    spec = parse_link("delay=5ms,up.loss=50%")
    engine = make_engine(spec, wire)
    engine.handle({"cmd": "capture_start", "dir": str(tmp_path), "snaplen": 64})
    engine.handle({"cmd": "packet_log_start", "dir": str(tmp_path)})

    async def main() -> None:
        for pump in engine.pumps.values():
            pump.start(asyncio.get_running_loop())
        for i in range(40):
            wire.client.send(ip_packet(i))
        await asyncio.sleep(0.1)
        for pump in engine.pumps.values():
            pump.stop()

    run(main)
    parts = engine.handle({"cmd": "capture_stop"})
    logs = engine.handle({"cmd": "packet_log_stop"})
    delivered = engine.pumps["up"].core.stats.packets_out
    assert 0 < delivered < 40
    assert parts["up"]["client"]["records"] == 40
    assert parts["up"]["server"]["records"] == delivered
    rows = list(csv.DictReader(Path(logs["up"]["path"]).read_text().splitlines()))
    assert len(rows) == 40
    assert sum(r["event"] == "dropped_loss" for r in rows) == 40 - delivered
    # the part files are bare pcap bodies; the process merges them (tested in test_emulator_main)
    assert Path(parts["up"]["client"]["part"]).stat().st_size > 40 * 16


def test_set_spec_and_errors(wire: Wire, tmp_path: Path) -> None:
    from tbcore.errors import SpecError

    engine = make_engine(parse_link("delay=5ms"), wire)
    new = parse_link("delay=1ms,loss=10%,seed=4")
    engine.handle({"cmd": "set_spec", "spec": new.to_dict()})
    assert engine.pumps["up"].core.spec == new.up
    with pytest.raises(SpecError, match=r"up\.loss"):
        engine.handle({"cmd": "set_spec", "spec": {"up": {"loss": 2}}})
    assert engine.pumps["up"].core.spec == new.up  # unchanged after a refused spec
    with pytest.raises(SpecError, match="cmd"):
        engine.handle({"cmd": "capture_stop"})
    with pytest.raises(SpecError, match="cmd"):
        engine.handle({"cmd": "frobnicate"})
    with pytest.raises(SpecError, match="snaplen"):
        engine.handle({"cmd": "capture_start", "dir": str(tmp_path), "snaplen": 0})
    # a refused start leaves no capture half-started
    assert engine.capture_dir is None
    with pytest.raises(SpecError, match="cmd"):
        engine.handle({"cmd": "capture_stop"})
    # a second start would lose the first one's records: refused
    engine.handle({"cmd": "capture_start", "dir": str(tmp_path)})
    with pytest.raises(SpecError, match="capture_stop first"):
        engine.handle({"cmd": "capture_start", "dir": str(tmp_path)})
    engine.handle({"cmd": "packet_log_start", "dir": str(tmp_path)})
    with pytest.raises(SpecError, match="packet_log_stop first"):
        engine.handle({"cmd": "packet_log_start", "dir": str(tmp_path)})


def test_set_spec_restarts_the_traces_at_the_given_time_and_trace_reports_them(
    wire: Wire, tmp_path: Path
) -> None:
    from tbcore.errors import SpecError

    (tmp_path / "c").write_text("1\n")
    engine = make_engine(parse_link("delay=5ms"), wire)
    assert engine.handle({"cmd": "trace"}) == {"trace": {"up": None, "down": None}}
    traced = parse_link(f"up.rate=trace:{tmp_path / 'c'},trace_offset=3s")
    reply = engine.handle({"cmd": "set_spec", "spec": traced.to_dict(), "at_s": 42.0})
    up = reply["trace"]["up"]
    assert (up["origin_s"], up["offset_s"], up["rate_trace"]["path"]) == (
        42.0,
        3.0,
        str(tmp_path / "c"),
    )
    assert reply["trace"]["down"] is None
    assert engine.handle({"cmd": "trace"}) == reply
    # a rate event on the traced direction is refused, for both directions or none
    event = {"kind": "rate", "start_s": 50.0, "end_s": None, "rate_bps": 1e6, "given_s": 50.0}
    with pytest.raises(SpecError, match=r"up\.rate"):
        engine.handle({"cmd": "event", "scheduled": event})
    assert engine.events == [] and engine.pumps["down"].core.timeline is None
    engine.handle({"cmd": "event", "scheduled": {**event, "directions": ["down"]}})
    with pytest.raises(SpecError, match="at_s"):
        engine.handle({"cmd": "set_spec", "spec": traced.to_dict(), "at_s": "soon"})

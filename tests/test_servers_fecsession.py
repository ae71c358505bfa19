"""The sans-I/O FEC endpoint, two of them over an in-memory path with a fake clock."""

from __future__ import annotations

import math
import os
import random
import struct

import pytest
from fecsim import SECRET, SESSION, Path, Sim, bernoulli, gilbert

from proto.fec import wire
from proto.fec.code import RAPTORQ_OVERHEAD_SYMBOLS
from proto.fec.loss import LossReport, LossWindow, Redundancy
from proto.fec.session import FecEndpoint, TransferReceived
from tbcore import fecmath
from tbcore.errors import SpecError

AUDIO = os.urandom(354_640)


def transfer(sim: Sim, data: bytes = AUDIO):
    """Client -> server; returns (sender stats, receiver stats, seconds to decode)."""
    start = sim.now
    count = len(sim.of("server", TransferReceived))
    stats = sim.client.send(data, sim.now)
    sim.run_until(lambda: len(sim.of("server", TransferReceived)) > count)
    received = sim.of("server", TransferReceived)[-1]
    assert received.data == data
    sim.run_until(lambda: stats.done_at is not None)
    return stats, received.stats, received.stats.done_at - start


def test_refuses_to_start_without_a_rate() -> None:
    for cap in (0, None, math.inf):
        with pytest.raises(SpecError, match="fec_rate"):
            FecEndpoint(
                is_client=True,
                session=SESSION,
                secret=SECRET,
                cap_bps=cap,  # type: ignore[arg-type]
                redundancy=Redundancy(),
                now=0.0,
            )


def test_probe_measures_rate_rtt_and_loss() -> None:
    sim = Sim(up=Path(rate_bps=100e6), down=Path(rate_bps=50e6), cap_bps=333e6)
    sim.probe()
    assert sim.client.rate_bps == pytest.approx(100e6, rel=0.02)
    assert sim.server.rate_bps == pytest.approx(50e6, rel=0.02)
    assert sim.client.rtt_s == pytest.approx(0.2, abs=0.005)
    assert sim.server.rtt_s == pytest.approx(0.2, abs=0.005)
    assert sim.client.peer_loss.loss == 0.0


def test_rate_never_above_the_cap() -> None:
    sim = Sim(cap_bps=20e6)
    sim.probe()
    assert sim.client.rate_bps == pytest.approx(20e6)
    _, _, seconds = transfer(sim)
    # k datagrams at no more than 20 Mbit/s (the path itself is 333 Mbit/s), less the
    # token bucket's first burst (2 ms of the rate)
    assert seconds >= 0.1 + 251 * 1500 * 8 / 20e6 - 0.002


def test_adaptive_at_14_percent_decodes_in_one_round_near_the_binomial() -> None:
    sim = Sim(up=Path(drop=bernoulli(0.14, 3)), down=Path(drop=bernoulli(0.14, 4)))
    sim.probe()
    extra = 0
    for _ in range(12):
        sent, got, seconds = transfer(sim)
        extra += sent.extra_rounds
        assert sent.loss_model == "binomial" and got.repair_symbols == sent.repair_symbols
        k = sent.source_symbols
        need = fecmath.repair_symbols(k + RAPTORQ_OVERHEAD_SYMBOLS, sent.loss_estimate, 0.999)
        assert sent.repair_symbols == need + RAPTORQ_OVERHEAD_SYMBOLS
        assert abs(sent.repair_symbols - fecmath.repair_symbols(k, 0.14, 0.999)) <= 8
    assert extra == 0
    assert seconds == pytest.approx(0.1 + (k + sent.repair_symbols) * 1500 * 8 / 333e6, abs=0.002)


def test_no_repair_without_loss_and_fixed_percent_is_fixed() -> None:
    sim = Sim()
    sim.probe()
    sent, _, _ = transfer(sim)
    assert sent.repair_symbols == 0 and sent.loss_model == "none"
    fixed = Sim(redundancy=Redundancy.parse("25.7%"))
    fixed.probe()
    sent, _, _ = transfer(fixed)
    assert sent.repair_symbols == math.ceil(251 * 0.257) and sent.loss_model == "fixed"


def test_a_short_block_asks_for_more_and_completes() -> None:
    sim = Sim(up=Path(drop=bernoulli(0.14, 5)), redundancy=Redundancy.parse("0%"))
    sim.probe()
    sent, got, seconds = transfer(sim)
    assert sent.repair_symbols == 0 and sent.extra_rounds >= 1 and got.decode_failures == 1
    assert seconds > 0.3  # one more round trip at least


def test_bursty_loss_switches_to_the_markov_redundancy() -> None:
    sim = Sim(up=Path(drop=gilbert(0.03, 0.3, 5)))
    sim.probe()
    models = [transfer(sim)[0].loss_model for _ in range(4)]
    assert models[-1] == "markov"


def test_tiny_transfer_survives_loss() -> None:
    sim = Sim(up=Path(drop=bernoulli(0.3, 2)), down=Path(drop=bernoulli(0.3, 7)))
    sim.probe()
    for _ in range(5):
        sent, _, _ = transfer(sim, b"GET /tts")
        assert sent.source_symbols == 1 and sent.repair_symbols >= 3


def test_multi_block_transfer() -> None:
    data = os.urandom(12_000_000)
    sim = Sim(up=Path(drop=bernoulli(0.05, 1)))
    sim.probe()
    sent, got, _ = transfer(sim, data)
    assert sent.blocks == got.blocks == 2


# --- garbage and replay -----------------------------------------------------------------


def test_garbage_replay_and_forgeries_are_dropped_and_counted() -> None:
    sim = Sim()
    sim.probe()
    server = sim.server
    key = server.recv_key
    rng = random.Random(1)
    header = wire.DataHeader(9, 354_640, 0, 0, 300, 0.0)
    symbol = bytes(4) + bytes(wire.SYMBOL_BYTES)
    good = wire.pack_data(key, SESSION, 1_000, header, symbol)
    cases = {
        "short": [b"", b"\x01", os.urandom(20)],
        "unknown_session": [wire.pack_data(key, b"X" * 8, 1_001, header, symbol)],
        "bad_tag": [bytes([1]) + SESSION + os.urandom(rng.randrange(30, 1400))],
        "oversized": [good + bytes(100)],
        "out_of_range": [
            wire.pack_data(key, SESSION, 1_002, wire.DataHeader(9, 354_640, 7, 0, 300, 0), symbol),
            wire.pack_data(key, SESSION, 1_003, header, b"\x00\x00\x10\x00" + bytes(1416)),
        ],
        "malformed": [wire.pack_data(key, SESSION, 1_004, header, bytes(40))],
    }
    for datagram in (d for ds in cases.values() for d in ds):
        assert not server.receive_datagram(datagram, sim.now)
    assert server.receive_datagram(good, sim.now)
    assert not server.receive_datagram(good, sim.now)  # replayed as is
    again = wire.pack_data(key, SESSION, 1_005, header, symbol)  # same symbol, new number
    assert not server.receive_datagram(again, sim.now)
    forged = bytearray(good)
    forged[30] ^= 1
    assert not server.receive_datagram(bytes(forged), sim.now)
    reflected = wire.pack_data(server.send_key, SESSION, 1_006, header, symbol)
    assert not server.receive_datagram(reflected, sim.now)
    dropped = server.dropped
    assert dropped["short"] == 3 and dropped["unknown_session"] == 1
    assert dropped["bad_tag"] == 3 and dropped["oversized"] == 1
    assert dropped["out_of_range"] == 2 and dropped["malformed"] == 1
    assert dropped["replay"] == 1 and dropped["duplicate"] == 1
    # and the session still works
    transfer(sim)


def test_too_many_transfers_and_oversized_transfers_are_refused() -> None:
    sim = Sim()
    server = sim.server
    symbol = bytes(4) + bytes(wire.SYMBOL_BYTES)
    for seq, tid in enumerate(range(10), start=1):
        datagram = wire.pack_data(
            server.recv_key, SESSION, seq, wire.DataHeader(tid, 354_640, 0, 0, 300, 0), symbol
        )
        server.receive_datagram(datagram, 0.0)
    assert server.dropped["too_many_transfers"] == 6
    huge = wire.pack_data(
        server.recv_key, SESSION, 99, wire.DataHeader(50, 2**32 - 1, 0, 0, 300, 0), symbol
    )
    assert not server.receive_datagram(huge, 0.0)
    assert server.dropped["oversized"] == 1


def test_replay_window_and_loss_window() -> None:
    window = wire.ReplayWindow(64)
    assert window.check(5) and not window.check(5) and window.check(3)
    assert window.check(200) and not window.check(100) and window.check(199)
    loss = LossWindow(100)
    for seq in range(1000):
        if seq % 10:
            loss.mark(seq)
    p, after, n = loss.estimate()
    assert n == 100 and p == pytest.approx(0.1) and after == 0.0
    assert not LossReport(p, after, n).bursty
    assert LossReport(0.1, 0.6, 4000).bursty


def test_redundancy_settings() -> None:
    assert str(Redundancy.parse("25.7%")) == "25.7%"
    assert Redundancy.parse("adaptive", 0.99).target == 0.99
    for bad in ("25", "x%", "-3%", "900%"):
        with pytest.raises(SpecError, match="fec_redundancy"):
            Redundancy.parse(bad)
    with pytest.raises(SpecError, match="fec_target"):
        Redundancy.parse("adaptive", 1.0)


def test_report_and_feedback_layouts() -> None:
    key = b"k" * 32
    report = wire.Report(333e6, 40, 48, 0.2)
    body = wire.verify(key, wire.pack_report(key, SESSION, 1, report))
    assert body is not None and wire.unpack_report(body) == report
    fb = wire.Feedback(3, wire.FEEDBACK_NEED, 0.0, 0.14, 0.2, 4096.0, 2.0, 0, 17)
    body = wire.verify(key, wire.pack_feedback(key, SESSION, 2, fb))
    assert body is not None and wire.unpack_feedback(body) == fb
    bad = body[: wire.COMMON_BYTES + 4] + struct.pack("!B", 9) + body[wire.COMMON_BYTES + 5 :]
    with pytest.raises(ValueError):
        wire.unpack_feedback(bad)


def test_source_packets_are_the_encoders_own() -> None:
    import raptorq

    from proto.fec.code import BlockEncoder

    for size in (354_640, 5_000, 100):
        data = os.urandom(size)
        encoder = BlockEncoder(data)
        own = raptorq.Encoder.with_defaults(data, wire.SYMBOL_BYTES).get_encoded_packets(2)
        assert encoder.source_packets() == own[: encoder.k]
        assert encoder.packets(encoder.k, 2) == own[encoder.k :]


def test_lost_tiny_transfers_are_probed_through_bursts() -> None:
    """Fixed redundancy on a bursty path: a one-symbol request whose copies all fall in a
    burst is recovered by tail probes (the transfer always completes)."""
    sim = Sim(
        up=Path(drop=gilbert(0.2, 0.2, 11)),
        down=Path(drop=gilbert(0.2, 0.2, 12)),
        redundancy=Redundancy.parse("0%"),
    )
    sim.probe()
    extra = 0
    for _ in range(10):
        sent, _, seconds = transfer(sim, b"GET /tts")
        extra += sent.extra_rounds
        assert seconds < 5.0
    assert extra > 0  # at 50 % bursty loss some single copies were lost and probed for


def test_rate_follows_a_slower_bottleneck_and_recovers() -> None:
    sim = Sim(up=Path(rate_bps=333e6))
    sim.probe()
    assert sim.client.rate_bps == pytest.approx(333e6, rel=0.02)
    sim.up.rate_bps = 50e6  # a competitor takes most of the path
    for _ in range(2):
        transfer(sim)
    assert sim.client.rate_bps < 80e6 and sim.client.rate_source == "feedback"
    sim.up.rate_bps = 333e6
    for _ in range(12):
        transfer(sim)
    assert sim.client.rate_bps > 300e6

"""``testbed bench link``: the statistics it uses, its command line, and a short real run."""

from __future__ import annotations

import argparse

import pytest

from harness.bench.link import (
    BenchConfig,
    air_probe_model_s,
    air_tcp_model_bps,
    register,
    run_bench,
)
from netem.air import AirSpec


def test_register_adds_bench_link() -> None:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command")
    bench = commands.add_parser("bench").add_subparsers(dest="bench")
    register(commands, bench)
    args = parser.parse_args(["bench", "link", "--quick", "--json", "--backend", "userspace"])
    assert args.quick and args.json and args.backend == "userspace" and callable(args.handler)
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "link", "--backend", "carrier-pigeon"])


def test_air_probe_model_is_one_small_exchange_each_way() -> None:
    # a 92-byte IP probe: 128-byte frame, 5 symbols at 54 Mbit/s = 40 µs, after DIFS 34 µs
    assert air_probe_model_s(AirSpec()) == pytest.approx(2 * 74e-6, abs=1e-12)


def test_air_tcp_model_counts_acks() -> None:
    air = AirSpec()
    # a full segment: 342 µs; a pure ACK: 34 + 36 + 16 + 44 = 130 µs
    assert air_tcp_model_bps(air, 0.0) == pytest.approx(1448 * 8 / 342e-6)
    assert air_tcp_model_bps(air, 0.5) == pytest.approx(1448 * 8 / 407e-6)
    assert air_tcp_model_bps(air, 1.0) < air_tcp_model_bps(air, 0.5)


@pytest.mark.root
@pytest.mark.peers("iperf3")
@pytest.mark.timeout(300)
def test_quick_bench_on_the_userspace_backend() -> None:
    doc = run_bench(backend="userspace", name="em10", config=BenchConfig.quick())
    assert doc["backend"] == "userspace" and doc["quick"]
    assert [r["label"] for r in doc["rtt"]] == ["200 ms, no loss", "200 ms, 14 % loss"]
    for row in doc["rtt"]:
        # the link adds its 200 ms and never takes any away; the timing itself is the
        # benchmark's to report, not this test's to judge
        assert row["min_error_s"] >= 0 and row["median_error_s"] < 0.05
        assert row["emulator_cpu_cores"] is not None and row["lateness_p99_s"] is not None
    probe_rows = [r for r in doc["loss"] if r["source"] == "probe"]
    emulator_rows = [r for r in doc["loss"] if r["source"] == "emulator"]
    assert {r["direction"] for r in probe_rows} == {"up", "down"}
    for mine, theirs in zip(probe_rows, emulator_rows, strict=True):
        # the probe's count of lost packets is what the emulator says it dropped
        assert (mine["lost"], mine["trials"]) == (theirs["lost"], theirs["trials"])
        assert 0.05 < mine["realised"] < 0.25
    assert [(r["proto"], r["configured_bps"]) for r in doc["rate"]] == [
        ("udp", 20e6),
        ("tcp", 20e6),
        ("udp", 100e6),
        ("tcp", 100e6),
    ]
    for row in doc["rate"]:
        # never above the rate, at the receiver or at the link's own output
        assert 0 < row["delivered_bps"] <= row["configured_bps"] * 1.02
        assert 0 < row["link_out_bps"] <= row["configured_bps"] * 1.02
        assert row["receiver_drops"] >= 0
    air = doc["air"]
    # the medium adds its exchanges to the RTT and never takes time away
    assert air["rtt"]["min_error_s"] >= air["rtt"]["air_model_s"]
    # TCP never beats the medium's capacity for the ACKs it carried (2 % for counting)
    assert 0 < air["tcp"]["goodput_bps"] <= air["tcp"]["model_bps"] * 1.02
    assert 0 < air["tcp"]["air_busy_fraction"] <= 1.0 + 1e-6

"""harness.run.remote.pathprobe: the measured path from a probe's counts, its link string, the drift
between two probes, and (root) a measurement over ssh across an emulated path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import support_sshd

from harness.run.remote import pathprobe
from harness.run.remote.pathprobe import MeasuredPath
from netem.linkspec import parse_link
from netem.probe import ProbeResult
from tbcore.errors import SpecError


def path(**changes: object) -> MeasuredPath:
    base = {
        "min_rtt_s": 0.2,
        "rtt_p50_s": 0.201,
        "up_sent": 2000,
        "up_lost": 280,
        "down_sent": 1720,
        "down_lost": 0,
        "up_rate_bps": 300e6,
        "down_rate_bps": 320e6,
    }
    return MeasuredPath(**{**base, **changes})  # type: ignore[arg-type]


def test_the_echo_count_splits_the_loss_by_direction() -> None:
    result = ProbeResult(sent=100, received=72, seqs=list(range(72)), rtt_s=[0.21, 0.2, 0.25])
    assert pathprobe.from_probe(result, echoed=90) == (0.2, 0.21, 100, 10, 90, 18)


def test_the_link_string_is_a_link_the_bounds_read() -> None:
    spec = parse_link(path().link_string())
    assert spec.rtt_s == pytest.approx(0.2)
    assert spec.up.loss == pytest.approx(0.14) and spec.down.loss == 0
    assert spec.up.rate_bps == pytest.approx(300e6) and spec.down.rate_bps == pytest.approx(320e6)
    with pytest.raises(SpecError, match=r"^path: "):
        path(min_rtt_s=None).link_string()


def test_a_path_that_held_does_not_drift() -> None:
    assert pathprobe.drift(path(), path(min_rtt_s=0.205, up_lost=300, up_rate_bps=280e6)) == []


@pytest.mark.parametrize(
    ("after", "says"),
    [
        ({"min_rtt_s": 0.25}, "min RTT 200.0 -> 250.0 ms"),
        ({"up_lost": 0}, "up loss 14.00% -> 0.00%"),
        ({"down_lost": 300}, "down loss 0.00% -> 17.44%"),
        ({"down_rate_bps": 100e6}, "down rate 320.0 -> 100.0 Mbit/s"),
    ],
)
def test_a_path_that_moved_is_named(after: dict[str, float], says: str) -> None:
    moved = pathprobe.drift(path(), path(**after))
    assert len(moved) == 1 and moved[0].startswith(says)


def test_iperf_output() -> None:
    doc = {"end": {"sum_received": {"bits_per_second": 19.1e6}}}
    assert pathprobe.iperf_goodput_bps(json.dumps(doc)) == 19.1e6
    with pytest.raises(SpecError, match=r"^iperf: "):
        pathprobe.iperf_goodput_bps('{"error": "unable to connect"}')


@pytest.mark.root
def test_over_ssh_the_probe_measures_the_emulated_path(tmp_path: Path) -> None:
    link = "rtt=40ms,rate=20mbit,up.loss=10%,seed=3"
    with support_sshd.sshd_across("pth", link, tmp_path / "sshd") as (host, up):  # noqa: SIM117
        with support_sshd.remote_host(host).channel(up.client_ns) as channel:
            hello, _, _ = channel.request("hello")
            assert hello.addr == up.server_addr  # the address the ssh session reached
            measured = pathprobe.measure(
                channel, hello.addr, pathprobe.ProbePlan.quick(), up.client_ns
            )
    assert 0.040 <= measured.min_rtt_s < 0.042
    low, high = pathprobe.wilson_interval(measured.up_lost, measured.up_sent)
    assert low <= 0.10 <= high and measured.down_lost == 0
    # TCP's goodput down (no loss) near the 20 Mbit/s rate; up, below it under 10 % loss
    assert 16e6 < measured.down_rate_bps <= 20e6
    assert 0 < measured.up_rate_bps < measured.down_rate_bps

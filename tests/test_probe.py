"""The UDP probe: round trips with the echo's turnaround removed, loss per direction."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from netem.probe import Echo, ProbeResult, probe_link, quantile, run_probe
from tbcore.errors import SpecError

pytestmark = pytest.mark.timeout(60)


def test_quantile_interpolates() -> None:
    assert quantile([], 0.5) is None
    assert quantile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert quantile([0.0, 10.0], 0.99) == pytest.approx(9.9)


def test_result_losses() -> None:
    r = ProbeResult(sent=100, echoed=80, received=60)
    assert r.up_loss == pytest.approx(0.2)
    assert r.down_loss == pytest.approx(0.25)
    assert r.round_trip_loss == pytest.approx(0.4)
    assert ProbeResult().up_loss is None and ProbeResult().down_loss is None


def test_bad_arguments() -> None:
    for kwargs, field in (
        ({"count": 0}, "count"),
        ({"interval_s": 0.0}, "interval_s"),
        ({"size_bytes": 8}, "size_bytes"),
    ):
        args = {"count": 1, "interval_s": 0.01, **kwargs}
        with pytest.raises(SpecError, match=field):
            run_probe(client_ns=None, client_addr="127.0.0.1", server_addr="127.0.0.1", **args)


def test_loopback_round_trip_without_namespaces() -> None:
    with Echo("127.0.0.1", port=0) as echo:
        port = echo.sock.getsockname()[1]
        result = run_probe(
            client_ns=None,
            client_addr="127.0.0.1",
            server_addr="127.0.0.1",
            port=port,
            count=100,
            interval_s=0.001,
            size_bytes=200,
            drain_s=0.2,
            echo=echo,
        )
    assert result.sent == result.echoed == result.received == 100
    assert result.up_loss == 0 and result.reordered == 0 and result.duplicates == 0
    # kernel timestamps, the echo's turnaround removed: a loopback trip is far below 5 ms,
    # and never above what the application saw
    assert 0 < quantile(result.rtt_s, 0.5) < 5e-3
    assert all(k <= a for k, a in zip(result.rtt_s, result.app_rtt_s, strict=True))
    assert all(u > 0 and d > 0 for u, d in zip(result.up_s, result.down_s, strict=True))


LINK = "em9"


@pytest.fixture
def emulated() -> Iterator[object]:
    from netem.link import Link

    with Link.up(LINK, "up.delay=15ms,down.delay=5ms,up.loss=30%", backend="userspace") as link:
        yield link


@pytest.mark.root
def test_one_way_delays_and_loss_across_the_emulator(emulated) -> None:  # type: ignore[no-untyped-def]
    link = emulated
    before = link.stats()
    result = probe_link(link, count=400, interval_s=0.001, drain_s=0.3)
    delta = link.stats() - before
    assert result.sent - result.echoed == delta.up.dropped_loss > 0
    assert result.echoed == delta.down.packets_out == result.received
    assert min(result.up_s) >= 0.015 and min(result.down_s) >= 0.005
    assert quantile(result.up_s, 0.5) < 0.015 + 5e-3


def test_command_line_send_prints_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from netem.probe import main

    with Echo("127.0.0.1", port=0) as echo:
        port = str(echo.sock.getsockname()[1])
        argv = ["send", "--addr", "127.0.0.1", "--to", "127.0.0.1", "--port", port]
        assert main([*argv, "--count", "20", "--interval-ms", "1", "--rtt-ms", "0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sent"] == out["received"] == 20
    assert 0 < out["rtt_p50_s"] <= out["rtt_p99_s"] and out["rtt_median_error_s"] > 0
    assert main([*argv, "--count", "0"]) == 2
    assert (
        capsys.readouterr().err.strip() == "probe: error: count: must be a whole number >= 1, got 0"
    )


def test_realtime_thread_is_scoped() -> None:
    import os

    from netem.probe import PROBE_FIFO_PRIORITY, realtime_thread

    before = os.sched_getscheduler(0)
    with realtime_thread(False) as on:
        assert on is False and os.sched_getscheduler(0) == before
    with realtime_thread(True) as on:
        if on:  # needs CAP_SYS_NICE
            assert os.sched_getscheduler(0) == os.SCHED_FIFO
            assert os.sched_getparam(0).sched_priority == PROBE_FIFO_PRIORITY
    assert os.sched_getscheduler(0) == before

"""The path to a remote host, measured instead of configured (issue 18).

Before and after each block of runs, a short probe measures the minimum round trip, the
loss of each direction and the delivery rate of each direction, with the code
``testbed bench link`` uses on an emulated path: a paced UDP train to
:class:`netem.probe.Echo` (here started by the remote agent; kernel timestamps, the echo's
turnaround removed; the echo's count splits the loss by direction) and one iperf3 TCP
transfer each way. The bounds of the block's runs use the measured path
(:meth:`MeasuredPath.link_string`); :func:`drift` says whether the path moved between the
probes before and after a block beyond the margins below (the seed's path moved between 0
and 17 % loss over minutes).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from netem import nsexec
from netem.linkspec import DirectionSpec, LinkSpec
from netem.probe import ProbeResult, quantile, run_probe
from tbcore.errors import SpecError
from tbcore.stats import wilson_interval

RTT_MARGIN_FRACTION = 0.10
RTT_MARGIN_S = 2e-3
"""A block's path moved when its minimum round trip changed by more than the larger of
10 % and 2 ms (a route change, not a queue: the minimum is taken over the whole train)."""
RATE_MARGIN_FRACTION = 0.25
"""... or a direction's TCP delivery rate by more than 25 % (one transfer is noisy)."""
IPERF_TIMEOUT_MARGIN_S = 30.0


@dataclass(frozen=True)
class ProbePlan:
    """How long the probe runs: ``count`` datagrams ``interval_s`` apart (a paced train),
    then ``rate_duration_s`` of TCP each way after ``rate_omit_s`` of ramp."""

    count: int = 2000
    interval_s: float = 1e-3
    size_bytes: int = 64
    drain_s: float = 1.0
    rate_duration_s: float = 4.0
    rate_omit_s: float = 1.0

    @classmethod
    def quick(cls) -> ProbePlan:
        return cls(count=500, interval_s=2e-3, drain_s=0.6, rate_duration_s=2.0, rate_omit_s=1.0)


@dataclass(frozen=True)
class MeasuredPath:
    """What the probe saw. Losses are fractions; rates are TCP goodput (bit/s)."""

    min_rtt_s: float | None
    rtt_p50_s: float | None
    up_sent: int
    up_lost: int
    down_sent: int
    down_lost: int
    up_rate_bps: float | None
    down_rate_bps: float | None

    @property
    def up_loss(self) -> float | None:
        return None if self.up_sent == 0 else self.up_lost / self.up_sent

    @property
    def down_loss(self) -> float | None:
        return None if self.down_sent == 0 else self.down_lost / self.down_sent

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "up_loss": self.up_loss, "down_loss": self.down_loss}

    def link_spec(self) -> LinkSpec:
        """The measured path as a LinkSpec (half the minimum round trip each way, the
        measured loss and TCP rate of each direction), for the bounds."""
        if self.min_rtt_s is None:
            raise SpecError("path", "the probe saw no round trip: no path to compute a bound on")
        return LinkSpec(
            up=DirectionSpec(
                delay_s=self.min_rtt_s / 2, loss=self.up_loss or 0.0, rate_bps=self.up_rate_bps
            ),
            down=DirectionSpec(
                delay_s=self.min_rtt_s / 2,
                loss=self.down_loss or 0.0,
                rate_bps=self.down_rate_bps,
            ),
        )

    def link_string(self) -> str:
        """The measured path in the link string's words (for people: the report, the log)."""
        return str(self.link_spec())


def from_probe(
    result: ProbeResult, echoed: int
) -> tuple[float | None, float | None, int, int, int, int]:
    """Round trips and per-direction losses of one train, the echo's own count splitting
    them (``echoed``: the probes the remote echo received)."""
    received = len(set(result.seqs))
    return (
        quantile(result.rtt_s, 0.0),
        quantile(result.rtt_s, 0.5),
        result.sent,
        result.sent - echoed,
        echoed,
        max(0, echoed - received),
    )


def iperf_goodput_bps(output: str) -> float:
    """The receiver's goodput of one ``iperf3 -J`` run."""
    try:
        return float(json.loads(output)["end"]["sum_received"]["bits_per_second"])
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise SpecError("iperf", f"no receiver result in iperf3's output ({err})") from None


def drift(before: MeasuredPath, after: MeasuredPath) -> list[str]:
    """How the path moved between two probes beyond the margins, one line each (empty:
    it held). Loss moved when the two 99 % Wilson intervals do not overlap."""
    moved = []
    if before.min_rtt_s is not None and after.min_rtt_s is not None:
        margin = max(RTT_MARGIN_S, RTT_MARGIN_FRACTION * before.min_rtt_s)
        if abs(after.min_rtt_s - before.min_rtt_s) > margin:
            moved.append(
                f"min RTT {before.min_rtt_s * 1e3:.1f} -> {after.min_rtt_s * 1e3:.1f} ms "
                f"(margin {margin * 1e3:.1f} ms)"
            )
    for name in ("up", "down"):
        lost = (getattr(before, f"{name}_lost"), getattr(after, f"{name}_lost"))
        sent = (getattr(before, f"{name}_sent"), getattr(after, f"{name}_sent"))
        if min(sent) > 0:
            (lo_a, hi_a), (lo_b, hi_b) = (wilson_interval(lost[i], sent[i]) for i in (0, 1))
            if hi_a < lo_b or hi_b < lo_a:
                moved.append(
                    f"{name} loss {lost[0] / sent[0]:.2%} -> {lost[1] / sent[1]:.2%} "
                    "(99 % intervals apart)"
                )
        rates = (getattr(before, f"{name}_rate_bps"), getattr(after, f"{name}_rate_bps"))
        if rates[0] and rates[1] and abs(rates[1] - rates[0]) > RATE_MARGIN_FRACTION * rates[0]:
            moved.append(
                f"{name} rate {rates[0] / 1e6:.1f} -> {rates[1] / 1e6:.1f} Mbit/s "
                f"(margin {RATE_MARGIN_FRACTION:.0%})"
            )
    return moved


def tcp_rate_bps(
    channel: Any, addr: str, plan: ProbePlan, *, reverse: bool, netns: str | None
) -> float:
    """One iperf3 TCP transfer to (``reverse``: from) an iperf3 server the agent starts."""
    reply, _, _ = channel.request("iperf_start", addr=addr, port=0)
    argv = [
        "iperf3", "-c", addr, "-p", str(reply.port), "-t", f"{plan.rate_duration_s:g}",
        "-O", f"{plan.rate_omit_s:g}", "-J", *(["-R"] if reverse else []),
    ]  # fmt: skip
    timeout_s = plan.rate_duration_s + plan.rate_omit_s + IPERF_TIMEOUT_MARGIN_S
    kwargs: dict[str, Any] = {"capture_output": True, "text": True, "timeout": timeout_s}
    done = nsexec.run(netns, argv, **kwargs)  # None: this namespace
    return iperf_goodput_bps(done.stdout)


def measure(
    channel: Any, addr: str, plan: ProbePlan | None = None, netns: str | None = None
) -> MeasuredPath:
    """Probe the path from here (or ``netns``) to ``addr`` on the host behind ``channel``
    (a :class:`harness.run.remote.channel.ControlChannel`)."""
    plan = plan or ProbePlan()
    reply, _, _ = channel.request("echo_start", addr=addr, port=0)
    try:
        train = {k: getattr(plan, k) for k in ("count", "interval_s", "size_bytes", "drain_s")}
        result = run_probe(
            client_ns=netns, client_addr="0.0.0.0", server_addr=addr, port=reply.port, **train
        )
    finally:
        stopped, _, _ = channel.request("echo_stop")
    min_rtt, p50, up_sent, up_lost, down_sent, down_lost = from_probe(result, stopped.count or 0)
    return MeasuredPath(
        min_rtt_s=min_rtt,
        rtt_p50_s=p50,
        up_sent=up_sent,
        up_lost=up_lost,
        down_sent=down_sent,
        down_lost=down_lost,
        up_rate_bps=tcp_rate_bps(channel, addr, plan, reverse=False, netns=netns),
        down_rate_bps=tcp_rate_bps(channel, addr, plan, reverse=True, netns=netns),
    )

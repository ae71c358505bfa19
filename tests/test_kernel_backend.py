"""The kernel backend's qdisc parameters, in pyroute2's units, and what the kernel reads back.

The plan tests run anywhere. The root tests apply the tbf half of a plan on a veth of a
throwaway namespace (tbf exists on every kernel this project meets; netem is tested for real
in the VM guest, tests/test_link.py with TESTBED_BACKEND=netem).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from pyroute2.netlink.rtnl.tcmsg import sched_netem, sched_tbf, tcmsg
from pyroute2.netlink.rtnl.tcmsg.common import tick_in_usec

from netem import names, topology
from netem.backends import kernel
from netem.linkspec import parse_link
from netem.stats import DirectionStats
from tbcore.errors import SpecError

FRAME = 1500 + kernel.ETH_HEADER_BYTES


def test_reference_path_plan() -> None:
    spec = parse_link("rtt=200ms,loss=14%,rate=333mbit")
    plan = kernel.plan_direction(spec, "up")
    assert plan.device == "tb-to-server"
    assert plan.netem.delay_us == 100_000  # pyroute2: whole microseconds
    assert plan.netem.jitter_us == 0
    assert plan.netem.loss_percent == pytest.approx(14.0)  # pyroute2: percent
    assert plan.tbf is not None
    # IP rate 333 Mbit/s = 41.625 MB/s of IP bytes; tbf counts frames (+14 per 1500)
    assert plan.tbf.rate_bytes_per_s == math.ceil(41_625_000 * FRAME / 1500)
    # the drop-tail queue: one BDP (8.325 MB of IP bytes) in frame bytes
    bdp = spec.bdp_bytes("up")
    assert bdp == 8_325_000
    assert plan.tbf.limit_bytes == bdp + math.ceil(bdp / 1500) * 14
    # bucket: 1 ms at the rate, at least two frames
    assert plan.tbf.burst_bytes == math.ceil(plan.tbf.rate_bytes_per_s * 1e-3)
    # netem holds the delay line and the queue: never below one BDP in packets
    assert plan.netem.limit_packets >= spec.queue_limit_packets("up") >= math.ceil(bdp / 1500)


def test_down_direction_sits_on_the_client_side_device() -> None:
    spec = parse_link("rtt=200ms,down.loss=14%,rate=20mbit")
    up, down = kernel.plan_direction(spec, "up"), kernel.plan_direction(spec, "down")
    assert down.device == "tb-to-client"
    assert up.netem.loss_percent == 0.0
    assert down.netem.loss_percent == pytest.approx(14.0)


def test_no_rate_means_no_tbf_and_default_limit_floor() -> None:
    spec = parse_link("rtt=2ms")
    plan = kernel.plan_direction(spec, "up")
    assert plan.tbf is None
    assert plan.netem.limit_packets >= kernel.NETEM_MIN_LIMIT_PACKETS


def test_small_rate_burst_is_two_frames() -> None:
    plan = kernel.plan_direction(parse_link("rtt=100ms,rate=1mbit"), "up")
    assert plan.tbf is not None
    assert plan.tbf.burst_bytes == 2 * FRAME


def test_explicit_queue_in_packets_and_bytes() -> None:
    plan = kernel.plan_direction(parse_link("rtt=100ms,rate=20mbit,queue=100p"), "up")
    assert plan.tbf is not None
    assert plan.tbf.limit_bytes == 100 * FRAME
    plan = kernel.plan_direction(parse_link("rtt=100ms,rate=20mbit,queue=30000b"), "up")
    assert plan.tbf is not None
    assert plan.tbf.limit_bytes == 30000 + 20 * 14


def test_jitter_in_microseconds() -> None:
    plan = kernel.plan_direction(parse_link("rtt=100ms,jitter=2.5ms"), "down")
    assert (plan.netem.delay_us, plan.netem.jitter_us) == (50_000, 2_500)


def test_gemodel_in_kernel_terms() -> None:
    plan = kernel.plan_direction(parse_link("rtt=100ms,down.gemodel=1%/30%/90%/0.5%"), "down")
    ge = plan.netem.gemodel
    assert ge is not None
    u32 = 2**32 - 1
    assert ge.p == round(0.01 * u32) and ge.r == round(0.30 * u32)
    # the kernel loses in the bad state when random > h: h is the delivery probability
    assert abs(ge.h - 0.10 * u32) <= 1
    assert ge.k1 == round(0.005 * u32)
    assert kernel.plan_direction(parse_link("rtt=100ms"), "down").netem.gemodel is None


def test_netem_message_with_gemodel_round_trips() -> None:
    # pyroute2's own classes used first (as a qdisc dump does) must not leak their compiled
    # attribute tables into ours (seen in the VM: TCA_NETEM_LOSS silently dropped)
    _encode_decode("netem", sched_netem.get_parameters({"delay": 1000}))
    plan = kernel.plan_direction(parse_link("rtt=200ms,gemodel=1%/30%"), "up")
    msg = kernel.netem_message(7, plan.netem)
    msg.encode()
    back = kernel.NetemTcmsg(msg.data)
    back.decode()
    assert (back["index"], back["handle"], back["parent"]) == (7, 0x10000, 0xFFFFFFFF)
    assert back.get_attr("TCA_KIND") == "netem"
    opts = back.get_attr("TCA_OPTIONS")
    assert opts["delay"] == round(100_000 * tick_in_usec)
    assert opts["loss"] == 0  # the Gilbert-Elliott model replaces Bernoulli loss
    ge = opts.get_attr("TCA_NETEM_LOSS").get_attr("NETEM_LOSS_GE")
    assert plan.netem.gemodel is not None
    assert {k: ge[k] for k in ("p", "r", "h", "k1")} == {
        "p": plan.netem.gemodel.p,
        "r": plan.netem.gemodel.r,
        "h": plan.netem.gemodel.h,
        "k1": plan.netem.gemodel.k1,
    }


def test_netem_message_without_gemodel_has_no_loss_attribute() -> None:
    plan = kernel.plan_direction(parse_link("rtt=200ms,loss=14%"), "up")
    msg = kernel.netem_message(3, plan.netem)
    msg.encode()
    back = kernel.NetemTcmsg(msg.data)
    back.decode()
    opts = back.get_attr("TCA_OPTIONS")
    assert opts.get_attr("TCA_NETEM_LOSS") is None
    assert opts["loss"] == int((2**32 - 1) * 0.14)


def test_rate_beyond_tbf_field_refused() -> None:
    with pytest.raises(SpecError) as err:
        kernel.plan_direction(parse_link("rtt=10ms,rate=40gbit"), "up")
    assert err.value.field == "up.rate_bps"


def test_air_link_refused_in_one_line_naming_the_userspace_backend() -> None:
    with pytest.raises(SpecError) as err:
        kernel.plan_link(parse_link("rtt=4ms,air=54mbit/6mbit"))
    assert err.value.field == "air"
    assert "userspace" in str(err.value) and "\n" not in str(err.value)


def test_air_link_refused_before_anything_is_built() -> None:
    fields = {"spec": parse_link("air=54mbit/6mbit"), "name": "aix", "extra": {}}
    state = type("State", (), fields)()
    with pytest.raises(SpecError) as err:
        kernel.KernelBackend().up(state)  # type: ignore[arg-type]
    assert err.value.field == "air"


@pytest.mark.parametrize(
    ("key", "text", "field"),
    [("rate", "1\n", "up.rate"), ("down.delay", "0 10\n10 20\n", "down.delay")],
)
def test_a_trace_is_refused_in_one_line_naming_the_userspace_backend(
    tmp_path: Path, key: str, text: str, field: str
) -> None:
    (tmp_path / "t").write_text(text)
    fields = {"spec": parse_link(f"{key}=trace:{tmp_path / 't'}"), "name": "trx", "extra": {}}
    state = type("State", (), fields)()
    with pytest.raises(SpecError) as err:
        kernel.KernelBackend().up(state)  # type: ignore[arg-type]  # before anything is built
    assert err.value.field == field
    assert "userspace" in str(err.value) and "\n" not in str(err.value)


def _encode_decode(kind: str, options: dict) -> dict:
    msg = tcmsg()
    msg["index"] = 1
    msg["handle"] = kernel.NETEM_HANDLE
    msg["parent"] = kernel.TC_H_ROOT
    msg["attrs"] = [["TCA_KIND", kind], ["TCA_OPTIONS", options]]
    msg.encode()
    back = tcmsg(msg.data)
    back.decode()
    return back.get_attr("TCA_OPTIONS")


def test_netem_message_carries_kernel_units() -> None:
    """What pyroute2 puts on the wire: psched ticks for time, a u32 scale for loss."""
    plan = kernel.plan_direction(parse_link("rtt=200ms,loss=14%,jitter=1ms,rate=20mbit"), "up")
    opts = _encode_decode("netem", sched_netem.get_parameters(plan.netem.kwargs()))
    # the kernel turns ticks back into time with PSCHED_TICKS2NS; tc's tick unit from psched
    assert opts["delay"] == round(100_000 * tick_in_usec)
    assert opts["jitter"] == round(1_000 * tick_in_usec)
    assert opts["loss"] == int((2**32 - 1) * 0.14)
    assert opts["limit"] == plan.netem.limit_packets


def test_tbf_message_carries_bytes() -> None:
    plan = kernel.plan_direction(parse_link("rtt=200ms,rate=333mbit"), "up")
    assert plan.tbf is not None
    opts = _encode_decode("tbf", sched_tbf.get_parameters(plan.tbf.kwargs()))
    parms = opts.get_attr("TCA_TBF_PARMS")
    assert parms["rate"] == plan.tbf.rate_bytes_per_s
    assert parms["limit"] == plan.tbf.limit_bytes
    # buffer is the bucket's drain time in ticks: burst / rate seconds
    expected_ticks = plan.tbf.burst_bytes / plan.tbf.rate_bytes_per_s * 1e6 * tick_in_usec
    assert parms["buffer"] == pytest.approx(expected_ticks, rel=1e-3)


def test_direction_stats_split_loss_and_queue_drops() -> None:
    qdiscs = {
        "netem": {
            "packets": 900,
            "bytes": 900 * FRAME,
            "drops": 130,
            "qlen": 5,
            "backlog": 5 * FRAME,
        },
        "tbf": {"packets": 900, "bytes": 900 * FRAME, "drops": 30, "qlen": 2, "backlog": 0},
    }
    d = kernel.direction_stats(qdiscs)
    assert d.packets_out == 900
    assert d.bytes_out == 900 * 1500  # IP bytes, the Ethernet header taken off
    assert d.dropped_queue == 30
    assert d.dropped_loss == 100
    assert d.packets_in == 900 + 130 + 5
    assert d.realised_loss == pytest.approx(100 / (1035 - 30))


def test_direction_stats_without_qdisc_is_empty() -> None:
    assert kernel.direction_stats({}) == DirectionStats()


def test_add_stats() -> None:
    a = DirectionStats(packets_in=3, dropped_loss=1)
    b = DirectionStats(packets_in=4, dropped_queue=2)
    s = kernel.add_stats(a, b)
    assert (s.packets_in, s.dropped_loss, s.dropped_queue) == (7, 1, 2)


@pytest.mark.root
def test_kernel_accepts_the_tbf_plan() -> None:
    """The tbf half of the reference plan, applied for real, reads back as planned."""
    link = "tp90"
    a, b = names.namespace(link, "client"), names.namespace(link, "router")
    plan = kernel.plan_direction(parse_link("rtt=200ms,rate=333mbit"), "up")
    assert plan.tbf is not None
    try:
        topology.create_namespace(a)
        topology.create_namespace(b)
        topology.create_veth(a, "tb-eth", b, "tb-to-server", mtu_bytes=1500)
        with topology.ipr(b) as ip:
            index = ip.link_lookup(ifname="tb-to-server")[0]
            ip.tc(
                "add", "tbf", index, kernel.TBF_HANDLE, parent=kernel.TC_H_ROOT, **plan.tbf.kwargs()
            )
        tbf = kernel.read_qdiscs(b, "tb-to-server")["tbf"]
        assert tbf["options"]["rate"] == plan.tbf.rate_bytes_per_s
        assert tbf["options"]["limit"] == plan.tbf.limit_bytes
    finally:
        topology.delete_namespace(a)
        topology.delete_namespace(b)


@pytest.mark.root
def test_probe_answers_consistently() -> None:
    ok, reason = kernel.probe_netem()
    assert isinstance(ok, bool) and reason
    if not ok:
        assert "ENOENT" in reason or "refused" in reason
    import os

    assert not topology.namespace_exists(f"{names.PREFIX}probe{os.getpid()}")


def test_plan_at_an_outage_and_a_rate_change() -> None:
    from netem.events import Outage, RateChange

    spec = parse_link("rtt=20ms,loss=1%,rate=20mbit")
    events = [
        Outage(at_s=1.0, duration_s=1.0).resolve(0.0),
        RateChange(at_s=3.0, rate_bps=10e6, directions=("up",)).resolve(0.0),
    ]
    before = kernel.plan_at(spec, events, 0.5)
    assert before == kernel.plan_link(spec)
    during = kernel.plan_at(spec, events, 1.5)
    assert {d: p.netem.loss_percent for d, p in during.items()} == {"up": 100.0, "down": 100.0}
    assert during["up"].tbf == before["up"].tbf  # the queue and rate stay
    after = kernel.plan_at(spec, events, 3.5)
    assert after["down"] == before["down"]
    assert after["up"].tbf is not None and before["up"].tbf is not None
    assert after["up"].tbf.rate_bytes_per_s == math.ceil(1_250_000 * FRAME / 1500)
    assert kernel.event_boundaries(events, 0.0) == [1.0, 2.0, 3.0]
    assert kernel.event_boundaries(events, 2.5) == [3.0]

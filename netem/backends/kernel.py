"""The kernel backend: netem (delay, jitter, loss) with a tbf child (rate, drop-tail queue) on
the router namespace's egress in each direction.

Why this shape (``tc qdisc add dev X root handle 1: netem ...; tc qdisc add dev X parent 1:1
handle 10: tbf ...``, the rate recipe of the netem documentation):

- On the router, never on the sender's own interface: TCP small queues keep a sender's qdisc
  nearly empty, so a queue there is not a router's queue.
- The bottleneck queue is tbf's byte-limited FIFO (bfifo), i.e. drop-tail in bytes, exactly
  the LinkSpec's ``queue_limit_bytes`` (one BDP by default). netem's own ``rate`` would share
  one packet-count ``limit`` between the packets still propagating and the ones queued, so
  the queue would change with the packet mix; with a tbf child netem only delays.
- Delay first, then the queue: with a constant delay the departure times are those of
  queue-then-delay. netem's ``limit`` must then hold every packet in propagation: it is sized
  for a line rate of :data:`DELAY_LINE_RATE_BPS` over the delay, plus the queue, and is never
  below one BDP in packets.
- Rates count IP bytes (LinkSpec); a qdisc on a veth counts Ethernet frames (IP + 14 bytes),
  so tbf's rate and limit are scaled by ``(mtu + 14) / mtu``: exact for full-size packets.

pyroute2's units (its sched_netem and sched_tbf plugins): netem ``delay``/``jitter`` in whole
microseconds (converted to psched ticks by the plugin), ``loss`` in percent (0-100), ``limit``
in packets; tbf ``rate`` in bytes/s, ``burst`` and ``limit`` in bytes.

What kernel netem does differently from the userspace emulator: its loss generator has no
seed here (two arms see different patterns), jitter can reorder packets (netem's tfifo sorts
by departure time), and loss happens before the queue.

Gilbert-Elliott loss goes in TCA_NETEM_LOSS/NETEM_LOSS_GE, which pyroute2's netem plugin does
not encode: the netem qdisc is therefore sent as a message of our own (:class:`NetemTcmsg`,
pyroute2's tcmsg with that attribute added), built from the plugin's own parameters.
"""

from __future__ import annotations

import errno
import functools
import math
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST, nla
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl import RTM_NEWQDISC
from pyroute2.netlink.rtnl.tcmsg import sched_netem, tcmsg
from pyroute2.netlink.rtnl.tcmsg.common import tick_in_usec

from netem import capture, names, topology
from netem.backends.base import (
    Backend,
    LinkState,
    commit_edge,
    edge_state,
    topology_of,
)
from netem.events import DirectionTimeline, LinkEvent, ScheduledEvent, end_events
from netem.linkspec import LinkSpec
from netem.stats import CpuStats, DirectionStats, LinkStats, host_cpu_s
from netem.topologyspec import Topology
from tbcore.errors import SpecError

ETH_HEADER_BYTES = 14
"""Ethernet II header (IEEE 802.3): counted by qdiscs on a veth, not by LinkSpec rates."""

NETEM_HANDLE = 0x10000
"""``1:`` netem, the root qdisc."""
NETEM_CHILD_PARENT = 0x10001
"""``1:1`` netem's one class, where its child qdisc attaches."""
TBF_HANDLE = 0x100000
"""``10:`` the tbf child."""
TC_H_ROOT = 0xFFFFFFFF

NETEM_MIN_LIMIT_PACKETS = 1000
"""netem's own default limit (tc-netem(8)); never go below it."""

DELAY_LINE_RATE_BPS = 10e9
"""The fastest arrival rate netem's delay line is sized for (faster than a veth pair carries
on these hosts): packets in propagation = this rate x (delay + jitter) / frame size."""

TBF_BURST_S = 1e-3
"""tbf's bucket: 1 ms at the link's rate, so its timer need not fire per packet at high rates
(tc-tbf(8) asks for at least rate/HZ; with hrtimers 1 ms suffices) ..."""
TBF_MIN_BURST_FRAMES = 2
"""... and at least two full frames, so one packet always fits the bucket."""

U32_MAX = 2**32 - 1


def probability_u32(p: float) -> int:
    """A probability as netem's 32-bit scale (the kernel compares it with a random u32)."""
    return min(U32_MAX, max(0, round(p * U32_MAX)))


@dataclass(frozen=True)
class GemodelParams:
    """netem's ``struct tc_netem_gemodel``, each a u32 probability.

    The kernel (``loss_gilb_ell``) loses a packet in the bad state when a random u32 exceeds
    ``h``, so ``h`` is the probability of *delivering* there (1 - loss_bad); ``k1`` is the loss
    probability in the good state (netem's 1-k); ``p``/``r`` the good->bad/bad->good moves.
    """

    p: int
    r: int
    h: int
    k1: int


@dataclass(frozen=True)
class NetemParams:
    """One netem qdisc, in pyroute2's units."""

    delay_us: int
    jitter_us: int
    loss_percent: float
    limit_packets: int
    gemodel: GemodelParams | None = None

    def kwargs(self) -> dict[str, Any]:
        return {
            "delay": self.delay_us,
            "jitter": self.jitter_us,
            "loss": self.loss_percent,
            "limit": self.limit_packets,
        }


class _OwnNlaTable:
    """pyroute2 compiles a class's nla_map once and marks it in a class attribute that a
    subclass inherits: a subclass made after its parent was used would silently reuse the
    parent's table. These flags, set on the subclass itself, make it compile its own."""

    _nlmsg_base__compiled_nla = False
    _nlmsg_base__t_nla_map = None
    _nlmsg_base__r_nla_map = None


class NetemOptions(_OwnNlaTable, sched_netem.options):
    """pyroute2's netem options with TCA_NETEM_LOSS (linux/pkt_sched.h) encoded."""

    nla_map = (
        ("TCA_NETEM_UNSPEC", "none"),
        ("TCA_NETEM_CORR", "netem_corr"),
        ("TCA_NETEM_DELAY_DIST", "none"),
        ("TCA_NETEM_REORDER", "netem_reorder"),
        ("TCA_NETEM_CORRUPT", "netem_corrupt"),
        ("TCA_NETEM_LOSS", "netem_loss"),
        ("TCA_NETEM_RATE", "netem_rate"),
    )

    class netem_loss(nla):
        nla_map = (
            ("NETEM_LOSS_UNSPEC", "none"),
            ("NETEM_LOSS_GI", "none"),
            ("NETEM_LOSS_GE", "netem_gemodel"),
        )

        class netem_gemodel(nla):
            fields = (("p", "I"), ("r", "I"), ("h", "I"), ("k1", "I"))


class NetemTcmsg(_OwnNlaTable, tcmsg):
    """A tcmsg whose TCA_OPTIONS are always :class:`NetemOptions`."""

    nla_map = tuple(
        (name, "netem_options" if name == "TCA_OPTIONS" else kind) for name, kind in tcmsg.nla_map
    )
    netem_options = NetemOptions


def netem_message(index: int, params: NetemParams) -> NetemTcmsg:
    """The RTM_NEWQDISC body that adds netem as the root qdisc of device ``index``."""
    options = sched_netem.get_parameters(params.kwargs())
    if params.gemodel is not None:
        options["loss"] = 0  # the Gilbert-Elliott model replaces the Bernoulli one
        options["attrs"].append(
            ["TCA_NETEM_LOSS", {"attrs": [["NETEM_LOSS_GE", asdict(params.gemodel)]]}]
        )
    msg = NetemTcmsg()
    msg["family"] = 0
    msg["index"] = index
    msg["handle"] = NETEM_HANDLE
    msg["parent"] = TC_H_ROOT
    msg["attrs"] = [["TCA_KIND", "netem"], ["TCA_OPTIONS", options]]
    return msg


@dataclass(frozen=True)
class TbfParams:
    """One tbf qdisc, in pyroute2's units (Ethernet frame bytes)."""

    rate_bytes_per_s: int
    burst_bytes: int
    limit_bytes: int

    def kwargs(self) -> dict[str, Any]:
        return {"rate": self.rate_bytes_per_s, "burst": self.burst_bytes, "limit": self.limit_bytes}


@dataclass(frozen=True)
class DirectionPlan:
    """The qdiscs of one direction, and the router device they sit on."""

    direction: str
    device: str
    netem: NetemParams
    tbf: TbfParams | None


DIRECTION_DEVICES = {
    "up": topology.ROUTER_DEVICES["server"],
    "down": topology.ROUTER_DEVICES["client"],
}
"""Egress device of each direction on the router: up (client -> server) leaves toward the server."""


def frame_bytes(ip_bytes: float, mtu_bytes: int) -> float:
    """IP bytes scaled to the Ethernet frames a veth qdisc counts (full-size packets)."""
    return ip_bytes * (mtu_bytes + ETH_HEADER_BYTES) / mtu_bytes


def plan_direction(spec: LinkSpec, direction: str) -> DirectionPlan:
    """The netem and tbf parameters that reproduce ``spec``'s ``direction``."""
    d = spec._direction(direction)
    gemodel = None
    if d.gemodel is not None:
        g = d.gemodel
        gemodel = GemodelParams(
            p=probability_u32(g.p),
            r=probability_u32(g.r),
            h=probability_u32(1.0 - g.loss_bad),
            k1=probability_u32(g.loss_good),
        )
    frame = spec.mtu_bytes + ETH_HEADER_BYTES
    tbf: TbfParams | None = None
    queue_frames_bytes = 0
    if d.rate_bps is not None:
        rate = math.ceil(frame_bytes(d.rate_bps / 8.0, spec.mtu_bytes))
        if rate > U32_MAX:
            raise SpecError(f"{direction}.rate_bps", "above 34 Gbit/s: tbf's rate field is 32-bit")
        queue_ip_bytes = spec.queue_limit_bytes(direction)
        assert queue_ip_bytes is not None
        queue_frames_bytes = queue_ip_bytes + math.ceil(queue_ip_bytes / spec.mtu_bytes) * (
            ETH_HEADER_BYTES
        )
        burst = max(TBF_MIN_BURST_FRAMES * frame, math.ceil(rate * TBF_BURST_S))
        tbf = TbfParams(rate_bytes_per_s=rate, burst_bytes=burst, limit_bytes=queue_frames_bytes)
    delay_line_packets = math.ceil(DELAY_LINE_RATE_BPS / 8.0 * (d.delay_s + d.jitter_s) / frame)
    queue_packets = spec.queue_limit_packets(direction) or 0
    limit = max(NETEM_MIN_LIMIT_PACKETS, delay_line_packets + queue_packets)
    delay_us = round(d.delay_s * 1e6)
    jitter_us = round(d.jitter_s * 1e6)
    for field, value_us in (("delay_s", delay_us), ("jitter_s", jitter_us)):
        if value_us * tick_in_usec > U32_MAX:
            raise SpecError(f"{direction}.{field}", "netem's 32-bit field holds at most 274 s")
    netem = NetemParams(
        delay_us=delay_us,
        jitter_us=jitter_us,
        loss_percent=d.loss * 100.0,
        limit_packets=limit,
        gemodel=gemodel,
    )
    return DirectionPlan(direction, DIRECTION_DEVICES[direction], netem, tbf)


def plan_link(spec: LinkSpec) -> dict[str, DirectionPlan]:
    if spec.air is not None:
        raise SpecError(
            "air", "the netem backend has no shared medium; run air= links on --backend userspace"
        )
    for name in ("up", "down"):
        d = spec._direction(name)
        if d.has_trace:
            key = "rate" if d.rate_trace is not None else "delay"
            raise SpecError(
                f"{name}.{key}", "netem cannot replay a trace; run it on --backend userspace"
            )
    return {d: plan_direction(spec, d) for d in ("up", "down")}


OUTAGE_LOSS_PERCENT = 100.0
"""An outage on netem: every packet enqueued is lost (netem decides loss at enqueue, so
packets already in its delay line still arrive: unlike the userspace emulator, which also
drops what would arrive during the outage)."""


def plan_at(spec: LinkSpec, events: list[ScheduledEvent], t: float) -> dict[str, DirectionPlan]:
    """The qdisc plans in force at ``t`` given the scheduled events (sans-I/O)."""
    plans = {}
    for direction in ("up", "down"):
        timeline = DirectionTimeline(direction)
        for event in events:
            timeline.add(event)
        d = spec._direction(direction)
        rate = timeline.rate_at(t, d.rate_bps)
        effective = spec
        if rate != d.rate_bps:
            effective = replace(spec, **{direction: replace(d, rate_bps=rate)})
        plan = plan_direction(effective, direction)
        if timeline.outage_at(t) is not None:
            plan = replace(
                plan, netem=replace(plan.netem, loss_percent=OUTAGE_LOSS_PERCENT, gemodel=None)
            )
        plans[direction] = plan
    return plans


def event_boundaries(events: list[ScheduledEvent], after_s: float) -> list[float]:
    """The times after ``after_s`` at which the plan may change (starts and finite ends)."""
    times = {e.start_s for e in events} | {e.end_s for e in events if math.isfinite(e.end_s)}
    return sorted(t for t in times if t > after_s)


# --- applying a plan ----------------------------------------------------------------------


def _apply(router_ns: str, plan: DirectionPlan) -> None:
    with topology.ipr(router_ns) as ip:
        index = ip.link_lookup(ifname=plan.device)[0]
        # pyroute2 0.9's synchronous nlm_request reads this status key, which IPRoute never
        # sets (KeyError); False makes it return the answers as a tuple, errors raised
        ip.status.setdefault("nlm_generator", False)
        ip.nlm_request(
            netem_message(index, plan.netem),
            RTM_NEWQDISC,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        )
        if plan.tbf is not None:
            ip.tc("add", "tbf", index, TBF_HANDLE, parent=NETEM_CHILD_PARENT, **plan.tbf.kwargs())


def _remove(router_ns: str, device: str) -> None:
    with topology.ipr(router_ns) as ip:
        found = ip.link_lookup(ifname=device)
        if not found:
            return
        try:
            ip.tc("del", index=found[0], handle=NETEM_HANDLE, parent=TC_H_ROOT)
        except NetlinkError as err:
            if err.code not in (errno.ENOENT, errno.EINVAL):
                raise


def read_qdiscs(router_ns: str, device: str) -> dict[str, dict[str, Any]]:
    """The qdiscs on one router device: kind -> options and counters, as the kernel reports."""
    out: dict[str, dict[str, Any]] = {}
    with topology.ipr(router_ns) as ip:
        index = ip.link_lookup(ifname=device)[0]
        for msg in ip.get_qdiscs(index=index):
            kind = msg.get_attr("TCA_KIND")
            stats2 = msg.get_attr("TCA_STATS2")
            basic = stats2.get_attr("TCA_STATS_BASIC") if stats2 else None
            queue = stats2.get_attr("TCA_STATS_QUEUE") if stats2 else None
            options = msg.get_attr("TCA_OPTIONS")
            opts: dict[str, Any] = {}
            if kind == "netem" and options is not None:
                opts = {k: options[k] for k in ("delay", "limit", "loss", "jitter")}
            elif kind == "tbf" and options is not None:
                parms = options.get_attr("TCA_TBF_PARMS")
                if parms is not None:
                    opts = {k: parms[k] for k in ("rate", "limit", "buffer")}
            out[kind] = {
                "handle": msg["handle"],
                "parent": msg["parent"],
                "options": opts,
                "bytes": basic["bytes"] if basic else 0,
                "packets": basic["packets"] if basic else 0,
                "drops": queue["drops"] if queue else 0,
                "qlen": queue["qlen"] if queue else 0,
                "backlog": queue["backlog"] if queue else 0,
            }
    return out


def direction_stats(qdiscs: dict[str, dict[str, Any]]) -> DirectionStats:
    """Counters of one direction from its netem (root) and tbf (child) qdiscs.

    netem counts every drop below it: its loss, its own limit and the child's full queue;
    tbf counts the full-queue drops alone. Byte counts are frames: the Ethernet header
    is taken off so that they are IP bytes, as on the userspace backend.
    """
    netem = qdiscs.get("netem")
    if netem is None:
        return DirectionStats()
    tbf = qdiscs.get("tbf")
    queue_drops = tbf["drops"] if tbf else 0
    out_packets = netem["packets"]
    out_bytes = netem["bytes"] - ETH_HEADER_BYTES * out_packets
    in_flight = netem["qlen"]
    return DirectionStats(
        packets_in=out_packets + netem["drops"] + in_flight,
        bytes_in=out_bytes + max(0, netem["backlog"] - ETH_HEADER_BYTES * in_flight),
        packets_out=out_packets,
        bytes_out=out_bytes,
        dropped_loss=netem["drops"] - queue_drops,
        dropped_queue=queue_drops,
    )


def add_stats(a: DirectionStats, b: DirectionStats) -> DirectionStats:
    values = {k: v + getattr(b, k) for k, v in asdict(a).items() if isinstance(v, int)}
    return DirectionStats(**values)


# --- probing ------------------------------------------------------------------------------


@functools.cache
def probe_netem() -> tuple[bool, str]:
    """Add a netem qdisc on ``lo`` of a throwaway namespace and report the kernel's answer."""
    if os.geteuid() != 0:
        return False, "not root: cannot probe (namespaces need CAP_SYS_ADMIN)"
    ns = f"{names.PREFIX}probe{os.getpid()}"
    try:
        topology.create_namespace(ns)
        with topology.ipr(ns) as ip:
            ip.tc("add", "netem", ip.link_lookup(ifname="lo")[0], NETEM_HANDLE, delay=1000)
        return True, "sch_netem present (a netem qdisc was added in a throwaway namespace)"
    except NetlinkError as err:
        if err.code == errno.ENOENT:
            return False, "no sch_netem: the kernel answered ENOENT (qdisc kind unknown)"
        return False, f"netem qdisc refused: {os.strerror(err.code)}"
    except OSError as err:
        return False, f"cannot probe: {err}"
    finally:
        topology.delete_namespace(ns)


# --- the backend --------------------------------------------------------------------------


_EVENT_TIMERS: dict[str, threading.Timer] = {}
"""Per router namespace (one per edge), the timer of its next event boundary (in the process
that scheduled it)."""
_EVENT_LOCKS: dict[str, threading.Lock] = {}


class KernelBackend(Backend):
    name = "netem"

    @classmethod
    def probe(cls) -> tuple[bool, str]:
        return probe_netem()

    def up(self, state: LinkState) -> None:
        topo = topology_of(state)
        if topo is not None:
            self._up_topology(state, topo)
            return
        plans = plan_link(state.spec)  # refuse what netem cannot do before building anything
        ok, reason = probe_netem()
        if not ok:
            raise SpecError("backend", f"netem: {reason}; use --backend userspace (or auto)")
        topology.build_router_path(state.name, mtu_bytes=state.spec.mtu_bytes)
        assert state.router_ns is not None
        for plan in plans.values():
            _apply(state.router_ns, plan)
        state.extra["plan"] = {d: asdict(p) for d, p in plans.items()}
        state.extra.setdefault("stats_base", {})
        for event in state.extra.get("schedule", []):
            self.schedule_event(state, LinkEvent.from_dict(event))

    def _up_topology(self, state: LinkState, topo: Topology) -> None:
        """A router namespace per edge, each with the one-link qdiscs of its edge's spec."""
        plans = {e.name: plan_link(e.spec) for e in topo.edges}  # refuse before building
        ok, reason = probe_netem()
        if not ok:
            raise SpecError("backend", f"netem: {reason}; use --backend userspace (or auto)")
        routers = topology.build_topology_routers(state.name, topo, mtu_bytes=state.spec.mtu_bytes)
        base_s = time.monotonic()
        for edge in topo.edges:
            view = edge_state(state, edge.name)
            view.router_ns = routers[edge.name]
            for plan in plans[edge.name].values():
                _apply(view.router_ns, plan)
            view.extra["plan"] = {d: asdict(p) for d, p in plans[edge.name].items()}
            view.extra.setdefault("stats_base", {})
            commit_edge(state, edge.name, view)
            for event in edge.events:
                self.schedule_event(view, event, base_s)
        state.router_ns = routers["link"]

    def down(self, state: LinkState) -> None:
        for key in [state.router_ns] + [
            e.get("router_ns") for e in state.extra.get("edges", {}).values()
        ]:
            timer = _EVENT_TIMERS.pop(str(key), None)
            if timer is not None:
                timer.cancel()
        topology.remove_path(state.name)

    def set_spec(self, state: LinkState, spec: LinkSpec) -> dict[str, Any]:
        if spec.mtu_bytes != state.spec.mtu_bytes:
            raise SpecError("mtu_bytes", "the MTU of a link cannot change while it is up")
        self._replace_plans(state, plan_link(spec))
        state.spec = spec
        return {}  # no traces on this backend (plan_link refuses them)

    def _replace_plans(self, state: LinkState, plans: dict[str, DirectionPlan]) -> None:
        assert state.router_ns is not None
        # The qdiscs are replaced; their counters so far are carried in the state.
        base = self._base(state)
        for direction, plan in plans.items():
            now = direction_stats(read_qdiscs(state.router_ns, plan.device))
            base[direction] = add_stats(base[direction], now)
            _remove(state.router_ns, plan.device)
            _apply(state.router_ns, plan)
        state.extra["stats_base"] = {d: asdict(s) for d, s in base.items()}
        state.extra["plan"] = {d: asdict(p) for d, p in plans.items()}

    # --- scheduled events: a timer thread in the calling process applies each boundary ---

    def schedule_event(
        self, state: LinkState, event: LinkEvent, base_s: float | None = None
    ) -> ScheduledEvent:
        events = [ScheduledEvent.from_dict(e) for e in state.extra.get("events", [])]
        scheduled = event.resolve(time.monotonic() if base_s is None else base_s, len(events))
        events.append(scheduled)
        state.extra["events"] = [e.to_dict() for e in events]
        self.apply_events(state)
        return scheduled

    def apply_events(self, state: LinkState) -> None:
        """Put the plans in force now, and arm a timer for the next boundary."""
        key = str(state.router_ns)
        lock = _EVENT_LOCKS.setdefault(key, threading.Lock())
        with lock:
            old = _EVENT_TIMERS.pop(key, None)
            if old is not None:
                old.cancel()
            events = [ScheduledEvent.from_dict(e) for e in state.extra.get("events", [])]
            now = time.monotonic()
            wanted = plan_at(state.spec, events, now)
            current = state.extra.get("plan", {})
            if any(asdict(wanted[d]) != current.get(d) for d in wanted):
                self._replace_plans(state, wanted)
            upcoming = event_boundaries(events, now)
            if upcoming:
                timer = threading.Timer(upcoming[0] - now, self._apply_later, args=(state,))
                _EVENT_TIMERS[key] = timer
                timer.start()

    def end_events(self, state: LinkState) -> int:
        events = [ScheduledEvent.from_dict(e) for e in state.extra.get("events", [])]
        changed = end_events(events, time.monotonic())
        state.extra["events"] = [e.to_dict() for e in events]
        self.apply_events(state)
        return len(changed)

    def _apply_later(self, state: LinkState) -> None:
        """The timer's call: a link taken down meanwhile ends the schedule quietly."""
        if state.router_ns is None or not topology.namespace_exists(state.router_ns):
            return
        try:
            self.apply_events(state)
        except (SpecError, NetlinkError, OSError):
            if topology.namespace_exists(state.router_ns):
                raise

    def events(self, state: LinkState) -> list[ScheduledEvent]:
        return [ScheduledEvent.from_dict(e) for e in state.extra.get("events", [])]

    @staticmethod
    def _base(state: LinkState) -> dict[str, DirectionStats]:
        saved = state.extra.get("stats_base", {})
        return {d: DirectionStats.from_dict(saved.get(d, {})) for d in ("up", "down")}

    def stats(self, state: LinkState) -> LinkStats:
        assert state.router_ns is not None
        base = self._base(state)
        per = {
            d: add_stats(base[d], direction_stats(read_qdiscs(state.router_ns, dev)))
            for d, dev in DIRECTION_DEVICES.items()
        }
        busy, steal, total = host_cpu_s()
        return LinkStats(
            backend=self.name,
            time_s=time.monotonic(),
            up=per["up"],
            down=per["down"],
            cpu=CpuStats(host_busy_s=busy, host_steal_s=steal, host_total_s=total),
            measured=("counters",),
            processes=0,
        )

    @contextmanager
    def _capture(self, state: LinkState, directory: Path, snaplen_bytes: int) -> Iterator[None]:
        points = [
            capture.CapturePoint(state.client_ns, names.DEVICE_IN_NS, directory / "client.pcap"),
            capture.CapturePoint(state.server_ns, names.DEVICE_IN_NS, directory / "server.pcap"),
        ]
        with capture.tcpdump(points, snaplen_bytes=snaplen_bytes):
            yield

    def capture(self, state: LinkState, directory: Path, snaplen_bytes: int) -> Any:
        return self._capture(state, directory, snaplen_bytes)

    def describe(self, state: LinkState) -> dict[str, Any]:
        assert state.router_ns is not None
        return {
            "router_ns": state.router_ns,
            "qdiscs": {
                d: read_qdiscs(state.router_ns, dev) for d, dev in DIRECTION_DEVICES.items()
            },
            "plan": state.extra.get("plan"),
        }

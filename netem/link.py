"""The public API of an emulated path: :class:`Link`.

::

    from netem.link import Link

    with Link.up("demo", "rtt=200ms,loss=14%,rate=333mbit") as link:
        nsexec.run(link.server_ns, ["iperf3", "-s", "-1"], ...)      # server side
        nsexec.run(link.client_ns, ["iperf3", "-c", link.server_addr])
        before = link.stats()
        ...
        print(link.stats() - before)                                   # netem.stats.LinkStats

A link is two network namespaces, ``client_ns`` (address ``client_addr``, 198.18.1.2) and
``server_ns`` (``server_addr``, 198.18.2.2), joined by a backend: ``netem`` (kernel qdiscs on a
router namespace) or ``userspace`` (TUN devices and an emulator process); ``auto`` picks netem
where the kernel has it. Its state lives in ``/run/testbed/links/NAME.json``, so any process
can :meth:`Link.attach` to a link that ``testbed link up`` left running, and ``testbed clean``
can remove it after a crash. Leaving a ``with`` block (normally, by an exception or by
KeyboardInterrupt) takes the link down; so does a failure half-way through :meth:`Link.up`.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, TypeVar, overload

from netem import backends, clean, names, sysctl, topology
from netem.backends.base import LinkState, commit_edge, edge_state, topology_of
from netem.backends.userspace import process_alive
from netem.capture import snaplen_of
from netem.emulator.options import EmulatorOptions
from netem.events import LinkEvent, Outage, ScheduledEvent, parse_event
from netem.linkspec import LinkSpec, resolve_link
from netem.stats import LinkStats
from netem.topologyspec import Topology, parse_topology
from netem.traceclock import TraceClock, clocks_of
from tbcore.errors import SpecError

ENDPOINT_ROLES = ("client", "server")


def _state_path(name: str) -> Path:
    return names.state_file(name)


def _save(state: LinkState) -> None:
    path = _state_path(state.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".json.tmp{os.getpid()}")
    tmp.write_text(json.dumps(state.to_dict(), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _claim(state: LinkState) -> None:
    """Create the state file, failing if it exists: the first thing link up does, so that a
    half-built link is found by ``link down``/``clean`` and no two processes build one name."""
    path = _state_path(state.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise SpecError(
            "name", f"link {state.name!r} exists (testbed link down {state.name})"
        ) from None
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(state.to_dict(), indent=2, sort_keys=True) + "\n")


def _load(name: str) -> LinkState:
    path = _state_path(name)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError("name", f"no link {name!r} is up (see: testbed link list)") from None
    except json.JSONDecodeError as err:
        raise SpecError(
            "name", f"{path}: unreadable state ({err}); testbed clean --name {name}"
        ) from None
    return LinkState.from_dict(data)


def _to_spec(spec: LinkSpec | str) -> LinkSpec:
    if isinstance(spec, LinkSpec):
        return spec
    if isinstance(spec, str):
        return resolve_link(spec)
    raise SpecError("spec", f"expected a LinkSpec or a link string, got {type(spec).__name__}")


def emulator_options(backend: str, options: EmulatorOptions | None) -> EmulatorOptions | None:
    """The emulator options asked for: only the userspace backend has an emulator."""
    if options is None or options.empty:
        return None
    if not isinstance(options, EmulatorOptions):
        raise SpecError("emulator", f"must be EmulatorOptions, got {options!r}")
    if backend != "userspace":
        raise SpecError("emulator", f"the {backend} backend has no userspace emulator")
    return options


def _to_topology(spec: LinkSpec | str | Topology) -> Topology | None:
    """A multi-link topology, or None for one direct link (the original shape)."""
    if isinstance(spec, Topology):
        topo = spec
    elif isinstance(spec, str) and "topology=" in spec:
        topo = parse_topology(spec)
    else:
        return None
    return None if topo.one_link else topo


def check_name_free(name: str) -> None:
    """Refuse (one line) a name that a link holds: state file or namespaces."""
    if _state_path(name).exists() or any(
        topology.namespace_exists(ns) for ns in topology.link_namespaces(name)
    ):
        raise SpecError(
            "name", f"link {name!r} exists (testbed link down {name}, or testbed clean --name)"
        )


def _schedule(events: Sequence[LinkEvent | str] | None, topo: Topology | None) -> list[LinkEvent]:
    """``Link.up``'s events, parsed (a topology carries its edges' events itself)."""
    schedule = [parse_event(e) if isinstance(e, str) else e for e in events or ()]
    for event in schedule:
        if not isinstance(event, LinkEvent):
            raise SpecError("events", f"expected LinkEvent or a string, got {event!r}")
    if topo is not None and schedule:
        raise SpecError("events", "a topology carries its edges' events: Topology.build")
    return schedule


def _new_state(
    name: str,
    backend: str,
    spec: LinkSpec,
    persistent: bool,
    slow_start_after_idle: bool | None,
) -> LinkState:
    """The record of a link about to be built by this process."""
    return LinkState(
        name=name,
        backend=backend,
        spec=spec,
        client_ns=names.namespace(name, "client"),
        server_ns=names.namespace(name, "server"),
        router_ns=names.namespace(name, "router") if backend == "netem" else None,
        client_addr=names.CLIENT_ADDR,
        server_addr=names.SERVER_ADDR,
        created_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
        owner_pid=os.getpid(),
        owner_start_ticks=clean.start_ticks(os.getpid()),
        persistent=persistent,
        slow_start_after_idle=slow_start_after_idle,
        extra={"status": "starting"},
    )


def _bring_up(
    state: LinkState,
    topo: Topology | None,
    slow_start_after_idle: bool | None,
    extra_sysctls: Mapping[str, str],
) -> None:
    """The backend builds the claimed link and the namespaces get their sysctls; on any
    failure (or Ctrl-C) everything built so far goes before the exception propagates."""
    impl = backends.get(state.backend)
    try:
        impl.up(state)
        wanted = sysctl.link_sysctls(state.spec, slow_start_after_idle=slow_start_after_idle)
        wanted.update(extra_sysctls)
        roles = [*ENDPOINT_ROLES, *(["relay"] if topo and "relay" in topo.nodes else [])]
        for role in roles:
            applied = sysctl.apply_link_sysctls(names.namespace(state.name, role), wanted)
            state.sysctls[role] = applied.values
            state.warnings.extend(f"{role}: {w}" for w in applied.warnings)
        state.extra["status"] = "up"
        _save(state)
    except BaseException as err:
        try:
            impl.down(state)
        except Exception as down_err:  # the first failure is raised; this one rides on it
            err.add_note(f"taking the half-made link down also failed: {down_err}")
        clean.clean(state.name, force=True)
        raise


def list_links() -> list[str]:
    """Names of the links with a state file (up, or left by a crash: see ``testbed clean``)."""
    directory = names.STATE_DIR / "links"
    if not directory.is_dir():
        return []
    return sorted(p.stem for p in directory.glob("*.json"))


T = TypeVar("T")


class _StateField(Generic[T]):
    """A read-only attribute of :class:`Link`: the field of the same name of its
    :class:`~netem.backends.LinkState` (so that it follows :meth:`Link.set_spec`)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.field = name

    @overload
    def __get__(self, link: None, owner: type | None = None) -> _StateField[T]: ...
    @overload
    def __get__(self, link: Link, owner: type | None = None) -> T: ...
    def __get__(self, link: Link | None, owner: type | None = None) -> T | _StateField[T]:
        if link is None:
            return self
        return getattr(link._state, self.field)

    def __set__(self, link: Link, value: T) -> None:
        raise AttributeError(f"Link.{self.field} is read-only")


class Link:
    """An emulated path between a client and a server namespace. Make one with :meth:`up`."""

    def __init__(self, state: LinkState) -> None:
        self._state = state
        self._backend = backends.get(state.backend)

    # --- identity -------------------------------------------------------------------------

    name = _StateField[str]()
    spec = _StateField[LinkSpec]()
    """The path now in force (after :meth:`set_spec`, the new one)."""
    backend = _StateField[str]()
    """``netem`` or ``userspace``."""
    client_ns = _StateField[str]()
    server_ns = _StateField[str]()
    router_ns = _StateField[str | None]()
    """The router namespace (kernel backend), None on the userspace backend."""
    client_addr = _StateField[str]()
    server_addr = _StateField[str]()

    @property
    def state(self) -> LinkState:
        return self._state

    @property
    def topology(self) -> Topology:
        """The shape: nodes, edges and their specs (a direct link is one edge, ``link``)."""
        topo = topology_of(self._state)
        if topo is not None:
            return topo
        schedule = tuple(LinkEvent.from_dict(e) for e in self._state.extra.get("schedule", []))
        return Topology.build("direct", link=self.spec, events={"link": list(schedule)})

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.topology.nodes

    def addr(self, node: str, edge: str | None = None) -> str:
        """``node``'s address on ``edge`` (default: its first interface), e.g. the client's
        second path: ``link.addr("client", "link_b")`` (198.18.3.2)."""
        return self.topology.addr(node, edge)

    def ns(self, role: str) -> str:
        """The namespace of ``role``: a node (``client``, ``server``, ``relay``, ``exit``) or,
        on netem, ``router`` (the ``link`` edge's router)."""
        if role in ("relay", "exit") and role in self.nodes:
            return names.namespace(self.name, role)
        value = {"client": self.client_ns, "server": self.server_ns, "router": self.router_ns}.get(
            role
        )
        if value is None:
            raise SpecError("role", f"{role!r}: this {self.backend} link has no such namespace")
        return value

    def __repr__(self) -> str:
        return f"Link({self.name!r}, backend={self.backend!r}, spec={str(self.spec)!r})"

    # --- life cycle -----------------------------------------------------------------------

    @classmethod
    def up(
        cls,
        name: str,
        spec: LinkSpec | str | Topology,
        *,
        backend: str = "auto",
        slow_start_after_idle: bool | None = None,
        sysctls: Mapping[str, str | int] | None = None,
        events: Sequence[LinkEvent | str] | None = None,
        persistent: bool = False,
        emulator: EmulatorOptions | None = None,
    ) -> Link:
        """Build link ``name`` and return it once packets flow (the emulator is ready).

        ``persistent``: left up on purpose after this process exits (``testbed link up``);
        ``testbed clean`` then leaves it alone while its emulator runs.

        ``spec`` is a :class:`LinkSpec` or a string for :func:`netem.linkspec.resolve_link`
        (a preset name and/or ``key=value`` pairs). ``slow_start_after_idle`` sets
        ``net.ipv4.tcp_slow_start_after_idle`` in both endpoints (None: the kernel's 1);
        ``sysctls`` are further ``net.*`` sysctls for both endpoints, applied last (a
        namespace's default ``net.ipv4.tcp_congestion_control`` may only be one the host lists
        in ``tcp_allowed_congestion_control``; a root socket can pick any available algorithm
        with ``TCP_CONGESTION``).
        Refused if a link of that name exists. On any failure (or Ctrl-C) everything built
        so far is removed before the exception propagates.

        ``spec`` may also be a :class:`netem.topologyspec.Topology` or its string form
        (``"topology=relay;near_link=rtt=2ms;link=dc-longhaul-clean"``): every node gets a
        namespace, every edge its own emulator (userspace) or router (netem). ``events`` are
        scheduled on the ``link`` edge from link up on (:mod:`netem.events`; a topology
        carries its edges' events itself).

        ``emulator`` chooses the userspace emulator's packet path and its knobs
        (:class:`netem.emulator.options.EmulatorOptions`); None: the emulator's defaults.
        """
        names.check_link_name(name)
        topo = _to_topology(spec)
        if isinstance(spec, Topology) and topo is None:
            spec = spec.link_spec
        link_spec = topo.link_spec if topo is not None else _to_spec(spec)  # type: ignore[arg-type]
        schedule = _schedule(events, topo)
        # only the userspace emulator has a shared medium and replays traces: auto picks it
        userspace_only = link_spec.air is not None or link_spec.has_trace
        chosen = "userspace" if backend == "auto" and userspace_only else backends.choose(backend)
        emulator = emulator_options(chosen, emulator)
        extra_sysctls = {k: sysctl.to_set(k, v) for k, v in (sysctls or {}).items()}
        for key in extra_sysctls:
            sysctl._path(key)  # refuse a bad name before building anything
        if os.geteuid() != 0:
            raise SpecError("link", "needs root (network namespaces)")
        state = _new_state(name, chosen, link_spec, persistent, slow_start_after_idle)
        if topo is not None:
            state.extra["topology"] = topo.to_dict()
        if schedule:
            state.extra["schedule"] = [e.to_dict() for e in schedule]
        if emulator is not None:
            state.extra["emulator"] = emulator.to_dict()
        with clean.reaped() as reaped:  # what dead runs left goes first
            if reaped:
                state.extra["reaped"] = reaped
            check_name_free(name)
            _claim(state)  # atomically: of two processes racing for one name, one gets it
        _bring_up(state, topo, slow_start_after_idle, extra_sysctls)
        return cls(state)

    @classmethod
    def attach(cls, name: str) -> Link:
        """The link ``name`` made by another process (``testbed link up``)."""
        names.check_link_name(name)
        return cls(_load(name))

    def lost(self) -> str | None:
        """Why this link no longer works (taken down under its user: state file, namespace
        or emulator gone), or None while it is whole."""
        state = self._state
        if not _state_path(state.name).exists():
            return "its state file is gone (removed by testbed clean or link down?)"
        for ns in (state.client_ns, state.server_ns, state.router_ns):
            if ns is not None and not topology.namespace_exists(ns):
                return f"namespace {ns} is gone"
        pid = state.emulator_pid
        if pid is not None and not process_alive(pid, state.emulator_start_ticks):
            return f"its emulator (pid {pid}) exited"
        return None

    def down(self) -> None:
        """Remove the link: the emulator stops (flushing a capture), namespaces go, state goes.

        Idempotent. Whatever the backend leaves (a process still inside a namespace, say)
        is removed by :func:`netem.clean.clean` for this name.
        """
        try:
            self._backend.down(self._state)
        finally:
            clean.clean(self.name, force=True)  # taking it down is the owner's request

    def __enter__(self) -> Link:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.down()

    # --- changes between runs -------------------------------------------------------------

    def _edge(self, edge: str | None) -> LinkState:
        return edge_state(self._state, edge)

    def _commit(self, edge: str | None, view: LinkState) -> None:
        commit_edge(self._state, edge or "link", view)
        _save(self._state)

    def set_spec(self, spec: LinkSpec | str, *, edge: str | None = None) -> dict[str, TraceClock]:
        """Change the path (or one ``edge`` of a topology) in place, between runs: packets in
        flight may see either. A direction's traces restart at their offset now; returns
        the clock of each direction with a trace (``{}`` without one): a run records it."""
        view = self._edge(edge)
        report = self._backend.set_spec(view, _to_spec(spec))
        self._commit(edge, view)
        return clocks_of(report)

    def trace(self, edge: str | None = None) -> dict[str, TraceClock]:
        """Where ``edge``'s traces are (default ``link``): per direction with a trace, the
        CLOCK_MONOTONIC moment they were at their offset (link up or the last
        :meth:`set_spec`) and that offset (netem.traceclock); ``{}`` without a trace."""
        return clocks_of(self._backend.trace(self._edge(edge)))

    def set_sysctls(
        self, values: Mapping[str, str | int], roles: Sequence[str] = ENDPOINT_ROLES
    ) -> dict[str, dict[str, str]]:
        """Set ``net.*`` sysctls in the namespaces of ``roles``.

        Returns the previous values per role, ``{role: {name: value}}``, so that
        ``for role, old in prev.items(): link.set_sysctls(old, roles=(role,))`` restores them.
        """
        checked = {k: sysctl.to_set(k, v) for k, v in values.items()}
        for key in checked:
            sysctl._path(key)
        namespaces = {role: self.ns(role) for role in roles}
        previous: dict[str, dict[str, str]] = {}
        for role, ns in namespaces.items():
            previous[role] = sysctl.set_many(ns, checked)
            if role in self._state.sysctls:
                self._state.sysctls[role].update(sysctl.read_many(ns, checked))
        _save(self._state)
        return previous

    def sysctls(self, role: str, names_: Sequence[str]) -> dict[str, str]:
        """Current values of sysctls in the namespace of ``role``."""
        return sysctl.read_many(self.ns(role), names_)

    def route_metrics(self, role: str) -> dict[str, dict[str, int]]:
        """The metrics of ``role``'s routes as the kernel has them (pyroute2), by
        destination: what :meth:`set_route_metrics` put in force."""
        return {r["dst"]: r["metrics"] for r in topology.routes(self.ns(role))}

    def set_route_metrics(
        self,
        role: str,
        *,
        initcwnd: int | None = None,
        initrwnd: int | None = None,
        quickack: bool | None = None,
    ) -> None:
        """Set route metrics on ``role``'s route to the peer (None: the kernel's default).

        ``initcwnd``/``initrwnd`` in segments (ip-route(8); RFC 6928 initial windows);
        ``quickack`` True: no delayed ACKs on the route (ip-route(8) ``quickack 1``).
        """
        if role not in ENDPOINT_ROLES:
            raise SpecError("role", f"must be client or server, got {role!r}")
        topo = topology_of(self._state)
        if topo is not None:
            for route in topo.routes(role):
                gateway = None
                if self.backend == "netem":
                    gateway = topo.interface(role, route.via_edge).router_addr
                topology.set_route(
                    self.ns(role),
                    route.dst,
                    dev=route.device,
                    gateway=gateway,
                    initcwnd=initcwnd,
                    initrwnd=initrwnd,
                    quickack=quickack,
                )
            return
        ep = topology.endpoints(self.name, self.backend)[role]
        topology.set_route(
            ep.ns,
            ep.peer_net,
            dev=ep.device,
            gateway=ep.gateway,
            initcwnd=initcwnd,
            initrwnd=initrwnd,
            quickack=quickack,
        )

    # --- scheduled events -----------------------------------------------------------------

    def event(
        self, event: LinkEvent | str, *, base_s: float | None = None, edge: str | None = None
    ) -> ScheduledEvent:
        """Schedule an outage or a rate change on this link (:mod:`netem.events`).

        ``event`` is a :class:`LinkEvent` or its string form (``"outage:for=1s"``: an outage
        now, for one second). It starts ``event.at_s`` after ``base_s`` (CLOCK_MONOTONIC;
        default: now), on ``edge`` of a topology (default ``link``). Returns it with absolute
        start and end times.
        """
        if isinstance(event, str):
            event = parse_event(event)
        if not isinstance(event, LinkEvent):
            raise SpecError("event", f"expected a LinkEvent or a string, got {event!r}")
        view = self._edge(edge)
        scheduled = self._backend.schedule_event(view, event, base_s)
        self._commit(edge, view)
        return scheduled

    def outage(
        self, duration_s: float, *, in_s: float = 0.0, edge: str | None = None
    ) -> ScheduledEvent:
        """Both directions of ``edge`` (default ``link``) carry nothing for ``duration_s``,
        starting ``in_s`` from now."""
        return self.event(Outage(at_s=in_s, duration_s=duration_s), edge=edge)

    def end_events(self, edge: str | None = None) -> int:
        """End every event of ``edge`` still running now, cancel those not begun (an outage
        "until told": ``link.outage(3600)``, then ``link.end_events()``); returns how many."""
        view = self._edge(edge)
        ended = self._backend.end_events(view)
        self._commit(edge, view)
        return ended

    def events(self, edge: str | None = None) -> list[ScheduledEvent]:
        """Every event scheduled on ``edge`` (default ``link``) so far: when each began and
        ended, and what it dropped."""
        return self._backend.events(self._edge(edge))

    # --- measurement ----------------------------------------------------------------------

    def stats(self, edge: str | None = None) -> LinkStats:
        """Cumulative counters since link up (of ``edge``, default ``link``); subtract two
        snapshots for one run."""
        return self._backend.stats(self._edge(edge))

    @contextlib.contextmanager
    def capture(self, directory: str | Path, mode: str = "headers") -> Iterator[Path]:
        """Write ``directory/client.pcap`` and ``directory/server.pcap`` during the block.

        Nanosecond timestamps; the kernel backend runs tcpdump on each end's ``tb-eth``,
        the userspace backend has the emulator record what each TUN sent and received, and
        its packet log (``packets-up.csv``, ``packets-down.csv``: each packet's scheduled
        and actual release, netem.emulator.packetlog).
        ``mode``: ``"headers"`` (first 128 bytes of each packet, the default) or ``"full"``
        (whole packets, so that a key log decrypts TLS and QUIC).
        """
        snaplen = snaplen_of(mode)
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        with self._backend.capture(self._state, path, snaplen):
            yield path

    def show(self) -> dict[str, Any]:
        """Everything about the link, JSON-serialisable (``testbed link show --json``)."""
        s = self._state
        info: dict[str, Any] = {
            "name": s.name,
            "backend": s.backend,
            "status": s.extra.get("status", "up"),
            "client_ns": s.client_ns,
            "server_ns": s.server_ns,
            "router_ns": s.router_ns,
            "client_addr": s.client_addr,
            "server_addr": s.server_addr,
            "spec": str(s.spec),
            "spec_dict": s.spec.to_dict(),
            "rtt_s": s.spec.rtt_s,
            "created_at": s.created_at,
            "owner_pid": s.owner_pid,
            "emulator_pid": s.emulator_pid,
            "sysctls": s.sysctls,
            "slow_start_after_idle": s.slow_start_after_idle,
            "warnings": list(s.warnings),
        }
        info["routes"] = {}
        for role in ENDPOINT_ROLES:
            with contextlib.suppress(SpecError, OSError):
                info["routes"][role] = topology.routes(self.ns(role))
        with contextlib.suppress(SpecError, OSError):
            info.update(self._backend.describe(s))
        try:
            info["events"] = [e.to_dict() for e in self.events()]
        except Exception as err:  # shown beside the rest: the link is still described
            info["events_error"] = f"{type(err).__name__}: {err}"
        info.update(self._show_topology())
        return info

    def _show_topology(self) -> dict[str, Any]:
        """Every node (namespace, interfaces, routes and rules as the kernel has them) and
        every edge (spec, emulator or router, events)."""
        topo = self.topology
        described = topo.describe()
        nodes = {}
        for node, planned in described["nodes"].items():
            ns = names.namespace(self.name, node)
            entry: dict[str, Any] = {"ns": ns, **planned}
            with contextlib.suppress(SpecError, OSError):
                entry["kernel_routes"] = topology.routes(ns)
                entry["kernel_rules"] = topology.rules(ns)
            nodes[node] = entry
        edges = {}
        for edge, planned in described["edges"].items():
            view = self._edge(edge)
            entry = {
                **planned,
                "a_ns": view.client_ns,
                "b_ns": view.server_ns,
                "a_addr": view.client_addr,
                "b_addr": view.server_addr,
                "router_ns": view.router_ns,
                "emulator_pid": view.emulator_pid,
                "control": view.control_path,
            }
            try:
                entry["events"] = [e.to_dict() for e in self._backend.events(view)]
            except Exception as err:  # shown beside the rest: the edge is still described
                entry["events_error"] = f"{type(err).__name__}: {err}"
            with contextlib.suppress(SpecError, OSError):
                entry.update({f"backend_{k}": v for k, v in self._backend.describe(view).items()})
            edges[edge] = entry
        return {"topology": topo.kind, "nodes": nodes, "edges": edges}

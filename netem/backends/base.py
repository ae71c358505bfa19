"""What every link backend shares: the record of a link that is up (:class:`LinkState`), the
view of one edge of a topology as a link of its own, and the :class:`Backend` interface with
its registry (netem.backends picks one by name)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from netem import names
from netem.events import LinkEvent, ScheduledEvent
from netem.linkspec import LinkSpec
from netem.stats import LinkStats
from netem.topologyspec import Topology
from tbcore.errors import SpecError, require_schema

STATE_SCHEMA_VERSION = 1
"""Version of the link state file's layout."""

BACKEND_ENV = "TESTBED_BACKEND"
"""Environment variable that restricts tests (and ``auto``) to one backend, e.g. in the VM."""


@dataclass
class LinkState:
    """Everything needed to drive and remove a link, from any process."""

    name: str
    backend: str
    spec: LinkSpec
    client_ns: str
    server_ns: str
    router_ns: str | None
    client_addr: str
    server_addr: str
    created_at: str
    """UTC time of link up, ISO 8601."""
    owner_pid: int
    """The process that ran link up."""
    owner_start_ticks: int | None = None
    """Its start time (/proc/PID/stat field 22): a recycled pid is no owner."""
    persistent: bool = False
    """Left up on purpose (``testbed link up``): in use while its emulator runs, even after
    the owner exited."""
    emulator_pid: int | None = None
    """The userspace emulator's pid (None on the kernel backend)."""
    emulator_start_ticks: int | None = None
    """Its start time (/proc/PID/stat field 22): guards against a recycled pid."""
    control_path: str | None = None
    """The emulator's control socket."""
    log_path: str | None = None
    """The emulator's log."""
    slow_start_after_idle: bool | None = None
    sysctls: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per role, the sysctls in force after link up (read back)."""
    warnings: list[str] = field(default_factory=list)
    """What could not be set as asked (e.g. a read-only net.core sysctl)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Backend-private data (the kernel backend's qdisc plan and stats carried over)."""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["spec"] = self.spec.to_dict()
        data["spec_text"] = str(self.spec)
        data["schema"] = STATE_SCHEMA_VERSION
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LinkState:
        require_schema(data, "schema", STATE_SCHEMA_VERSION, "state")
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        values["spec"] = LinkSpec.from_dict(data["spec"])
        return cls(**values)


def topology_of(state: LinkState) -> Topology | None:
    """The multi-link topology of a link (None: one direct link, the original shape)."""
    data = state.extra.get("topology")
    return None if data is None else Topology.from_dict(data)


def edge_state(state: LinkState, edge: str | None) -> LinkState:
    """A view of one edge of a multi-link topology as a one-link state: its ends as client
    and server, its spec, its emulator or router. Its ``extra`` is the edge's own dict inside
    ``state`` (so what a backend records there persists); :func:`commit_edge` writes the
    rest back. A direct link is its own (and only) edge, ``link``."""
    topo = topology_of(state)
    if topo is None:
        if edge not in (None, "link"):
            raise SpecError("edge", f"{edge!r}: a direct link has one edge, 'link'")
        return state
    e = topo.edge(edge or "link")
    runtime = state.extra.setdefault("edges", {}).setdefault(e.name, {})
    return LinkState(
        name=state.name,
        backend=state.backend,
        spec=e.spec,
        client_ns=names.namespace(state.name, e.a),
        server_ns=names.namespace(state.name, e.b),
        router_ns=runtime.get("router_ns"),
        client_addr=topo.addr(e.a, e.name),
        server_addr=topo.addr(e.b, e.name),
        created_at=state.created_at,
        owner_pid=state.owner_pid,
        emulator_pid=runtime.get("emulator_pid"),
        emulator_start_ticks=runtime.get("emulator_start_ticks"),
        control_path=runtime.get("control_path"),
        log_path=runtime.get("log_path"),
        extra=runtime.setdefault("extra", {}),
    )


def commit_edge(state: LinkState, edge: str, view: LinkState) -> None:
    """Write an edge view's process, router and spec back into the link's state."""
    if view is state:
        return
    runtime = state.extra.setdefault("edges", {}).setdefault(edge, {})
    for key in ("router_ns", "emulator_pid", "emulator_start_ticks", "control_path", "log_path"):
        runtime[key] = getattr(view, key)
    topo = topology_of(state)
    assert topo is not None
    if topo.edge(edge).spec != view.spec:
        data = topo.to_dict()
        for item in data["edges"]:
            if item["name"] == edge:
                item["spec"] = view.spec.to_dict()
                item["spec_text"] = str(view.spec)
        state.extra["topology"] = data
        if edge == "link":
            state.spec = view.spec


class Backend(ABC):
    """What a link backend does. Every method takes the link's :class:`LinkState`."""

    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def probe(cls) -> tuple[bool, str]:
        """Whether this host can run the backend, and a one-line reason."""

    @abstractmethod
    def up(self, state: LinkState) -> None:
        """Build the path (namespaces, devices, shaping) for ``state``; fill its fields.

        On failure it raises and leaves partial state for :meth:`down` (the caller calls it).
        """

    @abstractmethod
    def down(self, state: LinkState) -> None:
        """Remove everything of the link. Idempotent; never raises for what is already gone."""

    @abstractmethod
    def set_spec(self, state: LinkState, spec: LinkSpec) -> dict[str, Any]:
        """Change the emulated path in place (between runs); updates ``state.spec``.
        Returns :meth:`trace`'s report for the new spec (traces restart at their offset)."""

    def trace(self, state: LinkState) -> dict[str, Any]:
        """Per direction (``up``, ``down``) with a trace, its clock and files (the userspace
        emulator's ``trace`` command, netem.traceclock); ``{}`` on a backend without
        traces (the kernel backend refuses them)."""
        del state
        return {}

    @abstractmethod
    def stats(self, state: LinkState) -> LinkStats:
        """Cumulative counters since link up."""

    @abstractmethod
    def capture(
        self, state: LinkState, directory: Path, snaplen_bytes: int
    ) -> AbstractContextManager[None]:
        """Write ``directory/client.pcap`` and ``directory/server.pcap`` while in the block,
        each packet cut to ``snaplen_bytes``."""

    @abstractmethod
    def schedule_event(
        self, state: LinkState, event: LinkEvent, base_s: float | None = None
    ) -> ScheduledEvent:
        """Schedule an outage or rate change ``event.at_s`` after ``base_s`` (default now)."""

    @abstractmethod
    def end_events(self, state: LinkState) -> int:
        """End every event still running (cancel those not begun); returns how many."""

    @abstractmethod
    def events(self, state: LinkState) -> list[ScheduledEvent]:
        """Every event scheduled on the link, with its absolute times (and drops, if known)."""

    def describe(self, state: LinkState) -> dict[str, Any]:
        """Backend-specific facts for ``link show`` (qdiscs, emulator...)."""
        return {}

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
from typing import Any

from netem import backends, clean, names, sysctl, topology
from netem.backends import LinkState
from netem.linkspec import LinkSpec, resolve_link
from netem.stats import LinkStats
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


def list_links() -> list[str]:
    """Names of the links with a state file (up, or left by a crash: see ``testbed clean``)."""
    directory = names.STATE_DIR / "links"
    if not directory.is_dir():
        return []
    return sorted(p.stem for p in directory.glob("*.json"))


class Link:
    """An emulated path between a client and a server namespace. Make one with :meth:`up`."""

    def __init__(self, state: LinkState) -> None:
        self._state = state
        self._backend = backends.get(state.backend)

    # --- identity -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._state.name

    @property
    def spec(self) -> LinkSpec:
        """The path now in force (after :meth:`set_spec`, the new one)."""
        return self._state.spec

    @property
    def backend(self) -> str:
        """``netem`` or ``userspace``."""
        return self._state.backend

    @property
    def client_ns(self) -> str:
        return self._state.client_ns

    @property
    def server_ns(self) -> str:
        return self._state.server_ns

    @property
    def router_ns(self) -> str | None:
        """The router namespace (kernel backend), None on the userspace backend."""
        return self._state.router_ns

    @property
    def client_addr(self) -> str:
        return self._state.client_addr

    @property
    def server_addr(self) -> str:
        return self._state.server_addr

    @property
    def state(self) -> LinkState:
        return self._state

    def ns(self, role: str) -> str:
        """The namespace of ``role`` (``client``, ``server`` or, on netem, ``router``)."""
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
        spec: LinkSpec | str,
        *,
        backend: str = "auto",
        slow_start_after_idle: bool | None = None,
        sysctls: Mapping[str, str | int] | None = None,
    ) -> Link:
        """Build link ``name`` and return it once packets flow (the emulator is ready).

        ``spec`` is a :class:`LinkSpec` or a string for :func:`netem.linkspec.resolve_link`
        (a preset name and/or ``key=value`` pairs). ``slow_start_after_idle`` sets
        ``net.ipv4.tcp_slow_start_after_idle`` in both endpoints (None: the kernel's 1);
        ``sysctls`` are further ``net.*`` sysctls for both endpoints, applied last (a
        namespace's default ``net.ipv4.tcp_congestion_control`` may only be one the host lists
        in ``tcp_allowed_congestion_control``; a root socket can pick any available algorithm
        with ``TCP_CONGESTION``).
        Refused if a link of that name exists. On any failure (or Ctrl-C) everything built
        so far is removed before the exception propagates.
        """
        names.check_link_name(name)
        link_spec = _to_spec(spec)
        chosen = backends.choose(backend)
        extra_sysctls = {k: sysctl.normalise(v) for k, v in (sysctls or {}).items()}
        for key in extra_sysctls:
            sysctl._path(key)  # refuse a bad name before building anything
        if os.geteuid() != 0:
            raise SpecError("link", "needs root (network namespaces)")
        if _state_path(name).exists() or any(
            topology.namespace_exists(ns) for ns in topology.link_namespaces(name)
        ):
            raise SpecError(
                "name", f"link {name!r} exists (testbed link down {name}, or testbed clean --name)"
            )
        state = LinkState(
            name=name,
            backend=chosen,
            spec=link_spec,
            client_ns=names.namespace(name, "client"),
            server_ns=names.namespace(name, "server"),
            router_ns=names.namespace(name, "router") if chosen == "netem" else None,
            client_addr=names.CLIENT_ADDR,
            server_addr=names.SERVER_ADDR,
            created_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
            owner_pid=os.getpid(),
            slow_start_after_idle=slow_start_after_idle,
            extra={"status": "starting"},
        )
        impl = backends.get(chosen)
        _claim(state)  # atomically: of two processes racing for one name, one gets it
        try:
            impl.up(state)
            wanted = sysctl.link_sysctls(link_spec, slow_start_after_idle=slow_start_after_idle)
            wanted.update(extra_sysctls)
            for role in ENDPOINT_ROLES:
                applied = sysctl.apply_link_sysctls(getattr(state, f"{role}_ns"), wanted)
                state.sysctls[role] = applied.values
                state.warnings.extend(f"{role}: {w}" for w in applied.warnings)
            state.extra["status"] = "up"
            _save(state)
        except BaseException:
            with contextlib.suppress(Exception):
                impl.down(state)
            clean.clean(name)
            raise
        return cls(state)

    @classmethod
    def attach(cls, name: str) -> Link:
        """The link ``name`` made by another process (``testbed link up``)."""
        names.check_link_name(name)
        return cls(_load(name))

    def down(self) -> None:
        """Remove the link: the emulator stops (flushing a capture), namespaces go, state goes.

        Idempotent. Whatever the backend leaves (a process still inside a namespace, say)
        is removed by :func:`netem.clean.clean` for this name.
        """
        try:
            self._backend.down(self._state)
        finally:
            clean.clean(self.name)

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

    def set_spec(self, spec: LinkSpec | str) -> None:
        """Change the path in place (between runs: packets in flight may see either)."""
        self._backend.set_spec(self._state, _to_spec(spec))
        _save(self._state)

    def set_sysctls(
        self, values: Mapping[str, str | int], roles: Sequence[str] = ENDPOINT_ROLES
    ) -> dict[str, dict[str, str]]:
        """Set ``net.*`` sysctls in the namespaces of ``roles``.

        Returns the previous values per role, ``{role: {name: value}}``, so that
        ``for role, old in prev.items(): link.set_sysctls(old, roles=(role,))`` restores them.
        """
        checked = {k: sysctl.normalise(v) for k, v in values.items()}
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

    def set_route_metrics(
        self, role: str, *, initcwnd: int | None = None, initrwnd: int | None = None
    ) -> None:
        """Set route metrics on ``role``'s route to the peer (None: the kernel's default).

        ``initcwnd``/``initrwnd`` in segments (ip-route(8); RFC 6928 initial windows).
        """
        if role not in ENDPOINT_ROLES:
            raise SpecError("role", f"must be client or server, got {role!r}")
        ep = topology.endpoints(self.name, self.backend)[role]
        topology.set_route(
            ep.ns,
            ep.peer_net,
            dev=ep.device,
            gateway=ep.gateway,
            initcwnd=initcwnd,
            initrwnd=initrwnd,
        )

    # --- measurement ----------------------------------------------------------------------

    def stats(self) -> LinkStats:
        """Cumulative counters since link up; subtract two snapshots for one run."""
        return self._backend.stats(self._state)

    @contextlib.contextmanager
    def capture(self, directory: str | Path) -> Iterator[Path]:
        """Write ``directory/client.pcap`` and ``directory/server.pcap`` during the block.

        Nanosecond timestamps; the kernel backend runs tcpdump on each end's ``tb-eth``,
        the userspace backend has the emulator record what each TUN sent and received, and
        its packet log (``packets-up.csv``, ``packets-down.csv``: each packet's scheduled
        and actual release, netem.emulator.packetlog).
        """
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        with self._backend.capture(self._state, path):
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
        return info

"""What each shape of path (tbcore.kinds.TOPOLOGIES) does in a run, by name: where the
client sends its requests, what runs between the ends (the relay), which flags the client
and the server take beyond the settings document.

A new shape is one :class:`TopologyRun` here plus its :class:`tbcore.kinds.TopologyKind`
(the spec stage's checks) and its edges in :mod:`netem.topologyspec`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.run.stacks import start_in_namespace, testbed_argv, write_settings
from harness.store.files import RELAY_LOG
from tbcore import kinds
from tbcore.processes import stop_process
from tbcore.registry import Registry
from tbcore.settings import Settings

RELAY_STOP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Target:
    """Where the run's client sends its requests, and the flags it takes for that."""

    host: str
    port: int
    client_args: tuple[str, ...] = ()


Middle = Callable[[Any, Settings, Path, int], contextlib.AbstractContextManager[None]]
"""(link, settings, run_dir, port) -> a context in which what runs between the client and the
server (the relay) is up; the server is up before it is entered."""


@contextlib.contextmanager
def _nothing(link: Any, settings: Settings, run_dir: Path, port: int) -> Iterator[None]:
    del link, settings, run_dir, port
    yield


@dataclass(frozen=True)
class TopologyRun:
    """One shape's part of a run."""

    name: str
    target: Callable[[Any, Settings, int], Target]
    """(link, settings, port) -> where the client sends its requests."""
    middle: Middle = _nothing


RUNS: Registry[TopologyRun] = Registry("topology", "{name!r} has no run of its own ({names})")
register = RUNS.register
topology_run = RUNS.lookup


def _straight(link: Any, settings: Settings, port: int) -> Target:
    """The client talks to the server's address; nothing runs in between."""
    del settings
    return Target(link.server_addr, port)


def relay_argv(settings: Settings, link: Any, run_dir: Path, port: int) -> list[str]:
    """``testbed relay`` of a run: on the relay's near-hop address, the run's port, forwarding
    to the server over its warm long haul; the run's settings document (cc, quic_cc, windows)."""
    document = write_settings(run_dir, "relay-settings.json", settings)
    return [
        *testbed_argv(), "relay",
        "--bind", link.addr("relay", "near_link"), "--port", str(port),
        "--upstream", f"{link.server_addr}:{port}",
        "--protocols", settings.protocol,
        "--log", str(run_dir / RELAY_LOG),
        "--settings", str(document),
    ]  # fmt: skip


def _relay_target(link: Any, settings: Settings, port: int) -> Target:
    """``route = relay``: the relay's near-hop address; ``direct``: the server's, across the
    same edges (the relay's node only routes)."""
    if settings.route == "direct":
        return Target(link.server_addr, port)
    return Target(link.addr("relay", "near_link"), port)


@contextlib.contextmanager
def _relay(link: Any, settings: Settings, run_dir: Path, port: int) -> Iterator[None]:
    """``route = relay``: a relay in its namespace, its long haul warm before the client
    starts (it says ``listening relay`` then), stopped after the run."""
    if settings.route == "direct":
        yield
        return
    relay = start_in_namespace(
        link.ns("relay"),
        relay_argv(settings, link, run_dir, port),
        run_dir / "relay.stderr",
        "listening relay",
    )
    try:
        yield
    finally:
        stop_process(relay, RELAY_STOP_TIMEOUT_S)


def _two_paths(link: Any, settings: Settings, port: int) -> Target:
    """The upload client sends from its address on each path (clients.multipath); any other
    workload is one connection from the first path's address, which under Multipath TCP the
    kernel's path manager extends over the second (netem.topology.configure_mptcp)."""
    if kinds.workload(settings.workload).records != "transfer":
        return Target(link.server_addr, port, ())
    sources = f"{link.addr('client', 'link')},{link.addr('client', 'link_b')}"
    return Target(link.server_addr, port, ("--sources", sources))


register(TopologyRun("direct", _straight))
register(TopologyRun("relay", _relay_target, _relay))
register(TopologyRun("dual", _two_paths))

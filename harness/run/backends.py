"""What an experiment's runs cross, by backend: emulated links (the userspace emulator or
kernel netem, one link per shape of path the levels use) or a real path to a remote host.

The runner asks a :class:`RunPaths` for the link of a level (:meth:`RunPaths.link_for`),
the path a run crosses (:meth:`RunPaths.path_of`: the level's topology with the run's
seeds, or what the probe measured), the server process and the processes to watch; it
never asks which backend it has. :func:`open_paths` picks one by name from
:data:`BACKENDS`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.run.lock import exclusive_run
from harness.run.stacks import start_server
from harness.spec.experiment import ExperimentSpec, Level
from netem.topologyspec import Edge, Topology
from tbcore.errors import SpecError

if TYPE_CHECKING:
    from harness.run.remote.path import RemotePath, RemoteRun

Log = Callable[[str], None]


def shape_of(topology: Topology) -> str:
    """Levels whose paths have the same nodes and edges share one link (their specs are set
    per run); another shape needs a link of its own."""
    return f"{topology.kind}:{','.join(topology.edge_names)}"


def seeded(topology: Topology, seed: int) -> Topology:
    """``topology`` with every edge's loss and jitter generators seeded with ``seed`` (the
    same per block, so that paired arms see the same patterns)."""
    edges = tuple(dataclasses.replace(e, spec=e.spec.with_seed(seed)) for e in topology.edges)
    return dataclasses.replace(topology, edges=edges)


class RunPaths(ABC):
    """The paths an experiment's runs cross while it runs."""

    backend: str
    """``userspace`` or ``netem`` (emulated), or ``real``."""
    counts: bool = True
    """Whether the path keeps counters of what it carried (an emulator does)."""

    @abstractmethod
    def link_for(self, level: Level) -> Any:
        """What a run of ``level`` sets up and measures through (a ``netem.link.Link``)."""

    @abstractmethod
    def path_of(self, level: Level, link_seed: int) -> Topology:
        """The path a run of ``level`` crosses, as its bound and row will say."""

    @abstractmethod
    def start_server(self, link: Any, argv: list[str], run_dir: Path) -> Any:
        """The run's server, once it listens (a ``subprocess.Popen`` or its stand-in)."""

    def emulator_pids(self, link: Any) -> list[int]:
        """Processes of the path whose CPU a run watches (the emulators)."""
        return []

    def probe(self, block: int | None) -> None:
        """Called before each block's runs and after the last (``None``): a real path is
        measured then; an emulated one is what it was set to."""
        del block

    def lost(self) -> str | None:
        """Why a path was taken down under the runs, None while every one is up."""
        return None

    @property
    @abstractmethod
    def primary(self) -> Any:
        """The first level's link: what the environment record describes."""


class EmulatedPaths(RunPaths):
    """One emulated link per shape of path (netem.link.Link: userspace or netem)."""

    def __init__(self, links: dict[str, Any], backend: str) -> None:
        self.links = links
        self.backend = backend

    def link_for(self, level: Level) -> Any:
        return self.links[shape_of(level.topology)]

    def path_of(self, level: Level, link_seed: int) -> Topology:
        return seeded(level.topology, link_seed)

    def start_server(self, link: Any, argv: list[str], run_dir: Path) -> Any:
        return start_server(link, argv, run_dir)

    def emulator_pids(self, link: Any) -> list[int]:
        state = link.state
        pids = [state.emulator_pid] if isinstance(state.emulator_pid, int) else []
        for edge in state.extra.get("edges", {}).values():
            pid = edge.get("emulator_pid") if isinstance(edge, dict) else None
            if isinstance(pid, int) and pid not in pids:
                pids.append(pid)
        return pids

    def lost(self) -> str | None:
        for link in self.links.values():
            lost = link.lost()
            if lost is not None:
                return f"link {link.name}: {lost}"
        return None

    @property
    def primary(self) -> Any:
        return next(iter(self.links.values()))


class RealPath(RunPaths):
    """A server on another host over ssh, across the real path (harness.run.remote.path): the
    path is measured before each block, never set."""

    backend = "real"
    counts = False

    def __init__(self, path: RemotePath, prober: Callable[[int | None], None]) -> None:
        self.path = path
        self.prober = prober

    def link_for(self, level: Level) -> Any:
        return self.path

    def path_of(self, level: Level, link_seed: int) -> Topology:
        measured = self.path.measured_spec
        return Topology("direct", (Edge("link", "client", "server", measured),))

    def start_server(self, link: Any, argv: list[str], run_dir: Path) -> Any:
        return self.path.start_server(argv, run_dir)

    def probe(self, block: int | None) -> None:
        self.prober(block)

    def lost(self) -> str | None:
        return self.path.lost()

    @property
    def primary(self) -> Any:
        return self.path


def link_names(name: str, count: int) -> list[str]:
    """The run's link name, then one more per further shape (netem.names: at most 10
    characters, so the name is cut to make room for the digit)."""
    return [name if i == 0 else f"{name[:9]}{i}" for i in range(count)]


@contextlib.contextmanager
def emulated(
    spec: ExperimentSpec, levels: Sequence[str], name: str, backend: str, log: Log
) -> Iterator[RunPaths]:
    """A link for each shape of path among ``levels`` (the first level's specs to start
    with), brought up in the levels' order, all down on the way out."""
    try:
        from netem.link import Link
    except ImportError as err:
        raise SpecError("backend", f"the emulated path is not available: {err}") from None

    shapes: dict[str, Topology] = {}
    for level in levels:
        topology = spec.level(level).topology
        shapes.setdefault(shape_of(topology), topology)
    with contextlib.ExitStack() as stack:
        links: dict[str, Any] = {}
        # starting emulators and namespaces: not beside a run (beside sharing ones: shared)
        with exclusive_run(log, shared=spec.shares_host):
            for (shape, topology), link_name in zip(
                shapes.items(), link_names(name, len(shapes)), strict=True
            ):
                path = topology.link_spec if topology.one_link else topology
                links[shape] = stack.enter_context(Link.up(link_name, path, backend=backend))
        yield EmulatedPaths(links, next(iter(links.values())).backend)


@contextlib.contextmanager
def real(remote: RemoteRun, result_dir: Path, log: Log) -> Iterator[RunPaths]:
    """The remote host's path for the experiment (harness.run.remote.path)."""
    with remote.open(log) as path:
        yield RealPath(path, remote.prober(path, result_dir))


def open_paths(
    spec: ExperimentSpec,
    levels: Sequence[str],
    *,
    name: str,
    backend: str,
    result_dir: Path,
    remote: RemoteRun | None,
    log: Log,
) -> contextlib.AbstractContextManager[RunPaths]:
    """The paths of the runs ``levels`` will make: the remote host's when ``remote`` is
    given, else emulated links of ``backend``."""
    if remote is not None:
        return real(remote, result_dir, log)
    return emulated(spec, levels, name, backend, log)

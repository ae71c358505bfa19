"""One progress display across a cluster: blocks done in all and per host (rich; plain
lines when stderr is not a terminal)."""

from __future__ import annotations

from collections import Counter
from typing import Any


class BlockProgress:
    """The client's view of a cluster run: one bar of blocks, the count per host beside it,
    and a line per finished or failed block above it."""

    def __init__(self, label: str, console: Any = None) -> None:
        from rich.console import Console

        self.console = console or Console(stderr=True)
        self.label = label
        self.per_host: Counter[str] = Counter()
        self.progress: Any = None
        self.task: Any = None

    def note(self, message: str) -> None:
        console = self.progress.console if self.progress is not None else self.console
        console.print(f"  {message}", markup=False, highlight=False)

    def start(self, total: int, done: int, where: str) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.console.print(
            f"[bold]{self.label}[/]: {total - done} of {total} blocks to make -> {where}"
        )
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("elapsed"),
            TimeElapsedColumn(),
            console=self.console,
        )
        self.progress.start()
        self.task = self.progress.add_task(self._description(), total=total, completed=done)

    def _description(self) -> str:
        hosts = ", ".join(f"{host} {n}" for host, n in sorted(self.per_host.items()))
        return f"{self.label} blocks" + (f" ({hosts})" if hosts else "")

    def block_done(self, label: str, host: str, runs: int, valid: int, wall_s: float) -> None:
        self.per_host[host] += 1
        self.note(f"{label} on {host}: {runs} runs ({valid} valid) in {wall_s:.1f} s")
        if self.progress is not None:
            self.progress.update(self.task, advance=1, description=self._description())

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()

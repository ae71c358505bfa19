"""A workload's link events given when its client reports progress (``progress N`` lines on
the client's stdout): the agent's outage after round N, a rate change after round M. What
was given, and when, goes to the run's ``link_events.json``, which collection reads."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.store.resultdir import atomic_write_json

LINK_EVENTS_FILE = "link_events.json"


class ProgressEvents:
    """Gives a workload's link events when its client reports progress: the client prints
    ``progress N`` on stdout; at the first such N of ``events`` the link gets that event
    (netem.events string), now. What was given, and when, goes to link_events.json."""

    def __init__(
        self, link: Any, events: Mapping[int, Sequence[str]], log: Callable[[str], None]
    ) -> None:
        self.link = link
        self.events = {n: list(texts) for n, texts in events.items()}
        self.log = log
        self.fired: list[dict[str, Any]] = []
        self._thread: threading.Thread | None = None

    def on_line(self, line: str) -> None:
        mark, _, value = line.strip().partition(" ")
        if mark != "progress" or not value.isdigit():
            return
        for text in self.events.pop(int(value), []):
            given = time.monotonic()
            try:
                scheduled = self.link.event(text)
                self.fired.append(
                    {
                        "after_progress": int(value),
                        "event": text,
                        "kind": scheduled.kind,
                        "given_s": given,
                        "start_s": scheduled.start_s,
                        "end_s": scheduled.end_s if math.isfinite(scheduled.end_s) else None,
                    }
                )
            except Exception as err:  # recorded; the run's row says the event failed
                self.fired.append({"after_progress": int(value), "event": text, "error": str(err)})

    def follow(self, stream: Any) -> None:
        def run() -> None:
            for raw in iter(stream.readline, b""):
                self.on_line(raw.decode(errors="replace"))

        self._thread = threading.Thread(target=run, name="tb-progress", daemon=True)
        self._thread.start()

    def finish(self, run_dir: Path) -> list[dict[str, Any]]:
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if self.fired:  # a rate change lasts for good: the next run gets its own path back
            try:
                self.link.end_events()
            except Exception as err:
                self.log(f"{run_dir.name}: ending the link events failed: {err}")
        atomic_write_json(run_dir / LINK_EVENTS_FILE, self.fired)
        return self.fired

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

from harness.store.files import LINK_EVENTS_FILE
from harness.store.resultdir import atomic_write_json


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
        """``progress N`` (the events of N from now) or ``progress N T`` (from the client's
        CLOCK_MONOTONIC time T: the moment it reached N, whatever the pipe's delay)."""
        words = line.split()
        if len(words) not in (2, 3) or words[0] != "progress" or not _is_count(words[1]):
            return
        value = words[1]
        base_s = _time_of(words[2]) if len(words) == 3 else None
        for text in self.events.pop(int(value), []):
            given = time.monotonic()
            try:
                scheduled = self.link.event(text, base_s=base_s)
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


def _is_count(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _time_of(text: str) -> float | None:
    """A client's CLOCK_MONOTONIC stamp, None when it is not a finite number."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None

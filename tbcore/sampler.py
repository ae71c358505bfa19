"""In-flight sampler: reads the sender state of a connection at a fixed rate (>= 1 kHz)
while a request is in flight, and writes the samples as CSV.

A thread, not an event-loop task: the loop may be busy for milliseconds at a time sending
(QUIC is CPU-bound), and a sample that waits for the loop would miss exactly those moments.
``getsockopt`` releases the GIL; a QUIC probe only reads a few attributes.
"""

from __future__ import annotations

import csv
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tbcore.errors import SpecError
from tbcore.records import SCHEMA_KEY, Record

DEFAULT_SAMPLE_HZ = 1000.0
MIN_SAMPLE_HZ = 1.0
MAX_SAMPLE_HZ = 100_000.0
"""A sample every 10 us: beyond it the reads (a getsockopt each) cannot keep the period."""


def check_sample_hz(field: str, hz: float) -> float:
    """``hz`` within MIN_SAMPLE_HZ..MAX_SAMPLE_HZ (NaN and the infinities are not)."""
    if not MIN_SAMPLE_HZ <= hz <= MAX_SAMPLE_HZ:
        raise SpecError(field, f"must be in {MIN_SAMPLE_HZ:g}..{MAX_SAMPLE_HZ:g} Hz, got {hz!r}")
    return hz


class Sampler:
    """Collects ``(t, request_id, *probe())`` rows while :meth:`start`-ed."""

    def __init__(
        self, columns: Sequence[str] | type[Record], hz: float = DEFAULT_SAMPLE_HZ
    ) -> None:
        """``columns``: the probe's keys, or a sample record class (tbcore.records) whose
        fields after ``t`` and ``request_id`` they are; its schema tag then ends each row."""
        check_sample_hz("sample_hz", hz)
        self.record: type[Record] | None = None
        if isinstance(columns, type) and issubclass(columns, Record):
            self.record = columns
            columns = [c for c in columns.field_names() if c not in ("t", "request_id")]
        self.columns = tuple(columns)
        self.period_s = 1.0 / hz
        self.rows: list[tuple[Any, ...]] = []
        self.failures: dict[int | str, str] = {}
        """Why sampling a request stopped early, by request id (a probe that raised)."""
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(
        self,
        request_id: int | str,
        probe: Callable[[], dict[str, Any]],
        stop_when: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        """Sample ``probe()`` every period until :meth:`stop` (or until ``stop_when`` holds
        for a sample, which is kept)."""
        self.stop()
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(request_id, probe, stop_when), name="tb-sampler", daemon=True
        )
        self._thread.start()

    def add(self, t: float, request_id: int | str, values: dict[str, Any]) -> None:
        """A sample its stack pushed (taken at ``t``, CLOCK_MONOTONIC), beside the thread's
        own: the native HTTP/3 engine reports its connection state itself."""
        self.rows.append((t, request_id, *(values.get(c) for c in self.columns)))

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=2.0)
            self._thread = None

    def _run(
        self,
        request_id: int | str,
        probe: Callable[[], dict[str, Any]],
        stop_when: Callable[[dict[str, Any]], bool] | None,
    ) -> None:
        columns = self.columns
        rows = self.rows
        period = self.period_s
        next_at = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            try:
                values = probe()
            except OSError:  # the socket closed under us: the request is over
                return
            except Exception as err:  # a probe's defect: kept, for the record of the request
                self.failures[request_id] = f"{type(err).__name__}: {err}".splitlines()[0][:200]
                return
            rows.append((now, request_id, *(values.get(c) for c in columns)))
            if stop_when is not None and stop_when(values):
                return
            next_at += period
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_at = time.monotonic()

    def write_csv(self, path: Path, extra: dict[str, Any] | None = None) -> None:
        """All rows so far as CSV with a header ``t,request_id,<columns>``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as handle:
            writer = csv.writer(handle)
            if self.record is None:
                writer.writerow(["t", "request_id", *self.columns])
                writer.writerows(self.rows)
            else:
                tag = self.record.schema_tag()
                writer.writerow(["t", "request_id", *self.columns, SCHEMA_KEY])
                writer.writerows((*row, tag) for row in self.rows)

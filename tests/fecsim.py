"""Two FEC endpoints over an in-memory path with a fake clock (for the sans-I/O tests)."""

from __future__ import annotations

import functools
import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from proto.fec.loss import Redundancy
from proto.fec.session import Event, FecEndpoint

SESSION = b"S" * 8
SECRET = b"k" * 32


@dataclass
class Path:
    """One direction: a serialising bottleneck, then a delay; ``drop(i)`` decides loss."""

    rate_bps: float = 333e6
    delay_s: float = 0.1
    drop: Callable[[int], bool] = lambda i: False
    busy_until: float = 0.0
    count: int = 0
    lost: int = 0

    def admit(self, now: float, size: int) -> float | None:
        index = self.count
        self.count += 1
        start = max(now, self.busy_until)
        self.busy_until = start + (size + 28) * 8 / self.rate_bps
        if self.drop(index):
            self.lost += 1
            return None
        return self.busy_until + self.delay_s


def bernoulli(p: float, seed: int = 1) -> Callable[[int], bool]:
    rng = random.Random(seed)
    return lambda i: rng.random() < p


def gilbert(p_gb: float, p_bg: float, seed: int = 1) -> Callable[[int], bool]:
    """Simple Gilbert: bad state loses everything, good nothing."""
    rng = random.Random(seed)
    state = [False]

    def drop(i: int) -> bool:
        state[0] = (rng.random() >= p_bg) if state[0] else (rng.random() < p_gb)
        return state[0]

    return drop


@dataclass
class Sim:
    up: Path = field(default_factory=Path)
    down: Path = field(default_factory=Path)
    cap_bps: float = 333e6
    redundancy: Redundancy = field(default_factory=Redundancy)
    now: float = 0.0

    def __post_init__(self) -> None:
        # the two ends differ only in their role
        endpoint = functools.partial(
            FecEndpoint,
            session=SESSION,
            secret=SECRET,
            cap_bps=self.cap_bps,
            redundancy=self.redundancy,
            now=0.0,
        )
        self.client = endpoint(is_client=True)
        self.server = endpoint(is_client=False)
        self._arrivals: list[tuple[float, int, str, bytes]] = []
        self._order = itertools.count()
        self.events: dict[str, list[Event]] = {"client": [], "server": []}

    def inject(self, to: str, datagram: bytes, at: float | None = None) -> None:
        when = self.now if at is None else at
        heapq.heappush(self._arrivals, (when, next(self._order), to, datagram))

    def _flush(self) -> None:
        for name, end, path, peer in (
            ("client", self.client, self.up, "server"),
            ("server", self.server, self.down, "client"),
        ):
            for datagram in end.datagrams_to_send(self.now):
                at = path.admit(self.now, len(datagram))
                if at is not None:
                    self.inject(peer, datagram, at)
            while end.prepare():
                pass
            while (event := end.next_event()) is not None:
                self.events[name].append(event)

    def run_until(self, done: Callable[[], bool], limit_s: float = 30.0) -> None:
        self._flush()
        while not done():
            candidates = [t for t in (self.client.get_timer(), self.server.get_timer()) if t]
            if self._arrivals:
                candidates.append(self._arrivals[0][0])
            if not candidates:
                raise AssertionError("nothing left to happen")
            self.now = max(self.now, min(candidates))
            if self.now > limit_s:
                raise AssertionError("did not finish in time")
            while self._arrivals and self._arrivals[0][0] <= self.now:
                _, _, to, datagram = heapq.heappop(self._arrivals)
                (self.client if to == "client" else self.server).receive_datagram(
                    datagram, self.now
                )
            for end in (self.client, self.server):
                timer = end.get_timer()
                if timer is not None and timer <= self.now:
                    end.handle_timer(self.now)
            self._flush()

    def probe(self) -> None:
        self.client.start_probe(self.now)
        self.run_until(lambda: self.client.measured)
        self.run_until(lambda: not self._arrivals)

    def of(self, name: str, kind: type) -> list:
        return [e for e in self.events[name] if isinstance(e, kind)]

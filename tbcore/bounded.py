"""A map bounded by count and by age (plain code: every call takes ``now``): the stores a
server keeps for its whole life (the agent's executed operations, QUIC session tickets) hold at
most ``max_items`` entries, none older than ``max_age_s``; what they drop is counted, so a
record can say it."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

V = TypeVar("V")


@dataclass
class Evicted:
    by_count: int = 0
    """Entries dropped to keep the count (oldest first)."""
    by_age: int = 0
    """Entries dropped for their age."""


class BoundedStore(Generic[V]):
    """Insertion-ordered entries, the oldest dropped first."""

    def __init__(self, max_items: int, max_age_s: float) -> None:
        if max_items < 1 or max_age_s <= 0:
            raise ValueError("max_items must be >= 1 and max_age_s > 0")
        self.max_items = max_items
        self.max_age_s = max_age_s
        self._items: OrderedDict[object, tuple[float, V]] = OrderedDict()
        self.evicted = Evicted()

    def put(self, key: object, value: V, now: float) -> None:
        self.expire(now)
        self._items.pop(key, None)
        self._items[key] = (now, value)
        while len(self._items) > self.max_items:
            self._items.popitem(last=False)
            self.evicted.by_count += 1

    def get(self, key: object, now: float) -> V | None:
        self.expire(now)
        item = self._items.get(key)
        return None if item is None else item[1]

    def pop(self, key: object, now: float) -> V | None:
        self.expire(now)
        item = self._items.pop(key, None)
        return None if item is None else item[1]

    def expire(self, now: float) -> None:
        horizon = now - self.max_age_s
        while self._items:
            first = next(iter(self._items.values()))
            if first[0] > horizon:
                break
            self._items.popitem(last=False)
            self.evicted.by_age += 1

    def values(self) -> Iterator[V]:
        return (value for _at, value in self._items.values())

    def __len__(self) -> int:
        return len(self._items)

"""The bounded store: at most so many entries, none older than so long, drops counted."""

from __future__ import annotations

import pytest

from tbcore.bounded import BoundedStore


def test_the_oldest_go_first_by_count() -> None:
    store: BoundedStore[int] = BoundedStore(max_items=3, max_age_s=100.0)
    for i in range(5):
        store.put(i, i * 10, now=float(i))
    assert len(store) == 3 and store.get(0, 5.0) is None and store.get(4, 5.0) == 40
    assert store.evicted.by_count == 2


def test_entries_expire_by_age_and_pop_is_single_use() -> None:
    store: BoundedStore[str] = BoundedStore(max_items=10, max_age_s=5.0)
    store.put("a", "x", now=0.0)
    store.put("b", "y", now=3.0)
    assert store.pop("a", now=4.0) == "x" and store.pop("a", now=4.0) is None
    assert store.get("b", now=8.5) is None and store.evicted.by_age == 1


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        BoundedStore(0, 1.0)

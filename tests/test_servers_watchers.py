"""Watchers: a callback fires once, when its condition first holds at a check."""

from __future__ import annotations

from proto.watchers import Watchers


def test_each_callback_fires_once_when_its_condition_holds() -> None:
    state = {"sent": False}
    fired: list[tuple[str, float]] = []
    watchers = Watchers()
    assert not watchers
    watchers.add(lambda: state["sent"], lambda now: fired.append(("sent", now)))
    watchers.add(lambda: True, lambda now: fired.append(("at once", now)))
    watchers.fire(1.0)
    assert fired == [("at once", 1.0)] and watchers
    state["sent"] = True
    watchers.fire(2.0)
    watchers.fire(3.0)
    assert fired == [("at once", 1.0), ("sent", 2.0)] and not watchers

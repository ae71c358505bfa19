"""tbcore.plain: a dataclass written as the dict of its fields, nested ones as dicts."""

from __future__ import annotations

from dataclasses import dataclass

from tbcore.plain import AsDict


@dataclass(frozen=True)
class _Inner(AsDict):
    rate_bps: float


@dataclass(frozen=True)
class _Outer(AsDict):
    name: str
    inner: _Inner
    parts: tuple[float, ...] = ()


def test_to_dict_is_the_fields_with_nested_dataclasses_as_dicts() -> None:
    outer = _Outer("a", _Inner(1e6), (0.1, 0.2))
    assert outer.to_dict() == {"name": "a", "inner": {"rate_bps": 1e6}, "parts": (0.1, 0.2)}
    assert outer.inner.to_dict() == {"rate_bps": 1e6}

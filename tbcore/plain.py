"""Results as plain data: a dataclass that is written out (run.json, a report's JSON, a
CSV row) as the dict of its fields, nested dataclasses as dicts."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any


class AsDict:
    """Mixin for a dataclass: :meth:`to_dict` is :func:`dataclasses.asdict` of it."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

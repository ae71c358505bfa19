"""The one error type that user input raises: it names the field and the reason."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_FIELD_CHARS = 80
"""A field name echoed in an error (a bogus 100 kB key is cut to this)."""
MAX_REASON_CHARS = 400
"""The reason part of an error: one readable line, whatever value it quotes."""


def clip(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """``text`` on one line and at most about ``limit`` characters (the cut is marked with
    the full length, so a reader knows it was cut)."""
    one_line = " ".join(str(text).split())
    if len(one_line) <= limit:
        return one_line
    return f"{one_line[:limit]}... ({len(one_line)} characters)"


class SpecError(ValueError):
    """Bad input: a spec key, a flag, a link string or a request field.

    ``str(err)`` is one line, ``"<field>: <reason>"``, fit to print as is: both parts are
    put on one line and cut to a readable length (:func:`clip`)."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = clip(field, MAX_FIELD_CHARS)
        self.reason = clip(reason, MAX_REASON_CHARS)
        super().__init__(f"{self.field}: {self.reason}")


class HostUnreachable(RuntimeError):
    """A host the run needs (``--remote``'s, a cluster's) could not be reached or did not
    answer: ``str(err)`` is one line naming it and why, and the command exits 2 as for bad
    input (the input named a host that is not there)."""


class LinkLost(RuntimeError):
    """The emulated path went away under a run (another process took it down): the run
    stops rather than record runs that measured nothing. ``str(err)`` is one line."""


def require_schema(data: Mapping[str, Any], key: str, expected: object, field: str) -> None:
    """Refuse a document whose ``data[key]`` is not the schema version this code reads:
    :class:`SpecError` on ``field``, naming what was found and what is read."""
    found = data.get(key)
    if found != expected:
        raise SpecError(field, f"schema {found!r}, this testbed reads {expected!r}")

"""The one error type that user input raises: it names the field and the reason."""

from __future__ import annotations


class SpecError(ValueError):
    """Bad input: a spec key, a flag, a link string or a request field.

    ``str(err)`` is one line, ``"<field>: <reason>"``, fit to print as is.
    """

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")

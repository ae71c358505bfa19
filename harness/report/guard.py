"""A report section that cannot be computed for a result says so in one line; the rest of
the report is written (issue 27: a report never ends in a traceback).

Every section and plot of a report goes through :func:`section` (or :func:`attempt`): an
exception becomes the line ``*<title>: not computed for these runs (<Type>: <message>).*``
and is counted, so that a report of runs that finished is never lost to one table the
runs' shape did not foresee (a link without a wired rate, a workload a table was not
written for).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

MESSAGE_CHARS = 200
"""A failure's message in the report is cut to this many characters (one line)."""


def one_line(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".replace("\n", " ").strip()
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."


@dataclass
class Guard:
    """The failures of one report's sections: (title, one-line reason, traceback)."""

    failures: list[tuple[str, str, str]] = field(default_factory=list)

    def section(self, title: str, make: Callable[..., Iterable[str]], *args: Any) -> list[str]:
        """``make(*args)``'s lines, or the one line that says why there are none."""
        try:
            return list(make(*args))
        except Exception as err:  # a section of the report, never the whole report
            return [self.note(title, err), ""]

    def attempt(
        self, title: str, make: Callable[..., T], *args: Any, default: T, **kwargs: Any
    ) -> T:
        """``make(*args, **kwargs)``, or ``default`` (the failure noted) when it raises."""
        try:
            return make(*args, **kwargs)
        except Exception as err:
            self.note(title, err)
            return default

    def note(self, title: str, err: BaseException) -> str:
        reason = one_line(err)
        self.failures.append((title, reason, traceback.format_exc()))
        return f"*{title}: not computed for these runs ({reason}).*"

    def lines(self) -> list[str]:
        """A closing section listing what was not computed (empty when everything was)."""
        if not self.failures:
            return []
        out = ["## Not computed", ""]
        out += [f"- {title}: {reason}" for title, reason, _ in self.failures]
        out += ["", "Tracebacks: report_errors.txt beside this report.", ""]
        return out

    def tracebacks(self) -> str:
        return "\n".join(f"== {title}\n{text}" for title, _, text in self.failures)

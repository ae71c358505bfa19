"""One small registry for strategies chosen by name (protocols, workloads, topologies and
their runs): a dict from name to entry that refuses a name registered twice and answers an
unknown name with a one-line :class:`~tbcore.errors.SpecError` naming the setting."""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

from tbcore.errors import SpecError


class Named(Protocol):
    @property
    def name(self) -> str: ...


T = TypeVar("T", bound=Named)


class Registry(dict[str, T], Generic[T]):
    """Entries by their ``name``, in the order registered (a plain dict to its readers)."""

    def __init__(self, key: str, unknown: str = "{name!r} is not one of {names}") -> None:
        super().__init__()
        self.key = key
        """The setting whose value names an entry (what a refusal names)."""
        self.unknown = unknown
        """The refusal's text for an unknown name (``{name}``, ``{names}``: the known)."""

    def register(self, entry: T) -> T:
        if entry.name in self:
            raise ValueError(f"{self.key} {entry.name!r} registered twice")
        self[entry.name] = entry
        return entry

    def lookup(self, name: Any) -> T:
        """The entry called ``name``; an unknown one is refused in one line."""
        try:
            return self[name]
        except (KeyError, TypeError):
            raise SpecError(
                self.key, self.unknown.format(name=name, names=", ".join(self))
            ) from None

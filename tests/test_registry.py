"""tbcore.registry: entries by name, a name registered twice refused, an unknown name
refused in one line naming the setting."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tbcore.errors import SpecError
from tbcore.registry import Registry


@dataclass(frozen=True)
class Entry:
    name: str


def test_entries_by_name_in_the_order_registered() -> None:
    registry: Registry[Entry] = Registry("colour")
    red, blue = registry.register(Entry("red")), registry.register(Entry("blue"))
    assert list(registry) == ["red", "blue"]
    assert registry.lookup("blue") is blue and registry["red"] is red


def test_a_name_registered_twice_is_refused() -> None:
    registry: Registry[Entry] = Registry("colour")
    registry.register(Entry("red"))
    with pytest.raises(ValueError, match="colour 'red' registered twice"):
        registry.register(Entry("red"))


@pytest.mark.parametrize("name", ["green", ["red"], None])
def test_an_unknown_name_is_refused_naming_the_setting(name: object) -> None:
    registry: Registry[Entry] = Registry("colour")
    registry.register(Entry("red"))
    with pytest.raises(SpecError, match=r"colour: .* is not one of red"):
        registry.lookup(name)


def test_the_refusal_text_is_the_registry_s_own() -> None:
    registry: Registry[Entry] = Registry("topology", "{name!r} has no run ({names})")
    registry.register(Entry("relay"))
    with pytest.raises(SpecError, match=r"'direct' has no run \(relay\)"):
        registry.lookup("direct")

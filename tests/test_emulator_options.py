"""The emulator's packet-path options: validation, the command line they become, the dict
the link state keeps."""

from __future__ import annotations

import pytest

from netem.emulator.options import EmulatorOptions
from netem.link import emulator_options
from tbcore.errors import SpecError


def test_defaults_are_empty_and_add_nothing() -> None:
    options = EmulatorOptions()
    assert options.empty and options.argv() == [] and options.to_dict() == {}


def test_the_command_line_and_the_round_trip() -> None:
    options = EmulatorOptions(path="c", offload=False, coalesce_s=250e-6)
    assert options.argv() == ["--path", "c", "--offload", "off", "--coalesce-us", "250"]
    assert EmulatorOptions.from_dict(options.to_dict()) == options
    gro = EmulatorOptions(gro=False)
    assert gro.argv() == ["--gro", "off"] and EmulatorOptions.from_dict(gro.to_dict()) == gro
    stamps = EmulatorOptions(stamps=False)
    assert stamps.argv() == ["--stamps", "off"]
    assert EmulatorOptions.from_dict(stamps.to_dict()) == stamps


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"path": "rust"}, "emulator.path"),
        ({"offload": "yes"}, "emulator.offload"),
        ({"coalesce_s": 2e-3}, "emulator.coalesce_s"),
        ({"coalesce_s": -1e-6}, "emulator.coalesce_s"),
        ({"coalesce_s": float("nan")}, "emulator.coalesce_s"),
        ({"coalesce_s": True}, "emulator.coalesce_s"),
        ({"path": "python", "offload": True}, "emulator.offload"),
        ({"path": "python", "coalesce_s": 1e-4}, "emulator.coalesce_s"),
        ({"gro": 1}, "emulator.gro"),
        ({"path": "python", "gro": False}, "emulator.gro"),
        ({"offload": False, "gro": True}, "emulator.gro"),
        ({"stamps": "on"}, "emulator.stamps"),
        ({"path": "python", "stamps": True}, "emulator.stamps"),
    ],
)
def test_bad_options_are_refused_naming_the_field(values: dict, field: str) -> None:
    with pytest.raises(SpecError) as err:
        EmulatorOptions(**values)
    assert err.value.field == field


def test_from_dict_refuses_unknown_keys() -> None:
    with pytest.raises(SpecError, match="unknown emulator option"):
        EmulatorOptions.from_dict({"turbo": True})
    with pytest.raises(SpecError, match="mapping"):
        EmulatorOptions.from_dict(["c"])


def test_only_the_userspace_backend_takes_them() -> None:
    assert emulator_options("userspace", None) is None
    assert emulator_options("netem", EmulatorOptions()) is None
    options = EmulatorOptions(path="python")
    assert emulator_options("userspace", options) is options
    with pytest.raises(SpecError, match="no userspace emulator"):
        emulator_options("netem", options)

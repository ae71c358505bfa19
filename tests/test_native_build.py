"""proto.native.build: tb-h3 made from its source with Debian's libraries, once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from proto.native import build
from tbcore.errors import SpecError


def test_the_binary_is_made_and_kept_while_its_source_is_unchanged() -> None:
    binary = build.ensure_built()
    assert binary.is_file() and os.access(binary, os.X_OK)
    made = binary.stat().st_mtime_ns
    assert build.ensure_built() == binary and binary.stat().st_mtime_ns == made


def test_missing_libraries_are_named_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:  # fmt: skip
    monkeypatch.setattr(build, "PKG_CONFIG_PACKAGES", ("tb-no-such-library",))
    monkeypatch.setattr(build, "BUILD_DIR", tmp_path)
    monkeypatch.setattr(build, "BINARY", tmp_path / "tb-h3")
    monkeypatch.setattr(build, "STAMP", tmp_path / "tb-h3.sha256")
    with pytest.raises(SpecError) as err:
        build.ensure_built()
    text = str(err.value)
    assert text.startswith("quic_stack: ngtcp2: the native stack needs libngtcp2-dev")
    assert "\n" not in text.strip()

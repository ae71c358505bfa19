"""Shared fixtures and markers. Root-only tests skip with a reason when not root."""

from __future__ import annotations

import os
import shutil

import pytest

IS_ROOT = os.geteuid() == 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "root" in item.keywords and not IS_ROOT:
            item.add_marker(pytest.mark.skip(reason="needs root: creates network namespaces"))
        for marker in item.iter_markers("peers"):
            for binary in marker.args:
                if shutil.which(binary) is None:
                    item.add_marker(
                        pytest.mark.skip(reason=f"real peer {binary!r} is not installed")
                    )

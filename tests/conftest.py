"""Shared fixtures and markers. Root-only tests skip with a reason when not root."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from netem import clean

IS_ROOT = os.geteuid() == 0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full",
        action="store_true",
        help="also the full forms (tests marked full): every shipped experiment run for real, "
        "not only the ones that cover each kind of run (the README's test command leaves "
        "them out, to keep CI within its time)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    full = config.getoption("--full")
    for item in items:
        if "full" in item.keywords and not full:
            item.add_marker(pytest.mark.skip(reason="a full form: pytest --full runs it"))
        if "root" in item.keywords and not IS_ROOT:
            item.add_marker(pytest.mark.skip(reason="needs root: creates network namespaces"))
        for marker in item.iter_markers("peers"):
            for binary in marker.args:
                if shutil.which(binary) is None:
                    item.add_marker(
                        pytest.mark.skip(reason=f"real peer {binary!r} is not installed")
                    )


@pytest.fixture
def link_name(request: pytest.FixtureRequest) -> Iterator[str]:
    """The test module's ``LINK_NAME`` for a link of its own: whatever an earlier run left
    under it removed first, and nothing of it left after the test."""
    name = request.module.LINK_NAME
    clean.clean(name)
    yield name
    assert not clean.clean(name).remaining

"""No handler swallows an error unrecorded: an ``except`` that catches everything
(bare, ``Exception`` or ``BaseException``) either raises again or uses the error it bound
(records it where the user will see it: a row, a record, an event, a one-line message).
Handlers of a named condition (``OSError``, ``KeyError``, ...) are the code's own choice."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("harness", "servers", "clients", "netem", "tbcore", "proto")
BROAD = frozenset({"Exception", "BaseException"})


def _catches_everything(node: ast.expr | None) -> bool:
    if node is None:
        return True
    if isinstance(node, ast.Name):
        return node.id in BROAD
    if isinstance(node, ast.Tuple):
        return any(_catches_everything(element) for element in node.elts)
    return False


def _suppresses_everything(node: ast.AST) -> bool:
    """``contextlib.suppress(Exception)`` (or ``suppress(BaseException)``), a handler in
    the form of a context manager."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute | ast.Name)
        and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "suppress"
        and any(_catches_everything(arg) for arg in node.args)
    )


def swallowing_handlers(source: str) -> list[int]:
    """Lines of the broad handlers in ``source`` that neither raise nor use their error,
    and of every ``suppress`` of everything."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if _suppresses_everything(node):
            lines.append(node.lineno)
            continue
        if not isinstance(node, ast.ExceptHandler) or not _catches_everything(node.type):
            continue
        inner = [n for statement in node.body for n in ast.walk(statement)]
        raises = any(isinstance(n, ast.Raise) for n in inner)
        used = node.name is not None and any(
            isinstance(n, ast.Name) and n.id == node.name for n in inner
        )
        if not raises and not used:
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("try:\n    f()\nexcept Exception:\n    pass\n", [3]),
        ("try:\n    f()\nexcept:\n    return\n", [3]),
        ("for x in y:\n    try:\n        f()\n    except BaseException:\n        continue\n", [4]),
        ("try:\n    f()\nexcept (OSError, Exception) as err:\n    pass\n", [3]),
        ("try:\n    f()\nexcept Exception as err:\n    row.error = str(err)\n", []),
        ("try:\n    f()\nexcept BaseException:\n    cleanup()\n    raise\n", []),
        ("try:\n    f()\nexcept OSError:\n    pass\n", []),
        ("with contextlib.suppress(Exception):\n    f()\n", [1]),
        ("with suppress(OSError, BaseException):\n    f()\n", [1]),
        ("with contextlib.suppress(OSError):\n    f()\n", []),
    ],
)
def test_the_check_tells_swallowing_from_recording(source: str, expected: list[int]) -> None:
    assert swallowing_handlers(source) == expected


def test_no_handler_in_the_tree_swallows_an_error() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for room in ROOMS
        for path in sorted((ROOT / room).rglob("*.py"))
        for line in swallowing_handlers(path.read_text(encoding="utf-8"))
    ]
    assert found == []

"""Layers: the imports between top-level packages form no cycle; tbcore imports none."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tbcore", "netem", "servers", "clients", "harness")
"""The top-level packages of the project (DESIGN.md "Layout")."""


def imported_packages(path: Path) -> set[str]:
    """The project's top-level packages a module imports (at any depth of the module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names & set(PACKAGES)


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in PACKAGES}
    for name in PACKAGES:
        for path in (ROOT / name).rglob("*.py"):
            graph[name] |= imported_packages(path) - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that returns to its start, None if there is none."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt, [*path, nxt])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return None


def test_find_cycle_finds_one_and_only_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_imports_parse_from_and_plain_forms(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import netem.link\nfrom tbcore import units\nfrom . import x\nimport os\n")
    assert imported_packages(module) == {"netem", "tbcore"}


def test_no_cycle_between_top_level_packages() -> None:
    graph = package_graph()
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph) or [])}"


def test_the_base_package_imports_none_of_the_others() -> None:
    assert package_graph()["tbcore"] == set()


def test_servers_do_not_import_clients() -> None:
    assert "clients" not in package_graph()["servers"]

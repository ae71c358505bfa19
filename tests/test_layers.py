"""Layers: the imports between top-level packages form no cycle, tbcore imports none, clients
and servers import each other never (proto/ is what they share), no package's modules import
each other in a cycle, and past the spec stage the harness passes LinkSpecs, never strings."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tbcore", "netem", "proto", "servers", "clients", "harness")
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


def test_clients_and_servers_do_not_import_each_other() -> None:
    graph = package_graph()
    assert "servers" not in graph["clients"], "clients import servers: move it to proto/"
    assert "clients" not in graph["servers"]
    assert graph["proto"] <= {"tbcore"}, f"proto imports {graph['proto'] - {'tbcore'}}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The project's modules ``path`` imports (``from a.b import c`` counts ``a.b.c`` when
    that is a module, else ``a.b``), at any depth of the module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                out.add(full if full in known else node.module)
    return out & known


def module_graph() -> dict[str, set[str]]:
    paths = [p for name in PACKAGES for p in (ROOT / name).rglob("*.py")]
    known = {module_name(p) for p in paths}
    return {module_name(p): imported_modules(p, known) - {module_name(p)} for p in paths}


def test_no_cycle_between_the_modules_of_a_package() -> None:
    """Within each package (and sub-package) the modules' imports form no cycle, a package's
    __init__ counted as a module of its own."""
    cycle = find_cycle(module_graph())
    assert cycle is None, f"import cycle: {' -> '.join(cycle or [])}"


PARSERS = {"parse_link", "resolve_link", "merge_link", "parse_topology"}
"""What turns a link string into a LinkSpec."""
INPUT_EDGES = ("harness/spec/", "harness/cli/", "netem/")
"""Where link strings are input: the spec stage, command-line flags, netem's own commands and
its link-up path. Past them the harness passes LinkSpecs and Topologies."""


def string_link_calls(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in PARSERS:
                lines.append(node.lineno)
    return lines


def test_no_link_string_is_parsed_past_the_spec_stage() -> None:
    found = []
    for name in ("harness", "clients", "servers", "proto"):
        for path in (ROOT / name).rglob("*.py"):
            where = str(path.relative_to(ROOT))
            if where.startswith(INPUT_EDGES):
                continue
            found += [f"{where}:{line}" for line in string_link_calls(path)]
    assert not found, f"link strings parsed past the spec stage: {found}"


def test_the_string_check_finds_a_parse(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from netem import linkspec\nx = linkspec.parse_link(s)\ny = resolve_link(s)\n"
    )
    assert string_link_calls(module) == [2, 3]

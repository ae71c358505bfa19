"""Layers: the imports between top-level packages form no cycle, tbcore imports none, clients
and servers import each other never (proto/ is what they share), no package's modules import
each other in a cycle, and past the spec stage the harness passes LinkSpecs, never strings."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tbcore", "netem", "proto", "servers", "clients", "harness")
"""The top-level packages of the project (docs/design.md "Layout")."""


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
INPUT_EDGES = ("harness/spec/", "harness/cli/", "harness/bench/", "netem/")
"""Where link strings are input: the spec stage, command-line flags (the benchmarks' too),
netem's own commands and its link-up path. Past them the harness passes LinkSpecs and
Topologies."""


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


ADAPTER = "proto/quic/adapter.py"
"""The one module that touches aioquic's internals (its docstring says which and why)."""
AIOQUIC_INTERNAL_MODULES = (
    "aioquic.quic.recovery",
    "aioquic.quic.congestion",
    "aioquic.quic.packet_builder",
    "aioquic.quic.stream",
)
"""Modules of aioquic outside its documented API: imported by the adapter only."""


def aioquic_private_names() -> set[str]:
    """Every private name aioquic's classes define: methods and ``self._x`` attributes."""
    import aioquic

    names: set[str] = set()
    for path in Path(aioquic.__file__).parent.rglob("*.py"):
        for cls in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(cls, ast.ClassDef):
                continue
            for node in ast.walk(cls):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(node.name)
                elif isinstance(node, ast.Attribute) and getattr(node.value, "id", "") == "self":
                    names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def own_private_names(package: str, private: set[str]) -> set[str]:
    """Names of ``private`` that the package's own classes also define (``self._x = ``):
    an access to one of those on another object is taken for the package's own."""
    names: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and getattr(node.value, "id", "") == "self"
                and node.attr in private
            ):
                names.add(node.attr)
    return names


def derives_from_aioquic(module: str, name: str) -> bool:
    import importlib
    import inspect

    cls = getattr(importlib.import_module(module), name, None)
    if not inspect.isclass(cls):
        return False
    return any(base.__module__.startswith("aioquic") for base in inspect.getmro(cls)[1:])


def aioquic_internal_uses(path: Path, private: set[str], own: set[str]) -> list[str]:
    """Where ``path`` touches a private name of aioquic: ``x._name`` (``own`` names excepted
    on objects other than self), ``getattr(x, "_name")``, ``self._name`` or ``def _name`` in a
    class derived from an aioquic class, and imports of private names or internal modules."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    module = module_name(path)
    found: list[str] = []

    def visit(node: ast.AST, cls: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            where = f"{path.relative_to(ROOT)}:{getattr(child, 'lineno', 0)}"
            if isinstance(child, ast.ImportFrom) and (child.module or "").startswith("aioquic"):
                mod = child.module or ""
                if mod.startswith(AIOQUIC_INTERNAL_MODULES) or "._" in mod:
                    found.append(f"{where}: from {mod} import")
                found.extend(f"{where}: import {a.name}" for a in child.names if a.name[0] == "_")
            elif isinstance(child, ast.Attribute) and child.attr in private:
                on_self = getattr(child.value, "id", "") in ("self", "cls")
                if (not on_self and child.attr not in own) or (
                    on_self and cls and derives_from_aioquic(module, cls)
                ):
                    found.append(f"{where}: {ast.unparse(child)}")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and cls:
                if child.name in private and derives_from_aioquic(module, cls):
                    found.append(f"{where}: def {child.name} in {cls}")
            elif isinstance(child, ast.Call) and getattr(child.func, "id", "") in (
                "getattr",
                "setattr",
                "hasattr",
            ):
                args = child.args
                if len(args) > 1 and isinstance(args[1], ast.Constant) and args[1].value in private:
                    found.append(f"{where}: {ast.unparse(child)}")
            visit(child, child.name if isinstance(child, ast.ClassDef) else cls)

    visit(tree, None)
    return found


def test_aioquic_internals_are_touched_in_the_adapter_only() -> None:
    private = aioquic_private_names()
    found = []
    for package in PACKAGES:
        own = own_private_names(package, private)
        for path in sorted((ROOT / package).rglob("*.py")):
            if str(path.relative_to(ROOT)) != ADAPTER:
                found += aioquic_internal_uses(path, private, own)
    assert not found, "aioquic internals outside proto/quic/adapter.py: " + "; ".join(found)


def test_the_internals_check_finds_each_kind_of_use(tmp_path: Path) -> None:
    private = aioquic_private_names()
    assert {"_loss", "_streams_queue", "_transmit_soon", "_write_stream_limits"} <= private
    module = tmp_path / "m.py"
    module.write_text(
        "from aioquic.quic.recovery import QuicPacketPacer\n"
        "x = quic._loss._cc\n"
        "y = getattr(recovery, '_rtt_smoothed', None)\n"
        "z = link._state\n"
    )
    old_root = globals()["ROOT"]
    globals()["ROOT"] = tmp_path
    try:
        found = aioquic_internal_uses(module, private, own={"_state"})
    finally:
        globals()["ROOT"] = old_root
    assert [f.split(": ", 1)[1] for f in found] == [
        "from aioquic.quic.recovery import",
        "quic._loss._cc",
        "quic._loss",
        "getattr(recovery, '_rtt_smoothed', None)",
    ]
    adapter = ROOT / ADAPTER
    assert len(aioquic_internal_uses(adapter, private, set())) > 40  # it does find them


HARNESS_ROOMS = (
    "bounds",
    "spec",
    "plan",
    "store",
    "validity",
    "collect",
    "analysis",
    "report",
    "run",
    "campaign",
    "cluster",
    "abuse",
    "bench",
    "cli",
)
"""The harness's rooms, lowest first: a room imports only rooms before it (docs/design.md)."""


def room_imports(path: Path) -> list[tuple[str, int]]:
    """The harness rooms a module imports (at any depth), with the line of each import."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
            if node.module == "harness":
                modules = [f"harness.{alias.name}" for alias in node.names]
        for module in modules:
            parts = module.split(".")
            if parts[0] == "harness" and len(parts) > 1 and parts[1] in HARNESS_ROOMS:
                found.append((parts[1], node.lineno))
    return found


def imports_against_the_rooms(root: Path) -> list[str]:
    """Every import from a harness room of a room above it (or of an unlisted room)."""
    rank = {room: i for i, room in enumerate(HARNESS_ROOMS)}
    wrong = []
    for path in sorted((root / "harness").rglob("*.py")):
        parts = path.relative_to(root / "harness").parts
        if len(parts) < 2:
            continue
        room = parts[0]
        if room not in rank:
            wrong.append(f"{path.relative_to(root)}: room {room!r} is not in HARNESS_ROOMS")
            continue
        for target, line in room_imports(path):
            if rank[target] > rank[room]:
                wrong.append(f"{path.relative_to(root)}:{line}: {room} imports {target}")
    return wrong


def test_no_harness_room_imports_a_room_above_it() -> None:
    assert imports_against_the_rooms(ROOT) == []


def test_the_rooms_check_finds_an_upward_import(tmp_path: Path) -> None:
    (tmp_path / "harness" / "collect").mkdir(parents=True)
    (tmp_path / "harness" / "run").mkdir()
    (tmp_path / "harness" / "collect" / "row.py").write_text(
        "from harness.store.files import RUN_FILE\n\n\ndef f():\n    from harness.run import x\n"
    )
    (tmp_path / "harness" / "run" / "runner.py").write_text("from harness import collect\n")
    assert imports_against_the_rooms(tmp_path) == ["harness/collect/row.py:5: collect imports run"]

"""The registries of protocols, workloads and topologies (tbcore.kinds): no code outside them
branches on a protocol's or a workload's name, and every registered kind has its part in each
stage that looks it up (the client's opener, the row's bound, the two-path transfer)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from clients import api, multipath
from clients.workload import EXCHANGES, exchange_specs, request_spec
from harness.collect import row
from harness.collect.row import ROW_PARTS
from harness.run.topologies import RUNS
from tbcore import kinds
from tbcore.errors import SpecError
from tbcore.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tbcore", "netem", "proto", "servers", "clients", "harness")
NAMED = {"protocol", "workload"}
"""What a ladder compares with a literal name."""
REGISTRY = ROOT / "tbcore" / "kinds.py"


def _named(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return node.id in NAMED
    return isinstance(node, ast.Attribute) and node.attr in NAMED


def _literal_names(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_literal_names(e) for e in node.elts)
    return False


def ladders(path: Path) -> list[int]:
    """Lines of ``path`` comparing a protocol or workload with a literal name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        if any(_named(o) for o in operands) and any(_literal_names(o) for o in operands):
            lines.append(node.lineno)
    return lines


def test_the_ladder_finder_finds_a_ladder(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text(
        'if settings.protocol == "h2":\n    pass\nif workload in ("asr", "tts"):\n    pass\n'
        'if settings.connection == "new":\n    pass\n'
    )
    assert ladders(source) == [1, 3]


def test_no_branch_on_a_protocol_or_workload_name_outside_the_registry() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path != REGISTRY:
                found += [f"{path.relative_to(ROOT)}:{line}" for line in ladders(path)]
    assert found == []


def test_every_protocol_has_its_part_in_each_stage() -> None:
    for name, kind in kinds.PROTOCOLS.items():
        assert name in api.OPENERS, name
        assert kind.bound in row.BOUNDS, name
        if kind.upload_mode is not None:
            assert name in multipath.TRANSFERS, name
        assert set(kind.connections) <= {"new", "reused", "0rtt"}


def test_every_workload_and_topology_has_its_part_in_each_stage() -> None:
    for name, kind in kinds.WORKLOADS.items():
        assert kind.records == "request" or kind.records in ROW_PARTS, name
        if kind.records == "request" and name != "agent":
            assert name in EXCHANGES, name
    assert set(kinds.TOPOLOGIES) == set(RUNS)


def test_a_workload_s_requests_come_from_its_registration() -> None:
    multi = exchange_specs(Settings(workload="multi", streams="result,stream"))
    assert [s.workload for s in multi] == ["result", "stream"]
    assert all(s.shared for s in multi)
    (tiles,) = exchange_specs(Settings(workload="retouch-tiles3"))
    assert tiles.path == "/retouch?tiles=3" and not tiles.shared
    assert request_spec("asr").echo_in_body and not request_spec("retouch").echo_in_body
    (own,) = exchange_specs(Settings(workload="agent"))
    assert own.path == "/"  # the agent builds its request per round
    with pytest.raises(ValueError):
        request_spec("retouch-tiles4")


def test_the_protocol_s_registration_decides_its_connections_and_rate() -> None:
    with pytest.raises(SpecError) as err:
        Settings(protocol="fec", connection="0rtt")
    assert err.value.field == "connection" and "h3" in err.value.reason
    assert Settings(protocol="fec").for_end(20e6).fec_rate_bps == 20e6
    assert Settings(protocol="h2").for_end(20e6).fec_rate_bps is None
    assert kinds.traits_of(kinds.protocol("h2")) >= {"h2", "tcp"}


def test_a_workload_runs_over_the_protocols_it_names() -> None:
    with pytest.raises(SpecError) as err:
        Settings(protocol="fec", workload="agent")  # its client resumes sessions: not fec
    assert err.value.field == "protocol" and "h2, h3" in err.value.reason
    assert Settings(protocol="h3", workload="agent").workload == "agent"
    assert "bounded" in kinds.traits_of(kinds.workload("asr"))
    assert "bounded" not in kinds.traits_of(kinds.workload("stream"))

"""``testbed abuse``'s pure parts: attack names, recovery time, the table, the command that
runs an older source tree's server (the attacks themselves: tests/test_abuse_attacks.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.bench.abuse import (
    ATTACKS,
    AttackResult,
    Probe,
    ProcSampler,
    markdown,
    parse_attacks,
    recovery_s,
    render,
    server_command,
)
from tbcore.errors import SpecError

pytestmark = pytest.mark.timeout(60)

QUIET = {"h2": 0.040, "h3": 0.060}


def test_attack_names_parse_and_unknown_ones_are_one_line_errors() -> None:
    assert [a.name for a in parse_attacks("slowloris, rapid-reset")] == ["slowloris", "rapid-reset"]
    with pytest.raises(SpecError, match="not one of"):
        parse_attacks("slowloris,x" * 10_000)
    with pytest.raises(SpecError, match="no attack"):
        parse_attacks(" , ")


def test_every_attack_is_bounded_in_time() -> None:
    assert all(0 < a.duration_s <= 30 for a in ATTACKS.values())


def test_recovery_is_the_start_of_the_first_run_of_good_probes() -> None:
    slow = [Probe(1.0, "h2", None), Probe(5.5, "h2", 0.5)]  # during, then still slow
    good = [Probe(6.0 + i / 2, "h3" if i % 2 else "h2", 0.05) for i in range(4)]
    assert recovery_s(slow + good, QUIET, attack_end=5.0) == pytest.approx(1.0)
    assert recovery_s(good, QUIET, attack_end=5.0) == 0.0  # back at once
    assert recovery_s(slow + good[:3], QUIET, attack_end=5.0) is None  # no full run yet
    noisy = good[:2] + [Probe(7.0, "h2", 1.0)] + [Probe(7.5 + i, "h2", 0.05) for i in range(4)]
    assert recovery_s(noisy, QUIET, attack_end=5.0) == pytest.approx(2.5)


def test_the_table_has_one_row_per_result() -> None:
    result = AttackResult(attack="slowloris", server="this", outcome="0 of 200 held")
    result.quiet_s = dict(QUIET)
    result.during_s = {"h2": [0.05, None], "h3": [0.07]}
    table = render([result, result])
    assert table.row_count == 2
    head, rule, *rows = markdown([result, result]).splitlines()
    assert len(rows) == 2 and head.count("|") == rule.count("|") == rows[0].count("|")
    assert "slowloris" in rows[0] and "0 of 200 held" in rows[0]


def test_the_sampler_reads_a_live_process_and_nothing_of_a_gone_one() -> None:
    import os

    sample = ProcSampler(os.getpid()).read()
    assert sample is not None and sample[1] > 0 and sample[2] > 0
    assert ProcSampler(2**22 + 7).read() is None


def test_server_command_puts_the_source_tree_first(tmp_path: Path) -> None:
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "__init__.py").write_text("")
    (tmp_path / "harness" / "cli.py").write_text("print(__file__)\n")
    out = subprocess.run(server_command(tmp_path), capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == str(tmp_path / "harness" / "cli.py")
    assert server_command(None) is None

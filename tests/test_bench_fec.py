"""``testbed bench fec``: the table's rows and their arithmetic (not the speed)."""

from __future__ import annotations

from harness.bench import fec as fecbench


def test_code_rows_round_trip_and_count(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    rows = fecbench._code_rows("audio", bytes(range(256)) * 1385, reps=1)
    assert [r["step"] for r in rows] == ["encode", "decode at 14 % loss"]
    assert rows[0]["k"] == 251 and rows[0]["blocks"] == 1 and 55 <= rows[0]["r"] <= 75
    assert all(float(r["cpu_s_per_mb"]) >= 0 and float(r["mbit_s"]) > 0 for r in rows)
    table = fecbench.format_table(rows)
    assert table.count("\n") == 3 and "| audio | 251 | 1 |" in table

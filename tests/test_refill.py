"""Columns a newer collection gives, added to stored rows (harness.collect.refill)."""

from __future__ import annotations

from pathlib import Path

from harness.collect.refill import missing_columns, refill
from harness.store.resultdir import ResultDir
from tbcore.runrow import RunRow

PLAN = dict(level="a", seq=0, block=0, position=0, warmup=False, link_seed=1)


def _result(tmp_path: Path) -> ResultDir:
    result = ResultDir.create(tmp_path, "fec")
    for i in range(2):
        run_id = f"000{i}-a-r{i}"
        result.fresh_run_dir(run_id)
        result.save_row(RunRow(run_id=run_id, **PLAN, rep=i, total_s=1.0 + i, valid=i == 0,
                               invalid_reason=None if i == 0 else "disturbance: x"))  # fmt: skip
    return result


def test_only_columns_the_row_lacks_are_taken() -> None:
    stored = {"total_s": 1.0, "valid": True, "retransmits": None}
    collected = {"total_s": 2.0, "valid": False, "retransmits": 4, "acks": None}
    assert missing_columns(stored, collected) == {"retransmits": 4}


def test_refill_adds_new_columns_keeps_judged_ones_and_names_runs_it_could_not_collect(
    tmp_path: Path,
) -> None:
    result = _result(tmp_path)

    def collect(run_dir: Path) -> RunRow:
        if run_dir.name.startswith("0001"):
            raise FileNotFoundError("client.pcapng")
        return RunRow(run_id=run_dir.name, **PLAN, rep=0, total_s=9.0, valid=False,
                      transmission_rounds=4)  # fmt: skip

    done = refill(result, collect)
    assert done.rows == 1 and done.columns == {"transmission_rounds"}
    assert list(done.failed) == ["0001-a-r1"] and "client.pcapng" in done.line()
    rows = {r["run_id"]: r for r in result.rows()}
    first = rows["0000-a-r0"]
    assert first["transmission_rounds"] == 4
    assert first["total_s"] == 1.0 and first["valid"] is True  # as judged when it ran
    assert rows["0001-a-r1"].get("transmission_rounds") is None
    frame = result.frame()
    assert frame.set_index("run_id").loc["0000-a-r0", "transmission_rounds"] == 4
    assert refill(result, collect).rows == 0  # nothing left to add

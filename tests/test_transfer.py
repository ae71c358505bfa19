"""The row of an upload over two paths (harness.collect.transfer): drawn failures, whose
undelivered trials are outcomes, and the bound over the paths they left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.collect.transfer import transfer_part
from harness.spec import experiment as specmod
from tbcore.records import TransferRecord

SPEC = """
name = "m"
question = "q?"
[fixed]
topology = "dual"
link = "rtt=40ms,rate=20mbit"
link_b = "rtt=40ms,rate=10mbit"
exit_link = "rtt=2ms,rate=24mbit"
workload = "upload"
size = 5120
chunk_size = 640
multipath = "duplicate"
[factor]
name = "m"
settings = ["path_failures"]
levels = [{ name = "a" }, { name = "b", path_failures = "link=10%,link_b=5%,exit_link=2%" }]
"""


def _part(tmp_path: Path, level: str, end_s: float | None, down: list[str] | None) -> object:
    spec = specmod.loads(SPEC).level(level)
    record = TransferRecord(
        mode="duplicate", size_bytes=5120, start_s=10.0, end_s=end_s, bytes_sent=5120,
        sha256_ok=end_s is not None, error=None if end_s else "no path opened: x",
    )  # fmt: skip
    (tmp_path / "records.jsonl").write_text(record.to_json() + "\n")
    if down is not None:
        (tmp_path / "failures.json").write_text(json.dumps({"seed": 3, "down": down}))
    return transfer_part(spec.settings, spec.topology, tmp_path, None, [])


def test_a_trial_that_delivered_nothing_is_an_outcome_not_an_error(tmp_path: Path) -> None:
    part = _part(tmp_path, "b", None, ["link", "link_b"])
    assert part.error is None and part.sha256_ok is None
    assert part.columns["delivered"] is False and part.columns["paths_down"] == "link+link_b"
    assert part.columns["bound_s"] is None and part.columns["total_s"] is None


def test_a_delivered_trial_is_bounded_by_the_paths_left(tmp_path: Path) -> None:
    part = _part(tmp_path, "b", 10.01, ["link"])
    assert part.error is None and part.columns["delivered"] is True
    assert part.columns["bound_s"] == pytest.approx(5120 * 8 / 10e6)  # link_b alone
    nothing = _part(tmp_path, "b", 10.01, [])
    assert nothing.columns["paths_down"] == "none"
    assert nothing.columns["bound_s"] == pytest.approx(5120 * 8 / 20e6)  # the faster copy


def test_without_drawn_failures_an_undelivered_upload_is_an_error(tmp_path: Path) -> None:
    part = _part(tmp_path, "a", None, None)
    assert part.error == "no path opened: x" and "delivered" not in part.columns

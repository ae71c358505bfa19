"""A report never ends in a traceback (issue 27): reports built from synthetic run directories
for every workload x topology x link kind x protocol the spec accepts.

Each combination the experiment-file loader accepts becomes a level of the report of its
link kind; each level gets a
run whose files are what a real run leaves (run.json, the client's records of the
workload's record kind, the server's events) and whose row is made by the real collection
(harness.collect.row.collect_run: labels, bounds, below_bound), then one report per link
kind. Every report must be written whole: every section there, none of them "not
computed".
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness.collect.row import collect_run
from harness.plan.planner import plan_for
from harness.report.build import build_report
from harness.spec import experiment as specmod
from harness.store.resultdir import ResultDir
from tbcore import agent, kinds
from tbcore.errors import SpecError
from tbcore.records import AgentRound, RequestRecord, ServerEvent, TransferRecord

LINK_KINDS: dict[str, dict[str, str]] = {
    "rate": {"link": "rtt=40ms,up.rate=20mbit,down.rate=100mbit"},
    "norate": {"link": "rtt=40ms"},
    "loss": {"link": "rtt=40ms,rate=20mbit,down.loss=3%"},
    "ge": {"link": "rtt=40ms,rate=20mbit,down.gemodel=3%/20%/100%/0%"},
    "air": {"link": "rtt=30ms,air=54mbit/6mbit"},
    "relay": {"topology": "relay", "link": "rtt=40ms,rate=20mbit", "near_link": "rtt=2ms"},
    "dual": {"topology": "dual", "link": "rtt=40ms,rate=20mbit", "link_b": "rtt=40ms,rate=10mbit"},
    "dual-failover": {
        "topology": "dual", "link": "rtt=40ms,rate=20mbit", "link_b": "rtt=40ms,rate=10mbit",
        "outage_at": "1s", "multipath": "duplicate",
    },
    "dual-migrate": {
        "topology": "dual", "link": "rtt=40ms,rate=20mbit", "link_b": "rtt=40ms,rate=10mbit",
        "outage_at": "1s",
    },
    "remote": {"link": "rtt=40ms,rate=20mbit"},
}  # fmt: skip
"""The kinds of path a report must cope with (``remote``: the same link as measured on a real
path: backend real, the clock columns of a server on another host)."""

WORKLOAD_SETTINGS: dict[str, dict[str, Any]] = {
    "multi": {"streams": "result,tts"},
    "stream": {"chunks": 10},
    "agent": {"agent_rounds": 2, "agent_model": "50ms", "agent_local": "10ms"},
    "upload": {"size": "1MB", "multipath": "split"},
}
"""What a workload needs besides its name to be accepted."""

T0 = 1000.0
"""CLOCK_MONOTONIC of a synthetic run's start."""


def _toml(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value).lower()


def _spec_text(name: str, levels: list[dict[str, Any]]) -> str:
    keys = sorted({k for lv in levels for k in lv if k != "name"})
    lines = [
        f'name = "{name}"',
        'question = "Does every section of the report come out?"',
        "repetitions = 1",
        "seed = 3",
        "[factor]",
        'name = "case"',
        f"settings = {json.dumps(keys)}",
    ]
    for level in levels:
        lines.append("[[factor.levels]]")
        lines += [f"{k} = {_toml(v)}" for k, v in level.items()]
    return "\n".join(lines) + "\n"


def accepted_levels(link_kind: str) -> list[dict[str, Any]]:
    """Every workload x protocol the loader accepts on ``link_kind``, one level each."""
    link = LINK_KINDS[link_kind]
    out = []
    for workload in kinds.WORKLOADS:
        for protocol in kinds.PROTOCOLS:
            level = {"name": f"{workload}-{protocol}", "protocol": protocol, "workload": workload}
            level["timeout"] = "30s"
            level |= WORKLOAD_SETTINGS.get(workload, {}) | link
            if link.get("topology") != "dual" or protocol == "h3":  # h3 migrates (no multipath)
                level.pop("multipath", None)
            try:
                twin = {**level, "name": "twin", "timeout": "31s"}  # two levels: a factor
                specmod.loads(_spec_text("probe", [level, twin]))
            except SpecError:
                continue
            out.append(level)
    return out


# --- what a run leaves ----------------------------------------------------------------------


def _request_records(settings: Any, total_s: float) -> list[RequestRecord]:
    workload = kinds.workload(settings.workload)
    names = settings.stream_list or (settings.workload,)
    records = []
    for index, name in enumerate(names):
        chunks = settings.chunks if name == "stream" else None
        records.append(
            RequestRecord(
                request_id=index, protocol=settings.protocol, connection=settings.connection,
                workload=settings.workload, warmup=False, stream_id=4 * index,
                connect_start=T0, tcp_connected=T0 + 0.04, handshake_done=T0 + 0.08,
                request_first_byte=T0 + 0.08, request_last_byte=T0 + 0.1,
                response_first_byte=T0 + total_s / 2, response_last_byte=T0 + total_s,
                response_body_first_byte=T0 + total_s / 2,
                up_bytes=workload.up_bytes(settings), down_bytes=workload.down_bytes(settings),
                status=200, sha256_ok=True,
                chunk_times=None if chunks is None else
                [T0 + total_s / 2 + 0.02 * i for i in range(chunks)],
                stream_workload=name if settings.stream_list else None,
                stream_index=index if settings.stream_list else None,
            )
        )  # fmt: skip
    return records


def _agent_records(settings: Any, total_s: float) -> list[AgentRound]:
    rounds, step = settings.agent_rounds, total_s / settings.agent_rounds
    return [
        AgentRound(
            round=i, attempt=0, op_id=f"op{i}", redone=False, conn_index=0,
            new_connection=i == 0, start_s=T0 + i * step, local_s=0.01, encode_s=0.0,
            upload_s=step / 2, model_s=settings.agent_model_s, end_s=T0 + (i + 1) * step,
            round_s=step, upload_bytes=agent.RAW_SCREEN_BYTES, executed=True, sha256_ok=True,
        )
        for i in range(rounds)
    ]  # fmt: skip


def _transfer_records(settings: Any, total_s: float) -> list[TransferRecord]:
    size = kinds.workload(settings.workload).up_bytes(settings)
    return [
        TransferRecord(
            mode=settings.multipath, size_bytes=size, start_s=T0, end_s=T0 + total_s,
            bytes_sent=size, bytes_per_path=[size // 2, size - size // 2], sha256_ok=True,
        )
    ]  # fmt: skip


RECORDS = {
    "request": _request_records,
    "agent_round": _agent_records,
    "transfer": _transfer_records,
}


def _write_run(result: ResultDir, planned: Any, level: Any, remote: bool, total_s: float) -> None:
    run_dir = result.fresh_run_dir(planned.run_id)
    settings = level.settings
    (run_dir / "run.json").write_text(
        json.dumps(
            {
                "run": planned.to_dict(),
                "settings": settings.to_dict(),
                "link": str(level.topology.link_spec),
                "topology": level.topology.to_dict(),
                "backend": "real" if remote else "userspace",
                "clock_offset_s": 0.0,
                "started_utc": "2026-12-04T00:00:00+00:00",
            }
        )
    )
    kind = kinds.workload(settings.workload).records
    records = RECORDS[kind](settings, total_s)
    (run_dir / "records.jsonl").write_text("".join(r.to_json() + "\n" for r in records))
    events = [
        ServerEvent(t=T0 + 0.1, event="processing_start", proto=settings.protocol, stream=0),
        ServerEvent(t=T0 + 0.11, event="processing_end", proto=settings.protocol, stream=0),
    ]
    (run_dir / "server.jsonl").write_text("".join(e.to_json() + "\n" for e in events))
    if remote:
        (run_dir / "remote.json").write_text(
            json.dumps({"host": "lab2", "clock_offset_s": 0.5, "clock_error_s": 2e-4})
        )
    row = replace(collect_run(run_dir).row, valid=True, disturbance_s=1e-4)
    (run_dir / "row.json").write_text(json.dumps(row.to_dict()))  # runs.csv: once, at the end


def build_matrix_report(root: Path, link_kind: str) -> tuple[Path, int]:
    """One report of every case accepted on ``link_kind`` (one link kind a report: a column
    that is empty for every run, such as the rates of a link without one, is a case)."""
    levels = accepted_levels(link_kind)
    if len(levels) == 1:  # a factor needs two levels
        levels.append({**levels[0], "name": f"{levels[0]['name']}-twin", "timeout": "31s"})
    spec = specmod.loads(_spec_text(f"matrix-{link_kind}", levels))
    result = ResultDir.create(root, spec.name)
    plan = plan_for(spec)
    result.write_manifest({"resolved": spec.resolved(), "plan": [r.to_dict() for r in plan]})
    for index, planned in enumerate(plan):
        remote = link_kind == "remote"
        total = 0.5 + 0.01 * index
        _write_run(result, planned, spec.level(planned.level), remote, total)
    result.write_tables()
    return build_report(result.path), len(levels)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("link_kind", list(LINK_KINDS))
def test_every_accepted_case_gets_a_whole_report(tmp_path: Path, link_kind: str) -> None:
    report, levels = build_matrix_report(tmp_path, link_kind)
    assert levels > 0, f"no combination accepted on {link_kind}"
    text = report.read_text()
    for heading in ("## Answer", "## Per level", "## Validity", "## How it was run"):
        assert heading in text
    assert "## Not computed" not in text, text[text.find("## Not computed") :]
    assert not (report.parent / "report_errors.txt").exists()


def test_a_section_that_fails_is_one_line_and_the_rest_is_written(tmp_path: Path) -> None:
    report, _ = build_matrix_report(tmp_path, "dual")
    runs = report.parent / "runs"
    for run_dir in runs.iterdir():  # a row that no table expects: a field of the wrong type
        row = json.loads((run_dir / "row.json").read_text())
        (run_dir / "row.json").write_text(json.dumps({**row, "total_s": "soon"}))
    text = build_report(report.parent).read_text()
    assert "## Answer" in text and "## How it was run" in text
    assert "## Not computed" in text
    assert (report.parent / "report_errors.txt").read_text().count("Traceback") >= 1

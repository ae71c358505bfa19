"""The record model: written and read by the same classes, strict both ways."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tbcore.records import (
    NO_APPLIED_LOG,
    RECORD_TYPES,
    AppliedLog,
    AppliedRecord,
    QuicRecovery,
    RecordError,
    RequestRecord,
    ServerEvent,
    TcpInfo,
    TcpSample,
    read_csv,
    read_jsonl,
    tcp_info_of,
    write_csv,
    write_jsonl,
)
from tbcore.sampler import Sampler


def request(**values: object) -> RequestRecord:
    head = dict(request_id=0, protocol="h2", connection="new", workload="asr", warmup=False)
    return RequestRecord(**{**head, **values})


def test_min_rtt_from_either_stack_in_seconds() -> None:
    # the stacks report min_rtt in µs (TCP_INFO tcpi_min_rtt, aioquic's _rtt_min * 1e6)
    assert request(tcp_info=tcp_info_of({"min_rtt_us": 200_350, "x": 1})).min_rtt_s == 0.20035
    assert request(quic=QuicRecovery(min_rtt_us=201_000, packets_lost=3)).min_rtt_s == 0.201
    assert request(quic=QuicRecovery(packets_lost=3)).retransmits == 3
    assert request().min_rtt_s is None


def test_jsonl_round_trip_with_nested_snapshots(tmp_path: Path) -> None:
    records = [request(tcp_info=TcpInfo(snd_cwnd=10, min_rtt_us=5)), request(request_id=1)]
    path = tmp_path / "records.jsonl"
    write_jsonl(path, records)
    assert read_jsonl(path, RequestRecord) == records
    assert json.loads(path.read_text().splitlines()[0])["schema"] == "request/4"


def test_jsonl_is_readable_by_others_as_open_makes_it(tmp_path: Path) -> None:
    """A container's root writes ./results; the lab user reads it: 0644 under umask 022."""
    old = os.umask(0o022)
    try:
        write_jsonl(tmp_path / "records.jsonl", [request()])
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "records.jsonl").stat().st_mode) == 0o644


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"colour": 1}, "colour: unknown field"),
        ({"schema": "request/1"}, "schema"),
        ({"tcp_info": {"nosuch": 1}}, "tcp_info.nosuch: unknown field"),
    ],
)
def test_an_unknown_or_old_field_fails_loudly(tmp_path: Path, change: dict, message: str) -> None:
    path = tmp_path / "records.jsonl"
    data = {**request().to_dict(), **change}
    path.write_text(json.dumps(data) + "\n" + request().to_json() + "\n")
    with pytest.raises(RecordError, match=message):
        read_jsonl(path, RequestRecord)


def test_a_missing_field_fails_loudly() -> None:
    data = request().to_dict()
    del data["sha256_ok"]
    with pytest.raises(RecordError, match="sha256_ok: missing"):
        RequestRecord.from_dict(data)


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text(ServerEvent(t=1.0, event="error").to_json() + '\n{"t": 2, "ev')
    assert [e.t for e in read_jsonl(path, ServerEvent)] == [1.0]


def test_sampler_csv_is_a_typed_record_file(tmp_path: Path) -> None:
    sampler = Sampler(TcpSample, hz=1000.0)
    sampler.rows.append((1.5, "7", *(3 if c == "snd_cwnd" else None for c in sampler.columns)))
    path = tmp_path / "samples.csv"
    sampler.write_csv(path)
    (row,) = read_csv(path, TcpSample)
    assert (row.t, row.request_id, row.snd_cwnd, row.rtt_us) == (1.5, "7", 3, None)
    write_csv(path, TcpSample, [row])
    assert read_csv(path, TcpSample) == [row]


def test_every_record_type_documents_every_field() -> None:
    from dataclasses import fields

    for cls in RECORD_TYPES.values():
        for item in fields(cls):
            assert item.metadata.get("doc"), f"{cls.__name__}.{item.name}"


def test_an_applied_log_appends_typed_records_as_they_come(tmp_path: Path) -> None:
    path = tmp_path / "client-applied.jsonl"
    log = AppliedLog(path, "client")
    log.write("tcp", {"cc": "reno", "window_clamp": 65536}, conn=0)
    assert len(path.read_text().splitlines()) == 1  # on disk before the run ends
    log.write("workload", {"chunks": [4]})
    log.close()
    first, second = read_jsonl(path, AppliedRecord)
    assert (first.role, first.layer, first.conn, first.values["cc"]) == ("client", "tcp", 0, "reno")
    assert second.values == {"chunks": [4]} and second.conn is None
    with pytest.raises(RecordError):
        AppliedRecord(0.0, "client", "colour", None, {})
    NO_APPLIED_LOG.write("tcp", {"cc": "reno"})  # keeps nothing, raises nothing


def test_an_agent_round_of_the_version_before_tasks_reads_without_them() -> None:
    """agent_round/1 (before agent_tasks and task_success): read with task and
    task_outcome None; a field it never had is still refused."""
    from tbcore.records import AgentRound

    line = {"round": 0, "attempt": 0, "op_id": "t-a0-r0", "redone": False,
            "schema": "agent_round/1"}  # fmt: skip
    before = set(AgentRound.field_names()) - {"task", "task_outcome", "warmup"}
    line.update({name: None for name in before if name not in line}, warmup=False)
    old = AgentRound.from_dict(line)
    assert (old.task, old.task_outcome) == (None, None)
    with pytest.raises(RecordError, match="task: missing"):
        AgentRound.from_dict({**line, "schema": "agent_round/2"})
    with pytest.raises(RecordError, match="agent_round/0"):
        AgentRound.from_dict({**line, "schema": "agent_round/0"})

"""The agent workload's client: rounds of screenshot up, action back (tbcore.agent).

``async def run_agent(config) -> list[AgentRound]``: ``settings.warmup_requests`` warm-up
rounds then ``settings.agent_rounds`` measured ones over ``settings.protocol``;
``connection = "new"`` opens a connection per round, ``reused`` one for the task
(reopened after a loss), ``0rtt`` (h3) a connection per round with the request as early
data. A round is lost when its action has not arrived ``round_timeout`` after its
request began (or its connection fails); ``recovery`` then decides what is done again.
``outage_mode = "break"`` (with ``outage_after_round = k``): round k+1 goes out marked
``break=1``, the server executes it and resets the connection instead of replying; the
client, told by the reset, waits ``outage`` and goes on over a new connection (the
chapter's §12.5.2: round 10's reply lost, 1 s to reconnect).
``agent_tasks`` tasks of ``agent_rounds`` rounds follow each other; with ``task_success``
each attempt's last round goes out marked ``last=1``, the model's action says whether the
attempt succeeded, and a failed one is done again whole (independent attempts, §12.5.2).
Each acknowledged round is printed as ``progress N`` (N rounds acknowledged) on
stdout (the harness times its link events by it). The rounds go to ``config.records_path`` as JSONL.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import secrets
import sys
import time
from typing import Any

import uvloop

from clients import h2client, h3native
from clients.api import _one_line, _Run
from clients.config import ClientConfig
from clients.workload import RequestSpec
from tbcore.agent import TASK_FAILED, TASK_OUTCOMES, RoundPlan, encode_screen, render_screen
from tbcore.records import AgentRound, write_jsonl

MAX_LOSSES = 20
"""A task that loses more rounds than this gives up (the path is gone, not interrupted)."""
CLOSE_WAIT_S = 1.0
PROGRESS_MARK = "progress"


async def _local_work(rec: AgentRound, index: int, local_s: float, screen: str) -> Any:
    """Capture (render) the screen, then the rest of the local work's duration."""
    t0 = time.monotonic()
    img = render_screen(index, screen=screen)
    rec.render_s = time.monotonic() - t0
    left = local_s - (time.monotonic() - t0)
    if left > 0:
        await asyncio.sleep(left)
    rec.local_s = time.monotonic() - t0
    return img


def _abort(conn: Any) -> None:
    """Drop a connection that lost its round at once (no graceful close on a dead path)."""
    if conn is None:
        return
    if isinstance(conn, h3native.NativeH3Client):
        conn.abort()
        return
    with contextlib.suppress(OSError, RuntimeError):  # a transport already gone
        if not isinstance(conn, h2client.H2Client):
            conn.protocol.close()
        conn.transport.abort() if hasattr(conn.transport, "abort") else conn.transport.close()


async def _close(conn: Any) -> None:
    if conn is None:
        return
    with contextlib.suppress(OSError, TimeoutError):  # the round's result is already kept
        await asyncio.wait_for(conn.close(), CLOSE_WAIT_S)
    transport = getattr(conn, "transport", None)
    if transport is not None:
        with contextlib.suppress(OSError, RuntimeError):  # a transport already gone
            transport.abort() if hasattr(transport, "abort") else transport.close()


def _record_agent(run: _Run, plan: RoundPlan, warmup: int, per_round: bool) -> None:
    """The agent layer of what the client puts in force (tbcore.records.AppliedRecord)."""
    settings = run.config.settings
    run.applied.write(
        "agent",
        {
            "agent_rounds": plan.per_task or plan.rounds - warmup,
            "agent_tasks": settings.agent_tasks,
            "task_success": settings.task_success,
            "warmup_requests": warmup,
            "agent_local": settings.agent_local_s,
            "screenshot": settings.screenshot,
            "screen": settings.screen,
            # the quality reaches a codec only (raw bytes have none)
            "screenshot_quality": None
            if settings.screenshot == "raw"
            else settings.screenshot_quality,
            "recovery": plan.recovery,
            # a break is the client's to mark and wait out; a blackout is the link's
            "outage_mode": settings.outage_mode if _breaks(settings) else None,
            "outage": settings.outage_s if _breaks(settings) else None,
            "round_timeout": settings.timeout_s,
            "timeout": settings.timeout_s,
            "connection": "per round" if per_round else "one",
        },
    )


async def run_agent(config: ClientConfig) -> list[AgentRound]:
    settings = config.settings
    timeout_s = settings.round_timeout_s or settings.timeout_s
    run = _Run(
        ClientConfig(**{**config.__dict__, "settings": settings.replace(timeout_s=timeout_s)})
    )
    warmup = settings.warmup_requests
    total = warmup + settings.agent_tasks * settings.agent_rounds
    plan = RoundPlan(
        total,
        settings.recovery,
        token=secrets.token_hex(4),
        kept=warmup,
        per_task=settings.agent_rounds if settings.several_tasks else None,
    )
    rounds: list[AgentRound] = []
    conn: Any = None
    losses = 0
    after_loss = False
    per_round = settings.connection in ("new", "0rtt")
    closing: list[asyncio.Task[None]] = []
    _record_agent(run, plan, warmup, per_round)
    pending_break = _breaks(settings)
    try:
        while not plan.finished:
            index, op, redone = plan.next_round()
            rec = AgentRound(
                round=index,
                attempt=plan.attempt,
                op_id=op,
                redone=redone,
                warmup=index < warmup,
                task=None if index < warmup else plan.task,
            )
            last = plan.ends_attempt(index) and settings.task_success is not None
            if pending_break and plan.acked - warmup == settings.outage_after_round:
                rec.broken = True
                pending_break = False
            rounds.append(rec)
            rec.start_s = time.monotonic()
            img = await _local_work(rec, index, settings.agent_local_s, settings.screen)
            data, rec.encode_s = encode_screen(
                img, settings.screenshot, settings.screenshot_quality
            )
            rec.upload_bytes = len(data)
            run.specs = [
                RequestSpec(
                    "agent",
                    "POST",
                    f"/agent?op={op}&round={index}{'&break=1' if rec.broken else ''}"
                    f"{'&last=1' if last else ''}",
                    body=data,
                    expect_upload_sha256=hashlib.sha256(data).hexdigest(),
                )
            ]
            ok = await _one_round(run, rec, conn if not per_round else None, after_loss)
            conn = ok[1]
            if ok[0] and last and rec.task_outcome is None:
                # the server runs without task_success: the round did not end the attempt
                ok = (False, ok[1])
                rec.end_s = rec.round_s = None
                rec.error = "bad action: no task verdict on an attempt's last round"
            if ok[0]:
                plan.acknowledged()
                after_loss = False
                if plan.ends_attempt(index):
                    if rec.task_outcome == TASK_FAILED:
                        plan.task_failed()
                    else:
                        plan.task_done()
                if plan.acked > warmup:  # measured rounds acknowledged
                    print(f"{PROGRESS_MARK} {plan.acked - warmup}", flush=True)
            else:
                rec.detected_s = time.monotonic()
                _abort(conn)
                conn = None
                losses += 1
                after_loss = True
                plan.lost()
                print(f"lost {index}: {rec.error}", flush=True)
                if losses > MAX_LOSSES:
                    break
                if rec.broken:
                    # the time to notice the break and reconnect (the chapter's 1 s)
                    await asyncio.sleep(settings.outage_s)
                    rec.resumed_s = time.monotonic()
            if per_round and conn is not None:
                # the next round needs the action, not the old connection's close
                closing.append(asyncio.create_task(_close(conn)))
                conn = None
    finally:
        await _close(conn)
        for task in closing:
            await task  # _close handles the conditions a close can end in
        if run.native is not None:
            await run.native.stop()
        if config.records_path is not None:
            write_jsonl(config.records_path, rounds)
        if run.keylog is not None:
            run.keylog.close()
        run.applied.close()
    return rounds


def _breaks(settings: Any) -> bool:
    """Whether this task's outage is a connection break the client marks (outage_mode)."""
    return settings.outage_after_round is not None and settings.outage_mode == "break"


async def _one_round(run: _Run, rec: AgentRound, conn: Any, after_loss: bool) -> tuple[bool, Any]:
    """Send the round on ``conn`` (or a new connection); (acknowledged, the connection)."""
    settings = run.config.settings
    record = run.new_record(rec.round)
    if conn is None:
        early = settings.connection == "0rtt" and run.ticket is not None
        try:
            conn = await asyncio.wait_for(run.connect(early=early), settings.timeout_s)
        except Exception as err:
            rec.error = f"connect: {_one_line(err)}"
            return False, None
        rec.new_connection = True
        if not early and conn.handshake_done is not None:
            rec.handshake_s = conn.handshake_done - conn.connect_start
            if after_loss:
                rec.reconnected_s = conn.handshake_done
    else:
        rec.new_connection = False
    rec.conn_index = run.conn_index
    collector = None
    try:
        collector = await conn.request(run.specs[0], record, settings.timeout_s)
    except Exception as err:
        rec.error = _one_line(err)
    if isinstance(conn, h2client.H2Client):
        if conn.session is not None:
            run.session = conn.session
    elif conn.protocol.tickets:
        run.ticket = conn.protocol.tickets[-1]
    if rec.new_connection and rec.handshake_s is None and conn.handshake_done is not None:
        rec.handshake_s = conn.handshake_done - conn.connect_start
        if after_loss:
            rec.reconnected_s = conn.handshake_done
    first, last, done = (
        record.request_first_byte,
        record.request_last_byte,
        record.response_last_byte,
    )
    if first is not None and last is not None:
        rec.upload_s = last - first
    if last is not None and done is not None:
        rec.reply_s = done - last
    rec.sha256_ok = record.sha256_ok
    if rec.error is None and record.error is not None:
        rec.error = record.error
    if rec.error is not None or collector is None or done is None:
        rec.error = rec.error or "no action"
        return False, conn
    try:
        action = json.loads(collector.body)
        rec.action = action["action"]
        rec.model_s = float(action["model_s"])
        verdict = action.get("task")
        if verdict is not None and verdict not in TASK_OUTCOMES:
            raise ValueError(f"task verdict {verdict!r}")
        rec.task_outcome = verdict
    except (ValueError, KeyError, TypeError) as err:
        rec.error = f"bad action: {_one_line(err)}"
        return False, conn
    rec.executed = collector.headers.get("x-agent-executed") == "1"
    rec.end_s = done
    rec.round_s = done - rec.start_s  # type: ignore[operator]
    return True, conn


def run_agent_sync(config: ClientConfig) -> list[AgentRound]:
    return uvloop.run(run_agent(config))


def main_exit(rounds: list[AgentRound], rounds_wanted: int) -> int:
    """0 when every measured round (``rounds_wanted``: of all tasks) was acknowledged."""
    acked = sum(1 for r in rounds if r.end_s is not None and not r.warmup)
    finished = len({r.round for r in rounds if r.end_s is not None and not r.warmup}) >= (
        rounds_wanted
    )
    if not finished:
        print(f"testbed client: agent task unfinished ({acked} rounds acked)", file=sys.stderr)
        return 1
    return 0

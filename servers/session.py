"""Per-stream request/response handling shared by the HTTP/2 and HTTP/3 server edges.

:class:`ExchangeStreams` is mixed into each connection protocol. It keeps one
:class:`servers.app.Exchange` per request stream, logs the request's life (first byte, body,
last byte, truncation, reset), starts one response task per stream and paces streamed
chunks. The protocol edges keep what is protocol-specific: parsing frames or QUIC events,
refusing a bad head, and writing the response (``_respond``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from proto.priority import Priority, Scheduler, parse_priority
from servers import app
from servers.context import ServerContext
from tbcore.workloads import stream_chunk

BREAK_REASON = "testbed: connection break (outage_mode break)"
"""Why a marked agent round's connection was reset (servers.app ResponsePlan.reset)."""
MAX_LOGGED_PRIORITY_UPDATES = 256
"""PRIORITY_UPDATEs logged per connection: the first ones say what the client asked for; a
flood of them (bounded per 10 s by the abuse guard) must not fill the disk."""


async def sleep_at_least(seconds: float) -> None:
    """Sleep ``seconds`` of CLOCK_MONOTONIC, the clock the server's events are stamped with:
    uvloop's timers count whole milliseconds from the loop's cached time, so one
    ``asyncio.sleep`` can end up to a millisecond early (measured: 29.39 ms of a 30 ms
    processing sleep), and a processing time is a lower bound of the model's."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        await asyncio.sleep(left)


class ExchangeStreams:
    """The request streams of one connection. Subclasses set ``proto`` and ``_respond``, and
    ``_sender_state`` and ``_sender_drained`` if they sample their responses."""

    proto: str
    ctx: ServerContext
    conn_id: int

    def _init_streams(self, ctx: ServerContext, conn_id: int) -> None:
        self.ctx = ctx
        self.conn_id = conn_id
        self.exchanges: dict[int, app.Exchange] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.started: set[int] = set()
        self.scheduler = Scheduler(ctx.config.settings.send_policy)
        """Send order of this connection's response streams (proto.priority)."""
        self.tile_events: dict[int, asyncio.Queue[int]] = {}
        """Tiled uploads: indices of the tiles that have arrived, for the response task."""
        self.cancelled_at: dict[int, float] = {}
        """When the peer cancelled a response stream (RST_STREAM / STOP_SENDING)."""
        self.priority_updates = 0
        """PRIORITY_UPDATE frames received on this connection."""

    async def _respond(self, stream_id: int, plan: app.ResponsePlan) -> None:
        raise NotImplementedError

    # -- requests ------------------------------------------------------------------------
    def _parse_head(self, stream_id: int, headers: Any, now: float) -> app.RequestHead | None:
        """The request head, or None (logged) when it is malformed: the edge resets the
        stream with its protocol's error code."""
        try:
            return app.RequestHead.from_headers(headers)
        except ValueError as err:
            self._log("error", stream=stream_id, now=now, reason=f"bad request head: {err}")
            return None

    def _open_exchange(
        self, stream_id: int, head: app.RequestHead, now: float, stream_ended: bool
    ) -> None:
        """A request head arrived: start its exchange; answer at once if it is refused."""
        exchange = app.Exchange(head=head, config=self.ctx.app_config)
        self.exchanges[stream_id] = exchange
        priority = parse_priority(head.priority) if head.priority is not None else None
        self.scheduler.add(stream_id, priority)
        self._log_request_head(stream_id, head, now)
        if exchange.early is not None and not stream_ended:
            self._start_response(stream_id, exchange.early, now)
        elif exchange.tiles:
            self.tile_events[stream_id] = asyncio.Queue()
            self._start_response(stream_id, exchange.tiled_plan(), now)

    def _on_data(self, stream_id: int, data: bytes, now: float) -> None:
        exchange = self.exchanges.get(stream_id)
        if exchange is None or exchange.early is not None:
            return
        if exchange.received_bytes == 0 and data:
            self._log("request_body_first_byte", stream=stream_id, now=now)
        plan = exchange.feed(data)
        if plan is not None:
            self._start_response(stream_id, plan, now)
        elif exchange.tiles:
            for index in exchange.new_tiles():
                self._log("tile_received", stream=stream_id, now=now, index=index)
                self.tile_events[stream_id].put_nowait(index)

    def _on_end(self, stream_id: int, now: float) -> None:
        exchange = self.exchanges.get(stream_id)
        if exchange is None or exchange.finished:
            return
        plan = exchange.finish()
        self._log_request_end(stream_id, exchange, now)
        if exchange.truncated:
            self._log_truncated(stream_id, exchange, now, "stream ended early")
        self._start_response(stream_id, plan, now)

    def _on_priority_update(self, stream_id: int, value: bytes | str, now: float) -> None:
        """RFC 9218 section 7: a PRIORITY_UPDATE for a request stream."""
        priority: Priority = parse_priority(value)
        kept = self.scheduler.update(stream_id, priority)
        self.priority_updates += 1
        if not kept or self.priority_updates > MAX_LOGGED_PRIORITY_UPDATES:
            return  # the frame budget bounds how many come; the log keeps the first ones
        self._log(
            "priority_update",
            stream=stream_id,
            now=now,
            urgency=priority.urgency,
            incremental=priority.incremental,
        )

    def _on_cancel(self, stream_id: int, error_code: int, now: float, how: str) -> None:
        """The peer cancelled a response (HTTP/2 RST_STREAM, HTTP/3 STOP_SENDING): the server
        learns it now; the response task stops producing and sending."""
        if stream_id in self.cancelled_at:
            return
        self.cancelled_at[stream_id] = now
        self._log("stream_cancelled", stream=stream_id, now=now, how=how, error_code=error_code)
        self._stop_task(stream_id)

    def _stop_task(self, stream_id: int) -> None:
        """Cancel the stream's response task, if it still runs."""
        task = self.tasks.pop(stream_id, None)
        if task is not None:
            task.cancel()

    def _truncate(self, stream_id: int, exchange: app.Exchange, now: float, reason: str) -> None:
        """An upload still short of its length ends here: logged as truncated, once."""
        if not exchange.finished and exchange.truncated:
            exchange.finished = True
            self._log_truncated(stream_id, exchange, now, reason)

    def _on_reset(self, stream_id: int, error_code: int, now: float) -> None:
        self._log("stream_reset", stream=stream_id, now=now, error_code=int(error_code))
        if stream_id in self.started and stream_id in self.tasks:
            self._on_cancel(stream_id, int(error_code), now, "reset")
        exchange = self.exchanges.get(stream_id)
        if exchange is not None:
            self._truncate(stream_id, exchange, now, "stream reset by peer")
        self._stop_task(stream_id)

    def _truncate_open(self, now: float, reason: str) -> None:
        """The connection is going: every upload still short of its length is truncated."""
        for stream_id, exchange in self.exchanges.items():
            self._truncate(stream_id, exchange, now, reason)

    def _close_streams(self, now: float) -> None:
        """The connection closed: log the truncated uploads and cancel every response."""
        self._truncate_open(now, "connection closed")
        for task in self.tasks.values():
            task.cancel()

    def _log_request_head(self, stream_id: int, head: app.RequestHead, now: float) -> None:
        """``request_first_byte``: the request's head arrived."""
        self._log(
            "request_first_byte",
            stream=stream_id,
            now=now,
            method=head.method,
            path=head.path,
            content_length=head.content_length,
            priority=head.priority,
        )

    def _log_request_end(
        self, stream_id: int, exchange: app.Exchange, now: float, **details: Any
    ) -> None:
        """``request_last_byte``: the request's body is complete (``details``: the edge's own
        figures)."""
        self._log(
            "request_last_byte",
            stream=stream_id,
            now=now,
            received_bytes=exchange.received_bytes,
            upload_sha256=exchange.upload_sha256 if exchange.received_bytes else None,
            **details,
        )

    def _log_truncated(
        self, stream_id: int, exchange: app.Exchange, now: float, reason: str
    ) -> None:
        self._log(
            "upload_truncated",
            stream=stream_id,
            now=now,
            received_bytes=exchange.received_bytes,
            content_length=exchange.head.content_length,
            reason=reason,
        )

    # -- responses -------------------------------------------------------------------------
    def _start_response(self, stream_id: int, plan: app.ResponsePlan, now: float) -> None:
        if stream_id in self.started:
            return
        self.started.add(stream_id)
        if plan.error is not None:
            self._log("error", stream=stream_id, now=now, status=plan.status, reason=plan.error)
        task = asyncio.get_running_loop().create_task(self._respond(stream_id, plan))
        self.tasks[stream_id] = task
        task.add_done_callback(lambda t, sid=stream_id: self._response_done(sid, t))

    def _response_done(self, stream_id: int, task: asyncio.Task[None]) -> None:
        if self.tasks.get(stream_id) is task:
            del self.tasks[stream_id]
        exchange = self.exchanges.get(stream_id)
        if exchange is not None and exchange.finished:
            del self.exchanges[stream_id]
        if not task.cancelled() and task.exception() is not None:
            self._log("error", stream=stream_id, reason=f"response failed: {task.exception()!r}")

    def _break(self, stream_id: int) -> None:
        """Reset the whole connection in place of this stream's response (``plan.reset``):
        the round was executed, its reply is lost and the peer learns of it from the reset."""
        self._log("connection_break", stream=stream_id)
        self._reset_connection()

    def _reset_connection(self) -> None:
        """Drop the connection at once, telling the peer (TCP RST, QUIC CONNECTION_CLOSE)."""
        raise NotImplementedError

    async def _process(self, stream_id: int, plan: app.ResponsePlan) -> None:
        """The route's processing time, before the response starts."""
        if plan.processing_knob is not None or plan.applied:
            values = dict(plan.applied)
            if plan.processing_knob is not None:
                values[plan.processing_knob] = plan.processing_s
            self.ctx.applied.write("response", values, self.conn_id)
        if plan.processing_s > 0 and not plan.tiles:  # tiles: processed one by one
            self._log("processing_start", stream=stream_id)
            await sleep_at_least(plan.processing_s)
            self._log("processing_end", stream=stream_id)

    def _sender_state(self) -> dict[str, Any]:
        """The connection's sender state (TCP_INFO, QUIC recovery), sampled per response."""
        raise NotImplementedError

    def _sender_drained(self, state: dict[str, Any]) -> bool:
        """Whether ``state`` shows every byte sent acknowledged (its sampling then stops)."""
        raise NotImplementedError

    def _sample_response(self, stream_id: int) -> list[bool]:
        """Sample this response's sender state (see ``ServerContext.sample_response``)."""
        return self.ctx.sample_response(
            f"{self.proto}:{self.conn_id}:{stream_id}",
            lambda: {"proto": self.proto, **self._sender_state()},
            self._sender_drained,
        )

    def _still_reading(self, stream_id: int, plan: app.ResponsePlan) -> bool:
        """The response is complete but the request body is still coming and must stop."""
        exchange = self.exchanges.get(stream_id)
        return plan.stop_reading and exchange is not None and not exchange.finished

    def _log(
        self, event: str, *, stream: int | None = None, now: float | None = None, **kw: Any
    ) -> None:
        self.ctx.log.emit(event, proto=self.proto, conn=self.conn_id, stream=stream, now=now, **kw)

    async def _stream_chunks(
        self,
        stream_id: int,
        plan: app.ResponsePlan,
        send: Callable[[bytes, bool], asyncio.Future[None] | None],
        sent_bytes: Callable[[], int],
    ) -> None:
        """Produce the plan's chunks on their schedule and hand each to ``send``, which
        returns at once (production never waits for sending: docs/models.md section 2) with a
        future done when the chunk is in the transport, or None when it already is; logs
        ``chunk_produced`` and ``chunk_sent`` per chunk, and on a cancel
        ``chunk_production_stopped`` (the next index, never produced) and
        ``response_stopped`` (body bytes handed to the transport by then)."""
        index = -1
        pending: list[asyncio.Future[None]] = []

        def sent(future: asyncio.Future[None], index: int) -> None:
            if not future.cancelled() and future.exception() is None:
                self._log("chunk_sent", stream=stream_id, index=index)

        try:
            async for index, chunk, last, produced in paced_chunks(plan):
                # produced on schedule even when a late chunk held its sending (now=produced)
                self._log("chunk_produced", stream=stream_id, index=index, now=produced)
                future = send(chunk, last)
                if future is None:
                    self._log("chunk_sent", stream=stream_id, index=index)
                else:
                    future.add_done_callback(lambda f, i=index: sent(f, i))
                    pending.append(future)
            if pending:
                await asyncio.gather(*pending)
        except asyncio.CancelledError:
            self._log("chunk_production_stopped", stream=stream_id, next_index=index + 1)
            self._log("response_stopped", stream=stream_id, bytes=sent_bytes())
            raise

    async def _tiled_parts(
        self, stream_id: int, plan: app.ResponsePlan
    ) -> AsyncIterator[tuple[int, bytes, bool]]:
        """``(index, part, last)`` of a tiled response: part ``i`` once tile ``i`` has
        arrived and been processed (``processing_s / tiles``, one tile at a time)."""
        queue = self.tile_events[stream_id]
        per_tile_s = plan.processing_s / plan.tiles
        for index in range(plan.tiles):
            ready = await queue.get()
            self._log("processing_start", stream=stream_id, tile=ready)
            await sleep_at_least(per_tile_s)
            self._log("processing_end", stream=stream_id, tile=ready)
            start, end = plan.part_bounds(index)
            yield index, plan.body[start:end], index == plan.tiles - 1


async def paced_chunks(
    plan: app.ResponsePlan,
) -> AsyncIterator[tuple[int, bytes, bool, float]]:
    """``(index, chunk, last, produced)`` for a streamed plan, each yielded when it may be
    sent: at its due time ``start + index * chunk_interval_s + chunk_processing_s``
    (CLOCK_MONOTONIC, ``produced``), or for the plan's late chunk ``late_chunk_s`` after
    it, the chunks after it not before that (one ordered stream)."""
    start = time.monotonic()
    held_until = 0.0
    for index in range(plan.stream_chunks):
        due = start + index * plan.chunk_interval_s + plan.chunk_processing_s
        if index == plan.late_chunk_index:
            held_until = due + plan.late_chunk_s
        delay = max(due, held_until) - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        # a held chunk was produced on schedule; another when the loop got to it
        produced = due if held_until > due else time.monotonic()
        chunk = stream_chunk(index, plan.stream_chunk_bytes)
        yield index, chunk, index == plan.stream_chunks - 1, produced

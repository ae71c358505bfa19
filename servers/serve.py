"""Run the servers in the foreground: ``testbed serve``.

Prints one line per listener once it listens (``listening h2 tcp 127.0.0.1:8443``,
``listening h3 udp 127.0.0.1:8443``), flushes stdout, and serves until SIGINT or SIGTERM.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import signal
import sys
from typing import IO, Any, TextIO

import uvloop

from servers.config import ServerConfig
from servers.context import ServerContext
from servers.events import EventLog
from servers.h2server import start_h2
from servers.h3server import start_h3
from tbcore import kinds, workloads
from tbcore.records import AppliedLog, ServerSample
from tbcore.sampler import Sampler


async def _start_native(ctx: ServerContext, keylog: IO[str] | None) -> Any:
    del keylog  # GnuTLS writes the engine's secrets itself (SSLKEYLOGFILE)
    from servers.h3native import start_h3_native

    return await start_h3_native(ctx)


H3_STARTS = {"aioquic": start_h3, "ngtcp2": _start_native}
"""Who serves HTTP/3, by ``settings.quic_stack`` (tbcore.quicstack): aioquic in this process,
or the native engine (servers.h3native), a child of it."""
MEMORY_TRIM_INTERVAL_S = 5.0
"""How often freed heap is handed back to the kernel (see :func:`trim_memory_periodically`)."""


def _malloc_trim() -> Any:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to trim
        return None


async def trim_memory_periodically() -> None:
    """glibc keeps the heap that closed connections freed (OpenSSL's and aioquic's buffers)
    mapped, so the RSS after a flood stays at its peak; ``malloc_trim(0)`` (about a
    millisecond) returns it, so the server's RSS comes back near its baseline."""
    trim = _malloc_trim()
    if trim is None:
        return
    while True:
        await asyncio.sleep(MEMORY_TRIM_INTERVAL_S)
        trim(0)


async def serve(
    config: ServerConfig, out: TextIO = sys.stdout, stop: asyncio.Event | None = None
) -> None:
    """Start the listeners in ``config``, announce them on ``out``, serve until ``stop`` is
    set (or SIGINT/SIGTERM when ``stop`` is None)."""
    log = EventLog(config.log_path)
    sampler = Sampler(ServerSample, config.sample_hz) if config.samples_path is not None else None
    applied = AppliedLog(config.applied_path, "server")
    ctx = ServerContext(config=config, log=log, sampler=sampler, applied=applied)
    loop = asyncio.get_running_loop()
    keylog: IO[str] | None = None
    if config.keylog_path is not None:
        config.keylog_path.parent.mkdir(parents=True, exist_ok=True)
        keylog = config.keylog_path.open("a", buffering=1)
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)

    def on_exception(_loop: asyncio.AbstractEventLoop, context: dict) -> None:
        # TLS handshake failures (garbage on TCP) and similar: one log line, keep serving
        exc = context.get("exception")
        log.emit("error", reason=f"{context.get('message')}: {exc!r}"[:300])

    loop.set_exception_handler(on_exception)
    warm_workloads(config.settings)
    h2_server = h3_listener = fec_listener = None
    try:
        if config.h2_port is not None:
            h2_server, (host, port) = await start_h2(ctx)
            log.emit("listening", proto="h2", addr=f"{host}:{port}")
            print(f"listening h2 tcp {host}:{port}", file=out, flush=True)
        if config.h3_port is not None:
            h3_listener, (host, port) = await H3_STARTS[config.settings.quic_stack](ctx, keylog)
            log.emit("listening", proto="h3", addr=f"{host}:{port}")
            print(f"listening h3 udp {host}:{port}", file=out, flush=True)
        if config.fec_port is not None:
            # imported here: the FEC stack (numpy, raptorq) is 15 MB a server without a FEC
            # listener would carry for nothing
            from servers.fecserver import start_fec

            fec_listener, (host, port) = await start_fec(ctx)
            log.emit("listening", proto="fec", addr=f"{host}:{port}")
            print(f"listening fec udp {host}:{port}", file=out, flush=True)
        trimmer = loop.create_task(trim_memory_periodically())
        try:
            await stop.wait()
        finally:
            trimmer.cancel()
    finally:
        if fec_listener is not None:
            fec_listener.close()
        if h3_listener is not None:
            closed = h3_listener.close()
            if closed is not None:
                await closed
        if h2_server is not None:
            h2_server.close()
        await asyncio.sleep(0.05)
        if sampler is not None and config.samples_path is not None:
            sampler.stop()
            sampler.write_csv(config.samples_path)
            for key, failure in sampler.failures.items():
                log.emit("error", reason=f"in-flight sampling of {key} stopped: {failure}")
        log.close()
        applied.close()
        if keylog is not None:
            keylog.close()


def warm_workloads(settings: Any = None) -> None:
    """Read, verify and hash every fixed workload before listening: done lazily, the first
    request of a fresh server paid it (SHAKE-256 regeneration and SHA-256 of 5-30 MB: 140 ms
    measured under load, inside one stream's time while the other waited). A workload made by
    a codec (tbcore.workloads ``make``: 0.5-1 s to verify) only when the run's workload sends
    it, and then the decoded image's checksum too."""
    needed = _made_workloads(settings)
    for name, workload in workloads.WORKLOADS.items():
        if workload.make is not None and name not in needed:
            continue
        workloads.workload_bytes(name)
        workloads.workload_sha256(name)
    if needed:
        from tbcore import codec

        codec.photo_sha256()


def _made_workloads(settings: Any) -> set[str]:
    """The made workloads the run's workload (and its streams) send or receive."""
    if settings is None:
        return set()
    names = [settings.workload, *(getattr(settings, "stream_list", None) or ())]
    out = set()
    for name in names:
        route = kinds.WORKLOADS[name].route if name in kinds.WORKLOADS else None
        for payload in (route.upload, route.download) if route is not None else ():
            if payload and workloads.get_workload(payload).make is not None:
                out.add(payload)
    return out


def run(config: ServerConfig) -> int:
    uvloop.run(serve(config))
    return 0

"""Helpers for the tests that run our server as a subprocess and our client against it."""

from __future__ import annotations

from clients.config import ClientConfig
from servers.process import ServerProcess
from tbcore.records import RequestRecord


def client_config(server: ServerProcess, protocol: str, **kw: object) -> ClientConfig:
    """A client of ``protocol`` aimed at ``server``'s port for it, with a 20 s timeout."""
    return ClientConfig.of(protocol=protocol, port=server.ports[protocol], timeout_s=20.0, **kw)


def assert_workload_verified(record: RequestRecord, workload: str, chunks: int) -> None:
    """What every protocol's answer to one request of ``workload`` shows: a 200 whose body
    matched its checksum, an RTT sample, and for the stream workload all ``chunks`` chunks,
    none earlier than the server could have produced it."""
    assert record.error is None, record.error
    assert record.status == 200 and record.sha256_ok
    assert record.min_rtt_s is not None and 0 < record.min_rtt_s < 1.0
    if workload == "stream":
        assert record.chunk_times is not None and len(record.chunk_times) == chunks
        # chunk i is produced 20 ms * i + 12 ms after the request at the earliest: paced
        # production, not a burst (lateness under load can only make it later)
        for index, arrived in enumerate(record.chunk_times):
            assert arrived - record.request_first_byte >= index * 0.020 + 0.012

"""harness.bench.datagrams: the per-datagram table's parsers and summary (the bench itself
is a benchmark: ``testbed bench stacks`` as root prints its table)."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from harness.bench import datagrams
from tbcore.errors import SpecError

FIXTURE = Path(__file__).parent / "fixtures" / "ngtcp2-tts-loss"

SNMP = """Ip: Forwarding DefaultTTL
Ip: 1 64
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors
Udp: 4300 0 0 372 0 0
UdpLite: InDatagrams NoPorts
UdpLite: 0 0
"""


def test_the_udp_counters_are_read_by_name() -> None:
    udp = datagrams.parse_snmp_udp(SNMP)
    assert udp["InDatagrams"] == 4300 and udp["OutDatagrams"] == 372
    with pytest.raises(SpecError, match="no Udp"):
        datagrams.parse_snmp_udp("Ip: a\nIp: 1\n")


def test_packets_are_counted_per_end_from_either_stack_s_qlog(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlog"
    path.write_bytes(gzip.decompress((FIXTURE / "server.sqlog.gz").read_bytes()))
    aio = tmp_path / "c.qlog"
    aio.write_text(
        '{"traces": [{"events": [{"name": "transport:packet_sent"}, '
        '{"name": "transport:packet_received"}, {"name": "transport:packet_received"}]}]}'
    )
    server = datagrams.qlog_counts(datagrams.read_traces([path]))
    assert server.sent > 300 and 0 < server.received < server.sent  # a download's server
    client = datagrams.qlog_counts(datagrams.read_traces([aio]))
    assert (client.sent, client.received, client.handled) == (1, 2, 3)


def test_the_summary_is_the_median_per_stack() -> None:
    rows = [
        {"stack": "aioquic", "client_us_per_dgram": 70.0, "edge_ms": None},
        {"stack": "aioquic", "client_us_per_dgram": 90.0, "edge_ms": None},
        {"stack": "ngtcp2", "client_us_per_dgram": 9.0, "edge_ms": 100.0},
    ]
    out = datagrams.summary(rows)
    assert out[0] == {"stack": "aioquic", "transfers": 2, "client_us_per_dgram": 80.0}
    assert out[1]["edge_ms"] == 100.0


def test_a_process_tree_s_cpu_includes_this_process() -> None:
    assert datagrams.tree_runtime_s(os.getpid()) > 0

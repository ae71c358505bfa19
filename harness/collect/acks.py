"""ACK timestamps from the packets themselves, offline, after a run.

TCP: from the capture at the data sender's end of the link (``client.pcap`` for an upload,
``server.pcap`` for a download). Each ACK segment from the receiver is one row: its arrival
time at the sender, the acknowledged byte (relative to the sender's initial sequence
number, so the first payload byte is 0), and the bytes in flight right after it (highest
byte sent so far minus the acknowledged byte; SACKed bytes are still counted in flight, as
in the sender's ``snd_nxt - snd_una``). The pcap or pcapng file is read by the project's
own reader (netem.pcapng); the IPv4/TCP headers are then unpacked with ``struct`` (a full
scapy dissection costs ~100 µs per packet, which is seconds for a 30 MB transfer; the
fields needed are at fixed offsets).

QUIC: from the sender's qlog (aioquic 0.3 JSON; ngtcp2's JSON-SEQ read into the same
shape, proto.qlogseq): each received packet carrying an ACK
frame is a row with the largest acknowledged packet number, and the sender's
``bytes_in_flight`` from the ``recovery:metrics_updated`` event that follows it.

Both produce :class:`AckRow` lists on the capture's own clock; ``clock_offset_s``
(source clock minus CLOCK_MONOTONIC: the pcap and qlog times are CLOCK_REALTIME) maps them
onto the clock every process shares. The parsing cores are sans-I/O: they take parsed
segments or qlog dictionaries.
"""

from __future__ import annotations

import csv
import io
import json
import struct
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from harness.store.resultdir import atomic_write_text
from proto import qlogseq
from tbcore.errors import SpecError

TCP_FIN = 0x01
TCP_SYN = 0x02
TCP_RST = 0x04
TCP_ACK = 0x10
IPPROTO_TCP = 6
TCP_OPTION_SACK = 5
"""RFC 2018 SACK option kind."""
TCP_OPTION_WSCALE = 3
"""RFC 7323 window scale option kind (only on SYN segments)."""
SEQ_MOD = 2**32

LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINK_HEADER_BYTES = {
    LINKTYPE_ETHERNET: 14,
    LINKTYPE_RAW: 0,
    LINKTYPE_LINUX_SLL: 16,
    LINKTYPE_IPV4: 0,
}


@dataclass(frozen=True)
class TcpSegment:
    """The fields of one captured TCP segment that ACK extraction needs."""

    time_s: float
    src: str
    sport: int
    dst: str
    dport: int
    seq: int
    ack: int
    flags: int
    payload_bytes: int
    window: int
    sack_blocks: int
    wscale: int | None = None
    """The window scale option (SYN segments only), None when absent."""
    wire_bytes: int = 0
    """The IP total length: headers, options and payload."""


@dataclass(frozen=True)
class AckRow:
    time_s: float
    """Arrival at the sender, on the capture's clock (after ``clock_offset_s`` removal:
    CLOCK_MONOTONIC)."""
    conn: int
    """Index of the connection in order of first appearance (0, 1, ...)."""
    acked: int
    """TCP: acknowledged byte offset from the first payload byte; QUIC: largest acked
    packet number."""
    inflight_bytes: int
    """Sender's bytes in flight right after this ACK."""
    dup: bool
    """A duplicate ACK (TCP: same ack number, no payload, no window change) or, for QUIC,
    an ACK that acknowledged nothing new."""
    sack_blocks: int
    """TCP SACK blocks carried (0 for QUIC, whose ranges are in the qlog)."""
    kind: str
    """``tcp`` or ``quic``."""
    rwnd_bytes: int | None = None
    """TCP: the receive window this ACK advertised, scaled (RFC 7323); None for QUIC or
    when the handshake was not captured."""


ACK_COLUMNS = [f.name for f in fields(AckRow)]


def _ip(raw: bytes) -> str:
    return ".".join(str(b) for b in raw)


def parse_ipv4_tcp(data: bytes, time_s: float) -> TcpSegment | None:
    """One raw IPv4 packet -> a segment, or None when it is not IPv4/TCP or is truncated."""
    if len(data) < 20 or data[0] >> 4 != 4:
        return None
    ihl = (data[0] & 0x0F) * 4
    total_length = struct.unpack_from("!H", data, 2)[0]
    if data[9] != IPPROTO_TCP or len(data) < ihl + 20:
        return None
    sport, dport, seq, ack, offset_flags, window = struct.unpack_from("!HHIIHH", data, ihl)
    tcp_header = (offset_flags >> 12) * 4
    flags = offset_flags & 0x3F
    payload = max(0, total_length - ihl - tcp_header)
    sack_blocks = 0
    wscale = None
    options = data[ihl + 20 : ihl + tcp_header]
    i = 0
    while i < len(options):
        kind = options[i]
        if kind == 0:
            break
        if kind == 1:
            i += 1
            continue
        if i + 1 >= len(options):
            break
        length = options[i + 1]
        if length < 2:
            break
        if kind == TCP_OPTION_SACK:
            sack_blocks = (length - 2) // 8
        elif kind == TCP_OPTION_WSCALE and length == 3 and i + 2 < len(options):
            wscale = options[i + 2]
        i += length
    return TcpSegment(
        time_s=time_s,
        src=_ip(data[12:16]),
        sport=sport,
        dst=_ip(data[16:20]),
        dport=dport,
        seq=seq,
        ack=ack,
        flags=flags,
        payload_bytes=payload,
        window=window,
        sack_blocks=sack_blocks,
        wscale=wscale,
        wire_bytes=total_length,
    )


def read_tcp_segments(path: Path) -> list[TcpSegment]:
    """Every IPv4 TCP segment of a pcap or pcapng file (I/O edge: netem.pcapng's reader)."""
    from netem.pcapng import read_capture

    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return []
    capture = read_capture(path)
    skip = LINK_HEADER_BYTES.get(capture.linktype)
    if skip is None:
        raise SpecError(path.name, f"unsupported pcap link type {capture.linktype}")
    out: list[TcpSegment] = []
    for ts_ns, data, _ in capture.packets:
        segment = parse_ipv4_tcp(bytes(data[skip:]), ts_ns * 1e-9)
        if segment is not None:
            out.append(segment)
    return out


@dataclass
class _Conn:
    index: int
    sender: tuple[str, int] | None = None
    isn: int | None = None
    snd_max: int = 0
    """Highest relative byte sent (exclusive)."""
    last_ack: int | None = None
    last_window: int | None = None
    retransmits: int = 0
    syn_wscale: dict[tuple[str, int], int | None] = field(default_factory=dict)
    """Each end's window scale from its SYN (both must offer it for it to apply)."""


def tcp_flow(seg: TcpSegment) -> tuple[tuple[str, int], tuple[str, int]]:
    a, b = (seg.src, seg.sport), (seg.dst, seg.dport)
    return (a, b) if a < b else (b, a)


def data_senders(segments: Sequence[TcpSegment]) -> dict[tuple, tuple[str, int]]:
    """Per connection, the endpoint that sent the most payload bytes."""
    sent: dict[tuple, dict[tuple[str, int], int]] = {}
    for seg in segments:
        per = sent.setdefault(tcp_flow(seg), {})
        end = (seg.src, seg.sport)
        per[end] = per.get(end, 0) + seg.payload_bytes
    return {flow: max(per, key=lambda e: per[e]) for flow, per in sent.items()}


@dataclass(frozen=True)
class TcpAckResult:
    rows: list[AckRow]
    retransmits: int
    """Data segments sent again (payload ending at or below the highest byte sent)."""
    connections: int
    retransmit_times_s: list[float] = field(default_factory=list)
    """When each of those was sent (capture time less ``clock_offset_s``)."""


def tcp_acks(
    segments: Sequence[TcpSegment], *, clock_offset_s: float = 0.0, sender: str | None = None
) -> TcpAckResult:
    """ACK rows of every connection in a capture taken at the data sender's end.

    ``sender`` (an address) picks the data direction; by default, per connection, the
    endpoint that sent the most payload. Segments must be in capture order.
    """
    senders = data_senders(segments)
    conns: dict[tuple, _Conn] = {}
    rows: list[AckRow] = []
    retransmit_times: list[float] = []
    for seg in segments:
        flow = tcp_flow(seg)
        conn = conns.get(flow)
        if conn is None:
            conn = conns[flow] = _Conn(index=len(conns))
            if sender is not None:
                ends = [e for e in flow if e[0] == sender]
                conn.sender = ends[0] if ends else senders[flow]
            else:
                conn.sender = senders[flow]
        if seg.flags & TCP_SYN:
            conn.syn_wscale[(seg.src, seg.sport)] = seg.wscale
        from_sender = (seg.src, seg.sport) == conn.sender
        if from_sender:
            if conn.isn is None or seg.flags & TCP_SYN:
                conn.isn = seg.seq if seg.flags & TCP_SYN else (seg.seq - 1) % SEQ_MOD
            if seg.flags & TCP_SYN:
                continue
            first = (seg.seq - conn.isn - 1) % SEQ_MOD
            end = first + seg.payload_bytes
            if seg.payload_bytes and end <= conn.snd_max:
                conn.retransmits += 1
                retransmit_times.append(seg.time_s - clock_offset_s)
            conn.snd_max = max(conn.snd_max, end)
            continue
        if not seg.flags & TCP_ACK or conn.isn is None or seg.flags & TCP_RST:
            continue
        acked = (seg.ack - conn.isn - 1) % SEQ_MOD
        if acked > conn.snd_max + 1:  # SYN/FIN take a sequence number; others are garbage
            acked = min(acked, conn.snd_max + 1)
        dup = (
            conn.last_ack == acked
            and seg.payload_bytes == 0
            and conn.last_window == seg.window
            and not seg.flags & (TCP_SYN | TCP_FIN)
            and conn.snd_max > acked
        )
        conn.last_ack = acked
        conn.last_window = seg.window
        rwnd = None
        scales = list(conn.syn_wscale.values())
        if len(scales) == 2 and not seg.flags & TCP_SYN:
            # RFC 7323 section 2.2: scaling applies only if both SYNs carried the option
            shift = conn.syn_wscale[(seg.src, seg.sport)] if None not in scales else 0
            rwnd = seg.window << (shift or 0)
        rows.append(
            AckRow(
                time_s=seg.time_s - clock_offset_s,
                conn=conn.index,
                acked=max(0, acked),
                inflight_bytes=max(0, conn.snd_max - acked),
                dup=dup,
                sack_blocks=seg.sack_blocks,
                kind="tcp",
                rwnd_bytes=rwnd,
            )
        )
    return TcpAckResult(
        rows=rows,
        retransmits=len(retransmit_times),
        connections=len(conns),
        retransmit_times_s=retransmit_times,
    )


@dataclass(frozen=True)
class QuicAckResult:
    rows: list[AckRow]
    lost_packets: int
    """``recovery:packet_lost`` events of the sender: QUIC's retransmission count."""
    lost_times_s: list[float]
    """When each loss was declared (same clock as the rows)."""
    sent_packets: int
    connections: int


def quic_acks(
    traces: Iterable[dict[str, Any]], *, clock_offset_s: float = 0.0, vantage: str
) -> QuicAckResult:
    """ACK rows from qlog traces (aioquic 0.3 JSON) of the ``vantage`` side (the sender:
    ``client`` for an upload, ``server`` for a download). qlog times are milliseconds."""
    rows: list[AckRow] = []
    lost = 0
    lost_times: list[float] = []
    sent = 0
    index = 0
    for trace in traces:
        if trace.get("vantage_point", {}).get("type") != vantage:
            continue
        events = sorted(trace.get("events", []), key=lambda e: e.get("time", 0.0))
        largest = -1
        pending: list[dict[str, Any]] = []
        inflight = 0
        for event in events:
            name = event.get("name", "")
            data = event.get("data", {}) or {}
            if name == "recovery:metrics_updated" and "bytes_in_flight" in data:
                inflight = int(data["bytes_in_flight"])
                for row in pending:
                    rows.append(_with_inflight(row, inflight))
                pending = []
            elif name == "recovery:packet_lost":
                lost += 1
                lost_times.append(float(event.get("time", 0.0)) / 1e3 - clock_offset_s)
            elif name == "transport:packet_sent":
                sent += 1
            elif name == "transport:packet_received":
                if data.get("header", {}).get("packet_type") not in (None, "1RTT", "0RTT"):
                    continue
                for frame in data.get("frames", []) or []:
                    if frame.get("frame_type") != "ack" or not frame.get("acked_ranges"):
                        continue
                    top = max(int(r[-1]) for r in frame["acked_ranges"])
                    pending.append(
                        {
                            "time_s": float(event["time"]) / 1e3 - clock_offset_s,
                            "conn": index,
                            "acked": top,
                            "inflight_bytes": inflight,
                            "dup": top <= largest,
                            "sack_blocks": 0,
                            "kind": "quic",
                        }
                    )
                    largest = max(largest, top)
        rows.extend(_with_inflight(row, inflight) for row in pending)
        index += 1
    rows.sort(key=lambda r: r.time_s)
    return QuicAckResult(
        rows=rows,
        lost_packets=lost,
        lost_times_s=sorted(lost_times),
        sent_packets=sent,
        connections=index,
    )


def _with_inflight(row: dict[str, Any], inflight: int) -> AckRow:
    return AckRow(**{**row, "inflight_bytes": inflight})


def read_qlog_traces(directory: Path) -> list[dict[str, Any]]:
    """Every trace of every ``*.qlog``/``*.json`` file in a directory (aioquic's JSON) and of
    every ``*.sqlog`` (JSON-SEQ, ngtcp2's, anchored by its edge: proto.qlogseq), all in
    aioquic's trace shape (I/O edge)."""
    traces: list[dict[str, Any]] = []
    directory = Path(directory)
    if not directory.is_dir():
        return traces
    for path in sorted([*directory.glob("*.qlog"), *directory.glob("*.json")]):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise SpecError(path.name, f"not a qlog JSON file: {err}") from None
        traces.extend(data.get("traces", []))
    for path in sorted(directory.glob(f"*{qlogseq.SEQ_SUFFIX}")):
        seq = qlogseq.parse_qlog_seq(path.read_text(encoding="utf-8", errors="replace"), path.name)
        traces.append(qlogseq.aioquic_trace(seq))
    return traces


def _write_timed_csv(path: Path, names: list[str], rows: Iterable[Any], start_s: float) -> int:
    """``t_s`` (``time_s`` since ``start_s``) then the ``names`` fields of each dataclass row,
    written atomically; the number of rows."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["t_s", *names])
    count = 0
    for row in rows:
        data = asdict(row)
        writer.writerow([f"{row.time_s - start_s:.9f}", *(data[n] for n in names)])
        count += 1
    atomic_write_text(Path(path), buffer.getvalue())
    return count


def write_acks_csv(path: Path, rows: Iterable[AckRow], start_s: float = 0.0) -> int:
    """acks.csv: ``t_s`` (since ``start_s``, the request start) then every AckRow field."""
    return _write_timed_csv(path, ACK_COLUMNS, rows, start_s)


# --- in-flight series and RTT --------------------------------------------------------------


@dataclass(frozen=True)
class InflightSample:
    time_s: float
    conn: int
    inflight_bytes: int
    """Sender's bytes in flight after this event."""
    cwnd_bytes: int | None
    """QUIC: the congestion window (qlog); TCP: None (not on the wire)."""
    event: str
    """``sent``, ``ack`` (TCP) or ``metrics`` (QUIC)."""


def tcp_inflight(
    segments: Sequence[TcpSegment], *, clock_offset_s: float = 0.0
) -> list[InflightSample]:
    """The data sender's bytes in flight after every data segment it sent and every ACK it
    got (capture at the sender's end): highest byte sent minus highest byte acknowledged."""
    senders = data_senders(segments)
    state: dict[tuple, dict[str, int]] = {}
    out: list[InflightSample] = []
    for seg in segments:
        flow = tcp_flow(seg)
        conn = state.setdefault(flow, {"index": len(state), "isn": -1, "max": 0, "acked": 0})
        if (seg.src, seg.sport) == senders[flow]:
            if seg.flags & TCP_SYN or conn["isn"] < 0:
                conn["isn"] = seg.seq if seg.flags & TCP_SYN else (seg.seq - 1) % SEQ_MOD
                if seg.flags & TCP_SYN:
                    continue
            if not seg.payload_bytes:
                continue
            end = (seg.seq - conn["isn"] - 1) % SEQ_MOD + seg.payload_bytes
            conn["max"] = max(conn["max"], end)
            event = "sent"
        elif seg.flags & TCP_ACK and conn["isn"] >= 0:
            acked = (seg.ack - conn["isn"] - 1) % SEQ_MOD
            if acked <= conn["max"] + 1:
                conn["acked"] = max(conn["acked"], acked)
            event = "ack"
        else:
            continue
        out.append(
            InflightSample(
                time_s=seg.time_s - clock_offset_s,
                conn=conn["index"],
                inflight_bytes=max(0, conn["max"] - conn["acked"]),
                cwnd_bytes=None,
                event=event,
            )
        )
    return out


def handshake_rtt_s(segments: Sequence[TcpSegment]) -> float | None:
    """The smallest SYN -> SYN-ACK time of the capture (taken at the client's end it is the
    path RTT with no queue; at the server's end it is the SYN-ACK -> ACK time instead)."""
    syn: dict[tuple, float] = {}
    synack: dict[tuple, float] = {}
    best: float | None = None
    for seg in segments:
        flow = tcp_flow(seg)
        if seg.flags & TCP_SYN and not seg.flags & TCP_ACK:
            syn.setdefault(flow, seg.time_s)
        elif seg.flags & TCP_SYN and seg.flags & TCP_ACK:
            synack.setdefault(flow, seg.time_s)
            if flow in syn:
                rtt = seg.time_s - syn[flow]
                best = rtt if best is None else min(best, rtt)
        elif flow in synack and flow not in syn and seg.flags & TCP_ACK:
            rtt = seg.time_s - synack.pop(flow)
            best = rtt if best is None else min(best, rtt)
    return best


def quic_inflight(
    traces: Iterable[dict[str, Any]], *, clock_offset_s: float = 0.0, vantage: str
) -> list[InflightSample]:
    out: list[InflightSample] = []
    index = 0
    for trace in traces:
        if trace.get("vantage_point", {}).get("type") != vantage:
            continue
        for event in trace.get("events", []):
            data = event.get("data", {}) or {}
            if event.get("name") == "recovery:metrics_updated" and "bytes_in_flight" in data:
                out.append(
                    InflightSample(
                        time_s=float(event["time"]) / 1e3 - clock_offset_s,
                        conn=index,
                        inflight_bytes=int(data["bytes_in_flight"]),
                        cwnd_bytes=data.get("cwnd"),
                        event="metrics",
                    )
                )
        index += 1
    out.sort(key=lambda s: s.time_s)
    return out


def qlog_min_rtt_s(traces: Iterable[dict[str, Any]]) -> float | None:
    """The smallest ``min_rtt`` (ms in qlog) any trace reported, in seconds."""
    values = [
        float(e["data"]["min_rtt"])
        for trace in traces
        for e in trace.get("events", [])
        if e.get("name") == "recovery:metrics_updated" and (e.get("data") or {}).get("min_rtt")
    ]
    return min(values) / 1e3 if values else None


def write_inflight_csv(path: Path, samples: Iterable[InflightSample], start_s: float = 0.0) -> int:
    """inflight.csv: ``t_s`` since the request start, then every InflightSample field."""
    return _write_timed_csv(path, [f.name for f in fields(InflightSample)], samples, start_s)

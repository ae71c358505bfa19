"""``getsockopt(TCP_INFO)`` parsing (struct tcp_info, <linux/tcp.h>).

The kernel returns as many bytes as it knows (older kernels fewer); every field is read only
if the returned buffer reaches past its end, otherwise it is absent from the result. Units
are the kernel's: times in microseconds (``*_us``), rates in bytes per second, counts in
segments unless named ``bytes_*``.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

TCP_INFO = socket.TCP_INFO  # linux/tcp.h; 11

TCP_INFO_MAX_BYTES = 512
"""Buffer offered to getsockopt; the kernel here fills 256 (docs/machine.md)."""

# (name, byte offset, struct format) in kernel order; the first 8 bytes are u8 fields.
FIELDS: tuple[tuple[str, int, str], ...] = (
    ("state", 0, "B"),
    ("ca_state", 1, "B"),
    ("retransmits", 2, "B"),
    ("probes", 3, "B"),
    ("backoff", 4, "B"),
    ("options", 5, "B"),
    ("wscale", 6, "B"),
    ("rto_us", 8, "I"),
    ("ato_us", 12, "I"),
    ("snd_mss", 16, "I"),
    ("rcv_mss", 20, "I"),
    ("unacked", 24, "I"),
    ("sacked", 28, "I"),
    ("lost", 32, "I"),
    ("retrans", 36, "I"),
    ("fackets", 40, "I"),
    ("last_data_sent_ms", 44, "I"),
    ("last_ack_sent_ms", 48, "I"),
    ("last_data_recv_ms", 52, "I"),
    ("last_ack_recv_ms", 56, "I"),
    ("pmtu", 60, "I"),
    ("rcv_ssthresh", 64, "I"),
    ("rtt_us", 68, "I"),
    ("rttvar_us", 72, "I"),
    ("snd_ssthresh", 76, "I"),
    ("snd_cwnd", 80, "I"),
    ("advmss", 84, "I"),
    ("reordering", 88, "I"),
    ("rcv_rtt_us", 92, "I"),
    ("rcv_space", 96, "I"),
    ("total_retrans", 100, "I"),
    ("pacing_rate", 104, "Q"),
    ("max_pacing_rate", 112, "Q"),
    ("bytes_acked", 120, "Q"),
    ("bytes_received", 128, "Q"),
    ("segs_out", 136, "I"),
    ("segs_in", 140, "I"),
    ("notsent_bytes", 144, "I"),
    ("min_rtt_us", 148, "I"),
    ("data_segs_in", 152, "I"),
    ("data_segs_out", 156, "I"),
    ("delivery_rate", 160, "Q"),
    ("busy_time_us", 168, "Q"),
    ("rwnd_limited_us", 176, "Q"),
    ("sndbuf_limited_us", 184, "Q"),
    ("delivered", 192, "I"),
    ("delivered_ce", 196, "I"),
    ("bytes_sent", 200, "Q"),
    ("bytes_retrans", 208, "Q"),
    ("dsack_dups", 216, "I"),
    ("reord_seen", 220, "I"),
    ("rcv_ooopack", 224, "I"),
    ("snd_wnd", 228, "I"),
)
_COMPILED = tuple((name, offset, struct.Struct("=" + fmt)) for name, offset, fmt in FIELDS)

SAMPLE_FIELDS = (
    "state",
    "ca_state",
    "snd_mss",
    "unacked",
    "sacked",
    "lost",
    "retrans",
    "rtt_us",
    "rttvar_us",
    "snd_ssthresh",
    "snd_cwnd",
    "total_retrans",
    "pacing_rate",
    "delivery_rate",
    "bytes_acked",
    "bytes_received",
    "bytes_sent",
    "bytes_retrans",
    "notsent_bytes",
    "min_rtt_us",
    "busy_time_us",
    "rwnd_limited_us",
    "sndbuf_limited_us",
    "delivered",
    "snd_wnd",
    "packets_in_flight",
    "bytes_in_flight",
)
"""Columns of an in-flight sample (a subset, plus the derived in-flight counts)."""


def parse_tcp_info(raw: bytes) -> dict[str, int]:
    """Decode the fields that ``raw`` (as returned by the kernel) covers entirely."""
    info: dict[str, int] = {}
    length = len(raw)
    for name, offset, fmt in _COMPILED:
        if offset + fmt.size > length:
            break
        info[name] = fmt.unpack_from(raw, offset)[0]
    if all(k in info for k in ("unacked", "sacked", "lost", "retrans", "snd_mss")):
        # tcp_packets_in_flight() in include/net/tcp.h: left_out = sacked + lost
        packets = info["unacked"] - info["sacked"] - info["lost"] + info["retrans"]
        info["packets_in_flight"] = max(packets, 0)
        info["bytes_in_flight"] = info["packets_in_flight"] * info["snd_mss"]
    return info


def read_tcp_info_raw(sock: Any) -> bytes:
    return sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, TCP_INFO_MAX_BYTES)


def read_tcp_info(sock: Any) -> dict[str, int]:
    """TCP_INFO of a connected socket (a socket, or uvloop's pseudo-socket)."""
    return parse_tcp_info(read_tcp_info_raw(sock))


TCP_CONGESTION = socket.TCP_CONGESTION  # linux/tcp.h; 13
TCP_CC_INFO = 26
"""linux/tcp.h: the congestion control's own state (union tcp_cc_info, inet_diag.h)."""
TCP_CA_NAME_MAX = 16
"""linux/tcp.h: the longest congestion control name, NUL included."""
TCP_BBR_INFO = struct.Struct("=IIIII")
"""struct tcp_bbr_info (include/uapi/linux/inet_diag.h): bw_lo, bw_hi (bytes/s), min_rtt (us),
pacing_gain, cwnd_gain (both x 256, BBR_UNIT)."""


def congestion_control(sock: Any) -> str:
    """The socket's congestion control (TCP_CONGESTION)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, TCP_CA_NAME_MAX)
    return raw.split(b"\0", 1)[0].decode("ascii", "replace")


def parse_bbr_info(raw: bytes) -> dict[str, int]:
    """tcp_bbr_info as the QUIC sample's BBR columns (tbcore.records.BBR_COUNTERS) name it;
    empty when ``raw`` is shorter than the struct (a kernel without it)."""
    if len(raw) < TCP_BBR_INFO.size:
        return {}
    bw_lo, bw_hi, min_rtt_us, pacing_gain, cwnd_gain = TCP_BBR_INFO.unpack_from(raw)
    return {
        "bbr_bw": bw_lo | bw_hi << 32,
        "bbr_min_rtt_us": min_rtt_us,
        "bbr_pacing_gain": pacing_gain,
        "bbr_cwnd_gain": cwnd_gain,
    }


def read_bbr_info(sock: Any) -> dict[str, int]:
    """The kernel BBR's model of a socket whose control is bbr (TCP_CC_INFO); empty for any
    other control (their TCP_CC_INFO is another struct, or nothing)."""
    if congestion_control(sock) != "bbr":
        return {}
    return parse_bbr_info(sock.getsockopt(socket.IPPROTO_TCP, TCP_CC_INFO, TCP_BBR_INFO.size))

"""A shared-airtime hop (``air=54mbit/6mbit``): its parameters and the 802.11a PHY arithmetic.

Both directions of the link take turns on one medium. Every frame pays for one *exchange*
(IEEE 802.11-2020 10.3, the DCF basic access without RTS/CTS)::

    exchange = access + PPDU(MAC frame, data rate) + SIFS + PPDU(MAC ACK, control rate)
    access   = DIFS (+ a random backoff of k slots, k uniform in [0, CWmin], when enabled)

with PPDU durations from the clause 17 (OFDM) symbol arithmetic (17.4.3, TXTIME)::

    PPDU(L bytes, rate) = T_PREAMBLE + T_SIGNAL + T_SYM * ceil((16 + 8 L + 6) / N_DBPS)
    N_DBPS = rate * T_SYM   (216 bits at 54 Mbit/s, 24 at 6 Mbit/s)

The MAC frame of an IP packet of ``ip`` bytes is ``ip + 24 (header) + 8 (LLC/SNAP) + 4
(FCS)`` bytes; the MAC ACK is 14 bytes. With the defaults (the chapter's reference
exchange: no backoff, no aggregation):

* MAC ACK at 6 Mbit/s: 16 + 112 + 6 = 134 bits = 6 symbols: 20 + 24 = **44 µs**;
* a 1,228-byte IP packet (a 1,200-byte QUIC datagram) = 1,264-byte frame at 54 Mbit/s:
  10,134 bits = 47 symbols: **208 µs**, exchange 34 + 208 + 16 + 44 = **302 µs**;
* a 70-96-byte IP packet (an ACK-only packet) = 5 symbols: **40 µs**, exchange **134 µs**;
* a 1,500-byte IP packet = 1,536-byte frame: 57 symbols: **248 µs**, exchange 342 µs. (The
  arithmetic does not give the chapter's 208 µs for a 1,500-byte packet: 208 µs holds a MAC
  frame of 1,240 to 1,266 bytes.)

Everything here is plain arithmetic, shared by the emulator's medium
(:mod:`netem.emulator.medium`) and the exchange-model bound (:mod:`harness.bounds`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from tbcore.errors import SpecError
from tbcore.plain import AsDict
from tbcore.units import format_duration, format_rate, parse_duration_s, parse_rate_bps

# --- IEEE 802.11-2020 clause 17 (OFDM PHY, 20 MHz channel spacing) ---------------------------

OFDM_PREAMBLE_S = 16e-6
"""T_PREAMBLE: 10 short + 2 long training symbols (802.11-2020 Table 17-5)."""
OFDM_SIGNAL_S = 4e-6
"""T_SIGNAL: the SIGNAL field, one BPSK symbol (Table 17-5)."""
OFDM_SYMBOL_S = 4e-6
"""T_SYM: symbol interval with the 0.8 µs guard interval (Table 17-5)."""
OFDM_SERVICE_BITS = 16
"""SERVICE field bits before the PSDU (17.3.5.2)."""
OFDM_TAIL_BITS = 6
"""Tail bits after the PSDU (17.3.5.3)."""
OFDM_SLOT_S = 9e-6
"""aSlotTime of the OFDM PHY (Table 17-21)."""
OFDM_SIFS_S = 16e-6
"""aSIFSTime of the OFDM PHY (Table 17-21)."""
OFDM_DIFS_S = OFDM_SIFS_S + 2 * OFDM_SLOT_S
"""DIFS = aSIFSTime + 2 * aSlotTime = 34 µs (802.11-2020 10.3.2.3.5)."""
OFDM_CW_MIN = 15
"""aCWmin of the OFDM PHY (Table 17-21): the backoff draws k in [0, 15] slots."""
OFDM_RATES_BPS = (6e6, 9e6, 12e6, 18e6, 24e6, 36e6, 48e6, 54e6)
"""The clause 17 data rates at 20 MHz (Table 17-4)."""

# --- IEEE 802.11-2020 clause 9 (frame formats) -----------------------------------------------

MAC_HEADER_BYTES = 24
"""Data frame MAC header without QoS Control: Frame Control 2, Duration 2, Address 1-3 18,
Sequence Control 2 (9.3.2.1)."""
LLC_SNAP_BYTES = 8
"""802.2 LLC/SNAP header that carries the EtherType of an IP packet in an 802.11 data frame
(RFC 1042 encapsulation)."""
FCS_BYTES = 4
"""Frame check sequence, CRC-32 (9.2.4.8)."""
MAC_ACK_BYTES = 14
"""ACK frame: Frame Control 2, Duration 2, RA 6, FCS 4 (9.3.1.3)."""
BLOCK_ACK_BYTES = 32
"""Compressed BlockAck frame answering an A-MPDU: 16 bytes of header and control, 8 of
starting sequence, 8 of bitmap, FCS included (9.3.1.8)."""
AMPDU_DELIMITER_BYTES = 4
"""MPDU delimiter before each A-MPDU subframe; each subframe is padded to 4 bytes (9.7.1)."""

MEDIUM_QUEUE_PACKETS = 1000
"""Frames each direction may hold waiting for the medium: Linux's default transmit queue
length of a network device (``DEFAULT_TX_QUEUE_LEN``, include/linux/netdevice.h)."""

ACK_ONLY_MAX_IP_BYTES = 128
"""Frame kind by size, for what is not TCP: an IP packet of at most 128 bytes counts as
ACK-only (a QUIC ACK-only packet is 40-70 bytes of UDP payload; a QUIC data packet of a bulk
transfer fills its 1,200-byte datagram). TCP is classified exactly: no payload, ACK-only."""

ORDERS = ("fifo", "alternate")
"""Which waiting frame gets the medium next. ``fifo``: the one that arrived first (ties: up);
``alternate``: the other direction than the last exchange's, when it has a frame waiting (a
round-robin of the two stations, the long-run share of DCF's fair access)."""

KINDS = ("data", "ack")
DIRECTIONS = ("up", "down")


@dataclass(frozen=True)
class AirSpec(AsDict):
    """One shared medium for both directions; defaults are 802.11a's, no backoff, no A-MPDU."""

    data_rate_bps: float = 54e6
    """PHY rate of data frames."""
    control_rate_bps: float = 6e6
    """PHY rate of MAC ACKs (and BlockAcks)."""
    difs_s: float = OFDM_DIFS_S
    sifs_s: float = OFDM_SIFS_S
    slot_s: float = OFDM_SLOT_S
    preamble_s: float = OFDM_PREAMBLE_S
    """PHY preamble (training symbols)."""
    signal_s: float = OFDM_SIGNAL_S
    """PHY SIGNAL field."""
    symbol_s: float = OFDM_SYMBOL_S
    mac_header_bytes: int = MAC_HEADER_BYTES
    llc_bytes: int = LLC_SNAP_BYTES
    fcs_bytes: int = FCS_BYTES
    backoff: bool = False
    """Random backoff after DIFS: k uniform in [0, cw_min] slots, seeded (no collisions)."""
    cw_min: int = OFDM_CW_MIN
    ampdu_frames: int = 1
    """Most frames of one direction carried in one A-MPDU exchange (1: no aggregation)."""
    order: str = "fifo"
    """Direction order: one of :data:`ORDERS`."""
    queue_packets: int = MEDIUM_QUEUE_PACKETS
    """Frames each direction may hold waiting for the medium; more are refused (dropped)."""
    seed: int = 1
    """Seed of the backoff draws."""

    def __post_init__(self) -> None:
        for name in ("data_rate_bps", "control_rate_bps"):
            rate = getattr(self, name)
            _number(f"air.{name}", rate, positive=True)
        for name in ("difs_s", "sifs_s", "slot_s", "preamble_s", "signal_s"):
            _number(f"air.{name}", getattr(self, name), positive=False)
        _number("air.symbol_s", self.symbol_s, positive=True)
        for name in ("data_rate_bps", "control_rate_bps"):
            bits = getattr(self, name) * self.symbol_s
            if abs(bits - round(bits)) > 1e-6 or round(bits) < 1:
                raise SpecError(
                    f"air.{name}",
                    f"{format_rate(getattr(self, name))} carries {bits:g} bits per "
                    f"{format_duration(self.symbol_s)} symbol: not a whole number "
                    f"(802.11a rates: {', '.join(format_rate(r) for r in OFDM_RATES_BPS)})",
                )
        for name in ("mac_header_bytes", "llc_bytes", "fcs_bytes", "cw_min", "seed"):
            _whole(f"air.{name}", getattr(self, name), minimum=0)
        _whole("air.ampdu_frames", self.ampdu_frames, minimum=1)
        _whole("air.queue_packets", self.queue_packets, minimum=1)
        if not isinstance(self.backoff, bool):
            raise SpecError("air.backoff", f"must be true or false, got {self.backoff!r}")
        if self.order not in ORDERS:
            raise SpecError("air.order", f"{self.order!r} is not one of {', '.join(ORDERS)}")

    # --- the arithmetic ----------------------------------------------------------------------

    @property
    def mac_overhead_bytes(self) -> int:
        """Bytes a data frame adds to its IP packet: header, LLC/SNAP, FCS."""
        return self.mac_header_bytes + self.llc_bytes + self.fcs_bytes

    def ppdu_ns(self, psdu_bytes: int, rate_bps: float) -> int:
        """TXTIME of a PSDU of ``psdu_bytes`` at ``rate_bps`` (802.11-2020 17.4.3), in ns."""
        return ppdu_ns(psdu_bytes, rate_bps, self.preamble_s, self.signal_s, self.symbol_s)

    def data_ppdu_ns(self, ip_bytes: int) -> int:
        """The data PPDU carrying one IP packet."""
        return self.ppdu_ns(ip_bytes + self.mac_overhead_bytes, self.data_rate_bps)

    def ampdu_ppdu_ns(self, ip_sizes: list[int]) -> int:
        """One A-MPDU of several IP packets: a delimiter and 4-byte padding per subframe."""
        if len(ip_sizes) == 1:
            return self.data_ppdu_ns(ip_sizes[0])
        total = 0
        for size in ip_sizes:
            total += AMPDU_DELIMITER_BYTES + _pad4(size + self.mac_overhead_bytes)
        return self.ppdu_ns(total, self.data_rate_bps)

    @property
    def mac_ack_bytes(self) -> int:
        return MAC_ACK_BYTES - FCS_BYTES + self.fcs_bytes

    @property
    def ack_ppdu_ns(self) -> int:
        """The MAC ACK (14 bytes at the control rate: 44 µs at 6 Mbit/s)."""
        return self.ppdu_ns(self.mac_ack_bytes, self.control_rate_bps)

    @property
    def block_ack_ppdu_ns(self) -> int:
        """The compressed BlockAck answering an A-MPDU, at the control rate."""
        return self.ppdu_ns(BLOCK_ACK_BYTES - FCS_BYTES + self.fcs_bytes, self.control_rate_bps)

    @property
    def access_ns(self) -> int:
        """DIFS, without backoff."""
        return _ns(self.difs_s)

    @property
    def slot_ns(self) -> int:
        return _ns(self.slot_s)

    @property
    def sifs_ns(self) -> int:
        return _ns(self.sifs_s)

    def exchange_ns(self, ip_bytes: int, backoff_slots: int = 0) -> int:
        """Medium time of one frame: access + data PPDU + SIFS + MAC ACK PPDU."""
        return (
            self.access_ns
            + backoff_slots * self.slot_ns
            + self.data_ppdu_ns(ip_bytes)
            + self.sifs_ns
            + self.ack_ppdu_ns
        )

    def exchange_s(self, ip_bytes: int, backoff_slots: int = 0) -> float:
        """:meth:`exchange_ns` in seconds."""
        return self.exchange_ns(ip_bytes, backoff_slots) / 1e9

    # --- forms ---------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: object) -> AirSpec:
        if not isinstance(data, dict):
            raise SpecError("air", f"must be a mapping of air keys, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise SpecError(f"air.{sorted(unknown)[0]}", "unknown air key")
        return cls(**data)


def ppdu_ns(
    psdu_bytes: int,
    rate_bps: float,
    preamble_s: float = OFDM_PREAMBLE_S,
    signal_s: float = OFDM_SIGNAL_S,
    symbol_s: float = OFDM_SYMBOL_S,
) -> int:
    """TXTIME = T_PREAMBLE + T_SIGNAL + T_SYM * ceil((16 + 8 L + 6) / N_DBPS) (17.4.3), in
    whole nanoseconds, so that sums of exchanges are exact."""
    n_dbps = round(rate_bps * symbol_s)
    bits = OFDM_SERVICE_BITS + 8 * psdu_bytes + OFDM_TAIL_BITS
    symbols = -(-bits // n_dbps)
    return _ns(preamble_s) + _ns(signal_s) + symbols * _ns(symbol_s)


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _pad4(n: int) -> int:
    return (n + 3) // 4 * 4


def _number(name: str, value: object, *, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(name, f"must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise SpecError(name, f"must be finite and {'> 0' if positive else '>= 0'}, got {value!r}")


def _whole(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(name, f"must be a whole number >= {minimum}, got {value!r}")


# --- the string form: air=54mbit/6mbit and air.KEY=VALUE --------------------------------------

AIR_KEYS = (
    "difs",
    "sifs",
    "slot",
    "preamble",
    "signal",
    "mac",
    "llc",
    "fcs",
    "backoff",
    "cw",
    "ampdu",
    "order",
    "queue",
    "seed",
)
"""Keys after ``air.``: durations (difs, sifs, slot, preamble, signal), byte counts (mac =
the MAC header, llc, fcs), backoff=on|off, cw (CWmin slots), ampdu (frames per A-MPDU, 1 =
off), order=fifo|alternate, queue (frames per direction, ``1000p``), seed."""

_DURATION_KEYS = {
    "difs": "difs_s",
    "sifs": "sifs_s",
    "slot": "slot_s",
    "preamble": "preamble_s",
    "signal": "signal_s",
}
_COUNT_KEYS = {
    "mac": "mac_header_bytes",
    "llc": "llc_bytes",
    "fcs": "fcs_bytes",
    "cw": "cw_min",
    "ampdu": "ampdu_frames",
    "seed": "seed",
}


def parse_air(rates: str | None, options: dict[str, str]) -> AirSpec:
    """``air=DATA/CONTROL`` (e.g. ``54mbit/6mbit``) and its ``air.KEY`` options."""
    if rates is None:
        raise SpecError("air", "air.* options need air=DATA_RATE/CONTROL_RATE (e.g. 54mbit/6mbit)")
    data, sep, control = rates.partition("/")
    if not sep or not data.strip() or not control.strip():
        raise SpecError("air", f"{rates!r}: write DATA_RATE/CONTROL_RATE, e.g. 54mbit/6mbit")
    kwargs: dict[str, Any] = {
        "data_rate_bps": parse_rate_bps("air", data.strip()),
        "control_rate_bps": parse_rate_bps("air", control.strip()),
    }
    for key, value in options.items():
        field = f"air.{key}"
        if key in _DURATION_KEYS:
            kwargs[_DURATION_KEYS[key]] = parse_duration_s(field, value)
        elif key in _COUNT_KEYS:
            try:
                kwargs[_COUNT_KEYS[key]] = int(value)
            except ValueError:
                raise SpecError(field, f"{value!r} is not a whole number") from None
        elif key == "backoff":
            flag = value.lower()
            if flag not in ("on", "off", "true", "false", "1", "0"):
                raise SpecError(field, f"{value!r}: write on or off")
            kwargs["backoff"] = flag in ("on", "true", "1")
        elif key == "order":
            kwargs["order"] = value.lower()
        elif key == "queue":
            count = value.lower().removesuffix("p")
            try:
                kwargs["queue_packets"] = int(count)
            except ValueError:
                raise SpecError(field, f"{value!r}: a number of frames, e.g. 1000p") from None
        else:
            raise SpecError(field, f"unknown air key (known: {', '.join(AIR_KEYS)})")
    return AirSpec(**kwargs)


def format_air(air: AirSpec) -> str:
    """The string form; only keys that differ from the defaults follow ``air=``."""
    default = AirSpec()
    parts = [f"air={format_rate(air.data_rate_bps)}/{format_rate(air.control_rate_bps)}"]
    for key, name in _DURATION_KEYS.items():
        if getattr(air, name) != getattr(default, name):
            parts.append(f"air.{key}={format_duration(getattr(air, name))}")
    for key, name in _COUNT_KEYS.items():
        if getattr(air, name) != getattr(default, name):
            parts.append(f"air.{key}={getattr(air, name)}")
    if air.backoff:
        parts.append("air.backoff=on")
    if air.order != default.order:
        parts.append(f"air.order={air.order}")
    if air.queue_packets != default.queue_packets:
        parts.append(f"air.queue={air.queue_packets}p")
    return ",".join(parts)

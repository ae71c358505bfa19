"""proto.native.wire: the control protocol of tb-h3, sans-I/O (the numbers must match
tbh3.c's enums: read from its source)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from proto.native import wire

SOURCE = (Path(__file__).parent.parent / "proto" / "native" / "tbh3.c").read_text()


def frame(kind: int, conn: int = 0, stream: int = -1, t_ns: int = 0, a: int = 0, b: int = 0,
          payload: bytes = b"") -> bytes:  # fmt: skip
    return wire.HEADER.pack(len(payload), kind, conn, stream, t_ns, a, b) + payload


def test_the_numbers_are_tbh3s() -> None:
    names = dict(re.findall(r"\b(EV_[A-Z_]+|CMD_[A-Z_]+) = (\d+)", SOURCE))
    for member in wire.Ev:
        assert int(names[f"EV_{member.name}"]) == member.value
    for member in wire.Cmd:
        assert int(names[f"CMD_{member.name}"]) == member.value
    assert f"#define STAT_FIELDS {len(wire.STAT_FIELDS)}" in SOURCE
    assert wire.HEADER.size == 48


def test_a_frame_split_anywhere_decodes_once_whole() -> None:
    data = frame(wire.Ev.HEADERS, 3, 4, 2_500_000_000, 1, 0, b":status\x00200\x00server\x00x\x00")
    data += frame(wire.Ev.DATA, 3, 4, 2_600_000_000, payload=b"abc")
    for cut in range(len(data) + 1):
        decoder = wire.Decoder()
        events = decoder.feed(data[:cut]) + decoder.feed(data[cut:])
        assert [type(e) for e in events] == [wire.Headers, wire.Data]
    headers, body = events
    assert headers == wire.Headers(3, 2.5, stream=4, headers=[(":status", "200"), ("server", "x")],
                                   ended=True)  # fmt: skip
    assert body == wire.Data(3, 2.6, stream=4, data=b"abc")


def test_stats_keep_unknown_values_as_none() -> None:
    values = [7] * len(wire.STAT_FIELDS)
    values[wire.STAT_FIELDS.index("ssthresh")] = wire.NO_VALUE
    [event] = wire.Decoder().feed(frame(wire.Ev.STATS, 1, payload=wire.STATS.pack(*values)))
    assert isinstance(event, wire.Stats)
    assert event.values["ssthresh"] is None and event.values["cwnd"] == 7


@pytest.mark.parametrize(
    ("kind", "a", "b", "payload", "expected"),
    [
        (wire.Ev.READY, 4433, 0, b"", wire.Ready(0, 0.0, port=4433)),
        (wire.Ev.HANDSHAKE, 1, 1, b"", wire.Handshake(0, 0.0, True, True)),
        (wire.Ev.CLOSED, 256, 1, b"idle", wire.Closed(0, 0.0, 256, True, "idle")),
        (wire.Ev.TICKET, 0, 0, b"blob", wire.Ticket(0, 0.0, blob=b"blob")),
        (wire.Ev.ERROR, 0, 0, b"bad", wire.Error(0, 0.0, reason="bad")),
    ],
)
def test_each_kind_is_its_own_event(kind: int, a: int, b: int, payload: bytes,
                                    expected: wire.Event) -> None:  # fmt: skip
    assert wire.Decoder().feed(frame(kind, a=a, b=b, payload=payload)) == [expected]


def test_an_unknown_frame_type_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="unknown type 99"):
        wire.Decoder().feed(frame(99))


def test_commands_and_headers_round_trip() -> None:
    head = wire.encode_headers([(":method", "GET"), (":path", "/tts?x=1")])
    raw = wire.command(wire.Cmd.REQUEST, 5, a=9, b=1, payload=head)
    length, kind, conn, stream, t_ns, a, b = wire.HEADER.unpack_from(raw)
    assert (length, kind, conn, stream, t_ns, a, b) == (len(head), 102, 5, -1, 0, 9, 1)
    assert wire.decode_headers(raw[wire.HEADER.size :]) == [
        (":method", "GET"),
        (":path", "/tts?x=1"),
    ]
    with pytest.raises(ValueError, match="NUL"):
        wire.encode_headers([("x", "a\0b")])

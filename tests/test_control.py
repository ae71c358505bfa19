"""tbcore.control: the control channel's lines, typed, and every bad line refused in one
line naming the field."""

from __future__ import annotations

import pytest

from tbcore import control
from tbcore.control import ControlReply, ControlRequest
from tbcore.errors import SpecError


def test_a_request_and_a_reply_round_trip() -> None:
    request = ControlRequest(seq=3, op="lease", lease_s=12.5)
    assert control.parse_line(control.encode(request).rstrip(b"\n"), ControlRequest) == request
    reply = ControlReply(seq=3, op="time", received_s=1.0, replied_s=1.5)
    assert control.parse_line(control.encode(reply), ControlReply) == reply


REQUEST = '"schema": "control_request/1", "seq": 1, "op": "time", "lease_s": null'


def req(text: str) -> bytes:
    """A request line with ``text`` in place of (or added to) the base fields."""
    fields = dict(part.split(": ", 1) for part in REQUEST.split(", "))
    fields.update(part.split(": ", 1) for part in text.split(", ") if ": " in part)
    for gone in text.split(", "):
        if gone.startswith("-"):
            fields.pop(gone[1:])
    return ("{" + ", ".join(f"{k}: {v}" for k, v in fields.items()) + "}").encode()


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (b"x" * (control.MAX_LINE_BYTES + 1), "control"),
        (b"\xff\xfe", "control"),
        (b"{not json", "control"),
        (b"[1, 2]", "control"),
        (req('-"schema"'), "control_request.schema"),
        (req('"schema": "control_reply/1"'), "control_request.schema"),
        (req('-"seq"'), "control_request.seq"),
        (req('"x": 1'), "control_request.x"),
        (req('"seq": "1"'), "control_request.seq"),
        (req('"seq": true'), "control_request.seq"),
        (req('"op": "reboot"'), "control_request.op"),
        (req('"op": "lease", "lease_s": "10"'), "control_request.lease_s"),
    ],
)
def test_bad_lines_are_refused_in_one_line_naming_the_field(line: bytes, field: str) -> None:
    with pytest.raises(SpecError) as err:
        control.parse_line(line, ControlRequest)
    assert err.value.field == field
    assert "\n" not in str(err.value) and len(str(err.value)) < 600

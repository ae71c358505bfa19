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


REQUEST = (
    '"schema": "control_request/1", "seq": 1, "op": "time", "lease_s": null, "addr": null, '
    '"port": null'
)


def req(text: str) -> bytes:
    """A request line with ``text`` in place of (or added to) the base fields."""
    fields = dict(part.split(": ", 1) for part in REQUEST.split(", "))
    fields.update(part.split(": ", 1) for part in text.split(", ") if ": " in part)
    for gone in text.split(", "):
        if gone.startswith("-"):
            fields.pop(gone[1:])
    return ("{" + ", ".join(f"{k}: {v}" for k, v in fields.items()) + "}").encode()


RAW_LINES = [b"x" * (control.MAX_LINE_BYTES + 1), b"\xff\xfe", b"{not json", b"[1, 2]"]
BAD_FIELDS = {
    '-"schema"': "schema",
    '"schema": "control_reply/1"': "schema",
    '-"seq"': "seq",
    '"x": 1': "x",
    '"seq": "1"': "seq",
    '"seq": true': "seq",
    '"op": "reboot"': "op",
    '"op": "lease", "lease_s": "10"': "lease_s",
    '"op": "echo_start", "port": 70000': "port",
    '"op": "echo_start", "port": -1': "port",
    '"op": "echo_start", "port": 7.5': "port",
    '"op": "echo_start", "addr": "lab2"': "addr",
    '"op": "echo_start", "addr": "198.18.0.1; id"': "addr",
}
BAD_LINES = [(line, "control") for line in RAW_LINES] + [
    (req(text), f"control_request.{field}") for text, field in BAD_FIELDS.items()
]


@pytest.mark.parametrize(("line", "field"), BAD_LINES)
def test_bad_lines_are_refused_in_one_line_naming_the_field(line: bytes, field: str) -> None:
    with pytest.raises(SpecError) as err:
        control.parse_line(line, ControlRequest)
    assert err.value.field == field
    assert "\n" not in str(err.value) and len(str(err.value)) < 600

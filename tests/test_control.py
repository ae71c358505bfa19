"""tbcore.control: the control channel's lines, typed, and every bad line refused in one
line naming the field."""

from __future__ import annotations

import json

import pytest

from tbcore import control
from tbcore.control import ControlReply, ControlRequest
from tbcore.errors import SpecError


def test_a_request_and_a_reply_round_trip() -> None:
    request = ControlRequest(seq=3, op="lease", lease_s=12.5)
    assert control.parse_line(control.encode(request).rstrip(b"\n"), ControlRequest) == request
    reply = ControlReply(seq=3, op="time", received_s=1.0, replied_s=1.5)
    assert control.parse_line(control.encode(reply), ControlReply) == reply


def req(text: str) -> bytes:
    """A request line: a valid one with the fields of ``text`` (JSON object members) put in,
    or ``-"name"`` taken out."""
    fields = json.loads(ControlRequest(seq=1, op="time").to_json())
    if text.startswith("-"):
        del fields[json.loads(text[1:])]
    else:
        fields.update(json.loads("{" + text + "}"))
    return json.dumps(fields).encode()


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
    '"op": "serve", "args": "serve --bind x"': "args",
    '"op": "serve", "args": ["serve", 7]': "args",
    '"op": "serve", "files": {"../../etc/passwd": "x"}': "files",
    '"op": "serve", "files": {"/etc/passwd": "x"}': "files",
    '"op": "serve", "files": {"a": 1}': "files",
    '"op": "serve", "dirs": ["qlog/../../x"]': "files",
    '"op": "serve", "expect": "1"': "expect",
    '"op": "stop", "dir": 5': "dir",
    '"op": "sysctl", "name": ["net.ipv4.x"]': "name",
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

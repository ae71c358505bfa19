"""The control channel between the harness and a remote host's agent (issue 18): one JSON
record per line over the ssh session's stdin and stdout, typed like every other record.

The harness sends :class:`ControlRequest`; the agent answers each with one
:class:`ControlReply` (the same ``seq``). Times are the agent's CLOCK_MONOTONIC.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any

from tbcore.errors import SpecError
from tbcore.records import Record, RecordError, col, record

OPS = (
    "hello", "time", "lease", "echo_start", "echo_stop", "iperf_start", "serve", "stop",
    "sysctl", "bye",
)  # fmt: skip
"""hello: who the agent is; time: one clock exchange (harness.run.remote.clocksync); lease:
renew the agent's lease; echo_start/echo_stop: the path probe's UDP echo (netem.probe.Echo) there,
and how many probes it received; iperf_start: an iperf3 server there for one test; serve:
``testbed serve`` with ``args`` in a run directory of its own (``files`` written and
``dirs`` made in it first; ``{dir}`` in an argument is that directory), once it printed
``expect`` listening lines; stop: that server (SIGTERM, then SIGKILL), its exit status;
sysctl: read ``name``, or set it to ``value`` (restored when the agent exits); bye: end
the session (the agent stops what it started, restores what it set, then exits)."""
DIR_PLACEHOLDER = "{dir}"

REFUSED_OP = "refused"
"""The op of a reply to a line that could not be read as a request (its seq is -1)."""

MAX_PORT = 65535
RELATIVE_NAME = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*")
"""A file or directory that serve makes in its run directory."""

MAX_LINE_BYTES = 64 * 1024
"""A control line longer than this is refused without being parsed (memory stays bounded
whatever the peer sends)."""


@record("control_request", 1)
class ControlRequest(Record):
    seq: int = col(doc="the request's number; its reply carries the same")
    op: str = col(doc="one of " + ", ".join(OPS))
    lease_s: float | None = col(None, doc="lease: the new lease from now", unit="s")
    addr: str | None = col(
        None,
        doc="echo_start, iperf_start: the address to bind (None: "
        "the one the ssh session arrived at)",
    )
    port: int | None = col(None, doc="echo_start, iperf_start: the port to bind")
    args: list[str] | None = col(None, doc="serve: testbed serve's arguments")
    files: dict[str, str] | None = col(None, doc="serve: files to write in its directory")
    dirs: list[str] | None = col(None, doc="serve: directories to make in its directory")
    expect: int | None = col(None, doc="serve: the listening lines to wait for")
    dir: str | None = col(None, doc="stop: the run directory serve answered with")
    name: str | None = col(None, doc="sysctl: its name (net.*)")
    value: str | None = col(None, doc="sysctl: the value to set (None: read it)")


@record("control_reply", 1)
class ControlReply(Record):
    seq: int = col(doc="the request's number")
    op: str = col(doc="the request's op")
    error: str | None = col(None, doc="why the request was refused (one line), or None")
    received_s: float | None = col(None, doc="time: when the request arrived", unit="s")
    replied_s: float | None = col(None, doc="time: when the reply left", unit="s")
    version: str | None = col(None, doc="hello: the agent's testbed version")
    uid: int | None = col(None, doc="hello: the agent's user id (0: root)")
    kernel: str | None = col(None, doc="hello: the agent's kernel release")
    pid: int | None = col(None, doc="hello: the agent's process id there")
    missing: list[str] | None = col(None, doc="hello: the programs a run needs there that it lacks")
    addr: str | None = col(
        None,
        doc="hello: the address the ssh session arrived at; "
        "echo_start, iperf_start: the address bound",
    )
    port: int | None = col(None, doc="echo_start, iperf_start: the port bound")
    count: int | None = col(None, doc="echo_stop: the probes the echo received")
    dir: str | None = col(None, doc="serve: the server's run directory there")
    status: int | None = col(None, doc="stop: the server's exit status")
    value: str | None = col(
        None,
        doc="sysctl: the value in force before the request; stop: the last line the "
        "server wrote on stderr",
    )
    lease_s: float | None = col(None, doc="hello, lease: the lease now in force", unit="s")


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(field, f"must be a number, not {value!r}")
    return float(value)


def parse_line(line: bytes, kind: type[Record]) -> Any:
    """One control line as a record of ``kind``: one-line :class:`SpecError` (naming the
    field) for an oversized line, bad JSON, a wrong schema or a missing/unknown field."""
    if len(line) > MAX_LINE_BYTES:
        raise SpecError("control", f"line of {len(line)} bytes, at most {MAX_LINE_BYTES}")
    try:
        data = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SpecError("control", f"not JSON: {err}") from None
    if not isinstance(data, dict):
        raise SpecError("control", "a line must be a JSON object")
    message = kind.from_dict(data, kind.SCHEMA)
    if isinstance(message.seq, bool) or not isinstance(message.seq, int):
        raise RecordError(f"{kind.SCHEMA}.seq", f"must be an integer, not {message.seq!r}")
    ops = OPS if kind is ControlRequest else (*OPS, REFUSED_OP)
    if not isinstance(message.op, str) or message.op not in ops:
        raise RecordError(f"{kind.SCHEMA}.op", f"{message.op!r}, expected one of {ops}")
    _check_values(message, kind.SCHEMA)
    return message


def _check_values(message: Any, where: str) -> None:
    """The optional fields' types: numbers, a port, an IP address."""
    for name in ("lease_s", "received_s", "replied_s"):
        value = getattr(message, name, None)
        if value is not None:
            _number(value, f"{where}.{name}")
    port = getattr(message, "port", None)
    if port is not None and (
        isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= MAX_PORT
    ):
        raise RecordError(f"{where}.port", f"{port!r}, expected 0 to {MAX_PORT}")
    addr = getattr(message, "addr", None)
    if addr is not None:
        check_address(addr, f"{where}.addr")
    _check_strings(message, where)


def _check_strings(message: Any, where: str) -> None:
    """serve's arguments, file names and directories; sysctl's name and value."""
    for name in ("args", "dirs"):
        value = getattr(message, name, None)
        if value is not None and (
            not isinstance(value, list) or not all(isinstance(v, str) for v in value)
        ):
            raise RecordError(f"{where}.{name}", "must be a list of strings")
    files = getattr(message, "files", None)
    if files is not None and (
        not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values())
    ):
        raise RecordError(f"{where}.files", "must map file names to their text")
    for name in [*(files or {}), *(getattr(message, "dirs", None) or [])]:
        if not RELATIVE_NAME.fullmatch(name) or ".." in name.split("/"):
            raise RecordError(f"{where}.files", f"{name!r}: a relative name without ..")
    for name in ("dir", "name", "value"):
        value = getattr(message, name, None)
        if value is not None and not isinstance(value, str):
            raise RecordError(f"{where}.{name}", f"must be a string, not {value!r}")
    expect = getattr(message, "expect", None)
    if expect is not None and (isinstance(expect, bool) or not isinstance(expect, int)):
        raise RecordError(f"{where}.expect", f"must be an integer, not {expect!r}")


def check_address(value: Any, field: str) -> None:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise SpecError(field, f"{value!r} is not an IP address") from None


def encode(message: Record) -> bytes:
    return message.to_json().encode() + b"\n"

"""Requests and responses as FEC transfers: ``head length (4) | head (JSON) | body``.

A request head is ``{"method", "path", "content_length"}`` (the same fields as the HTTP
requests of the other protocols); a response head is ``{"status", "headers": [[k, v], ...]}``.
The whole message is one erasure-coded transfer; the response reuses the request's
transfer id in the other direction.
"""

from __future__ import annotations

import json
import struct

from proto.http import RequestHead

_LENGTH = struct.Struct("!I")
MAX_HEAD_BYTES = 16_384


def _pack(head: dict, body: bytes) -> bytes:
    raw = json.dumps(head, separators=(",", ":")).encode()
    return _LENGTH.pack(len(raw)) + raw + body


def _unpack(payload: bytes) -> tuple[dict, bytes]:
    if len(payload) < _LENGTH.size:
        raise ValueError("message shorter than its head length")
    (length,) = _LENGTH.unpack_from(payload)
    if length > MAX_HEAD_BYTES or _LENGTH.size + length > len(payload):
        raise ValueError(f"bad head length {length}")
    try:
        head = json.loads(payload[_LENGTH.size : _LENGTH.size + length])
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"head is not JSON: {err}") from None
    if not isinstance(head, dict):
        raise ValueError("head is not an object")
    return head, payload[_LENGTH.size + length :]


def pack_request(method: str, path: str, body: bytes, declared_length: int | None = None) -> bytes:
    length = len(body) if declared_length is None else declared_length
    head = {"method": method, "path": path, "content_length": length if method == "POST" else None}
    return _pack(head, body)


def unpack_request(payload: bytes) -> tuple[RequestHead, bytes]:
    """(head, body); ValueError on a malformed message."""
    head, body = _unpack(payload)
    method, path, length = head.get("method"), head.get("path"), head.get("content_length")
    if not isinstance(method, str) or not isinstance(path, str) or not path.startswith("/"):
        raise ValueError("request head needs method and path")
    if length is not None and (not isinstance(length, int) or length < 0):
        raise ValueError(f"bad content_length {length!r}")
    return RequestHead(method=method, path=path, content_length=length), body


def pack_response(status: int, headers: list[tuple[str, str]], body: bytes) -> bytes:
    return _pack({"status": status, "headers": [list(h) for h in headers]}, body)


def unpack_response(payload: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    head, body = _unpack(payload)
    status, headers = head.get("status"), head.get("headers", [])
    if not isinstance(status, int) or not isinstance(headers, list):
        raise ValueError("response head needs status and headers")
    pairs = [(str(k), str(v)) for k, v in headers]
    return status, pairs, body

"""The request head every protocol carries (HTTP/2 and HTTP/3 headers, the FEC protocol's
head): what the servers route on and the FEC wire encodes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RequestHead:
    method: str
    path: str
    """Path with query, as sent in ``:path``."""
    content_length: int | None = None
    priority: str | None = None
    """The RFC 9218 ``priority`` header field value, if sent."""

    @classmethod
    def from_headers(
        cls, headers: list[tuple[bytes, bytes]] | list[tuple[str, str]]
    ) -> RequestHead:
        """Build from HTTP/2 or HTTP/3 header pairs; raises ValueError on a bad head."""
        values: dict[str, str] = {}
        for raw_name, raw_value in headers:
            name = raw_name.decode() if isinstance(raw_name, bytes) else raw_name
            value = raw_value.decode() if isinstance(raw_value, bytes) else raw_value
            values[name.lower()] = value
        method = values.get(":method")
        path = values.get(":path")
        if not method or not path:
            raise ValueError("missing :method or :path")
        length = values.get("content-length")
        content_length = None
        if length is not None:
            if not (length.isascii() and length.isdigit()):
                raise ValueError(f"bad content-length {length!r}")
            content_length = int(length)
        return cls(
            method=method,
            path=path,
            content_length=content_length,
            priority=values.get("priority"),
        )

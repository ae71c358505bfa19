"""Client configuration: the run's settings (tbcore.settings) plus what belongs to this
process (peer address, files), validated on construction."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tbcore import kinds
from tbcore.errors import SpecError
from tbcore.sampler import DEFAULT_SAMPLE_HZ, check_sample_hz
from tbcore.settings import HasSettings, Settings, by_attr

DEFAULT_PORT = 8443
DEFAULT_UDP_BUFFER_BYTES = 8 * 1024 * 1024
"""UDP SO_RCVBUF/SO_SNDBUF: loopback overflows the 208 KB default (docs/machine.md)."""


@dataclass
class ClientConfig(HasSettings):
    """Everything ``testbed client`` takes. The knobs of a run are in ``settings``
    (protocol, workload, requests, warmup_requests, connection, resume, sockets...)."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    settings: Any = field(default_factory=Settings)
    """The run's :class:`tbcore.settings.Settings`."""
    records_path: Path | None = None
    samples_path: Path | None = None
    sample_hz: float = DEFAULT_SAMPLE_HZ
    qlog_dir: Path | None = None
    keylog_path: Path | None = None
    server_name: str = "testbed.local"
    source_addr: str | None = None
    """Bind the client's socket to this local address first (one path of a dual topology:
    its source rule routes it over that path); None: the kernel picks."""
    udp_buffer_bytes: int = DEFAULT_UDP_BUFFER_BYTES
    applied_path: Path | None = None
    """Where the client records what it put in force (tbcore.records.AppliedRecord, JSONL)."""

    def __post_init__(self) -> None:
        self.check_settings()
        rate_attr = kinds.protocol(self.settings.protocol).path_rate_attr
        if rate_attr is not None and getattr(self.settings, rate_attr) is None:
            flag = by_attr()[rate_attr].flag[2:]
            raise SpecError(
                flag, f"the {self.settings.protocol} client needs the path's rate (e.g. 333mbit)"
            )
        if not 0 < self.port <= 65535:
            raise SpecError("port", f"{self.port} is not in 1..65535")
        check_sample_hz("sample-hz", self.sample_hz)

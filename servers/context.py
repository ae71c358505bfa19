"""What every connection of one server process shares: config, event log, counters."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from servers.app import AppConfig
from servers.config import ServerConfig
from servers.events import EventLog
from tbcore.records import NO_APPLIED_LOG, AppliedLog
from tbcore.sampler import Sampler


@dataclass
class ServerContext:
    config: ServerConfig
    log: EventLog
    sampler: Sampler | None = None
    """Sender-side in-flight sampler (one response at a time), when asked for."""
    applied: AppliedLog = NO_APPLIED_LOG
    """What the server puts in force, per connection and response (AppliedRecord)."""
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def sample_response(
        self,
        key: str,
        probe: Callable[[], dict[str, Any]],
        drained: Callable[[dict[str, Any]], bool],
    ) -> list[bool]:
        """Start sampling a response; returns a flag list: set ``[0] = True`` once the last
        byte is written, and sampling stops at the first sample that ``drained`` accepts."""
        done = [False]
        if self.sampler is not None:
            self.sampler.start(key, probe, stop_when=lambda values: done[0] and drained(values))
        return done

    def next_conn_id(self) -> int:
        return next(self._ids)

    @property
    def app_config(self) -> AppConfig:
        return AppConfig(
            processing_audio_s=self.config.settings.processing_audio_s,
            processing_image_s=self.config.settings.processing_image_s,
            max_body_bytes=self.config.max_body_bytes,
            agent_model_s=self.config.settings.agent_model_s,
            task_success=self.config.settings.task_success,
            processing_restore_s=self.config.settings.processing_restore_s,
        )

    @property
    def tcp_options(self) -> Any:
        """The settings whose TCP knobs every socket of this server gets."""
        return self.config.settings

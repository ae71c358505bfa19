"""Run ``testbed serve`` as a subprocess and learn its ports: for tests, benchmarks and any
caller that wants the real command line rather than the library."""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from tbcore.processes import stop_process

LISTEN_LINE = re.compile(
    r"^listening (?P<proto>h2|h3|fec) (?P<transport>tcp|udp) (?P<addr>\S+):(?P<port>\d+)$"
)
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 5.0


@dataclass
class ServerProcess:
    """``with ServerProcess(["--log", "x.jsonl"]) as server: server.ports["h2"]``."""

    args: list[str] = field(default_factory=list)
    bind: str = "127.0.0.1"
    command: list[str] | None = None
    """Prefix to run (e.g. a namespace wrapper); default: this Python's ``harness.cli``."""
    ports: dict[str, int] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    lines: list[str] = field(default_factory=list)
    _stderr: Any = None

    def start(self) -> ServerProcess:
        base = self.command or [sys.executable, "-m", "harness.cli"]
        argv = [*base, "serve", "--bind", self.bind, *self.args]
        if "--h2-port" not in self.args and "--no-h2" not in self.args:
            argv += ["--h2-port", "0"]
        if "--h3-port" not in self.args and "--no-h3" not in self.args:
            argv += ["--h3-port", "0"]
        expected = sum(flag not in self.args for flag in ("--no-h2", "--no-h3"))
        expected += "--fec-port" in self.args
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=self._stderr,  # a file, not a pipe: a full pipe would block the server
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        selector = selectors.DefaultSelector()
        selector.register(fd, selectors.EVENT_READ)
        deadline = time.monotonic() + START_TIMEOUT_S
        pending = b""
        try:
            while len(self.ports) < expected:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    raise TimeoutError(f"server did not listen within {START_TIMEOUT_S} s")
                chunk = os.read(fd, 4096)  # raw reads: a buffered reader could hide lines
                if not chunk:
                    err = (
                        self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                    )
                    raise RuntimeError(f"server exited: {err.strip()[-500:]}")
                pending += chunk
                *complete, pending = pending.split(b"\n")
                for raw in complete:
                    line = raw.decode(errors="replace").strip()
                    self.lines.append(line)
                    match = LISTEN_LINE.match(line)
                    if match:
                        self.ports[match["proto"]] = int(match["port"])
        except BaseException:
            self.stop()
            raise
        finally:
            selector.close()
        return self

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after a grace period; returns the exit status."""
        if self.proc is None:
            return None
        stop_process(self.proc, STOP_TIMEOUT_S)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        return self.proc.returncode

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

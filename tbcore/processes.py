"""Stopping a child process the same way everywhere: a signal, a grace period, then kill."""

from __future__ import annotations

import contextlib
import signal
import subprocess


def stop_process(
    proc: subprocess.Popen | None, timeout_s: float, sig: int = signal.SIGTERM
) -> int | None:
    """Send ``sig`` to a running ``proc``, wait up to ``timeout_s``, then SIGKILL and reap.
    Returns the exit status (None without a process)."""
    if proc is None:
        return None
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode

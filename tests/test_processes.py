"""Stopping a child: the signal first, SIGKILL when it does not go."""

from __future__ import annotations

import signal
import subprocess
import sys

from tbcore.processes import stop_process


def test_a_child_that_obeys_exits_with_the_signal() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    assert stop_process(proc, timeout_s=5.0) == -signal.SIGTERM


def test_a_child_that_ignores_the_signal_is_killed() -> None:
    code = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    code += "print('ready', flush=True); time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    assert stop_process(proc, timeout_s=0.2) == -signal.SIGKILL
    proc.stdout.close()


def test_nothing_to_stop() -> None:
    assert stop_process(None, timeout_s=1.0) is None

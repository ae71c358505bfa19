"""The host-wide run lock: a second holder waits for the first, `off` turns it off, the lock
dies with its holder."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.run import lock as runlock
from harness.run.lock import exclusive_run

HOLD = """
import fcntl, os, sys, time
handle = open(sys.argv[1], "a+")
fcntl.flock(handle, fcntl.LOCK_EX)
handle.seek(0); handle.truncate(); handle.write(str(os.getpid())); handle.flush()
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _holder(path: Path, hold_s: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path), str(hold_s)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_run_waits_for_the_holder_and_hears_its_pid(tmp_path: Path) -> None:
    path = tmp_path / "lock" / "tb-run.lock"
    path.parent.mkdir()
    holder = _holder(path, 0.5)
    heard: list[str] = []
    try:
        with exclusive_run(heard.append, path) as waited:
            assert holder.wait(timeout=5.0) == 0  # it had to end (or be ending) first
            assert path.read_text() == str(os.getpid())
    finally:
        holder.kill()
        holder.wait()
    assert waited > 0.1
    assert len(heard) == 1 and f"pid {holder.pid}" in heard[0]


def test_an_uncontended_lock_is_taken_at_once_and_again_after(tmp_path: Path) -> None:
    path = tmp_path / "run" / "tb-run.lock"  # its directory is made
    heard: list[str] = []
    for _ in range(2):
        with exclusive_run(heard.append, path, clock=lambda: 0.0) as waited:
            assert waited == 0.0
    assert heard == []


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    path = tmp_path / "tb-run.lock"
    holder = _holder(path, 60.0)
    holder.kill()
    holder.wait()
    done = threading.Event()

    def take() -> None:
        with exclusive_run(lambda _: None, path):
            done.set()

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    thread.join(timeout=10.0)
    assert done.is_set()


def test_the_environment_chooses_the_file_or_turns_it_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(runlock.RUN_LOCK_ENV, raising=False)
    assert runlock.lock_path() == runlock.RUN_LOCK_PATH
    monkeypatch.setenv(runlock.RUN_LOCK_ENV, str(tmp_path / "x.lock"))
    assert runlock.lock_path() == tmp_path / "x.lock"
    monkeypatch.setenv(runlock.RUN_LOCK_ENV, "off")
    start = time.monotonic()
    holder = _holder(tmp_path / "x.lock", 30.0)
    try:
        with exclusive_run(lambda _: None) as waited:  # off: the holder does not matter
            assert waited == 0.0
    finally:
        holder.kill()
        holder.wait()
    assert time.monotonic() - start < 20.0


HOLD_SHARED = """
import fcntl, sys, time
handle = open(sys.argv[1], "a+")
fcntl.flock(handle, fcntl.LOCK_SH)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _shared_holder(path: Path, hold_s: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD_SHARED, str(path), str(hold_s)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_sharing_runs_hold_the_lock_together_each_in_a_slot(tmp_path: Path) -> None:
    path = tmp_path / "tb-run.lock"
    heard: list[str] = []
    with (
        exclusive_run(heard.append, path, shared=True) as first,
        exclusive_run(heard.append, path, shared=True) as second,
    ):
        held = [s for s in runlock.slot_paths(path) if _slot_taken(s)]
        assert len(held) == 2
    assert first == 0.0 and second == 0.0 and heard == []
    assert not any(_slot_taken(s) for s in runlock.slot_paths(path))


def _slot_taken(slot: Path) -> bool:
    import fcntl

    with open(slot, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def test_an_exclusive_run_waits_for_a_sharing_one_and_back(tmp_path: Path) -> None:
    path = tmp_path / "tb-run.lock"
    holder = _shared_holder(path, 0.5)
    heard: list[str] = []
    try:
        with exclusive_run(heard.append, path) as waited:
            assert holder.wait(timeout=5.0) == 0
    finally:
        holder.kill()
        holder.wait()
    assert waited > 0.1 and len(heard) == 1
    exclusive = _holder(path, 0.5)  # an exclusive holder keeps a sharing run out
    try:
        with exclusive_run(heard.append, path, shared=True) as waited:
            assert exclusive.wait(timeout=5.0) == 0
    finally:
        exclusive.kill()
        exclusive.wait()
    assert waited > 0.1


def test_a_sharing_run_waits_when_every_slot_is_taken(tmp_path: Path) -> None:
    path = tmp_path / "tb-run.lock"
    holders = [_holder(slot, 0.6) for slot in runlock.slot_paths(path)]
    heard: list[str] = []
    try:
        with exclusive_run(heard.append, path, shared=True) as waited:
            pass
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
    assert waited > 0.3
    assert any("sharing slots" in line for line in heard)

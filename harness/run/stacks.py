"""The stacks' processes of a run: their command lines (the knobs in one settings document
per end), and how they start in a namespace at the endpoints' priority and say they are
ready."""

from __future__ import annotations

import selectors
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness.store.files import QLOG_DIR, SERVER_SAMPLES
from harness.store.resultdir import atomic_write_json
from netem import nsexec
from netem.linkspec import LinkSpec
from tbcore import kinds
from tbcore.processes import stop_process
from tbcore.settings import Settings

SERVER_START_TIMEOUT_S = 30.0
SERVER_STOP_TIMEOUT_S = 10.0
ENDPOINT_RR_PRIORITY = 1
"""The client and the server run SCHED_RR at priority 1, below the emulator (SCHED_FIFO 10)
and above every normal task. Under a CPU-bound neighbour a stack otherwise waits for a CPU
at every wake-up: beside two busy loops at nice 0, on this host's EEVDF scheduler, with
the stacks at nice -10 in an autogroup of their own, h2-reused still took 242-250 ms and
h3-reused 259-274 ms (241-243 and 244-257 ms alone); at SCHED_RR 1 they took 241-243 and
240-242 ms, every run valid (issue 10's closing note). Round-robin, so that client and
server share a CPU in turns; a CPU-bound stack is held to the kernel's real-time budget
(sched_rt_runtime_us, 95 %). Both arms of every experiment get the same; what a run got
is in its row (sched_client, sched_server)."""
ENDPOINT_NICE = -10
"""Where real-time scheduling is refused (no CAP_SYS_NICE, no RT budget in a container's
cgroup), the stacks at least run at nice -10, as a session and autogroup of their own
(sched(7)): CFS/EEVDF weights 9548 : 1024 against a nice-0 neighbour."""


def testbed_argv() -> list[str]:
    """How to start ``testbed`` in a child: this interpreter, the package's entry point."""
    return [sys.executable, "-m", "harness.cli"]


def write_settings(run_dir: Path, name: str, settings: Settings) -> Path:
    """The settings document one end reads (``--settings FILE``), kept with the run."""
    path = run_dir / name
    atomic_write_json(path, settings.document())
    return path


SERVER_SAMPLE_HZ = 100.0
"""The server samples its sender every 10 ms (20 samples per round trip of the chapter's
200 ms path): enough for the trace, and a thread that wakes 100 times a second costs the
(Python, one GIL) server about 0.2 % of a core, where the client's 1 kHz would compete with
aioquic's sending."""


def server_argv(
    settings: Settings, link: LinkSpec, *, bind: str, port: int, run_dir: Path
) -> list[str]:
    """``testbed serve`` of a run: its addresses and files; the knobs in one document."""
    listeners = kinds.protocol(settings.protocol).listeners(port)
    own = ["--bind", bind, *listeners, "--log", str(run_dir / "server.jsonl")]
    # the data sender's own state over the response (TCP_INFO, aioquic's recovery and BBR):
    # the congestion-control trace of the report (harness.report.cctrace)
    own += ["--samples", str(run_dir / SERVER_SAMPLES), "--sample-hz", f"{SERVER_SAMPLE_HZ:g}"]
    return _stack_argv("serve", "server", settings.for_end(link.down.rate_bps), run_dir, own)


def client_argv(
    settings: Settings, link: LinkSpec, *, host: str, port: int, run_dir: Path
) -> list[str]:
    """``testbed client`` of a run: its peer and files; the knobs in one document."""
    files = ["--records", str(run_dir / "records.jsonl"), "--samples", str(run_dir / "samples.csv")]
    own = ["--host", host, "--port", str(port), *files]
    return _stack_argv("client", "client", settings.for_end(link.up.rate_bps), run_dir, own)


def _stack_argv(
    command: str, role: str, settings: Settings, run_dir: Path, own: list[str]
) -> list[str]:
    """What both ends take: the keylog, the settings document, the qlog directory (made
    here: aioquic refuses a missing one) for a protocol that writes qlog."""
    document = write_settings(run_dir, f"{role}-settings.json", settings)
    argv = [*testbed_argv(), command, *own, "--keylog", str(run_dir / "keys.log")]
    argv += ["--settings", str(document), "--applied", str(run_dir / f"{role}-applied.jsonl")]
    if settings.qlog and kinds.protocol(settings.protocol).qlog:
        qlog = run_dir / QLOG_DIR / role
        qlog.mkdir(parents=True, exist_ok=True)
        argv += ["--qlog-dir", str(qlog)]
    return argv


def wait_listening(proc: subprocess.Popen, expected: int, timeout_s: float) -> list[str]:
    """Read the process's stdout until ``expected`` 'listening' lines (or fail)."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None

    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while sum("listening" in line for line in lines) < expected:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{_name(proc)} did not listen within {timeout_s:g} s")
            if not sel.select(timeout=left):
                continue
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{_name(proc)} exited ({proc.wait()}) before listening")
            lines.append(line.decode(errors="replace").rstrip())
    return lines


def _name(proc: subprocess.Popen) -> str:
    """The testbed command a process runs (``serve``, ``relay``), for its errors."""
    args = proc.args if isinstance(proc.args, list) else []
    words = [str(a) for a in args]
    if "harness.cli" in words and words.index("harness.cli") + 1 < len(words):
        return words[words.index("harness.cli") + 1]
    return "server"


def popen_endpoint(ns: str | None, argv: list[str], **kwargs: Any) -> subprocess.Popen:
    """A stack process (client, server, relay) in namespace ``ns`` at the endpoints'
    priority (:data:`ENDPOINT_RR_PRIORITY`, else :data:`ENDPOINT_NICE`)."""

    return nsexec.popen(ns, argv, nice=ENDPOINT_NICE, rr_priority=ENDPOINT_RR_PRIORITY, **kwargs)


def start_in_namespace(ns: str, argv: list[str], stderr: Path, ready: str) -> subprocess.Popen:
    """A stack process (server, relay) in ``ns``, once its stdout says ``ready`` (a line
    with 'listening'); its stderr to the file ``stderr``. Never orphaned: a timeout, an exit
    or a signal while it starts stops it before the error goes on."""
    with open(stderr, "wb") as log:
        proc = popen_endpoint(ns, argv, stdout=subprocess.PIPE, stderr=log)
    try:
        lines = wait_listening(proc, 1, SERVER_START_TIMEOUT_S)
        if not any(ready in line for line in lines):
            raise RuntimeError(f"{argv[3]} said {lines[-1]!r}, not {ready!r}")
    except BaseException:
        stop_process(proc, SERVER_STOP_TIMEOUT_S)
        raise
    return proc


def start_server(link: Any, argv: list[str], run_dir: Path) -> subprocess.Popen:
    """The server in its namespace, once it says it listens."""
    return start_in_namespace(link.server_ns, argv, run_dir / "server.stderr", "listening")


def start_client(
    ns: str | None, argv: list[str], run_dir: Path, piped: bool = False
) -> subprocess.Popen:
    """The client in its namespace; ``piped``: its stdout read for ``progress N`` lines."""
    stdout = subprocess.PIPE if piped else subprocess.DEVNULL
    with open(run_dir / "client.stderr", "wb") as client_err:
        return popen_endpoint(ns, argv, stdout=stdout, stderr=client_err)

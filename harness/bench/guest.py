"""A benchmark's part inside the stock-kernel QEMU guest (``.ci/netem-vm``), for what this
host's kernel lacks (sch_netem): boot it, run one command of the repository there, read the
JSON file the command wrote into the guest's writable share.

The guest mounts this host's root read-only (with a tmpfs over it) and runs the command from
the repository with the host's virtual environment, under QEMU's software CPU (TCG): its
rates and CPU times are the guest's, not this host's, and a report names them as such.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from tbcore import procfs
from tbcore.errors import SpecError

GUEST_OUT = Path("/run/tb-vm/out")
"""The guest's writable share (.ci/vm/init): a file written here comes back to the host."""
REPO_ROOT = Path(__file__).resolve().parents[2]
STAGE = REPO_ROOT / ".ci" / "netem-vm"


def guest_path(name: str) -> str:
    """Where a command in the guest writes ``name`` for the host to read."""
    return str(GUEST_OUT / name)


def run_in_guest(
    command: list[str], result_name: str, timeout_s: float
) -> tuple[Any, dict[str, Any]]:
    """Run ``command`` (cwd: the repository) in the guest; the JSON it wrote to
    :func:`guest_path` ``(result_name)``, and the host's conditions while it ran."""
    if not STAGE.exists():
        raise SpecError("guest", f"{STAGE} is missing: the guest needs the repository's VM stage")
    with tempfile.TemporaryDirectory(prefix="tb-guest-") as work:
        before = procfs.host_cpu()
        started = time.monotonic()
        proc = subprocess.run(
            [
                "bash",
                str(STAGE),
                "--work",
                work,
                "--timeout",
                str(timeout_s),
                "--command",
                shlex.join(command),
            ],
            stdin=subprocess.DEVNULL,
            timeout=timeout_s + 60,
            check=False,
        )
        spent = procfs.host_cpu() - before
        host = {
            "host_steal_percent": round(100 * (spent.steal_fraction or 0.0), 1),
            "host_loadavg_1min": round(os.getloadavg()[0], 2),
            "vm_stage_s": round(time.monotonic() - started, 1),
            "host_kernel": platform.release(),
        }
        result = Path(work) / "out" / result_name
        if proc.returncode != 0 or not result.exists():
            raise OSError(f"the guest part failed (stage exit {proc.returncode})")
        return json.loads(result.read_text()), host

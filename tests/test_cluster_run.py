"""A real Dask cluster on this host: a scheduler and two workers (each its own run lock and
host name), one tiny experiment's blocks over them (root, slow)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from harness.cluster.experiment import run_on_cluster
from harness.cluster.submit import ClusterOptions
from harness.plan.planner import plan_for
from harness.spec import experiment as specmod

pytestmark = [pytest.mark.root, pytest.mark.slow]

TINY = """
name = "cluster-tiny"
question = "Does a cluster make the same planned runs as one host?"
repetitions = 3
seed = 5

[fixed]
link = "rtt=10ms,rate=100mbit"
workload = "asr"
processing_audio = "5ms"
timeout = "20s"

[factor]
name = "connection"
settings = ["connection", "warmup_requests"]

[[factor.levels]]
name = "h2-new"
connection = "new"

[[factor.levels]]
name = "h2-reused"
connection = "reused"
warmup_requests = 1
"""

BIN = Path(sys.executable).parent


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker(address: str, name: str, tmp: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TESTBED_HOST": name, "TESTBED_RUN_LOCK": str(tmp / f"{name}.lock")}
    return subprocess.Popen(
        [str(BIN / "dask"), "worker", address, "--name", name, "--nthreads", "1",
         "--resources", "testbed=1", "--no-nanny", "--host", "127.0.0.1"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


@contextlib.contextmanager
def cluster(tmp: Path) -> Iterator[tuple[str, dict[str, subprocess.Popen[bytes]]]]:
    port = _port()
    address = f"tcp://127.0.0.1:{port}"
    procs = {
        "scheduler": subprocess.Popen(
            [
                str(BIN / "dask"),
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--dashboard-address",
                f"127.0.0.1:{_port()}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    }
    try:
        time.sleep(2)
        procs.update({n: _worker(address, n, tmp) for n in ("tbdk-w1", "tbdk-w2")})
        from distributed import Client

        with Client(address, timeout=30, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=60)
        yield address, procs
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


def _exactly_once(path: Path, spec: specmod.ExperimentSpec) -> pd.DataFrame:
    frame = pd.read_csv(path / "runs.csv")
    assert sorted(frame["run_id"]) == sorted(r.run_id for r in plan_for(spec))
    assert set(frame["host"]) <= {"tbdk-w1", "tbdk-w2"}
    assert (frame.groupby("block")["host"].nunique() == 1).all()  # a block on one host
    return frame


@pytest.mark.timeout(240)
def test_every_block_exactly_once_and_a_killed_worker(tmp_path: Path) -> None:
    spec = specmod.loads(TINY)
    with cluster(tmp_path) as (address, procs):
        result = run_on_cluster(spec, ClusterOptions(address, attempts=1), output=tmp_path)
        frame = _exactly_once(result.result.path, spec)
        manifest = json.loads((result.result.path / "manifest.json").read_text())
        assert sorted(manifest["cluster"]["blocks"]) == ["0", "1", "2"]
        assert set(manifest["cluster"]["hosts"]) == {"tbdk-w1", "tbdk-w2"}
        assert (result.result.path / "report.md").read_text().count("## Host effect") == 1
        assert len(frame) == 6
        # a worker killed while its block runs: the block is made again elsewhere, whole
        killed: list[float] = []
        w1 = procs["tbdk-w1"]

        def kill_w1_mid_block() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not killed:
                pgrep = ["pgrep", "-P", str(w1.pid), "-f", "cluster.block"]
                children = subprocess.run(pgrep, capture_output=True, text=True).stdout.split()
                if children:
                    time.sleep(1.0)  # inside the block's first run
                    w1.send_signal(signal.SIGKILL)
                    killed.append(time.monotonic())
                time.sleep(0.1)

        killer = threading.Thread(target=kill_w1_mid_block, daemon=True)
        killer.start()
        second = run_on_cluster(
            spec, ClusterOptions(address, attempts=1), output=tmp_path / "again"
        )
        killer.join(timeout=5)
        assert killed, "worker 1 never ran a block"
        frame = _exactly_once(second.result.path, spec)
        assert set(frame["host"]) == {"tbdk-w2"}


@pytest.mark.timeout(240)
def test_resume_after_the_client_is_killed(tmp_path: Path) -> None:
    spec_file = tmp_path / "tiny.toml"
    spec_file.write_text(TINY)
    spec = specmod.loads(TINY)
    with cluster(tmp_path) as (address, _):
        command = [str(BIN / "testbed"), "run", str(spec_file), "--cluster", address,
                   "--attempts", "1"]  # fmt: skip
        client = subprocess.Popen([*command, "--output", str(tmp_path / "out")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        deadline = time.monotonic() + 120
        manifests: list[Path] = []
        while time.monotonic() < deadline:
            manifests = list((tmp_path / "out").glob("*/*/manifest.json"))
            if manifests and json.loads(manifests[0].read_text()).get("cluster", {}).get("blocks"):
                break
            time.sleep(0.05)
        client.send_signal(signal.SIGKILL)
        client.wait(timeout=10)
        directory = manifests[0].parent
        before = json.loads(manifests[0].read_text())["cluster"]["blocks"]
        assert 1 <= len(before) < 3
        done = subprocess.run([*command, "--resume", str(directory)], timeout=180,
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode in (0, 1), done.stderr
        _exactly_once(directory, spec)
        after = json.loads((directory / "manifest.json").read_text())["cluster"]
        assert sorted(after["blocks"]) == ["0", "1", "2"]
        for block, record in before.items():  # a block made before the kill is not made again
            assert after["blocks"][block]["finished_utc"] == record["finished_utc"]
        assert sum(s["blocks"] for s in after["sessions"]) == 3 - len(before)

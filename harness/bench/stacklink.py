"""``testbed bench stacks``' third table: both QUIC stacks across the emulated link at the
chapter's 333 Mbit/s (200 ms round trip, no loss, BBR on both, 1452-byte datagrams): the 5 MB
result down on a new connection, ``--reps`` runs of each stack in alternation through the
harness like any experiment (harness.run.runner), so that the CPU is the runs' own
(runs.csv ``cpu_client_s`` / ``cpu_server_s``: each end's process tree during the request,
the native engine with its edge) beside the emulator's, on the same two cores.

Per stack, the medians over its valid runs: the request's time and goodput (body bits over
first request byte to last response byte), each end's CPU seconds, its CPU per datagram
handled (the request's data and ACK-only packets, both directions: runs.csv
``data_packets`` + ``ack_only_packets``, each crossing both ends) and the share of a core
that rate means at 333 Mbit/s (the end's CPU per body byte times 333 Mbit/s of body).
Root is needed (namespaces and the emulator).
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from harness.run.runner import run_experiment
from harness.spec import experiment as specmod
from tbcore import workloads

CHAPTER_RATE_BPS = 333e6
"""The chapter's path rate (§12.1)."""
US_PER_S = 1e6
EXPERIMENT = """
name = "bench-stacks-link"
question = "What do the two QUIC stacks cost per datagram across the chapter's link?"
repetitions = {reps}
order = "alternate"
seed = 39
warmup_runs = 0

[fixed]
link = "rtt=200ms,rate=333mbit"
protocol = "h3"
workload = "result"
connection = "new"
cc = "bbr"
max_datagram_size = 1452
timeout = "120s"

[factor]
name = "quic_stack"
settings = ["quic_stack"]
levels = [
  {{ name = "aioquic", quic_stack = "aioquic" }},
  {{ name = "ngtcp2", quic_stack = "ngtcp2" }},
]
"""
BODY_BYTES = workloads.RETOUCHED_SIZE_BYTES


def summary(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Per stack, the medians of its valid runs (module docstring)."""
    rows = []
    valid = frame[frame["valid"].astype(str) == "True"]
    for stack, runs in valid.groupby("quic_stack", sort=False):
        line: dict[str, Any] = {"stack": stack, "runs": len(runs)}
        total = runs["total_s"].astype(float)
        handled = runs["data_packets"].astype(float) + runs["ack_only_packets"].astype(float)
        line["total_ms"] = statistics.median(total) * 1e3
        line["goodput_mbit_s"] = statistics.median(BODY_BYTES * 8 / total / 1e6)
        for end in ("client", "server"):
            cpu = runs[f"cpu_{end}_s"].astype(float)
            line[f"{end}_cpu_ms"] = statistics.median(cpu) * 1e3
            line[f"{end}_us_per_dgram"] = statistics.median(cpu * US_PER_S / handled)
            at_rate = cpu * (CHAPTER_RATE_BPS / 8) / BODY_BYTES
            line[f"{end}_cores_at_333mbit"] = statistics.median(at_rate)
        rows.append(line)
    return rows


def run_link(reps: int) -> list[dict[str, Any]]:
    """``reps`` runs of each stack across the link (module docstring)."""
    spec = specmod.loads(EXPERIMENT.format(reps=reps))
    with tempfile.TemporaryDirectory(prefix="tb-benchlink-") as tmp:
        result = run_experiment(spec, output=Path(tmp), link_name="benchsl")
        frame = pd.read_csv(result.result.path / "runs.csv")
    return summary(frame)

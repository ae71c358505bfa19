"""The emulator's lateness over a run, from its packet log: when each packet was due and when
it left (harness.validity.rules judges the run by it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.store.files import PACKET_LOGS
from harness.validity.rules import PacketTimes


def emulator_lateness(run_dir: Path) -> dict[str, PacketTimes] | None:
    """Per direction, the send, release and lateness times of every packet the emulator
    released during the run, from its packet log; None when the run has no log (kernel
    netem, no capture)."""
    out: dict[str, PacketTimes] = {}
    for direction, name in PACKET_LOGS.items():
        path = Path(run_dir) / name
        if not path.is_file():
            return None
        try:
            frame = pd.read_csv(path, usecols=["event", "arrival_s", "due_s", "departure_s"])
        except (pd.errors.EmptyDataError, ValueError):
            return None
        departed = frame[frame["event"] == "departed"]
        times = {
            column: pd.to_numeric(departed[column], errors="coerce").to_numpy(dtype=float)
            for column in ("arrival_s", "due_s", "departure_s")
        }
        keep = np.logical_and.reduce([np.isfinite(v) for v in times.values()])
        departure = times["departure_s"][keep]
        out[direction] = PacketTimes(
            sent_s=times["arrival_s"][keep],
            departure_s=departure,
            lateness_s=departure - times["due_s"][keep],
        )
    return out

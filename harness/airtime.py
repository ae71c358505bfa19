"""What a run's shared medium did (an ``air=`` link), beside the exchange model's bound.

From the emulator's medium accounts over the run (:class:`netem.stats.AirStats`, the
difference of the two snapshots that bracket the client): the row's columns and the run's
``air.json`` (per direction and frame kind: frames, IP bytes, measured and modelled medium
time, exchanges, waiting time, refused frames).

The bound is :func:`harness.bounds.airtime_bound` applied to the frames the medium carried:
the medium time they needed by the 802.11a exchange arithmetic, and the completion time no
request carrying them can beat. ``air_model_error`` compares the medium's own busy time
with the model; the two differ only by the mean-size rounding of the model (and by the
backoff, when it is on, which the model leaves out).
"""

from __future__ import annotations

from typing import Any

from harness.bounds import airtime_bound
from netem.air import AirSpec
from netem.stats import AIR_KEYS, AirStats

AIR_COLUMNS = (
    "air_busy_s",
    "air_frames",
    "air_busy_data_s",
    "air_busy_ack_s",
    "air_frames_data",
    "air_frames_ack",
    "air_frames_up",
    "air_frames_down",
    "air_bound_busy_s",
    "air_model_error",
    "air_bound_s",
)
"""runs.csv columns of an air= run (absent on other links)."""


def air_record(
    air_stats: AirStats, air: AirSpec, *, processing_s: float, rtt_s: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(row columns, the ``air.json`` document) of one run's medium accounts."""
    bound = airtime_bound(
        air_stats.frames, air_stats.ip_bytes, processing_s=processing_s, rtt_s=rtt_s, air=air
    )
    busy = {k: v / 1e9 for k, v in air_stats.busy_ns.items()}
    frames = air_stats.frames

    def total(values: dict[str, Any], part: str) -> Any:
        return sum(v for k, v in values.items() if part in k.split("."))

    row = {
        "air_busy_s": air_stats.busy_s,
        "air_frames": air_stats.frames_total,
        "air_busy_data_s": total(busy, "data"),
        "air_busy_ack_s": total(busy, "ack"),
        "air_frames_data": total(frames, "data"),
        "air_frames_ack": total(frames, "ack"),
        "air_frames_up": total(frames, "up"),
        "air_frames_down": total(frames, "down"),
        "air_bound_busy_s": bound.busy_s,
        "air_model_error": (air_stats.busy_s / bound.busy_s - 1.0 if bound.busy_s > 0 else None),
        "air_bound_s": bound.total_s,
    }
    doc = {
        "air": air.to_dict(),
        "by_kind": {
            key: {
                "frames": frames.get(key, 0),
                "ip_bytes": air_stats.ip_bytes.get(key, 0),
                "busy_s": busy.get(key, 0.0),
                "model_s": bound.medium_s.get(key, 0.0),
            }
            for key in AIR_KEYS
        },
        "exchanges": dict(air_stats.exchanges),
        "wait_s": {k: v / 1e9 for k, v in air_stats.wait_ns.items()},
        "dropped": dict(air_stats.dropped),
        "busy_s": air_stats.busy_s,
        "bound": {
            "busy_s": bound.busy_s,
            "data_s": bound.data_s,
            "ack_s": bound.ack_s,
            "processing_s": bound.processing_s,
            "rtt_s": bound.rtt_s,
            "total_s": bound.total_s,
        },
    }
    return row, doc

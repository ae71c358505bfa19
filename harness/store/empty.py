"""Why a runs.csv column is empty in every row (empty_columns.csv beside it). Sans-I/O.

An empty cell cannot tell "none" from "not computed": for every column no row filled, this
names the reason the experiment's runs give, from what the rows say (their workload,
protocol, path and settings); a column no rule explains says so.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from tbcore import kinds

REQUEST_COLUMNS = (
    "handshake_s", "ttfb_s", "resumed", "early_data_accepted", "client_retransmits",
    "client_min_rtt_s", "processing_s", "server_receive_s", "server_turnaround_s",
    "server_send_s",
)  # fmt: skip
"""One request's columns (a ``t_*`` stamp too)."""
BOUND_PARTS = (
    "bound_s", "ratio", "bound_setup_s", "bound_feedback_s", "bound_window_s",
    "bound_serialisation_s", "bound_propagation_s", "bound_processing_s",
    "bound_retransmission_s", "bound_expected_s", "bound_mathis_s",
)  # fmt: skip


def _values(frame: pd.DataFrame, column: str) -> set[str]:
    return {str(v) for v in frame[column].dropna()} if column in frame else set()


def _all_workloads(frame: pd.DataFrame, test: Callable[[kinds.WorkloadKind], bool]) -> bool:
    names = _values(frame, "workload")
    return bool(names) and all(n in kinds.WORKLOADS and test(kinds.WORKLOADS[n]) for n in names)


def _lossless(frame: pd.DataFrame) -> bool:
    return "loss" in frame and pd.to_numeric(frame["loss"], errors="coerce").fillna(0).eq(0).all()


def why(column: str, frame: pd.DataFrame) -> str:
    """The reason ``column`` is empty in every row of ``frame`` (runs.csv)."""
    agent = _all_workloads(frame, lambda w: w.records == "agent_round")
    unbounded = _all_workloads(frame, lambda w: not w.bounded)
    if agent and (column in REQUEST_COLUMNS or column.startswith("t_")):
        return ("an agent run is one task of rounds, not one request: each round's times are "
                "in rounds.csv and the agent_* columns")  # fmt: skip
    if unbounded and column in BOUND_PARTS:
        return ("a streamed workload has no request bound: its model is per chunk "
                "(playback.csv predicted_*)")  # fmt: skip
    if unbounded and column in ("processing_s", "server_turnaround_s"):
        return "the server paces the chunks: no request processing to time"
    if column == "bound_mathis_s":
        if _lossless(frame):
            return "no random loss on the path: Mathis' rate needs a loss rate"
        if agent:
            return "the agent's bound has no loss model"
    if agent and column == "bound_window_s":
        return "on a traced path the agent's bound counts window growth in bound_feedback_s"
    if agent and column in BOUND_PARTS and not _lossless(frame):
        return "the agent's bound has no loss model: on a lossy path its parts are not computed"
    if agent and column in BOUND_PARTS:
        return ("the version that made these runs kept the agent bound's total only (later "
                "versions write its parts)")  # fmt: skip
    if column == "invalid_reason":
        return "every run was valid"
    if unbounded and column in ("bound_basis", "below_bound"):
        return "a streamed workload has no request bound to compare with"
    if column == "bound_basis":
        if agent:
            return ("every run's bound is the plan's: no run's rounds showed a premise of it "
                    "unmet (a round lost or redone), and no run made several tasks or "
                    "judged attempts")  # fmt: skip
        return ("only an agent run's records can change what its bound is computed from (a "
                "round lost or redone, the attempts of its tasks): every bound here is the "
                "plan's")  # fmt: skip
    if column == "below_bound":
        return _not_below(frame)
    if column == "ignored_settings":
        return "every setting the file gave took effect on every run"
    if column.startswith("outage_"):
        return "no outage configured (outage_after_round)" if agent else "not an agent run"
    if column == "site_energy_j":
        return "no site_power set: no energy to state"
    if column == "agent_handshake_s":
        return "no run's rounds recorded a handshake (its connection opened before them)"
    if column == "client_retransmits" and _values(frame, "protocol") <= {"h3", "fec"}:
        return "TCP_INFO only: a QUIC run's losses are in its qlog columns"
    return "no run filled it, and no rule here names why"


def _not_below(frame: pd.DataFrame) -> str:
    """Why no row has ``below_bound``: no run had a bound and a time, or none was below its
    bound beyond the stated error (with the least time-to-bound ratio, from the rows)."""
    if "total_s" not in frame or "bound_s" not in frame:
        return "no run has both a measured time and a bound to compare"
    total = pd.to_numeric(frame["total_s"], errors="coerce")
    bound = pd.to_numeric(frame["bound_s"], errors="coerce")
    ratios = (total / bound)[(bound > 0) & total.notna()]
    if ratios.empty:
        return "no run has both a measured time and a bound to compare"
    return (
        f"no run finished below its bound beyond the clock's and the emulator's stated error "
        f"(the least time / bound: {ratios.min():.3f})"
    )


def empty_columns(frame: pd.DataFrame) -> list[dict[str, str]]:
    """``column``, ``reason`` for every column of ``frame`` no row filled, in its order."""
    return [{"column": c, "reason": why(c, frame)} for c in frame.columns if frame[c].isna().all()]

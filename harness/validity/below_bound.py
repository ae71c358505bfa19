"""A run faster than its lower bound is a finding, not a result to keep quiet about (issue
27): the bound took a premise the run did not meet. :func:`below_bound` says by how much
the run was below, and names the premise its row shows unmet (or says that its records name
none). Pure: a row's values and the run's settings in, one line out.

Below means below by more than what the clocks and the emulator can get wrong:

- the clock: one CLOCK_MONOTONIC for every process of a run on one host
  (:data:`CLOCK_ERROR_S`); across two hosts the row's ``server_clock_error_s``;
- the emulator: :data:`EMULATOR_DELAY_ERROR_S` per round trip (the p99 RTT error the link's
  bench holds it to, docs/measurements.md "The emulated path") and
  :data:`EMULATOR_RATE_ERROR` of the bound's serialisation (the rate it held UDP overload to).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

CLOCK_ERROR_S = 1e-6
"""CLOCK_MONOTONIC read by every process on one host: its resolution (clock_getres: 1 ns)
and the read's cost, rounded up."""
EMULATOR_DELAY_ERROR_S = 1e-3
"""The emulator's stated RTT error: 1 ms p99 (its target; measured +0.36 to +0.43 ms)."""
EMULATOR_RATE_ERROR = 1e-3
"""The emulator's stated rate error: within 0.1 % of the configured rate."""


def tolerance_s(row: Mapping[str, Any]) -> float:
    """How far below its bound a run may be and still be within the stated errors."""
    clock = _num(row.get("server_clock_error_s"))
    trips = sum(_num(row.get(c)) or 0.0 for c in ("flights_up", "flights_down")) or 1.0
    serial = _num(row.get("bound_serialisation_s")) or 0.0
    return (
        (clock if clock is not None else CLOCK_ERROR_S)
        + EMULATOR_DELAY_ERROR_S * max(1.0, trips)
        + EMULATOR_RATE_ERROR * serial
    )


@dataclass(frozen=True)
class Premise:
    """One premise a bound takes, and how a row shows it unmet."""

    took: str
    """What the bound assumed."""
    shown: Callable[[Mapping[str, Any], Any], str | None]
    """From the row (and the settings): what happened instead, None when it held or the
    row cannot tell."""


def _num(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _ms(value: float) -> str:
    return f"{value * 1e3:.1f} ms"


def _round_trip(row: Mapping[str, Any], _settings: Any) -> str | None:
    measured, configured = _num(row.get("measured_rtt_s")), _num(row.get("rtt_s"))
    if measured is None or configured is None:
        return None
    if measured < configured - EMULATOR_DELAY_ERROR_S:
        return f"the handshake's round trip was {_ms(measured)}"
    return None


def _setup(row: Mapping[str, Any], _settings: Any) -> str | None:
    measured, bound = _num(row.get("handshake_s")), _num(row.get("bound_setup_s"))
    if measured is None or bound is None or measured >= bound - EMULATOR_DELAY_ERROR_S:
        return None
    resumed = " (the session was resumed)" if row.get("resumed") else ""
    return f"the set-up took {_ms(measured)}{resumed}"


def _processing(row: Mapping[str, Any], _settings: Any) -> str | None:
    measured, bound = _num(row.get("processing_s")), _num(row.get("bound_processing_s"))
    if measured is None or bound is None or measured >= bound - EMULATOR_DELAY_ERROR_S:
        return None
    return f"the server processed for {_ms(measured)}"


def _agent_redo(row: Mapping[str, Any], settings: Any) -> str | None:
    planned = getattr(settings, "outage_after_round", None)
    redone = _num(row.get("agent_redone"))
    if planned is None or redone is None:
        return None
    expected = planned + 1 if getattr(settings, "recovery", "") == "restart" else 1
    if redone >= expected:
        return None
    return (
        f"the run redid {redone:.0f} round(s): the transport rode through the outage"
        if redone == 0
        else f"the run redid {redone:.0f} round(s)"
    )


def _agent_model(row: Mapping[str, Any], settings: Any) -> str | None:
    rounds, busy = _num(row.get("agent_rounds_done")), _num(row.get("site_busy_s"))
    model = _num(getattr(settings, "agent_model_s", None))
    if rounds is None or busy is None or model is None or busy >= rounds * model - 1e-3:
        return None
    return f"the server executed {busy:.2f} s of model for {rounds:.0f} rounds (stored results)"


PREMISES = (
    Premise("the configured round trip", _round_trip),
    Premise("the set-up its connection mode takes (section 4)", _setup),
    Premise("the configured server processing", _processing),
    Premise("an outage loses the round in flight and the recovery redoes it", _agent_redo),
    Premise("every round's model time is spent", _agent_model),
)
"""What the bounds of harness.bounds assume that a run can show unmet, in the order a
reader should look at them."""


def below_bound(row: Mapping[str, Any], settings: Any = None) -> str | None:
    """None when the run is not below its bound (beyond :func:`tolerance_s`); else one line:
    how far below, and the premise the run did not meet (or that its records name none)."""
    total, bound = _num(row.get("total_s")), _num(row.get("bound_s"))
    if total is None or bound is None or bound <= 0:
        return None
    allowed = tolerance_s(row)
    if total >= bound - allowed:
        return None
    unmet = [f"{p.took}: {shown}" for p in PREMISES if (shown := p.shown(row, settings))]
    premise = (
        "; ".join(unmet)
        if unmet
        else "none the run's records show unmet (the bound's inputs as configured)"
    )
    return (
        f"{total / bound:.3f} x the bound ({_ms(bound - total)} below, beyond the "
        f"{_ms(allowed)} the clock and the emulator allow); premise not met: {premise}"
    )

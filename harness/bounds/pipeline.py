"""docs/models.md section 2: the chunk pipeline (data dependency and resource contention)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tbcore.errors import SpecError

if TYPE_CHECKING:
    pass

from harness.bounds.base import _non_negative, _sequence


def pipeline(
    ready_s: Sequence[float],
    process_s: Sequence[float],
    send_s: Sequence[float],
    delay_s: Sequence[float],
) -> list[float]:
    """Section 2: arrival times ``r_i`` of chunks through one processor and one egress.

    ``c_i = max(a_i, c_{i-1}) + m_i``, ``u_i = max(c_i, u_{i-1}) + s_i``, ``r_i = u_i + d_i``.
    """
    ready = _sequence("ready_s", ready_s, _non_negative)
    process = _sequence("process_s", process_s, _non_negative)
    send = _sequence("send_s", send_s, _non_negative)
    delay = _sequence("delay_s", delay_s, _non_negative)
    for name, values in (("process_s", process), ("send_s", send), ("delay_s", delay)):
        if len(values) != len(ready):
            raise SpecError(name, f"has {len(values)} items, ready_s has {len(ready)}")
    processed = sent = -math.inf
    arrivals: list[float] = []
    for a, m, s, d in zip(ready, process, send, delay, strict=True):
        processed = max(a, processed) + m
        sent = max(processed, sent) + s
        arrivals.append(sent + d)
    return arrivals

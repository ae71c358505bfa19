"""The request bound of a :class:`~netem.linkspec.LinkSpec`: its round trip, each direction's
rate or capacity trace and mean loss (docs/models.md sections 1, 4, 6, 9 and 14).

A path whose directions hold fixed rates gets :func:`harness.bounds.request.request_time`;
one with a capacity trace on either direction gets
:func:`harness.bounds.trace.trace_request_time` at the positions its traces had when the
request started (``positions_s``, from the run's trace clock; by default each trace's offset,
where the traces start when the spec is applied).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Unpack

from harness.bounds.base import RequestArgs
from harness.bounds.request import RequestBound, request_time
from harness.bounds.trace import TraceRequestBound, direction_bottleneck, trace_request_time
from tbcore.errors import SpecError

if TYPE_CHECKING:
    from netem.linkspec import LinkSpec


def request_time_for_link(
    link: LinkSpec,
    *,
    positions_s: Mapping[str, float] | None = None,
    shares: Mapping[str, float] | None = None,
    extra_rtt_s: float = 0.0,
    **request: Unpack[RequestArgs],
) -> RequestBound | TraceRequestBound:
    """The request's bound on ``link``. ``positions_s``: per traced direction (``up``,
    ``down``), where its trace was at the request's start; ``shares``: the part of a
    direction's capacity the request may use (docs/models.md section 15, ``1 / (n + 1)``);
    ``extra_rtt_s``: a standing queue the request's round trips cross (section 15)."""
    positions = dict(positions_s or {})
    share = dict(shares or {})
    for name in ("up", "down"):
        spec = getattr(link, name)
        if spec.rate_bps is None and spec.rate_trace is None:
            raise SpecError(f"{name}.rate", "the bound needs a rate on both directions")
    if not link.up.rate_trace and not link.down.rate_trace:
        return request_time(
            rtt_s=link.rtt_s + extra_rtt_s,
            up_bps=link.up.rate_bps * share.get("up", 1.0),  # type: ignore[operator]
            down_bps=link.down.rate_bps * share.get("down", 1.0),  # type: ignore[operator]
            up_loss=link.up.mean_loss,
            down_loss=link.down.mean_loss,
            **request,
        )
    return trace_request_time(
        up=direction_bottleneck(link.up, positions.get("up"), share.get("up", 1.0)),
        down=direction_bottleneck(link.down, positions.get("down"), share.get("down", 1.0)),
        up_delay_s=link.up.min_delay_s + extra_rtt_s,
        down_delay_s=link.down.min_delay_s,
        up_loss=link.up.mean_loss,
        down_loss=link.down.mean_loss,
        **request,
    )

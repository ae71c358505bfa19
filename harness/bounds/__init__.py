"""The analytic lower bounds of docs/models.md as plain functions, one module per model.

Units are SI throughout: seconds, bytes, bits per second; loss is a fraction in [0, 1).
Every function rejects impossible input with :class:`~tbcore.errors.SpecError` (a
``ValueError``) that names the argument, so a notebook user sees which one was wrong.

The modules follow docs/models.md's sections: serial (1), pipeline (2), playback (3), setup (4),
window (5), slowstart (6), overhead (7), mathis (8), retransmission (9), fec (10),
twopaths (12), airtime (7 on a shared medium), agent (the chapter's agent task); request
and relay combine them into the bound every run is put beside; examples recomputes every
worked example of docs/models.md (``testbed bounds``). This package re-exports their names, so
``from harness import bounds`` then ``bounds.request_time(...)`` reads as one room.
"""

from harness.bounds.agent import (  # noqa: F401
    AgentBound,
    AgentTraceBound,
    agent_break_even_rounds,
    agent_deadline_rate_bps,
    agent_energy_j,
    agent_recovery_cost_s,
    agent_redone_rounds,
    agent_round_time,
    agent_task_on_trace,
    agent_task_time,
)
from harness.bounds.airtime import (  # noqa: F401
    CHAPTER_ACK_IP_BYTES,
    CHAPTER_DATA_IP_BYTES,
    IMAGE_EXCHANGES,
    AirtimeBound,
    airtime_bound,
    airtime_exchanges,
    airtime_s,
)
from harness.bounds.base import (  # noqa: F401
    BITS_PER_BYTE,
    CONNECTIONS,
    FEC_NEW_SESSION_RTTS,
    INITCWND_SEGMENTS,
    MATHIS_C_PERIODIC,
    MODELS_MSS_BYTES,
    PROTOCOLS,
    QUIC_MAX_DATAGRAM_BYTES,
    SETUP_RTTS,
    TCP_MSS_BYTES,
    TLS13_TCP_SETUP_RTTS,
)
from harness.bounds.examples import AUDIO_BYTES, MBIT, WorkedExample, worked_examples  # noqa: F401
from harness.bounds.fec import (  # noqa: F401
    FecBound,
    fec_repair_symbols,
    fec_request_time,
    fec_success_probability,
)
from harness.bounds.mathis import mathis_throughput_bps  # noqa: F401
from harness.bounds.onlink import RequestArgs, request_time_for_link  # noqa: F401
from harness.bounds.overhead import policy_acks_per_packet, wire_bytes  # noqa: F401
from harness.bounds.pipeline import pipeline  # noqa: F401
from harness.bounds.playback import Playback, buffer_depletion_s, playback  # noqa: F401
from harness.bounds.relay import RelayBound, relay_request_time  # noqa: F401
from harness.bounds.request import (  # noqa: F401
    DirectionRounds,
    Parts,
    RequestBound,
    direction_rounds,
    request_time,
)
from harness.bounds.retransmission import retransmission_rounds, retransmission_time_s  # noqa: F401
from harness.bounds.serial import serial_time  # noqa: F401
from harness.bounds.setup import setup_rtts, setup_time_s  # noqa: F401
from harness.bounds.slowstart import slow_start_rounds  # noqa: F401
from harness.bounds.trace import (  # noqa: F401
    TraceRequestBound,
    direction_bottleneck,
    trace_request_time,
)
from harness.bounds.twopaths import (  # noqa: F401
    duplicate_failover_time_s,
    duplicate_failure,
    duplicate_time_s,
    failover_time_s,
    split_fractions,
    split_time_s,
)
from harness.bounds.window import bdp_bytes, window_throughput_bps  # noqa: F401

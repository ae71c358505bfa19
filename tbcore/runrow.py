"""The run row: one line of runs.csv (and each run's row.json), as one typed record.

Every column is a field here, with its unit in the name and its meaning in ``doc``;
results/README.md is generated from this class (:func:`columns_markdown`). A new column is
one ``col(...)`` field plus the code that fills it; renaming or changing the meaning of one
bumps the version in ``@record``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import fields
from typing import Any, ClassVar

from tbcore.records import REQUIRED, SCHEMA_KEY, Record, col, record

RENAMED = {"air_busy_ack_s": "air_time_ack_s", "air_busy_data_s": "air_time_data_s"}
"""Columns of older versions by their new names (version 6)."""


@record("run", 9)
class RunRow(Record):
    """One run (one client process) of an experiment, valid or not.

    Version 5 added ``host`` (harness.cluster) and ``lock_wait_s``; version 6 the ACK
    policy's columns (``acks_per_packet``, ``ack_delay_p50_s``, ``ack_delay_p99_s``,
    ``wire_bytes_data``, ``wire_bytes_ack``) and named the medium's time by kind
    ``air_time_*`` (:data:`RENAMED`); version 7 ``transmission_rounds``; version 8
    ``paths_down`` and ``delivered``; version 9 ``agent_tasks_done`` and ``task_attempts``.
    A row of an older version (``run/1`` to ``run/8``) is
    read with the columns it predates as None (its testbed did not measure them); a column
    it has that this version does not know is still refused."""

    READS_OLDER: ClassVar[bool] = True

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "") -> RunRow:
        if cls.older_version(data.get(SCHEMA_KEY)) is not None:
            data = {RENAMED.get(k, k): v for k, v in data.items()}
        return super().from_dict(data, where)

    # --- the plan
    run_id: str = col(REQUIRED, doc="Stable name of the run: sequence, level, repetition.")
    seq: int = col(REQUIRED, doc="Position in the whole plan, from 0.")
    block: int = col(REQUIRED, doc="Block (one run per level), warm-up blocks included.")
    position: int = col(REQUIRED, doc="Position of the run inside its block, from 0.")
    level: str = col(REQUIRED, doc="The level (arm) of the factor.")
    rep: int = col(REQUIRED, doc="Repetition within its level; warm-up runs count below 0.")
    warmup: bool = col(REQUIRED, doc="A warm-up run (not analysed).")
    link_seed: int = col(REQUIRED, doc="Seed of the link's loss generators (same per block).")
    attempt: int = col(1, doc="Attempt of its planned run, from 1; an invalid run is re-run.")
    host: str | None = col(
        doc="The host that made the run (its host name, or TESTBED_HOST); a block never spans "
        "hosts (harness.cluster)."
    )
    # --- what ran
    protocol: str | None = col(doc="h2 or h3 (settings.protocol).")
    connection: str | None = col(doc="new, reused or 0rtt.")
    workload: str | None = col(doc="asr, tts, retouch, stream...")
    cc: str | None = col(doc="Congestion control of the protocol's transport.")
    quic_stack: str | None = col(
        group="h3",
        doc="h3: the QUIC implementation, aioquic or ngtcp2 (tbcore.quicstack); only in an "
        "experiment with an h3 level.",
    )
    paced: bool | None = col(doc="The data sender paces (bbr, a pacing rate, aioquic's pacer).")
    link: str | None = col(
        doc="The link as configured (netem.linkspec string); on a real path (backend real), "
        "as the probe before the run's block measured it, as are rtt_s, loss, up_bps and "
        "down_bps."
    )
    backend: str | None = col(
        doc="The path: the emulator's backend (userspace, netem), or real (a remote host)."
    )
    rtt_s: float | None = col(doc="Configured round trip.", unit="s")
    loss: float | None = col(doc="Configured mean loss of the lossier direction.")
    up_bps: float | None = col(doc="Configured rate client to server.", unit="bit/s")
    down_bps: float | None = col(doc="Configured rate server to client.", unit="bit/s")
    started_utc: str | None = col(doc="When the run started (ISO 8601, UTC).")
    # --- the measured request (the median of the run's measured requests)
    up_bytes: int | None = col(doc="Request body bytes.", unit="bytes")
    down_bytes: int | None = col(doc="Response body bytes.", unit="bytes")
    requests: int | None = col(doc="Measured requests that completed.")
    handshake_s: float | None = col(doc="Connect start to handshake done (0 if reused).", unit="s")
    ttfb_s: float | None = col(doc="Start to the first response byte.", unit="s")
    total_s: float | None = col(
        doc="Start (connect, or first request byte on a warm connection) to the last "
        "response byte.",
        unit="s",
    )
    t_connect_s: float | None = col(doc="Connect start, from the start.", unit="s")
    t_handshake_s: float | None = col(doc="Handshake done, from the start.", unit="s")
    t_request_first_s: float | None = col(doc="First request byte, from the start.", unit="s")
    t_request_last_s: float | None = col(doc="Last request byte, from the start.", unit="s")
    t_response_first_s: float | None = col(doc="First response byte, from the start.", unit="s")
    t_response_last_s: float | None = col(doc="Last response byte, from the start.", unit="s")
    resumed: bool | None = col(doc="TLS session resumed.")
    early_data_accepted: bool | None = col(doc="QUIC 0-RTT data accepted.")
    sha256_ok: bool | None = col(doc="Every checksum of every measured request matched.")
    client_retransmits: int | None = col(
        doc="The client's own count at the end of the request: TCP_INFO total_retrans (h2), "
        "aioquic packets lost (h3)."
    )
    client_min_rtt_s: float | None = col(
        doc="The client's RTT floor at the end of the request (TCP_INFO min_rtt, aioquic min_rtt).",
        unit="s",
    )
    # --- the server's view
    processing_s: float | None = col(doc="Server processing_start to processing_end.", unit="s")
    server_receive_s: float | None = col(doc="Server: first to last request byte read.", unit="s")
    server_turnaround_s: float | None = col(
        doc="Server: processing end (without processing: the last request byte read) to "
        "first response byte written.",
        unit="s",
    )
    server_send_s: float | None = col(doc="Server: first to last response byte written.", unit="s")
    # --- a server on another host (testbed run --remote; harness.run.remote.path)
    remote_host: str | None = col(group="remote", doc="The server's host, as ssh was given it.")
    server_clock_offset_s: float | None = col(
        group="remote",
        doc="Its CLOCK_MONOTONIC minus ours at the run (harness.run.remote.clocksync); server "
        "times were moved onto ours by it.",
        unit="s",
    )
    server_clock_error_s: float | None = col(
        group="remote",
        doc="The offset is true within this (half the best exchange's round trip): so is "
        "every time across the two hosts.",
        unit="s",
    )
    one_way_up_s: float | None = col(
        group="remote", doc="First request byte up, across clocks.", unit="s"
    )
    one_way_down_s: float | None = col(
        group="remote", doc="First response byte down, across clocks.", unit="s"
    )
    one_way_flag: str | None = col(
        group="remote",
        doc="negative: a one-way delay came out below 0 (within the offset's error); "
        "impossible: below 0 by more than the error (the clocks moved).",
    )
    # --- the bound (harness/bounds/, docs/models.md)
    bound_s: float | None = col(doc="Analytic lower bound of the request.", unit="s")
    ratio: float | None = col(doc="total_s / bound_s.")
    bound_setup_s: float | None = col(doc="Bound: connection set-up.", unit="s")
    bound_feedback_s: float | None = col(doc="Bound: ACK feedback of window growth.", unit="s")
    bound_window_s: float | None = col(doc="Bound: waits for a capped window.", unit="s")
    bound_serialisation_s: float | None = col(doc="Bound: bytes at the path rate.", unit="s")
    bound_propagation_s: float | None = col(doc="Bound: one-way delays.", unit="s")
    bound_processing_s: float | None = col(doc="Bound: server processing.", unit="s")
    bound_retransmission_s: float | None = col(doc="Bound: expected retransmission time.", unit="s")
    bound_expected_s: float | None = col(doc="Bound plus expected loss recovery.", unit="s")
    bound_mathis_s: float | None = col(
        doc="The data direction at min(path, Mathis rate) (docs/models.md section 8).", unit="s"
    )
    bound_basis: str | None = col(
        doc="What the bound was computed from: the plan (None), or 'records: ...' when the "
        "run's own records showed a premise of the planned bound unmet (an agent run with no "
        "round lost or redone) and the bound took what happened, or the rounds of an agent "
        "run's task attempts (agent_tasks, task_success) that the bound counts."
    )
    below_bound: str | None = col(
        doc="The run was below its bound by more than the clock's and the emulator's stated "
        "error (harness.validity.below_bound): by how much, and the premise of the bound the "
        "run did not meet (or that its records show none)."
    )
    # --- packets (pcap for h2, qlog for h3), within the request
    acks: int | None = col(doc="ACKs the data sender got during the request.")
    min_rwnd_bytes: int | None = col(doc="Smallest receive window advertised (h2).", unit="bytes")
    retransmits: int | None = col(
        doc="Data segments sent again (h2, by time of sending) or packets declared lost "
        "(h3) during the request."
    )
    transmission_rounds: int | None = col(
        doc="TCP: the most times one byte of the request's data was sent, from the capture "
        "at its sender (1: nothing resent; docs/models.md section 9's K for the run, "
        "harness.collect.rounds); empty for QUIC, whose packets are never sent again."
    )
    measured_rtt_s: float | None = col(
        doc="Handshake RTT from the capture (h2) or qlog min_rtt (h3).", unit="s"
    )
    # --- the data receiver's ACK policy as it acted (harness.collect.feedback; issue 38)
    acks_per_packet: float | None = col(
        doc="ACKs sent per data packet received in the request, both directions' receivers "
        "(QUIC: packets carrying an ACK per ack-eliciting packet, from each end's qlog; TCP: "
        "pure ACKs per data segment, from the capture at each end).",
    )
    model_acks_per_packet: float | None = col(
        doc="Section 7's ACKs per data packet for the run's ack_policy (harness.bounds."
        "policy_acks_per_packet): 1, 1/N, TCP's delayed 1/2, TACK's at the path's rate; "
        "empty where the stack's timer or the sender decides."
    )
    model_wire_bytes_ack: int | None = col(
        doc="Section 7's ACK bytes for the data packets measured: data_packets x "
        "model_acks_per_packet x the mean ACK-only packet measured (beside wire_bytes_ack).",
        unit="bytes",
    )
    ack_delay_p50_s: float | None = col(
        doc="Median wait of an ACK at the receiver: sent minus the arrival of the packet it "
        "newly acknowledges as largest.",
        unit="s",
    )
    ack_delay_p99_s: float | None = col(doc="p99 of that wait.", unit="s")
    wire_bytes_data: int | None = col(
        doc="IP bytes of the data packets received in the request, both directions.",
        unit="bytes",
    )
    wire_bytes_ack: int | None = col(
        doc="IP bytes of the ACK-only packets the receivers sent back.", unit="bytes"
    )
    data_packets: int | None = col(
        doc="Data packets received in the request, both directions (what acks_per_packet "
        "and wire_bytes_data count)."
    )
    ack_only_packets: int | None = col(
        doc="ACK-only packets the receivers sent for them (what wire_bytes_ack counts)."
    )
    ack_frequency_frames: int | None = col(
        doc="ACK_FREQUENCY frames the receivers followed (ack_policy ack-frequency: how "
        "often the data sender changed their ACK rate).",
    )
    # --- the link over the run
    realised_loss_up: float | None = col(doc="Packets the emulator dropped for loss, up.")
    realised_loss_down: float | None = col(doc="Packets the emulator dropped for loss, down.")
    queue_drops_up: int | None = col(doc="Packets dropped by a full queue, up.")
    queue_drops_down: int | None = col(doc="Packets dropped by a full queue, down.")
    dropped_loss_up: int | None = col(doc="Packets dropped by the loss model, up.")
    dropped_loss_down: int | None = col(doc="Packets dropped by the loss model, down.")
    lateness_p99_s: float | None = col(
        doc="Emulator p99 release lateness, the worse direction.", unit="s"
    )
    # --- the shared medium of an air= link (netem.emulator.medium; harness.collect.airtime)
    air_busy_s: float | None = col(
        group="air",
        doc="Medium occupied while the client ran (set-up, request, close), both directions.",
        unit="s",
    )
    air_frames: int | None = col(group="air", doc="Frames the medium carried, both directions.")
    air_time_data_s: float | None = col(group="air", doc="Medium time of data frames.", unit="s")
    air_time_ack_s: float | None = col(
        group="air",
        doc="Medium time of ACK-only frames (TCP without payload; non-TCP <= 128 IP bytes).",
        unit="s",
    )
    air_frames_data: int | None = col(group="air", doc="Data frames, both directions.")
    air_frames_ack: int | None = col(group="air", doc="ACK-only frames, both directions.")
    air_frames_up: int | None = col(group="air", doc="Frames client to server.")
    air_frames_down: int | None = col(group="air", doc="Frames server to client.")
    air_bound_busy_s: float | None = col(
        group="air",
        doc="The exchange model (harness.bounds.airtime_bound) on the frames carried.",
        unit="s",
    )
    air_model_error: float | None = col(group="air", doc="air_busy_s / air_bound_busy_s - 1.")
    air_bound_s: float | None = col(
        group="air",
        doc="Completion bound of those frames: max(all exchanges, data exchanges + processing "
        "+ wired RTT).",
        unit="s",
    )
    # --- the path's shape (a relay, two paths: netem.topologyspec; harness.run.topologies)
    topology: str | None = col(doc="direct, relay or dual (settings.topology).")
    route: str | None = col(group="relay", doc="relay: through the relay, or direct past it.")
    multipath: str | None = col(group="dual", doc="dual: single, mptcp, split or duplicate.")
    exit_link: str | None = col(group="dual", doc="dual: the shared exit's link, if any.")
    bytes_near_link: int | None = col(
        group="relay", doc="Bytes the near_link edge delivered up.", unit="bytes"
    )
    bytes_link: int | None = col(
        group="topology",
        doc="Bytes the link edge delivered up (a topology of edges).",
        unit="bytes",
    )
    bytes_link_b: int | None = col(group="dual", doc="Bytes link_b delivered up.", unit="bytes")
    bytes_exit_link: int | None = col(
        group="dual", doc="Bytes the exit_link edge delivered up.", unit="bytes"
    )
    bytes_sent_app: int | None = col(
        group="dual", doc="dual: payload bytes the client sent (copies included).", unit="bytes"
    )
    split_fraction_link: float | None = col(group="dual", doc="split: the payload's share on link.")
    paths_down: str | None = col(
        group="dual",
        doc="path_failures: the edges drawn down for the run, joined by '+' (none: none).",
    )
    delivered: bool | None = col(
        group="dual",
        doc="path_failures: the server got a whole copy (False: the trial failed, an outcome, "
        "not an error).",
    )
    dropped_outage_link: int | None = col(
        group="dual", doc="Packets the link edge's outage dropped (up)."
    )
    outage_after_start_s: float | None = col(
        group="dual",
        doc="failover: the link's outage began this long into the transfer.",
        unit="s",
    )
    recovery_s: float | None = col(
        group="dual", doc="failover: total_s minus the ideal continuation (its bound).", unit="s"
    )
    detected_after_outage_s: float | None = col(
        group="dual",
        doc="h3 migration: the path taken for dead, after the outage began.",
        unit="s",
    )
    resumed_after_outage_s: float | None = col(
        group="dual",
        doc="h3 migration: the first ACK on the second path, after the outage.",
        unit="s",
    )
    # --- a link that follows a capacity trace (harness.collect.traces; issue 28)
    trace_position_up_s: float | None = col(
        group="trace_up",
        doc="Where the uplink's traces were when the measured work began (seconds into "
        "them, wrapping with their period): the bound starts there.",
        unit="s",
    )
    trace_position_down_s: float | None = col(
        group="trace_down", doc="The same for the downlink's traces.", unit="s"
    )
    offered_up_bps: float | None = col(
        group="trace",
        doc="The mean capacity the uplink offered while the measured work ran (its trace's "
        "opportunities, or its fixed rate).",
        unit="bit/s",
    )
    offered_down_bps: float | None = col(
        group="trace", doc="The same for the downlink.", unit="bit/s"
    )
    # --- competing traffic on the bottleneck (harness.run.cross, harness.collect.cross)
    cross: str | None = col(group="cross", doc="The competing traffic (settings.cross).")
    cross_flows: int | None = col(group="cross", doc="Competing flows seen in the capture.")
    cross_bytes: int | None = col(
        group="cross",
        doc="IP bytes the competing flows delivered across the bottleneck while the measured "
        "request ran (the receiving end's capture).",
        unit="bytes",
    )
    cross_bps: float | None = col(
        group="cross", doc="cross_bytes over the request's time.", unit="bit/s"
    )
    request_wire_bytes: int | None = col(
        group="cross",
        doc="IP bytes of the measured request's data direction delivered in the same window.",
        unit="bytes",
    )
    request_share: float | None = col(
        group="cross",
        doc="The request's part of what the bottleneck delivered in that direction while it "
        "ran: request_wire_bytes / (request_wire_bytes + cross_bytes).",
    )
    fair_share: float | None = col(
        group="cross",
        doc="docs/models.md section 15: 1 / (n + 1) beside n TCP flows; beside a UDP stream, the "
        "part of the capacity it leaves.",
    )
    standing_queue_s: float | None = col(
        group="cross",
        doc="The least time the request's data packets waited in the bottleneck's queue "
        "beyond their own serialisation (the emulator's packet log), or the handshake RTT "
        "above the configured one without it.",
        unit="s",
    )
    bound_fair_s: float | None = col(
        group="cross",
        doc="The request's bound at its fair share of the rate, its round trips crossing the "
        "standing queue (docs/models.md section 15): a model, not a lower bound.",
        unit="s",
    )
    ratio_fair: float | None = col(group="cross", doc="total_s / bound_fair_s.")
    # --- the machine
    cpu_client: float | None = col(doc="Client CPU per wall second during the request.")
    cpu_server: float | None = col(doc="Server CPU per wall second during the request.")
    cpu_client_s: float | None = col(
        doc="CPU seconds of the client's process tree during the request (cpu_client x "
        "total_s; the native HTTP/3 engine counts with its edge).",
        unit="s",
    )
    cpu_server_s: float | None = col(
        doc="CPU seconds of the server's process tree during the request (cpu_server x total_s).",
        unit="s",
    )
    cpu_emulator: float | None = col(doc="Emulator CPU per wall second during the request.")
    cpu_emulator_run: float | None = col(doc="Emulator CPU per wall second over the run.")
    steal: float | None = col(doc="Host steal time over all CPU time during the request.")
    cpu_pressure: float | None = col(doc="Host PSI CPU pressure ('some') during the request.")
    runqueue_wait_client_s: float | None = col(
        doc="Client threads runnable but waiting for a CPU.", unit="s"
    )
    runqueue_wait_server_s: float | None = col(
        doc="Server threads runnable but waiting for a CPU.", unit="s"
    )
    runqueue_wait_emulator_s: float | None = col(
        doc="Emulator threads runnable but waiting for a CPU.", unit="s"
    )
    # --- the disturbance's possible effect on the measurement (harness.validity.rules)
    disturbance_s: float | None = col(
        doc="Estimated time the host's disturbance could have added: lateness + wait + steal.",
        unit="s",
    )
    disturbance_fraction: float | None = col(doc="disturbance_s / total_s.")
    disturbance_limit_s: float | None = col(
        doc="The largest disturbance a valid run may carry (harness.validity.rules).", unit="s"
    )
    disturbance_lateness_s: float | None = col(
        doc="Emulator release lateness on the request's critical path.", unit="s"
    )
    disturbance_wait_s: float | None = col(
        doc="Run-queue wait of the endpoints' main threads during the request, times "
        "foreign_cpu_share.",
        unit="s",
    )
    disturbance_steal_s: float | None = col(
        doc="CPU steal taken from the endpoints during the request.", unit="s"
    )
    own_wait_s: float | None = col(
        doc="CPU: the endpoints' main threads waited this long on the request's critical path "
        "for the run's own processes (emulator, peer stack): part of what the run measures, "
        "not a disturbance.",
        unit="s",
    )
    endpoint_cpu_s: float | None = col(
        doc="CPU: seconds the client and the server computed during the request.", unit="s"
    )
    effect_scale_s: float | None = col(
        doc="The arm effect of the level's comparison: the bounds' prediction, or the "
        "difference the runs so far showed when larger.",
        unit="s",
    )
    main_wait_client_s: float | None = col(
        doc="Client main thread runnable but waiting, during the request.", unit="s"
    )
    main_wait_server_s: float | None = col(
        doc="Server main thread runnable but waiting, during the request.", unit="s"
    )
    foreign_cpu_share: float | None = col(
        doc="Share of the host's busy CPU time during the request used by processes other "
        "than the run's client, server and emulator (at least 0.1)."
    )
    sched_client: str | None = col(
        doc="How the client was scheduled: 'rr 1' (harness.run.execute), else 'other nice N'."
    )
    sched_server: str | None = col(
        doc="How the server was scheduled: 'rr 1' (harness.run.execute), else 'other nice N'."
    )
    flights_up: int | None = col(doc="Round trips of the request's critical path, up.")
    flights_down: int | None = col(doc="Round trips of the request's critical path, down.")
    # --- the agent workload (rounds.csv has every round; issue 13)
    agent_rounds_done: int | None = col(
        group="agent", doc="Agent: rounds acknowledged, redone ones included."
    )
    agent_redone: int | None = col(group="agent", doc="Agent: rounds begun again after a loss.")
    agent_tasks_done: int | None = col(
        group="agent",
        doc="Agent with agent_tasks or task_success: tasks finished (a judged one: done).",
    )
    task_attempts: int | None = col(
        group="agent",
        doc="Agent with agent_tasks or task_success: task attempts made, failed ones included "
        "(per task 1 / task_success on average: E = C / p, the chapter's §12.5.2).",
    )
    agent_connections: int | None = col(
        group="agent", doc="Agent: connections opened for the task."
    )
    agent_round_s: float | None = col(
        group="agent", doc="Agent: median round (start to action).", unit="s"
    )
    agent_upload_s: float | None = col(
        group="agent", doc="Agent: median upload of a round.", unit="s"
    )
    agent_encode_s: float | None = col(
        group="agent", doc="Agent: mean measured encode per round.", unit="s"
    )
    agent_handshake_s: float | None = col(
        group="agent",
        doc="Agent: mean handshake of the connections the run opened, the warm-up's included.",
        unit="s",
    )
    outage_start_s: float | None = col(
        group="agent", doc="Agent: the link's outage began, from the task start.", unit="s"
    )
    outage_end_s: float | None = col(
        group="agent", doc="Agent: the outage ended, from the task start.", unit="s"
    )
    outage_detected_s: float | None = col(
        group="agent",
        doc="Agent: the client gave the lost round up, from the task start.",
        unit="s",
    )
    outage_back_s: float | None = col(
        group="agent", doc="Agent: the new connection was up, from the task start.", unit="s"
    )
    deadline_s: float | None = col(
        group="agent", doc="Agent: the task's deadline (settings.agent_deadline).", unit="s"
    )
    deadline_met: bool | None = col(group="agent", doc="Agent: total_s <= deadline_s.")
    site_busy_s: float | None = col(
        group="agent", doc="Agent: the site's model time executed.", unit="s"
    )
    site_energy_j: float | None = col(
        group="agent",
        doc="Agent: site_power times site_busy_s (stated power, measured busy time).",
        unit="J",
    )
    # --- the verdict
    ignored_settings: str | None = col(
        doc="Settings the run's protocol does not use that the level set (fec: TCP/QUIC knobs)."
    )
    fec_source_symbols: int | None = col(
        group="fec", doc="fec: source symbols k of the data transfer."
    )
    fec_repair_symbols: int | None = col(
        group="fec", doc="fec: repair symbols r of its first round."
    )
    fec_repair_required: int | None = col(
        group="fec",
        doc="fec: MODELS s10's r for k at the loss the link realised on that direction.",
    )
    fec_extra_rounds: int | None = col(
        group="fec", doc="fec: repair rounds the receiver needed after the first."
    )
    fec_decode_failures: int | None = col(
        group="fec", doc="fec: blocks that did not decode from round one."
    )
    fec_loss_estimate: float | None = col(
        group="fec", doc="fec: the loss rate the sender sized r with."
    )
    fec_loss_model: str | None = col(
        group="fec", doc="fec: none, binomial, markov (bursts) or fixed."
    )
    fec_data_direction: str | None = col(
        group="fec", doc="fec: up (asr) or down (tts): the data transfer."
    )
    fec_rate_bps: float | None = col(
        group="fec", doc="fec: the client's pacing rate (probe/feedback).", unit="bit/s"
    )
    valid: bool | None = col(doc="The run measured what it was meant to (see invalid_reason).")
    invalid_reason: str | None = col(doc="Every reason the run is invalid, joined by '; '.")
    wall_s: float | None = col(doc="Wall time the harness spent on the run.", unit="s")
    lock_wait_s: float | None = col(
        doc="Of wall_s: waiting for another experiment's run on this host (harness.run.lock).",
        unit="s",
    )


def run_columns(groups: Collection[str] | None = None) -> tuple[str, ...]:
    """The columns of runs.csv, in order (the schema tag last): every one, or those of
    every run and of the kinds of run in ``groups`` (a column's ``group``)."""
    names = [
        f.name
        for f in fields(RunRow)
        if groups is None or not f.metadata.get("group") or f.metadata["group"] in groups
    ]
    return (*names, "schema")


def column_groups() -> tuple[str, ...]:
    """Every group some column belongs to."""
    return tuple(sorted({f.metadata["group"] for f in fields(RunRow) if f.metadata.get("group")}))


def columns_markdown() -> str:
    """The table of runs.csv columns for results/README.md, from :class:`RunRow`."""

    lines = [
        f"runs.csv schema `{RunRow.schema_tag()}` (generated by "
        "`python -m tbcore.runrow results/README.md`; tests/test_runrow.py keeps it in sync).",
        "",
        "| column | unit | meaning |",
        "|---|---|---|",
    ]
    for item in fields(RunRow):
        meta: Any = item.metadata
        lines.append(f"| `{item.name}` | {meta.get('unit', '')} | {meta.get('doc', '')} |")
    lines.append("| `schema` |  | The schema tag of the row (`run/<version>`). |")
    return "\n".join(lines) + "\n"


README_BEGIN = "<!-- runs.csv columns: generated from tbcore.runrow.RunRow, do not edit -->"
README_END = "<!-- end of generated columns -->"


def readme_with_columns(text: str) -> str:
    """``text`` with the generated column table between the markers (appended if absent)."""
    block = f"{README_BEGIN}\n{columns_markdown()}{README_END}\n"
    if README_BEGIN in text and README_END in text:
        head, _, rest = text.partition(README_BEGIN)
        _, _, tail = rest.partition(README_END + "\n")
        return head + block + tail
    return text.rstrip("\n") + "\n\n" + block


if __name__ == "__main__":  # python -m tbcore.runrow [README.md]: print, or update in place
    import sys
    from pathlib import Path

    if len(sys.argv) > 1:
        target = Path(sys.argv[1])
        target.write_text(readme_with_columns(target.read_text(encoding="utf-8")))
    else:
        print(columns_markdown(), end="")

"""The names of the files a run directory and a result directory hold, one definition each.

Every stage that writes or reads one of them (the run, the collection, the remote path, the
report) takes its name from here, so no stage imports another for a file name."""

from __future__ import annotations

# --- written by the run (harness.run) ------------------------------------------------------
RUN_FILE = "run.json"
"""The run's context: its plan entry, settings, path, exit codes and times."""
RECORDS_FILE = "records.jsonl"
"""The client's records (tbcore.records.RequestRecord), one per line."""
SERVER_LOG_FILE = "server.jsonl"
"""The server's events (tbcore.records.ServerEvent), one per line."""
LINK_STATS_FILE = "link_stats.json"
"""The link's counters over the run."""
EDGE_STATS_FILE = "edge_stats.json"
"""A topology of several edges: every edge's counters over the run, by edge name."""
EVENTS_FILE = "events.jsonl"
"""The run's events merged on one clock."""
QLOG_DIR = "qlog"
"""The QUIC endpoints' qlog traces."""
SERVER_SAMPLES = "server-samples.csv"
"""The server's sender samples (tbcore.records.ServerSample): TCP_INFO for HTTP/2, the QUIC
recovery and BBR state for HTTP/3, over each response."""
LINK_EVENTS_FILE = "link_events.json"
"""The scheduled link events of the run (harness.run.progress), as applied."""
FAILURES_FILE = "failures.json"
"""The edges a run's path_failures drew down for it (harness.run.failures)."""
KEY_LOG_FILE = "keys.log"
"""Where both stacks append their TLS secrets."""
PACKET_LOGS = {"up": "packets-up.csv", "down": "packets-down.csv"}
"""The emulator's packet log of each direction (arrival, due and departure of every packet)."""
RELAY_LOG = "relay.jsonl"
"""A relay topology: the relay's events."""
REMOTE_FILE = "remote.json"
"""A run with its server on another host: the clock offset and the one-way delays."""
CROSS_FILE = "cross.json"
"""Competing traffic's figures over the run (harness.run.cross, harness.collect.cross)."""
CROSS_CLIENT_REPORT = "cross-client.json"
"""The competing traffic's sender report."""
CROSS_SERVER_REPORT = "cross-server.json"
"""The competing traffic's receiver report."""

# --- written by the collection (harness.collect) -------------------------------------------
AIR_FILE = "air.json"
"""A shared-medium link: air time by kind of frame."""
ROUNDS_FILE = "rounds.csv"
"""The agent workload's rounds."""
ROUND_TRACE_FILE = "round_trace.csv"
"""The agent workload's rounds beside the trace's positions."""

# --- written for a result directory --------------------------------------------------------
CROSS_TABLE = "cross.csv"
"""Competing traffic's table over an experiment."""
PROBES_FILE = "path_probes.json"
"""A real path's probes before and after the runs."""
STREAMS_CSV = "streams.csv"
"""The per-stream table of an experiment."""

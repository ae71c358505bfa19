"""The findings of the chapter, in its order: what it states, the experiment that measures
it (or none: a computation), how, our bound for the same parameters, and a departure of ours
known in advance (the experiment file's header says it too).

:data:`FINDINGS` is data (the measures and bounds are in harness.report.chapter_measures);
harness.report.reproduction turns it and a campaign's results into the reproduction report.
:data:`CHAPTER_ORDER` is the order ``testbed campaign --chapter`` runs the experiments in:
every shipped file, each at the first section it reproduces.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness import bounds
from harness.report import chapter_measures as m
from harness.report.chapter_measures import MBIT, TOLERANCE, R
from harness.report.findings import Measure, Results, level_difference, level_value
from harness.report.stream_tables import tiles_bound_s

NO_BOUND = m.fixed("–")


@dataclass(frozen=True)
class Finding:
    section: str
    finding: str
    chapter: str
    """The chapter's figure as it prints it."""
    experiment: str | None = None
    """The experiment that measures it; None: a computation, not measured."""
    measure: Measure | None = None
    bound: Callable[[Results], str] = NO_BOUND
    """Our bound for the same parameters (harness.bounds), as text."""
    value: float | None = None
    """The chapter's number in ``unit`` (None: an order or a sign, judged by the measure)."""
    unit: str = ""
    tolerance: float = TOLERANCE
    differs: str = ""
    """Why ours differs, known in advance (the file's departure), said when it does."""


SAME_PATH_TLS = "HTTP/2 over TLS 1.3 adds a round trip to the seed's plain TCP measurement"
OUTAGE_DETECTED = (
    "the loss must be detected here (3 s round timeout, a 3.3 s outage) where the chapter "
    "counts a 1 s reconnect"
)
AUDIO, IMAGE_LINK = m.AUDIO_BYTES, (20 * MBIT, 100 * MBIT)

# fmt: off
FINDINGS: tuple[Finding, ...] = (
    Finding(section="§12.1.1", chapter="12.8 s", value=12.8, unit="s",
            finding="The image round trip (30 MB up at 20 Mbit/s, 5 MB down at 100 Mbit/s, "
                    "100 ms, 0.3 s of processing), sent whole",
            experiment="tiles", measure=level_value("tiles", "whole-h2"),
            bound=m.with_runs(m.image_s(), "s", "MODELS 1", "tiles", "whole-h2"),
            differs="a new connection: its set-up and slow start (the runs' own bound) come on "
                    "top of the serial 12.8 s"),
    Finding(section="§12.1.1", chapter="12.36 s", value=12.36, unit="s",
            finding="The same image in three tiles, each processed as it arrives",
            experiment="tiles", measure=level_value("tiles", "tiles-h2"),
            bound=m.text(tiles_bound_s(3, *IMAGE_LINK, 0.1, 0.3), "s", "MODELS 2, 5/3 MB results"),
            differs="the tiles' results are 5/3 MB each (the chapter's 1, 2 and 2 MB), and a "
                    "new connection's set-up"),
    Finding(section="§12.1.2", chapter="40 ms stalls, 45 ms does not",
            finding="Delay jitter: a 40 ms initial buffer stalls, 45 ms plays through",
            experiment="playback", measure=m.playback_jitter,
            bound=m.fixed("MODELS 3 on each run's arrivals (playback.csv: predicted stalls)"),
            differs="the path is 200 ms with +-30 ms jitter (the chapter's is 5 ms)"),
    Finding(section="§12.1.2", chapter="0.12 s",
            finding="A rate shortfall empties any buffer (0.12 s for the chapter's); a bigger "
                    "buffer only delays the stall",
            experiment="playback", measure=m.playback_shortfall, bound=m.shortfall_bound,
            differs="384 kbit/s played against 300 kbit/s received (the chapter's 256 and "
                    "130), so the buffer empties later than 0.12 s"),
    Finding(section="§12.1.2", chapter="a bigger buffer only delays the stall",
            finding="The same over a recorded downlink whose capacity dips below the stream's "
                    "rate, against a constant link of the same mean (MODELS 14)",
            experiment="playback-trace", measure=m.playback_trace,
            bound=m.fixed("MODELS 3 on the arrivals the trace allowed (playback.csv)")),
    Finding(section="§12.1.3", chapter="105 s", value=105.0, unit="s",
            finding="30 agent rounds of 0.8 MB on one connection (6.4 Mbit/s, 200 ms, 2 s of "
                    "model)",
            experiment="agent-connection",
            measure=level_value("agent-connection", "h2-reused", rounds=30),
            bound=m.with_runs(m.agent_s(30), "s", "MODELS 1, 4", "agent-connection",
                              "h2-reused")),
    Finding(section="§12.1.3", chapter="83 s", value=83.0, unit="s",
            finding="Compressed screenshots (0.2 MB, 30 ms of encode) for the same 30 rounds",
            experiment="agent-compression",
            measure=level_value("agent-compression", "webp", rounds=30),
            bound=m.text(m.agent_s(30, upload_bytes=200_000, encode_s=0.030), "s", "MODELS 1"),
            differs="the synthetic desktop compresses far below the chapter's 0.2 MB"),
    Finding(section="§12.3.1", chapter="12 s", value=12.0, unit="s",
            finding="A new connection every round: 30 x 2 RTT of set-up, against 0.4 s once",
            experiment="agent-connection",
            measure=level_difference("agent-connection", "h2-new", "h2-reused", rounds=30),
            bound=m.text(bounds.setup_time_s("h2", "new", R, requests=30), "s", "MODELS 4"),
            differs="every new connection also starts slow start again (the chapter counts "
                    "the handshakes only)"),
    Finding(section="§12.3.1", chapter="1185.3 ms", value=1185.3, unit="ms",
            finding="The 354,640-byte request on a new connection, direct (200 ms, 333 Mbit/s)",
            experiment="connection", measure=level_value("connection", "h2-new", unit="ms"),
            bound=m.with_runs(m.voice_request_s("new") * 1e3, "ms", "MODELS 1, 4, 6",
                              "connection", "h2-new"),
            differs=SAME_PATH_TLS),
    Finding(section="§12.3.1", chapter="240.9 ms", value=240.9, unit="ms",
            finding="The same request on a reused, tuned connection",
            experiment="connection", measure=level_value("connection", "h2-reused", unit="ms"),
            bound=m.with_runs(m.voice_s() * 1e3, "ms", "MODELS 1", "connection", "h2-reused")),
    Finding(section="§12.3.1", chapter="–",
            finding="The same request over HTTP/3 on two QUIC implementations with one "
                    "congestion control (the testbed's control: what differs between them is "
                    "the implementation, not HTTP/3)",
            experiment="h3-stacks", measure=m.quic_implementations,
            bound=m.runs_bound_of("h3-stacks", "h2-cubic", "ms")),
    Finding(section="§12.3.2", chapter="5.12 Mbit/s", value=5.12, unit="Mbit/s",
            finding="A 64 KB window on 100 ms allows 5.12 Mbit/s",
            experiment="window", measure=m.upload_rate("window", "w64k"),
            bound=m.text(bounds.window_throughput_bps(64_000, 0.1, 20 * MBIT) / MBIT, "Mbit/s",
                         "MODELS 5")),
    Finding(section="§12.3.2", chapter="46.9 s", value=46.9, unit="s",
            finding="... so the 30 MB upload needs 46.9 s even on a 20 Mbit/s link",
            experiment="window", measure=level_value("window", "w64k"),
            bound=m.with_runs(m.window_s(), "s", "MODELS 5", "window", "w64k")),
    Finding(section="§12.3.2", chapter="5 rounds", value=5.0, unit="rounds", tolerance=0.0,
            finding="The audio needs five rounds of slow start (IW 10)",
            experiment="initcwnd", measure=m.upload_rounds("initcwnd", "iw10"),
            bound=m.text(bounds.slow_start_rounds(AUDIO, bounds.MODELS_MSS_BYTES, 10), "rounds",
                         "MODELS 6")),
    Finding(section="§12.3.2", chapter="14.4 s", value=14.4, unit="s",
            finding="The image round trip with headers and ACKs (1,168-byte payloads, 60-byte "
                    "headers, 92-byte ACKs)",
            experiment="overhead", measure=level_value("overhead", "delayed-ack"),
            bound=m.fixed(f"{m.image_with_overhead_s(1168, 60, 92):.2f} s (MODELS 1 + 7, the "
                          f"chapter's sizes); {m.image_with_overhead_s(1448, 52, 0):.2f} s for "
                          "Linux's 1,448 + 52 bytes, the ACKs on the other direction"),
            differs="the chapter counts every ACK on the data's direction; here the ACKs ride "
                    "the other one and segments carry 1,448 bytes with 52-byte headers"),
    Finding(section="§12.3.2", chapter="1.38 MB, +43 ms", value=1.38, unit="MB",
            finding="Half the ACKs: 1.38 MB fewer bytes on the wire, 43 ms later",
            experiment="overhead", measure=m.ack_saving, bound=m.ack_saving_bound,
            differs="Linux's delayed ACKs are not one per two segments and its segments carry "
                    "1,448 bytes, so the count of ACKs saved differs"),
    Finding(section="§12.3.2", chapter="43 ms later",
            finding="Fewer ACKs need not end the request sooner (NewReno, delayed ACKs against "
                    "one per segment)",
            experiment="ack", measure=m.fewer_acks_not_sooner,
            bound=m.runs_bound_of("ack", "delayed")),
    Finding(section="§12.3.3", chapter="18.3 s", value=18.3, unit="s",
            finding="Loss read as congestion (Mathis, C = 1, 14 %): 0.155 Mbit/s, the audio in "
                    "18.3 s",
            bound=m.fixed(f"{AUDIO * 8 / bounds.mathis_throughput_bps(1448, R, 0.14):.1f} s "
                          "(MODELS 8)")),
    Finding(section="§12.3.3", chapter="bbr near the path rate",
            finding="Random loss does not slow a measuring sender as it does a loss-based one "
                    "(bbr against cubic at 3.6 %)",
            experiment="congestion", measure=m.bbr_vs_loss_based,
            bound=m.runs_bound_of("congestion", "bbr-l3.6", "ms")),
    Finding(section="§12.3.3", chapter="–",
            finding="Pacing the sender at the path rate (the testbed's question beside the "
                    "chapter's; the chapter gives no figure)",
            experiment="pacing", measure=level_difference("pacing", "paced", "unpaced", unit="ms"),
            bound=m.runs_bound_of("pacing", "paced", "ms")),
    Finding(section="§12.3.3", chapter="–",
            finding="The request beside bulk flows on the bottleneck: at most its fair share "
                    "once their windows settle, behind their standing queue (MODELS 15; the "
                    "chapter's path carries the request alone)",
            experiment="cross", measure=m.beside_bulk_flows,
            bound=m.runs_bound_of("cross", "alone", "ms")),
    Finding(section="§12.3.3", chapter="0.756 s", value=0.756, unit="s",
            finding="Ideal selective retransmission at 14 %: the expected completion",
            experiment="loss", measure=level_value("loss", "l14"),
            bound=m.text(bounds.retransmission_time_s(m.voice_s(), R, m.audio_packets(), 0.14),
                         "s", "MODELS 9"),
            differs="TCP (cubic) halves its window at every loss and waits for time-outs; the "
                    "model is ideal selective repeat, a lower bound"),
    Finding(section="§12.3.3", chapter="1.24 s", value=1.24, unit="s",
            finding="... and its p99",
            bound=m.text(bounds.retransmission_time_s(m.voice_s(), R, m.audio_packets(), 0.14,
                                                      quantile=0.99), "s", "MODELS 9")),
    Finding(section="§12.3.3", chapter="241 ms", value=241.0, unit="ms",
            finding="FEC with redundancy from the measured loss (k = 245, r = 63 at 14 %): no "
                    "retransmission round",
            experiment="fec", measure=level_value("fec", "tts-l14-fecad", unit="ms"),
            bound=m.text(1e3 * bounds.serial_time(308 * 1448, 0, 333 * MBIT, 333 * MBIT, R,
                                                  0.030), "ms", "MODELS 10")),
    Finding(section="§12.3.4", chapter="audio earlier",
            finding="Send order on a shared bottleneck: audio first moves the audio's "
                    "completion earlier and the image's later than FIFO",
            experiment="priority", measure=m.stream_order),
    Finding(section="§12.3.4", chapter="HTTP/2 waits",
            finding="Whole vs per-stream delivery: complete audio waits for the image's "
                    "retransmissions on HTTP/2, not on HTTP/3",
            experiment="hol", measure=m.hol,
            bound=m.fixed("no wait with per-stream order (MODELS 11)")),
    Finding(section="§12.3.5", chapter="1185.3 ms", value=1185.3, unit="ms",
            finding="A new connection direct, on the seed's long haul",
            experiment="relay", measure=level_value("relay", "h2-direct-new", unit="ms"),
            bound=m.with_runs(m.voice_request_s("new") * 1e3, "ms", "MODELS 1, 4, 6",
                              "relay", "h2-direct-new"),
            differs=SAME_PATH_TLS),
    Finding(section="§12.3.5", chapter="301.6 ms", value=301.6, unit="ms",
            finding="... through the relay's warm long haul",
            experiment="relay", measure=level_value("relay", "h2-relay-new", unit="ms"),
            bound=m.runs_bound_of("relay", "h2-relay-new", "ms")),
    Finding(section="§12.3.5", chapter="240.9 ms", value=240.9, unit="ms",
            finding="Kept open and tuned, direct",
            experiment="relay", measure=level_value("relay", "h2-direct-reused", unit="ms"),
            bound=m.runs_bound_of("relay", "h2-direct-reused", "ms")),
    Finding(section="§12.3.5", chapter="236.5 ms", value=236.5, unit="ms",
            finding="... through the relay",
            experiment="relay", measure=level_value("relay", "h2-relay-reused", unit="ms"),
            bound=m.runs_bound_of("relay", "h2-relay-reused", "ms")),
    Finding(section="§12.4.1", chapter="302 µs", value=302.0, unit="µs",
            finding="One 802.11a exchange (54/6 Mbit/s) for a 1,228-byte packet",
            bound=m.text(bounds.airtime_s(1, bounds.CHAPTER_DATA_IP_BYTES) * 1e6, "µs",
                         "MODELS 7, 802.11a")),
    Finding(section="§12.4.1", chapter="134 µs", value=134.0, unit="µs",
            finding="... for an ACK-only packet",
            bound=m.text(bounds.airtime_s(1, bounds.CHAPTER_ACK_IP_BYTES) * 1e6, "µs",
                         "MODELS 7, 802.11a")),
    Finding(section="§12.4.1", chapter="13.4 s", value=13.4, unit="s",
            finding="The image's 30,800 exchanges each way hold the medium",
            experiment="airtime", measure=m.airtime_image("air_busy_s", "tcp-quick"),
            bound=m.text(bounds.airtime_s(bounds.IMAGE_EXCHANGES, bounds.CHAPTER_DATA_IP_BYTES)
                         + bounds.airtime_s(bounds.IMAGE_EXCHANGES, bounds.CHAPTER_ACK_IP_BYTES),
                         "s", "MODELS 7"),
            differs="1,448-byte TCP segments (about 24,200 frames) and Linux's ACKs, not 30,800 "
                    "QUIC-sized exchanges each way"),
    Finding(section="§12.4.1", chapter="2.1 s", value=2.1, unit="s",
            finding="Half the ACKs free medium time",
            experiment="airtime",
            measure=m.airtime_image("air_busy_ack_s", "tcp-quick", "tcp-delayed"),
            bound=m.text(bounds.airtime_s(bounds.IMAGE_EXCHANGES // 2,
                                          bounds.CHAPTER_ACK_IP_BYTES), "s", "MODELS 7"),
            differs="Linux's delayed ACKs are not one per two segments"),
    Finding(section="§12.4.2", chapter="FIFO misses, media first meets",
            finding="Eight 20 ms chunks due from 0.4 s behind a 5 MB image",
            experiment="priority", measure=m.deadline_chunks,
            bound=m.fixed("MODELS 2 (the chunk pipeline)")),
    Finding(section="§12.4.2", chapter="d + 1 chunk",
            finding="A cancel stops the sender within one one-way delay plus one chunk",
            experiment="cancel", measure=m.cancel, bound=m.fixed("0.1 s + 20 ms (MODELS 2)")),
    Finding(section="§12.4.3", chapter="8 s", value=8.0, unit="s",
            finding="30 MB split in proportion over 20 and 10 Mbit/s (12 s on the faster alone)",
            experiment="multipath", measure=level_value("multipath", "split"),
            bound=m.text(bounds.split_time_s(30e6, [20 * MBIT, 10 * MBIT]), "s", "MODELS 12")),
    Finding(section="§12.4.3", chapter="10 s", value=10.0, unit="s",
            finding="... behind a shared 24 Mbit/s exit",
            experiment="multipath", measure=level_value("multipath", "mptcp-exit"),
            bound=m.text(bounds.split_time_s(30e6, [20 * MBIT, 10 * MBIT], 24 * MBIT), "s",
                         "MODELS 12")),
    Finding(section="§12.4.3", chapter="12 s", value=12.0, unit="s",
            finding="Duplicating every byte finishes with the faster path",
            experiment="multipath", measure=level_value("multipath", "duplicate"),
            bound=m.text(bounds.duplicate_time_s(30e6, [20 * MBIT, 10 * MBIT]), "s",
                         "MODELS 12")),
    Finding(section="§12.4.3", chapter="q + (1 - q) p1 p2",
            finding="The failure probabilities of one path, of two, and of duplication behind "
                    "a shared end point",
            bound=m.fixed("bounds.duplicate_failure(p1, p2, q); the chapter's p1, p2 and q are "
                          "not in MODELS.md: not recomputed")),
    Finding(section="§12.5.2", chapter="64.0 s", value=64.0, unit="s",
            finding="The remaining 20 rounds on the phone alone: misses 45 s",
            experiment="agent-deployment",
            measure=level_value("agent-deployment", "phone", rounds=20),
            bound=m.text(m.site_s(2.9, 0.001, 10e9), "s", "MODELS 1, 2.9 s of model")),
    Finding(section="§12.5.2", chapter="11.0 s", value=11.0, unit="s",
            finding="... on a nearby workstation (80 Mbit/s, 20 ms)",
            experiment="agent-deployment",
            measure=level_value("agent-deployment", "near", rounds=20),
            bound=m.text(m.site_s(0.15, 0.02, 80 * MBIT), "s", "MODELS 1")),
    Finding(section="§12.5.2", chapter="31.6 s", value=31.6, unit="s",
            finding="... in the cloud (6.4 Mbit/s, 200 ms)",
            experiment="agent-deployment",
            measure=level_value("agent-deployment", "cloud", rounds=20),
            bound=m.text(m.site_s(0.08, R, 6.4 * MBIT), "s", "MODELS 1")),
    Finding(section="§12.5.2", chapter="518-680 J, 1.81 kJ, 1.12 kJ",
            finding="Energy for the 20 rounds: phone, near (600 W), cloud (700 W)",
            experiment="agent-deployment", measure=m.energies,
            bound=m.fixed(f"{600 * 20 * 0.15 / 1e3:.2f} kJ near, {700 * 20 * 0.08 / 1e3:.2f} kJ "
                          "cloud (stated power x model time)")),
    Finding(section="§12.5.2", chapter="the cloud",
            finding="The decision: both sites meet 45 s and the cloud spends less",
            experiment="agent-deployment", measure=m.decision),
    Finding(section="§12.5.2", chapter="3.8 Mbit/s",
            finding="The cloud misses the deadline below",
            experiment="agent-deployment", measure=m.deadline_rate, bound=m.deadline_rate_bound),
    Finding(section="§12.5.2", chapter="28.7 s vs 27.6 s",
            finding="Ten rounds at 6 Mbit/s and ten at 10 against a constant 8 (the same mean)",
            experiment="agent-rate", measure=m.jensen, bound=m.jensen_bound),
    Finding(section="§12.5.2", chapter="P(T <= 45 s) >= 0.99",
            finding="Over a varying uplink the deadline becomes a probability, judged from the "
                    "distribution of upload times (slow rounds come in runs)",
            experiment="agent-trace", measure=m.deadline_probability,
            bound=m.fixed("MODELS 13, 14: each run's bound from the rates its trace offered")),
    Finding(section="§12.5.2", chapter="34.2 s", value=34.2, unit="s",
            finding="A break at round 10, committed progress: meets 45 s",
            experiment="agent-outage", measure=m.outage_task("committed"),
            bound=m.runs_bound_of("agent-outage", "committed"), differs=OUTAGE_DETECTED),
    Finding(section="§12.5.2", chapter="48.3 s", value=48.3, unit="s",
            finding="... restarting every round: misses 45 s",
            experiment="agent-outage", measure=m.outage_task("restart"),
            bound=m.runs_bound_of("agent-outage", "restart"), differs=OUTAGE_DETECTED),
)
# fmt: on
"""The findings the testbed measures or recomputes, in the chapter's order (§12.1 the
cases, §12.3 the transport, §12.4 the radio and the paths, §12.5 the deployment)."""

UNRECOMPUTED = (
    ("§12.1.5", "Device bandwidth and capacity bounds", "(several)"),
    ("§12.2.2", "The features sent instead of the image", "8.192 MB"),
    ("§12.2.3", "The migration's break-even", "(a number of requests)"),
    ("§12.2.4", "Model start-ups", "144"),
    ("§12.5.2", "The factor between the sites", "2.83x"),
    ("§12.5.2", "The uplink rate where the sites cross", "73 Mbit/s"),
)
"""Findings of the chapter that are computations whose inputs are not in MODELS.md or the
project's records: rows of the report (so that it covers the chapter), not recomputed."""

NOT_RECOMPUTED = m.fixed("not recomputed: its inputs are not in MODELS.md")


def all_findings() -> tuple[Finding, ...]:
    """Every row of the reproduction report, in the chapter's order."""
    extra = tuple(
        Finding(section=section, finding=text, chapter=chapter, bound=NOT_RECOMPUTED)
        for section, text, chapter in UNRECOMPUTED
    )
    return tuple(sorted(FINDINGS + extra, key=lambda f: _section_key(f.section)))


def _section_key(section: str) -> tuple[int, ...]:
    return tuple(int(part) for part in section.lstrip("§").split("."))


CHAPTER_ORDER = tuple(dict.fromkeys(f.experiment for f in FINDINGS if f.experiment))
"""The experiments of ``testbed campaign --chapter``, each at the first section it
reproduces."""

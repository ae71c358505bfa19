"""The measures and the chapter's parameters behind harness.report.chapter's findings: the
chapter's numbers recomputed by harness.bounds, and the measures of findings that are an
order or a sign (which stream finishes first, which site is chosen), read from a campaign's
results (harness.report.findings)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd
from scipy import stats as scipy_stats

from harness import bounds
from harness.analysis import attempts
from harness.analysis.levels import answered
from harness.report.findings import (
    UNIT_SCALE,
    Measure,
    Measured,
    NotMeasured,
    Results,
    fmt,
    level_difference,
    level_value,
    reads,
    runs_bound,
    table_medians,
)
from tbcore.agent import RAW_SCREEN_BYTES
from tbcore.kinds import H2_CHUNK_OVERHEAD_BYTES
from tbcore.stats import median_ci_order
from tbcore.workloads import STREAM_CHUNK_DURATION_S, STREAM_CHUNK_PROCESSING_S

MBIT = 1e6
R = 0.2
"""The long haul's round trip (§12.3)."""


def text(value: float, unit: str, source: str) -> Callable[[Results], str]:
    """A bound computed for the chapter's parameters, with where it comes from."""
    return lambda _r: f"{fmt(value, unit)} ({source})"


def with_runs(
    value: float, unit: str, source: str, experiment: str, level: str
) -> Callable[[Results], str]:
    """The chapter's parameters' bound and the level's runs' own bound (set-up, slow start)."""

    def text(results: Results) -> str:
        own = runs_bound(results, experiment, level, unit)
        return f"{fmt(value, unit)} ({source})" + (f"; {own}" if own else "")

    return text


# --- the chapter's parameters, through harness.bounds ----------------------------------------

IMAGE = dict(
    upload_bytes=30_000_000,
    download_bytes=5_000_000,
    up_bps=20 * MBIT,
    down_bps=100 * MBIT,
    rtt_s=0.1,
    processing_s=0.3,
)
AGENT = dict(
    rtt_s=0.2,
    up_bps=6.4 * MBIT,
    down_bps=6.4 * MBIT,
    upload_bytes=800_000,
    local_s=0.3,
    model_s=2.0,
    protocol="h2",
    slow_start=False,
)
AUDIO_BYTES = 354_640


def image_s() -> float:
    i = IMAGE
    return bounds.serial_time(
        i["upload_bytes"],
        i["download_bytes"],
        i["up_bps"],
        i["down_bps"],
        i["rtt_s"],
        i["processing_s"],
    )


def image_with_overhead_s(payload: int, header: int, ack: int) -> float:
    """Section 7 into section 1: every byte on the wire at the data direction's rate."""
    up = bounds.wire_bytes(30_000_000, payload, header, ack)[1]
    down = bounds.wire_bytes(5_000_000, payload, header, ack)[1]
    return bounds.serial_time(up, down, 20 * MBIT, 100 * MBIT, 0.1, 0.3)


def agent_s(rounds: int, **changes: float | str | bool) -> float:
    args = {**AGENT, **changes}
    return bounds.agent_task_time(rounds=rounds, connection="reused", **args).total_s  # type: ignore[arg-type]


def site_s(model_s: float, rtt_s: float, up_bps: float, rounds: int = 20) -> float:
    """The remaining rounds on a warm connection at one site (§12.5.2)."""
    args = dict(AGENT, model_s=model_s, rtt_s=rtt_s, up_bps=up_bps, down_bps=up_bps)
    return bounds.agent_task_time(rounds=rounds, connection="reused", warm=True, **args).total_s  # type: ignore[arg-type]


def audio_packets() -> int:
    return bounds.wire_bytes(AUDIO_BYTES, bounds.TCP_MSS_BYTES, 0, 0)[0]


def voice_request_s(connection: str, protocol: str = "h2") -> float:
    """The voice request on 200 ms, 333 Mbit/s with its set-up and slow start (MODELS 1, 4,
    6); ``h2c``: without TLS, as the seed measured it."""
    return bounds.request_time(
        rtt_s=R, up_bps=333 * MBIT, down_bps=333 * MBIT, upload_bytes=AUDIO_BYTES,
        download_bytes=0, protocol=protocol, connection=connection, processing_s=0.030,
    ).total_s  # fmt: skip


def voice_s() -> float:
    return bounds.serial_time(AUDIO_BYTES, 0, 333 * MBIT, 333 * MBIT, 0.2, 0.030)


def time_a_round(experiment: str, level: str, base_s: float) -> Measure:
    """docs/models.md section 9 per run: the time a retransmission round took beyond the
    first, ``(total_s - base_s) / (K - 1)`` with the run's ``transmission_rounds`` K (runs
    that resent nothing have no such round), in ms: the model's premise is one RTT."""

    def measure(results: Results) -> Measured:
        runs = results.runs(experiment, level)
        if "transmission_rounds" not in runs:
            raise NotMeasured("no transmission_rounds in runs.csv (testbed report DIR "
                              "--recollect adds it to runs made before it)")  # fmt: skip
        rounds = pd.to_numeric(runs["transmission_rounds"], errors="coerce")
        total = pd.to_numeric(runs["total_s"], errors="coerce")
        resent = (rounds > 1) & total.notna()
        if not resent.any():
            raise NotMeasured(f"{experiment}/{level}: no valid run with a retransmission round")
        values = ((total[resent] - base_s) / (rounds[resent] - 1) * 1e3).tolist()
        low, high = median_ci_order(values)
        median = float(pd.Series(values).median())
        interval = f", 95 % CI {fmt(low, 'ms')} to {fmt(high, 'ms')}" if math.isfinite(low) else ""
        text = (
            f"{fmt(median, 'ms')} a round ({experiment}/{level}: (total - "
            f"{fmt(base_s, 's')}) / (K - 1), K median {rounds[resent].median():g}{interval}, "
            f"{len(values)} valid)"
        )
        return Measured(text, median, runs=len(values), low=low, high=high)

    return reads(experiment, level)(measure)


# --- measures of orders and signs -----------------------------------------------------------


def arm_runs(table: pd.DataFrame, levels: tuple[str, ...] | list[str]) -> int:
    """The fewest runs any of ``levels`` has in a table (the runs an order rests on)."""
    if "level" not in table or "run_id" not in table:
        return 0
    mine = table[table["level"].astype(str).isin(levels)]
    counts = [int(mine[mine["level"].astype(str) == lv]["run_id"].nunique()) for lv in levels]
    return min(counts) if counts else 0


def goodput(experiment: str, level: str, size_bytes: int) -> Measure:
    """The transfer's goodput, ``size_bytes`` x 8 over each run's total time (Mbit/s), with
    the median's interval."""

    def measure(results: Results) -> Measured:
        runs = results.runs(experiment, level)
        total = pd.to_numeric(runs["total_s"], errors="coerce").dropna()
        if total.empty:
            raise NotMeasured(f"{experiment}/{level}: no total_s")
        rates = (size_bytes * 8 / total * UNIT_SCALE["Mbit/s"]).tolist()
        low, high = median_ci_order(rates)
        median = float(pd.Series(rates).median())
        interval = (
            f", 95 % CI {fmt(low, 'Mbit/s')} to {fmt(high, 'Mbit/s')}" if math.isfinite(low) else ""
        )
        text = (
            f"{fmt(median, 'Mbit/s')} ({experiment}/{level}: {size_bytes:,} B over total_s"
            f"{interval}, {len(rates)} valid)"
        )
        return Measured(text, median, runs=len(rates), low=low, high=high)

    return reads(experiment, level)(measure)


def _playback_level(results: Results, level: str) -> pd.DataFrame:
    """The playback table's rows of ``level`` (NotMeasured when this form has none)."""
    table = results.table("playback", "playback")
    mine = table[table["level"].astype(str) == level]
    if mine.empty:
        raise NotMeasured(f"playback: level {level} is not in this form of the file")
    return mine


@reads("playback", "jitter-h2")
def playback_jitter(results: Results) -> Measured:
    mine = _playback_level(results, "jitter-h2")
    stalls = table_medians(mine, ["initial_buffer_s"], "stall_count")
    at = {round(k * 1e3): v for k, v in stalls.items()}
    cells = ", ".join(f"{ms} ms: {v:g}" for ms, v in sorted(at.items()))
    ok = at.get(40, 0) > 0 and at.get(45, 1) == 0
    plays = [ms for ms, v in sorted(at.items()) if v == 0]
    reason = (
        f"on this file's +-30 ms jitter the smallest buffer without a stall is {plays[0]} ms"
        if plays
        else "every buffer stalled"
    )
    return Measured(
        f"median stalls by initial buffer: {cells}",
        ok=ok,
        runs=mine["run_id"].nunique(),
        reason=reason,
    )


@reads("playback", "rate-shortfall-h2")
def playback_shortfall(results: Results) -> Measured:
    mine = _playback_level(results, "rate-shortfall-h2")
    stalls = table_medians(mine, ["initial_buffer_s"], "stall_count")
    cells = ", ".join(f"{round(k * 1e3)} ms: {v:g}" for k, v in sorted(stalls.items()))
    every = all(v > 0 for v in stalls.values())
    return Measured(
        f"median stalls by initial buffer: {cells}",
        ok=every,
        runs=mine["run_id"].nunique(),
        reason="every buffer stalls, as the chapter says"
        if every
        else "some buffer played through the shortfall",
    )


def shortfall_bound(_results: Results) -> str:
    play = 960 * 8 / 0.020
    receive = 300e3 * 960 / (960 + H2_CHUNK_OVERHEAD_BYTES)
    empty = bounds.buffer_depletion_s(0.040 * play, play, receive)
    return (
        f"40 ms of audio at 384 kbit/s against {receive / 1e3:.0f} kbit/s of audio received "
        f"empties in {empty:.3f} s (MODELS 3, this file's rates)"
    )


@reads("priority", "fifo-h2", "audio-first-h2")
def stream_order(results: Results) -> Measured:
    table = results.table("priority", "streams")
    delivered = table_medians(table, ["level", "stream"], "delivered_s")

    def at(level: str, kind: str) -> float:
        hits = [
            v for (lv, stream), v in delivered.items() if lv == level and stream.startswith(kind)
        ]
        if not hits:
            raise NotMeasured(f"priority: no {kind} stream of {level}")
        return hits[0]

    fifo_audio, first_audio = at("fifo-h2", "audio"), at("audio-first-h2", "audio")
    fifo_image, first_image = at("fifo-h2", "image"), at("audio-first-h2", "image")
    ok = first_audio < fifo_audio and first_image >= fifo_image - 0.01
    text = (
        f"audio done at {fifo_audio * 1e3:.0f} ms (FIFO) vs {first_audio * 1e3:.0f} ms "
        f"(audio first); image {fifo_image * 1e3:.0f} vs {first_image * 1e3:.0f} ms (HTTP/2)"
    )
    return Measured(
        text,
        ok=ok,
        runs=arm_runs(table, ["fifo-h2", "audio-first-h2"]),
        reason="audio first did not move the audio earlier" if not ok else "",
    )


@reads("hol", "h2-l3.6", "h3-l3.6")
def hol(results: Results) -> Measured:
    """Audio chunks whose own bytes had all arrived but waited for the image's (streams.csv
    held_chunks, the 16 KB chunks of the stream), HTTP/2 against HTTP/3 at 3.6 % loss."""
    table = results.table("hol", "streams")
    held = table_medians(table, ["level", "stream"], "held_chunks")
    longest = table_medians(table, ["level", "stream"], "held_max_s")
    chunks = table_medians(table, ["level", "stream"], "chunks")
    audio = {lv: key for key in held if str(key[1]).startswith("audio") for lv in [key[0]]}
    if "h2-l3.6" not in audio or "h3-l3.6" not in audio:
        raise NotMeasured("hol: the 3.6 % levels are not in these results")
    h2, h3 = audio["h2-l3.6"], audio["h3-l3.6"]
    if math.isnan(held[h2]) or math.isnan(held[h3]):
        raise NotMeasured("hol: no transport view of the audio (streams.csv held_chunks)")
    ok = held[h2] > 0 and held[h3] == 0
    text = (
        f"audio chunks complete but held behind the image's bytes: {held[h2]:.0f} of "
        f"{chunks[h2]:.0f} on HTTP/2 (longest {longest[h2] * 1e3:.0f} ms), {held[h3]:.0f} of "
        f"{chunks[h3]:.0f} on HTTP/3 (3.6 % loss, medians over runs)"
    )
    return Measured(
        text,
        ok=ok,
        runs=arm_runs(table, ["h2-l3.6", "h3-l3.6"]),
        reason="" if ok else "no audio chunk held on HTTP/2 in these runs (no loss hit a gap)",
    )


@reads("priority", "deadline-fifo-h2", "deadline-audio-first-h2")
def deadline_chunks(results: Results) -> Measured:
    table = results.table("priority", "chunks")
    on_time = table.assign(_on=table["on_time"].astype(str) == "True")
    per_run = on_time.groupby(["level", "run_id"])["_on"].sum().groupby("level").median()
    fifo, first = per_run.get("deadline-fifo-h2"), per_run.get("deadline-audio-first-h2")
    if fifo is None or first is None:
        raise NotMeasured("priority: the deadline levels are not in these results")
    ok = fifo == 0 and first == 8
    text = f"chunks in time of 8: FIFO {fifo:g}, media first {first:g} (HTTP/2, medians)"
    return Measured(
        text,
        ok=ok,
        runs=arm_runs(table, ["deadline-fifo-h2", "deadline-audio-first-h2"]),
        reason=""
        if ok
        else f"FIFO had {fifo:g} chunks on time (the chapter: 0), media first "
        f"{first:g} (the chapter: 8)",
    )


@reads("cancel", "cancel-h2")
def cancel(results: Results) -> Measured:
    table = results.table("cancel", "cancel")
    stopped = pd.to_numeric(table["sending_stopped_s"], errors="coerce")
    bound = pd.to_numeric(table["bound_s"], errors="coerce")
    within = int((stopped <= bound).sum())
    text = (
        f"sending stopped {stopped.median() * 1e3:.0f} ms after the cancel (bound "
        f"{bound.median() * 1e3:.0f} ms): {within} of {len(table)} within"
    )
    return Measured(
        text,
        ok=within == len(table),
        runs=table["run_id"].nunique(),
        reason=f"{len(table) - within} streams sent past the bound",
    )


@reads("congestion", "cubic-l3.6", "bbr-l3.6")
def bbr_vs_loss_based(results: Results) -> Measured:
    cubic = level_value("congestion", "cubic-l3.6", unit="ms")(results)
    bbr = level_value("congestion", "bbr-l3.6", unit="ms")(results)
    if cubic.value is None or bbr.value is None:
        raise NotMeasured("congestion: no median for cubic-l3.6 or bbr-l3.6")
    return Measured(
        f"cubic {fmt(cubic.value, 'ms')}, bbr {fmt(bbr.value, 'ms')} at 3.6 %",
        ok=bbr.value < cubic.value,
        runs=min(cubic.runs, bbr.runs),
        reason="bbr was not faster here",
    )


@reads("agent-deployment", "cloud-4.0mbit", "cloud-3.5mbit")
def deadline_rate(above: str = "cloud-4.0mbit", below: str = "cloud-3.5mbit") -> Measure:
    """Whether the deadline's threshold lies between the uplink rates of two levels (4.0 and
    3.5 Mbit/s): every run of ``above`` meets it and every run of ``below`` misses it."""

    def measure(results: Results) -> Measured:
        met, counts = {}, []
        for level in (above, below):
            runs = results.runs("agent-deployment", level)
            met[level] = bool(runs["deadline_met"].astype(str).eq("True").all())
            counts.append(len(runs))
        ok = met[above] and not met[below]
        text = (
            f"4.0 Mbit/s ({above}) {'meets' if met[above] else 'misses'}, 3.5 Mbit/s "
            f"({below}) {'meets' if met[below] else 'misses'} the (scaled) deadline"
        )
        return Measured(
            text, ok=ok, runs=min(counts), reason="the threshold is not between 3.5 and 4.0 here"
        )

    return reads("agent-deployment", above, below)(measure)


def _site_energy(results: Results) -> dict[str, float]:
    out = {}
    for site in ("phone", "near", "cloud"):
        runs = results.runs("agent-deployment", site)
        energy = pd.to_numeric(runs["site_energy_j"], errors="coerce")
        done = pd.to_numeric(runs["agent_rounds_done"], errors="coerce")
        out[site] = float((energy * 20 / done).median())
    return out


@reads("agent-deployment", "phone", "near", "cloud")
def decision(results: Results) -> Measured:
    met, counts = {}, []
    for site in ("phone", "near", "cloud"):
        runs = results.runs("agent-deployment", site)
        met[site] = bool(runs["deadline_met"].astype(str).eq("True").all())
        counts.append(len(runs))
    e = _site_energy(results)
    chosen = min((s for s in ("near", "cloud") if met[s]), key=lambda s: e[s], default=None)
    ok = met["near"] and met["cloud"] and not met["phone"] and chosen == "cloud"
    text = (
        f"deadline met: phone {met['phone']}, near {met['near']}, cloud {met['cloud']}; "
        f"the one meeting it with less energy: {chosen or 'none'}"
    )
    return Measured(
        text, ok=ok, runs=min(counts), reason=f"this campaign chooses {chosen or 'no site'}"
    )


def upload_rate(experiment: str, level: str) -> Measure:
    """The upload's rate at the server: its bytes over the time it took to read them."""

    def measure(results: Results) -> Measured:
        runs = results.runs(experiment, level)
        rate = (
            pd.to_numeric(runs["up_bytes"], errors="coerce")
            * 8
            / pd.to_numeric(runs["server_receive_s"], errors="coerce")
        )
        kept = rate.dropna()
        if kept.empty:
            raise NotMeasured(f"{experiment}/{level}: no server receive time")
        return _per_run(kept, "Mbit/s", "the body read by the server", level, experiment)

    return reads(experiment, level)(measure)


def upload_rounds(experiment: str, level: str) -> Measure:
    """Rounds of a new connection's upload: the server reads the first flight one round
    after the request leaves and the last one (rounds - 1) round trips later."""

    def measure(results: Results) -> Measured:
        runs = results.runs(experiment, level)
        receive = pd.to_numeric(runs["server_receive_s"], errors="coerce")
        rtt = pd.to_numeric(runs["rtt_s"], errors="coerce")
        per_run = ((receive / rtt).dropna() + 1).round()  # each run's count of rounds
        rounds = float((receive / rtt).median()) + 1
        if not math.isfinite(rounds) or per_run.empty:
            raise NotMeasured(f"{experiment}/{level}: no server receive time")
        low, high = median_ci_order(per_run.tolist())
        text = (
            f"{round(rounds)} rounds ({experiment}/{level}: the server read the body over "
            f"{receive.median() * 1e3:.0f} ms = {rounds - 1:.2f} round trips)"
        )
        return Measured(text, float(round(rounds)), runs=len(per_run), low=low, high=high)

    return reads(experiment, level)(measure)


def outage_task(level: str) -> Measure:
    def measure(results: Results) -> Measured:
        base = level_value("agent-outage", level)(results)
        runs = results.runs("agent-outage", level)
        met = runs["deadline_met"].astype(str).eq("True").all()
        return Measured(
            f"{base.text}; deadline {'met' if met else 'missed'} in every run" if met
            else f"{base.text}; deadline missed in some run",
            base.value, runs=base.runs, low=base.low, high=base.high, scaled=base.scaled,
        )  # fmt: skip

    return reads("agent-outage", level)(measure)


def airtime_image(column: str, level: str, baseline: str | None = None, unit: str = "s") -> Measure:
    def measure(results: Results) -> Measured:
        runs = results.runs("airtime", level)
        if not runs["workload"].astype(str).eq("retouch").all():
            raise NotMeasured("airtime: the quick form carries the audio, not the image")
        if baseline is None:
            return level_value("airtime", level, column, unit=unit)(results)
        return level_difference("airtime", level, baseline, column, unit=unit)(results)

    return reads("airtime", level, *([baseline] if baseline else []))(measure)


def ack_saving_bound(_results: Results) -> str:
    """Half of one 92-byte ACK per 1,168-byte packet of the image round trip (MODELS 7)."""
    from harness.collect.overhead import chapter_modelled

    saved = sum(chapter_modelled(b, 0.5)["chapter_ack_wire_bytes"] for b in (30e6, 5e6))
    return f"{saved / 1e6:.2f} MB (MODELS 7, half of one 92-byte ACK per 1,168-byte packet)"


def window_s() -> float:
    """30 MB at the 64 KB window's rate on 100 ms (MODELS 5)."""
    return 30e6 * 8 / bounds.window_throughput_bps(64_000, 0.1, 20 * MBIT)


def jensen_bound(_results: Results) -> str:
    varying = site_s(0.08, R, 6 * MBIT, 10) + site_s(0.08, R, 10 * MBIT, 10)
    return f"{varying:.1f} s vs {site_s(0.08, R, 8 * MBIT):.1f} s (MODELS 13)"


def runs_bound_of(experiment: str, level: str, unit: str = "s") -> Callable[[Results], str]:
    """The level's runs' own bound (or '–')."""
    return lambda r: runs_bound(r, experiment, level, unit) or "–"


def fixed(text: str) -> Callable[[Results], str]:
    return lambda _r: text


@reads("playback-trace", "trace", "constant")
def playback_trace(results: Results) -> Measured:
    """Stalls by initial buffer over the recorded downlink and over a constant link of the
    same mean rate (playback.csv)."""
    table = results.table("playback-trace", "playback")
    cells, stalled = [], {}
    for level in ("trace", "constant"):
        mine = table[table["level"].astype(str) == level]
        if mine.empty:
            raise NotMeasured(f"playback-trace: no valid run of {level} in playback.csv")
        stalls = table_medians(mine, ["initial_buffer_s"], "stall_count")
        stalled[level] = stalls
        shown = ", ".join(f"{round(k * 1e3)} ms: {v:g}" for k, v in sorted(stalls.items()))
        cells.append(f"{level}: {shown}")
    common = sorted(set(stalled["trace"]) & set(stalled["constant"]))
    ok = any(stalled["trace"][b] > stalled["constant"][b] for b in common)
    return Measured(
        "median stalls by initial buffer; " + "; ".join(cells),
        ok=ok,
        runs=int(table["run_id"].nunique()),
        reason="at every buffer both links share, the varying downlink stalled no more than "
        "the constant one",
    )


@reads("agent-trace", "trace", "constant")
def deadline_probability(results: Results) -> Measured:
    """The share of tasks that met the deadline over the traced uplink (runs spread over
    where the task starts in the trace) against a constant uplink of the same mean rate."""
    shares = {}
    for level in ("trace", "constant"):
        frame = results.runs("agent-trace", level)
        if "deadline_met" not in frame:
            raise NotMeasured("agent-trace: no deadline_met in runs.csv")
        met = frame["deadline_met"].astype(str).eq("True")
        shares[level] = (int(met.sum()), len(met))
    (tm, tn), (cm, cn) = shares["trace"], shares["constant"]
    text = f"met 45 s: {tm} of {tn} over the trace, {cm} of {cn} at the constant mean rate"
    ok = tm / tn < 0.99 <= cm / cn
    return Measured(
        text,
        ok=ok,
        runs=min(tn, cn),
        reason="the traced uplink met the deadline as often as the constant one (or the "
        "constant one missed it)",
    )


@reads("cross", "alone", "cubic-1")
def beside_bulk_flows(results: Results) -> Measured:
    """The request alone and beside bulk cubic flows: its time grows with the flows, and
    how far it is from its bound at the fair share (runs.csv ratio_fair)."""
    alone = level_value("cross", "alone", unit="ms")(results)
    cells, slower, runs = [f"alone {fmt(alone.value, 'ms')}"], True, alone.runs
    for level in ("cubic-1", "cubic-4", "bbr-1", "bbr-4"):
        try:
            beside = level_value("cross", level, unit="ms")(results)
        except NotMeasured:
            continue
        if alone.value is None or beside.value is None:
            raise NotMeasured(f"cross: no median for alone or {level}")
        slower = slower and beside.value > alone.value
        cells.append(f"{level} {fmt(beside.value, 'ms')}")
        runs += beside.runs
    return Measured(
        ", ".join(cells),
        ok=slower and len(cells) > 1,
        runs=alone.runs,
        reason="a request beside bulk flows was not slower than alone",
    )


def _levels_side_by_side(
    results: Results, experiment: str, levels: tuple[str, ...], conditions: str
) -> Measured:
    """Each level's median request time, in a row, with the conditions they share."""
    values = {level: level_value(experiment, level, unit="ms")(results) for level in levels}
    cells = ", ".join(f"{k} {fmt(v.value, 'ms')}" for k, v in values.items())
    return Measured(f"{cells} ({conditions})", runs=sum(v.runs for v in values.values()))


@reads("h3-stacks", "h2-cubic", "aioquic-cubic", "ngtcp2-cubic")
def quic_implementations(results: Results) -> Measured:
    """The request over HTTP/2 and HTTP/3 on both QUIC implementations with one congestion
    control: what differs between aioquic and ngtcp2 is the implementation, not HTTP/3."""
    return _levels_side_by_side(results, "h3-stacks", ("h2-cubic", "aioquic-cubic",
                                "ngtcp2-cubic"), "cubic, 0 % loss, new connection")  # fmt: skip


@reads("native-stack", "h2", "h3-aioquic", "h3-ngtcp2")
def stacks_with_processing(results: Results) -> Measured:
    """The TTS with 30 ms of processing on a lossy path over HTTP/2 and HTTP/3 on both QUIC
    stacks (experiments/native-stack.toml): whether HTTP/3's lead holds on both."""
    return _levels_side_by_side(
        results, "native-stack", ("h2", "h3-aioquic", "h3-ngtcp2"),
        "bbr, 150 ms, 200 Mbit/s, 10 % loss down, 30 ms processing",
    )  # fmt: skip


# --- the receiver's ACK policy (issue 38; runs.csv's feedback columns) -----------------------


def acks_saved_mb(experiment: str, level: str, baseline: str, ack_bytes: int) -> Measure:
    """The ACK bytes ``level`` saves against ``baseline`` at ``ack_bytes`` an ACK (the
    chapter's 92): the difference of their median ACK-only packets (runs.csv
    ``ack_only_packets``, counted at the receivers), with its interval."""
    packets = level_difference(experiment, baseline, level, column="ack_only_packets", unit="")

    def measure(results: Results) -> Measured:
        got = packets(results)
        scale = ack_bytes / 1e6
        value = None if got.value is None else got.value * scale
        text = (
            f"{fmt(value, 'MB')} at {ack_bytes} bytes an ACK ({experiment}: "
            f"{fmt(got.value, '')} fewer ACKs, {level} against {baseline}, {got.runs} runs an arm)"
        )
        return Measured(text, value, runs=got.runs, low=got.low * scale, high=got.high * scale)

    return reads(experiment, level, baseline)(measure)


def wire_bytes_at_sizes(experiment: str, level: str, packet_bytes: int, ack_bytes: int) -> Measure:
    """The level's measured packet counts at the chapter's sizes: data packets x
    ``packet_bytes`` + ACK-only packets x ``ack_bytes`` (median over runs, its interval)."""

    def measure(results: Results) -> Measured:
        runs = results.runs(experiment, level)
        if "data_packets" not in runs or runs["data_packets"].isna().all():
            raise NotMeasured(f"{experiment}/{level}: no packet counts (data_packets)")
        counted = runs.dropna(subset=["data_packets", "ack_only_packets"])
        values = (
            counted["data_packets"] * packet_bytes + counted["ack_only_packets"] * ack_bytes
        ).tolist()
        low, high = median_ci_order(values)
        median = float(pd.Series(values).median())
        measured = float((counted["wire_bytes_data"] + counted["wire_bytes_ack"]).median())
        text = (
            f"{median:,.0f} B at {packet_bytes} + {ack_bytes} bytes ({measured:,.0f} B as sent; "
            f"{experiment}/{level}, {len(values)} valid)"
        )
        return Measured(text, median, runs=len(values), low=low, high=high)

    return reads(experiment, level)(measure)


SCREEN_BITS_20_ROUNDS = 20 * RAW_SCREEN_BYTES * 8
"""Twenty raw screenshots (the cloud's uploads over the remaining rounds, §12.5.2)."""
FREE_UPLOAD_BPS = 1e9
"""agent-deployment's cloud-2.83x-free-upload uplink: its 20 uploads take 0.13 s."""


def crossover_from(near_level: str) -> Measure:
    """F59's threshold from two measured tasks: the cloud's uplink rate at which 20 raw
    screenshots take the time between the nearby site's task (``near_level``) and the
    cloud's without its uploads (that task less its 0.13 s of 1 Gbit/s uploads); the
    interval from the two levels' intervals at their far ends (conservative)."""

    @reads("agent-deployment", near_level, "cloud-2.83x-free-upload")
    def measure(results: Results) -> Measured:
        return _crossover(results, near_level)

    return measure


def _crossover(results: Results, near_level: str) -> Measured:
    near = level_value("agent-deployment", near_level, rounds=20)(results)
    cloud = level_value("agent-deployment", "cloud-2.83x-free-upload", rounds=20)(results)
    free_s = SCREEN_BITS_20_ROUNDS / FREE_UPLOAD_BPS
    gap = near.value - (cloud.value - free_s)  # type: ignore[operator]
    gap_low = near.low - (cloud.high - free_s)
    gap_high = near.high - (cloud.low - free_s)
    runs = min(near.runs, cloud.runs)
    if gap <= 0:
        return Measured(
            f"the cloud without uploads is not faster here ({gap:.2f} s): no threshold",
            math.inf, runs=runs, reason="the cloud's task is as long as the nearby site's",
        )  # fmt: skip
    rate = SCREEN_BITS_20_ROUNDS / gap / MBIT
    low = SCREEN_BITS_20_ROUNDS / gap_high / MBIT if gap_high > 0 else math.nan
    high = SCREEN_BITS_20_ROUNDS / gap_low / MBIT if gap_low > 0 else math.inf
    text = (
        f"{rate:.1f} Mbit/s (near {near.value:.2f} s, cloud without uploads "
        f"{cloud.value - free_s:.2f} s: {gap:.2f} s apart; {runs} runs a level)"
    )
    return Measured(text, rate, runs=runs, low=low, high=high, scaled=near.scaled)


crossover_rate = crossover_from("near-2.83x")


def _per_run(
    values: pd.Series, unit: str, what: str, level: str, experiment: str = "playback"
) -> Measured:
    """A per-run value's median over the level's valid runs, with its 95 % interval."""
    kept = pd.to_numeric(values, errors="coerce").dropna() * UNIT_SCALE[unit]
    if kept.empty:
        raise NotMeasured(f"{experiment}/{level}: no {what} in a valid run")
    low, high = median_ci_order(kept.tolist())
    median = float(kept.median())
    interval = f", 95 % CI {fmt(low, unit)} to {fmt(high, unit)}" if math.isfinite(low) else ""
    text = f"{fmt(median, unit)} ({what}, {experiment}/{level}{interval}, {len(kept)} valid)"
    return Measured(text, median, runs=len(kept), low=low, high=high)


def first_chunk_arrival(level: str) -> Measure:
    """F6: chunk 1's arrival on the chapter's clock (from the start of its 20 ms of audio):
    the 20 ms of audio and 12 ms of processing the server's schedule keeps (the chapter's
    figures), plus what each run measured from the chunk's production at the server to its
    arrival in the client's transport (chunks.csv: sending and propagation)."""

    def measure(results: Results) -> Measured:
        table = results.table("playback", "chunks")
        mine = table[(table["level"].astype(str) == level) & (table["chunk"] == 0)]
        arrived = mine["arrived_s"].fillna(mine["read_s"])
        scheduled = STREAM_CHUNK_DURATION_S + STREAM_CHUNK_PROCESSING_S
        return _per_run(arrived - mine["produced_s"] + scheduled, "ms", "chunk 1's arrival", level)

    return reads("playback", level)(measure)


PLAYBACK_READS = {
    "stall_s": ("ms", "stall with {} ms of buffer"),
    "first_stall_s": ("s", "first stall after the start with {} ms of buffer"),
    "filled_first_stall_s": (
        "s",
        "first stall after the start once {} ms of audio is in hand",
    ),
}
"""playback.csv columns a row reads per initial buffer: the unit and what it is."""


def playback_at(level: str, buffer_s: float, column: str) -> Measure:
    """F7 (``stall_s``: the wait rule's stall time) and F8 (``filled_first_stall_s``: how long
    the player, started once it held ``buffer_s`` of audio, played before its buffer first ran
    dry; ``first_stall_s``: started ``buffer_s`` after the first arrival) with an initial
    buffer of ``buffer_s``
    (playback.csv: each run's chunk reads replayed through the player), per run."""
    unit, what = PLAYBACK_READS[column]

    def measure(results: Results) -> Measured:
        mine = _playback_level(results, level)
        if column not in mine:
            raise NotMeasured(
                f"playback.csv has no {column} (its tables predate it: `testbed report` on "
                "the playback directory writes them again from the runs)"
            )
        rows = mine[(mine["initial_buffer_s"] - buffer_s).abs() < 1e-9]
        return _per_run(rows[column], unit, what.format(f"{buffer_s * 1e3:g}"), level)

    return reads("playback", level)(measure)


# --- failures drawn per trial (§12.4.3, tbcore.failures) ------------------------------------


def trials(results: Results, experiment: str, level: str) -> pd.DataFrame:
    """The valid measured runs of a level with drawn path failures, each one trial: those
    delivered and those that delivered nothing (no time: harness.analysis.levels.answered)."""
    frame = results.frame(experiment)
    if frame.empty or level not in set(frame["level"].astype(str)):
        raise NotMeasured(f"{experiment}: level {level} is not in this form of the file")
    mine = answered(frame)
    mine = mine[mine["level"].astype(str) == level]
    if mine.empty or "delivered" not in mine or mine["delivered"].isna().all():
        raise NotMeasured(f"{experiment}/{level}: no valid trial with drawn failures")
    return mine[mine["delivered"].notna()]


def _as_section_12(trial: pd.Series) -> bool:
    """Whether a trial's outcome is the one docs/models.md section 12 gives its drawn edges:
    nothing delivered exactly when both access paths or the shared end point were down."""
    down = set(str(trial["paths_down"]).split("+"))
    fails = bounds.duplicate_failure(
        float("link" in down), float("link_b" in down), float("exit_link" in down)
    )
    return bool(trial["delivered"]) == (fails < 1.0)


def proportion_trials(rate: float, half_width: float) -> int:
    """Trials a 95 % binomial interval of +-``half_width`` about ``rate`` needs (the normal
    approximation, n = z^2 p (1 - p) / h^2)."""
    z = scipy_stats.norm.ppf(0.975)
    return math.ceil(z * z * rate * (1.0 - rate) / (half_width * half_width))


def duplication_failures(experiment: str, level: str, rate: float, half_width: float) -> Measure:
    """The share of ``level``'s trials that delivered nothing, in %, with its exact
    (Clopper-Pearson) 95 % interval; an inconclusive row names the trials that would decide
    ``rate`` +- ``half_width`` (fractions)."""

    def measure(results: Results) -> Measured:
        mine = trials(results, experiment, level)
        n = len(mine)
        failed = int((~mine["delivered"].astype(bool)).sum())
        interval = scipy_stats.binomtest(failed, n).proportion_ci(0.95, method="exact")
        low, high = 100.0 * interval.low, 100.0 * interval.high
        states = mine["paths_down"].astype(str).value_counts().sort_index()
        drawn = ", ".join(f"{state} {count}" for state, count in states.items())
        matched = int(mine.apply(_as_section_12, axis=1).sum())
        text = (
            f"{100.0 * failed / n:.1f} % ({failed} of {n} trials delivered nothing, "
            f"{experiment}/{level}, 95 % CI {low:.1f} to {high:.1f} %; drawn down: {drawn}; "
            f"{matched} of {n} as section 12 gives their edges)"
        )
        return Measured(
            text, 100.0 * failed / n, runs=n, low=low, high=high,
            decide_runs=proportion_trials(rate, half_width),
        )  # fmt: skip

    return reads(experiment, level)(measure)


def attempt_cost(experiment: str, level: str, success: float, half_width: float) -> Measure:
    """E / C of ``level``'s tasks (the model judging each attempt with success ``success``,
    a failed one done again whole): the mean task time over the mean attempt time, pooled
    over the tasks of its valid runs, with a bootstrap interval over tasks; ``runs`` counts
    tasks (the statistic's unit), and an inconclusive row names the tasks that would give
    an interval of +-``half_width``."""

    def measure(results: Results) -> Measured:
        runs = results.runs(experiment, level)
        rounds = results.table(experiment, "rounds")
        mine = rounds[rounds["run_id"].isin(set(runs["run_id"]))]
        try:
            costs = attempts.attempt_costs(attempts.task_table(mine))
        except ValueError as err:
            raise NotMeasured(f"{experiment}/{level}: {err}") from None
        interval = (
            f", 95 % CI {costs.low:.4f} to {costs.high:.4f} C" if math.isfinite(costs.low) else ""
        )
        text = (
            f"{costs.ratio:.4f} C ({costs.tasks} tasks of {experiment}/{level} in {costs.runs} "
            f"valid runs, {costs.attempts} attempts; E {fmt(costs.task_s, 's')}, C "
            f"{fmt(costs.attempt_s, 's')}{interval}; n counts tasks)"
        )
        return Measured(
            text, costs.ratio, runs=costs.tasks, low=costs.low, high=costs.high,
            decide_runs=attempts.tasks_to_decide(success, half_width),
        )  # fmt: skip

    return reads(experiment, level)(measure)


def duplication_outcomes(experiment: str, levels: tuple[str, ...]) -> Measure:
    """Each forced failure's trials against section 12: a copy survives one access path
    down; both paths, or the end point they share, down leave nothing delivered."""

    def measure(results: Results) -> Measured:
        parts, runs, ok = [], [], True
        for level in levels:
            mine = trials(results, experiment, level)
            matched = mine.apply(_as_section_12, axis=1)
            delivered = int(mine["delivered"].astype(bool).sum())
            down = str(mine["paths_down"].iloc[0])
            parts.append(f"{down} down: {delivered} of {len(mine)} delivered")
            runs.append(len(mine))
            ok = ok and bool(matched.all())
        return Measured(
            "; ".join(parts) + f" ({experiment})", ok=ok, runs=min(runs),
            reason="" if ok else "a trial's outcome was not the one its downed edges give",
        )  # fmt: skip

    return reads(experiment, *levels)(measure)

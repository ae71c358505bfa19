"""The report's "Host effect" section (issue 30): for an experiment whose blocks were made
on several hosts (harness.cluster), the blocks per host, each level's median by host, the
host effect beside the order effect, the levels whose effect depends on the host, and the
planned against the measured makespan.

A pure function of the manifest's ``cluster`` record and the runs frame (harness.analysis.
hosts); empty for an experiment made on one host without a cluster.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from harness.analysis import hosts as analysis
from harness.analysis.hosts import INTERACTION_ALPHA


def _ms(seconds: Any) -> str:
    if seconds is None or not math.isfinite(float(seconds)):
        return "–"
    return f"{float(seconds) * 1e3:.1f}"


def _s(seconds: Any) -> str:
    return "–" if seconds is None else f"{float(seconds):.1f}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return [*lines, *("| " + " | ".join(row) + " |" for row in rows), ""]


def block_rows(cluster: Mapping[str, Any], frame: pd.DataFrame) -> list[list[str]]:
    """Per host: its blocks, runs (re-runs included), valid runs, median block wall time and
    its fingerprint."""
    blocks = list(cluster.get("blocks", {}).values())
    hosts = cluster.get("hosts", {})
    names = sorted({str(b["host"]) for b in blocks} | set(analysis.hosts_of(frame)))
    rows = []
    for host in names:
        mine = [b for b in blocks if str(b["host"]) == host]
        runs = frame[frame["host"].astype(str) == host] if "host" in frame else frame.iloc[0:0]
        walls = sorted(float(b["wall_s"]) for b in mine)
        fp = hosts.get(host, {})
        rows.append(
            [
                host,
                ", ".join(str(b["block"]) for b in sorted(mine, key=lambda b: b["block"])) or "–",
                str(len(runs)),
                str(int(runs["valid"].fillna(False).astype(bool).sum())),
                _s(walls[len(walls) // 2]) if walls else "–",
                f"{fp.get('kernel', '?')}, {fp.get('cpu_model', '?')}, "
                f"{fp.get('cores', '?')} cores, {fp.get('backend', '?')}",
            ]
        )
    return rows


def _medians_lines(frame: pd.DataFrame, levels: Sequence[str]) -> list[str]:
    table = analysis.medians_by_host(frame, levels)
    offsets = analysis.host_offsets(frame, levels)
    rows = [[str(lv), *(_ms(table.loc[lv, h]) for h in table.columns)] for lv in table.index]
    rows.append(["host offset", *(_ms(offsets.get(str(h))) for h in table.columns)])
    return [
        "Median request time (ms) of each level on each host (valid measured runs); the "
        "host offset is the median over levels of the level's median there minus its median "
        "on all hosts:",
        "",
        *_table(["level", *map(str, table.columns)], rows),
    ]


def _effect_lines(frame: pd.DataFrame, levels: Sequence[str], effects: Sequence[Any]) -> list[str]:
    """The host effect beside the order effect of each level."""
    host = analysis.host_effect_s(analysis.host_offsets(frame, levels))
    orders = [f"{e.level} {_ms(e.order_s)} ms" for e in effects]
    return [
        f"- Host effect (largest minus smallest host offset): **{_ms(host)} ms**; order "
        f"effect (second minus first position): {', '.join(orders) or '–'}. Both are "
        "nuisances that the blocks keep out of the arm effects: a block never spans hosts, "
        "so every pair is made on one host.",
        "",
    ]


def _interaction_lines(frame: pd.DataFrame, baselines: Mapping[str, str]) -> list[str]:
    found = analysis.host_interactions(frame, baselines)
    hosts = analysis.hosts_of(frame)
    rows = [
        [
            i.level,
            i.baseline,
            *(
                f"{_ms(i.effect_by_host_s.get(h, math.nan))} ({i.pairs_by_host.get(h, 0)})"
                for h in hosts
            ),
            "–" if not math.isfinite(i.p_value) else f"{i.p_value:.3f}",
        ]
        for i in found
    ]
    depends = [i.level for i in found if i.depends_on_host]
    untested = [i.level for i in found if not math.isfinite(i.p_value)]
    if depends:
        verdict = f"- Effect depends on the host: **{', '.join(depends)}**."
    else:
        verdict = f"- No level's effect depends on the host at the {INTERACTION_ALPHA:.0%} level"
        verdict += f" (not testable: {', '.join(untested)})." if untested else "."
    return [
        "Arm effect (ms, level minus baseline, median of the within-block differences; pairs) "
        f"on each host, and the Kruskal-Wallis p of equal effects across hosts (hosts with "
        f"at least {analysis.MIN_PAIRS_PER_HOST} pairs):",
        "",
        *_table(["level", "baseline", *hosts, "p"], rows),
        verdict,
        "",
    ]


def _makespan_lines(cluster: Mapping[str, Any]) -> list[str]:
    lines = []
    for session in cluster.get("sessions", []):
        lines.append(
            f"- Session {session['started_utc']}: {session['blocks']} blocks on "
            f"{len(session.get('hosts', []))} hosts; makespan planned "
            f"{_s(session.get('planned_makespan_s'))} s (the blocks' work spread evenly, "
            "never below the longest block), measured "
            f"{_s(session.get('makespan_s'))} s; the same blocks one after another: "
            f"{_s(session.get('serial_s'))} s."
            + (f" Failed: {'; '.join(session['failures'])}." if session.get("failures") else "")
        )
    return [*lines, ""] if lines else []


def host_section(
    manifest: Mapping[str, Any],
    frame: pd.DataFrame,
    baselines: Mapping[str, str],
    effects: Sequence[Any],
) -> list[str]:
    """The "Host effect" section, or nothing for a run without a cluster on one host."""
    cluster = manifest.get("cluster")
    if not cluster and len(analysis.hosts_of(frame)) < 2:
        return []
    levels = list(baselines)
    return [
        "## Host effect",
        "",
        "Blocks per host (each block: one run of every level, its re-runs on the same host):",
        "",
        *_table(
            ["host", "blocks", "runs", "valid", "median block (s)", "kernel, CPU, cores, backend"],
            block_rows(cluster or {}, frame),
        ),
        *_medians_lines(frame, levels),
        *_effect_lines(frame, levels, effects),
        *_interaction_lines(frame, baselines),
        *_makespan_lines(cluster or {}),
    ]

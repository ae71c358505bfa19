"""Experiment files (``experiments/*.toml``) -> a validated, typed :class:`ExperimentSpec`.

One file is one single-factor experiment::

    name = "initcwnd"
    question = "How much of a new connection's request does a larger initial window save?"
    repetitions = 10
    order = "alternate"          # or "shuffle" (seeded, within each block)
    counterbalance = true        # A B, then B A in the next block
    seed = 1
    warmup_runs = 1              # whole blocks run first and flagged warm-up

    [fixed]                      # every setting that does not change
    link = "rtt=200ms,rate=333mbit"
    protocol = "h2"
    connection = "new"
    workload = "asr"

    [factor]                     # exactly one factor
    name = "initcwnd"
    settings = ["initcwnd"]      # the only settings a level may set
    levels = [ { name = "iw10", initcwnd = 10 }, { name = "iw40", initcwnd = 40 } ]

    [quick]                      # what ``--quick`` changes (only these keys)
    repetitions = 2
    warmup_runs = 0
    levels = ["iw10", "iw40"]

    [chapter]                    # the form ``testbed campaign --chapter`` runs (same keys)
    repetitions = 6              # the fewest runs with a two-sided 95 % interval on a median
    levels = ["iw10", "iw40"]

A level's ``link`` is a list of overriding link keys applied on top of the fixed link
(``"down.loss=14%"``). A level may also name a ``baseline``: the level it is compared
against (default: the first level), so that one file can hold pairs such as h2-new vs
h2-reused next to h3-new vs h3-reused. Anything else is refused with one line naming the
key: unknown keys, a second factor, a level setting a key outside its factor, two levels
that do not differ, impossible values.
"""

from __future__ import annotations

import stat
import tomllib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.spec.cross import check_cross
from harness.spec.paths import EDGE_KNOBS, check_path, topology_of
from harness.spec.traces import check_repetitions, check_trace_start
from netem.linkspec import LinkSpec, merge_link, resolve_link
from netem.topologyspec import Topology
from tbcore import kinds
from tbcore.errors import SpecError, clip
from tbcore.settings import CONNECTION_MODES, KNOBS, MAX_REQUESTS, NONE_WORDS, Settings, by_attr
from tbcore.units import parse_duration_s
from tbcore.workloads import STREAM_SAMPLE_RATES_HZ

CONNECTIONS = CONNECTION_MODES

ORDERS = ("alternate", "shuffle")

MAX_REPETITIONS = 10_000
"""A sanity cap: more runs than this in one file is a typo, not an experiment."""

IPV4_UDP_HEADER_BYTES = 28
"""IPv4 (20) + UDP (8) headers: the largest datagram payload is MTU minus this."""

IPV4_TCP_HEADER_BYTES = 40
"""IPv4 (20) + TCP (20) headers: the largest segment payload is MTU minus this."""

LEVEL_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-_.")
NAME_FIRST_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789")
"""An experiment's or a level's name starts with a letter or digit: it becomes a directory
(``OUTPUT/NAME/``) and part of file names, so ``.``, ``..`` and hidden names are refused."""
MAX_NAME_CHARS = 64
"""A name is a directory name and a run id's part, well under a file name's 255 bytes."""


def is_short_name(value: Any) -> bool:
    """Whether ``value`` is a name an experiment or a level may have."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_NAME_CHARS
        and value[0] in NAME_FIRST_CHARS
        and set(value) <= LEVEL_NAME_CHARS
    )


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpecError(name, f"must be true or false, got {value!r}")
    return value


def _choice(options: tuple[str, ...]) -> Callable[[str, Any], str]:
    def parse(name: str, value: Any) -> str:
        if value not in options:
            raise SpecError(name, f"must be one of {', '.join(options)}, got {value!r}")
        return value

    return parse


def _int_range(low: int, high: int) -> Callable[[str, Any], int]:
    def parse(name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(name, f"must be a whole number, got {value!r}")
        if not low <= value <= high:
            raise SpecError(name, f"must lie in [{low}, {high}], got {value}")
        return value

    return parse


def parse_settings(
    table: Mapping[str, Any], where: str, base: Settings | None = None
) -> tuple[Settings, set[str]]:
    """Apply ``table``'s keys to ``base``; returns the settings and the keys given."""
    for key in EDGE_KNOBS:
        value = table.get(key)
        if key not in table:
            continue
        if not isinstance(value, str):
            raise SpecError(f"{where}.{key}", f"must be a link string or preset, got {value!r}")
        if value.strip().lower() not in NONE_WORDS:
            try:
                resolve_link(value)
            except SpecError as err:
                raise SpecError(f"{where}.{key}.{err.field}", err.reason) from None
    return Settings.from_table(table, where, base), set(table)


def check_consistent(settings: Settings, topology: Topology, where: str) -> None:
    """Combinations that cannot be run, named by the key that makes them impossible."""
    spec = topology.link_spec
    check_path(settings, topology, where)
    check_trace_start(settings, topology, where)
    check_cross(settings, topology, where)
    if settings.connection == "0rtt" and settings.warmup_requests < 1:
        raise SpecError(
            f"{where}.warmup_requests", "0rtt needs >= 1 warm-up request for a session ticket"
        )
    rate_attr = kinds.protocol(settings.protocol).path_rate_attr
    if rate_attr is not None and getattr(settings, rate_attr) is None:
        key = by_attr()[rate_attr].key
        for name in ("up", "down"):
            if getattr(spec, name).rate_bps is None:
                raise SpecError(
                    f"{where}.{key}",
                    f"{settings.protocol} paces at a measured rate capped by the path's: the "
                    f"link has no {name} rate (set one, or {key})",
                )
    if settings.sample_rate_hz not in STREAM_SAMPLE_RATES_HZ:
        known = ", ".join(map(str, STREAM_SAMPLE_RATES_HZ))
        raise SpecError(f"{where}.sample_rate", f"must be one of {known} Hz")
    if settings.chunk_bytes is not None and settings.multipath != "duplicate":
        raise SpecError(f"{where}.chunk_size", "only multipath duplicate sends numbered chunks")
    if settings.resume and not settings.tls:
        raise SpecError(f"{where}.resume", "resumes a TLS session: tls = false has none")
    if settings.resume and settings.warmup_requests < 1:
        raise SpecError(f"{where}.warmup_requests", "resume needs >= 1 warm-up request")
    if settings.pace_at_path_rate and settings.max_pacing_rate_bps is not None:
        raise SpecError(f"{where}.pace_at_path_rate", "give max_pacing_rate or this, not both")
    if settings.pace_at_path_rate and spec.down.rate_bps is None:
        raise SpecError(f"{where}.pace_at_path_rate", "the link has no down rate to pace at")
    if settings.max_datagram_size_bytes is not None:
        largest = spec.mtu_bytes - IPV4_UDP_HEADER_BYTES
        if settings.max_datagram_size_bytes > largest:
            raise SpecError(
                f"{where}.max_datagram_size",
                f"{settings.max_datagram_size_bytes} exceeds the path MTU allows ({largest})",
            )
    if settings.mss_bytes > spec.mtu_bytes - IPV4_TCP_HEADER_BYTES:
        raise SpecError(
            f"{where}.mss", f"exceeds MTU {spec.mtu_bytes} - {IPV4_TCP_HEADER_BYTES} header bytes"
        )


# --- the experiment --------------------------------------------------------------------------


@dataclass(frozen=True)
class Level:
    """One arm of the factor: its name, what it sets, and the full settings of its runs."""

    name: str
    overrides: Mapping[str, Any]
    """The keys this level set in the file, as written."""
    settings: Settings
    baseline: str
    """The level this one is compared against (itself for the first level)."""
    topology: Topology
    """The path of its runs: every edge's LinkSpec, parsed once when the file was read."""
    expected_effect_s: float | None = None
    """``expected_effect``: the difference to its baseline its comparison asks about (the
    chapter's +43 ms, say), where the bounds do not model it: the disturbance a run may carry
    is judged against it too (harness.run.runner.effect_scales)."""

    @property
    def link(self) -> LinkSpec:
        """The primary edge (``link``): the whole path of a direct topology."""
        return self.topology.link_spec


@dataclass(frozen=True)
class Form:
    """A shorter form of the file: ``[quick]`` (``--quick``: indicative) or ``[chapter]``
    (``testbed campaign --chapter``: the signed reproduction, enough runs for the levels the
    chapter's rows read)."""

    repetitions: int = 2
    warmup_runs: int = 0
    levels: tuple[str, ...] | None = None
    requests: int | None = None
    fixed: Mapping[str, Any] = field(default_factory=dict)
    """Fixed settings the short form changes (never the factor's own settings), e.g. a
    smaller workload or a shorter path so that the quick campaign stays short."""


CHAPTER_MIN_LEVELS = 1
"""A chapter form may run one level: the chapter's figure is its comparison (a 64 KB window
against 0.756 s), and the file's other levels are questions of the testbed's own."""

FORM_TABLES = ("quick", "chapter")
"""The tables that describe a form of the file, each with :data:`FORM_KEYS`."""


@dataclass(frozen=True)
class ExperimentSpec:
    name: str
    question: str
    factor: str
    factor_settings: tuple[str, ...]
    levels: tuple[Level, ...]
    fixed: Settings
    repetitions: int = 10
    order: str = "alternate"
    counterbalance: bool = True
    seed: int = 1
    warmup_runs: int = 0
    quick: Form = field(default_factory=Form)
    chapter: Form | None = None
    """``[chapter]``: the form ``testbed campaign --chapter`` runs (None: the file has none)."""
    source: str = ""
    """The file as given (kept verbatim in the manifest)."""
    path: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The parsed TOML document (for the quick form's re-parse)."""
    reference_ms: Mapping[str, float] = field(default_factory=dict)
    """``[reference]``: published medians (ms) by level, shown beside ours in the report."""

    def level(self, name: str) -> Level:
        for level in self.levels:
            if level.name == name:
                return level
        raise SpecError("level", f"{name!r} is not a level of {self.name}")

    @property
    def level_names(self) -> tuple[str, ...]:
        return tuple(level.name for level in self.levels)

    @property
    def shares_host(self) -> bool:
        """Whether its runs may measure beside another sharing experiment's on one host:
        every level's workload says so for its settings (tbcore.kinds.WorkloadKind
        .shares_host)."""
        return all(
            kinds.workload(lv.settings.workload).shares_host(lv.settings) for lv in self.levels
        )

    def quick_form(self) -> ExperimentSpec:
        """The short form ``--quick`` runs: fewer repetitions, maybe fewer levels/requests,
        maybe other fixed settings."""
        return self._form("quick")

    def chapter_form(self) -> ExperimentSpec:
        """The form ``testbed campaign --chapter`` runs (``[chapter]``): the levels the
        chapter's rows read, with the runs their verdicts need."""
        if self.chapter is None:
            raise SpecError(
                "chapter",
                f"{self.path or self.name} has no [chapter] table: the chapter's signed form "
                "needs its levels and repetitions",
            )
        return self._form("chapter")

    def in_form(self, form: str) -> ExperimentSpec:
        """The file in ``form``: ``quick``, ``chapter`` or ``full`` (as written)."""
        if form == "full":
            return self
        if form not in FORM_TABLES:
            raise SpecError("form", f"{form!r} is not one of quick, chapter, full")
        return self.chapter_form() if form == "chapter" else self.quick_form()

    def _form(self, key: str) -> ExperimentSpec:
        form: Form = getattr(self, key)
        if form.fixed:
            data = {k: v for k, v in self.raw.items() if k not in FORM_TABLES}
            data["fixed"] = {**data.get("fixed", {}), **form.fixed}
            data[key] = {k: v for k, v in self.raw.get(key, {}).items() if k != "fixed"}
            # the full form's fixed settings the short one makes moot (a workload's own
            # processing, say) are its runs' ignored_settings; its own keys were checked
            base = parse_experiment(
                data,
                source=self.source,
                path=self.path,
                moot=set(data["fixed"]) - set(form.fixed),
            )
            return base._form(key)
        levels = self.levels
        if form.levels is not None:
            levels = tuple(self.level(name) for name in form.levels)
        if form.requests is not None:
            levels = tuple(
                replace(lv, settings=replace(lv.settings, requests=form.requests)) for lv in levels
            )
        names = {lv.name for lv in levels}
        levels = tuple(
            lv if lv.baseline in names else replace(lv, baseline=levels[0].name) for lv in levels
        )
        return replace(
            self,
            levels=levels,
            repetitions=form.repetitions,
            warmup_runs=form.warmup_runs,
        )

    def column_groups(self, remote: bool = False) -> list[str]:
        """The runs.csv column groups its levels fill (tbcore.runrow): what their protocols,
        workloads and topologies register, ``air`` for a shared medium, ``remote`` for a
        server on another host."""
        groups: set[str] = {"remote"} if remote else set()
        for lv in self.levels:
            groups.update(kinds.protocol(lv.settings.protocol).columns)
            groups.update(kinds.workload(lv.settings.workload).columns)
            groups.update(kinds.topology(lv.topology.kind).columns)
            if any(e.spec.air is not None for e in lv.topology.edges):
                groups.add("air")
            if any(e.spec.has_trace for e in lv.topology.edges):
                groups.add("trace")
            for direction in ("up", "down"):  # a trace's position: where that direction has one
                if any(getattr(e.spec, direction).has_trace for e in lv.topology.edges):
                    groups.add(f"trace_{direction}")
            if lv.settings.cross is not None:
                groups.add("cross")
        return sorted(groups)

    def only_levels(self, names: Collection[str]) -> ExperimentSpec:
        """The same experiment with only the levels ``names`` (in the file's order), a level
        whose baseline is left out compared with the first kept (as a form that leaves it
        out): the levels a file gained after a campaign measured it."""
        levels = tuple(lv for lv in self.levels if lv.name in names)
        if not levels:
            raise SpecError(
                "levels", f"none of {', '.join(sorted(names))} is a level of {self.name}"
            )
        kept = {lv.name for lv in levels}
        levels = tuple(
            lv if lv.baseline in kept else replace(lv, baseline=levels[0].name) for lv in levels
        )
        return replace(self, levels=levels)

    def with_repetitions(self, repetitions: int) -> ExperimentSpec:
        """``--reps N``: a command-line override, taken as given (``trace_start = spread``
        over one repetition starts its one run at the offset)."""
        _int_range(1, MAX_REPETITIONS)("repetitions", repetitions)
        return replace(self, repetitions=repetitions)

    def resolved(self) -> dict[str, Any]:
        """Everything as the runs will see it (for the manifest)."""
        return {
            "name": self.name,
            "question": self.question,
            "factor": self.factor,
            "factor_settings": list(self.factor_settings),
            "repetitions": self.repetitions,
            "order": self.order,
            "counterbalance": self.counterbalance,
            "seed": self.seed,
            "warmup_runs": self.warmup_runs,
            "fixed": self.fixed.to_dict(),
            "reference_ms": dict(self.reference_ms),
            "levels": [
                {
                    "name": lv.name,
                    "baseline": lv.baseline,
                    "expected_effect_s": lv.expected_effect_s,
                    "overrides": dict(lv.overrides),
                    "settings": lv.settings.to_dict(),
                    "link_resolved": str(lv.link),
                    "topology": lv.topology.to_dict(),
                }
                for lv in self.levels
            ],
        }


TOP_KEYS = {
    "name",
    "question",
    "repetitions",
    "order",
    "counterbalance",
    "seed",
    "warmup_runs",
    "fixed",
    "factor",
    "quick",
    "chapter",
    "reference",
}
FACTOR_KEYS = {"name", "settings", "levels"}
FORM_KEYS = {"repetitions", "warmup_runs", "levels", "requests", "fixed"}


def parse_experiment(
    data: Mapping[str, Any], source: str = "", path: str = "", moot: Collection[str] = ()
) -> ExperimentSpec:
    """Validate a parsed TOML document. Raises :class:`SpecError` naming the first bad key.
    ``moot``: fixed keys no level need apply (the full form's, in its quick form)."""
    _check_top_keys(data)
    name = data.get("name")
    if not is_short_name(name):
        raise SpecError("name", f"must be a short lowercase name, got {clip(repr(name))}")
    question = data.get("question")
    if not isinstance(question, str) or not question.strip():
        raise SpecError("question", "every experiment states the question it answers")
    repetitions = _int_range(1, MAX_REPETITIONS)("repetitions", data.get("repetitions", 10))
    fixed_table = data.get("fixed", {})
    if not isinstance(fixed_table, dict):
        raise SpecError("fixed", "must be a table of settings")
    fixed, _ = parse_settings(fixed_table, "fixed")
    factor_name, own, raw_levels = _parse_factor(data.get("factor"))
    levels = _parse_levels(raw_levels, own, factor_name, fixed)
    applied = {k: v for k, v in fixed_table.items() if k not in moot}
    refuse_unapplied(applied, [lv.settings for lv in levels], "fixed")
    for level in levels:
        check_repetitions(level.settings, repetitions, "repetitions")
    form_args = (levels, own, factor_name, fixed)
    return ExperimentSpec(
        name=name,
        question=question.strip(),
        factor=factor_name,
        factor_settings=tuple(own),
        levels=tuple(levels),
        fixed=fixed,
        repetitions=repetitions,
        order=_choice(ORDERS)("order", data.get("order", "alternate")),
        counterbalance=_bool("counterbalance", data.get("counterbalance", True)),
        seed=_int_range(0, 2**63 - 1)("seed", data.get("seed", 1)),
        warmup_runs=_int_range(0, 100)("warmup_runs", data.get("warmup_runs", 0)),
        quick=_parse_form("quick", data.get("quick", {}), *form_args, min(2, repetitions)),
        chapter=(
            None
            if "chapter" not in data
            else _parse_form("chapter", data["chapter"], *form_args, repetitions)
        ),
        source=source,
        path=path,
        raw=dict(data),
        reference_ms=_parse_reference(data.get("reference", {}), levels),
    )


MAX_REFERENCE_MS = 86_400_000.0
"""A published median above a day is a typo in the file, not a measurement."""


def _parse_reference(table: Any, levels: list[Level]) -> dict[str, float]:
    """``[reference]``: level name = a published median in ms (finite, positive)."""
    if not isinstance(table, dict):
        raise SpecError("reference", "must be a table of level name = median in ms")
    names = {lv.name for lv in levels}
    out: dict[str, float] = {}
    for key, value in table.items():
        if key not in names:
            raise SpecError(f"reference.{key}", "is not a level of the factor")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(f"reference.{key}", f"must be a number of ms, got {value!r}")
        if not 0 < value <= MAX_REFERENCE_MS:
            raise SpecError(f"reference.{key}", f"must lie in (0, {MAX_REFERENCE_MS:g}] ms")
        out[key] = float(value)
    return out


def _check_top_keys(data: Mapping[str, Any]) -> None:
    for key in data:
        if key not in TOP_KEYS:
            if key in ("factors", "factor2") or (key.startswith("factor") and key != "factor"):
                raise SpecError(key, "one factor per experiment: split the file")
            raise SpecError(key, f"unknown key (known: {', '.join(sorted(TOP_KEYS))})")


def _reject_unknown_keys(table: Mapping[str, Any], known: Collection[str], where: str) -> None:
    """Raise naming ``where.key`` of the first key of ``table`` that is not ``known``."""
    for key in table:
        if key not in known:
            raise SpecError(f"{where}.{key}", f"unknown key (known: {', '.join(sorted(known))})")


def _parse_factor(factor: Any) -> tuple[str, list[str], list[Any]]:
    """The factor's name, the settings its levels may set, and its raw levels."""
    if isinstance(factor, list):
        raise SpecError("factor", "one factor per experiment ([[factor]] gives several)")
    if not isinstance(factor, dict):
        raise SpecError("factor", "missing: an experiment varies exactly one factor")
    _reject_unknown_keys(factor, FACTOR_KEYS, "factor")
    factor_name = factor.get("name")
    if not isinstance(factor_name, str) or not factor_name:
        raise SpecError("factor.name", "must name the factor")
    own = factor.get("settings", [factor_name])
    if (
        not isinstance(own, list)
        or not own
        or not all(isinstance(s, str) for s in own)
        or len(set(own)) != len(own)
    ):
        raise SpecError("factor.settings", "must be a non-empty list of distinct setting names")
    for key in own:
        if key not in KNOBS:
            raise SpecError(f"factor.settings.{key}", "unknown setting")
    raw_levels = factor.get("levels")
    if not isinstance(raw_levels, list) or len(raw_levels) < 2:
        raise SpecError("factor.levels", "needs at least two levels to compare")
    return factor_name, own, raw_levels


def _parse_levels(
    raw_levels: list[Any], own: list[str], factor_name: str, fixed: Settings
) -> list[Level]:
    levels: list[Level] = []
    seen_settings: dict[str, str] = {}
    for index, raw in enumerate(raw_levels):
        level = _parse_level(index, raw, levels, own, factor_name, fixed)
        key = repr(sorted(level.settings.to_dict().items()))
        if key in seen_settings:
            raise SpecError(
                f"factor.levels.{level.name}",
                f"runs exactly like level {seen_settings[key]!r}: nothing varies",
            )
        seen_settings[key] = level.name
        levels.append(level)
    return levels


def _parse_level(
    index: int, raw: Any, earlier: list[Level], own: list[str], factor_name: str, fixed: Settings
) -> Level:
    where = f"factor.levels[{index}]"
    if not isinstance(raw, dict):
        raise SpecError(where, "must be a table with a name and the factor's settings")
    level_name = raw.get("name")
    if not is_short_name(level_name):
        raise SpecError(
            f"{where}.name", f"must be a short lowercase name, got {clip(repr(level_name))}"
        )
    names = {lv.name for lv in earlier}
    if level_name in names:
        raise SpecError(f"{where}.name", f"{level_name!r} given twice")
    where = f"factor.levels.{level_name}"
    table = {k: v for k, v in raw.items() if k not in LEVEL_KEYS}
    for key in table:
        if key not in KNOBS:
            raise SpecError(f"{where}.{key}", "unknown setting")
        if key not in own:
            raise SpecError(
                f"{where}.{key}",
                f"not a setting of factor {factor_name!r} ({', '.join(own)}): "
                "a level may change only its factor, so this would vary two things",
            )
    settings, _ = parse_settings(_merged_edges(table, fixed, where), where, fixed)
    topology = topology_of(settings, where)
    check_consistent(settings, topology, where)
    refuse_without_effect(table, settings, where)
    baseline = raw.get("baseline", earlier[0].name if earlier else level_name)
    if baseline == "none":
        baseline = level_name  # compared with no other level (a second group's first)
    elif "baseline" in raw and baseline == level_name:
        raise SpecError(f"{where}.baseline", "a level cannot be its own baseline")
    if not isinstance(baseline, str) or (baseline != level_name and baseline not in names):
        raise SpecError(f"{where}.baseline", f"{baseline!r} is not an earlier level")
    effect = _expected_effect(raw, baseline == level_name, where)
    return Level(level_name, dict(table), settings, baseline, topology, effect)


LEVEL_KEYS = ("name", "baseline", "expected_effect")
"""A level's keys that are not settings."""


def _expected_effect(raw: Mapping[str, Any], alone: bool, where: str) -> float | None:
    """``expected_effect`` in seconds (None: not given); refused on a level compared with
    nothing (its own baseline), where it would judge nothing."""
    if "expected_effect" not in raw:
        return None
    if alone:
        raise SpecError(
            f"{where}.expected_effect", "the first level is compared with nothing: no effect"
        )
    value = parse_duration_s(f"{where}.expected_effect", raw["expected_effect"])
    if not value > 0:
        raise SpecError(f"{where}.expected_effect", "must be a duration above 0")
    return value


def refuse_without_effect(table: Mapping[str, Any], settings: Settings, where: str) -> None:
    """A key of ``table`` (a level's) that the level's protocol, workload or topology does not
    apply (its knob's scope) is refused, unless it says "none" (cancelling a fixed value)."""
    for key in table:
        item = KNOBS[key]
        reason = item.scope.refusal(settings)
        if reason is not None and getattr(settings, item.attr) is not None:
            raise SpecError(f"{where}.{key}", reason)


def refuse_unapplied(table: Mapping[str, Any], runs: Collection[Settings], where: str) -> None:
    """A key of ``table`` (fixed settings) that none of ``runs`` (the levels' settings)
    applies is refused; one that some apply is recorded by the others as ignored
    (Settings.ignored)."""
    for key in table:
        item = KNOBS[key]
        reasons = [item.scope.refusal(settings) for settings in runs]
        if all(reasons) and any(getattr(s, item.attr) is not None for s in runs):
            raise SpecError(f"{where}.{key}", f"no level applies it: it {reasons[0]}")


def _merged_edges(table: Mapping[str, Any], fixed: Settings, where: str) -> dict[str, Any]:
    """A level's table with each edge it names merged onto the fixed value of that edge
    (netem.linkspec.merge_link: a level's ``link = "down.loss=14%"`` changes one key)."""
    out = dict(table)
    for key in EDGE_KNOBS:
        if key not in table:
            continue
        value = table[key]
        if not isinstance(value, str):
            raise SpecError(f"{where}.{key}", "must be a string of overriding link keys")
        base = getattr(fixed, key)
        if base is not None and value.strip().lower() not in NONE_WORDS:
            out[key] = merge_link(base, value)
    return out


def _parse_form(
    key: str,
    table: Any,
    levels: list[Level],
    own: list[str],
    factor_name: str,
    fixed: Settings,
    default_repetitions: int,
) -> Form:
    """``[quick]`` or ``[chapter]``: each level the form runs must run with its settings."""
    if not isinstance(table, dict):
        raise SpecError(key, "must be a table")
    _reject_unknown_keys(table, FORM_KEYS, key)
    form_levels = table.get("levels")
    if form_levels is not None:
        names = [lv.name for lv in levels]
        fewest = CHAPTER_MIN_LEVELS if key == "chapter" else 2
        if not isinstance(form_levels, list) or len(form_levels) < fewest:
            raise SpecError(f"{key}.levels", f"must list at least {fewest} level name(s)")
        for lv in form_levels:
            if lv not in names:
                raise SpecError(f"{key}.levels", f"{lv!r} is not a level")
        if len(set(form_levels)) != len(form_levels):
            raise SpecError(f"{key}.levels", "names a level twice")
        form_levels = tuple(form_levels)
    form_requests = table.get("requests")
    if form_requests is not None:
        form_requests = _int_range(1, MAX_REQUESTS)(f"{key}.requests", form_requests)
    form_fixed = table.get("fixed", {})
    if not isinstance(form_fixed, dict):
        raise SpecError(f"{key}.fixed", "must be a table of settings")
    for name in form_fixed:
        if name in own:
            raise SpecError(
                f"{key}.fixed.{name}", f"is a setting of factor {factor_name!r}: levels set it"
            )
    if form_requests is not None and "requests" in own:
        raise SpecError(
            f"{key}.requests", f"requests is a setting of factor {factor_name!r}: levels set it"
        )
    form_settings, _ = parse_settings(form_fixed, f"{key}.fixed", fixed)
    runs = []  # the settings of the levels the form runs
    form_repetitions = _int_range(1, MAX_REPETITIONS)(
        f"{key}.repetitions", table.get("repetitions", default_repetitions)
    )
    for level in levels:  # each level over the form's fixed settings must run too
        merged = _merged_edges(level.overrides, form_settings, f"{key}.fixed")
        settings, _ = parse_settings(merged, f"{key}.fixed", form_settings)
        check_consistent(settings, topology_of(settings, f"{key}.fixed"), f"{key}.fixed")
        if form_levels is None or level.name in form_levels:
            runs.append(settings)
            check_repetitions(settings, form_repetitions, f"{key}.repetitions")
    refuse_unapplied(form_fixed, runs, f"{key}.fixed")
    if form_requests is not None:
        refuse_unapplied({"requests": form_requests}, runs, key)
    return Form(
        repetitions=form_repetitions,
        warmup_runs=_int_range(0, 100)(f"{key}.warmup_runs", table.get("warmup_runs", 0)),
        levels=form_levels,
        requests=form_requests,
        fixed=dict(form_fixed),
    )


def loads(text: str, path: str = "") -> ExperimentSpec:
    try:
        data = tomllib.loads(text)
        return parse_experiment(data, source=text, path=path)
    except tomllib.TOMLDecodeError as err:
        raise SpecError(path or "experiment", f"not valid TOML: {err}") from None
    except RecursionError:
        raise SpecError(path or "experiment", "nested too deeply to be an experiment") from None


UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
"""Byte order marks of UTF-16 (TOML files are UTF-8, TOML 1.0 section 1)."""


MAX_SPEC_BYTES = 1 << 20
"""An experiment file above 1 MiB is refused unread (the largest shipped one is ~10 kB)."""


def load(path: str | Path) -> ExperimentSpec:
    path = Path(path)
    try:
        # stat first: a FIFO or a device (/dev/zero) is refused before it is opened, and a
        # read is bounded (one byte past the limit tells a file that grew under us)
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise SpecError("experiment", f"{path}: not a regular file")
        if info.st_size > MAX_SPEC_BYTES:
            raise SpecError("experiment", f"{path}: {info.st_size} bytes, above {MAX_SPEC_BYTES}")
        with path.open("rb") as handle:
            raw = handle.read(MAX_SPEC_BYTES + 1)
    except OSError as err:
        raise SpecError("experiment", f"{path}: {err.strerror}") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError("experiment", f"{path}: above {MAX_SPEC_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        what = "UTF-16 (byte order mark)" if raw.startswith(UTF16_BOMS) else "not UTF-8"
        raise SpecError(
            "experiment", f"{path}: {what} at byte {err.start}; TOML files are UTF-8"
        ) from None
    return loads(text, str(path))

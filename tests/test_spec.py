"""Experiment files: what is accepted, and every way of being refused with one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support_inputs import experiment_text

from harness.spec.experiment import load, loads, parse_experiment
from netem.linkspec import merge_link
from tbcore.errors import SpecError
from tbcore.settings import KNOBS, Settings

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"

GOOD = experiment_text("initcwnd")


H3_GOOD = (
    GOOD.replace('protocol = "h2"', 'protocol = "h3"')
    .replace('settings = ["initcwnd"]', 'settings = ["requests"]')
    .replace("initcwnd = 10", "requests = 1")
    .replace("initcwnd = 40", "requests = 2")
)
"""GOOD over HTTP/3 (its factor the requests: the initial window is TCP's)."""


def test_good_file_parses_into_typed_settings() -> None:
    spec = loads(GOOD)
    assert spec.name == "initcwnd"
    assert spec.level_names == ("iw10", "iw40")
    assert spec.levels[1].settings.initcwnd == 40
    assert spec.levels[0].settings.processing_audio_s == pytest.approx(0.030)
    assert spec.levels[0].link.rtt_s == pytest.approx(0.2)
    assert spec.levels[1].baseline == "iw10"
    assert spec.fixed.initcwnd is None
    assert spec.quick_form().repetitions == 1
    assert spec.quick_form().warmup_runs == 0
    resolved = spec.resolved()
    assert resolved["levels"][1]["settings"]["initcwnd"] == 40


def _refused(text: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        loads(text)
    assert "\n" not in str(info.value)
    return info.value


def test_unknown_top_key_is_named() -> None:
    err = _refused("colour = 'red'\n" + GOOD)
    assert err.field == "colour"
    assert _refused(GOOD + "\ncolour = 'red'\n").field == "quick.colour"


def test_unknown_setting_in_fixed_is_named() -> None:
    err = _refused(GOOD.replace('workload = "asr"', 'workload = "asr"\nwindoww = 3'))
    assert err.field == "fixed.windoww"


def test_level_setting_outside_its_factor_varies_two_things() -> None:
    text = GOOD.replace(
        '{ name = "iw40", initcwnd = 40 }', '{ name = "iw40", initcwnd = 40, cc = "bbr" }'
    )
    err = _refused(text)
    assert err.field == "factor.levels.iw40.cc"
    assert "two things" in err.reason


def test_second_factor_is_refused() -> None:
    err = _refused(GOOD + "\n[factor2]\nname = 'cc'\n")
    assert err.field == "factor2"
    text = GOOD.replace("[factor]", "[[factor]]").replace(
        "[quick]", "[[factor]]\nname='x'\n[quick]"
    )
    assert _refused(text).field == "factor"


def test_a_list_in_fixed_is_a_second_factor() -> None:
    err = _refused(GOOD.replace('protocol = "h2"', 'protocol = ["h2", "h3"]'))
    assert err.field == "fixed.protocol"
    assert "factor" in err.reason


def test_impossible_values_are_named() -> None:
    assert _refused(GOOD.replace("initcwnd = 40", "initcwnd = 0")).field == (
        "factor.levels.iw40.initcwnd"
    )
    assert _refused(GOOD.replace('"rtt=200ms,rate=333mbit"', '"rtt=-2ms"')).field.startswith(
        "fixed.link"
    )
    assert _refused(GOOD.replace("repetitions = 4", "repetitions = 0")).field == "repetitions"
    assert _refused(GOOD.replace('"30ms"', '"30"')).field == "fixed.processing_audio"
    assert _refused(GOOD.replace('protocol = "h2"', 'protocol = "h4"')).field == "fixed.protocol"


def test_zero_rtt_needs_quic_and_a_warm_up_request() -> None:
    text = GOOD.replace('settings = ["initcwnd"]', 'settings = ["connection"]').replace(
        'levels = [ { name = "iw10", initcwnd = 10 }, { name = "iw40", initcwnd = 40 } ]',
        'levels = [ { name = "new", connection = "new" }, { name = "zero", connection = "0rtt" } ]',
    )
    err = _refused(text)
    assert err.field == "factor.levels.zero.connection"


def test_levels_that_do_not_differ_are_refused() -> None:
    err = _refused(GOOD.replace("initcwnd = 40", "initcwnd = 10"))
    assert "nothing varies" in err.reason


def test_one_level_is_not_an_experiment() -> None:
    text = GOOD.replace(', { name = "iw40", initcwnd = 40 }', "")
    assert _refused(text).field == "factor.levels"


def test_missing_question_is_refused() -> None:
    text = GOOD.replace(
        'question = "Does a larger initial window shorten a new connection\'s request?"', ""
    )
    assert _refused(text).field == "question"


def test_bad_toml_is_one_line() -> None:
    err = _refused("name = ")
    assert "TOML" in err.reason


def test_quick_levels_must_exist_and_baselines_follow() -> None:
    assert _refused(GOOD.replace("repetitions = 1\n", "levels = ['iw10', 'nope']\n")).field == (
        "quick.levels"
    )


def test_level_link_overrides_merge_onto_the_fixed_link() -> None:
    text = GOOD.replace('settings = ["initcwnd"]', 'settings = ["link"]').replace(
        'levels = [ { name = "iw10", initcwnd = 10 }, { name = "iw40", initcwnd = 40 } ]',
        'levels = [ { name = "clean", link = "loss=0" }, '
        '{ name = "lossy", link = "down.loss=14%" } ]',
    )
    spec = loads(text)
    lossy = spec.level("lossy").link
    assert lossy.down.loss == pytest.approx(0.14)
    assert lossy.up.loss == 0.0
    assert lossy.rtt_s == pytest.approx(0.2)
    assert lossy.down.rate_bps == pytest.approx(333e6)


def test_merge_link_replaces_rtt_and_per_direction_keys() -> None:
    assert merge_link("rtt=200ms,rate=333mbit", "rate=20mbit") == "rtt=200ms,rate=20mbit"
    merged = merge_link("rtt=200ms,rate=333mbit", "up.rate=20mbit")
    assert "down.rate=333mbit" in merged and "up.rate=20mbit" in merged
    assert merge_link("dc-longhaul", "down.loss=0") == "rtt=200ms,rate=333mbit,down.loss=0"


def test_baseline_must_be_an_earlier_level() -> None:
    text = GOOD.replace(
        '{ name = "iw40", initcwnd = 40 }', '{ name = "iw40", initcwnd = 40, baseline = "iw99" }'
    )
    assert _refused(text).field == "factor.levels.iw40.baseline"


def test_parse_experiment_takes_a_mapping() -> None:
    with pytest.raises(SpecError) as info:
        parse_experiment({"name": "x", "question": "q?"})
    assert info.value.field == "factor"


def test_every_shipped_experiment_loads_and_has_a_quick_form() -> None:
    files = sorted(EXPERIMENTS.glob("*.toml"))
    names = {f.stem for f in files}
    assert {"connection", "window", "initcwnd", "congestion", "ack", "pacing", "loss"} <= names
    for path in files:
        spec = load(path)
        assert spec.name == path.stem
        quick = spec.quick_form()
        assert len(quick.levels) >= 2
        assert quick.repetitions <= spec.repetitions


def test_quic_pacing_takes_cwnd_off_or_a_rate() -> None:
    def pacing(value: str) -> str | float:
        text = H3_GOOD.replace('processing_audio = "30ms"', f'quic_pacing = "{value}"')
        return loads(text).levels[0].settings.quic_pacing

    assert pacing("off") == "off"
    assert pacing("333mbit") == 333e6
    assert loads(H3_GOOD).levels[0].settings.quic_pacing == "cwnd"
    refused = _refused(H3_GOOD.replace('processing_audio = "30ms"', 'quic_pacing = "fast"'))
    assert refused.field == "fixed.quic_pacing"


def test_ack_knobs_route_quickack_and_quic_ack_delay() -> None:
    def settings(line: str) -> Settings:
        return loads(GOOD.replace('processing_audio = "30ms"', line)).levels[0].settings

    assert settings("route_quickack = true").route_quickack is True
    h3 = loads(H3_GOOD.replace('processing_audio = "30ms"', 'quic_ack_delay = "5ms"'))
    assert h3.levels[0].settings.quic_ack_delay_s == 0.005
    assert loads(GOOD).levels[0].settings.quic_ack_delay_s is None
    refused = _refused(GOOD.replace('processing_audio = "30ms"', "route_quickack = 1"))
    assert refused.field == "fixed.route_quickack"
    refused = _refused(H3_GOOD.replace('processing_audio = "30ms"', 'quic_ack_delay = "5"'))
    assert refused.field == "fixed.quic_ack_delay"


def test_merge_link_keeps_the_medium_keys_whole() -> None:
    base = "rtt=10ms,air=54mbit/6mbit,air.order=alternate,air.queue=100p"
    assert merge_link(base, "air.order=fifo,up.queue=50p") == (
        "rtt=10ms,air=54mbit/6mbit,air.queue=100p,air.order=fifo,up.queue=50p"
    )
    assert merge_link("air=54mbit/6mbit,air.seed=2", "seed=4") == (
        "air=54mbit/6mbit,air.seed=2,seed=4"
    )


def test_stream_settings_parse_and_are_checked() -> None:
    text = GOOD.replace('workload = "asr"', 'workload = "multi"\nstreams = "result,tts"')
    text = text.replace('processing_audio = "30ms"', 'capture = "full"\nsend_policy = "fifo"')
    spec = loads(text)
    assert spec.fixed.stream_list == ("result", "tts")
    assert spec.fixed.capture == "full" and spec.fixed.send_policy == "fifo"
    assert loads(GOOD.replace('processing_audio = "30ms"', "capture = false")).fixed.capture == (
        "off"
    )
    assert _refused(text.replace('"result,tts"', '"result,video"')).field == "fixed.streams"
    assert _refused(text.replace('"full"', '"payload"')).field == "fixed.capture"
    assert _refused(text.replace('"fifo"', '"lifo"')).field == "fixed.send_policy"
    no_streams = GOOD.replace('workload = "asr"', 'workload = "multi"')
    assert _refused(no_streams).field.endswith("streams")
    cancel = GOOD.replace('workload = "asr"', 'workload = "stream"\nchunks = 10\ncancel_after = 10')
    assert _refused(cancel).field.endswith("cancel_after")


@pytest.mark.parametrize("name", ["hol", "priority", "playback", "tiles", "overhead", "cancel"])
def test_stream_experiment_files_parse_with_quick_forms(name: str) -> None:
    spec = load(EXPERIMENTS / f"{name}.toml")
    assert spec.name == name
    assert spec.quick_form().levels


# --- every setting takes effect or is refused ------------------------------------------------

PROTOCOLS = """
name = "p"
question = "q?"
[fixed]
link = "rtt=200ms,rate=333mbit"
workload = "asr"
{fixed}
[factor]
name = "protocol"
settings = ["protocol", "cc", "quic_cc", "requests"]
levels = [ {{ name = "h2", protocol = "h2" {h2} }}, {{ name = "h3", protocol = "h3" {h3} }} ]
[quick]
repetitions = 1
{quick}
"""


def _protocols(fixed: str = "", h2: str = "", h3: str = "", quick: str = "") -> str:
    return PROTOCOLS.format(fixed=fixed, h2=h2, h3=h3, quick=quick)


def test_a_level_setting_a_knob_its_protocol_does_not_apply_is_refused() -> None:
    refused = _refused(_protocols(h3=', quic_cc = "reno"', h2=', quic_cc = "cubic"'))
    assert refused.field == "factor.levels.h2.quic_cc"
    assert refused.reason.startswith("takes effect on protocol h3")
    # the default named explicitly is still a request for an effect it would not have
    assert _refused(_protocols(h2=', quic_cc = "reno"')).field == "factor.levels.h2.quic_cc"


def test_cc_names_the_control_of_either_stack() -> None:
    """Issue 25: one cc for both stacks; quic_cc only overrides it for QUIC."""
    spec = loads(_protocols(fixed='cc = "bbr"'))
    assert spec.level("h2").settings.cc == "bbr"
    assert spec.level("h3").settings.quic_control == "bbr"
    assert spec.level("h3").settings.ignored() == []
    override = loads(_protocols(fixed='cc = "bbr"', h3=', quic_cc = "reno"'))
    assert override.level("h3").settings.quic_control == "reno"


def test_a_fixed_knob_no_level_applies_is_refused() -> None:
    text = _protocols(fixed='fec_redundancy = "10%"')
    refused = _refused(text)
    assert refused.field == "fixed.fec_redundancy"
    assert refused.reason.startswith("no level applies it: it takes effect on protocol fec")
    assert _refused(_protocols(fixed="agent_rounds = 3")).field == "fixed.agent_rounds"


def test_a_fixed_knob_some_levels_apply_is_ignored_by_the_others() -> None:
    spec = loads(_protocols(fixed='h2_window = "32mb"\nwindow_clamp = "64kb"'))
    ignored = {lv.name: lv.settings.ignored() for lv in spec.levels}
    assert ignored == {"h2": [], "h3": ["window_clamp", "h2_window"]}
    assert spec.level("h2").settings.h2_window_bytes == 32_000_000


def test_a_level_may_cancel_a_fixed_knob_with_none() -> None:
    text = _protocols(fixed='window_clamp = "64kb"', h3=', window_clamp = "none"')
    spec = loads(text.replace('settings = ["protocol",', 'settings = ["window_clamp", "protocol",'))
    assert spec.level("h3").settings.ignored() == []


def test_quick_settings_must_take_effect_on_the_quick_levels() -> None:
    text = _protocols(quick='fixed = { quic_ack_delay = "5ms" }')
    assert loads(text).quick_form().level("h3").settings.quic_ack_delay_s == 0.005
    only_h2 = GOOD.replace("[quick]", '[quick]\nfixed = { quic_pacing = "off" }')
    assert _refused(only_h2).field == "quick.fixed.quic_pacing"


def test_quick_requests_over_a_factor_of_requests_or_no_requests_is_refused() -> None:
    text = _protocols(h2=", requests = 2", h3=", requests = 3", quick="requests = 1")
    assert _refused(text).field == "quick.requests"
    agent = GOOD.replace('workload = "asr"', 'workload = "agent"').replace(
        'processing_audio = "30ms"', ""
    )
    assert _refused(agent.replace("[quick]", "[quick]\nrequests = 2")).field == "quick.requests"


def test_the_quick_form_may_make_a_full_form_setting_moot() -> None:
    text = GOOD.replace('workload = "asr"', 'workload = "retouch"').replace(
        'processing_audio = "30ms"', 'processing_image = "1s"'
    )
    quick = loads(text.replace("[quick]", '[quick]\nfixed = { workload = "asr" }')).quick_form()
    assert quick.levels[0].settings.ignored() == ["processing_image"]


@pytest.mark.parametrize("name", ["..", ".", ".hidden", "-x", "_x", "a" * 65])
def test_a_name_that_is_not_a_plain_directory_name_is_refused(name: str) -> None:
    """An experiment's name becomes OUTPUT/NAME/: ``..`` would put results beside OUTPUT."""
    err = _refused(GOOD.replace('name = "initcwnd"', f'name = "{name}"', 1))
    assert err.field == "name" and "short lowercase name" in err.reason
    level = GOOD.replace('{ name = "iw10"', f'{{ name = "{name}"', 1)
    assert _refused(level).field == "factor.levels[0].name"


# --- experiment files generated across the settings registry (issue 37) --------------------


def _written(knob: Any, value: Any) -> Any:
    """A typed value in the form an experiment file writes it."""
    if value is None:
        return "none"
    if knob.kind == "duration":
        return f"{value * 1e6:.12g}us"
    if knob.kind == "rate":
        return f"{value:.15g}bit"
    if knob.kind in ("choice", "text", "pacing", "redundancy"):
        return str(value)
    return value


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value))


def _values(knob: Any) -> list[Any]:
    """The default and, for a choice or a switch, another value it may take."""
    values = [knob.default]
    if knob.kind == "bool":
        values.append(not knob.default)
    elif knob.kind == "choice":
        values += [c for c in knob.choices if c != knob.default][:1]
    return values


def test_the_written_form_reads_back_as_the_default() -> None:
    """The generator below writes what a user would: its form parses to the same value."""
    for key, knob in KNOBS.items():
        if (knob.default is None and not knob.optional) or knob.default == "":
            continue  # no written form: the knob is simply not given
        assert knob.parse(key, _written(knob, knob.default)) == knob.default, key


def _generated(key: str, value: Any, placement: str) -> str:
    """A file with ``key = value`` in [fixed] or in the second level, and the topology as
    the factor (each shape's edges in [fixed]: a level without one lists it as ignored)."""
    line = f"{key} = {_toml(value)}"
    fixed = line if placement == "fixed" else ""
    extra = f", {key} = {_toml(value)}" if placement == "level" else ""
    factor_key = f", {json.dumps(key)}" if placement == "level" else ""
    return f"""
name = "generated"
question = "Does any sensible file load?"
repetitions = 1
[fixed]
link = "rtt=40ms,rate=20mbit"
near_link = "rtt=2ms,rate=1000mbit"
link_b = "rtt=60ms,rate=10mbit"
workload = "upload"
{fixed}
[factor]
name = "topology"
settings = ["topology", "workload"{factor_key}]
levels = [ {{ name = "direct", topology = "direct", workload = "asr" }},
           {{ name = "relay", topology = "relay", workload = "asr"{extra} }},
           {{ name = "dual", topology = "dual" }} ]
"""


@pytest.mark.parametrize("placement", ["fixed", "level"])
@pytest.mark.parametrize("key", sorted(KNOBS))
def test_any_knob_anywhere_is_applied_ignored_or_refused_in_one_line(
    key: str, placement: str
) -> None:
    """Every knob of the registry, at its default and another value, in [fixed] or in a
    level, with the topology as the factor: the file loads and each level either has the
    value in force or lists the knob among its ignored settings, or it is refused in one
    line naming a field; never a traceback."""
    if key in ("topology", "workload", "link", "near_link", "link_b"):
        pytest.skip("the generated file's own axes")
    knob = KNOBS[key]
    for value in _values(knob):
        if (value is None and not knob.optional) or value == "":
            continue
        text = _generated(key, _written(knob, value), placement)
        try:
            spec = loads(text)
        except SpecError as err:
            assert "\n" not in str(err) and err.field, (key, str(err))
            continue
        for level in spec.levels:
            if placement == "level" and level.name != "relay":
                continue
            applied = getattr(level.settings, knob.attr) == value
            assert applied or key in level.settings.ignored(), (key, value, level.name)


def _loads_or_none(text: str) -> Any:
    try:
        return loads(text)
    except SpecError:
        return None


def test_most_generated_files_load() -> None:
    """The generator is not refused wholesale (which would make the test above hollow):
    most knobs at their defaults in [fixed] load beside the topology factor (42 of 62 when
    written; the others take effect on workloads or protocols no level runs, agent_* or
    fec_*, and a [fixed] knob no level applies is refused, as it should be)."""
    keys = [k for k in KNOBS if k not in ("topology", "workload", "link", "near_link", "link_b")]
    loaded = [
        k
        for k in keys
        if KNOBS[k].default != ""
        and (KNOBS[k].default is not None or KNOBS[k].optional)
        and _loads_or_none(_generated(k, _written(KNOBS[k], KNOBS[k].default), "fixed"))
    ]
    assert len(loaded) >= 0.6 * len(keys), sorted(set(keys) - set(loaded))


def _with_chapter(table: str) -> str:
    return GOOD + "\n[chapter]\n" + table


def test_the_chapter_form_is_its_own_levels_and_runs() -> None:
    spec = loads(_with_chapter('repetitions = 6\nlevels = ["iw40"]\n'))
    form = spec.chapter_form()
    assert form.level_names == ("iw40",) and form.repetitions == 6
    assert form.levels[0].baseline == "iw40"  # its baseline did not run: itself
    assert spec.in_form("chapter") == form
    assert spec.in_form("quick") == spec.quick_form()
    assert spec.in_form("full") is spec
    both = loads(_with_chapter('levels = ["iw10", "iw40"]\n[chapter.fixed]\nworkload = "tts"\n'))
    full = both.chapter_form()
    assert full.repetitions == both.repetitions  # no count given: the file's own
    assert {lv.settings.workload for lv in full.levels} == {"tts"}
    assert {lv.settings.workload for lv in both.quick_form().levels} == {"asr"}


def test_a_bad_chapter_form_is_one_line_naming_its_field() -> None:
    assert _refused(_with_chapter('levels = ["iw99"]\n')).field == "chapter.levels"
    assert _refused(_with_chapter('levels = ["iw10", "iw10"]\n')).field == "chapter.levels"
    assert _refused(_with_chapter("repetitions = 0\n")).field == "chapter.repetitions"
    assert _refused(_with_chapter("colour = 1\n")).field == "chapter.colour"
    assert _refused(_with_chapter("[chapter.fixed]\ninitcwnd = 20\n")).field == (
        "chapter.fixed.initcwnd"
    )
    assert _refused(_with_chapter("fixed = 3\n")).field == "chapter.fixed"
    # a quick form still compares: one level is refused there
    assert _refused(GOOD + 'levels = ["iw10"]\n').field == "quick.levels"
    with pytest.raises(SpecError) as info:
        loads(GOOD).chapter_form()
    assert info.value.field == "chapter" and "no [chapter] table" in str(info.value)
    with pytest.raises(SpecError) as info:
        loads(GOOD).in_form("signed")
    assert info.value.field == "form"


def test_cleartext_h2_refuses_what_needs_tls_or_is_not_h2() -> None:
    """tls = false: HTTP/2 without TLS has no session to resume, and the knob acts on h2
    alone (an HTTP/3 file that sets it is refused, not run with TLS anyway)."""
    plain = GOOD.replace('protocol = "h2"', 'protocol = "h2"\ntls = false')
    assert loads(plain).levels[0].settings.tls is False
    resumed = plain.replace("tls = false", "tls = false\nresume = true\nwarmup_requests = 1")
    assert _refused(resumed).field.endswith("resume")
    h3 = H3_GOOD.replace('protocol = "h3"', 'protocol = "h3"\ntls = false')
    assert "tls" in _refused(h3).field


def test_a_sample_rate_the_stream_cannot_play_is_refused() -> None:
    text = (
        (EXPERIMENTS / "playback.toml")
        .read_text()
        .replace("chunks = 100", "chunks = 100\nsample_rate = 22050")
    )
    assert _refused(text).field.endswith("sample_rate")


def test_only_levels_keeps_the_files_order_and_repoints_a_left_out_baseline() -> None:
    spec = load(EXPERIMENTS / "agent-deployment.toml")
    sub = spec.only_levels(["near-2.83x-deep-queue", "near-2.83x"])
    assert sub.level_names == ("near-2.83x", "near-2.83x-deep-queue")
    assert sub.level("near-2.83x-deep-queue").baseline == "near-2.83x"  # kept: still its own
    assert sub.level("near-2.83x").baseline == "near-2.83x"  # its "near" left out: the first
    with pytest.raises(SpecError) as info:
        spec.only_levels(["nowhere"])
    assert info.value.field == "levels"


def test_an_expected_effect_is_a_positive_duration_on_a_compared_level() -> None:
    base = (
        'name = "e"\nquestion = "q"\nrepetitions = 1\n[fixed]\nworkload = "asr"\n'
        'link = "rtt=20ms"\n[factor]\nname = "p"\nsettings = ["protocol"]\nlevels = [\n'
    )
    good = loads(
        base + '{ name = "a", protocol = "h2" },\n'
        '{ name = "b", protocol = "h3", expected_effect = "20ms" },\n]\n'
    )
    assert good.level("b").expected_effect_s == pytest.approx(0.020)
    assert good.level("a").expected_effect_s is None
    assert good.resolved()["levels"][1]["expected_effect_s"] == pytest.approx(0.020)
    first = '{ name = "a", protocol = "h2"'
    second = '{ name = "b", protocol = "h3"'
    for levels, why in (
        (f'{first}, expected_effect = "5ms" }},\n{second} }},', "compared with nothing"),
        (f'{first} }},\n{second}, expected_effect = "0s" }},', "above 0"),
        (f'{first} }},\n{second}, expected_effect = "soon" }},', ""),
    ):
        with pytest.raises(SpecError) as info:
            loads(base + levels + "\n]\n")
        assert info.value.field.endswith("expected_effect") and why in info.value.reason


def test_baseline_none_starts_a_question_of_its_own() -> None:
    text = (
        'name = "e"\nquestion = "q"\nrepetitions = 1\n[fixed]\nworkload = "asr"\n'
        'link = "rtt=20ms"\n[factor]\nname = "p"\nsettings = ["protocol", "connection"]\n'
        'levels = [\n{ name = "a", protocol = "h2" },\n{ name = "b", protocol = "h3" },\n'
        '{ name = "c", protocol = "h2", connection = "reused", baseline = "none" },\n'
        '{ name = "d", protocol = "h3", connection = "reused", baseline = "c" },\n]\n'
    )
    spec = loads(text)
    assert [lv.baseline for lv in spec.levels] == ["a", "a", "c", "c"]
    with pytest.raises(SpecError, match="own baseline"):
        loads(text.replace('baseline = "c"', 'baseline = "d"'))

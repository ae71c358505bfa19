"""netem.linkspec: the emulated path, validated on entry; the string form and the presets."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support_inputs import assert_spec_error

from netem.linkspec import (
    ETHERNET_MTU_BYTES,
    MIN_DEFAULT_QUEUE_BYTES,
    PRESETS,
    DirectionSpec,
    GilbertElliott,
    LinkSpec,
    format_link,
    parse_link,
    resolve_link,
)
from tbcore.errors import SpecError

pytestmark = pytest.mark.timeout(60)


# --- the string form --------------------------------------------------------------------


def test_rtt_splits_into_two_one_way_delays() -> None:
    spec = parse_link("rtt=200ms,loss=14%,rate=333mbit")
    assert spec.rtt_s == pytest.approx(0.2)
    for d in (spec.up, spec.down):
        assert d.delay_s == pytest.approx(0.1)
        assert d.loss == pytest.approx(0.14)
        assert d.rate_bps == 333e6
    assert spec.mtu_bytes == ETHERNET_MTU_BYTES


def test_direction_keys_override_both_whatever_the_order() -> None:
    for text in ("down.loss=14%,loss=1%,rtt=200ms", "rtt=200ms,loss=1%,down.loss=14%"):
        spec = parse_link(text)
        assert spec.up.loss == pytest.approx(0.01)
        assert spec.down.loss == pytest.approx(0.14)


def test_per_direction_rates_and_delays() -> None:
    spec = parse_link("up.rate=20mbit,down.rate=100mbit,up.delay=30ms,down.delay=70ms")
    assert (spec.up.rate_bps, spec.down.rate_bps) == (20e6, 100e6)
    assert spec.rtt_s == pytest.approx(0.1)
    # an unprefixed rtt and a prefixed delay: the prefixed delay wins for its direction
    mixed = parse_link("rtt=200ms,up.delay=50ms")
    assert (mixed.up.delay_s, mixed.down.delay_s) == pytest.approx((0.05, 0.1))


def test_every_key_of_the_string_form() -> None:
    spec = parse_link(
        "delay=50ms,jitter=5ms,rate=10mbit,queue=100p,seed=7,mtu=1400,up.queue=64kb,"
        "down.gemodel=1%/30%/100%/0%"
    )
    assert spec.up.delay_s == pytest.approx(0.05) and spec.up.jitter_s == pytest.approx(0.005)
    assert spec.down.queue_packets == 100 and spec.down.queue_bytes is None
    assert spec.up.queue_bytes == 64_000 and spec.up.queue_packets is None
    assert spec.up.seed == spec.down.seed == 7
    assert spec.mtu_bytes == 1400
    assert spec.down.gemodel == GilbertElliott(p=0.01, r=0.3, loss_bad=1.0, loss_good=0.0)
    assert spec.down.loss_model == "gemodel" and spec.up.loss_model == "bernoulli"


def test_gemodel_defaults_follow_netem() -> None:
    # tc-netem(8): with p alone, r = 1 - p, 1-h = 1, 1-k = 0 (the Bernoulli special case)
    g = parse_link("gemodel=5%").up.gemodel
    assert g is not None
    assert (g.p, g.r, g.loss_bad, g.loss_good) == pytest.approx((0.05, 0.95, 1.0, 0.0))
    assert g.mean_loss == pytest.approx(0.05)
    two = parse_link("gemodel=1%/30%").up.gemodel
    assert two is not None and two.r == pytest.approx(0.3)


@pytest.mark.parametrize("text", ["", ",,,,", " , ,"])
def test_an_empty_link_string_is_refused(text: str) -> None:
    """An unshaped link by accident is worse than an error (issue 17)."""
    with pytest.raises(SpecError, match="empty"):
        parse_link(text)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("rtt=２００ms", "rtt"),
        ("rate=1e-30bit", "rate"),
        ("rate=0.5bit", "rate"),
        ("rate=1e30bit", "rate"),
        ("queue=1e30b", "queue"),
        ("queue=2000000p", "queue_packets"),
        ("rtt=1e12s", "rtt"),
        ("rtt=11s", "rtt"),
        ("up.delay=6s,down.delay=5s", "rtt"),
    ],
)
def test_magnitudes_outside_sensible_ranges_are_refused(text: str, field: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_link(text)
    assert field in str(err.value)


def test_the_edges_of_the_ranges_are_accepted() -> None:
    assert parse_link("rate=1kbit").up.rate_bps == 1e3
    assert parse_link("rate=100gbit").up.rate_bps == 100e9
    assert parse_link("rtt=10s").rtt_s == 10.0


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("rtt=200ms,delay=100ms", "rtt", ("not both",)),
        ("rtt=200ms,rtt=100ms", "rtt", ("twice",)),
        ("bandwidth=1mbit", "bandwidth", ("unknown link key",)),
        ("left.loss=1%", "left.loss", ("direction prefix",)),
        ("up.rtt=100ms", "up.rtt", ("one-way",)),
        ("up.mtu=1400", "up.mtu", ("one for both",)),
        ("rtt", "rtt", ("key=value",)),
        ("rtt=", "rtt", ("key=value",)),
        ("=5", "link", ("key=value",)),
        ("up.loss=150%", "up.loss", ("[0, 1)",)),
        ("up.rate=5mbps", "up.rate", ("ambiguous",)),
        ("down.delay=100", "down.delay", ("needs a unit",)),
        ("up.seed=x", "up.seed", ("whole number",)),
        ("up.seed=-1", "up.seed", (">= 0",)),
        ("mtu=big", "mtu", ("whole number",)),
        ("mtu=1000", "mtu_bytes", ("1280",)),
        ("down.jitter=20ms,down.delay=10ms", "down.jitter_s", ("exceeds",)),
        ("down.loss=1%,down.gemodel=1%/30%", "down.loss", ("not both",)),
        ("up.queue=100b", "up.queue_bytes", ("MTU",)),
        ("up.queue=0p", "up.queue", ("packet count",)),
        ("down.gemodel=1%/2%/3%/4%/5%", "down.gemodel", ("p[/r",)),
        ("down.gemodel=10%/0%", "down.gemodel.r", ("absorbing",)),
        ("down.gemodel=10%/150%", "down.gemodel.r", ("must lie in [0, 1",)),
    ],
)
def test_bad_link_string_names_the_key(text: str, field: str, words: tuple[str, ...]) -> None:
    assert_spec_error(lambda: parse_link(text), field, *words)


def test_parse_link_refuses_a_non_string() -> None:
    assert_spec_error(lambda: parse_link(None), "link", "expected a string")  # type: ignore[arg-type]


# --- the dataclasses validate themselves ------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"delay_s": -0.1}, "delay_s"),
        ({"delay_s": math.nan}, "delay_s"),
        ({"delay_s": "100ms"}, "delay_s"),
        ({"jitter_s": -1.0}, "jitter_s"),
        ({"loss": 1.0}, "loss"),
        ({"loss": -0.01}, "loss"),
        ({"rate_bps": 0.0}, "rate_bps"),
        ({"rate_bps": math.inf}, "rate_bps"),
        ({"queue_bytes": 1000}, "queue_bytes"),
        ({"queue_bytes": 3000.0}, "queue_bytes"),
        ({"queue_packets": 0}, "queue_packets"),
        ({"queue_bytes": 3000, "queue_packets": 10}, "queue"),
        ({"seed": -1}, "seed"),
        ({"seed": 1.5}, "seed"),
    ],
)
def test_direction_spec_validates(kwargs: dict, field: str) -> None:
    assert_spec_error(lambda: DirectionSpec(**kwargs), field)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"p": 1.5, "r": 0.5}, "gemodel.p"),
        ({"p": 0.1, "r": -0.5}, "gemodel.r"),
        ({"p": 0.1, "r": 0.5, "loss_bad": 2.0}, "gemodel.loss_bad"),
        ({"p": 0.1, "r": 0.5, "loss_good": "x"}, "gemodel.loss_good"),
        ({"p": 0.1, "r": 0.0}, "gemodel.r"),
    ],
)
def test_gilbert_elliott_validates(kwargs: dict, field: str) -> None:
    assert_spec_error(lambda: GilbertElliott(**kwargs), field)


def test_gilbert_elliott_stationary_loss_and_burst() -> None:
    g = GilbertElliott(p=0.01, r=0.3)
    assert g.mean_loss == pytest.approx(0.01 / 0.31)
    assert g.mean_burst_packets == pytest.approx(1 / 0.3)
    leaky = GilbertElliott(p=0.1, r=0.4, loss_bad=0.5, loss_good=0.01)
    assert leaky.mean_loss == pytest.approx(0.2 * 0.5 + 0.8 * 0.01)
    never_bad = GilbertElliott(p=0.0, r=0.0, loss_good=0.02)
    assert never_bad.mean_loss == pytest.approx(0.02)
    assert DirectionSpec(gemodel=g).mean_loss == pytest.approx(g.mean_loss)
    assert DirectionSpec(loss=0.14).mean_loss == pytest.approx(0.14)


def test_link_spec_validates() -> None:
    assert_spec_error(lambda: LinkSpec(mtu_bytes=1279), "mtu_bytes")
    assert_spec_error(lambda: LinkSpec(mtu_bytes=70000), "mtu_bytes")
    assert_spec_error(lambda: LinkSpec(mtu_bytes=1500.0), "mtu_bytes")  # type: ignore[arg-type]
    assert_spec_error(lambda: LinkSpec(up={"delay_s": 1}), "up")  # type: ignore[arg-type]
    assert_spec_error(lambda: LinkSpec().bdp_bytes("sideways"), "direction")


# --- derived quantities -----------------------------------------------------------------


def test_bdp_and_default_queue_of_the_longhaul_path() -> None:
    spec = resolve_link("dc-longhaul")
    bdp = math.ceil(333e6 / 8 * 0.2)  # 8,325,000 bytes
    assert spec.bdp_bytes("down") == bdp
    assert spec.queue_limit_bytes("down") == bdp
    assert spec.queue_limit_packets("down") == math.ceil(bdp / ETHERNET_MTU_BYTES)


def test_short_paths_get_the_queue_floor_and_unlimited_links_none() -> None:
    short = parse_link("rtt=1ms,rate=10mbit")
    assert short.queue_limit_bytes("up") == MIN_DEFAULT_QUEUE_BYTES
    assert short.queue_limit_packets("up") == 64
    free = parse_link("rtt=1ms")
    assert free.bdp_bytes("up") is None
    assert free.queue_limit_bytes("up") is None and free.queue_limit_packets("up") is None


def test_explicit_queues_in_bytes_and_packets() -> None:
    spec = parse_link("rate=10mbit,up.queue=30p,down.queue=15000b,mtu=1400")
    assert spec.queue_limit_packets("up") == 30
    assert spec.queue_limit_bytes("up") == 30 * 1400
    assert spec.queue_limit_bytes("down") == 15_000
    assert spec.queue_limit_packets("down") == math.ceil(15_000 / 1400)


def test_with_seed_gives_two_distinct_repeatable_seeds() -> None:
    spec = resolve_link("dc-longhaul")
    seeded = spec.with_seed(5)
    assert (seeded.up.seed, seeded.down.seed) == (11, 12)
    assert seeded == spec.with_seed(5)
    assert spec.with_seed(6).up.seed not in (seeded.up.seed, seeded.down.seed)
    assert seeded.down.loss == spec.down.loss  # nothing else changes


# --- dict and string round trips --------------------------------------------------------


def test_dict_round_trip_through_json() -> None:
    spec = parse_link("rtt=200ms,jitter=2ms,rate=333mbit,down.gemodel=1%/30%,up.queue=50p,seed=3")
    assert LinkSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"sideways": {}}, "sideways"),
        ({"up": {"delay": 0.1}}, "up.delay"),
        ({"down": {"loss": 1.5}}, "down.loss"),
        ({"mtu_bytes": 100}, "mtu_bytes"),
        # a bool is an int to Python, never a seed or a count
        ({"up": {"seed": True}}, "up.seed"),
        ({"down": {"queue_packets": True}}, "down.queue_packets"),
    ],
)
def test_from_dict_names_the_key(data: dict, field: str) -> None:
    assert_spec_error(lambda: LinkSpec.from_dict(data), field)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"up": {"gemodel": {"p": 0.1, "x": 1}}}, "up.gemodel.x"),
        ({"up": {"gemodel": {"r": 0.1}}}, "up.gemodel.p"),
        ({"up": {"gemodel": "1%/30%"}}, "up.gemodel"),
        ({"down": {"gemodel": {"p": 2.0, "r": 0.5}}}, "down.gemodel.p"),
        ({"up": 5}, "up"),
    ],
)
def test_from_dict_bad_gemodel_names_the_key(data: dict, field: str) -> None:
    assert_spec_error(lambda: LinkSpec.from_dict(data), field)


delays_us = st.integers(min_value=0, max_value=2_000_000)


@st.composite
def directions(draw: st.DrawFn) -> DirectionSpec:
    delay_s = draw(delays_us) / 1e6
    jitter_s = draw(st.integers(min_value=0, max_value=int(delay_s * 1e6))) / 1e6
    use_ge = draw(st.booleans())
    gemodel = None
    loss = 0.0
    if use_ge:
        gemodel = GilbertElliott(
            p=draw(st.integers(0, 100)) / 1000,
            r=draw(st.integers(1, 1000)) / 1000,
            loss_bad=draw(st.integers(0, 100)) / 100,
            loss_good=draw(st.integers(0, 100)) / 1000,
        )
    else:
        loss = draw(st.integers(0, 999)) / 1000
    rate = draw(st.one_of(st.none(), st.integers(1, 10_000).map(lambda m: m * 1e5)))
    queue_kind = draw(st.sampled_from(["none", "bytes", "packets"]))
    return DirectionSpec(
        delay_s=delay_s,
        jitter_s=jitter_s,
        loss=loss,
        gemodel=gemodel,
        rate_bps=rate,
        queue_bytes=draw(st.integers(1500, 10**8)) if queue_kind == "bytes" else None,
        queue_packets=draw(st.integers(1, 10**5)) if queue_kind == "packets" else None,
        seed=draw(st.integers(0, 2**31)),
    )


def close(a: DirectionSpec, b: DirectionSpec) -> None:
    for name in ("delay_s", "jitter_s", "loss"):
        assert getattr(a, name) == pytest.approx(getattr(b, name), rel=1e-5, abs=1e-12)
    assert (a.rate_bps is None) == (b.rate_bps is None)
    if a.rate_bps is not None:
        assert a.rate_bps == pytest.approx(b.rate_bps, rel=1e-5)
    assert (a.queue_bytes, a.queue_packets, a.seed) == (b.queue_bytes, b.queue_packets, b.seed)
    assert (a.gemodel is None) == (b.gemodel is None)
    if a.gemodel is not None and b.gemodel is not None:
        for name in ("p", "r", "loss_bad", "loss_good"):
            assert getattr(a.gemodel, name) == pytest.approx(getattr(b.gemodel, name), rel=1e-6)


@given(directions(), directions(), st.integers(1280, 9000))
def test_format_then_parse_is_the_same_link(up: DirectionSpec, down: DirectionSpec, mtu: int):
    spec = LinkSpec(up=up, down=down, mtu_bytes=mtu)
    back = parse_link(format_link(spec))
    close(back.up, spec.up)
    close(back.down, spec.down)
    assert back.mtu_bytes == mtu
    assert str(spec) == format_link(spec)


@given(directions(), directions())
def test_dict_round_trip_is_exact(up: DirectionSpec, down: DirectionSpec) -> None:
    spec = LinkSpec(up=up, down=down)
    assert LinkSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


# --- presets ----------------------------------------------------------------------------


def test_presets_parse_and_describe_the_measured_paths() -> None:
    for name, text in PRESETS.items():
        assert resolve_link(name) == parse_link(text), name
    longhaul = resolve_link("dc-longhaul")
    assert longhaul.rtt_s == pytest.approx(0.2)
    assert longhaul.up.loss == 0.0 and longhaul.down.loss == pytest.approx(0.14)
    assert longhaul.up.rate_bps == longhaul.down.rate_bps == 333e6
    assert resolve_link("dc-longhaul-clean").down.loss == 0.0
    access = resolve_link("wan-access")
    assert access.up.loss == access.down.loss == pytest.approx(0.42)
    assert access.down.rate_bps == 14.5e6


def test_preset_overrides_replace_keys() -> None:
    spec = resolve_link("dc-longhaul,rate=100mbit,down.loss=2%")
    assert spec.up.rate_bps == spec.down.rate_bps == 100e6
    assert spec.down.loss == pytest.approx(0.02)
    assert spec.rtt_s == pytest.approx(0.2)
    assert resolve_link("dc-longhaul,rtt=100ms").rtt_s == pytest.approx(0.1)
    both = resolve_link("dc-longhaul,delay=10ms")
    assert (both.up.delay_s, both.down.delay_s) == pytest.approx((0.01, 0.01))
    assert resolve_link("dc-longhaul,") == resolve_link("dc-longhaul")
    assert resolve_link(" dc-longhaul ") == resolve_link("dc-longhaul")
    # not a preset: an ordinary link string
    assert resolve_link("rtt=10ms") == parse_link("rtt=10ms")


def test_overriding_one_directions_delay_keeps_the_other() -> None:
    # fixed in the skeleton: this used to drop the preset's rtt and leave down.delay at 0
    spec = resolve_link("dc-longhaul,up.delay=50ms")
    assert spec.up.delay_s == pytest.approx(0.05)
    assert spec.down.delay_s == pytest.approx(0.1)
    assert spec.down.loss == pytest.approx(0.14) and spec.up.rate_bps == 333e6


def test_an_unprefixed_override_replaces_the_presets_direction_keys() -> None:
    spec = resolve_link("dc-longhaul,loss=1%")
    assert spec.up.loss == spec.down.loss == pytest.approx(0.01)


def test_preset_override_errors_name_the_key() -> None:
    assert_spec_error(lambda: resolve_link("dc-longhaul,loss=200%"), "up.loss")
    assert_spec_error(lambda: resolve_link("dc-longhaul,colour=blue"), "colour")


# --- traces -----------------------------------------------------------------------------


@pytest.fixture
def traces(tmp_path: Path) -> dict[str, Path]:
    files = {"cap": "1\n2\n3\n4\n", "other": "0\n0\n5\n", "delay": "0 10\n10 30\n"}
    paths = {}
    for name, text in files.items():
        paths[name] = tmp_path / name
        paths[name].write_text(text)
    return paths


def test_rate_trace_on_both_directions_with_an_offset(traces: dict[str, Path]) -> None:
    spec = parse_link(f"rtt=40ms,rate=trace:{traces['cap']},trace_offset=12.5s")
    for d in (spec.up, spec.down):
        assert d.rate_bps is None and d.rate_trace is not None
        assert d.rate_trace.path == str(traces["cap"])
        assert d.trace_offset_s == 12.5
        assert d.mean_rate_bps == 12e6
    # the default queue: one BDP at the trace's mean rate (here the 64-MTU floor)
    assert spec.queue_limit_bytes("up") == MIN_DEFAULT_QUEUE_BYTES


def test_per_direction_traces_offsets_and_interpolation(traces: dict[str, Path]) -> None:
    spec = parse_link(
        f"rtt=40ms,up.rate=trace:{traces['cap']},down.rate=trace:{traces['other']},"
        f"down.trace_offset=1s,up.delay=trace:{traces['delay']},delay_interp=linear"
    )
    assert spec.up.rate_trace is not None and spec.down.rate_trace is not None
    assert spec.down.rate_trace.capacity.period_ms == 5
    assert (spec.up.trace_offset_s, spec.down.trace_offset_s) == (0.0, 1.0)
    assert spec.up.delay_trace is not None and spec.up.delay_s == 0.0
    assert spec.up.delay_interp == "linear" and spec.down.delay_interp == "step"
    assert spec.down.delay_s == 0.02  # rtt's half, the up delay being the trace
    assert spec.rtt_s == pytest.approx(0.010 + 0.020)  # the trace's least delay
    assert spec.up.mean_delay_s == pytest.approx(0.020)


def test_an_unprefixed_offset_applies_to_the_traced_direction_only(
    traces: dict[str, Path],
) -> None:
    spec = parse_link(f"rate=10mbit,up.rate=trace:{traces['cap']},trace_offset=2s")
    assert spec.up.trace_offset_s == 2.0 and spec.down.trace_offset_s == 0.0


def test_traced_specs_round_trip_through_the_string_and_the_dict(
    traces: dict[str, Path],
) -> None:
    spec = parse_link(
        f"up.rate=trace:{traces['cap']},trace_offset=250ms,down.delay=trace:{traces['delay']},"
        "down.delay_interp=linear,up.delay=5ms"
    )
    assert parse_link(format_link(spec)) == spec
    assert LinkSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert spec.to_dict()["up"]["rate_trace"]["sha256"] == spec.up.rate_trace.sha256  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("up.rate=trace:{missing}", "up.rate", ("trace", "cap-no", "cannot read")),
        ("rate=trace:{delay}", "up.rate", ("line 1", "two columns")),
        ("delay=trace:{cap}", "up.delay", ("line 1", "one column")),
        ("rate=trace:", "up.rate", ("needs a file",)),
        ("trace_offset=1s,rate=1mbit", "trace_offset", ("no effect",)),
        ("up.trace_offset=1s,down.rate=trace:{cap}", "up.trace_offset", ("no effect",)),
        ("delay_interp=linear,rate=trace:{cap}", "delay_interp", ("no effect",)),
        ("delay=trace:{delay},delay_interp=cubic", "up.delay_interp", ("step or linear",)),
        ("rate=trace:{cap},trace_offset=-1s", "up.trace_offset", ("negative",)),
        ("rate=trace:{cap},trace_offset=2", "up.trace_offset", ("unit",)),
        ("rtt=trace:{delay}", "rtt", ("delay=trace",)),
        ("delay=trace:{delay},jitter=1ms", "up.delay", ("jitter",)),
    ],
)
def test_bad_trace_keys_name_the_key(
    traces: dict[str, Path], text: str, field: str, words: tuple[str, ...]
) -> None:
    names = {k: str(v) for k, v in traces.items()} | {"missing": str(traces["cap"]) + "-no"}
    with pytest.raises(SpecError) as err:
        parse_link(text.format(**names))
    assert err.value.field == field
    for word in words:
        assert word in str(err.value)


def test_direction_spec_refuses_a_trace_beside_the_setting_it_replaces(
    traces: dict[str, Path],
) -> None:
    cap = parse_link(f"rate=trace:{traces['cap']}").up.rate_trace
    delay = parse_link(f"delay=trace:{traces['delay']}").up.delay_trace
    assert_spec_error(lambda: DirectionSpec(rate_bps=1e6, rate_trace=cap), "rate")
    assert_spec_error(lambda: DirectionSpec(delay_s=0.01, delay_trace=delay), "delay")
    assert_spec_error(lambda: DirectionSpec(rate_trace=delay), "rate_trace")
    assert_spec_error(lambda: DirectionSpec(trace_offset_s=1.0), "trace_offset")

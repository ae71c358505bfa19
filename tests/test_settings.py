"""The settings model: one definition per knob, read by files, flags and the document."""

from __future__ import annotations

import argparse
import json
import os

import pytest

from tbcore import kinds
from tbcore.errors import SpecError
from tbcore.settings import KNOBS, Settings, add_flags, settings_from_flags


def test_every_knob_has_a_default_that_passes_its_own_check() -> None:
    settings = Settings()
    for knob in KNOBS.values():
        assert getattr(settings, knob.attr) == knob.default
        assert knob.attr.endswith(("_bytes", "_bps", "_s", "_w", "_hz")) or knob.unit in (
            "",
            "count",
            "segments",
            "bit/s",
        )


def test_written_forms_become_typed_values() -> None:
    table = {"window_clamp": "64kb", "max_pacing_rate": "333mbit", "timeout": "2s",
             "initcwnd": "none", "quic_pacing": "off", "protocol": "h3"}  # fmt: skip
    settings = Settings.from_table(table, "fixed")
    assert settings.window_clamp_bytes == 64_000 and settings.max_pacing_rate_bps == 333e6
    assert settings.timeout_s == 2.0 and settings.initcwnd is None
    assert settings.quic_pacing == "off" and settings.protocol == "h3"


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"initcwnd": 0}, "fixed.initcwnd"),
        ({"initcwnd": True}, "fixed.initcwnd"),
        ({"h2_window": "1kb"}, "fixed.h2_window"),
        ({"protocol": "h4"}, "fixed.protocol"),
        ({"nosuch": 1}, "fixed.nosuch"),
        ({"cc": ["reno", "bbr"]}, "fixed.cc"),
        ({"connection": "0rtt"}, "fixed.connection"),  # 0rtt needs h3
    ],
)
def test_bad_values_name_their_key(table: dict, field: str) -> None:
    with pytest.raises(SpecError) as info:
        Settings.from_table(table, "fixed")
    assert info.value.field == field and "\n" not in str(info.value)


def test_the_document_round_trips_and_refuses_strangers() -> None:
    settings = Settings(protocol="h3", quic_pacing=1e8, sysctls={"net.ipv4.tcp_sack": "0"})
    assert Settings.load(settings.to_json()) == settings
    doc = settings.document()
    with pytest.raises(SpecError, match=r"settings.colour: unknown setting"):
        Settings.from_document({**doc, "settings": {**doc["settings"], "colour": 1}})
    missing = {k: v for k, v in doc["settings"].items() if k != "cc"}
    with pytest.raises(SpecError, match=r"settings.cc: missing"):
        Settings.from_document({**doc, "settings": missing})
    with pytest.raises(SpecError, match="schema_version"):
        Settings.from_document({**doc, "schema_version": 99})
    with pytest.raises(SpecError, match=r"settings.requests"):
        Settings.load(json.dumps({**doc, "settings": {**doc["settings"], "requests": 0}}))


def test_pace_at_path_rate_resolves_per_end() -> None:
    settings = Settings(pace_at_path_rate=True)
    end = settings.for_end(20e6)
    assert end.max_pacing_rate_bps == 20e6 and not end.pace_at_path_rate
    assert Settings().for_end(20e6).max_pacing_rate_bps is None


def test_flags_of_an_end_are_its_knobs_and_override_the_document(tmp_path) -> None:
    parser = argparse.ArgumentParser()
    add_flags(parser, "server")
    flags = {a.option_strings[0] for a in parser._actions if a.option_strings}
    assert {"--cc", "--processing-audio", "--no-quic-batching"} <= flags
    assert "--requests" not in flags  # the client's knob
    document = tmp_path / "s.json"
    document.write_text(Settings(cc="bbr", sndbuf_bytes=65536).to_json())
    args = parser.parse_args(["--settings", str(document), "--cc", "reno"])
    assert settings_from_flags(args) == Settings(cc="reno", sndbuf_bytes=65536)
    with pytest.raises(SpecError, match=r"^window-clamp: "):
        settings_from_flags(parser.parse_args(["--window-clamp", "-5"]))


def test_a_registered_protocol_becomes_a_valid_choice() -> None:
    kind = kinds.ProtocolKind(
        name="e1test", transport="udp", cc_of=lambda s: s.quic_control, mss=lambda s: 1200,
        window_caps=lambda s: [], paces=lambda s: False,
    )  # fmt: skip
    kinds.register_protocol(kind)
    try:
        assert Settings(protocol="e1test").protocol == "e1test"
        with pytest.raises(ValueError, match="twice"):
            kinds.register_protocol(kind)
    finally:
        del kinds.PROTOCOLS["e1test"]
    with pytest.raises(SpecError, match="protocol"):
        Settings(protocol="e1test")


# --- where a knob takes effect (its Scope) ---------------------------------------------------


def test_every_scope_names_registered_kinds_and_knobs() -> None:
    traits = {
        axis: set().union(*(kinds.traits_of(k) for k in registry.values()))
        for axis, registry in (
            ("protocol", kinds.PROTOCOLS),
            ("workload", kinds.WORKLOADS),
            ("topology", kinds.TOPOLOGIES),
        )
    }
    for knob in KNOBS.values():
        scope = knob.scope
        assert set(scope.protocols) <= traits["protocol"], knob.key
        assert set(scope.workloads) <= traits["workload"], knob.key
        assert set(scope.topologies) <= traits["topology"], knob.key
        assert scope.needs is None or scope.needs in KNOBS, knob.key
        for axis in ("protocol", "workload", "topology"):
            assert scope.kinds_of(axis), (knob.key, axis)  # some kind applies it


@pytest.mark.parametrize(
    ("key", "settings", "applies"),
    [
        ("cc", {"protocol": "h2"}, True),
        ("cc", {"protocol": "h3"}, True),
        ("cc", {"protocol": "fec"}, False),
        ("quic_cc", {"protocol": "h2"}, False),
        ("quic_cc", {"protocol": "h3"}, True),
        ("max_pacing_rate", {"protocol": "h3"}, True),
        ("max_pacing_rate", {"protocol": "fec"}, False),
        ("h2_window", {"protocol": "h3"}, False),
        ("fec_target", {"protocol": "h2"}, False),
        ("chunks", {"workload": "stream"}, True),
        ("chunks", {"workload": "asr"}, False),
        ("requests", {"workload": "agent"}, False),
        ("warmup_requests", {"workload": "agent"}, True),
        ("processing_audio", {"workload": "retouch"}, False),
        ("processing_image", {"workload": "retouch-tiles3"}, True),
        ("send_policy", {"workload": "multi", "streams": "result,tts"}, True),
        ("send_policy", {"workload": "multi", "streams": "result,tts", "protocol": "fec"}, False),
        ("route", {"topology": "direct"}, False),
        ("route", {"topology": "relay"}, True),
        ("outage", {"workload": "agent"}, False),
        ("outage", {"workload": "agent", "outage_after_round": 3}, True),
        ("screenshot_quality", {"workload": "agent", "screenshot": "webp"}, True),
        ("link", {"protocol": "fec", "workload": "stream"}, True),
    ],
)
def test_a_knob_takes_effect_where_its_scope_says(key: str, settings: dict, applies: bool) -> None:
    reason = KNOBS[key].scope.refusal(Settings(**settings))
    assert (reason is None) == applies, reason
    if reason is not None:
        assert "\n" not in reason and ("only" in reason)


def test_cc_on_fec_names_the_protocols_that_apply_it() -> None:
    reason = KNOBS["cc"].scope.refusal(Settings(protocol="fec"))
    assert reason is not None and "h2" in reason and "h3" in reason and "'fec'" in reason


def test_cc_names_the_control_of_each_stack_and_a_missing_one_is_refused() -> None:
    assert Settings(protocol="h3", cc="bbr").quic_control == "bbr"
    assert Settings(protocol="h3", cc="bbr", quic_cc="reno").quic_control == "reno"
    with pytest.raises(SpecError) as err:  # a stack without the control: one line
        Settings(protocol="h3", cc="vegas")
    assert err.value.field == "cc"


def test_ignored_lists_the_set_knobs_the_run_does_not_apply() -> None:
    assert Settings(protocol="fec", cc="bbr").ignored() == ["cc"]
    assert Settings(protocol="h3", cc="bbr").ignored() == []  # cc names QUIC's control too
    assert Settings(protocol="h3", h2_window_bytes=2**25).ignored() == ["h2_window"]
    fec = Settings(protocol="fec", window_clamp_bytes=65536, quic_pacing="off", requests=3)
    assert fec.ignored() == ["window_clamp", "quic_pacing"]
    assert Settings(workload="agent", outage_s=4.0).ignored() == ["outage"]


def test_a_client_flag_its_run_does_not_apply_is_refused() -> None:
    parser = argparse.ArgumentParser()
    add_flags(parser, "client")
    args = parser.parse_args(["--protocol", "h3", "--h2-window", "32mb"])
    assert settings_from_flags(args).h2_window_bytes == 32_000_000  # a server's: every protocol
    with pytest.raises(SpecError) as err:
        settings_from_flags(args, scoped=True)
    assert err.value.field == "h2-window" and "h2" in err.value.reason
    fine = parser.parse_args(["--protocol", "h3", "--quic-cc", "cubic", "--cancel-after", "none"])
    assert settings_from_flags(fine, scoped=True).quic_cc == "cubic"


@pytest.mark.parametrize("value", ["nan", "inf", float("nan"), float("-inf")])
def test_a_number_knob_refuses_what_is_not_finite(value: object) -> None:
    with pytest.raises(SpecError) as err:
        Settings.from_table({"fec_target": value}, "fixed")
    assert err.value.field == "fixed.fec_target"
    assert "finite" in err.value.reason or "not a number" in err.value.reason
    with pytest.raises(SpecError):
        Settings(fec_target=float("nan"))


@pytest.mark.parametrize("value", ["1\n2", "1\r", "", "\x00"])
def test_a_sysctl_value_is_one_line(value: str) -> None:
    with pytest.raises(SpecError) as err:
        Settings.from_table({"sysctls": {"net.ipv4.tcp_sack": value}}, "fixed")
    assert err.value.field == "fixed.sysctls.net.ipv4.tcp_sack"
    rmem = {"net.ipv4.tcp_rmem": "4096\t131072 6291456"}
    assert Settings.from_table({"sysctls": rmem}, "fixed").sysctls == rmem


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: p.write_text("[" * 50_000), "nested too deep"),
        (lambda p: p.write_bytes(bytes(range(256)) * 4), "not UTF-8"),
        (lambda p: os.mkfifo(p), "FIFO, not a regular file"),
        (lambda p: p.write_text("[1, 2]"), "a JSON list, not an object"),
        (lambda p: p.write_text(" " * (2 << 20)), "more than the"),
    ],
)
def test_a_settings_document_that_is_not_one_is_one_line(make, says: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Read through the bounded reader: no hang on a FIFO, no RecursionError, no traceback."""
    path = tmp_path / "settings.json"
    make(path)
    with pytest.raises(SpecError, match=says) as caught:
        Settings.load(str(path))
    assert caught.value.field == "settings" and "\n" not in str(caught.value)
    with pytest.raises(SpecError, match="regular file"):
        Settings.load("/dev/zero")


@pytest.mark.parametrize("policy", ["every:3,max:10ms", "every:2,max:1ms", "ack-frequency", "tack"])
def test_an_ack_policy_linux_tcp_cannot_give_is_refused_in_one_line(policy: str) -> None:
    with pytest.raises(SpecError) as err:
        Settings(protocol="h2", ack_policy=policy)
    assert err.value.field == "ack_policy" and "\n" not in str(err.value)
    assert "Linux" in str(err.value)
    assert Settings(protocol="h3", ack_policy=policy).ack_policy == policy


def test_every_two_over_tcp_is_linuxs_rule_with_its_delay_capped() -> None:
    assert Settings(protocol="h2", ack_policy="every:2,max:10ms").tcp_delack_max_s == 0.010
    assert Settings(protocol="h3", ack_policy="every:2,max:10ms").tcp_delack_max_s is None
    assert Settings(protocol="h2").tcp_delack_max_s is None


def test_immediate_over_tcp_is_the_quickack_route_metric_and_socket_option() -> None:
    tcp = Settings(protocol="h2", ack_policy="immediate")
    assert tcp.acks_each_segment and tcp.quickack_route and tcp.quickack_socket
    quic = Settings(protocol="h3", ack_policy="immediate")
    assert not quic.acks_each_segment and not quic.quickack_route
    assert Settings(protocol="h2", route_quickack=True).quickack_route
    assert not Settings(protocol="h2").quickack_socket


def test_stored_settings_take_the_default_of_a_setting_added_since_and_refuse_unknown_ones() -> (
    None
):
    stored = Settings().replace(cc="bbr").to_dict()
    del stored["path_failures"]  # a run made before the setting existed
    back = Settings.from_stored(stored, "run.json.settings")
    assert back.cc == "bbr" and back.path_failures is None
    with pytest.raises(SpecError) as err:
        Settings.from_dict(stored, "run.json.settings")  # the stacks' documents stay strict
    assert err.value.field == "run.json.settings.path_failures"
    with pytest.raises(SpecError) as err:
        Settings.from_stored({**stored, "warp": 9}, "run.json.settings")
    assert err.value.field == "run.json.settings.warp"


@pytest.mark.parametrize("written", ["80%", 0.8, "0.8"])
def test_task_success_reads_a_percentage_or_a_fraction(written: object) -> None:
    table = {"workload": "agent", "task_success": written, "agent_tasks": 4}
    assert Settings.from_table(table, "t").task_success == pytest.approx(0.8)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"outage_after_round": 2}, "outage_after_round"),
        ({"rate_change_after_round": 1, "rate_change": "10mbit"}, "rate_change_after_round"),
        ({"agent_deadline": "45s"}, "agent_deadline"),
    ],
)
def test_a_knob_of_one_tasks_rounds_is_refused_with_several_tasks(
    extra: dict[str, object], field: str
) -> None:
    for tasks in ({"agent_tasks": 3}, {"task_success": "90%"}):
        with pytest.raises(SpecError, match=f"{field}: acts on one task's rounds"):
            Settings.from_table({"workload": "agent", **tasks, **extra}, "t")


def test_a_task_that_never_succeeds_is_refused() -> None:
    with pytest.raises(SpecError, match="task_success"):
        Settings.from_table({"workload": "agent", "task_success": "0%"}, "t")

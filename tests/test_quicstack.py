"""``quic_stack``: the knob, what the native stack (ngtcp2) carries, and every refusal in one
line."""

from __future__ import annotations

import pytest
from support_inputs import experiment_text

from harness.collect.row import label_columns
from harness.spec.experiment import loads
from harness.spec.paths import topology_of
from tbcore import kinds, quicstack
from tbcore.errors import SpecError
from tbcore.settings import KNOBS, Settings

NGTCP2 = {"protocol": "h3", "quic_stack": "ngtcp2", "workload": "tts"}


def ngtcp2(**changes: object) -> Settings:
    return Settings(**{**NGTCP2, **changes})


def test_the_knob_is_the_last_defaults_to_aioquic_and_names_its_choices() -> None:
    assert list(KNOBS)[-1] == "quic_stack"
    item = KNOBS["quic_stack"]
    assert item.default == "aioquic" and tuple(item.choices) == ("aioquic", "ngtcp2")
    assert Settings().quic_stack == "aioquic"
    with pytest.raises(SpecError, match="quic_stack: must be one of aioquic, ngtcp2"):
        Settings(protocol="h3", quic_stack="quiche")


def test_aioquics_default_control_is_the_knobs() -> None:
    assert KNOBS["quic_cc"].default is None  # cc names QUIC's control; quic_cc overrides it


def test_ngtcp2_takes_effect_on_h3_only() -> None:
    with pytest.raises(SpecError, match=r"quic_stack: ngtcp2 is an HTTP/3 stack.*not h2"):
        Settings(quic_stack="ngtcp2", workload="tts")


@pytest.mark.parametrize("workload", ["tts", "result", "image", "asr", "retouch", "sink"])
def test_the_file_workloads_have_a_route_the_interop_file_server_serves(workload: str) -> None:
    settings = ngtcp2(workload=workload, processing_image_s=0.0)
    route = kinds.ngtcp2_route(settings)
    assert route.path == f"/{workload}" and route.method in ("GET", "POST")
    assert (route.method == "POST") == (route.upload is not None)


@pytest.mark.parametrize(
    "changes",
    [
        {"workload": "stream"},
        {"workload": "agent"},
        {"workload": "retouch-tiles3"},
        {"workload": "multi", "streams": "result,tts"},
        {"processing_audio_s": 0.030},
        {"workload": "retouch", "processing_image_s": 0.3},
        {"connection": "reused", "warmup_requests": 1},
        {"connection": "0rtt"},
        {"resume": True},
        {"send_policy": "rr", "workload": "multi", "streams": "result,tts"},
        {"quic_pacing": "off"},
        {"quic_ack_delay_s": 0.005},
        {"quic_batching": False},
        {"qlog": False},
        {"cc": "bbr2"},
    ],
)
def test_the_native_stack_carries_what_aioquic_carries(changes: dict) -> None:
    settings = ngtcp2(**changes)
    assert settings.quic_stack == "ngtcp2"


def test_the_two_path_upload_stays_on_aioquic() -> None:
    with pytest.raises(SpecError, match="workload: upload runs on aioquic, not ngtcp2"):
        ngtcp2(workload="upload")


@pytest.mark.parametrize(
    ("attr", "value"),
    [
        ("max_pacing_rate_bps", 333e6),
        ("pace_at_path_rate", True),
        ("sndbuf_bytes", 1 << 20),
        ("rcvbuf_bytes", 1 << 20),
    ],
)
def test_a_knob_ngtcp2_cannot_apply_is_refused_naming_it(attr: str, value: object) -> None:
    key = next(k.key for k in KNOBS.values() if k.attr == attr)
    with pytest.raises(SpecError) as err:
        ngtcp2(**{attr: value}, warmup_requests=1)
    assert str(err.value).startswith(f"{key}: not applied by ngtcp2")
    assert "\n" not in str(err.value)
    # the same value is fine on aioquic
    Settings(**{**NGTCP2, "quic_stack": "aioquic", attr: value, "warmup_requests": 1})


@pytest.mark.parametrize("policy", ["ack-frequency", "tack"])
def test_an_ack_policy_ngtcp2_cannot_express_is_refused(policy: str) -> None:
    with pytest.raises(SpecError, match=f"ack_policy: {policy}: not applied by ngtcp2"):
        ngtcp2(ack_policy=policy)
    Settings(**{**NGTCP2, "quic_stack": "aioquic", "ack_policy": policy})


def test_the_ack_policies_ngtcp2_expresses_become_its_threshold_and_delay() -> None:
    from proto.native.engine import ack_flags

    assert ack_flags(ngtcp2()) == []
    assert ack_flags(ngtcp2(ack_policy="immediate")) == [
        "--ack-thresh=1",
        "--max-ack-delay-us=1000",
    ]
    every = ngtcp2(ack_policy="every:2,max:10ms")
    assert ack_flags(every) == ["--ack-thresh=2", "--max-ack-delay-us=10000"]
    assert ack_flags(ngtcp2(quic_ack_delay_s=0.005)) == ["--max-ack-delay-us=5000"]
    with pytest.raises(SpecError, match=r"quic_ack_delay: .*give one of the two"):
        ngtcp2(ack_policy="immediate", quic_ack_delay_s=0.005)


def test_a_fixed_pacing_rate_is_refused_on_ngtcp2() -> None:
    with pytest.raises(SpecError, match=r"quic_pacing: .*no fixed-rate pacer"):
        ngtcp2(quic_pacing=333e6)
    Settings(**{**NGTCP2, "quic_stack": "aioquic", "quic_pacing": 333e6})


def test_a_control_ngtcp2_lacks_is_refused() -> None:
    assert "bbr2" not in quicstack.AIOQUIC_CONGESTION_CONTROLS
    with pytest.raises(SpecError, match="cc:"):
        Settings(**{**NGTCP2, "quic_stack": "aioquic", "cc": "bbr2"})


def test_the_control_is_cc_unless_quic_cc_overrides_it() -> None:
    assert quicstack.control_of(ngtcp2()) == "cubic"  # cc's default
    assert quicstack.control_of(ngtcp2(cc="bbr")) == "bbr"
    assert quicstack.control_of(ngtcp2(cc="bbr", quic_cc="cubic")) == "cubic"
    # one cc for both stacks: aioquic runs cc too (issue 25)
    assert quicstack.control_of(ngtcp2(quic_stack="aioquic", cc="bbr")) == "bbr"


def test_the_row_labels_the_stack_and_the_control_that_ran() -> None:
    path = topology_of(Settings(link="rtt=200ms,rate=333mbit"), "test")
    labels = label_columns(ngtcp2(cc="bbr"), path)
    assert (labels["cc"], labels["quic_stack"], labels["protocol"]) == ("bbr", "ngtcp2", "h3")
    aio = label_columns(ngtcp2(quic_stack="aioquic", quic_cc="cubic", cc="bbr"), path)
    assert (aio["cc"], aio["quic_stack"]) == ("cubic", "aioquic")
    h2 = label_columns(Settings(cc="bbr"), path)
    assert (h2["cc"], h2["quic_stack"]) == ("bbr", None)


EXPERIMENT = experiment_text("stack-level")


def test_an_experiment_runs_both_stacks_with_the_chapters_processing() -> None:
    spec = loads(EXPERIMENT)
    assert [lv.settings.quic_stack for lv in spec.levels] == ["aioquic", "ngtcp2"]
    assert {lv.settings.processing_audio_s for lv in spec.levels} == {0.030}


def test_an_experiment_level_ngtcp2_cannot_run_is_refused_in_one_line() -> None:
    with pytest.raises(SpecError) as err:
        loads(
            EXPERIMENT.replace('workload = "tts"', 'workload = "tts"\nmax_pacing_rate = "100mbit"')
        )
    text = str(err.value)
    assert "max_pacing_rate" in text and "ngtcp2" in text and "\n" not in text


def test_the_shipped_experiment_compares_three_stacks_with_one_control_each() -> None:
    from pathlib import Path

    from harness.spec.experiment import load

    spec = load(Path(__file__).parent.parent / "experiments" / "h3-stacks.toml")
    arms = {
        lv.name: (
            lv.settings.protocol,
            lv.settings.quic_stack,
            label_columns(lv.settings, lv.topology)["cc"],
        )
        for lv in spec.levels
    }
    assert arms["h2-cubic"][2] == arms["aioquic-cubic"][2] == arms["ngtcp2-cubic"][2] == "cubic"
    assert arms["ngtcp2-bbr"] == ("h3", "ngtcp2", "bbr") and arms["h2-bbr"][2] == "bbr"
    for lv in spec.levels:
        assert lv.settings.workload == "tts"


def test_both_stacks_pace_unless_told_off() -> None:
    from harness.collect.row import sender_paces

    assert sender_paces(ngtcp2(cc="cubic")) and sender_paces(ngtcp2(cc="bbr"))
    assert not sender_paces(ngtcp2(quic_pacing="off"))
    assert sender_paces(ngtcp2(quic_stack="aioquic"))  # aioquic's pacer
    assert not sender_paces(ngtcp2(quic_stack="aioquic", quic_pacing="off"))


def test_the_aioquic_controls_a_setting_accepts_are_those_aioquic_has() -> None:
    """tbcore cannot import aioquic's registry (tbcore imports no other package): the names
    it accepts and the registry that proto.quic.edge fills must stay equal."""
    from aioquic.quic.congestion import base

    import proto.quic.edge  # noqa: F401  (the registry it fills is what is checked)

    assert set(quicstack.AIOQUIC_CONGESTION_CONTROLS) == set(base._factories)

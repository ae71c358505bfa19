"""harness.spec.cross: where competing traffic can run, each refusal one line naming the key."""

from __future__ import annotations

import pytest

from harness.spec.cross import cross_of, data_direction
from harness.spec.experiment import loads
from tbcore.cross import CrossTraffic
from tbcore.errors import SpecError
from tbcore.settings import Settings


def _file(fixed: str, levels: str = "") -> str:
    levels = levels or '{ name = "alone", cross = "none" }, { name = "two", cross = "tcp:2:cubic" }'
    return f"""
name = "t"
question = "q"
[fixed]
{fixed}
[factor]
name = "f"
settings = ["cross"]
levels = [{levels}]
"""


def test_a_file_with_competing_flows_loads() -> None:
    spec = loads(_file('link = "rtt=200ms,rate=50mbit"\nworkload = "asr"'))
    assert cross_of(spec.level("two").settings) == CrossTraffic("tcp", 2, cc="cubic")
    assert cross_of(spec.level("alone").settings) is None
    assert spec.column_groups() == ["cross"]


def test_the_flows_go_where_the_requests_data_goes() -> None:
    assert data_direction(Settings(workload="asr")) == "up"
    assert data_direction(Settings(workload="tts")) == "down"


@pytest.mark.parametrize(
    ("fixed", "message"),
    [
        ('link = "rtt=200ms"', "the up direction .* has no rate"),
        ('link = "rtt=200ms,up.rate=5mbit"\nworkload = "tts"', "the down direction"),
        ('link = "rtt=200ms,rate=5mbit"\ncapture = "off"', "capture must not be off"),
        ('link = "rtt=200ms,rate=5mbit"\nworkload = "agent"', "request workloads"),
        (
            'topology = "relay"\nnear_link = "rtt=2ms"\nlink = "rtt=200ms,rate=5mbit"',
            "direct link",
        ),
    ],
)
def test_a_path_it_cannot_apply_to_is_refused(fixed: str, message: str) -> None:
    with pytest.raises(SpecError, match=rf"^factor\.levels\.two\.cross: .*{message}") as err:
        loads(_file(fixed))
    assert "\n" not in str(err.value)


def test_a_traced_bottleneck_can_be_shared() -> None:
    spec = loads(_file('link = "rtt=200ms,up.rate=trace:cell-markov.up,down.rate=10mbit"'))
    assert spec.column_groups() == ["cross", "trace", "trace_up"]  # the uplink has the trace


def test_cross_lead_without_cross_has_no_effect() -> None:
    with pytest.raises(
        SpecError, match=r"^factor.levels.alone.cross_lead: has no effect without cross"
    ):
        loads(_file('link = "rtt=200ms,rate=5mbit"\ncross_lead = "5s"'))
    levels = '{ name = "a", cross = "tcp:1:cubic" }, { name = "b", cross = "tcp:1:bbr" }'
    spec = loads(_file('link = "rtt=200ms,rate=5mbit"\ncross_lead = "5s"', levels))
    assert spec.level("a").settings.cross_lead_s == 5.0


def test_only_an_experiment_with_h3_has_the_quic_stack_column() -> None:
    spec = loads(_file('link = "rtt=200ms,rate=10mbit"'))
    assert "h3" not in spec.column_groups()

"""Failures drawn per trial on a dual topology's edges (tbcore.failures)."""

from __future__ import annotations

import pytest

from harness.spec import experiment as specmod
from tbcore.errors import SpecError
from tbcore.failures import draw_down, parse_failures


def test_the_written_form_parses_in_edge_order_and_bad_forms_name_the_field() -> None:
    assert parse_failures("f", "exit_link=2%, link=10%,link_b=0.05") == {
        "link": 0.1, "link_b": 0.05, "exit_link": 0.02,
    }  # fmt: skip
    assert parse_failures("f", "link=100%") == {"link": 1.0}
    for bad, why in (("", "must be"), ("wan=5%", "must be"), ("link=5%,link=6%", "twice"),
                     ("link=120%", "[0, 1]"), ("link", "must be")):  # fmt: skip
        with pytest.raises(SpecError) as err:
            parse_failures("path_failures", bad)
        assert err.value.field.startswith("path_failures") and why in err.value.reason


def test_draws_are_seeded_forced_edges_always_down_and_rates_as_given() -> None:
    chances = {"link": 0.1, "link_b": 0.05, "exit_link": 0.02}
    assert draw_down(chances, 7) == draw_down(chances, 7)
    assert all(draw_down({"link": 1.0, "link_b": 0.0}, seed) == ("link",) for seed in range(50))
    draws = [draw_down(chances, seed) for seed in range(20_000)]
    for edge, p in chances.items():
        share = sum(edge in d for d in draws) / len(draws)
        assert share == pytest.approx(p, abs=4 * (p * (1 - p) / len(draws)) ** 0.5)
    both = sum({"link", "link_b"} <= set(d) for d in draws) / len(draws)
    assert both == pytest.approx(0.1 * 0.05, abs=0.002)  # drawn independently


DUAL = """
name = "m"
question = "q?"
[fixed]
topology = "dual"
link = "rtt=40ms,rate=20mbit"
link_b = "rtt=40ms,rate=10mbit"
workload = "upload"
size = 5120
chunk_size = 640
[factor]
name = "m"
settings = ["multipath", "path_failures", "exit_link"]
levels = [{ name = "a", multipath = "duplicate" }, LEVEL]
"""


def test_a_level_with_failures_is_duplication_on_edges_the_topology_has() -> None:
    ok = '{ name = "b", multipath = "duplicate", path_failures = "link=10%,link_b=5%" }'
    spec = specmod.loads(DUAL.replace("LEVEL", ok))
    assert spec.level("b").settings.path_failures == "link=10%,link_b=5%"
    for level, why in (
        ('{ name = "b", multipath = "split", path_failures = "link=10%" }', "duplicate"),
        ('{ name = "b", multipath = "duplicate", path_failures = "exit_link=2%" }', "exit_link"),
        ('{ name = "b", multipath = "duplicate", path_failures = "link=1%,isp=2%" }', "must be"),
    ):
        with pytest.raises(SpecError) as err:
            specmod.loads(DUAL.replace("LEVEL", level))
        assert err.value.field == "factor.levels.b.path_failures" and why in err.value.reason
    with_exit = (
        '{ name = "b", multipath = "duplicate", exit_link = "rtt=2ms,rate=24mbit", '
        'path_failures = "exit_link=2%" }'
    )
    assert specmod.loads(DUAL.replace("LEVEL", with_exit)).level("b").settings.path_failures
    single = DUAL.replace('topology = "dual"\n', "").replace(
        'link_b = "rtt=40ms,rate=10mbit"\n', ""
    )
    with pytest.raises(SpecError):
        specmod.loads(single.replace("LEVEL", '{ name = "b", path_failures = "link=1%" }'))

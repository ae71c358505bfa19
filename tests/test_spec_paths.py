"""harness.spec.paths: a level's path built once from its link knobs, the settings a shape
does not apply refused, and the end-to-end path the bound and the row see."""

from __future__ import annotations

from pathlib import Path

import pytest
from support_inputs import experiment_text

from harness.spec import experiment as specmod
from harness.spec.paths import end_to_end, topology_of
from tbcore.errors import SpecError
from tbcore.settings import Settings

RELAY = experiment_text("relay-route")

TOPOLOGY_FACTOR = experiment_text("topology-factor")


def test_the_shipped_topology_experiments_load() -> None:
    relay = specmod.load(Path("experiments/relay.toml"))
    assert {lv.topology.kind for lv in relay.levels} == {"relay"}
    assert relay.reference_ms["h2-relay-new"] == 301.6
    dual = specmod.load(Path("experiments/multipath.toml"))
    exits = {lv.name: "exit_link" in lv.topology.edge_names for lv in dual.levels}
    assert exits["mptcp-exit"] and not exits["mptcp"]
    assert dual.quick_form().repetitions == 1


def test_a_file_whose_factor_is_the_topology_builds_both_shapes() -> None:
    spec = specmod.loads(TOPOLOGY_FACTOR)
    shapes = {lv.name: lv.topology for lv in spec.levels}
    assert shapes["direct"].kind == "direct" and shapes["direct"].edge_names == ("link",)
    assert shapes["relay"].kind == "relay"
    assert set(shapes["relay"].edge_names) == {"near_link", "link"}
    assert end_to_end(shapes["relay"]).rtt_s == pytest.approx(0.202)


NATURAL_TOPOLOGY_FACTOR = """
name = "t"
question = "q?"
[fixed]
link = "rtt=200ms,rate=333mbit"
near_link = "rtt=2ms,rate=1000mbit"
[factor]
name = "topology"
levels = [
  { name = "direct", topology = "direct" },
  { name = "relay", topology = "relay" },
]
"""


def test_a_fixed_edge_some_levels_lack_is_their_ignored_setting() -> None:
    """The file a user writes from the README: the relay's near hop in [fixed], the topology
    the factor. The direct level's path has no near hop and its runs list it as ignored."""
    spec = specmod.loads(NATURAL_TOPOLOGY_FACTOR)
    direct, relay = spec.levels
    assert direct.topology.edge_names == ("link",)
    assert "near_link" in direct.settings.ignored()
    assert set(relay.topology.edge_names) == {"near_link", "link"}
    assert relay.settings.ignored() == []
    nobody = NATURAL_TOPOLOGY_FACTOR.replace(
        '{ name = "relay", topology = "relay" }',
        '{ name = "slow", topology = "direct", link = "rtt=300ms,rate=333mbit" }',
    ).replace('name = "topology"', 'name = "path"\nsettings = ["topology", "link"]')
    with pytest.raises(SpecError) as err:
        specmod.loads(nobody)
    assert err.value.field == "fixed.near_link" and "no level applies it" in err.value.reason


def test_end_to_end_puts_the_relay_hops_and_the_exit_in_series() -> None:
    relay = topology_of(Settings(topology="relay", near_link="rtt=2ms,rate=1gbit,loss=1%",
                                 link="rtt=200ms,rate=333mbit,loss=2%"), "fixed")  # fmt: skip
    path = end_to_end(relay)
    assert path.rtt_s == pytest.approx(0.202)
    assert path.up.rate_bps == pytest.approx(333e6)
    assert path.up.loss == pytest.approx(1 - 0.99 * 0.98)
    dual = topology_of(
        Settings(topology="dual", workload="upload", link="rtt=40ms,rate=20mbit",
                 link_b="rtt=40ms,rate=10mbit", exit_link="rtt=2ms,rate=24mbit"),
        "fixed",
    )  # fmt: skip
    assert end_to_end(dual).rtt_s == pytest.approx(0.042)
    assert end_to_end(dual).up.rate_bps == pytest.approx(20e6)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (('topology = "relay"', 'topology = "ring"'), "fixed.topology"),
        (('route = "relay"', 'route = "tunnel"'), "factor.levels.relay-new.route"),
        (('link = "dc-longhaul-clean"', 'link = "rtt=2"'), "fixed.link.up.rtt"),
        (('near_link = "rtt=2ms"\n', ""), "factor.levels.direct-new.near_link"),
        (('topology = "relay"', 'topology = "direct"'), "factor.levels.direct-new.route"),
        (('near_link = "rtt=2ms"', 'near_link = "rtt=2ms"\nmultipath = "mptcp"'),
         "fixed.multipath"),
        (('near_link = "rtt=2ms"', 'near_link = "rtt=2ms"\nworkload = "upload"'),
         "factor.levels.direct-new.workload"),
    ],
)  # fmt: skip
def test_a_setting_the_shape_does_not_apply_is_refused(change: tuple[str, str], field: str) -> None:
    with pytest.raises(SpecError) as err:
        specmod.loads(RELAY.replace(*change, 1))
    assert err.value.field == field


def test_route_on_a_direct_link_is_refused_not_ignored() -> None:
    text = RELAY.replace('topology = "relay"\nnear_link = "rtt=2ms"\n', "")
    with pytest.raises(SpecError) as err:
        specmod.loads(text)
    assert err.value.field == "factor.levels.direct-new.route"
    assert "relay" in err.value.reason


@pytest.mark.parametrize(
    ("level", "field"),
    [
        ('{ name = "b", multipath = "split", outage_at = "3s" }', "outage_at"),
        ('{ name = "b", protocol = "h3" }', "protocol"),
        ('{ name = "b", protocol = "fec" }', "protocol"),
    ],
)
def test_two_paths_refuse_what_they_cannot_run(level: str, field: str) -> None:
    text = f"""
name = "m"
question = "q?"
[fixed]
topology = "dual"
link = "rtt=40ms,rate=20mbit"
link_b = "rtt=40ms,rate=10mbit"
workload = "upload"
[factor]
name = "m"
settings = ["multipath", "outage_at", "protocol"]
levels = [{{ name = "a", multipath = "mptcp" }}, {level}]
"""
    with pytest.raises(SpecError) as err:
        specmod.loads(text)
    assert err.value.field == f"factor.levels.b.{field}"


MPTCP_IMAGE = experiment_text("mptcp-image")


def test_any_http2_workload_rides_two_paths_under_mptcp() -> None:
    """MPTCP is a transparent TCP: the image round trip runs over two paths; the split and
    duplicate modes (the upload client's) refuse another workload in one line."""
    from harness.spec.paths import request_path

    spec = specmod.loads(MPTCP_IMAGE)
    mptcp = spec.level("mptcp")
    assert mptcp.topology.kind == "dual" and mptcp.settings.workload == "retouch"
    assert request_path(mptcp.topology, "mptcp").up.rate_bps == pytest.approx(30e6)
    assert request_path(mptcp.topology, "single").up.rate_bps == pytest.approx(20e6)
    with pytest.raises(SpecError) as err:
        specmod.loads(MPTCP_IMAGE.replace('"single" }]', '"split" }]'))
    assert err.value.field.endswith(".workload") and "carries upload" in err.value.reason

"""Per-namespace sysctls: values computed from the spec, and read/write inside a namespace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from netem import sysctl, topology
from netem.linkspec import parse_link
from tbcore.errors import SpecError

pytestmark = pytest.mark.timeout(60)


def test_buffers_floor_covers_reference_path() -> None:
    # 333 Mbit/s x 200 ms = 8.325 MB; 2 x = 16.65 MB, under the 16 MiB floor
    spec = parse_link("rtt=200ms,rate=333mbit")
    assert sysctl.socket_buffer_max_bytes(spec) == sysctl.SOCKET_BUFFER_FLOOR_BYTES
    assert 2 * spec.bdp_bytes("up") <= sysctl.SOCKET_BUFFER_FLOOR_BYTES


def test_buffers_follow_a_large_bdp() -> None:
    spec = parse_link("rtt=300ms,up.rate=1gbit,down.rate=100mbit")
    assert sysctl.socket_buffer_max_bytes(spec) == 2 * 37_500_000


def test_unlimited_link_gets_the_floor() -> None:
    assert (
        sysctl.socket_buffer_max_bytes(parse_link("rtt=10ms")) == sysctl.SOCKET_BUFFER_FLOOR_BYTES
    )


def test_link_sysctls_values() -> None:
    values = sysctl.link_sysctls(parse_link("rtt=200ms,rate=333mbit"))
    assert values["net.ipv4.tcp_no_metrics_save"] == "1"
    assert values["net.ipv4.tcp_slow_start_after_idle"] == "1"  # the kernel's default
    assert values["net.ipv4.tcp_rmem"].split()[-1] == str(sysctl.SOCKET_BUFFER_FLOOR_BYTES)
    assert values["net.ipv4.tcp_wmem"].split()[-1] == str(sysctl.SOCKET_BUFFER_FLOOR_BYTES)
    assert values["net.core.rmem_max"] == str(sysctl.SOCKET_BUFFER_FLOOR_BYTES)
    off = sysctl.link_sysctls(parse_link("rtt=1ms"), slow_start_after_idle=False)
    assert off["net.ipv4.tcp_slow_start_after_idle"] == "0"


@pytest.mark.parametrize(
    "name",
    ["kernel.hostname", "net/ipv4/tcp_rmem", "net..ipv4", "vm.swappiness", 3, "", "net.ipv4.x\n"],
)
def test_only_net_names_accepted(name: object) -> None:
    with pytest.raises(SpecError) as err:
        sysctl._path(name)  # type: ignore[arg-type]
    assert err.value.field == "sysctl"


def test_normalise() -> None:
    assert sysctl.normalise("4096\t131072   6291456\n") == "4096 131072 6291456"
    assert sysctl.normalise(True) == "1"
    assert sysctl.normalise(16) == "16"


def test_at_least() -> None:
    assert sysctl._at_least("4194304", "4194304")
    assert not sysctl._at_least("4194304", "16777216")
    assert sysctl._at_least("4096 131072 33554432", "4096 131072 16777216")
    assert sysctl._at_least("cubic", "cubic") and not sysctl._at_least("bbr", "cubic")


@pytest.fixture
def ns() -> Iterator[str]:
    name = "tb-tp30-client"
    topology.delete_namespace(name)
    topology.create_namespace(name)
    yield name
    topology.delete_namespace(name)


@pytest.mark.root
def test_write_read_in_namespace_only(ns: str) -> None:
    host_before = Path("/proc/sys/net/ipv4/tcp_slow_start_after_idle").read_text().strip()
    new = "0" if host_before == "1" else "1"
    previous = sysctl.set_many(ns, {"net.ipv4.tcp_slow_start_after_idle": new})
    assert previous == {"net.ipv4.tcp_slow_start_after_idle": host_before}
    assert sysctl.read(ns, "net.ipv4.tcp_slow_start_after_idle") == new
    # the host's value is untouched: the sysctl is per namespace
    assert Path("/proc/sys/net/ipv4/tcp_slow_start_after_idle").read_text().strip() == host_before


@pytest.mark.root
def test_unknown_sysctl_and_bad_value(ns: str) -> None:
    with pytest.raises(SpecError):
        sysctl.read(ns, "net.ipv4.no_such_thing")
    with pytest.raises(SpecError):
        sysctl.write(ns, "net.ipv4.tcp_congestion_control", "no-such-cc")


@pytest.mark.root
def test_apply_link_sysctls_sets_or_warns(ns: str) -> None:
    wanted = sysctl.link_sysctls(parse_link("rtt=200ms,rate=333mbit"), slow_start_after_idle=False)
    applied = sysctl.apply_link_sysctls(ns, wanted)
    for name, value in wanted.items():
        if name.startswith("net.core."):
            # per-namespace and writable, or read-only here: then either enough or a warning
            ok = applied.values[name] == value or sysctl._at_least(applied.values[name], value)
            assert ok or any(w.startswith(name) for w in applied.warnings)
        else:
            assert applied.values[name] == value
    assert sysctl.read(ns, "net.ipv4.tcp_slow_start_after_idle") == "0"

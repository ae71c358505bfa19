"""``testbed doctor``: one line per capability, and the backend ``auto`` will use."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from netem import backends, doctor, topology
from netem.backends.kernel import probe_netem

pytestmark = pytest.mark.timeout(60)

TESTBED = [sys.executable, "-m", "harness.cli"]
CHECK_NAMES = [
    "root",
    "net_admin",
    "sys_admin",
    "apparmor",
    "proc_sys",
    "tun_device",
    "realtime",
    "namespaces",
    "veth",
    "tun",
    "netem",
    "congestion_control",
    "tcpdump",
]
ALL_CAPS = (1 << 41) - 1
"""CapEff of root on a bare host: every capability."""


@pytest.mark.root
def test_checks_in_order_and_backend_follows_netem() -> None:
    data = doctor.report()
    assert [c["name"] for c in data["checks"]] == CHECK_NAMES
    by_name = {c["name"]: c for c in data["checks"]}
    assert by_name["root"]["ok"]
    assert by_name["namespaces"]["ok"] and by_name["veth"]["ok"] and by_name["tun"]["ok"]
    assert data["usable"]
    netem_ok = by_name["netem"]["ok"]
    assert netem_ok == probe_netem()[0]
    forced = os.environ.get(backends.BACKEND_ENV)
    assert data["backend"] == (forced or ("netem" if netem_ok else "userspace"))
    assert doctor.missing(data) == []
    with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
        available = f.read().split()
    assert by_name["congestion_control"]["detail"].split()[: len(available)] == available
    # the throwaway namespaces are gone
    assert not topology.namespace_exists(f"tb-probe{os.getpid()}")
    assert not topology.namespace_exists(f"tb-probe{os.getpid()}d")


@pytest.mark.root
def test_cli_text_and_json() -> None:
    text = subprocess.run([*TESTBED, "doctor"], capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == [*CHECK_NAMES, "backend"]
    assert lines[-1].split()[1] in ("netem", "userspace")
    js = subprocess.run([*TESTBED, "doctor", "--json"], capture_output=True, text=True, timeout=60)
    data = json.loads(js.stdout)
    assert data["backend"] == lines[-1].split()[1]
    assert {c["name"] for c in data["checks"]} == set(CHECK_NAMES)


def test_format_report_marks_failures() -> None:
    data = {
        "checks": [
            {"name": "root", "ok": True, "detail": "running as root", "required": True},
            {"name": "tun_device", "ok": False, "detail": "absent", "required": True},
        ],
        "backend": "userspace",
        "forced_by": None,
    }
    lines = doctor.format_report(data).splitlines()
    assert lines[0].split()[:2] == ["root", "yes"]
    assert lines[1].split()[:2] == ["tun_device", "no"]
    assert lines[2].split() == ["backend", "userspace"]


def test_choose_validates_names(monkeypatch: pytest.MonkeyPatch) -> None:
    from tbcore.errors import SpecError

    with pytest.raises(SpecError):
        backends.choose("fast")
    assert backends.choose("userspace") == "userspace"
    monkeypatch.setenv(backends.BACKEND_ENV, "userspace")
    assert backends.choose("auto") == "userspace"
    monkeypatch.setenv(backends.BACKEND_ENV, "bogus")
    with pytest.raises(SpecError) as err:
        backends.choose("auto")
    assert err.value.field == backends.BACKEND_ENV


def privileges(**changes: object) -> doctor.Privileges:
    """A bare host's privileges, with some changed: the fake inputs of the checks."""
    base: dict[str, object] = {
        "cap_eff": ALL_CAPS,
        "apparmor": None,
        "proc_sys_read_only": False,
        "proc_sys_remount": (True, "not needed"),
        "tun_error": None,
        "realtime_error": None,
    }
    base.update(changes)
    return doctor.Privileges(**base)  # type: ignore[arg-type]


def failing(checks: list[doctor.Check]) -> dict[str, str]:
    return {c.name: c.detail for c in checks if not c.ok}


def test_bare_host_lacks_nothing() -> None:
    checks = doctor.privilege_checks(privileges(), needs_tun=True)
    assert [c.name for c in checks] == CHECK_NAMES[1:7]
    assert failing(checks) == {}


@pytest.mark.parametrize(
    ("changes", "name", "option"),
    [
        ({"cap_eff": ALL_CAPS & ~(1 << doctor.CAP_NET_ADMIN)}, "net_admin", "--cap-add NET_ADMIN"),
        ({"cap_eff": ALL_CAPS & ~(1 << doctor.CAP_SYS_ADMIN)}, "sys_admin", "--cap-add SYS_ADMIN"),
        (
            {"apparmor": "docker-default (enforce)"},
            "apparmor",
            "--security-opt apparmor=unconfined",
        ),
        (
            {"proc_sys_read_only": True, "proc_sys_remount": (False, "Operation not permitted")},
            "proc_sys",
            "--security-opt systempaths=unconfined",
        ),
        ({"tun_error": "No such file or directory"}, "tun_device", "--device /dev/net/tun"),
    ],
)
def test_one_missing_piece_is_one_line_naming_its_option(
    changes: dict[str, object], name: str, option: str
) -> None:
    checks = doctor.privilege_checks(privileges(**changes), needs_tun=True)
    assert list(failing(checks)) == [name]
    detail = failing(checks)[name]
    assert "\n" not in detail
    assert f"docker run `{option}`" in detail
    assert "compose `" in detail


def test_read_only_proc_sys_is_fine_when_the_testbed_can_remount_it() -> None:
    checks = doctor.privilege_checks(
        privileges(proc_sys_read_only=True, proc_sys_remount=(True, "ok")), needs_tun=True
    )
    assert failing(checks) == {}
    assert "systempaths=unconfined not needed" in {c.name: c.detail for c in checks}["proc_sys"]


def test_read_only_proc_sys_blamed_on_sys_admin_not_repeated() -> None:
    """Without SYS_ADMIN the remount fails too: one line, the capability's."""
    checks = doctor.privilege_checks(
        privileges(
            cap_eff=ALL_CAPS & ~(1 << doctor.CAP_SYS_ADMIN),
            proc_sys_read_only=True,
            proc_sys_remount=(False, "Operation not permitted"),
        ),
        needs_tun=True,
    )
    assert list(failing(checks)) == ["sys_admin"]


def test_tun_not_needed_by_the_netem_backend() -> None:
    checks = doctor.privilege_checks(privileges(tun_error="No such device"), needs_tun=False)
    assert failing(checks) == {}


def test_realtime_is_reported_but_not_required() -> None:
    checks = doctor.privilege_checks(
        privileges(
            cap_eff=ALL_CAPS & ~(1 << doctor.CAP_SYS_NICE), realtime_error="Operation not permitted"
        ),
        needs_tun=True,
    )
    realtime = next(c for c in checks if c.name == "realtime")
    assert not realtime.ok and not realtime.required
    assert "--cap-add SYS_NICE" in realtime.detail
    data = {"checks": [dataclasses.asdict(c) for c in checks]}
    assert doctor.missing(data) == []


def test_missing_lists_required_failures_only() -> None:
    data = {
        "checks": [
            {"name": "root", "ok": True, "detail": "running as root", "required": True},
            {"name": "net_admin", "ok": False, "detail": "no CAP_NET_ADMIN: x", "required": True},
            {"name": "realtime", "ok": False, "detail": "refused", "required": False},
        ]
    }
    assert doctor.missing(data) == ["net_admin: no CAP_NET_ADMIN: x"]


def test_cap_eff_parsed_from_status() -> None:
    status = "Name:\tpython\nCapInh:\t0000000000000000\nCapEff:\t00000000a80425fb\n"
    assert doctor._cap_eff(status) == 0xA80425FB
    assert not doctor.Privileges(0xA80425FB, None, False, (True, ""), None, None).has(
        doctor.CAP_NET_ADMIN
    )


@pytest.mark.root
def test_netem_required_only_when_asked_for() -> None:
    netem_ok = probe_netem()[0]
    asked = doctor.report("netem")
    assert asked["usable"] == netem_ok
    assert [line.split(":")[0] for line in doctor.missing(asked)] == ([] if netem_ok else ["netem"])
    assert doctor.report("userspace")["usable"]

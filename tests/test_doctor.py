"""``testbed doctor``: one line per capability, and the backend ``auto`` will use."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from netem import backends, doctor, topology
from netem.backends.kernel import probe_netem

pytestmark = pytest.mark.timeout(60)

TESTBED = [sys.executable, "-m", "harness.cli"]
CHECK_NAMES = ["root", "namespaces", "veth", "tun", "netem", "congestion_control", "tcpdump"]


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
            {"name": "root", "ok": True, "detail": "running as root"},
            {"name": "netem", "ok": False, "detail": "no sch_netem"},
        ],
        "backend": "userspace",
        "forced_by": None,
    }
    lines = doctor.format_report(data).splitlines()
    assert lines[0].split()[:2] == ["root", "yes"]
    assert lines[1].split()[:2] == ["netem", "no"]
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

""".ci/engine/compose_podman.py: docker-compose.yml's service as podman options, from the
Compose binary's own normalised config, with nothing dropped and nothing written by hand."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parent.parent
SPEC = importlib.util.spec_from_file_location(
    "compose_podman", ROOT / ".ci" / "engine" / "compose_podman.py"
)
assert SPEC is not None and SPEC.loader is not None
cp = importlib.util.module_from_spec(SPEC)
sys.modules["compose_podman"] = cp
SPEC.loader.exec_module(cp)


def option_values(options: list[str], flag: str) -> list[str]:
    return [options[i + 1] for i, o in enumerate(options) if o == flag]


@pytest.fixture(scope="module")
def project() -> dict:
    return cp.compose_config()


def test_every_setting_of_the_compose_file_becomes_an_option(project: dict) -> None:
    name, service = cp.only_service(project)
    run = cp.podman_run(project, name, service)
    opts = run.options
    assert option_values(opts, "--cap-add") == service["cap_add"]
    assert option_values(opts, "--network") == [service["network_mode"]]
    assert [o.replace("=", ":", 1) for o in option_values(opts, "--security-opt")] == [
        o.replace("=", ":", 1) for o in service["security_opt"]
    ]
    assert option_values(opts, "--device") == [
        f"{d['source']}:{d['target']}:{d['permissions']}" for d in service["devices"]
    ]
    assert option_values(opts, "--volume") == [
        f"{v['source']}:{v['target']}" for v in service["volumes"]
    ]
    assert sorted(option_values(opts, "--env")) == sorted(
        f"{k}={v or ''}" for k, v in service["environment"].items()
    )
    assert ("--init" in opts) == bool(service.get("init"))
    assert option_values(opts, "--stop-signal") == [service["stop_signal"]]
    assert run.image == service["image"]
    assert run.command == service["command"]
    assert run.host_dirs == [Path(service["volumes"][0]["source"])]


def test_a_setting_without_translation_is_refused(project: dict) -> None:
    name, service = cp.only_service(project)
    with pytest.raises(cp.Untranslatable, match="privileged"):
        cp.podman_run(project, name, {**service, "privileged": True})
    bad_volume = {**service["volumes"][0], "bind": {"propagation": "rshared"}}
    with pytest.raises(cp.Untranslatable, match=r"bind\.propagation"):
        cp.podman_run(project, name, {**service, "volumes": [bad_volume]})


def test_with_and_without_change_one_value(project: dict) -> None:
    _, service = cp.only_service(project)
    less = cp.change_list(service, "cap_add", "NET_ADMIN", add=False)
    assert "NET_ADMIN" not in less["cap_add"] and "SYS_ADMIN" in less["cap_add"]
    no_tun = cp.change_list(service, "devices", "/dev/net/tun", add=False)
    assert no_tun["devices"] == []
    more = cp.change_list(service, "cap_add", "SYS_PTRACE", add=True)
    assert more["cap_add"][-1] == "SYS_PTRACE"
    with pytest.raises(cp.Untranslatable, match="already"):
        cp.change_list(service, "cap_add", "NET_ADMIN", add=True)
    with pytest.raises(cp.Untranslatable):
        cp.change_list(service, "cap_add", "NET_RAW", add=False)
    with pytest.raises(cp.Untranslatable):
        cp.change_list(service, "environment", "X", add=True)


def test_build_uses_the_compose_build_section(project: dict) -> None:
    _, service = cp.only_service(project)
    argv = cp.podman_build(service, service["image"])
    assert argv[:2] == ["podman", "build"]
    assert argv[argv.index("--file") + 1] == str(ROOT / "Dockerfile")
    assert argv[-1] == str(ROOT)


@pytest.mark.parametrize(
    ("text", "seconds"), [("1m0s", 60.0), ("1.5s", 1.5), ("1h2m3s", 3723.0), ("500ms", 0.5)]
)
def test_go_durations(text: str, seconds: float) -> None:
    assert cp.go_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1x", "m", "1m 2s"])
def test_bad_durations_refused(text: str) -> None:
    with pytest.raises(cp.Untranslatable):
        cp.go_duration_s(text)

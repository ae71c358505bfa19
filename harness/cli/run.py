"""``testbed run``, ``testbed campaign`` and ``testbed report``.

``testbed campaign`` reads its defaults from the environment so that the docker compose
file can drive it: ``TESTBED_PROFILE`` (quick, full, chapter, chapter-quick,
chapter-full), else
``TESTBED_QUICK`` (1/true/yes), ``TESTBED_EXPERIMENTS`` (comma-separated names),
``TESTBED_REPS``, ``TESTBED_ATTEMPTS``, ``TESTBED_BACKEND`` and ``TESTBED_OUTPUT``; flags
(``--quick``, ``--chapter``, ``--full``) win.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from harness.campaign.lanes import DEFAULT_LANES
from harness.cli.check import file_form
from harness.plan.planner import DEFAULT_ATTEMPTS
from harness.spec import experiment as specmod
from tbcore import paths, stopping
from tbcore.control import check_address
from tbcore.errors import SpecError
from tbcore.units import parse_count

ENV_EXPERIMENTS = "TESTBED_EXPERIMENTS"
ENV_REPS = "TESTBED_REPS"
ENV_ATTEMPTS = "TESTBED_ATTEMPTS"
ENV_BACKEND = "TESTBED_BACKEND"
ENV_QUICK = "TESTBED_QUICK"
ENV_OUTPUT = "TESTBED_OUTPUT"
ENV_PROFILE = "TESTBED_PROFILE"

PROFILES = {
    "quick": ("quick", False),
    "full": ("full", False),
    "chapter": ("chapter", True),
    "chapter-quick": ("quick", True),
    "chapter-full": ("full", True),
}
"""``TESTBED_PROFILE`` (what ``docker compose up`` runs): name -> (the form each file runs
in, the chapter's experiments only). ``quick`` is the main job; ``chapter`` the chapter's
signed reproduction (``testbed campaign --chapter``: each file's ``[chapter]`` form),
``chapter-quick`` its indicative form, ``-full`` the files as written."""

EXIT_MISSING = 2
"""Exit status when the host or container lacks a privilege the testbed needs."""

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("", "0", "false", "no", "off")


def env_bool(name: str, environ: dict[str, str] | None = None) -> bool:
    value = (environ if environ is not None else os.environ).get(name, "").strip().lower()
    if value in TRUE_WORDS:
        return True
    if value in FALSE_WORDS:
        return False
    raise SpecError(name, f"{value!r} is not a yes/no value (1, 0, true, false)")


def env_int(name: str, environ: dict[str, str] | None = None) -> int | None:
    value = (environ if environ is not None else os.environ).get(name, "").strip()
    return parse_count(name, value) if value else None


def _path(text: str) -> str:
    """A path flag: never empty (an empty path would silently mean the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path")
    if "\0" in text:
        raise argparse.ArgumentTypeError("a path with a NUL byte")
    return text


def _reps(text: str) -> int:
    try:
        return parse_count("reps", text)
    except SpecError as err:
        raise argparse.ArgumentTypeError(err.reason) from None


def _attempts(text: str) -> int:
    try:
        value = parse_count("attempts", text)
    except SpecError as err:
        raise argparse.ArgumentTypeError(err.reason) from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _lanes(text: str) -> int:
    from harness.run.lock import SHARE_SLOTS

    try:
        value = parse_count("lanes", text)
    except SpecError as err:
        raise argparse.ArgumentTypeError(err.reason) from None
    if not 1 <= value <= SHARE_SLOTS:
        raise argparse.ArgumentTypeError(
            f"must be 1 to {SHARE_SLOTS} (the host's sharing slots, harness.run.lock)"
        )
    return value


def _add_attempts(parser: argparse.ArgumentParser, env: str | None = None) -> None:
    parser.add_argument(
        "--attempts",
        type=_attempts,
        default=None if env else DEFAULT_ATTEMPTS,
        help=f"attempts per planned run: an invalid run is made again up to this many "
        f"times in all (default {DEFAULT_ATTEMPTS}" + (f"; env: {env})" if env else ")"),
    )


def attempts_of(args: argparse.Namespace, environ: dict[str, str] | None = None) -> int:
    """``--attempts``, else ``TESTBED_ATTEMPTS``, else the default."""

    if args.attempts is not None:
        return args.attempts
    return env_int(ENV_ATTEMPTS, environ) or DEFAULT_ATTEMPTS


class RichProgress:
    """The progress bar of a run: run id, level, ETA (rich); plain lines when not a tty."""

    def __init__(self, label: str, console: Any = None) -> None:
        self.console = console or Console(stderr=True)
        self.label = label
        self.progress: Any = None
        self.task: Any = None
        self.invalid = 0

    def note(self, message: str) -> None:
        """A line of the harness's own (waiting for the host's run lock, an invalid attempt)
        above the bar."""
        console = self.progress.console if self.progress is not None else self.console
        console.print(f"  {message}", markup=False, highlight=False)

    def __call__(self, what: str, run: Any, data: dict[str, Any] | None) -> None:
        if what == "plan":
            assert data is not None
            self.console.print(
                f"[bold]{self.label}[/]: {data['left']} of {data['total']} runs to make "
                f"-> {data['dir']}"
            )
            self.progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                TextColumn("elapsed"),
                TimeElapsedColumn(),
                console=self.console,
                transient=False,
            )
            self.progress.start()
            self.task = self.progress.add_task(
                self.label, total=data["total"], completed=data["total"] - data["left"]
            )
        elif what == "start" and self.progress is not None:
            self.progress.update(
                self.task, description=f"{self.label} run {run.run_id} level {run.level}"
            )
        elif what in ("done", "retry") and self.progress is not None:
            assert data is not None
            total = data.get("total_s")
            status = "valid" if data.get("valid") else f"INVALID ({data.get('invalid_reason')})"
            ratio = data.get("ratio")
            disturbance = data.get("disturbance_s")
            self.progress.console.print(
                f"  {run.run_id}: "
                + (f"{total * 1e3:.1f} ms" if isinstance(total, float) else "no time")
                + (f", ratio {ratio:.3f}" if isinstance(ratio, float) else "")
                + (f", disturbance {disturbance * 1e3:.2f} ms" if disturbance else "")
                + f", {status}"
                + (", again" if what == "retry" else "")
            )
            self.invalid += 0 if data.get("valid") else 1
            if what == "done":
                self.progress.advance(self.task)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def _terminate_cleanly() -> None:
    """SIGTERM (``docker stop``, a CI timeout) unwinds like Ctrl-C: the link comes down, the
    finished runs stay, and ``--resume`` continues from there. Both are noted as well as
    raised (tbcore.stopping), so an interrupt a finaliser swallowed still stops the next run;
    a SIGINT the harness was started ignoring (a background job) stays ignored."""
    wanted = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        wanted.append(signal.SIGINT)
    stopping.install(wanted)


def _check_early(backend: str, link_name: str | None) -> None:
    """What can be refused before anything exists: the backend (and TESTBED_BACKEND), the
    link name."""
    from netem import backends, names

    backends.check_choice(backend)
    if link_name is not None:
        names.check_link_name(link_name)


def _reap(command: str, link_name: str | None) -> None:
    """Before anything is created: the links of runs that died (SIGKILL) go, and a link
    name a living link holds is refused here rather than after an empty result directory."""
    from netem import clean
    from netem.link import check_name_free

    with clean.reaped() as lines:
        for line in lines:
            print(f"testbed {command}: reaped {line}", file=sys.stderr)
        if link_name is not None:
            check_name_free(link_name)


def _preflight(command: str, backend: str) -> bool:
    """Before anything is created: one line per piece this host or container lacks."""
    from netem import doctor

    lines = doctor.missing(doctor.report(backend))
    for line in lines:
        print(f"testbed {command}: error: {line}", file=sys.stderr)
    return not lines


def _run(args: argparse.Namespace) -> int:
    from harness.campaign.experiment import run_reported

    _terminate_cleanly()
    if args.cluster is not None or args.hosts is not None:
        return _run_cluster(args)
    remote = _remote_of(args)
    if remote is None:
        _check_early(args.backend, args.link_name)
        if not _preflight("run", args.backend):
            return EXIT_MISSING

    if remote is None:
        _reap("run", args.link_name)

    spec = _load(args)
    if args.resume is not None and args.output is not None:
        raise SpecError("resume", "give --resume DIR or --output DIR, not both")
    if args.resume is None:
        paths.check_writable_dir(
            "output", Path(args.output or os.environ.get(ENV_OUTPUT) or "results")
        )
    progress = RichProgress(spec.name)
    try:
        result = run_reported(
            spec, progress=progress, log=progress.note, **_run_options(args, remote)
        )
    finally:
        progress.close()
    _print_answer(result.result.path)
    print(result.result.path / "report.md")
    return _no_valid_status(result.result.path)


def _load(args: argparse.Namespace) -> Any:
    """The experiment of ``testbed run``, in the form ``--quick`` or ``--chapter`` asks, with
    ``--reps``."""
    spec = specmod.load(args.experiment).in_form(file_form(args))
    if args.reps is not None:
        spec = spec.with_repetitions(args.reps)
    return spec


@contextlib.contextmanager
def _cluster(args: argparse.Namespace) -> Iterator[tuple[str, Any]]:
    """The scheduler's address and a client of it (None: connect to ``--cluster``), with
    ``--hosts`` an SSHCluster started for the command and closed after it."""
    if args.hosts is None:
        yield args.cluster, None
        return
    if args.cluster is not None:
        raise SpecError("hosts", "give --cluster ADDRESS or --hosts h1,h2, not both")
    from distributed import Client

    from harness.cluster.ssh import parse_hosts, start_ssh_cluster

    hosts = parse_hosts(args.hosts)
    print(f"testbed: starting a scheduler on {hosts[0]} and a worker on each of "
          f"{', '.join(hosts)} (ssh)", file=sys.stderr)  # fmt: skip
    with start_ssh_cluster(
        hosts, ssh_config=args.ssh_config, remote_python=args.remote_python
    ) as cluster, Client(cluster, set_as_default=False) as client:  # fmt: skip
        yield str(cluster.scheduler_address), client


def _check_cluster_flags(args: argparse.Namespace) -> None:
    for flag in ("remote", "link_name"):
        if getattr(args, flag, None) is not None:
            raise SpecError(flag, "not with --cluster/--hosts (each worker makes its own links)")
    if getattr(args, "lanes", None) is not None:
        raise SpecError("lanes", "not with --cluster/--hosts (the workers make the blocks)")
    if args.remote_python is not None and args.hosts is None:
        raise SpecError("remote_python", "only with --hosts")


def _run_cluster(args: argparse.Namespace) -> int:
    """``testbed run FILE --cluster ADDRESS`` (or ``--hosts``): the blocks on a Dask
    cluster's workers (harness.cluster); this host only plans, gathers and reports."""
    from harness.cluster.experiment import run_on_cluster
    from harness.cluster.submit import ClusterOptions
    from netem import backends

    _check_cluster_flags(args)
    backends.check_choice(args.backend)
    spec = _load(args)
    if args.resume is not None and args.output is not None:
        raise SpecError("resume", "give --resume DIR or --output DIR, not both")
    output = Path(args.output or os.environ.get(ENV_OUTPUT) or "results")
    if args.resume is None:
        paths.check_writable_dir("output", output)
    with _cluster(args) as (address, client):
        options = ClusterOptions(address=address, backend=args.backend, attempts=args.attempts)
        result = run_on_cluster(
            spec,
            options,
            output=output,
            resume=Path(args.resume) if args.resume else None,
            argv=sys.argv,
            client=client,
        )
    _print_answer(result.result.path)
    print(result.result.path / "report.md")
    if not result.result.read_manifest().get("finished"):
        print(f"not every block was made: testbed run {args.experiment} --cluster "
              f"ADDRESS --resume {result.result.path}", file=sys.stderr)  # fmt: skip
        return 1
    return _no_valid_status(result.result.path)


def _run_options(args: argparse.Namespace, remote: Any) -> dict[str, Any]:
    """run_experiment's keywords from ``testbed run``'s flags (``remote``: :func:`_remote_of`)."""
    return {
        "output": Path(args.output or os.environ.get(ENV_OUTPUT) or "results"),
        "backend": args.backend,
        "resume": Path(args.resume) if args.resume else None,
        "argv": sys.argv,
        "link_name": args.link_name,
        "attempts": args.attempts,
        "remote": remote,
    }


def _remote_of(args: argparse.Namespace) -> Any:
    """``--remote``'s host and options (None without it), checked before anything starts."""
    if args.remote is None:
        for flag in ("remote_addr", "ssh_config", "remote_command"):
            if getattr(args, flag) is not None:
                raise SpecError(flag, "only with --remote HOST")
        return None
    from harness.run.remote.channel import DEFAULT_REMOTE_COMMAND, RemoteHost
    from harness.run.remote.path import RemoteRun
    from harness.run.remote.pathprobe import ProbePlan

    if args.remote_addr is not None:
        check_address(args.remote_addr, "remote_addr")
    command = args.remote_command or DEFAULT_REMOTE_COMMAND
    host = RemoteHost(args.remote, command, ssh_config=args.ssh_config)
    plan = ProbePlan.quick() if args.quick else ProbePlan()
    return RemoteRun(host, args.remote_addr, plan)


def _no_valid_status(path: Path) -> int:
    """1 (with a line on stderr) when some level ended without a valid measured run: the
    experiment then answers nothing for it; 0 otherwise."""
    from harness.analysis import levels as analysis
    from harness.store.resultdir import ResultDir

    empty = analysis.levels_without_valid(ResultDir.open(path).frame())
    if empty:
        print(
            f"no valid run for level(s) {', '.join(empty)}: see {path / 'report.md'}",
            file=sys.stderr,
        )
        return 1
    return 0


def _print_answer(path: Path) -> None:
    """The report's answer section on the terminal (the rest is in report.md)."""
    report = path / "report.md"
    if not report.is_file():
        return
    text = report.read_text(encoding="utf-8")
    start = text.find("## Answer")
    end = text.find("## ", start + 3)
    if start >= 0:
        print(text[start:end].strip().replace("**", ""))


def _campaign_cluster(args: argparse.Namespace) -> int:
    """``testbed campaign ... --cluster ADDRESS`` (or ``--hosts``): every experiment's blocks
    at once over the cluster's workers (harness.cluster.campaign)."""
    from harness.cluster.campaign import run_campaign_on_cluster
    from harness.cluster.submit import ClusterOptions
    from netem import backends

    _check_cluster_flags(args)
    backend = args.backend or os.environ.get(ENV_BACKEND) or "auto"
    backends.check_choice(backend)
    names = args.experiments or os.environ.get(ENV_EXPERIMENTS) or None
    output = Path(args.output or os.environ.get(ENV_OUTPUT) or "results")
    if args.resume is None:
        paths.check_writable_dir("output", output)
    form, chapter = campaign_profile(args)
    started = time.monotonic()
    with _cluster(args) as (address, client):
        summary = run_campaign_on_cluster(
            experiments_dir=Path(args.experiments_dir),
            names=None if names is None else [n.strip() for n in names.split(",") if n.strip()],
            reps=args.reps if args.reps is not None else env_int(ENV_REPS),
            form=form,
            chapter=chapter,
            options=ClusterOptions(address, backend, attempts_of(args)),
            output=output,
            resume=Path(args.resume) if args.resume else None,
            argv=sys.argv,
            client=client,
        )
    for line in summary.lines():
        print(line)
    print(f"campaign: {time.monotonic() - started:.0f} s, index {summary.index_path}")
    return 0 if summary.ok else 1


def _campaign(args: argparse.Namespace) -> int:
    from harness.campaign.serial import run_campaign

    _terminate_cleanly()
    if args.cluster is not None or args.hosts is not None:
        return _campaign_cluster(args)
    names = args.experiments
    if names is None:
        names = os.environ.get(ENV_EXPERIMENTS) or None
    reps = args.reps if args.reps is not None else env_int(ENV_REPS)
    backend = args.backend or os.environ.get(ENV_BACKEND) or "auto"
    _check_early(backend, args.link_name)
    form, chapter = campaign_profile(args)
    output = Path(args.output or os.environ.get(ENV_OUTPUT) or "results")
    if args.resume is None:
        paths.check_writable_dir("output", output)

    if not _preflight("campaign", backend):
        return EXIT_MISSING
    _reap("campaign", args.link_name)
    started = time.monotonic()
    summary = run_campaign(
        experiments_dir=Path(args.experiments_dir),
        names=None if names is None else [n.strip() for n in names.split(",") if n.strip()],
        reps=reps,
        form=form,
        backend=backend,
        output=output,
        resume=Path(args.resume) if args.resume else None,
        progress_factory=RichProgress,
        link_name=args.link_name,
        attempts=attempts_of(args),
        chapter=chapter,
        lanes=DEFAULT_LANES if args.lanes is None else args.lanes,
    )
    for line in summary.lines():
        print(line)
    print(f"campaign: {time.monotonic() - started:.0f} s, index {summary.index_path}")
    report = summary.index_path.parent / "index.html"
    if report.is_file():
        print(f"reproduction report: {report}")
    return 0 if summary.ok else 1


def campaign_profile(
    args: argparse.Namespace, environ: dict[str, str] | None = None
) -> tuple[str, bool]:
    """(the form each file runs in, the chapter's experiments only) from the flags, else
    ``TESTBED_PROFILE``, else ``TESTBED_QUICK``. ``--chapter`` alone is the signed form."""
    env = environ if environ is not None else os.environ
    if args.full and args.quick:
        raise SpecError("full", "give --quick or --full, not both")
    if args.full and not args.chapter:
        raise SpecError("full", "only with --chapter (a campaign is full unless --quick)")
    if args.chapter:
        return ("quick" if args.quick else "full" if args.full else "chapter"), True
    if args.quick:
        return "quick", False
    profile = env.get(ENV_PROFILE, "").strip()
    if profile:
        if profile not in PROFILES:
            raise SpecError(ENV_PROFILE, f"{profile!r} is not one of {', '.join(PROFILES)}")
        return PROFILES[profile]
    return ("quick" if env_bool(ENV_QUICK, dict(env)) else "full"), False


def _report(args: argparse.Namespace) -> int:
    from harness.report.build import build_report
    from harness.store.resultdir import ResultDir

    path = Path(args.directory)
    if (path / "campaign.json").is_file():
        if args.recollect:
            raise SpecError(
                "recollect",
                "give an experiment's result directory: a campaign's runs are in its "
                "experiments' directories (campaign.json lists them)",
            )
        return _campaign_report(path)
    if not (path / "manifest.json").is_file():
        raise SpecError(
            "directory",
            f"{path} has neither manifest.json nor campaign.json: not a result or campaign "
            "directory",
        )
    result = ResultDir.open(path)
    note = result.repair_tables()
    if note is not None:
        print(f"testbed report: {note}", file=sys.stderr)
    if args.recollect:
        from harness.collect.refill import refill

        print(f"testbed report: recollect: {refill(result).line()}", file=sys.stderr)
    result.write_empty_columns()  # why each empty column is, by this version's rules
    print(build_report(path))
    return 0


def _campaign_report(path: Path) -> int:
    """Rebuild a campaign's reproduction report from its experiments' runs (the verdicts
    follow the data); exit 1 when a row is an error."""
    from harness.report import reproduction

    written = reproduction.write_reproduction(path)
    errors = reproduction.error_rows(path)
    for row in errors:
        print(f"testbed report: error row {row.get('id')}: {row.get('reason')}", file=sys.stderr)
    print(written["md"])
    return 1 if errors else 0


def _add_cluster(parser: argparse.ArgumentParser) -> None:
    """``--cluster``, ``--hosts`` and ``--remote-python`` (harness.cluster)."""
    parser.add_argument(
        "--cluster",
        default=None,
        metavar="ADDRESS",
        help="make the blocks on the workers of the Dask scheduler at ADDRESS "
        "(tcp://host:8786; workers started with --resources testbed=1)",
    )
    parser.add_argument(
        "--hosts",
        default=None,
        metavar="H1,H2",
        help="start a Dask cluster over ssh: the scheduler on H1, a worker on each host",
    )
    parser.add_argument(
        "--remote-python",
        default=None,
        metavar="PATH",
        help="with --hosts: the testbed's Python on the hosts (default: this one's path)",
    )


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``run``, ``campaign`` and ``report`` to ``testbed``."""
    run = commands.add_parser("run", help="run one experiment file (runs in alternation)")
    run.add_argument("experiment", help="experiments/NAME.toml")
    run.add_argument("--reps", type=_reps, default=None, help="repetitions (overrides the file)")
    run.add_argument("--quick", action="store_true", help="the file's short [quick] form")
    run.add_argument(
        "--chapter", action="store_true", help="the file's [chapter] form (the signed reproduction)"
    )
    run.add_argument(
        "--backend", default="auto", help="link backend: auto, userspace, netem (default auto)"
    )
    run.add_argument("--output", type=_path, default=None, help="results root (default results/)")
    run.add_argument(
        "--resume", type=_path, default=None, metavar="DIR",
        help="continue the result directory DIR",
    )  # fmt: skip
    run.add_argument("--link-name", default=None, help="name of the link to build (default r<pid>)")
    _add_attempts(run)
    run.add_argument(
        "--remote",
        default=None,
        metavar="HOST",
        help="the server on HOST over ssh, across the real path (measured, not emulated)",
    )
    run.add_argument("--remote-addr", default=None, help="HOST's address for the data "
                     "(default: the one ssh reached)")  # fmt: skip
    run.add_argument(
        "--remote-command", default=None, help="the testbed command on HOST (default testbed)"
    )
    run.add_argument("--ssh-config", default=None, metavar="FILE", help="ssh -F FILE")
    _add_cluster(run)
    run.set_defaults(handler=_run)

    campaign = commands.add_parser(
        "campaign",
        help="run every shipped experiment (env: TESTBED_PROFILE, TESTBED_EXPERIMENTS, "
        "TESTBED_REPS, TESTBED_ATTEMPTS, TESTBED_BACKEND, TESTBED_QUICK)",
    )
    campaign.add_argument(
        "--quick", action="store_true", help="short [quick] forms (indicative; with --chapter too)"
    )
    campaign.add_argument(
        "--chapter",
        action="store_true",
        help="every experiment that reproduces a section of the chapter, in its order, each in "
        "its [chapter] form (the signed reproduction; --quick: indicative); the reproduction "
        "report beside the index",
    )
    campaign.add_argument(
        "--full", action="store_true", help="with --chapter: the full forms (a lab machine)"
    )
    campaign.add_argument("--experiments", default=None, help="names, comma-separated")
    campaign.add_argument("--reps", type=_reps, default=None)
    campaign.add_argument("--backend", default=None)
    campaign.add_argument("--output", type=_path, default=None)
    campaign.add_argument(
        "--resume", type=_path, default=None, metavar="DIR", help="continue a campaign directory"
    )
    campaign.add_argument("--link-name", default=None, help="link name (default r<pid>)")
    campaign.add_argument(
        "--experiments-dir",
        default=str(Path(__file__).resolve().parents[2] / "experiments"),
        help="where the experiment files are",
    )
    _add_attempts(campaign, ENV_ATTEMPTS)
    campaign.add_argument(
        "--lanes",
        type=_lanes,
        default=None,
        help="experiments whose runs sleep most of their time (agent rounds) run after the "
        "others, this many at a time, each run judged for what its neighbours cost it "
        "(default 3; 1: one at a time)",
    )
    _add_cluster(campaign)
    campaign.add_argument("--ssh-config", default=None, metavar="FILE", help="ssh -F FILE")
    campaign.set_defaults(handler=_campaign)

    report = commands.add_parser(
        "report",
        help="(re)write report.md and plots of a result dir, or a campaign's reproduction report",
    )
    report.add_argument("directory", type=_path)
    report.add_argument(
        "--recollect",
        action="store_true",
        help="first add to each run's row the columns this version collects from the run's "
        "files and the row lacks (nothing it was judged on changes)",
    )
    report.set_defaults(handler=_report)

"""Bad input of every kind (issue 17): the commands that used to end in a traceback, and a
hypothesis fuzz over link strings, experiment files and flags. Every refusal is one line on
stderr, exit status 2, no traceback, and nothing created.

The listed commands run as real subprocesses in an empty working directory; the fuzz calls
``harness.cli.main`` in-process (a subprocess per example would take minutes), with the two
calls that would start real work when an input happens to be valid (``serve``'s event loop,
``run``'s experiment) replaced by a marker, since what is tested is the refusal in front.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import cli
from netem import names
from netem.linkspec import LINK_KEYS, PRESETS, resolve_link
from tbcore.errors import MAX_FIELD_CHARS, MAX_REASON_CHARS, SpecError

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parent.parent
EXPERIMENT = (REPO / "experiments" / "connection.toml").read_text(encoding="utf-8")
ONE_LINE_MAX_CHARS = MAX_FIELD_CHARS + MAX_REASON_CHARS + 200
"""Prefix, field and reason of the longest one-line error (the parts are clipped)."""
LINK_NAME = "abfz"
"""A link this test would make if a refusal failed (this developer's tag)."""


def _links() -> set[str]:
    """This test's link traces (other developers' links come and go meanwhile)."""
    directory = names.STATE_DIR / "links"
    if not directory.is_dir():
        return set()
    return {p.name for p in directory.iterdir() if p.name.split(".")[0] == LINK_NAME}


def _experiment(tmp_path: Path, data: bytes | str, name: str = "x.toml") -> Path:
    path = tmp_path / "in" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def _with(fixed_line: str) -> str:
    """The shipped experiment with one more line in its [fixed] table."""
    return EXPERIMENT.replace("[fixed]\n", f"[fixed]\n{fixed_line}\n", 1)


def _run_cases(tmp: Path, write: bool = True) -> Iterator[tuple[str, list[str], dict[str, str]]]:
    out = str(tmp / "out")
    run = ["run", "--link-name", LINK_NAME, "--output", out]

    def exp(data: bytes | str, name: str = "x.toml") -> str:
        return str(_experiment(tmp, data, name) if write else tmp / name)

    def edited(old: str, new: str, name: str) -> str:
        """The shipped experiment with ``old`` replaced by ``new``, as file ``name``."""
        return exp(EXPERIMENT.replace(old, new), name)

    valid = exp(EXPERIMENT, "valid.toml")
    yield "random bytes", [*run, exp(bytes(range(256)) * 4, "r.toml")], {}
    yield "non-UTF-8 comment", [*run, exp(b'# \xff\xfe\nname = "x"\n', "c.toml")], {}
    yield "non-UTF-8 value", [*run, exp(_with('workload = "\xe9"').encode("latin-1"), "v.toml")], {}
    yield "UTF-16 with BOM", [*run, exp(EXPERIMENT.encode("utf-16"), "u16.toml")], {}
    yield "nested 5000 deep", [*run, exp("x = " + "[" * 5000 + "]" * 5000, "n.toml")], {}
    yield "output /proc/x", ["run", "--link-name", LINK_NAME, "--output", "/proc/x", valid], {}
    yield "output /dev/null", ["run", "--link-name", LINK_NAME, "--output", "/dev/null", valid], {}
    yield (
        "output /etc/hostname",
        ["run", "--link-name", LINK_NAME, "--output", "/etc/hostname", valid],
        {},
    )
    yield "sndbuf 1e30b", [*run, exp(_with('sndbuf = "1e30b"'), "s.toml")], {}
    yield "sndbuf over int", [*run, exp(_with('sndbuf = "3gb"'), "s2.toml")], {}
    yield "full-width digits", [*run, edited("rtt=200ms", "rtt=２００ms", "fw.toml")], {}
    yield "empty link", [*run, edited('"rtt=200ms,rate=333mbit"', '",,,,"', "e.toml")], {}
    yield "rate 1e30bit", [*run, edited("rate=333mbit", "rate=1e30bit", "r1.toml")], {}
    yield "rate 0.5bit", [*run, edited("rate=333mbit", "rate=0.5bit", "r2.toml")], {}
    yield "rtt 1e12s", [*run, edited("rtt=200ms", "rtt=1e12s", "r3.toml")], {}
    yield "queue 1e30b", [*run, edited("rate=333mbit", "rate=333mbit,queue=1e30b", "q.toml")], {}
    yield "processing 1e300s", [*run, edited('"30ms"', '"1e300s"', "p.toml")], {}
    yield "timeout 1e300s", [*run, exp(_with('timeout = "1e300s"'), "t.toml")], {}
    yield (
        "sysctl with a space",
        [*run, exp(EXPERIMENT + '\n[fixed.sysctls]\n"net.ipv4.tcp sack" = 1\n', "sy.toml")],
        {},
    )
    yield (
        "baseline itself",
        [*run, edited('baseline = "h2-new"', 'baseline = "h2-reused"', "b.toml")],
        {},
    )
    yield "100 kB key", [*run, exp(_with("k" * 100_000 + " = 1"), "k.toml")], {}
    yield "TESTBED_BACKEND=bogus", [*run, valid], {"TESTBED_BACKEND": "bogus"}
    yield "serve bind 999.1.1.1", ["serve", "--bind", "999.1.1.1"], {}
    yield "serve bind 192.0.2.1", ["serve", "--bind", "192.0.2.1"], {}
    yield "serve sndbuf", ["serve", "--sndbuf", "1e30b"], {}
    yield "serve rcvbuf", ["serve", "--rcvbuf", "99999999999"], {}
    yield "serve window-clamp", ["serve", "--window-clamp", "3gb"], {}
    yield "serve log /proc/x/y", ["serve", "--log", "/proc/x/y"], {}
    yield "serve cert-dir /proc/x", ["serve", "--cert-dir", "/proc/x"], {}
    yield "link up full-width", ["link", "up", LINK_NAME, "rtt=２００ms"], {}
    yield "link up empty", ["link", "up", LINK_NAME, ",,,,"], {}


CASE_NAMES = [name for name, _, _ in _run_cases(Path("/nonexistent"), write=False)]


@pytest.mark.parametrize("case", CASE_NAMES)
def test_listed_bad_inputs_are_one_line_and_exit_2(case: str, tmp_path: Path) -> None:
    (name, argv, env) = next(c for c in _run_cases(tmp_path) if c[0] == case)
    work = tmp_path / "work"
    work.mkdir()
    links = _links()
    result = subprocess.run(
        [sys.executable, "-m", "harness.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=work,
        env={**os.environ, **env, "PYTHONPATH": str(REPO)},
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (name, result.returncode, result.stderr[-2000:])
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len(lines[0]) <= ONE_LINE_MAX_CHARS
    assert list(work.iterdir()) == [], "something was created in the working directory"
    assert not (tmp_path / "out").exists(), "a result directory was created"
    assert _links() == links, "a link was created"


# --- fuzz --------------------------------------------------------------------------------

FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
"""Deterministic and bounded: a few seconds per property on this machine."""

LINK_ALPHABET = "rtlosqudwnpeyibkmgMG.=,%/ _-0123456789２９eE+µ"
link_words = st.sampled_from([*LINK_KEYS, *(f"up.{k}" for k in LINK_KEYS), *PRESETS, "x"])
link_values = st.text(alphabet=LINK_ALPHABET, max_size=12)
link_strings = st.one_of(
    st.text(max_size=60),
    st.text(alphabet=LINK_ALPHABET, max_size=60),
    st.lists(st.tuples(link_words, link_values), max_size=5).map(
        lambda items: ",".join(f"{k}={v}" for k, v in items)
    ),
)


def _one_line(err: SpecError) -> None:
    text = str(err)
    assert "\n" not in text and len(text) <= MAX_FIELD_CHARS + MAX_REASON_CHARS + 60


@FUZZ
@given(text=link_strings)
def test_fuzz_link_strings(text: str) -> None:
    try:
        resolve_link(text)
    except SpecError as err:
        _one_line(err)


class WouldStart(Exception):
    """Raised in place of real work: the input passed every check."""


@pytest.fixture
def no_real_work(monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.cli.run
    import harness.run.runner
    import servers.serve

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise WouldStart

    monkeypatch.setattr(harness.run.runner, "run_experiment", refuse)
    monkeypatch.setattr(harness.cli.run, "_terminate_cleanly", lambda: None)
    monkeypatch.setattr(servers.serve, "run", refuse)


def _main_refuses(argv: list[str], capsys: pytest.CaptureFixture[str]) -> bool:
    """Run ``testbed ARGV`` in-process: True if it refused (exit 2, one line), False if the
    input was valid; anything else (a traceback) fails the test."""
    try:
        status = cli.main(argv)
    except WouldStart:
        capsys.readouterr()
        return False
    except SystemExit as exit_:  # argparse
        status = exit_.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert status == 2, (argv, status, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert len(lines[0]) <= ONE_LINE_MAX_CHARS
    return True


toml_values = st.one_of(
    st.text(max_size=20).map(lambda t: '"' + t.replace("\\", "").replace('"', "") + '"'),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["true", "[]", "{}", "1e999", "nan", "-inf", '"1e30b"', '"1e300s"']),
)
setting_keys = st.sampled_from(
    [
        "link",
        "sndbuf",
        "rcvbuf",
        "window_clamp",
        "timeout",
        "processing_audio",
        "requests",
        "h2_window",
        "quic_pacing",
        "max_pacing_rate",
        "mss",
        "initcwnd",
        "workload",
        "zz",
    ]
)
experiment_files = st.one_of(
    st.binary(max_size=300),
    st.tuples(setting_keys, toml_values).map(lambda kv: _with(f"{kv[0]} = {kv[1]}").encode()),
    st.integers(min_value=1, max_value=3000).map(lambda n: ("x = " + "[" * n + "]" * n).encode()),
    st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
)


@FUZZ
@given(data=experiment_files)
def test_fuzz_experiment_files(
    data: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_real_work: None
) -> None:
    path = tmp_path / "fuzz.toml"
    path.write_bytes(data)
    out = tmp_path / "out-fuzz"
    if _main_refuses(["run", str(path), "--output", str(out), "--link-name", LINK_NAME], capsys):
        assert not out.exists()


serve_flags = st.sampled_from(
    [
        "--bind",
        "--sndbuf",
        "--rcvbuf",
        "--window-clamp",
        "--max-pacing-rate",
        "--h2-window",
        "--quic-max-data",
        "--idle-timeout",
        "--head-timeout",
        "--processing-audio",
        "--max-body",
        "--max-connections",
        "--retry-threshold",
        "--quic-pacing",
        "--max-datagram-size",
        "--h2-port",
        "--sample-hz",
    ]
)
flag_values = st.one_of(
    st.text(max_size=20),
    st.text(alphabet="0123456789.eE+-kmgbitsKMG%２", max_size=12),
    st.sampled_from(["1e30b", "1e300s", "-1", "0", "nan", "inf", "1" * 400, "999.1.1.1"]),
)


@FUZZ
@given(flag=serve_flags, value=flag_values)
def test_fuzz_serve_flags(
    flag: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_real_work: None
) -> None:
    before = set(tmp_path.iterdir())
    _main_refuses(["serve", "--h2-port", "0", "--h3-port", "0", f"{flag}={value}"], capsys)
    assert set(tmp_path.iterdir()) == before


run_flags = st.sampled_from(["--reps", "--backend", "--link-name", "--output"])


@FUZZ
@given(flag=run_flags, value=flag_values)
def test_fuzz_run_flags(
    flag: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_real_work: None
) -> None:
    experiment = REPO / "experiments" / "connection.toml"
    argv = ["run", str(experiment), f"{flag}={value}"]
    if flag != "--output":
        argv += ["--output", str(tmp_path / "out-run")]
    if flag != "--link-name":
        argv += ["--link-name", LINK_NAME]
    _main_refuses(argv, capsys)
    assert not (tmp_path / "out-run").exists()

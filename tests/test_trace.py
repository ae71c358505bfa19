"""Trace files: Mahimahi's capacity format and delay traces, parsed, checked and hashed."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from netem import trace
from netem.trace import (
    OPPORTUNITY_BYTES,
    CapacityTrace,
    TraceFile,
    open_trace,
    parse_capacity,
    parse_delay,
)
from tbcore.errors import SpecError


def capacity(text: str) -> CapacityTrace:
    return parse_capacity(text.encode(), "t")


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


# --- capacity: where the opportunities fall --------------------------------------------


def test_one_line_trace_is_twelve_megabit_one_packet_a_millisecond() -> None:
    t = capacity("1\n")
    assert (t.count, t.period_ms) == (1, 1)
    assert t.mean_rate_bps == 12e6  # docs/models.md section 14
    assert [t.time_ms(k) for k in range(4)] == [1, 2, 3, 4]


def test_repeated_stamps_are_several_opportunities_and_the_wrap_adds_the_last_stamp() -> None:
    t = capacity("0\n0\n5\n")
    # mm-link: base += last stamp at each wrap: 0 0 5 | 5 5 10 | 10 10 15
    assert [t.time_ms(k) for k in range(9)] == [0, 0, 5, 5, 5, 10, 10, 10, 15]
    assert t.mean_rate_bps == 3 * OPPORTUNITY_BYTES * 8 / 0.005


@pytest.mark.parametrize(
    ("position_ms", "k"),
    [(-3.0, 0), (0.0, 0), (0.5, 2), (5.0, 2), (5.001, 5), (9.9, 5), (10.0, 5), (10.5, 8)],
)
def test_first_opportunity_at_or_after_a_position(position_ms: float, k: int) -> None:
    t = capacity("0\n0\n5\n")
    assert t.first_at_or_after(position_ms) == k
    assert t.time_ms(k) >= position_ms
    assert k == 0 or t.time_ms(k - 1) < position_ms


def test_opportunities_between_count_half_open_windows_across_wraps() -> None:
    t = capacity("2\n3\n10\n")  # 2 3 10 | 12 13 20 | 22 23 30
    assert t.opportunities_between(0, 10) == 2
    assert t.opportunities_between(0, 10.0001) == 3
    assert t.opportunities_between(10, 30) == 6
    assert t.opportunities_between(0, 1000) == 299  # the one at 1000 is outside
    assert t.opportunities_between(5, 5) == 0


def test_surrounding_blanks_and_crlf_are_read() -> None:
    assert list(capacity(" 1\r\n2 \r\n").stamps_ms) == [1, 2]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", ("empty", "no opportunity")),
        ("\n\n", ("empty",)),
        ("1\n\n2\n", ("line 2", "empty")),
        ("1\n2\n\n", ("line 3", "empty")),
        ("1\nx\n", ("line 2", "'x'", "whole number")),
        ("1\n-2\n", ("line 2", "whole number")),
        ("1\n2.5\n", ("line 2", "whole number")),
        ("5\n3\n", ("line 2", "3 is before", "5")),
        ("0\n0\n", ("line 2", "last stamp is 0")),
        ("0 10\n", ("line 1", "two columns", "delay")),
        ("1\n\u0662\n", ("line 2",)),
        ("90000000000\n", ("line 1", "more than a day")),
    ],
)
def test_bad_capacity_traces_name_the_line(text: str, words: tuple[str, ...]) -> None:
    with pytest.raises(SpecError) as err:
        capacity(text)
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message


# --- delay traces ----------------------------------------------------------------------


def test_delay_step_and_linear_between_points_and_across_the_wrap() -> None:
    t = parse_delay(b"0 10\n10 20\n20 5\n", "d")
    assert t.period_ms == 30
    assert [t.delay_ms(x) for x in (0, 9.99, 10, 25, 30, 41)] == [10, 10, 20, 5, 10, 20]
    assert t.delay_ms(5, "linear") == 15
    assert t.delay_ms(15, "linear") == 12.5
    assert t.delay_ms(25, "linear") == 7.5  # the last point moves towards the first's 10
    assert t.mean_delay_ms("step") == pytest.approx(35 / 3)
    assert t.mean_delay_ms("linear") == pytest.approx(35 / 3)
    assert (t.min_delay_ms, t.max_delay_ms) == (5, 20)


def test_delay_columns_may_be_comma_separated_with_decimals() -> None:
    t = parse_delay(b"0,27.5\n10, 28.25\r\n", "d")
    assert list(t.delays_ms) == [27.5, 28.25]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", ("empty",)),
        ("0 10\n", ("one point", "delay=")),
        ("5 10\n10 10\n", ("line 1", "first time must be 0")),
        ("0 10\n10 10\n10 12\n", ("line 3", "not after")),
        ("0 10\n10\n", ("line 2", "one column", "rate=trace")),
        ("0 10\n10 x\n", ("line 2", "'x'", "not a number")),
        ("0 10\n10 nan\n", ("line 2", "finite")),
        ("0 10\n10 20000\n", ("line 2", "outside")),
        ("0 10\n10 1 2\n", ("line 2", "time_ms delay_ms")),
    ],
)
def test_bad_delay_traces_name_the_line(text: str, words: tuple[str, ...]) -> None:
    with pytest.raises(SpecError) as err:
        parse_delay(text.encode(), "d")
    for word in words:
        assert word in str(err.value)


# --- files -----------------------------------------------------------------------------


def test_open_trace_records_the_absolute_path_and_the_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "c", "1\n2\n")
    monkeypatch.chdir(tmp_path)
    ref = open_trace("trace:c", "capacity")
    assert ref.path == str(tmp_path / "c")
    assert ref.sha256 == hashlib.sha256(b"1\n2\n").hexdigest()
    assert ref.capacity.count == 2
    assert TraceFile.from_dict(ref.to_dict(), "capacity") == ref


def test_a_bare_name_finds_a_shipped_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ref = open_trace("trace:const-12mbit.up", "capacity")
    assert ref.path == str(trace.SHIPPED_DIR / "const-12mbit.up")
    assert ref.capacity.mean_rate_bps == 12e6


def test_a_changed_file_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "c", "1\n")
    ref = open_trace(f"trace:{path}", "capacity")
    path.write_text("1\n2\n")
    os.utime(path, ns=(1, 1))  # a different mtime even on a coarse clock
    with pytest.raises(SpecError, match="changed since"):
        TraceFile(path=ref.path, sha256=ref.sha256, kind="capacity")


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("missing", ("cannot read", "No such file")),
        ("dir", ("not a regular file",)),
        ("fifo", ("not a regular file",)),
        ("a,b", ("','",)),
    ],
)
def test_unreadable_paths_are_refused(tmp_path: Path, name: str, words: tuple[str, ...]) -> None:
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(SpecError) as err:
        open_trace(f"trace:{tmp_path / name}", "capacity")
    for word in words:
        assert word in str(err.value)


def test_a_file_without_read_permission_is_refused(tmp_path: Path) -> None:
    """Read as an unprivileged user (root reads any file): a forked child drops to nobody."""
    path = write(tmp_path, "c", "1\n")
    path.chmod(0)
    if os.geteuid() != 0 and os.access(path, os.R_OK):
        pytest.skip("this user can read a mode-000 file")
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only for the one-line refusal
        status = 1
        try:
            if os.geteuid() == 0:
                os.setuid(65534)
            open_trace(f"trace:{path}", "capacity")
        except SpecError as err:
            status = 0 if "cannot read" in str(err) and "Permission denied" in str(err) else 2
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_too_large_a_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace, "MAX_TRACE_FILE_BYTES", 8)
    path = write(tmp_path, "c", "1\n2\n3\n4\n5\n")
    with pytest.raises(SpecError, match="more than 64 MiB"):
        open_trace(f"trace:{path}", "capacity")


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"path": "rel", "sha256": "0" * 64}, "trace.path"),
        ({"path": "/x", "sha256": "abc"}, "trace.sha256"),
        ({"path": "/x", "sha256": "0" * 64, "extra": 1}, "trace.extra"),
        ({"path": "/x", "sha256": "0" * 64, "kind": "delay"}, "trace.kind"),
        ("trace:/x", "trace"),
    ],
)
def test_trace_file_from_dict_names_the_key(data: object, field: str) -> None:
    with pytest.raises(SpecError) as err:
        TraceFile.from_dict(data, "capacity")
    assert err.value.field == field

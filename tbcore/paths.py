"""Checks that an output path can be written, made before anything is created: an
unwritable ``--log``, ``--cert-dir`` or ``--output`` is a one-line SpecError naming the flag,
not a traceback half-way through a run. And the one bounded reader of input files
(:func:`read_regular_file`): a FIFO, ``/dev/zero`` or a directory given where a file is
meant is refused at once, never read for ever.

The test is real (a temporary entry made and removed in the nearest existing directory),
because permission bits lie on /proc, /sys and read-only mounts, and root passes them all.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from tbcore.errors import SpecError


def _nearest_existing(path: Path) -> Path:
    current = path
    while not current.exists() and current != current.parent:
        current = current.parent
    return current


def _can_create_in(field: str, directory: Path, shown: Path) -> None:
    if not directory.is_dir():
        raise SpecError(field, f"{shown}: {directory} is not a directory")
    try:
        made = tempfile.mkdtemp(prefix=".tb-check-", dir=directory)
    except OSError as err:
        raise SpecError(
            field, f"{shown}: cannot create anything in {directory} ({err.strerror})"
        ) from None
    os.rmdir(made)


def check_writable_dir(field: str, path: Path | str) -> None:
    """``path`` is, or can be made as, a directory this process may write in."""
    try:
        _check_dir(field, Path(path))
    except OSError as err:  # a name too long, a loop of links...
        raise SpecError(field, f"{path}: {err.strerror or err}") from None


def check_writable_file(field: str, path: Path | str) -> None:
    """``path`` is a file (or device) this process may write, or one it can create."""
    try:
        _check_file(field, Path(path))
    except OSError as err:
        raise SpecError(field, f"{path}: {err.strerror or err}") from None


def _check_dir(field: str, path: Path) -> None:
    if path.exists():
        if not path.is_dir():
            raise SpecError(field, f"{path} exists and is not a directory")
        _can_create_in(field, path, path)
        return
    _can_create_in(field, _nearest_existing(path.parent), path)


def _check_file(field: str, path: Path) -> None:
    if path.exists():
        if path.is_dir():
            raise SpecError(field, f"{path} is a directory")
        if not os.access(path, os.W_OK):
            raise SpecError(field, f"{path} is not writable")
        return
    _can_create_in(field, _nearest_existing(path.parent), path)


READ_CHUNK_BYTES = 1 << 20
"""Bytes asked of the kernel per read."""
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _check_regular(field: str, shown: str, status: os.stat_result, limit_bytes: int) -> None:
    if not stat.S_ISREG(status.st_mode):
        raise SpecError(field, f"{shown} is {_kind(status.st_mode)}, not a regular file")
    if status.st_size > limit_bytes:
        raise SpecError(
            field, f"{shown} is {status.st_size:,} bytes, more than the {limit_bytes:,} allowed"
        )


def read_regular_file(path: Path | str, field: str, limit_bytes: int) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``limit_bytes``.

    What is not a regular file (a FIFO, ``/dev/zero``, a directory, a socket) is refused
    before a byte is read, and without blocking: it is looked at with stat() first and
    opened non-blocking (a FIFO's open waits for a writer otherwise), and the open file is
    checked again (it may have been replaced in between). A file over the limit, or one that
    grows past it while it is read, is refused too. Every refusal, and every error of the
    system (no such file, permission, a loop of links), is one :class:`SpecError` line
    naming ``field``."""
    shown = str(path)
    if not shown:
        raise SpecError(field, "an empty path")
    try:
        _check_regular(field, shown, os.stat(path), limit_bytes)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except SpecError:
        raise
    except ValueError as err:  # a NUL byte in the path
        raise SpecError(field, f"{shown!r}: {err}") from None
    except OSError as err:
        raise SpecError(field, f"{shown}: {err.strerror or err}") from None
    try:
        _check_regular(field, shown, os.fstat(fd), limit_bytes)
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, min(READ_CHUNK_BYTES, limit_bytes + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit_bytes:
                raise SpecError(field, f"{shown} grew past the {limit_bytes:,} bytes allowed")
        return b"".join(chunks)
    except OSError as err:
        raise SpecError(field, f"{shown}: {err.strerror or err}") from None
    finally:
        os.close(fd)


def read_regular_text(path: Path | str, field: str, limit_bytes: int) -> str:
    """:func:`read_regular_file` decoded as UTF-8 (a byte that is not: one line naming
    where)."""
    data = read_regular_file(path, field, limit_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(field, f"{path}: not UTF-8 text (byte {err.start})") from None

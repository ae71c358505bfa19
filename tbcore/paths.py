"""Checks that an output path can be written, made before anything is created: an
unwritable ``--log``, ``--cert-dir`` or ``--output`` is a one-line SpecError naming the flag,
not a traceback half-way through a run.

The test is real (a temporary entry made and removed in the nearest existing directory),
because permission bits lie on /proc, /sys and read-only mounts, and root passes them all.
"""

from __future__ import annotations

import os
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

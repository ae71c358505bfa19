"""Per-namespace sysctls: read and write ``/proc/sys/net`` from inside a network namespace.

``/proc/sys/net`` shows the network namespace of the thread that opens the file, so each
read or write happens inside :func:`netem.nsexec.in_netns`. Names are the dotted sysctl
names (``net.ipv4.tcp_no_metrics_save``); values are strings as the kernel prints them,
with runs of whitespace normalised to one space (``tcp_rmem`` is ``"4096 131072 16777216"``).

Only ``net.*`` names are accepted: everything else is global to the host and is not the
testbed's to change. Some ``net.core.*`` entries are global or read-only inside a child
namespace on some kernels (``net.core.rmem_max`` on this project's 6.x hosts is read-only
there): :func:`apply_link_sysctls` then keeps the visible value when it already suffices
and records a warning when it does not, instead of writing the host's global value.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from netem import procsys
from netem.linkspec import LinkSpec
from netem.nsexec import in_netns
from tbcore.errors import SpecError
from tbcore.settings import sysctl_value

PROC_SYS = Path("/proc/sys")

SYSCTL_NAME_RE = re.compile(r"net\.[A-Za-z0-9_.\-]+")
"""A sysctl the testbed may set: below ``net.`` only (per network namespace)."""

SOCKET_BUFFER_FLOOR_BYTES = 16 * 1024 * 1024
"""Floor of the socket buffer maxima: 16 MiB, which covers 2 x BDP of the reference path
(333 Mbit/s x 200 ms = 8.325 MB; 2 x = 16.65 MB < 16.78 MB), so any link gets at least
the buffers the main experiment needs."""

SOCKET_BUFFER_BDP_FACTOR = 2
"""Socket buffer maxima are at least this many bandwidth-delay products: a receive window
of one BDP in flight plus the kernel's overhead accounting (tcp_adv_win_scale) and a
sender that must keep a BDP unacknowledged while it has a BDP more to send."""

TCP_RMEM_MIN_BYTES = 4096
TCP_RMEM_DEFAULT_BYTES = 131072
TCP_WMEM_MIN_BYTES = 4096
TCP_WMEM_DEFAULT_BYTES = 16384
"""Minimum and default of tcp_rmem / tcp_wmem: the kernel's own defaults (tcp(7))."""

SLOW_START_AFTER_IDLE_KERNEL_DEFAULT = True
"""``net.ipv4.tcp_slow_start_after_idle`` is 1 in a fresh kernel (RFC 5681 section 4.1)."""


def _path(name: str) -> Path:
    if not isinstance(name, str) or not SYSCTL_NAME_RE.fullmatch(name) or ".." in name:
        raise SpecError("sysctl", f"{name!r}: only net.* sysctls are per-namespace")
    return PROC_SYS / name.replace(".", "/")


def normalise(value: str | int) -> str:
    """The kernel's spelling of a value: whitespace runs become one space."""
    if isinstance(value, bool):
        value = int(value)
    return " ".join(str(value).split())


def to_set(name: str, value: str | int | bool) -> str:
    """A value to write, checked (a number or one line of text: a line break would set only
    the first line, tbcore.settings.sysctl_value) and in the kernel's spelling."""
    if isinstance(value, bool):
        value = int(value)
    return normalise(sysctl_value(f"sysctl {name}", value))


def read(ns: str | None, name: str) -> str:
    """The value of sysctl ``name`` in force inside namespace ``ns``.

    A ``net.core.*`` sysctl that the namespace does not show (global on older kernels) is
    read from the host's namespace, whose value is the one in force.
    """
    path = _path(name)
    with in_netns(ns):
        try:
            return normalise(path.read_text())
        except FileNotFoundError:
            if not name.startswith("net.core."):
                raise SpecError("sysctl", f"{name}: no such sysctl in this kernel") from None
    try:
        return read_host(name)
    except FileNotFoundError:
        raise SpecError("sysctl", f"{name}: no such sysctl in this kernel") from None


def _write_text(ns: str | None, path: Path, text: str) -> None:
    """Write ``path`` inside ``ns``; where /proc/sys is a read-only mount (a container's
    default), through a private writable view of it (:mod:`netem.procsys`)."""
    with in_netns(ns):
        try:
            path.write_text(text)
            return
        except OSError as err:
            if err.errno != errno.EROFS:
                raise
    procsys.write_in_namespace(ns, path, text)


def write(ns: str | None, name: str, value: str | int) -> None:
    """Set sysctl ``name`` inside namespace ``ns``. Raises PermissionError if read-only."""
    path = _path(name)
    text = to_set(name, value)
    with in_netns(ns):
        if not path.exists():
            raise SpecError("sysctl", f"{name}: no such sysctl in this kernel")
    try:
        _write_text(ns, path, text + "\n")
    except PermissionError:
        if name.startswith("net.core."):
            raise  # read-only in a child namespace on some kernels: see apply_link_sysctls
        raise SpecError("sysctl", f"{name}={text!r}: {_refusal_reason(name)}") from None
    except OSError as err:
        if err.errno in (errno.EINVAL, errno.ENOENT, errno.EBUSY):
            raise SpecError("sysctl", f"{name}={text!r}: the kernel refused it") from None
        raise


def _refusal_reason(name: str) -> str:
    if name == "net.ipv4.tcp_congestion_control":
        allowed = (PROC_SYS / "net/ipv4/tcp_allowed_congestion_control").read_text().split()
        return (
            "a namespace's default may only be an algorithm the host allows "
            f"(tcp_allowed_congestion_control: {' '.join(allowed)}); set TCP_CONGESTION on "
            "the socket instead"
        )
    return "not permitted inside a network namespace on this kernel"


def set_many(ns: str | None, values: Mapping[str, str | int]) -> dict[str, str]:
    """Set several sysctls in ``ns``; returns the previous values (to restore them)."""
    checked = {name: to_set(name, value) for name, value in values.items()}
    for name in checked:
        _path(name)
    previous: dict[str, str] = {}
    for name, value in checked.items():
        previous[name] = read(ns, name)
        write(ns, name, value)
    return previous


def socket_buffer_max_bytes(spec: LinkSpec) -> int:
    """Socket buffer maximum for a link: 2 x its largest BDP, at least 16 MiB."""
    bdps = [spec.bdp_bytes(d) or 0 for d in ("up", "down")]
    return max(SOCKET_BUFFER_FLOOR_BYTES, SOCKET_BUFFER_BDP_FACTOR * max(bdps))


def link_sysctls(spec: LinkSpec, *, slow_start_after_idle: bool | None = None) -> dict[str, str]:
    """The sysctls an endpoint namespace gets at link up (see the issue's topology list)."""
    buffer_max = socket_buffer_max_bytes(spec)
    ssai = (
        SLOW_START_AFTER_IDLE_KERNEL_DEFAULT
        if slow_start_after_idle is None
        else (slow_start_after_idle)
    )
    return {
        # no cached ssthresh/cwnd/RTT from an earlier connection (tcp(7)): runs independent
        "net.ipv4.tcp_no_metrics_save": "1",
        "net.ipv4.tcp_slow_start_after_idle": "1" if ssai else "0",
        "net.ipv4.tcp_rmem": f"{TCP_RMEM_MIN_BYTES} {TCP_RMEM_DEFAULT_BYTES} {buffer_max}",
        "net.ipv4.tcp_wmem": f"{TCP_WMEM_MIN_BYTES} {TCP_WMEM_DEFAULT_BYTES} {buffer_max}",
        "net.core.rmem_max": str(buffer_max),
        "net.core.wmem_max": str(buffer_max),
    }


ISOLATION_SYSCTLS: dict[str, str] = {
    # no IPv6 at all: no fe80:: link-local address (nothing outside 198.18.0.0/15) and no
    # router/neighbour solicitations in the captures or through the emulator
    "net.ipv6.conf.all.disable_ipv6": "1",
    "net.ipv6.conf.default.disable_ipv6": "1",
}
"""Set in every namespace right after it is created, before any device moves in."""


@dataclass
class AppliedSysctls:
    """What :func:`apply_link_sysctls` did in one namespace."""

    values: dict[str, str] = field(default_factory=dict)
    """The values now in force (read back from the kernel)."""
    warnings: list[str] = field(default_factory=list)
    """Sysctls that could not be set in the namespace and are below the wanted value."""


def _at_least(current: str, wanted: str) -> bool:
    """True when every number of ``current`` is >= the matching one of ``wanted``."""
    try:
        have = [int(v) for v in current.split()]
        want = [int(v) for v in wanted.split()]
    except ValueError:
        return current == wanted
    return len(have) == len(want) and all(h >= w for h, w in zip(have, want, strict=True))


def exists(ns: str, name: str) -> bool:
    """Whether sysctl ``name`` is visible inside ``ns`` (some net.core ones are init-only)."""
    path = _path(name)
    with in_netns(ns):
        return path.exists()


def read_host(name: str) -> str:
    """The value of ``name`` in the namespace of the calling thread (the host's, normally)."""
    return normalise(_path(name).read_text())


def apply_link_sysctls(ns: str, values: Mapping[str, str | int]) -> AppliedSysctls:
    """Set ``values`` in ``ns``.

    A ``net.core.*`` entry that the namespace cannot change is left alone: read-only in the
    namespace (6.x kernels with per-namespace net.core) or absent from it (older kernels,
    where it is global and only the host's namespace shows it: the host's value then applies).
    If the value in force is below the wanted one, ``warnings`` says so; the host's global
    value is never changed. Anything else that the kernel refuses raises :class:`SpecError`.
    """
    result = AppliedSysctls()
    for name, raw in values.items():
        value = to_set(name, raw)
        core = name.startswith("net.core.")
        if core and not exists(ns, name):
            current = read_host(name)
            if not _at_least(current, value):
                result.warnings.append(
                    f"{name}: global on this kernel (not per namespace); the host's {current} "
                    f"applies, {value} wanted"
                )
            result.values[name] = current
            continue
        try:
            write(ns, name, value)
        except PermissionError:
            if not core:
                raise
            current = read(ns, name)
            if not _at_least(current, value):
                result.warnings.append(
                    f"{name}: read-only in the namespace on this kernel; {current} in force, "
                    f"{value} wanted"
                )
        result.values[name] = read(ns, name)
    return result


def read_many(ns: str | None, names: Iterable[str]) -> dict[str, str]:
    return {name: read(ns, name) for name in names}

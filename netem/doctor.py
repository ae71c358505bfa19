"""``testbed doctor``: what this host can do, one line each, and the backend ``auto`` picks.

First what the process is allowed (read from the kernel, no side effect): the capabilities
NET_ADMIN and SYS_ADMIN, the AppArmor profile, whether /proc/sys can be written, /dev/net/tun,
real-time scheduling. In a container each missing piece is one line that names the
compose / ``docker run`` option granting it (:data:`GRANTS`). Then, when those allow it, each
capability is probed by doing it, in a throwaway ``tb-probe<pid>`` namespace that is removed
at once: create a namespace, a veth pair and a TUN device inside it, add a netem qdisc (the
kernel's answer decides the backend).

:func:`missing` is what ``testbed run`` and ``testbed campaign`` check before they create
anything: one line per missing piece, exit 2.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import struct
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from netem import backends, names, procsys, topology
from netem.backends.kernel import probe_netem
from netem.nsexec import in_netns

CONGESTION_CONTROL_PATH = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
ALLOWED_CONGESTION_CONTROL_PATH = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
STATUS_PATH = Path("/proc/self/status")
APPARMOR_PATH = Path("/proc/self/attr/apparmor/current")

CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21
CAP_SYS_NICE = 23
"""Bit numbers in CapEff (linux/capability.h)."""

REALTIME_PROBE_PRIORITY = 1
"""The lowest SCHED_FIFO priority: enough to learn whether the emulator's (10) is allowed."""


@dataclass(frozen=True)
class Check:
    """One capability."""

    name: str
    ok: bool
    detail: str
    required: bool = True
    """False: the testbed runs without it (worse), so it does not make the host unusable."""


@dataclass(frozen=True)
class Grant:
    """The container option that grants one piece, in both spellings."""

    compose: str
    docker_run: str

    def __str__(self) -> str:
        return f"compose `{self.compose}`, docker run `{self.docker_run}`"


GRANTS = {
    "net_admin": Grant("cap_add: [NET_ADMIN]", "--cap-add NET_ADMIN"),
    "sys_admin": Grant("cap_add: [SYS_ADMIN]", "--cap-add SYS_ADMIN"),
    "apparmor": Grant("security_opt: [apparmor:unconfined]", "--security-opt apparmor=unconfined"),
    "proc_sys": Grant(
        "security_opt: [systempaths=unconfined]", "--security-opt systempaths=unconfined"
    ),
    "tun_device": Grant("devices: [/dev/net/tun:/dev/net/tun]", "--device /dev/net/tun"),
    "realtime": Grant("cap_add: [SYS_NICE]", "--cap-add SYS_NICE"),
}
"""What grants each piece a container may lack (docker-compose.yml has the reasons)."""


@dataclass(frozen=True)
class Privileges:
    """What the kernel lets this process do: the inputs of :func:`privilege_checks`."""

    cap_eff: int
    """The effective capability set (CapEff of /proc/self/status)."""
    apparmor: str | None
    """The AppArmor profile (``docker-default (enforce)``), or None without AppArmor."""
    proc_sys_read_only: bool
    proc_sys_remount: tuple[bool, str]
    """Whether :mod:`netem.procsys` can remount /proc/sys for itself (when read-only)."""
    tun_error: str | None
    """Why /dev/net/tun does not open, or None when it does."""
    realtime_error: str | None
    """Why SCHED_FIFO is refused, or None when it is allowed."""

    def has(self, cap: int) -> bool:
        return bool(self.cap_eff >> cap & 1)


def _cap_eff(status: str) -> int:
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def _apparmor() -> str | None:
    try:
        return APPARMOR_PATH.read_text().strip() or None
    except OSError:  # no AppArmor in this kernel (EINVAL, ENOENT)
        return None


def _tun_error() -> str | None:
    try:
        os.close(os.open(topology.TUN_DEVICE_PATH, os.O_RDWR | os.O_CLOEXEC))
    except OSError as err:
        return err.strerror or str(err)
    return None


def _realtime_error() -> str | None:
    """Try SCHED_FIFO in a thread of its own, which exits at once (nothing to restore)."""
    result: list[str | None] = []

    def attempt() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(REALTIME_PROBE_PRIORITY))
            result.append(None)
        except OSError as err:
            result.append(err.strerror or str(err))

    thread = threading.Thread(target=attempt, name="tb-rtprobe")
    thread.start()
    thread.join()
    return result[0] if result else "no answer"


def read_privileges() -> Privileges:
    read_only = procsys.is_read_only()
    return Privileges(
        cap_eff=_cap_eff(STATUS_PATH.read_text()),
        apparmor=_apparmor(),
        proc_sys_read_only=read_only,
        proc_sys_remount=procsys.can_remount() if read_only else (True, "not needed"),
        tun_error=_tun_error(),
        realtime_error=_realtime_error(),
    )


def _missing(name: str, what: str) -> Check:
    return Check(name, False, f"{what}: {GRANTS[name]}")


def privilege_checks(p: Privileges, *, needs_tun: bool) -> list[Check]:
    """One check per piece; a missing one names the option that grants it."""
    checks = []
    if p.has(CAP_NET_ADMIN):
        checks.append(Check("net_admin", True, "CAP_NET_ADMIN"))
    else:
        checks.append(_missing("net_admin", "no CAP_NET_ADMIN (devices, addresses, routes)"))
    if p.has(CAP_SYS_ADMIN):
        checks.append(Check("sys_admin", True, "CAP_SYS_ADMIN"))
    else:
        checks.append(
            _missing("sys_admin", "no CAP_SYS_ADMIN (network namespaces: unshare, mount)")
        )
    confined = p.apparmor is not None and p.apparmor.split()[0] != "unconfined"
    if confined and "(complain)" not in p.apparmor:
        checks.append(
            _missing("apparmor", f"AppArmor profile {p.apparmor} forbids mount(2) and sysctls")
        )
    else:
        checks.append(Check("apparmor", True, p.apparmor or "no AppArmor"))
    remount_ok, remount_detail = p.proc_sys_remount
    if not p.proc_sys_read_only:
        checks.append(Check("proc_sys", True, "/proc/sys writable"))
    elif remount_ok:
        checks.append(
            Check(
                "proc_sys",
                True,
                "/proc/sys read-only; net.* sysctls written through a private writable "
                "view (SYS_ADMIN; systempaths=unconfined not needed)",
            )
        )
    elif checks[1].ok and checks[2].ok:  # else SYS_ADMIN / AppArmor is the cause: said above
        checks.append(
            _missing("proc_sys", f"/proc/sys read-only and not remountable ({remount_detail})")
        )
    if p.tun_error is None:
        checks.append(Check("tun_device", True, f"{topology.TUN_DEVICE_PATH} opens"))
    elif needs_tun:
        checks.append(
            _missing("tun_device", f"{topology.TUN_DEVICE_PATH}: {p.tun_error} (the emulator)")
        )
    else:
        checks.append(Check("tun_device", True, f"{p.tun_error}; not needed by the netem backend"))
    if p.realtime_error is None:
        checks.append(Check("realtime", True, "SCHED_FIFO allowed (the emulator's priority)"))
    else:
        why = p.realtime_error
        if p.has(CAP_SYS_NICE):
            why += " with CAP_SYS_NICE (the cgroup's cpu.rt_runtime_us is 0)"
        checks.append(
            Check(
                "realtime",
                False,
                f"SCHED_FIFO refused ({why}); the emulator runs unprioritised: "
                f"{GRANTS['realtime']}",
                required=False,
            )
        )
    return checks


def _probe_in_namespace(*, tun: bool) -> list[Check]:
    ns = f"{names.PREFIX}probe{os.getpid()}d"
    checks: list[Check] = []
    try:
        try:
            topology.create_namespace(ns)
        except OSError as err:
            return [Check("namespaces", False, f"cannot create one: {err}")]
        checks.append(Check("namespaces", True, "network namespaces can be created"))
        try:
            with topology.ipr(ns) as ip:
                ip.link("add", ifname="tb-probe0", kind="veth", peer={"ifname": "tb-probe1"})
            checks.append(Check("veth", True, "veth pairs can be created"))
        except Exception as err:  # the kernel's answer, whatever it is, is the result
            checks.append(Check("veth", False, f"veth refused: {err}"))
        if tun:
            checks.append(_probe_tun(ns))
    finally:
        topology.delete_namespace(ns)
    return checks


def _probe_tun(ns: str) -> Check:
    try:
        with in_netns(ns):
            fd = os.open(topology.TUN_DEVICE_PATH, os.O_RDWR | os.O_CLOEXEC)
            try:
                ifr = struct.pack("16sH22x", b"tb-probe2", topology.IFF_TUN | topology.IFF_NO_PI)
                fcntl.ioctl(fd, topology.TUNSETIFF, ifr)
            finally:
                os.close(fd)
    except OSError as err:
        return Check("tun", False, f"TUN refused: {err}")
    return Check("tun", True, f"{topology.TUN_DEVICE_PATH} gives TUN devices")


def resolved_backend(backend: str, netem_ok: bool) -> str:
    """The backend a run asking for ``backend`` gets (``auto``: TESTBED_BACKEND, else netem
    when the kernel has it)."""
    if backend != "auto":
        return backend
    forced = os.environ.get(backends.BACKEND_ENV, "").strip()
    return forced or ("netem" if netem_ok else "userspace")


def _congestion_control() -> Check:
    try:
        available = CONGESTION_CONTROL_PATH.read_text().split()
        allowed = ALLOWED_CONGESTION_CONTROL_PATH.read_text().split()
    except OSError as err:
        return Check("congestion_control", False, str(err))
    detail = " ".join(available)
    if set(allowed) != set(available):
        # a namespace's default (net.ipv4.tcp_congestion_control) must be an allowed one;
        # a socket of a privileged process may pick any available one (TCP_CONGESTION)
        detail += f" (as a namespace default: {' '.join(allowed)})"
    return Check("congestion_control", bool(available), detail)


def run_checks(backend: str = "auto") -> tuple[list[Check], str | None]:
    """Every check, in the order ``testbed doctor`` prints them, and the backend a run
    asking for ``backend`` would get (None when the host cannot run one)."""
    if backend != "auto":
        backends.choose(backend)  # a SpecError for a name that is not a backend
    root = os.geteuid() == 0
    checks = [Check("root", root, "running as root" if root else f"uid {os.geteuid()}: need root")]
    resolved = None
    if root:
        privileges = read_privileges()
        first = privilege_checks(privileges, needs_tun=True)
        blocked = any(not c.ok and c.required for c in first if c.name != "tun_device")
        if blocked:  # the lines above name the cause; probing would only repeat it
            netem_ok = False
            netem_detail = "not probed (a namespace cannot be made: see above)"
            probes: list[Check] = []
        else:
            probes = _probe_in_namespace(tun=privileges.tun_error is None)
            netem_ok, netem_detail = probe_netem()
        resolved = resolved_backend(backend, netem_ok)
        checks += privilege_checks(privileges, needs_tun=resolved == "userspace")
        checks += probes
    else:
        netem_ok, netem_detail = probe_netem()
    # required only of a run that asks for the kernel backend (and could have probed it)
    wanted = resolved == "netem" and not netem_detail.startswith("not probed")
    checks.append(Check("netem", netem_ok, netem_detail, required=wanted))
    checks.append(_congestion_control())
    tcpdump = shutil.which("tcpdump")
    checks.append(
        Check("tcpdump", tcpdump is not None, tcpdump or "not installed (apt-get install tcpdump)")
    )
    return checks, resolved


def report(backend: str = "auto") -> dict[str, Any]:
    """The checks and the chosen backend, as ``testbed doctor --json`` prints them."""
    checks, resolved = run_checks(backend)
    usable = all(c.ok for c in checks if c.required and c.name not in ("tcpdump",))
    return {
        "checks": [asdict(c) for c in checks],
        "backend": resolved if usable else None,
        "usable": usable,
        "forced_by": backends.BACKEND_ENV if os.environ.get(backends.BACKEND_ENV) else None,
    }


def missing(data: dict[str, Any]) -> list[str]:
    """One line per missing piece of a :func:`report`: what and the option that grants it."""
    return [
        f"{c['name']}: {c['detail']}"
        for c in data["checks"]
        if c["required"] and not c["ok"] and c["name"] != "tcpdump"
    ]


def format_report(data: dict[str, Any]) -> str:
    lines = []
    width = max(len(c["name"]) for c in data["checks"])
    for c in data["checks"]:
        mark = "yes" if c["ok"] else ("no " if c.get("required", True) else "-- ")
        lines.append(f"{c['name']:<{width}}  {mark:<3}  {c['detail']}")
    backend = data["backend"] or "none (see the lines marked no)"
    why = f" (forced by {data['forced_by']})" if data.get("forced_by") else ""
    lines.append(f"{'backend':<{width}}  {backend}{why}")
    return "\n".join(lines)

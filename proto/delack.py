"""The delayed-ACK ceiling of the testbed's TCP connections, which Linux lets only a BPF
program set (``TCP_BPF_DELACK_MAX``, linux/bpf.h; Linux 5.10+): a ``sock_ops`` program that,
when a connection is established either way, calls ``bpf_setsockopt(SOL_TCP,
TCP_BPF_DELACK_MAX, ceiling)`` for sockets whose local address is in 198.18.0.0/15 (the
testbed's namespaces: no other socket of the host is touched).

The program is attached to the cgroup (v2) the calling process is in, through a BPF link:
the link lives as long as its file descriptor, so the ceiling is gone when :class:`DelackMax`
is closed or the process ends, on every exit path. Linux still decides *when* to ACK below
the ceiling (at least every second full segment when the window moves, quickack mode);
the ceiling bounds how long a delayed ACK may wait (the default, TCP_DELACK_MAX, is
200 ms), in whole jiffies rounded up: at HZ 250 a 10 ms ceiling is 12 ms, and the shortest
is two jiffies (8 ms). The program's instructions are written out below (eBPF, linux/bpf_common.h).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import struct
from pathlib import Path

from tbcore.ackpolicy import TCP_DELACK_MIN_S
from tbcore.errors import SpecError
from tbcore.ownedfd import OwnedFd

NR_BPF = 321
"""bpf(2) on x86_64."""
BPF_PROG_LOAD = 5
BPF_LINK_CREATE = 28
BPF_PROG_TYPE_SOCK_OPS = 13
BPF_CGROUP_SOCK_OPS = 3
BPF_FUNC_SETSOCKOPT = 49
SOL_TCP = 6
TCP_BPF_DELACK_MAX = 1003
"""linux/bpf.h: the most a delayed ACK waits, in microseconds."""
SOCK_OPS_ACTIVE_ESTABLISHED = 4
SOCK_OPS_PASSIVE_ESTABLISHED = 5
SOCK_OPS_LOCAL_IP4_OFFSET = 28
"""struct bpf_sock_ops: op (4), args (16), family (4), remote_ip4 (4), local_ip4."""
TESTBED_PREFIX = (198 | 18 << 8, 0xFEFF)
"""198.18.0.0/15 as the first two bytes of an address loaded as a little-endian u32, and the
mask that keeps them."""
MIN_CEILING_S = TCP_DELACK_MIN_S
MAX_CEILING_S = 0.2
"""TCP_DELACK_MAX: Linux's own ceiling."""
DEFAULT_HZ = 250
"""Debian's CONFIG_HZ, assumed when the kernel's configuration cannot be read."""
CGROUP_V2_ROOTS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))
"""Where the v2 hierarchy is mounted (hybrid, then unified layouts)."""
_ATTR_BYTES = 128


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def program(ceiling_us: int) -> bytes:
    """The sock_ops program (18 instructions); r6 holds the context."""
    mov_reg, ldx_w, jeq, ja, and_imm, jne = 0xBF, 0x61, 0x15, 0x05, 0x57, 0x55
    st_w, mov_imm, add_imm, call, exit_ = 0x62, 0xB7, 0x07, 0x85, 0x95
    prefix, mask = TESTBED_PREFIX
    return b"".join(
        (
            _insn(mov_reg, dst=6, src=1),  # 0: r6 = ctx
            _insn(ldx_w, dst=2, src=6, off=0),  # 1: r2 = ctx->op
            _insn(jeq, dst=2, off=2, imm=SOCK_OPS_ACTIVE_ESTABLISHED),  # 2: -> 5
            _insn(jeq, dst=2, off=1, imm=SOCK_OPS_PASSIVE_ESTABLISHED),  # 3: -> 5
            _insn(ja, off=11),  # 4: -> 16
            _insn(ldx_w, dst=2, src=6, off=SOCK_OPS_LOCAL_IP4_OFFSET),  # 5: local address
            _insn(and_imm, dst=2, imm=mask),  # 6
            _insn(jne, dst=2, off=8, imm=prefix),  # 7: not the testbed's: -> 16
            _insn(st_w, dst=10, off=-4, imm=ceiling_us),  # 8: the value on the stack
            _insn(mov_reg, dst=1, src=6),  # 9
            _insn(mov_imm, dst=2, imm=SOL_TCP),  # 10
            _insn(mov_imm, dst=3, imm=TCP_BPF_DELACK_MAX),  # 11
            _insn(mov_reg, dst=4, src=10),  # 12
            _insn(add_imm, dst=4, imm=-4),  # 13
            _insn(mov_imm, dst=5, imm=4),  # 14
            _insn(call, imm=BPF_FUNC_SETSOCKOPT),  # 15
            _insn(mov_imm, dst=0, imm=1),  # 16
            _insn(exit_),  # 17
        )
    )


def _bpf(cmd: int, attr: ctypes.Array) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    result = libc.syscall(NR_BPF, cmd, attr, _ATTR_BYTES)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def kernel_hz() -> int:
    """The kernel's timer frequency (CONFIG_HZ, from /boot/config-<release>)."""
    config = Path(f"/boot/config-{os.uname().release}")
    try:
        for line in config.read_text().splitlines():
            if line.startswith("CONFIG_HZ="):
                return int(line.split("=", 1)[1])
    except (OSError, ValueError):
        return DEFAULT_HZ
    return DEFAULT_HZ


def effective_ceiling_s(ceiling_s: float, hz: int) -> float:
    """What Linux makes of a ceiling: whole jiffies, rounded up (usecs_to_jiffies)."""
    return math.ceil(round(ceiling_s * 1e6) * hz / 1e6) / hz


def own_cgroup() -> Path:
    """The cgroup (v2) directory of this process."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            relative = line[3:].lstrip("/")
            for root in CGROUP_V2_ROOTS:
                if (root / "cgroup.procs").exists():
                    return root / relative
    raise SpecError("ack_policy", "no cgroup v2 hierarchy: the delayed-ACK ceiling needs one")


class DelackMax(OwnedFd):
    """The ceiling in force for the testbed's TCP connections established while it is open
    (the BPF link's descriptor is :attr:`fd`; the program's is closed once linked)."""

    def __init__(self, ceiling_s: float, hz: int | None = None) -> None:
        hz = kernel_hz() if hz is None else hz
        shortest = max(MIN_CEILING_S, 2 / hz)  # TCP_TIMEOUT_MIN: two jiffies
        if not shortest <= ceiling_s <= MAX_CEILING_S:
            raise SpecError(
                "ack_policy",
                f"max:{ceiling_s * 1e3:g}ms: this kernel's delayed-ACK ceiling lies in "
                f"[{shortest * 1e3:g}, {MAX_CEILING_S * 1e3:g}] ms (HZ {hz})",
            )
        self.ceiling_s = ceiling_s
        self.effective_s = effective_ceiling_s(ceiling_s, hz)
        """The ceiling Linux applies: whole jiffies (12 ms for 10 ms at HZ 250)."""
        code = program(round(ceiling_s * 1e6))
        insns = ctypes.create_string_buffer(code, len(code))
        license_ = ctypes.create_string_buffer(b"GPL")
        log = ctypes.create_string_buffer(4096)
        attr = ctypes.create_string_buffer(_ATTR_BYTES)
        struct.pack_into(
            "<IIQQIIQ", attr, 0, BPF_PROG_TYPE_SOCK_OPS, len(code) // 8,
            ctypes.addressof(insns), ctypes.addressof(license_), 1, len(log), ctypes.addressof(log),
        )  # fmt: skip
        try:
            prog = _bpf(BPF_PROG_LOAD, attr)
        except OSError as err:
            reason = log.value.decode(errors="replace").strip().splitlines()[-1:] or [str(err)]
            raise SpecError(
                "ack_policy", f"the kernel refused the sock_ops program: {reason[0]}"
            ) from None
        try:
            cgroup = os.open(own_cgroup(), os.O_RDONLY | os.O_DIRECTORY)
            try:
                link = ctypes.create_string_buffer(_ATTR_BYTES)
                struct.pack_into("<IIII", link, 0, prog, cgroup, BPF_CGROUP_SOCK_OPS, 0)
                self.fd = _bpf(BPF_LINK_CREATE, link)
            finally:
                os.close(cgroup)
        except OSError as err:
            raise SpecError("ack_policy", f"the sock_ops program could not attach: {err}") from None
        finally:
            os.close(prog)


def delack_max(ceiling_s: float | None) -> DelackMax | contextlib.nullcontext:
    """The ceiling for a ``with`` block (None: Linux's own, nothing attached)."""
    return contextlib.nullcontext() if ceiling_s is None else DelackMax(ceiling_s)

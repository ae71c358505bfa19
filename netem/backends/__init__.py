"""Link backends: one interface, chosen by name through a registry (as aioquic picks its
congestion control).

``netem``      the kernel's netem qdisc on a router namespace's egress (netem/backends/kernel.py)
``userspace``  a Mahimahi-style TUN emulator process (netem/backends/userspace.py)

:func:`choose` maps ``auto`` to ``netem`` where the kernel has the qdisc (probed by adding one
in a throwaway namespace) and to ``userspace`` where it does not. A backend works on a
:class:`LinkState`, the record that :mod:`netem.link` keeps in ``/run/testbed/links/NAME.json``,
so that a link made by one process (``testbed link up``) can be driven and torn down by
another.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from netem.backends.base import BACKEND_ENV, Backend
from netem.backends.kernel import KernelBackend
from netem.backends.userspace import UserspaceBackend
from tbcore.errors import SpecError

BACKENDS: dict[str, Callable[[], Backend]] = {
    KernelBackend.name: KernelBackend,
    UserspaceBackend.name: UserspaceBackend,
}
"""Every backend by its name (one table: no registration by import)."""
BACKEND_CHOICES = ("auto", *BACKENDS)


def get(name: str) -> Backend:
    """The backend called ``name`` (not ``auto``: see :func:`choose`)."""
    factory = BACKENDS.get(name)
    if factory is None:
        raise SpecError("backend", f"{name!r}: unknown (known: {', '.join(BACKEND_CHOICES)})")
    return factory()


def probe(name: str) -> tuple[bool, str]:
    return type(get(name)).probe()


def check_choice(name: str = "auto") -> None:
    """Refuse a bad backend name, or a bad ``TESTBED_BACKEND`` behind ``auto``, without
    probing anything: what a command checks before it creates a directory or a link."""
    if name not in BACKEND_CHOICES:
        raise SpecError("backend", f"{name!r}: must be one of {', '.join(BACKEND_CHOICES)}")
    forced = os.environ.get(BACKEND_ENV, "").strip()
    if name == "auto" and forced and forced not in BACKENDS:
        raise SpecError(BACKEND_ENV, f"{forced!r}: must be netem or userspace")


def choose(name: str = "auto") -> str:
    """Resolve ``auto`` to ``netem`` if the kernel has it, else ``userspace``; check others.

    ``TESTBED_BACKEND`` (when set) is what ``auto`` means.
    """
    if name not in BACKEND_CHOICES:
        raise SpecError("backend", f"{name!r}: must be one of {', '.join(BACKEND_CHOICES)}")
    if name == "auto":
        forced = os.environ.get(BACKEND_ENV, "").strip()
        if forced:
            if forced not in BACKENDS:
                raise SpecError(BACKEND_ENV, f"{forced!r}: must be netem or userspace")
            return forced
        ok, _ = probe("netem")
        return "netem" if ok else "userspace"
    return name

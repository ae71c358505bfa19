"""The emulator's per-packet path in C (``netem/emulator/csrc``) as an extension module,
``netem.emulator._cpath``, built by pip with the system's gcc and Python headers
(python3-dev, installed by harness/install.sh); everything else is in pyproject.toml.

Here rather than in pyproject.toml because the Dockerfile's first install sees
pyproject.toml alone (the dependencies, as a cached layer): without this file and the
sources, that install builds no extension; the second one, with the sources, builds it.
"""

from pathlib import Path

from setuptools import Extension, setup

CSRC = Path("netem/emulator/csrc")

setup(
    ext_modules=[
        Extension(
            "netem.emulator._cpath",
            sources=sorted(str(p) for p in CSRC.glob("*.c")),
            depends=sorted(str(p) for p in CSRC.glob("*.h")),
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-std=gnu11"],
            libraries=["m"],
        )
    ]
)

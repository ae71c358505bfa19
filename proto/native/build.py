"""Making ``tb-h3`` from tbh3.c with the system's gcc and Debian's libraries (libngtcp2-dev,
libngtcp2-crypto-gnutls-dev, libnghttp3-dev, libgnutls28-dev: harness/install.sh installs
them). The binary goes to proto/native/build/ beside its source and is made again whenever
the source or the flags change (a stamp holds their SHA-256), under a lock so that two
processes starting at once make it once. ``python -m proto.native.build`` makes it (the
installer does, so that the first run does not wait for gcc).
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from tbcore.errors import SpecError

SOURCE = Path(__file__).with_name("tbh3.c")
BUILD_DIR = Path(__file__).with_name("build")
BINARY = BUILD_DIR / "tb-h3"
STAMP = BUILD_DIR / "tb-h3.sha256"
PKG_CONFIG_PACKAGES = ("libngtcp2", "libngtcp2_crypto_gnutls", "libnghttp3", "gnutls")
CFLAGS = ("-O2", "-g", "-Wall", "-Wextra", "-std=gnu11")
DEBIAN_PACKAGES = "libngtcp2-dev libngtcp2-crypto-gnutls-dev libnghttp3-dev libgnutls28-dev"


def _pkg_config() -> list[str]:
    if shutil.which("pkg-config") is None:
        raise SpecError("quic_stack", "ngtcp2: pkg-config is missing (run harness/install.sh)")
    done = subprocess.run(
        ["pkg-config", "--cflags", "--libs", *PKG_CONFIG_PACKAGES],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SpecError(
            "quic_stack",
            f"ngtcp2: the native stack needs {DEBIAN_PACKAGES} (harness/install.sh installs "
            f"them): {done.stderr.strip()[:200]}",
        )
    return done.stdout.split()


def _want() -> str:
    return hashlib.sha256(SOURCE.read_bytes() + " ".join(CFLAGS).encode()).hexdigest()


def ensure_built() -> Path:
    """The binary, made first if it is missing or older than its source (its source and
    flags against the stamp: no subprocess when it is current)."""
    want = _want()
    if BINARY.exists() and STAMP.exists() and STAMP.read_text().strip() == want:
        return BINARY
    BUILD_DIR.mkdir(exist_ok=True)
    with (BUILD_DIR / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if BINARY.exists() and STAMP.exists() and STAMP.read_text().strip() == want:
            return BINARY
        partial = BINARY.with_suffix(".partial")
        done = subprocess.run(
            ["gcc", *CFLAGS, "-o", str(partial), str(SOURCE), *_pkg_config()],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SpecError("quic_stack", f"ngtcp2: tb-h3 did not build: {done.stderr[:400]}")
        partial.replace(BINARY)
        STAMP.write_text(want + "\n")
    return BINARY


def main() -> int:
    try:
        print(ensure_built())
    except SpecError as err:
        print(f"proto.native.build: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

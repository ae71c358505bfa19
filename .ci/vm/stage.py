#!/usr/bin/env python3
"""CI stage: run a job against the kernel's real sch_netem in a stock-kernel QEMU guest.

This host's kernel has no netem and its /dev/kvm refuses stock guests, so the guest runs
under QEMU's software emulation (TCG). Steps, each timed in the log:

1. kernel   pick the newest ``linux-image-6.1.0-*-amd64`` that apt offers; on a cache miss
            ``apt-get download`` it, ``dpkg-deb -x`` it (never installed: that would pull
            systemd and run hooks), keep vmlinuz and the module subset (with its
            dependencies and a modules.dep) in the cache, keyed by package and version.
2. initramfs  busybox-static, those modules, the host's ``ip``/``tc`` with their libraries
            (for debugging), ``.ci/vm/init``.
3. boot     qemu-system-x86_64 -accel tcg: the init mounts the host root read-only over
            9p (with a tmpfs overlay), chroots into it and runs ``job.sh`` from a writable
            9p share: by default the host venv's pytest on the backend tests with
            ``TESTBED_BACKEND=netem``; its exit status comes back through the share.

The exit status is the guest job's. A guest that does not boot, or that does not report a
status, fails with the console tail printed. Standard library only: it runs before and
outside the project's venv if it has to.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VM_DIR = Path(__file__).resolve().parent

KERNEL_PACKAGE_RE = re.compile(r"^linux-image-6\.1\.0-(\d+)-amd64$")
"""Debian bookworm's stock kernel (signed, generic flavour; not -cloud, -rt or -dbg)."""

MODULES = (
    # the emulated path: netem and the qdiscs/classifiers a backend may stack with it
    "sch_netem",
    "sch_tbf",
    "sch_htb",
    "sch_fq",
    "sch_ingress",
    "sch_prio",
    "ifb",
    "act_mirred",
    "cls_u32",
    "cls_matchall",
    "cls_bpf",
    "veth",
    "tun",
    "tcp_bbr",
    # the host root and the writable share over virtio 9p
    "virtio_pci",
    "9pnet_virtio",
    "9p",
    "overlay",
)
"""Modules loaded at boot; their dependencies (netfs, fscache, 9pnet, ...) come along."""

DEFAULT_CACHE = Path(os.environ.get("TESTBED_VM_CACHE", "/var/cache/testbed/vm"))
DEFAULT_WORK = REPO / ".cache" / "netem-vm"
DEFAULT_TIMEOUT_S = float(os.environ.get("TESTBED_VM_TIMEOUT", "1200"))
"""Hard limit on the whole stage (fetch, build, boot and job)."""

BOOT_TIMEOUT_S = 240.0
"""A guest that has not printed its first init line by then is declared dead."""

GUEST_PYTEST_TIMEOUT_S = 900
"""Per-test timeout inside the guest (pure Python runs about 17x slower there)."""

QEMU_MEMORY_MB = 1024
QEMU_CPUS = 2
KERNEL_CMDLINE = "console=ttyS0 panic=-1 quiet"
CONSOLE_TAIL_LINES = 60
ANSI_ESCAPE_RE = re.compile(r"\x1b(\[[0-9;?]*[A-Za-z]|[a-zA-Z])")
"""Terminal control sequences (SeaBIOS clears the screen): dropped from the CI log."""

BACKEND_TESTS = (
    "tests/test_link.py",
    "tests/test_kernel_backend.py",
    "tests/test_doctor.py",
    "tests/test_clean.py",
    "tests/test_emulator_gro.py",
)
"""The backend tests, parametrized by backend; TESTBED_BACKEND=netem keeps the kernel one.
``test_doctor`` checks that ``auto`` picks netem where the kernel has it; ``test_clean`` that
a SIGKILLed ``link up`` on netem leaves nothing after ``testbed clean``; ``test_emulator_gro``
that the C path's UDP GRO falls back on a kernel whose TUN predates it (the guest's 6.1)."""
GUEST_DESELECT = (
    "tests/test_clean.py::test_link_up_is_left_alone_while_its_emulator_runs",
    "tests/test_clean.py::test_a_link_taken_down_under_its_user_is_reported_lost",
    "tests/test_clean.py::test_clean_by_name_leaves_other_links_alone",
    "tests/test_clean.py::test_processes_inside_the_namespaces_are_ended",
    "tests/test_clean.py::test_a_process_of_another_pid_and_mount_namespace_is_not_cleaned",
    "tests/test_doctor.py::test_cli_text_and_json",
)
"""Tests of these files that do not depend on the backend (the owner's liveness, process and
namespace bookkeeping, the doctor's output format): the host's test stage runs them, and in
the guest, where Python runs about 17x slower, they took 180 of its 520 s."""
SMOKE_TEST = ".ci/vm/test_smoke.py"
"""Netem itself, with pyroute2 and no project code: proves the guest pipeline."""

REQUIRED_TOOLS = ("qemu-system-x86_64", "busybox", "cpio", "gzip", "apt-get", "dpkg-deb", "ldd")
"""Host programs the stage runs (Debian: qemu-system-x86, busybox-static, cpio, ...)."""

EXIT_NO_BOOT = 3
EXIT_NO_STATUS = 4
EXIT_TIMEOUT = 124


class StageError(RuntimeError):
    """A step of the stage failed before the guest job could report."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


# --- the log ---------------------------------------------------------------------------


def cpu_counters() -> tuple[int, int]:
    """(all, steal) jiffies of the host's CPUs, from /proc/stat's first line."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return sum(values), values[7]


@dataclass
class Log:
    """Prints ``[  12.3s] message`` lines and keeps the duration of each step."""

    start: float = field(default_factory=time.monotonic)
    steps: list[tuple[str, float]] = field(default_factory=list)
    cpu: tuple[int, int] = field(default_factory=lambda: cpu_counters())

    def __call__(self, message: str) -> None:
        print(f"[{time.monotonic() - self.start:7.1f}s] {message}", flush=True)

    @contextlib.contextmanager
    def step(self, name: str) -> Iterable[None]:
        self(f"--- {name}")
        begin = time.monotonic()
        try:
            yield
        finally:
            took = time.monotonic() - begin
            self.steps.append((name, took))
            self(f"--- {name}: {took:.1f} s")

    def summary(self) -> None:
        total = time.monotonic() - self.start
        cpu_total, cpu_steal = cpu_counters()
        busy = cpu_total - self.cpu[0]
        if busy > 0:
            self(
                f"host during the stage: steal {100 * (cpu_steal - self.cpu[1]) / busy:.1f} %, "
                f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus"
            )
        width = max([len(name) for name, _ in self.steps] + [5])
        print("netem-vm timings:", flush=True)
        for name, took in self.steps:
            print(f"  {name:<{width}}  {took:7.1f} s")
        print(f"  {'total':<{width}}  {total:7.1f} s", flush=True)


def run(argv: Sequence[str], *, timeout_s: float, **kwargs) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            list(argv), check=True, timeout=timeout_s, capture_output=True, text=True, **kwargs
        )
    except subprocess.CalledProcessError as err:
        raise StageError(
            f"{shlex.join(argv)} exited {err.returncode}: {err.stderr.strip()}"
        ) from None
    except subprocess.TimeoutExpired:
        raise StageError(
            f"{shlex.join(argv)} took more than {timeout_s:.0f} s", EXIT_TIMEOUT
        ) from None


# --- step 1: the kernel ----------------------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    package: str
    version: str
    release: str
    """``uname -r`` of the kernel, the directory name under lib/modules."""
    root: Path
    """Cache entry: boot/vmlinuz-<release> and lib/modules/<release>/."""

    @property
    def vmlinuz(self) -> Path:
        return self.root / "boot" / f"vmlinuz-{self.release}"

    @property
    def modules_dir(self) -> Path:
        return self.root / "lib" / "modules" / self.release


def newest_kernel_package() -> tuple[str, str] | None:
    """(package, candidate version) of the newest stock 6.1 kernel apt offers, or None."""
    try:
        names = run(["apt-cache", "pkgnames", "linux-image-6.1.0-"], timeout_s=60).stdout
    except (StageError, FileNotFoundError):
        return None
    found = sorted(
        (int(m.group(1)), name)
        for name in names.split()
        if (m := KERNEL_PACKAGE_RE.match(name.strip()))
    )
    for _, name in reversed(found):
        policy = run(["apt-cache", "policy", name], timeout_s=60).stdout
        m = re.search(r"Candidate:\s*(\S+)", policy)
        if m and m.group(1) != "(none)":
            return name, m.group(1)
    return None


def cached_kernels(cache: Path) -> list[Kernel]:
    kernels = []
    for manifest in sorted(cache.glob("*/manifest.json")):
        with contextlib.suppress(OSError, ValueError, KeyError):
            data = json.loads(manifest.read_text())
            kernels.append(
                Kernel(data["package"], data["version"], data["release"], manifest.parent)
            )
    return kernels


def modinfo_depends(ko: Path) -> list[str]:
    """The ``depends=`` entry of a module's .modinfo section (NUL-separated key=value)."""
    for entry in ko.read_bytes().split(b"\0"):
        if entry.startswith(b"depends="):
            return [d for d in entry[len(b"depends=") :].decode().split(",") if d]
    return []


def module_closure(tree: Path, wanted: Sequence[str]) -> dict[str, Path]:
    """Module name -> .ko path for ``wanted`` and everything they depend on."""
    by_name = {ko.name.removesuffix(".ko").replace("-", "_"): ko for ko in tree.rglob("*.ko")}
    builtin = {
        Path(line.strip()).name.removesuffix(".ko").replace("-", "_")
        for line in (tree / "modules.builtin").read_text().splitlines()
    }
    chosen: dict[str, Path] = {}
    todo = [name.replace("-", "_") for name in wanted]
    while todo:
        name = todo.pop()
        if name in chosen or name in builtin:
            continue
        if name not in by_name:
            raise StageError(f"module {name} is in neither the package nor the builtins")
        chosen[name] = by_name[name]
        todo.extend(d.replace("-", "_") for d in modinfo_depends(by_name[name]))
    return chosen


def depmod(root: Path, release: str) -> None:
    """modules.dep for the subset: kmod's depmod if the host has it, else busybox's."""
    tool = shutil.which("depmod") or "/sbin/depmod"
    argv = [tool, "-b", str(root), release] if Path(tool).exists() else None
    if argv is None:
        argv = ["busybox", "depmod", "-b", str(root), release]
    run(argv, timeout_s=120)
    if not (root / "lib" / "modules" / release / "modules.dep").is_file():
        raise StageError(f"{argv[0]} wrote no modules.dep")


def fetch_kernel(cache: Path, package: str, version: str, log: Log) -> Kernel:
    """Download, unpack and trim the kernel package into a new cache entry."""
    entry = cache / f"{package}_{version}"
    with tempfile.TemporaryDirectory(prefix="tb-fetch-", dir=cache) as tmp_name:
        tmp = Path(tmp_name)
        os.chmod(tmp, 0o755)  # apt's _apt user must be able to write the .deb here
        t0 = time.monotonic()
        run(["apt-get", "download", f"{package}={version}"], timeout_s=600, cwd=tmp)
        debs = list(tmp.glob("*.deb"))
        if len(debs) != 1:
            raise StageError(f"apt-get download left {len(debs)} .deb files")
        log(
            f"downloaded {debs[0].name} ({debs[0].stat().st_size / 1e6:.1f} MB) "
            f"in {time.monotonic() - t0:.1f} s"
        )
        t0 = time.monotonic()
        unpacked = tmp / "x"
        run(["dpkg-deb", "-x", str(debs[0]), str(unpacked)], timeout_s=600)
        releases = [p.name for p in (unpacked / "lib" / "modules").iterdir()]
        if len(releases) != 1:
            raise StageError(f"expected one lib/modules/<release>, found {releases}")
        release = releases[0]
        tree = unpacked / "lib" / "modules" / release
        log(f"unpacked release {release} in {time.monotonic() - t0:.1f} s")

        staging = tmp / "entry"
        (staging / "boot").mkdir(parents=True)
        shutil.copy2(unpacked / "boot" / f"vmlinuz-{release}", staging / "boot")
        modules_dir = staging / "lib" / "modules" / release
        chosen = module_closure(tree, MODULES)
        for ko in chosen.values():
            target = modules_dir / ko.relative_to(tree)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ko, target)
        for name in ("modules.builtin", "modules.builtin.modinfo", "modules.order"):
            shutil.copy2(tree / name, modules_dir / name)
        depmod(staging, release)
        manifest = {
            "package": package,
            "version": version,
            "release": release,
            "modules": sorted(chosen),
            "fetched_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        size_mb = sum(p.stat().st_size for p in staging.rglob("*") if p.is_file()) / 1e6
        log(f"kept vmlinuz and {len(chosen)} modules ({size_mb:.1f} MB)")
        if entry.exists():
            shutil.rmtree(entry)
        staging.rename(entry)
    return Kernel(package, version, release, entry)


def prepare_kernel(cache: Path, log: Log) -> Kernel:
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two stages at once fetch only once
        newest = newest_kernel_package()
        cached = cached_kernels(cache)
        if newest is None:
            if not cached:
                raise StageError("apt offers no linux-image-6.1.0-*-amd64 and the cache is empty")
            kernel = cached[-1]
            log(f"apt offers no kernel package; using cached {kernel.package} {kernel.version}")
            return kernel
        package, version = newest
        for kernel in cached:
            if (kernel.package, kernel.version) == newest and kernel.vmlinuz.is_file():
                log(f"cache hit: {package} {version} ({kernel.root})")
                return kernel
        log(f"cache miss: fetching {package} {version}")
        try:
            kernel = fetch_kernel(cache, package, version, log)
        except StageError as err:
            # stale package lists (the version left the mirror): refresh once and retry
            log(f"fetch failed ({err}); apt-get update and retry")
            run(["apt-get", "update", "-qq"], timeout_s=600)
            newest = newest_kernel_package()
            if newest is None:
                raise
            package, version = newest
            kernel = fetch_kernel(cache, package, version, log)
        for old in cached:  # keep one entry: the kernel moves on with security updates
            if old.root != kernel.root:
                shutil.rmtree(old.root, ignore_errors=True)
        return kernel


# --- step 2: the initramfs -------------------------------------------------------------


def shared_libraries(binary: str) -> list[Path]:
    """The loader and libraries ``binary`` needs, from ldd's output."""
    out = run(["ldd", binary], timeout_s=30).stdout
    return [Path(p) for p in re.findall(r"(/\S+) \(0x", out)]


def build_initramfs(kernel: Kernel, work: Path, log: Log) -> Path:
    root = work / "initramfs"
    shutil.rmtree(root, ignore_errors=True)
    (root / "bin").mkdir(parents=True)
    (root / "etc").mkdir()
    busybox = shutil.which("busybox") or "/bin/busybox"
    shutil.copy2(busybox, root / "bin" / "busybox")
    shutil.copy2(VM_DIR / "init", root / "init")
    (root / "init").chmod(0o755)
    shutil.copytree(kernel.modules_dir, root / "lib" / "modules" / kernel.release)
    (root / "etc" / "tb-modules").write_text("\n".join(MODULES) + "\n")
    for binary in ("/usr/sbin/ip", "/usr/sbin/tc"):
        if not Path(binary).exists():
            log(f"{binary} missing on the host: not in the initramfs")
            continue
        for path in [Path(binary), *shared_libraries(binary)]:
            target = root / path.relative_to("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path.resolve(), target)
    image = work / "initramfs.cpio.gz"
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    with open(image, "wb") as out:
        cpio = subprocess.Popen(
            ["cpio", "-o", "-H", "newc", "--quiet"],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        gzip = subprocess.Popen(["gzip", "-1"], stdin=cpio.stdout, stdout=out)
        assert cpio.stdin is not None and cpio.stdout is not None
        cpio.stdout.close()
        cpio.stdin.write(("\n".join(files) + "\n").encode())
        cpio.stdin.close()
        if cpio.wait(timeout=120) != 0 or gzip.wait(timeout=120) != 0:
            raise StageError("cpio | gzip failed")
    log(f"initramfs: {len(files)} entries, {image.stat().st_size / 1e6:.1f} MB")
    return image


# --- step 3: the guest -----------------------------------------------------------------


def python_in_venv() -> Path:
    venv = REPO / ".venv" / "bin" / "python"
    return venv if venv.exists() else Path(sys.executable)


def pytest_command(paths: Sequence[str], extra: Sequence[str]) -> list[str]:
    return [
        str(python_in_venv()),
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--color=no",
        f"--timeout={GUEST_PYTEST_TIMEOUT_S}",
        "--junitxml=/run/tb-vm/out/junit.xml",
        "-v",
        *extra,
        *paths,
    ]


def job_script(command: Sequence[str]) -> str:
    """The shell script the guest's init runs in the chroot of the host root."""
    venv_bin = python_in_venv().parent
    return "\n".join(
        [
            "# written by .ci/vm/stage.py; run by the guest's /init inside the host root",
            f"cd {shlex.quote(str(REPO))} || exit 98",
            f"export PATH={shlex.quote(str(venv_bin))}:/usr/local/sbin:/usr/local/bin:"
            "/usr/sbin:/usr/bin:/sbin:/bin",
            "export HOME=/tmp TESTBED_BACKEND=netem TESTBED_IN_VM=1 PYTHONUNBUFFERED=1",
            'echo "tb-job: $(cut -d" " -f1 /proc/uptime)s $(uname -r), '
            'qdisc netem: $(grep -c sch_netem /proc/modules) module"',
            f"exec {shlex.join(command)}",
            "",
        ]
    )


@dataclass
class GuestResult:
    status: int | None
    """The job's exit status, None when the guest never reported one."""
    booted: bool
    boot_s: float | None
    """From QEMU's start to the init's first line."""
    job_s: float | None
    """From the init's "running job" line to its exit."""
    total_s: float
    timed_out: bool
    console: list[str]


def qemu_command(kernel: Kernel, initramfs: Path, out_dir: Path) -> list[str]:
    return [
        "qemu-system-x86_64",
        "-accel",
        "tcg,thread=multi",
        "-cpu",
        "max",
        "-smp",
        str(QEMU_CPUS),
        "-m",
        str(QEMU_MEMORY_MB),
        "-nographic",
        "-no-reboot",
        "-nic",
        "none",
        "-kernel",
        str(kernel.vmlinuz),
        "-initrd",
        str(initramfs),
        "-append",
        KERNEL_CMDLINE,
        "-virtfs",
        "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
        "-virtfs",
        f"local,path={out_dir},mount_tag=out,security_model=none",
    ]


def boot(
    kernel: Kernel, initramfs: Path, out_dir: Path, console_log: Path, deadline: float, log: Log
) -> GuestResult:
    argv = qemu_command(kernel, initramfs, out_dir)
    log(f"$ {shlex.join(argv)}")
    start = time.monotonic()
    console: list[str] = []
    marks: dict[str, float] = {}
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )

    def pump() -> None:
        assert proc.stdout is not None
        with open(console_log, "w", errors="replace") as sink:
            for raw in proc.stdout:
                line = raw.decode(errors="replace").rstrip("\r\n")
                console.append(line)
                sink.write(line + "\n")
                sink.flush()
                if "tb-init: " in line and "booted" in line:
                    marks.setdefault("booted", time.monotonic())
                if "tb-init: " in line and "running job" in line:
                    marks.setdefault("job", time.monotonic())
                if "tb-init: " in line and "job exited" in line:
                    marks.setdefault("job_end", time.monotonic())
                log(f"guest| {ANSI_ESCAPE_RE.sub('', line)}")

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        while proc.poll() is None:
            now = time.monotonic()
            if now > deadline or ("booted" not in marks and now - start > BOOT_TIMEOUT_S):
                timed_out = True
                log("guest timed out: killing QEMU")
                break
            time.sleep(0.2)
    finally:  # on a timeout, and on Ctrl-C or any error here: never leave QEMU running
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    reader.join(timeout=10)
    total = time.monotonic() - start
    status_file = out_dir / "exit-status"
    status = None
    with contextlib.suppress(OSError, ValueError):
        status = int(status_file.read_text().strip())
    booted = "booted" in marks
    job_s = marks["job_end"] - marks["job"] if "job" in marks and "job_end" in marks else None
    return GuestResult(
        status=status,
        booted=booted,
        boot_s=marks["booted"] - start if booted else None,
        job_s=job_s,
        total_s=total,
        timed_out=timed_out,
        console=console,
    )


def run_in_guest(
    command: Sequence[str],
    *,
    work: Path,
    cache: Path = DEFAULT_CACHE,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    log: Log | None = None,
) -> tuple[GuestResult, Path]:
    """Fetch, build, boot and run ``command`` in the guest. Returns the result and the
    writable share's host directory (where the job leaves its files)."""
    log = log or Log()
    deadline = log.start + timeout_s
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        raise StageError(
            f"missing on this host: {', '.join(missing)} "
            "(TESTBED_INSTALL_VM=1 harness/install.sh installs them)"
        )
    if work.exists():
        shutil.rmtree(work)
    out_dir = work / "out"
    out_dir.mkdir(parents=True)
    with log.step("kernel"):
        kernel = prepare_kernel(cache, log)
    with log.step("initramfs"):
        initramfs = build_initramfs(kernel, work, log)
    (out_dir / "job.sh").write_text(job_script(command))
    log(f"guest job: {shlex.join(command)}")
    with log.step("guest"):
        result = boot(kernel, initramfs, out_dir, work / "console.log", deadline, log)
    return result, out_dir


def tail(lines: Sequence[str], count: int = CONSOLE_TAIL_LINES) -> str:
    return "\n".join(f"  | {line}" for line in lines[-count:])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=".ci/netem-vm",
        description="Run the backend tests against a real sch_netem in a QEMU guest.",
    )
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="kernel cache dir")
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK, help="scratch dir (wiped)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds")
    parser.add_argument(
        "--smoke", action="store_true", help="run only the smoke test (netem via pyroute2)"
    )
    parser.add_argument(
        "--command",
        help="a shell-quoted command to run in the guest instead of pytest (cwd: the repo)",
    )
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments or test paths")
    args = parser.parse_args(argv)

    log = Log()
    log(f"netem-vm stage: repo {REPO}, cache {args.cache}, timeout {args.timeout:.0f} s")
    if args.command:
        command = shlex.split(args.command)
    else:
        paths = [SMOKE_TEST]
        if not args.smoke:
            present = [p for p in BACKEND_TESTS if (REPO / p).exists()]
            missing = sorted(set(BACKEND_TESTS) - set(present))
            if missing:
                log(f"not yet in the tree, not run: {', '.join(missing)}")
            paths += present
        explicit = [a for a in args.pytest_args if not a.startswith("-")]
        options = [a for a in args.pytest_args if a.startswith("-")]
        if not explicit:
            options = [*(f"--deselect={test}" for test in GUEST_DESELECT), *options]
        command = pytest_command(explicit or paths, options)
    try:
        result, _ = run_in_guest(
            command, work=args.work, cache=args.cache, timeout_s=args.timeout, log=log
        )
    except StageError as err:
        log(f"FAILED: {err}")
        log.summary()
        return err.status
    boot_text = f"{result.boot_s:.1f} s" if result.boot_s is not None else "never"
    job_text = f"{result.job_s:.1f} s" if result.job_s is not None else "n/a"
    log(f"guest: boot {boot_text}, job {job_text}, QEMU total {result.total_s:.1f} s")
    status = result.status
    if not result.booted:
        log("FAILED: the guest did not boot; console tail:")
        print(tail(result.console), flush=True)
        status = EXIT_NO_BOOT
    elif status is None:
        why = "timed out" if result.timed_out else "reported no exit status"
        log(f"FAILED: the guest {why}; console tail:")
        print(tail(result.console), flush=True)
        status = EXIT_TIMEOUT if result.timed_out else EXIT_NO_STATUS
    else:
        log(f"guest job exit status {status}")
    log.summary()
    return status


if __name__ == "__main__":
    sys.exit(main())

"""Real peers from Debian prove that both ends speak the protocols, not only to each other:
curl and h2load against our HTTP/2 server, ngtcp2's gtlsclient against our HTTP/3 server,
our clients against nghttpd and ngtcp2's gtlsserver."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from clients.api import run_requests
from clients.config import ClientConfig
from proto.tls import ensure_certificate
from servers.process import ServerProcess
from tbcore import workloads

pytestmark = pytest.mark.timeout(120)
PEER_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def server():  # type: ignore[no-untyped-def]
    with ServerProcess(["--processing-audio", "5ms"]) as proc:
        yield proc


def run(*argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(list(argv), capture_output=True, timeout=PEER_TIMEOUT_S)


def free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.peers("curl")
def test_curl_http2_asr_and_tts(server: ServerProcess, tmp_path: Path) -> None:
    base = f"https://127.0.0.1:{server.ports['h2']}"
    audio = workloads.workload_path("audio")
    asr = run(
        "curl",
        "-sk",
        "--http2",
        "--tlsv1.3",
        "-w",
        "\n%{http_version}",
        "--data-binary",
        f"@{audio}",
        f"{base}/asr",
    )
    assert asr.returncode == 0, asr.stderr
    body, version = asr.stdout.decode().rsplit("\n", 1)
    assert version == "2"
    answer = json.loads(body)
    assert answer["upload_sha256"] == workloads.workload_sha256("audio")
    assert answer["upload_length"] == 354_640
    out = tmp_path / "tts"
    tts = run("curl", "-sk", "--http2", "-o", str(out), f"{base}/tts")
    assert tts.returncode == 0
    assert hashlib.sha256(out.read_bytes()).hexdigest() == workloads.workload_sha256("audio")
    missing = run("curl", "-sk", "--http2", "-o", "/dev/null", "-w", "%{http_code}", f"{base}/x")
    assert missing.stdout == b"404"


@pytest.mark.peers("h2load")
def test_h2load_download_and_upload(server: ServerProcess) -> None:
    base = f"https://127.0.0.1:{server.ports['h2']}"
    tts = run("h2load", "-n", "6", "-c", "2", "-m", "2", f"{base}/tts")
    assert b"6 succeeded, 0 failed" in tts.stdout, tts.stdout
    assert b"6 2xx" in tts.stdout
    audio = workloads.workload_path("audio")
    asr = run("h2load", "-n", "4", "-c", "1", "-d", str(audio), f"{base}/asr")
    assert b"4 succeeded, 0 failed" in asr.stdout, asr.stdout
    assert b"4 2xx" in asr.stdout  # 2xx only if the server's checksum of the upload matched


@pytest.mark.peers("gtlsclient")
def test_ngtcp2_client_against_our_h3(server: ServerProcess, tmp_path: Path) -> None:
    port = str(server.ports["h3"])
    base = f"https://127.0.0.1:{port}"
    common = [
        "gtlsclient",
        "-q",
        "--exit-on-all-streams-close",
        "--timeout=20s",
        "--download",
        str(tmp_path),
        "127.0.0.1",
        port,
    ]
    tts = run(*common, f"{base}/tts")
    assert tts.returncode == 0, tts.stderr[-500:]
    data = (tmp_path / "tts").read_bytes()
    assert hashlib.sha256(data).hexdigest() == workloads.workload_sha256("audio")
    audio = workloads.workload_path("audio")
    asr = run(*common[:-2], "-m", "POST", "-d", str(audio), "127.0.0.1", port, f"{base}/asr")
    assert asr.returncode == 0, asr.stderr[-500:]
    answer = json.loads((tmp_path / "asr").read_bytes())
    assert answer["upload_sha256"] == workloads.workload_sha256("audio")


def docroot(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "tts").write_bytes(workloads.workload_bytes("audio"))
    (root / "stream").write_bytes(b"".join(workloads.stream_chunk(i) for i in range(5)))
    return root


async def retrying(config: ClientConfig, attempts: int = 20) -> list:
    """A peer just started may not listen yet: retry the first request briefly."""
    for _ in range(attempts):
        records = await run_requests(config)
        if all(r.status is not None for r in records):
            return records
        await asyncio.sleep(0.1)
    return records


def nghttpd_argv(root: Path, port: int, key: Path, cert: Path) -> list[str]:
    return ["nghttpd", "--address=127.0.0.1", "-d", str(root), str(port), str(key), str(cert)]


def gtlsserver_argv(root: Path, port: int, key: Path, cert: Path) -> list[str]:
    return ["gtlsserver", "-q", "-d", str(root), "127.0.0.1", str(port), str(key), str(cert)]


@pytest.mark.parametrize(
    ("protocol", "argv", "kind", "settle_s", "attempts"),
    [
        pytest.param(
            "h2", nghttpd_argv, socket.SOCK_STREAM, 0.0, 20, marks=pytest.mark.peers("nghttpd")
        ),
        pytest.param(
            "h3",
            gtlsserver_argv,
            socket.SOCK_DGRAM,
            0.3,
            5,
            marks=pytest.mark.peers("gtlsserver"),
        ),
    ],
    ids=["h2-nghttpd", "h3-gtlsserver"],
)
async def test_our_client_against_real_server(
    tmp_path: Path,
    protocol: str,
    argv: Callable[[Path, int, Path, Path], list[str]],
    kind: int,
    settle_s: float,
    attempts: int,
) -> None:
    paths = ensure_certificate(tmp_path / "tls")
    port = free_port(kind)
    peer = subprocess.Popen(
        argv(docroot(tmp_path), port, paths.key, paths.cert),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(settle_s)
        for workload in ("tts", "stream"):
            config = ClientConfig.of(
                protocol=protocol,
                port=port,
                workload=workload,
                chunks=5,
                requests=2,
                connection="reused",
                timeout_s=5.0,
            )
            records = await retrying(config, attempts=attempts)
            assert all(r.ok for r in records), [r.error for r in records]
    finally:
        peer.terminate()
        peer.wait(10)

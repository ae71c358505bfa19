"""Debian's gtlsserver and gtlsclient as the interoperability peers of the native stack: the
example server's document root and command line, its events from the qlog captured once
(tests/fixtures/ngtcp2-tts-loss), and each example binary against the testbed's native
endpoint on loopback (the real binaries)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from clients.config import ClientConfig
from clients.ngtcp2 import run_requests  # Debian's gtlsclient: the interop peer
from proto import qlogseq
from servers import ngtcp2 as server
from servers.config import ServerConfig
from servers.events import read_events
from servers.process import ServerProcess
from tbcore import kinds, quicstack, workloads
from tbcore.errors import SpecError
from tbcore.records import RequestRecord, read_jsonl
from tbcore.settings import Settings

FIXTURE = Path(__file__).parent / "fixtures" / "ngtcp2-tts-loss"
NGTCP2 = {"protocol": "h3", "quic_stack": "ngtcp2", "workload": "tts", "processing_audio_s": 0.0}


def config(**changes: object) -> ServerConfig:
    values = {"h2_port": None, "h3_port": 4433, "settings": Settings(**NGTCP2)}
    return ServerConfig(**{**values, **changes})


def test_the_document_root_holds_every_route_s_answer(tmp_path: Path) -> None:
    root = server.make_docroot(tmp_path)
    for route in kinds.ngtcp2_routes().values():
        data = (root / route.file_name).read_bytes()
        if route.download is None:
            assert data == quicstack.NGTCP2_ACK_BODY
        else:
            assert len(data) == workloads.get_workload(route.download).size_bytes
    assert (root / "tts").resolve() == workloads.workload_path("audio").resolve()


def test_the_command_line_is_the_address_port_key_and_certificate(tmp_path: Path) -> None:
    argv = server.server_argv(config(cert_dir=tmp_path), 4433, tmp_path / "d", tmp_path / "q")
    assert argv[0] == "gtlsserver" and "-q" in argv and f"--htdocs={tmp_path / 'd'}" in argv
    assert f"--qlog-dir={tmp_path / 'q'}" in argv and "--cc=cubic" in argv
    assert argv[-4:] == ["127.0.0.1", "4433", str(tmp_path / "key.pem"), str(tmp_path / "cert.pem")]
    assert "--validate-addr" not in argv
    always = server.server_argv(
        config(cert_dir=tmp_path, quic_retry="always"), 1, tmp_path, tmp_path
    )
    assert "--validate-addr" in always


def test_ngtcp2_serves_http3_alone() -> None:
    with pytest.raises(SpecError, match="no-h2: ngtcp2 serves HTTP/3 only"):
        server.check_config(config(h2_port=4433))
    with pytest.raises(SpecError, match="no-h2"):
        server.check_config(config(fec_port=4434, settings=Settings(**NGTCP2, fec_rate_bps=1e6)))
    with pytest.raises(SpecError, match="h3-port"):
        server.check_config(_no_h3())


def _no_h3() -> ServerConfig:
    made = config()
    made.h3_port = None
    return made


def test_bound_ports_come_from_proc_net_udp() -> None:
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue\n"
        "  1: 0100007F:1151 00000000:0000 07 00000000:00000000\n"
        "  2: 0100007F:1152 0200007F:0050 01 00000000:00000000\n"
    )
    assert server.bound_udp_ports(table) == {0x1151}


def test_the_servers_events_from_its_qlog_meet_the_clients_across_the_link() -> None:
    text = gzip.decompress((FIXTURE / "server.sqlog.gz").read_bytes()).decode()
    seq = qlogseq.parse_qlog_seq(text)
    written = json.loads((FIXTURE / "records.jsonl").read_text())
    # the fixture's server began one way (100 ms) after the client, as both files say
    start_s = written["connect_start"] + (seq.reference_time_ms - _client_reference_ms()) / 1e3
    events = dict((name, t) for t, name in server.connection_events(seq.events, start_s))
    assert next(iter(events)) == "connection_open"
    assert events["request_first_byte"] <= events["request_last_byte"]
    assert (
        events["response_first_byte"] < events["response_last_byte"] < events["connection_closed"]
    )
    one_way = events["request_first_byte"] - written["request_first_byte"]
    assert 0.099 <= one_way <= 0.102
    # the response's first byte reaches the client at least one way after it left
    assert written["response_first_byte"] - events["response_first_byte"] >= 0.099
    assert written["response_last_byte"] - events["response_last_byte"] >= 0.099


def _client_reference_ms() -> float:
    text = gzip.decompress((FIXTURE / "client.sqlog.gz").read_bytes()).decode()
    return qlogseq.parse_qlog_seq(text).reference_time_ms


@pytest.mark.peers("gtlsclient")
@pytest.mark.timeout(120)
def test_debians_gtlsclient_fetches_from_the_native_server(tmp_path: Path) -> None:
    """Interoperability: Debian's example client against the testbed's native server."""
    settings = Settings(**{**NGTCP2, "requests": 2, "warmup_requests": 1})
    document = tmp_path / "settings.json"
    document.write_text(settings.to_json())
    (tmp_path / "qs").mkdir()
    (tmp_path / "qc").mkdir()
    log = tmp_path / "server.jsonl"
    args = ["--no-h2", "--h3-port", "0", "--settings", str(document), "--log", str(log)]
    args += ["--qlog-dir", str(tmp_path / "qs"), "--keylog", str(tmp_path / "keys.log")]
    with ServerProcess(args) as proc:
        records = run_requests(
            ClientConfig(
                port=proc.ports["h3"],
                settings=settings,
                qlog_dir=tmp_path / "qc",
                records_path=tmp_path / "records.jsonl",
                keylog_path=tmp_path / "keys.log",
            )
        )
    assert [r.warmup for r in records] == [True, False, False]
    for record in records:
        assert record.ok, record.error
        assert record.handshake_done > record.connect_start
        assert record.response_last_byte >= record.response_first_byte >= record.request_first_byte
    assert read_jsonl(tmp_path / "records.jsonl", RequestRecord) == records
    events = read_events(log)
    opened = [e for e in events if e["event"] == "connection_open"]
    assert len(opened) == 3 and len({e["conn"] for e in opened}) == 3
    # the server's connection opens when its handshake completes, after the client began
    for record, event in zip(records, opened, strict=True):
        assert 0.0 <= event["t"] - record.connect_start < 0.05
    assert len(list((tmp_path / "qs").glob("*.sqlog"))) == 3
    for path in (tmp_path / "qs").glob("*.sqlog"):
        assert qlogseq.parse_qlog_seq(path.read_text()).anchored
    assert "CLIENT_TRAFFIC_SECRET_0" in (tmp_path / "keys.log").read_text()


@pytest.mark.peers("gtlsserver")
@pytest.mark.timeout(120)
def test_the_native_client_fetches_from_debians_gtlsserver(tmp_path: Path) -> None:
    """Interoperability: the testbed's native client against Debian's example server (its
    file server: the audio byte for byte)."""
    import subprocess

    from clients.api import run_requests_sync

    settings = Settings(**{**NGTCP2, "requests": 2})
    (tmp_path / "htdocs").mkdir()
    docroot = server.make_docroot(tmp_path / "htdocs")
    (tmp_path / "qs").mkdir()
    port = server._free_udp_port("127.0.0.1")
    argv = server.server_argv(config(cert_dir=tmp_path, h3_port=port), port, docroot,
                              tmp_path / "qs")  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        server._wait_bound(proc, port)
        records = run_requests_sync(ClientConfig(port=port, settings=settings))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert len(records) == 2
    for record in records:
        assert record.ok and record.sha256_ok and record.status == 200, record.error
        assert record.down_bytes == workloads.AUDIO_SIZE_BYTES

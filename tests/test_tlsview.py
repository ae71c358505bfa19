"""TLS 1.3 record decryption with a key log, against a real in-memory TLS session."""

import ssl
from pathlib import Path

import pytest
from support_tls import handshake_step

from harness.collect import tlsview
from proto.tls import client_context, ensure_certificate, server_context
from tbcore.errors import SpecError


def _session(tmp_path: Path, payload: bytes) -> tuple[bytes, bytes, str]:
    """(client->server bytes, server->client bytes, key log) of a session in which the
    server writes ``payload`` in two writes."""
    keylog = tmp_path / "keys.log"
    server_ctx = server_context(ensure_certificate(tmp_path / "cert"), None)
    client_ctx = client_context(keylog)
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="testbed.local")
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    up, down = bytearray(), bytearray()
    for _ in range(10):
        handshake_step(client, server)
        data = c_out.read()
        up += data
        s_in.write(data)
        data = s_out.read()
        down += data
        c_in.write(data)
    half = len(payload) // 2
    server.write(payload[:half])
    server.write(payload[half:])
    down += s_out.read()
    return bytes(up), bytes(down), keylog.read_text()


def test_server_application_data_decrypts_to_what_was_written(tmp_path: Path) -> None:
    payload = bytes(range(256)) * 200  # 51,200 bytes: several 16 KiB records
    up, down, keylog = _session(tmp_path, payload)
    records = tlsview.split_records(down)
    server_random, suite = tlsview.hello_random_and_suite(down, records[0])
    client_random, _ = tlsview.hello_random_and_suite(up, tlsview.split_records(up)[0])
    secrets = tlsview.parse_keylog(keylog)[client_random.hex()]
    assert suite in tlsview.CIPHER_SUITES and len(server_random) == 32
    plain, pieces = tlsview.decrypt_direction(
        down,
        suite,
        secrets["SERVER_HANDSHAKE_TRAFFIC_SECRET"],
        secrets["SERVER_TRAFFIC_SECRET_0"],
    )
    assert plain == payload
    # every plaintext byte sits where the stream cipher put it
    for offset in (0, 16383, 16384, len(payload) - 1):
        at = tlsview.plain_to_stream(pieces, offset)
        record = next(r for r in records if r.body_offset <= at < r.end)
        assert at - record.body_offset < record.length - tlsview.AEAD_TAG_BYTES


def test_a_wrong_key_is_refused(tmp_path: Path) -> None:
    _up, down, _keylog = _session(tmp_path, b"x" * 1000)
    records = tlsview.split_records(down)
    _, suite = tlsview.hello_random_and_suite(down, records[0])
    with pytest.raises(SpecError, match="does not decrypt"):
        tlsview.decrypt_direction(down, suite, None, b"\x01" * 48)
    with pytest.raises(SpecError, match="cipher_suite"):
        tlsview.TrafficKey.from_secret(b"\x00" * 32, 0x00FF)
    with pytest.raises(SpecError, match="plain_offset"):
        tlsview.plain_to_stream([], 0)

"""Self-signed certificate on first use; TLS 1.3-only contexts with ALPN h2."""

from __future__ import annotations

import ssl
from pathlib import Path

from cryptography import x509

from proto.tls import client_context, ensure_certificate, server_context


def test_certificate_created_once(tmp_path: Path) -> None:
    paths = ensure_certificate(tmp_path)
    first = paths.cert.read_bytes()
    assert ensure_certificate(tmp_path).cert.read_bytes() == first
    cert = x509.load_pem_x509_certificate(first)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)


def test_contexts_are_tls13_only(tmp_path: Path) -> None:
    server = server_context(ensure_certificate(tmp_path), keylog=tmp_path / "k.log")
    client = client_context()
    for ctx in (server, client):
        assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
        assert ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    assert server.keylog_filename == str(tmp_path / "k.log")


def test_garbage_or_a_fifo_in_the_cert_dir_is_one_line(tmp_path: Path) -> None:
    import os

    import pytest

    from proto.tls import check_certificate, ensure_certificate
    from tbcore.errors import SpecError

    paths = ensure_certificate(tmp_path / "good")
    check_certificate(paths)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "cert.pem").write_text("garbage\n")
    (bad / "key.pem").write_text("garbage\n")
    with pytest.raises(SpecError, match="not a PEM certificate"):
        ensure_certificate(bad)
    (bad / "cert.pem").write_bytes(paths.cert.read_bytes())
    with pytest.raises(SpecError, match="not a PEM private key"):
        ensure_certificate(bad)
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "cert.pem")
    os.mkfifo(fifo / "key.pem")
    with pytest.raises(SpecError, match="FIFO"):
        ensure_certificate(fifo)

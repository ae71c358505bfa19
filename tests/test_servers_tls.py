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

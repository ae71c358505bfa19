"""TLS 1.3 material: a self-signed certificate generated with ``cryptography`` on first use,
and the server/client SSL contexts (TLS 1.3 only, ALPN ``h2``)."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tbcore.errors import SpecError
from tbcore.paths import read_regular_file
from tbcore.workloads import cache_dir

CERT_NAME = "testbed.local"
"""The certificate's subject; also valid for localhost, 127.0.0.1 and the 198.18 server."""
CERT_ALT_IPS = ("127.0.0.1", "198.18.2.2", "::1")
CERT_VALIDITY_DAYS = 3650
ALPN_H2 = "h2"
ALPN_H3 = "h3"


@dataclass(frozen=True)
class CertPaths:
    cert: Path
    key: Path


def default_cert_dir() -> Path:
    return cache_dir().parent / "tls"


def ensure_certificate(cert_dir: Path | None = None) -> CertPaths:
    """Return the certificate and key in ``cert_dir``, creating them on first use (atomically)."""

    directory = cert_dir or default_cert_dir()
    paths = CertPaths(directory / "cert.pem", directory / "key.pem")
    if paths.cert.exists() and paths.key.exists():
        check_certificate(paths)
        return paths
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CERT_NAME)])
    now = datetime.datetime.now(datetime.UTC)
    alt = [x509.DNSName(CERT_NAME), x509.DNSName("localhost")] + [
        x509.IPAddress(ipaddress.ip_address(ip)) for ip in CERT_ALT_IPS
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=CERT_VALIDITY_DAYS))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    for path, data in ((paths.key, key_pem), (paths.cert, cert_pem)):
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    return paths


MAX_PEM_BYTES = 1 << 20
"""A certificate chain or key file above 1 MiB is refused unread (a chain is a few kB)."""


def check_certificate(paths: CertPaths) -> None:
    """The certificate and key files are regular files of bounded size holding a PEM
    certificate and a PEM private key; anything else (a FIFO, garbage) is one
    :class:`SpecError` line naming ``cert-dir``, never a hang or an ssl traceback."""
    cert = read_regular_file(paths.cert, "cert-dir", MAX_PEM_BYTES)
    key = read_regular_file(paths.key, "cert-dir", MAX_PEM_BYTES)
    try:
        x509.load_pem_x509_certificate(cert)
    except ValueError as err:
        raise SpecError("cert-dir", f"{paths.cert}: not a PEM certificate ({err})") from None
    try:
        serialization.load_pem_private_key(key, password=None)
    except (ValueError, TypeError) as err:
        raise SpecError("cert-dir", f"{paths.key}: not a PEM private key ({err})") from None


def server_context(paths: CertPaths, keylog: Path | None = None) -> ssl.SSLContext:
    """TLS 1.3 only, ALPN h2, with session tickets (resumption) on."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(paths.cert, paths.key)
    ctx.set_alpn_protocols([ALPN_H2])
    if keylog is not None:
        ctx.keylog_filename = str(keylog)
    return ctx


class ResumingContext(ssl.SSLContext):
    """An SSLContext whose ``wrap_bio`` passes a saved session: asyncio and uvloop call
    ``wrap_bio`` without one, so TLS resumption needs this hook (docs/machine.md)."""

    session: ssl.SSLSession | None = None

    def wrap_bio(self, incoming, outgoing, server_side=False, server_hostname=None, session=None):  # type: ignore[no-untyped-def, override]
        return super().wrap_bio(
            incoming,
            outgoing,
            server_side=server_side,
            server_hostname=server_hostname,
            session=session if session is not None else self.session,
        )


def client_context(keylog: Path | None = None, verify: bool = False) -> ResumingContext:
    """TLS 1.3 only, ALPN h2. The testbed's certificate is self-signed: no verification by
    default (the peer is our own server in a namespace), as ``curl -k`` does."""
    ctx = ResumingContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ctx.set_alpn_protocols([ALPN_H2])
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if keylog is not None:
        ctx.keylog_filename = str(keylog)
    return ctx

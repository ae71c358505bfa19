"""pcapng with the TLS secrets embedded: blocks, round trip, and tshark decrypting HTTP/2
with no key-log option (a real TLS 1.3 + HTTP/2 exchange in memory, put into TCP packets)."""

from __future__ import annotations

import shutil
import ssl
import struct
import subprocess
from pathlib import Path

import h2.config
import h2.connection
import pytest
from support_tls import handshake_step

from netem import pcapng
from proto.tls import client_context, ensure_certificate, server_context
from tbcore.errors import SpecError

CLIENT, SERVER = "198.18.1.2", "198.18.2.2"


def _pcap(packets: list[tuple[int, bytes]], snaplen: int = 65535, nano: bool = True) -> bytes:
    magic = pcapng.PCAP_MAGIC_NS if nano else pcapng.PCAP_MAGIC_US
    out = bytearray(struct.pack("<IHHiIII", magic, 2, 4, 0, 0, snaplen, 101))
    for ts_ns, data in packets:
        frac = ts_ns % 1_000_000_000 if nano else ts_ns % 1_000_000_000 // 1000
        kept = data[:snaplen]
        out += struct.pack("<IIII", ts_ns // 1_000_000_000, frac, len(kept), len(data)) + kept
    return bytes(out)


def test_blocks_are_padded_and_carry_their_length() -> None:
    dsb = pcapng.decryption_secrets(b"CLIENT_RANDOM a b\n")  # 18 bytes: padded to 20
    block_type, total = struct.unpack_from("<II", dsb)
    assert block_type == pcapng.DSB_TYPE and total == len(dsb) == 12 + 8 + 20
    assert struct.unpack_from("<I", dsb, len(dsb) - 4)[0] == total
    assert struct.unpack_from("<I", dsb, 8)[0] == 0x544C534B  # "TLSK"


def test_key_log_lines_are_kept_once_in_order() -> None:
    client = "# comment\nCLIENT_TRAFFIC_SECRET_0 aa bb\nSERVER_TRAFFIC_SECRET_0 aa cc\n"
    server = "SERVER_TRAFFIC_SECRET_0 aa cc\nnonsense here\nCLIENT_RANDOM dd ee\n"
    assert pcapng.key_log_lines(client, server) == (
        b"CLIENT_TRAFFIC_SECRET_0 aa bb\nSERVER_TRAFFIC_SECRET_0 aa cc\nCLIENT_RANDOM dd ee\n"
    )


@pytest.mark.parametrize("nano", [True, False])
def test_pcap_to_pcapng_round_trip(tmp_path: Path, nano: bool) -> None:
    packets = [(1_700_000_000_123_456_000, b"\x45" + bytes(59)), (1_700_000_001_000_001_000, b"x")]
    (tmp_path / "a.pcap").write_bytes(_pcap(packets, snaplen=40, nano=nano))
    written = pcapng.convert(tmp_path / "a.pcap", tmp_path / "a.pcapng", b"CLIENT_RANDOM 1 2\n")
    assert written == 2
    back = pcapng.read_capture(tmp_path / "a.pcapng")
    assert (back.linktype, back.snaplen, back.secrets) == (101, 40, b"CLIENT_RANDOM 1 2\n")
    assert [(t, d, n) for t, d, n in back.packets] == [
        (packets[0][0], packets[0][1][:40], 60),
        (packets[1][0], b"x", 1),
    ]
    assert pcapng.read_capture(tmp_path / "a.pcap").packets == back.packets
    assert pcapng.capture_file(tmp_path, "a") == tmp_path / "a.pcapng"
    assert pcapng.capture_file(tmp_path, "b") is None


def test_bad_files_are_one_line_errors(tmp_path: Path) -> None:
    (tmp_path / "x.pcap").write_bytes(b"not a capture at all")
    with pytest.raises(SpecError, match=r"x\.pcap"):
        pcapng.read_capture(tmp_path / "x.pcap")
    cut = b"".join(pcapng.pcapng_bytes(101, 100, [(1, b"abc", 3)], b""))[:-6]
    (tmp_path / "cut.pcapng").write_bytes(cut)
    with pytest.raises(SpecError, match="runs past the end"):
        pcapng.read_capture(tmp_path / "cut.pcapng")


# --- a real TLS 1.3 + HTTP/2 exchange, decrypted by tshark from the embedded secrets ------


class _Tcp:
    """One TCP connection's packets (scapy), sequence numbers kept."""

    def __init__(self) -> None:
        self.seq = {CLIENT: 1000, SERVER: 5000}
        self.packets: list[tuple[int, bytes]] = []
        self.t_ns = 1_700_000_000_000_000_000

    def send(self, src: str, payload: bytes, flags: str = "PA") -> None:
        from scapy.layers.inet import IP, TCP

        dst = SERVER if src == CLIENT else CLIENT
        sport, dport = (40000, 443) if src == CLIENT else (443, 40000)
        for at in range(0, max(len(payload), 1), 1400):
            part = payload[at : at + 1400]
            pkt = IP(src=src, dst=dst) / TCP(
                sport=sport, dport=dport, seq=self.seq[src], ack=self.seq[dst], flags=flags
            )
            self.t_ns += 1_000_000
            self.packets.append((self.t_ns, bytes(pkt / part) if part else bytes(pkt)))
            self.seq[src] += len(part) + (1 if "S" in flags else 0)


def _pump(src: ssl.SSLObject, out: ssl.MemoryBIO, into: ssl.MemoryBIO, tcp: _Tcp, who: str):
    data = out.read()
    if data:
        tcp.send(who, data)
        into.write(data)


def _h2_exchange(tmp_path: Path) -> tuple[list[tuple[int, bytes]], str]:
    keylog = tmp_path / "keys.log"
    paths = ensure_certificate(tmp_path / "certs")
    sctx, cctx = server_context(paths, keylog), client_context(keylog)
    cctx.set_alpn_protocols(["h2"])
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = cctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    server = sctx.wrap_bio(s_in, s_out, server_side=True)
    tcp = _Tcp()
    tcp.send(CLIENT, b"", "S")
    tcp.send(SERVER, b"", "SA")
    tcp.send(CLIENT, b"", "A")
    for _ in range(10):
        handshake_step(client, server)
        _pump(client, c_out, s_in, tcp, CLIENT)
        _pump(server, s_out, c_in, tcp, SERVER)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.send_headers(1, [(":method", "GET"), (":path", "/tts"), (":scheme", "https"),
                          (":authority", "localhost")], end_stream=True)  # fmt: skip
    client.write(conn.data_to_send())
    _pump(client, c_out, s_in, tcp, CLIENT)
    return tcp.packets, keylog.read_text()


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_tshark_decrypts_http2_from_the_embedded_secrets(tmp_path: Path) -> None:
    packets, keys = _h2_exchange(tmp_path)
    (tmp_path / "client.pcap").write_bytes(_pcap(packets))
    pcapng.convert(tmp_path / "client.pcap", tmp_path / "client.pcapng", pcapng.key_log_lines(keys))
    argv = ["tshark", "-n", "-o", "tcp.analyze_sequence_numbers:FALSE"]
    shown = [
        "-T",
        "fields",
        "-e",
        "http2.type",
        "-e",
        "http2.header.value",
        "-Y",
        "http2",
        "-d",
        "tcp.port==443,tls",
    ]

    def frames(name: str) -> str:
        done = subprocess.run([*argv, "-r", str(tmp_path / name), *shown], capture_output=True,
                              text=True, timeout=60, check=True)  # fmt: skip
        return done.stdout

    decrypted = frames("client.pcapng")
    assert "/tts" in decrypted  # the request's HEADERS, decrypted with no key log given
    assert frames("client.pcap") == ""  # the same packets without the secrets: nothing

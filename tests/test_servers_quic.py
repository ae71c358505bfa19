"""QUIC pieces without sockets: fixed flow-control windows, counters, configuration.

Two aioquic endpoints are driven in memory with a fake clock (as aioquic's own tests do)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aioquic.quic import events
from aioquic.quic.connection import QuicConnection

from proto.quic.adapter import FixedWindowQuicConnection, stream_fully_sent
from proto.quic.edge import make_quic_configuration, make_quic_connection
from proto.tls import ensure_certificate
from tbcore.errors import SpecError

CLIENT_ADDR = ("1.2.3.4", 1234)
SERVER_ADDR = ("2.3.4.5", 4433)
PAYLOAD_BYTES = 4_000_000


def connections(
    tmp_path: Path,
    *,
    server_config: dict[str, Any],
    client_config: dict[str, Any],
    window: int | None,
    **client_kwargs: Any,
) -> tuple[QuicConnection, QuicConnection]:
    """A client and a server connection (not yet connected); ``window``: both connections'
    fixed window, ``*_config``: the keywords of each one's ``make_quic_configuration``."""
    paths = ensure_certificate(tmp_path / "tls")
    server_configuration = make_quic_configuration(is_client=False, **server_config)
    server_configuration.load_cert_chain(paths.cert, paths.key)
    client_configuration = make_quic_configuration(is_client=True, **client_config)
    client_configuration.verify_mode = 0
    client = make_quic_connection(client_configuration, window, **client_kwargs)
    server = make_quic_connection(
        server_configuration,
        window,
        original_destination_connection_id=client.original_destination_connection_id,
    )
    return client, server


def pair(tmp_path: Path, window: int | None) -> tuple[QuicConnection, QuicConnection]:
    fixed = {"fixed_window_bytes": window}
    return connections(tmp_path, server_config=fixed, client_config=fixed, window=window)


def exchange(client: QuicConnection, server: QuicConnection, now: float) -> None:
    """Deliver what each side has to send at ``now``: client first, then server."""
    for data, _addr in client.datagrams_to_send(now=now):
        server.receive_datagram(data, CLIENT_ADDR, now=now)
    for data, _addr in server.datagrams_to_send(now=now):
        client.receive_datagram(data, SERVER_ADDR, now=now)


def run_transfer(client: QuicConnection, server: QuicConnection) -> tuple[int, int]:
    """Send PAYLOAD_BYTES client -> server; returns (bytes received, largest credit seen)."""
    now = 0.0
    client.connect(SERVER_ADDR, now=now)
    stream_id = None
    received = 0
    largest_credit = 0
    for _ in range(20_000):
        now += 0.001
        exchange(client, server, now)
        while (event := client.next_event()) is not None:
            if isinstance(event, events.HandshakeCompleted) and stream_id is None:
                stream_id = client.get_next_available_stream_id()
                client.send_stream_data(stream_id, b"x" * PAYLOAD_BYTES, end_stream=True)
        while (event := server.next_event()) is not None:
            if isinstance(event, events.StreamDataReceived):
                received += len(event.data)
        limit = server._local_max_data
        largest_credit = max(largest_credit, limit.sent - limit.used)
        if received >= PAYLOAD_BYTES:
            break
    return received, largest_credit


def test_aioquic_grows_its_window_by_itself(tmp_path: Path) -> None:
    client, server = pair(tmp_path, None)
    received, _ = run_transfer(client, server)
    assert received == PAYLOAD_BYTES
    assert server._local_max_data.value > 2 * 1024 * 1024  # doubled from 1 MiB


@pytest.mark.parametrize("window", [64_000, 256_000])
def test_fixed_window_stays_fixed(tmp_path: Path, window: int) -> None:
    client, server = pair(tmp_path, window)
    assert isinstance(server, FixedWindowQuicConnection)
    received, largest_credit = run_transfer(client, server)
    assert received == PAYLOAD_BYTES  # the window refills: the transfer completes
    assert largest_credit <= window  # and never grants more than the window
    assert server._local_max_data.value <= PAYLOAD_BYTES + window
    for stream in server._streams.values():
        if stream.max_stream_data_local:
            assert stream.max_stream_data_local <= stream.receiver.highest_offset + window


def test_stream_fully_sent(tmp_path: Path) -> None:
    client, server = pair(tmp_path, None)
    now = 0.0
    client.connect(SERVER_ADDR, now=now)
    stream_id = client.get_next_available_stream_id()
    client.send_stream_data(stream_id, b"y" * 5000, end_stream=True)
    assert not stream_fully_sent(client, stream_id)
    for _ in range(50):
        now += 0.001
        exchange(client, server, now)
    assert stream_fully_sent(client, stream_id)


def test_configuration_knobs(tmp_path: Path) -> None:
    config = make_quic_configuration(
        is_client=True,
        cc="cubic",
        max_datagram_size=1452,
        fixed_window_bytes=100_000,
        qlog_dir=tmp_path / "q",
    )
    assert config.congestion_control_algorithm == "cubic"
    assert config.max_datagram_size == 1452
    assert config.max_data == config.max_stream_data == 100_000
    assert config.alpn_protocols == ["h3"]
    assert (tmp_path / "q").is_dir() and config.quic_logger is not None


BURST_BYTES = 354_640
WARM_CWND_BYTES = 2_000_000
"""A warm congestion window: more than the burst, less than the 200 ms, 333 Mbit/s BDP."""


def burst_rate_bps(
    tmp_path: Path,
    pacing: str | float,
    burst_bytes: int = BURST_BYTES,
    max_rate_bps: float | None = None,
) -> float:
    """The rate at which a burst (354,640 bytes by default) leaves the client on a warm connection
    (srtt 200 ms), driving aioquic's pacing timer as the event loop would."""
    client, server = connections(
        tmp_path,
        server_config={"max_datagram_size": 1452, "fixed_window_bytes": 2 * burst_bytes},
        client_config={"max_datagram_size": 1452},
        window=None,
        pacing=pacing,
        max_pacing_rate_bps=max_rate_bps,
    )
    now = 0.0
    client.connect(SERVER_ADDR, now=now)
    for _ in range(10):
        now += 0.001
        exchange(client, server, now)
    assert client._handshake_complete
    client._loss._cc.congestion_window = max(WARM_CWND_BYTES, 2 * burst_bytes)
    client._loss._rtt_smoothed = 0.2
    client._loss._pacer.update_rate(WARM_CWND_BYTES, 0.2)
    stream_id = client.get_next_available_stream_id()
    client.send_stream_data(stream_id, b"a" * burst_bytes, end_stream=True)
    start = now = now + 1.0
    sent_bytes = 0
    last = start
    while sent_bytes < burst_bytes and now < start + 1.0:
        out = client.datagrams_to_send(now=now)
        if out:
            sent_bytes += sum(len(d) for d, _ in out)
            last = now
        pacing_at = client._pacing_at
        now = pacing_at if pacing_at is not None and pacing_at > now else now + 1e-4
    assert sent_bytes >= burst_bytes
    # the last datagram takes one packet time to leave: count it in
    return sent_bytes * 8 / max(last - start + 1452 * 8 / 333e6, 1e-9)


def test_pacing_off_sends_the_whole_burst_at_once(tmp_path: Path) -> None:
    assert burst_rate_bps(tmp_path, "off") > 10 * 333e6


def test_unpaced_burst_is_handed_over_in_slices() -> None:
    from proto.quic.edge import NO_PACING_SLICE_DATAGRAMS, NoPacer

    pacer = NoPacer(max_datagram_size=1452)
    sent = 0
    while pacer.next_send_time(1.0) is None:
        pacer.update_after_send(1.0)
        sent += 1
    assert sent == NO_PACING_SLICE_DATAGRAMS
    assert pacer.next_send_time(1.0) == pytest.approx(1.0)  # "again, at once"
    assert pacer.next_send_time(1.0 + 1e-6) is None  # the next call starts a new slice


def test_aioquic_pacing_spreads_the_burst_over_cwnd_per_rtt(tmp_path: Path) -> None:
    rate = burst_rate_bps(tmp_path, "cwnd")
    assert rate == pytest.approx(WARM_CWND_BYTES * 8 / 0.2, rel=0.2)  # 80 Mbit/s, not 333


def test_fixed_rate_pacing_at_the_path_rate(tmp_path: Path) -> None:
    # long enough that the initial bucket (2 ms of sending) is a small part of it
    rate = burst_rate_bps(tmp_path, 333e6, burst_bytes=5_000_000)
    assert rate == pytest.approx(333e6, rel=0.05)
    # the audio burst: the bucket lets its first 2 ms out at once, the rest at 333 Mbit/s
    assert 333e6 <= burst_rate_bps(tmp_path, 333e6) <= 1.35 * 333e6


def test_max_pacing_rate_caps_aioquic_pacing(tmp_path: Path) -> None:
    # cwnd / srtt would be 80 Mbit/s; the cap holds it at 40 (like SO_MAX_PACING_RATE)
    rate = burst_rate_bps(tmp_path, "cwnd", burst_bytes=1_500_000, max_rate_bps=40e6)
    assert rate == pytest.approx(40e6, rel=0.05)


def test_max_pacing_rate_paces_an_unpaced_sender(tmp_path: Path) -> None:
    rate = burst_rate_bps(tmp_path, "off", burst_bytes=3_000_000, max_rate_bps=100e6)
    assert rate == pytest.approx(100e6, rel=0.05)


def acks_sent_by_the_receiver(
    tmp_path: Path, ack_delay_s: float | None, ack_policy: str = "default"
) -> tuple[int, int]:
    """(datagrams the client sent, datagrams the server sent) while 1 MB goes client ->
    server, the client's datagrams arriving one every 0.3 ms (a 54 Mbit/s medium's pace)."""
    paths = ensure_certificate(tmp_path / "tls")
    server_configuration = make_quic_configuration(is_client=False)
    server_configuration.load_cert_chain(paths.cert, paths.key)
    client_configuration = make_quic_configuration(is_client=True)
    client_configuration.verify_mode = 0
    client = make_quic_connection(client_configuration, None, ack_policy=ack_policy)
    server = make_quic_connection(
        server_configuration,
        None,
        ack_delay_s=ack_delay_s,
        ack_policy=ack_policy,
        original_destination_connection_id=client.original_destination_connection_id,
    )
    now = 0.0
    client.connect(SERVER_ADDR, now=now)
    wire: list[bytes] = []
    sent = {"client": 0, "server": 0}
    received = 0
    stream_id = None
    for _ in range(100_000):
        now += 0.0003
        for data, _addr in client.datagrams_to_send(now=now):
            wire.append(data)
        if wire:
            server.receive_datagram(wire.pop(0), CLIENT_ADDR, now=now)
            sent["client"] += 1
        timer = server.get_timer()
        if timer is not None and timer <= now:
            server.handle_timer(now=now)
        for data, _addr in server.datagrams_to_send(now=now):
            client.receive_datagram(data, SERVER_ADDR, now=now)
            sent["server"] += 1
        timer = client.get_timer()
        if timer is not None and timer <= now:
            client.handle_timer(now=now)
        while (event := client.next_event()) is not None:
            if isinstance(event, events.HandshakeCompleted) and stream_id is None:
                stream_id = client.get_next_available_stream_id()
                client.send_stream_data(stream_id, b"x" * 1_000_000, end_stream=True)
        while (event := server.next_event()) is not None:
            if isinstance(event, events.StreamDataReceived):
                received += len(event.data)
        if received >= 1_000_000:
            return sent["client"], sent["server"]
    raise AssertionError("transfer did not finish")


def test_a_longer_ack_delay_sends_fewer_acks(tmp_path: Path) -> None:
    per_packet = acks_sent_by_the_receiver(tmp_path, 0.0)
    default = acks_sent_by_the_receiver(tmp_path, None)
    fewer = acks_sent_by_the_receiver(tmp_path, 0.005)
    ratios = [server / client for client, server in (per_packet, default, fewer)]
    assert ratios[0] > ratios[1] > ratios[2]
    assert ratios[0] > 0.8  # about one ACK per packet
    assert ratios[2] < 0.15  # one per 5 ms: about one per 17 packets, plus the handshake's


def test_the_ack_policy_sets_the_receivers_acks_per_packet(tmp_path: Path) -> None:
    """1 MB in 1,200-byte datagrams, one every 0.3 ms: ``immediate`` answers each with an
    ACK, ``every:2,max:10ms`` every second one, and ``every:8,max:1ms`` one per five: the
    timer comes first, due 1 ms after the first unacknowledged datagram and seen at the next
    0.3 ms tick (the fourth after it), whose own datagram it acknowledges too."""
    ratios = {
        policy: server / client
        for policy in ("immediate", "every:2,max:10ms", "every:8,max:1ms")
        for client, server in [acks_sent_by_the_receiver(tmp_path, None, policy)]
    }
    assert ratios["immediate"] > 0.97
    assert 0.45 < ratios["every:2,max:10ms"] < 0.55
    assert 0.18 < ratios["every:8,max:1ms"] < 0.22


def test_ack_frequency_and_tack_set_the_receivers_acks_from_the_sender_and_the_rtt(
    tmp_path: Path,
) -> None:
    """The same transfer: under ack-frequency the sender's ACK_FREQUENCY frames take the
    receiver from aioquic's 1 ms timer to one ACK per N as its window grows (fewer ACKs
    than every:2); under tack, at an RTT below the 0.3 ms between datagrams, L = 2 rules:
    one ACK per two."""
    ratios = {
        policy: server / client
        for policy in ("ack-frequency", "tack")
        for client, server in [acks_sent_by_the_receiver(tmp_path, None, policy)]
    }
    assert ratios["ack-frequency"] < 0.45
    assert 0.45 < ratios["tack"] < 0.55


@pytest.mark.parametrize("bad", [-0.001, 0.026, True, "1ms"])
def test_ack_delay_beyond_max_ack_delay_is_refused(tmp_path: Path, bad: object) -> None:
    configuration = make_quic_configuration(is_client=True)
    with pytest.raises(SpecError) as err:
        make_quic_connection(configuration, None, ack_delay_s=bad)  # type: ignore[arg-type]
    assert err.value.field == "quic-ack-delay"


# --- BBR on aioquic: its pacer, its ACK hook, its app-limited check -----------------------


def test_bbr_connection_gets_the_control_pacer_and_the_ack_hook(tmp_path: Path) -> None:
    from proto.quic.adapter import congestion_control_of
    from proto.quic.bbr import BbrCongestionControl
    from proto.quic.edge import ControlPacer

    client, _server = connections(
        tmp_path,
        server_config={"cc": "bbr"},
        client_config={"cc": "bbr"},
        window=None,
        max_pacing_rate_bps=100e6,
    )
    control = congestion_control_of(client)
    assert isinstance(control, BbrCongestionControl)
    pacer = client._loss._pacer
    assert isinstance(pacer, ControlPacer) and pacer.control is control
    # SO_MAX_PACING_RATE's counterpart caps BBR's own rate too (sk_max_pacing_rate)
    assert control.max_pacing_rate_bytes_per_s == 100e6 / 8
    assert "on_ack_received_then_end" in client._loss.on_ack_received.__qualname__


def test_control_pacer_follows_the_controls_rate_capped() -> None:
    from proto.quic.bbr import BbrCongestionControl
    from proto.quic.edge import ControlPacer

    control = BbrCongestionControl(max_datagram_size=1200)
    pacer = ControlPacer(max_datagram_size=1200, control=control, max_rate_bps=80e6)
    control.pacing_rate_bytes_per_s = 1e6  # 8 Mbit/s: below the cap
    assert pacer.next_send_time(1.0) is None  # a full bucket
    sent = 0
    while pacer.next_send_time(1.0) is None:
        pacer.update_after_send(1.0)
        sent += 1
    # the bucket: Linux's burst at 8 Mbit/s (2 datagrams, 2.4 ms); then one per 1.2 ms
    assert sent == 2
    assert pacer.next_send_time(1.0) == pytest.approx(1.0 + 1200 / 1e6)
    # and the control learns when the next datagram may leave (its tcp_wstamp_ns)
    assert control.departure_time_s == pytest.approx(1.0 + 1200 / 1e6)
    aioquic_update = 10**9  # aioquic's cwnd / srtt update is ignored
    pacer.update_rate(aioquic_update, 0.001)
    assert pacer.rate_bytes_per_s == 1e6
    control.pacing_rate_bytes_per_s = 50e6  # 400 Mbit/s: the cap holds it at 80
    pacer.next_send_time(2.0)
    assert pacer.rate_bytes_per_s == pytest.approx(80e6 / 8)


def test_bbr_download_in_memory_reaches_probe_bw_and_paces_at_its_rate(tmp_path: Path) -> None:
    from support_quicpath import Download, make_path

    from proto.quic.bbr import BbrMode

    path = make_path(tmp_path, cc="bbr", rtt_s=0.040, rate_bps=10e6, queue_bytes=100_000)
    download = Download(path, 3_000_000)
    download.run(limit_s=30.0)
    assert bytes(download.received) == bytes(i % 251 for i in range(3_000_000))
    control = path.server._loss._cc
    assert control.mode == BbrMode.PROBE_BW
    assert control.bandwidth_bytes_per_s == pytest.approx(10e6 / 8, rel=0.03)
    assert control.min_rtt_s == pytest.approx(0.040, abs=0.003)
    assert path.server._loss._pacer.rate_bytes_per_s == control.pacing_rate_bytes_per_s
    # ~2.4 s at 10 Mbit/s plus start-up: the path was kept full
    assert download.done_at_s is not None and download.done_at_s < 3.3


def test_bbr_under_random_loss_beats_reno_in_memory(tmp_path: Path) -> None:
    from support_quicpath import Download, make_path

    times = {}
    for cc in ("reno", "bbr"):
        path = make_path(tmp_path / cc, cc=cc, rtt_s=0.2, rate_bps=333e6, down_loss=0.14)
        download = Download(path, 354_640)
        download.run(limit_s=60.0)
        assert len(download.received) == 354_640
        times[cc] = download.done_at_s
    # the chapter's path: Reno halves its window at every loss, BBR does not
    assert times["bbr"] is not None and times["reno"] is not None
    assert times["bbr"] < 4.0 < 2 * times["bbr"] < times["reno"]


def test_app_limited_check_marks_a_sender_with_nothing_to_send(tmp_path: Path) -> None:
    from proto.quic.adapter import congestion_control_of
    from proto.quic.edge import app_limited_check

    client, server = connections(
        tmp_path, server_config={"cc": "bbr"}, client_config={"cc": "bbr"}, window=None
    )
    check = app_limited_check(client)
    assert check is not None
    control = congestion_control_of(client)
    now = 0.0
    client.connect(SERVER_ADDR, now=now)
    for _ in range(10):
        now += 0.001
        exchange(client, server, now)
    control.delivery.app_limited_until_bytes = 0
    check()  # nothing queued, a window with room, no pacing wait
    assert control.delivery.is_app_limited
    # reno has no delivery-rate sampling: no check
    reno_client, _ = connections(tmp_path, server_config={}, client_config={}, window=None)
    assert app_limited_check(reno_client) is None

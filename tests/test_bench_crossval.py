"""harness/bench/crossval.py: the statistics and report (pure), the probe and upload
(namespaces)."""

from __future__ import annotations

import json
import math
import random
import socket
import struct
import threading
from pathlib import Path

import numpy as np
import pytest
from pyroute2 import IPRoute, NetNS, netns

from harness import cli
from harness.bench import crossval
from harness.bench.crossval import (
    TCP_INFO_BYTES,
    UPLOAD_BYTES,
    Part,
    Probe,
    TcpInfo,
    Upload,
    closing_note,
    comparisons,
    probe_rtt_s,
    quantile,
    render_markdown,
    summary_rows,
)
from netem import names
from netem.linkspec import format_link, parse_link
from tbcore.errors import SpecError


def _upload(backend: str, cc: str, run: int, upload_s: float, retrans: int = 0) -> Upload:
    return Upload(
        backend=backend,
        cc=cc,
        run=run,
        upload_s=upload_s,
        connect_s=0.2,
        reply_s=upload_s + 0.1,
        size_bytes=UPLOAD_BYTES,
        sha256_ok=True,
        retrans_segments=retrans,
        data_segments=250 + retrans,
        bytes_sent=UPLOAD_BYTES + 1448 * retrans,
        bytes_retrans=1448 * retrans,
        min_rtt_s=0.2005,
    )


def _part(backend: str, times: dict[str, list[float]]) -> Part:
    part = Part(
        backend=backend,
        link=format_link(parse_link(crossval.SCENARIO_LINK)),
        ccs=list(times),
        runs=max(len(v) for v in times.values()),
        probe=Probe(sent=100, rtts_s=[0.2 + i * 1e-5 for i in range(86)]),
        environment={"kernel": "test", "steal_percent": 0.0},
    )
    for cc, values in times.items():
        part.uploads += [_upload(backend, cc, i, t, retrans=35) for i, t in enumerate(values)]
    return part


# --- pure core ----------------------------------------------------------------------------


def test_quantile_matches_numpy_linear() -> None:
    rng = random.Random(7)
    values = [rng.expovariate(1.0) for _ in range(37)]
    for q in (0.0, 0.25, 0.5, 0.75, 0.99, 1.0):
        assert quantile(values, q) == pytest.approx(float(np.quantile(values, q)))
    assert math.isnan(quantile([], 0.5))


def test_probe_rtt_takes_out_the_echo_turnaround() -> None:
    # sent at 0, server got it at 100 ms (its clock), replied 7 ms later, back at 207.5 ms
    assert probe_rtt_s(0, 100_000_000, 107_000_000, 207_500_000) == pytest.approx(0.2005)


def test_probe_loss_counts_missing_echoes() -> None:
    assert Probe(sent=200, rtts_s=[0.2] * 172).loss == pytest.approx(0.14)


def test_tcp_info_parse_reads_linux_offsets() -> None:
    raw = bytearray(TCP_INFO_BYTES)
    struct.pack_into("I", raw, 80, 42)  # snd_cwnd
    struct.pack_into("I", raw, 100, 17)  # total_retrans
    struct.pack_into("I", raw, 148, 200_123)  # min_rtt (µs)
    struct.pack_into("I", raw, 156, 280)  # data_segs_out
    struct.pack_into("QQ", raw, 200, 400_000, 45_360)  # bytes_sent, bytes_retrans
    info = TcpInfo.parse(bytes(raw))
    assert (info.snd_cwnd, info.total_retrans, info.min_rtt_us) == (42, 17, 200_123)
    assert (info.data_segs_out, info.bytes_sent, info.bytes_retrans) == (280, 400_000, 45_360)
    with pytest.raises(SpecError, match="tcp_info"):
        TcpInfo.parse(bytes(104))


def test_tcp_info_of_a_real_loopback_connection() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    data = b"x" * 100_000
    got = bytearray()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            while len(got) < len(data):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                got.extend(chunk)

    thread = threading.Thread(target=serve)
    thread.start()
    with socket.create_connection(listener.getsockname()) as client:
        client.sendall(data)
        thread.join(10)
        info = TcpInfo.of(client)
    listener.close()
    assert len(got) == len(data)
    assert info.bytes_sent >= len(data)
    assert info.data_segs_out >= 2
    assert 0 < info.min_rtt_us < 1_000_000


def test_summary_rows_put_backends_side_by_side_per_cc() -> None:
    user = _part("userspace", {"cubic": [10.0, 12.0, 14.0, 16.0], "bbr": [2.0, 3.0]})
    kern = _part("netem", {"cubic": [11.0, 13.0, 15.0, 17.0], "bbr": [2.5, 3.5]})
    rows = summary_rows([user, kern])
    assert [(r["cc"], r["backend"]) for r in rows] == [
        ("cubic", "userspace"),
        ("cubic", "netem"),
        ("bbr", "userspace"),
        ("bbr", "netem"),
    ]
    cubic_user = rows[0]
    assert cubic_user["runs"] == 4
    assert cubic_user["median_s"] == pytest.approx(13.0)
    assert cubic_user["p25_s"] == pytest.approx(11.5)
    assert cubic_user["p75_s"] == pytest.approx(14.5)
    assert cubic_user["min_s"] == 10.0
    assert cubic_user["probe_loss"] == pytest.approx(0.14)
    assert cubic_user["retrans_fraction"] == pytest.approx(1448 * 35 / (UPLOAD_BYTES + 1448 * 35))
    assert cubic_user["integrity_ok"]
    comps = {c["cc"]: c for c in comparisons([user, kern])}
    assert comps["cubic"]["median_diff_s"] == pytest.approx(1.0)
    assert comps["bbr"]["median_ratio"] == pytest.approx(3.0 / 2.5)
    # 4 runs a side cannot show equivalence within 10 % (1.3 s): TOST p stays above 0.05
    assert comps["cubic"]["margin_s"] == pytest.approx(1.3)
    assert not comps["cubic"]["equivalent"] and comps["cubic"]["tost_p"] > 0.05


def test_agreement_is_an_equivalence_test_not_an_interval_containing_zero() -> None:
    times = [20.0 + 0.1 * i for i in range(10)]
    user = _part("userspace", {"cubic": times})
    close = _part("netem", {"cubic": [t + 0.2 for t in times]})
    (comp,) = comparisons([user, close])
    assert comp["equivalent"] and comp["tost_p"] < 0.05
    assert "the backends agree for this sender" in closing_note([user, close])
    far = _part("netem", {"cubic": [t + 5.0 for t in times]})
    (comp,) = comparisons([user, far])
    assert not comp["equivalent"]


def test_a_corrupt_upload_shows_in_the_table() -> None:
    part = _part("userspace", {"cubic": [1.0]})
    part.uploads[0] = Upload(**{**part.uploads[0].__dict__, "sha256_ok": False})
    assert not summary_rows([part])[0]["integrity_ok"]


def test_render_markdown_has_one_line_per_row_and_the_comparison() -> None:
    user = _part("userspace", {"cubic": [10.0, 12.0]})
    kern = _part("netem", {"cubic": [11.0, 13.0]})
    text = render_markdown([user, kern], note="They agree.")
    table = [line for line in text.splitlines() if line.startswith("| cubic |")]
    assert len(table) == 2
    assert "| cubic | userspace | 2 | 11.00 |" in text
    assert "- cubic: +1.00 s" in text
    assert text.rstrip().endswith("They agree.")


def test_part_json_round_trip_and_schema_check() -> None:
    part = _part("netem", {"cubic": [1.5, 2.5]})
    again = Part.from_dict(json.loads(json.dumps(part.to_dict())))
    assert again == part
    data = part.to_dict()
    data["schema"] = 99
    with pytest.raises(SpecError, match="schema"):
        Part.from_dict(data)
    data = part.to_dict()
    del data["uploads"]
    with pytest.raises(SpecError, match="malformed"):
        Part.from_dict(data)


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--runs", "0"], "runs:"),
        (["--runs", "ten"], "runs:"),
        (["--probes", "-1"], "probes:"),
        (["--cc", "cu bic"], "cc:"),
        (["--cc", ","], "cc:"),
        (["--link", "rtt=fast"], "rtt:"),
    ],
)
def test_bad_arguments_are_one_line_errors(
    argv: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["bench", "crossval", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("testbed bench: error: ")
    assert field in err
    assert "\n" not in err


def test_guest_command_runs_the_netem_part_into_the_share() -> None:
    import argparse

    args = argparse.Namespace(runs=3, cc=["cubic"], probes=50, link=crossval.SCENARIO_LINK)
    command = crossval.guest_command(args)
    assert command[1:3] == ["-m", "harness.bench.crossval"]
    assert command[command.index("--part") + 1] == "netem"
    assert command[command.index("--json") + 1].startswith("/run/tb-vm/out/")


# --- the edges, on a plain veth pair (no delay: checks the mechanics) --------------------

CLIENT_NS = "tb-vm3-client"
SERVER_NS = "tb-vm3-server"


@pytest.fixture
def veth_path():
    """Client and server namespaces joined by one veth, with the testbed's addresses."""
    for ns in (CLIENT_NS, SERVER_NS):
        netns.create(ns)
    try:
        with IPRoute() as ipr:
            ipr.link("add", ifname="tb-vm3-c", kind="veth", peer="tb-vm3-s")
            for dev, ns in (("tb-vm3-c", CLIENT_NS), ("tb-vm3-s", SERVER_NS)):
                (index,) = ipr.link_lookup(ifname=dev)
                ipr.link("set", index=index, net_ns_fd=ns)
        for ns, dev, addr, peer_net in (
            (CLIENT_NS, "tb-vm3-c", names.CLIENT_ADDR, names.SERVER_NET),
            (SERVER_NS, "tb-vm3-s", names.SERVER_ADDR, names.CLIENT_NET),
        ):
            with NetNS(ns) as ipr:
                (index,) = ipr.link_lookup(ifname=dev)
                ipr.addr("add", index=index, address=addr, prefixlen=names.PREFIX_LEN)
                ipr.link("set", index=index, state="up")
                ipr.route("add", dst=peer_net, oif=index, scope="link")
        yield
    finally:
        for ns in (CLIENT_NS, SERVER_NS):
            if ns in netns.listnetns():
                netns.remove(ns)


@pytest.mark.root
@pytest.mark.timeout(60)
def test_probe_on_a_clean_path_loses_nothing(veth_path: None) -> None:
    probe = crossval.udp_probe(CLIENT_NS, SERVER_NS, count=50, gap_s=0.002, drain_s=0.5)
    assert probe.sent == 50
    assert probe.loss == 0.0
    assert all(0 < rtt < 0.05 for rtt in probe.rtts_s)


@pytest.mark.root
@pytest.mark.timeout(60)
def test_upload_arrives_whole_and_is_timed(veth_path: None) -> None:
    data = crossval.payload()
    upload = crossval.tcp_upload(
        CLIENT_NS, SERVER_NS, cc="cubic", data=data, backend="test", run=0, timeout_s=30
    )
    assert len(data) == UPLOAD_BYTES
    assert upload.size_bytes == UPLOAD_BYTES
    assert upload.sha256_ok
    assert 0 < upload.connect_s <= upload.upload_s <= upload.reply_s
    assert upload.bytes_sent >= UPLOAD_BYTES
    assert upload.retrans_segments == 0
    assert upload.data_segments >= UPLOAD_BYTES // 65536


@pytest.mark.root
@pytest.mark.timeout(60)
def test_an_unknown_congestion_control_is_refused(veth_path: None) -> None:
    with pytest.raises(SpecError, match="cc"):
        crossval.tcp_upload(
            CLIENT_NS, SERVER_NS, cc="nosuchcc", data=b"x", backend="test", run=0, timeout_s=5
        )


# --- across the project's Link (userspace emulator on this host) --------------------------


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_measure_part_sees_the_configured_delay_and_loss() -> None:
    spec = parse_link("rtt=40ms,rate=20mbit,up.loss=10%")
    part = crossval.measure_part(
        "userspace", spec, runs=1, ccs=["cubic"], probes=300, name="vm4", progress=lambda _: None
    )
    assert part.probe is not None
    rtts = sorted(part.probe.rtts_s)
    assert rtts[0] >= 0.040
    assert quantile(rtts, 0.5) < 0.040 + 0.010
    # 300 probes at 10 % loss: P(outside 3 %..20 %) is below 1e-4
    assert 0.03 < part.probe.loss < 0.20
    (upload,) = part.uploads
    assert upload.sha256_ok and upload.size_bytes == UPLOAD_BYTES
    assert upload.connect_s >= 0.040
    assert upload.min_rtt_s >= 0.040
    assert part.environment["sysctls_client"]["net.ipv4.tcp_no_metrics_save"] == "1"


def _with_counters(part: Part, loss: float) -> Part:
    part.environment["link_counters"] = {
        "up": {"packets_in": 1000, "dropped_loss": round(1000 * loss), "realised_loss": loss},
        "down": {"packets_in": 900, "dropped_loss": 0, "realised_loss": 0.0},
    }
    return part


def test_closing_note_states_closeness_and_reasons() -> None:
    user = _with_counters(_part("userspace", {"cubic": [10.0, 12.0, 14.0, 16.0]}), 0.141)
    kern = _with_counters(_part("netem", {"cubic": [10.5, 12.5, 14.5, 16.5]}), 0.139)
    note = crossval.closing_note([user, kern])
    assert "- cubic: median 13.50 s on netem vs 13.00 s on the emulator" in note
    assert "agreement is not shown" in note  # 4 runs a side: too few for 10 %
    assert "13.9 % vs 14.1 %" in note
    assert "Why the two can differ" in note
    far = _with_counters(_part("netem", {"cubic": [40.0, 41.0, 42.0, 43.0]}), 0.14)
    assert "agreement is not shown" in crossval.closing_note([user, far])


def test_join_writes_the_report_from_two_parts(tmp_path: Path) -> None:
    user = _with_counters(_part("userspace", {"cubic": [10.0, 12.0]}), 0.14)
    kern = _with_counters(_part("netem", {"cubic": [11.0, 13.0]}), 0.14)
    paths = []
    for part in (user, kern):
        path = tmp_path / f"{part.backend}.json"
        path.write_text(json.dumps(part.to_dict()))
        paths.append(str(path))
    stem = tmp_path / "report" / "crossval"
    assert cli.main(["bench", "crossval", "--join", *paths, "--out", str(stem)]) == 0
    report = json.loads(stem.with_suffix(".json").read_text())
    assert [row["backend"] for row in report["summary"]] == ["userspace", "netem"]
    assert report["summary"][0]["link_loss_up"] == pytest.approx(0.14)
    assert [Part.from_dict(p) for p in report["parts"]] == [user, kern]
    text = stem.with_suffix(".md").read_text()
    assert "| cubic | netem | 2 | 12.00 |" in text and "## Note" in text
    # the order is fixed: userspace first, netem second
    assert cli.main(["bench", "crossval", "--join", paths[1], paths[0], "--out", str(stem)]) == 2


def test_join_of_a_missing_file_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "nope.json")
    assert cli.main(["bench", "crossval", "--join", missing, missing]) == 2
    assert "join:" in capsys.readouterr().err

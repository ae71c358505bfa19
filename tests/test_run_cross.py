"""harness.run.cross: iperf3's command lines and the server's listening socket (no root), and
(root) competing flows that really compete: the request's time rises beside cubic flows."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from support_inputs import experiment_text

from harness.run.cross import client_argv, cross_port, listening, server_argv
from tbcore.cross import CrossTraffic

PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid
   0: 020212C6:AFC9 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0
   1: 020212C6:AFCA 010112C6:D431 01 00000000:00000000 00:00000000 00000000     0
"""


def test_tcp_flows_are_one_iperf3_test_of_n_streams() -> None:
    argv = client_argv(
        CrossTraffic("tcp", 4, cc="bbr"), server="198.18.2.2", port=45001, direction="up",
        duration_s=12.3,
    )  # fmt: skip
    assert argv[:5] == ["iperf3", "-c", "198.18.2.2", "-p", "45001"]
    assert argv[argv.index("-P") + 1] == "4" and argv[argv.index("-C") + 1] == "bbr"
    assert argv[argv.index("-t") + 1] == "13" and "--json" in argv and "-R" not in argv
    assert "--connect-timeout" in argv


def test_a_udp_stream_and_a_download() -> None:
    argv = client_argv(
        CrossTraffic("udp", 1, rate_bps=10e6), server="198.18.2.2", port=45001,
        direction="down", duration_s=5,
    )  # fmt: skip
    assert argv[-3:] == ["-u", "-b", "10000000"] and "-R" in argv


def test_the_server_listens_once_on_the_servers_address() -> None:
    argv = server_argv(bind="198.18.2.2", port=45001)
    assert argv[:3] == ["iperf3", "-s", "-1"] and argv[argv.index("-B") + 1] == "198.18.2.2"
    assert cross_port(7) == 45007 and cross_port(5007) == 45007


def test_listening_reads_proc_net_tcp() -> None:
    assert listening(PROC_NET_TCP, 0xAFC9)
    assert not listening(PROC_NET_TCP, 0xAFCA)  # established, not listening
    assert not listening("header only\n", 0xAFC9)


CROSS_FILE = experiment_text("cross")


@pytest.mark.root
@pytest.mark.timeout(240)
def test_the_request_slows_beside_cubic_flows(tmp_path: Path) -> None:
    """A short path (40 ms, 20 Mbit/s): the ASR upload alone takes about 0.5 s; beside two
    cubic flows that fill the drop-tail queue (one BDP, 40 ms) it waits behind their queue
    every round trip and gets a third of the rate."""
    from harness.cli import main

    experiment = tmp_path / "crosstest.toml"
    experiment.write_text(CROSS_FILE)
    code = main(
        ["run", str(experiment), "--output", str(tmp_path), "--link-name", "tbxcross",
         "--attempts", "1"]
    )  # fmt: skip
    (result,) = tmp_path.glob("crosstest/*")
    assert code in (0, 1)
    frame = pd.read_csv(result / "runs.csv").set_index("level")
    for level in ("alone", "cubic-2"):
        assert not str(frame.loc[level, "invalid_reason"]).startswith(("error", "harness"))
    alone, beside = frame.loc["alone"], frame.loc["cubic-2"]
    assert pd.isna(alone["cross"]) and beside["cross"] == "tcp:2:cubic"
    assert beside["total_s"] > 1.3 * alone["total_s"]
    assert beside["cross_flows"] == 2 and beside["cross_bytes"] > 1e6
    assert 0 < beside["request_share"] < 0.5
    assert beside["bound_fair_s"] > beside["bound_s"]
    run = result / "runs" / next(p.name for p in (result / "runs").iterdir() if "cubic" in p.name)
    assert (run / "cross-client.json").stat().st_size > 0 and (run / "cross.csv").is_file()
    assert "## Beside competing traffic" in (result / "report.md").read_text()

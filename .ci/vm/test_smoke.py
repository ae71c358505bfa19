"""Smoke test of the netem guest: the kernel's sch_netem, set up with pyroute2 alone.

Client and server namespaces joined by one veth pair (no router, no project backend), netem
on both ends: 50 ms each way, and 20 % loss on the server's end (the return direction).
A UDP echo probe and a TCP upload cross it. It proves the guest pipeline (modules, the 9p
root, the host venv, namespaces) independently of the backends, and that the delay is
real: nothing comes back sooner than the configured round trip. Times are kernel receive
timestamps (harness.bench.crossval's probe), so the guest's slow CPU does not count as delay.

Runs only in the guest (``.ci/netem-vm`` sets TESTBED_IN_VM); the host kernel has no netem.
"""

from __future__ import annotations

import os
import statistics

import pytest
from pyroute2 import IPRoute, NetNS, netns

from harness.bench import crossval
from netem import names

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(
        not os.environ.get("TESTBED_IN_VM"), reason="runs in the netem guest (.ci/netem-vm)"
    ),
    pytest.mark.timeout(600),
]

ONE_WAY_DELAY_S = 0.050
RTT_S = 2 * ONE_WAY_DELAY_S
RETURN_LOSS_PERCENT = 20
PROBES = 100
CLIENT_NS = "tb-vm1-client"
SERVER_NS = "tb-vm1-server"
NUD_PERMANENT = 0x80
"""linux/neighbour.h: a static ARP entry. Without it the first packet waits for ARP, whose
request crosses netem too: delayed, and lost 20 % of the time (then retried after 1 s)."""
SLOW_START_ROUNDS = 5
"""354,640 bytes with an initial window of 10 segments: 10+20+40+80+160 (docs/models.md s6)."""


ENDS = {
    # namespace: (veth end, address, the peer's network, netem loss % on this end's egress)
    CLIENT_NS: ("tb-vm1-c", names.CLIENT_ADDR, names.SERVER_NET, 0),
    SERVER_NS: ("tb-vm1-s", names.SERVER_ADDR, names.CLIENT_NET, RETURN_LOSS_PERCENT),
}
PEER = {CLIENT_NS: SERVER_NS, SERVER_NS: CLIENT_NS}


@pytest.fixture
def netem_path():
    for ns in ENDS:
        netns.create(ns)
    try:
        with IPRoute() as ipr:
            ipr.link("add", ifname="tb-vm1-c", kind="veth", peer="tb-vm1-s")
            for ns, (dev, *_) in ENDS.items():
                (index,) = ipr.link_lookup(ifname=dev)
                ipr.link("set", index=index, net_ns_fd=ns)
        macs = {}
        for ns, (dev, *_) in ENDS.items():
            with NetNS(ns) as ipr:
                (link,) = ipr.get_links(ifname=dev)
                macs[ns] = link.get_attr("IFLA_ADDRESS")
        for ns, (dev, addr, peer_net, loss) in ENDS.items():
            peer_addr = ENDS[PEER[ns]][1]
            with NetNS(ns) as ipr:
                (lo,) = ipr.link_lookup(ifname="lo")
                ipr.link("set", index=lo, state="up")
                (index,) = ipr.link_lookup(ifname=dev)
                ipr.addr("add", index=index, address=addr, prefixlen=names.PREFIX_LEN)
                ipr.link("set", index=index, state="up")
                ipr.route("add", dst=peer_net, oif=index, scope="link")
                ipr.neigh(
                    "add", dst=peer_addr, lladdr=macs[PEER[ns]], ifindex=index, state=NUD_PERMANENT
                )
                ipr.tc(
                    "add",
                    "netem",
                    index=index,
                    handle="1:",
                    delay=int(ONE_WAY_DELAY_S * 1e6),
                    loss=loss,
                    limit=10_000,
                )
                kinds = [q.get_attr("TCA_KIND") for q in ipr.get_qdiscs(index=index)]
                assert "netem" in kinds
        yield
    finally:
        for ns in ENDS:
            if ns in netns.listnetns():
                netns.remove(ns)


def test_netem_delays_and_drops_udp(netem_path: None) -> None:
    probe = crossval.udp_probe(CLIENT_NS, SERVER_NS, count=PROBES, drain_s=1.0)
    assert probe.rtts_s, "no echo came back across netem"
    assert min(probe.rtts_s) >= RTT_S
    assert statistics.median(probe.rtts_s) < RTT_S + 0.010
    # 20 % loss on the return: P(no loss in 100) ~ 2e-10, P(>= 40 lost) ~ 1e-5
    assert 0 < probe.loss < 0.40, f"{probe.loss:.0%} of {PROBES} echoes lost, 20 % configured"


def test_tcp_upload_takes_the_slow_start_rounds(netem_path: None) -> None:
    upload = crossval.tcp_upload(
        CLIENT_NS, SERVER_NS, cc="cubic", data=crossval.payload(), backend="netem", run=0
    )
    assert upload.sha256_ok and upload.size_bytes == crossval.UPLOAD_BYTES
    assert upload.connect_s >= RTT_S  # more when the SYN-ACK is lost (20 %): RTO 1 s
    assert upload.min_rtt_s >= RTT_S
    # after the handshake: the slow-start rounds, then the last half trip (a floor: the data
    # direction has no loss); the cap only catches a stall (cubic's HyStart may leave slow
    # start early on the guest's noisy RTT samples, and lost ACKs slow the ACK clock)
    data_s = upload.upload_s - upload.connect_s
    assert data_s >= (SLOW_START_ROUNDS - 1 + 0.5) * RTT_S
    assert data_s < 20 * RTT_S

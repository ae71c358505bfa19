/* TCP segmentation of a super-packet read from a TUN with offloads on (IFF_VNET_HDR and
 * TUNSETOFFLOAD TSO): the sender's stack hands over up to 64 KB at once; the path cuts it
 * into the wire-sized segments the sender would have emitted without TSO (as the kernel's
 * tcp_gso_segment does: sequence numbers advance by gso_size, IPv4 ids by one, CWR only on
 * the first segment, FIN and PSH only on the last), before any of them meets the loss draw,
 * the queue or the clock. Each segment keeps a partial checksum (VIRTIO_NET_HDR_F_NEEDS_CSUM):
 * the receiving stack takes CHECKSUM_PARTIAL as verified, so no payload is summed here. */
#include <string.h>

#include "cpath.h"

static uint32_t sum16(const uint8_t *b, size_t len, uint32_t sum)
{
    for (; len > 1; len -= 2, b += 2)
        sum += (uint32_t)(b[0] << 8 | b[1]);
    if (len)
        sum += (uint32_t)(b[0] << 8);
    return sum;
}

static uint16_t fold(uint32_t sum)
{
    while (sum >> 16)
        sum = (sum & 0xFFFF) + (sum >> 16);
    return (uint16_t)sum;
}

static void put16(uint8_t *b, uint16_t v)
{
    b[0] = (uint8_t)(v >> 8);
    b[1] = (uint8_t)v;
}

size_t gso_segment(struct pool *pool, const struct vnet_hdr *vh, const uint8_t *pkt,
                   size_t len, struct slot **out, size_t max_out)
{
    int type = vh->gso_type & ~VNET_GSO_ECN;
    size_t mss = vh->gso_size, iphl, addr_off, addr_len;
    if ((type != VNET_GSO_TCPV4 && type != VNET_GSO_TCPV6) || mss == 0 || len < 20)
        return 0;
    int v4 = type == VNET_GSO_TCPV4;
    if (v4) {
        if (pkt[0] >> 4 != 4 || pkt[9] != 6)
            return 0;
        iphl = (size_t)(pkt[0] & 0x0F) * 4;
        addr_off = 12;
        addr_len = 8;
    } else {
        if (len < 40 || pkt[0] >> 4 != 6 || pkt[6] != 6)
            return 0; /* extension headers: not cut here */
        iphl = 40;
        addr_off = 8;
        addr_len = 32;
    }
    if (len < iphl + 20)
        return 0;
    size_t tcphl = (size_t)(pkt[iphl + 12] >> 4) * 4, hdrs = iphl + tcphl;
    if (tcphl < 20 || len <= hdrs || hdrs + mss > pool->slot_bytes)
        return 0;
    size_t payload = len - hdrs, n = (payload + mss - 1) / mss;
    if (n > max_out)
        return 0;
    uint32_t seq0 = (uint32_t)pkt[iphl + 4] << 24 | (uint32_t)pkt[iphl + 5] << 16 |
                    (uint32_t)pkt[iphl + 6] << 8 | pkt[iphl + 7];
    uint16_t id0 = (uint16_t)(pkt[4] << 8 | pkt[5]);
    uint32_t addr_sum = sum16(pkt + addr_off, addr_len, 0);
    for (size_t i = 0; i < n; i++) {
        struct slot *s = pool_get(pool);
        if (!s) {
            for (size_t j = 0; j < i; j++)
                pool_put(pool, out[j]);
            return 0;
        }
        size_t chunk = i == n - 1 ? payload - i * mss : mss;
        uint8_t *b = s->data;
        memcpy(b, pkt, hdrs);
        memcpy(b + hdrs, pkt + hdrs + i * mss, chunk);
        s->len = (uint32_t)(hdrs + chunk);
        uint8_t *th = b + iphl;
        if (v4) {
            put16(b + 2, (uint16_t)(hdrs + chunk));
            put16(b + 4, (uint16_t)(id0 + i));
            put16(b + 10, 0);
            put16(b + 10, (uint16_t)~fold(sum16(b, iphl, 0)));
        } else {
            put16(b + 4, (uint16_t)(tcphl + chunk));
        }
        uint32_t seq = seq0 + (uint32_t)(i * mss);
        th[4] = (uint8_t)(seq >> 24);
        th[5] = (uint8_t)(seq >> 16);
        th[6] = (uint8_t)(seq >> 8);
        th[7] = (uint8_t)seq;
        if (i != n - 1)
            th[13] &= (uint8_t)~0x09; /* FIN, PSH */
        if (i != 0)
            th[13] &= (uint8_t)~0x80; /* CWR */
        uint32_t tcp_len = (uint32_t)(tcphl + chunk);
        uint32_t pseudo = addr_sum + 6 + (tcp_len >> 16) + (tcp_len & 0xFFFF);
        if (vh->flags & VNET_F_NEEDS_CSUM) {
            put16(th + 16, fold(pseudo));
            s->vh.flags = VNET_F_NEEDS_CSUM;
            s->vh.csum_start = (uint16_t)iphl;
            s->vh.csum_offset = 16;
        } else {
            put16(th + 16, 0);
            put16(th + 16, (uint16_t)~fold(sum16(th, tcp_len, pseudo)));
        }
        out[i] = s;
    }
    return n;
}

/* Receive offload on delivery (GRO): of the packets one wake-up of a direction releases
 * together, a run of one flow's packets goes to the receiving stack as one super-packet, as
 * the kernel's GRO merges what a NIC hands up in one interrupt.
 *
 * TCP (tcp_gro_receive, net/ipv4/tcp_offload.c): same addresses, ports, ACK number, window,
 * TCP options (their timestamps too), IP TOS/ECN, TTL and DF; sequence numbers back to back;
 * every segment but the last exactly the first's payload size (the gso_size); PSH only on
 * the last; no SYN, FIN, RST or URG; CWR only on the first. The receiver acknowledges the
 * super-packet as a GRO receiver does.
 *
 * UDP (udp_gro_receive, net/ipv4/udp_offload.c): same addresses, ports and IP fields, every
 * datagram but the last of the first's size. A socket that asked for UDP_GRO receives the
 * run as one buffer with its segment size, as behind a NIC; any other gets the datagrams one
 * by one (the kernel cuts the super-packet at the socket, udp_rcv_segment), as it would
 * have.
 *
 * The capture, the packet log and the counters keep the wire's packets. Only packets the
 * sending stack left checksum-partial (NEEDS_CSUM) are merged, so no checksum the wire
 * carried is ever vouched for here; IPv4 packets only with DF set (their ids then carry no
 * meaning, as GRO has it). */

struct l4_view {
    int v4, udp;
    size_t iphl, hdrs, payload;
    uint32_t seq;
    uint8_t flags;
};

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_PSH 0x08
#define TCP_URG 0x20
#define TCP_CWR 0x80
#define IPPROTO_TCP_ 6
#define IPPROTO_UDP_ 17
#define VNET_GSO_UDP_L4 5 /* linux/virtio_net.h */

static int l4_view(const struct slot *s, struct l4_view *v)
{
    const uint8_t *b = s->data;
    size_t len = s->len;
    uint8_t proto;
    if (!(s->vh.flags & VNET_F_NEEDS_CSUM) || s->vh.gso_type != VNET_GSO_NONE || len < 28)
        return 0;
    if (b[0] == 0x45) { /* IPv4 without options */
        /* DF set, MF clear, offset 0 (GRO's rule for the ids of DF packets) */
        if ((b[6] & 0xE0) != 0x40 || (b[6] & 0x1F) || b[7] || (size_t)(b[2] << 8 | b[3]) != len)
            return 0;
        proto = b[9];
        v->v4 = 1;
        v->iphl = 20;
    } else if (b[0] >> 4 == 6) {
        if (len < 48 || (size_t)(b[4] << 8 | b[5]) + 40 != len)
            return 0;
        proto = b[6]; /* extension headers: not merged */
        v->v4 = 0;
        v->iphl = 40;
    } else {
        return 0;
    }
    const uint8_t *h = b + v->iphl;
    if (proto == IPPROTO_UDP_) {
        if ((size_t)(h[4] << 8 | h[5]) != len - v->iphl)
            return 0;
        v->udp = 1;
        v->hdrs = v->iphl + 8;
        v->seq = 0;
        v->flags = 0;
    } else if (proto == IPPROTO_TCP_ && len >= v->iphl + 20) {
        size_t tcphl = (size_t)(h[12] >> 4) * 4;
        if (tcphl < 20)
            return 0;
        v->udp = 0;
        v->hdrs = v->iphl + tcphl;
        v->seq = (uint32_t)h[4] << 24 | (uint32_t)h[5] << 16 | (uint32_t)h[6] << 8 | h[7];
        v->flags = h[13];
    } else {
        return 0;
    }
    if (len <= v->hdrs)
        return 0; /* no payload (an ACK): nothing to merge */
    v->payload = len - v->hdrs;
    return 1;
}

/* The bytes two packets of one run must share: IP (version, TOS, DF, TTL, protocol,
 * addresses; IPv6: traffic class, flow label, next header, hop limit, addresses), the ports,
 * and for TCP the ACK number, header length, window and options. */
static int same_flow(const uint8_t *a, const uint8_t *b, const struct l4_view *v)
{
    if (v->v4) {
        if (memcmp(a, b, 2) || memcmp(a + 6, b + 6, 4) || memcmp(a + 12, b + 12, 8))
            return 0;
    } else if (memcmp(a, b, 4) || memcmp(a + 6, b + 6, 34)) {
        return 0;
    }
    const uint8_t *ta = a + v->iphl, *tb = b + v->iphl;
    if (memcmp(ta, tb, 4))
        return 0;
    return v->udp || (!memcmp(ta + 8, tb + 8, 5) && !memcmp(ta + 14, tb + 14, 2) &&
                      !memcmp(ta + 20, tb + 20, v->hdrs - v->iphl - 20));
}

/* Whether `v` (after `total` payload bytes of the run) joins a run begun by `first`. */
static int joins(const struct l4_view *first, const struct l4_view *v, size_t total)
{
    if (v->v4 != first->v4 || v->udp != first->udp || v->hdrs != first->hdrs ||
        v->payload > first->payload)
        return 0;
    return v->udp || (v->seq == first->seq + (uint32_t)total &&
                      (v->flags & ~TCP_PSH) == (first->flags & ~TCP_CWR));
}

size_t gro_run(struct slot *const *segs, size_t n, uint8_t *hdr, struct vnet_hdr *vh,
               unsigned kinds)
{
    struct l4_view first, v;
    if (n < 2 || !l4_view(segs[0], &first) ||
        !(kinds & (first.udp ? GRO_UDP : GRO_TCP)) ||
        (first.flags & (TCP_FIN | TCP_SYN | TCP_RST | TCP_URG | TCP_PSH)))
        return 1;
    /* the IPv4 total length, or the IPv6 payload length, holds 16 bits */
    size_t k = 1, total = first.payload, limit = 65535 - (first.v4 ? first.hdrs
                                                                  : first.hdrs - 40);
    for (; k < n && k < GRO_MAX_SEGMENTS; k++) {
        const struct slot *s = segs[k];
        if (!l4_view(s, &v) || !joins(&first, &v, total) || total + v.payload > limit ||
            !same_flow(segs[0]->data, s->data, &first))
            break;
        total += v.payload;
        if ((v.flags & TCP_PSH) || v.payload < first.payload) {
            k++; /* a short packet or PSH ends the run, itself in it */
            break;
        }
    }
    if (k < 2)
        return 1;
    /* the first packet's headers, made those of the whole run */
    memcpy(hdr, segs[0]->data, first.hdrs);
    uint8_t *h = hdr + first.iphl;
    size_t l4_len = first.hdrs - first.iphl + total;
    uint32_t pseudo;
    if (first.v4) {
        put16(hdr + 2, (uint16_t)(first.hdrs + total));
        put16(hdr + 10, 0);
        put16(hdr + 10, (uint16_t)~fold(sum16(hdr, 20, 0)));
        pseudo = sum16(hdr + 12, 8, 0);
    } else {
        put16(hdr + 4, (uint16_t)l4_len);
        pseudo = sum16(hdr + 8, 32, 0);
    }
    pseudo += (first.udp ? IPPROTO_UDP_ : IPPROTO_TCP_) + (uint32_t)(l4_len >> 16) +
              (uint32_t)(l4_len & 0xFFFF);
    memset(vh, 0, sizeof(*vh));
    if (first.udp) {
        put16(h + 4, (uint16_t)l4_len);
        put16(h + 6, fold(pseudo));
        vh->gso_type = VNET_GSO_UDP_L4;
        vh->csum_offset = 6;
    } else {
        h[13] |= segs[k - 1]->data[first.iphl + 13] & TCP_PSH;
        put16(h + 16, fold(pseudo));
        vh->gso_type = first.v4 ? VNET_GSO_TCPV4 : VNET_GSO_TCPV6;
        vh->csum_offset = 16;
    }
    vh->flags = VNET_F_NEEDS_CSUM;
    vh->hdr_len = (uint16_t)first.hdrs;
    vh->gso_size = (uint16_t)first.payload;
    vh->csum_start = (uint16_t)first.iphl;
    return k;
}

size_t gro_header_bytes(struct slot *const *segs)
{
    struct l4_view v;
    return l4_view(segs[0], &v) ? v.hdrs : 0;
}

int gro_is_udp(const struct vnet_hdr *vh)
{
    return vh->gso_type == VNET_GSO_UDP_L4;
}

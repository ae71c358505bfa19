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

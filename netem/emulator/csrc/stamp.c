/* The kernel's arrival times (stamp.h): an eBPF socket filter on the TUN device (tun.c runs
 * it in tun_net_xmit, before the packet joins the queue the emulator reads) writes, per
 * packet, bpf_ktime_get_ns() (CLOCK_MONOTONIC, the emulator's clock), the packet's length
 * and a fingerprint of two of its words into a ring in an mmap-able array map. Records are
 * claimed with an atomic fetch-and-add, so senders on several CPUs may write at once; the
 * emulator matches each packet it reads to the next record with the same length and
 * fingerprint, so a packet the kernel dropped after the filter (its queue full) leaves a
 * record nobody takes, and is skipped. The program returns the packet's length: it never
 * drops or trims anything. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/bpf.h>
#include <linux/if_tun.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "stamp.h"

#define INSN(c, d, s, o, i)                                                                   \
    ((struct bpf_insn){.code = (c), .dst_reg = (d), .src_reg = (s), .off = (o), .imm = (i)})
#define MOV_REG(d, s) INSN(BPF_ALU64 | BPF_MOV | BPF_X, d, s, 0, 0)
#define MOV_IMM(d, i) INSN(BPF_ALU64 | BPF_MOV | BPF_K, d, 0, 0, i)
#define ADD_IMM(d, i) INSN(BPF_ALU64 | BPF_ADD | BPF_K, d, 0, 0, i)
#define AND_IMM(d, i) INSN(BPF_ALU64 | BPF_AND | BPF_K, d, 0, 0, i)
#define XOR_REG(d, s) INSN(BPF_ALU64 | BPF_XOR | BPF_X, d, s, 0, 0)
#define ST_MEM(size, d, o, i) INSN(BPF_ST | size | BPF_MEM, d, 0, o, i)
#define STX_MEM(size, d, s, o) INSN(BPF_STX | size | BPF_MEM, d, s, o, 0)
#define LDX_MEM(size, d, s, o) INSN(BPF_LDX | size | BPF_MEM, d, s, o, 0)
#define FETCH_ADD_DW(d, s, o) INSN(BPF_STX | BPF_DW | BPF_ATOMIC, d, s, o, BPF_ADD | BPF_FETCH)
#define CALL(f) INSN(BPF_JMP | BPF_CALL, 0, 0, 0, f)
#define JEQ_IMM(d, i, o) INSN(BPF_JMP | BPF_JEQ | BPF_K, d, 0, o, i)
#define EXIT() INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)
#define LD_MAP_FD(d, fd) INSN(BPF_LD | BPF_DW | BPF_IMM, d, BPF_PSEUDO_MAP_FD, 0, fd), INSN(0, 0, 0, 0, 0)

/* Two words of the packet: IPv4's identification and fragment field (bytes 4-7) and, with
 * a 20-byte IP header, TCP's sequence number or UDP's first payload word (bytes 24-27);
 * zero where the packet is shorter. The program computes the same from the same bytes. */
#define FP_OFFSET_A 4
#define FP_OFFSET_B 24

uint32_t stamp_fingerprint(const uint8_t *pkt, size_t len)
{
    uint32_t a = 0, b = 0;
    if (len >= FP_OFFSET_A + 4)
        memcpy(&a, pkt + FP_OFFSET_A, 4);
    if (len >= FP_OFFSET_B + 4)
        memcpy(&b, pkt + FP_OFFSET_B, 4);
    return a ^ b;
}

static long sys_bpf(int cmd, union bpf_attr *attr)
{
    return syscall(__NR_bpf, cmd, attr, sizeof(*attr));
}

/* Six instructions: skb_load_bytes(skb in r6, offset, r10 + slot, 4), four bytes of the
 * packet at ``offset`` onto the stack (zero stays there when the packet is shorter). */
#define LOAD_WORD(offset, slot)                                                  \
    MOV_REG(R1, R6), MOV_IMM(R2, (offset)), MOV_REG(R3, R10), ADD_IMM(R3, (slot)), \
        MOV_IMM(R4, 4), CALL(BPF_FUNC_skb_load_bytes)

static int load_program(int map_fd, char *log, size_t log_bytes)
{
    enum { R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10 };
    const int len_off = offsetof(struct __sk_buff, len);
    struct bpf_insn prog[] = {
        MOV_REG(R6, R1),                       /* 0: the skb */
        ST_MEM(BPF_DW, R10, -8, 0),            /* 1: two words, zero unless loaded */
        LOAD_WORD(FP_OFFSET_A, -8),            /* 2-7 */
        LOAD_WORD(FP_OFFSET_B, -4),            /* 8-13 */
        ST_MEM(BPF_W, R10, -12, 0),            /* 14: key 0, the count */
        LD_MAP_FD(R1, map_fd),                 /* 15, 16 */
        MOV_REG(R2, R10),                      /* 17 */
        ADD_IMM(R2, -12),                      /* 18 */
        CALL(BPF_FUNC_map_lookup_elem),        /* 19 */
        JEQ_IMM(R0, 0, 24),                    /* 20: -> 45 */
        MOV_REG(R7, R0),                       /* 21 */
        MOV_IMM(R8, 1),                        /* 22 */
        FETCH_ADD_DW(R7, R8, 0),               /* 23: r8 = this packet's sequence */
        MOV_REG(R9, R8),                       /* 24 */
        AND_IMM(R9, STAMP_RING - 1),           /* 25 */
        ADD_IMM(R9, 1),                        /* 26 */
        STX_MEM(BPF_W, R10, R9, -12),          /* 27: key of its record */
        LD_MAP_FD(R1, map_fd),                 /* 28, 29 */
        MOV_REG(R2, R10),                      /* 30 */
        ADD_IMM(R2, -12),                      /* 31 */
        CALL(BPF_FUNC_map_lookup_elem),        /* 32 */
        JEQ_IMM(R0, 0, 11),                    /* 33: -> 45 */
        MOV_REG(R7, R0),                       /* 34 */
        CALL(BPF_FUNC_ktime_get_ns),           /* 35 */
        STX_MEM(BPF_DW, R7, R0, 0),            /* 36: ns */
        LDX_MEM(BPF_W, R1, R6, len_off),       /* 37 */
        STX_MEM(BPF_W, R7, R1, 8),             /* 38: length */
        LDX_MEM(BPF_W, R1, R10, -8),           /* 39 */
        LDX_MEM(BPF_W, R2, R10, -4),           /* 40 */
        XOR_REG(R1, R2),                       /* 41 */
        STX_MEM(BPF_W, R7, R1, 12),            /* 42: fingerprint */
        ADD_IMM(R8, 1),                        /* 43 */
        STX_MEM(BPF_DW, R7, R8, 16),           /* 44: sequence + 1, last: the record is whole */
        LDX_MEM(BPF_W, R0, R6, len_off),       /* 45: keep the whole packet */
        EXIT(),                                /* 46 */
    };
    union bpf_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
    attr.insns = (uint64_t)(uintptr_t)prog;
    attr.insn_cnt = sizeof(prog) / sizeof(prog[0]);
    attr.license = (uint64_t)(uintptr_t) "GPL";
    strncpy(attr.prog_name, "tb_stamp", sizeof(attr.prog_name) - 1);
    int fd = (int)sys_bpf(BPF_PROG_LOAD, &attr);
    if (fd < 0 && log && log_bytes) {
        int saved = errno;
        attr.log_buf = (uint64_t)(uintptr_t)log;
        attr.log_size = (uint32_t)log_bytes;
        attr.log_level = 1;
        log[0] = 0;
        if (sys_bpf(BPF_PROG_LOAD, &attr) >= 0) /* cannot happen; keep the first answer */
            log[0] = 0;
        errno = saved;
    }
    return fd;
}

int stamp_attach(struct stamp *st, int tun_fd, char *why, size_t why_bytes)
{
    memset(st, 0, sizeof(*st));
    st->map_fd = st->tun_fd = -1;
    union bpf_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.map_type = BPF_MAP_TYPE_ARRAY;
    attr.key_size = 4;
    attr.value_size = STAMP_RECORD_BYTES;
    attr.max_entries = STAMP_RING + 1;
    attr.map_flags = BPF_F_MMAPABLE;
    strncpy(attr.map_name, "tb_stamps", sizeof(attr.map_name) - 1);
    st->map_fd = (int)sys_bpf(BPF_MAP_CREATE, &attr);
    if (st->map_fd < 0) {
        snprintf(why, why_bytes, "bpf map: %s", strerror(errno));
        return -1;
    }
    long page = sysconf(_SC_PAGESIZE);
    size_t bytes = (size_t)STAMP_RECORD_BYTES * (STAMP_RING + 1);
    st->mem_bytes = (bytes + (size_t)page - 1) / (size_t)page * (size_t)page;
    st->mem = mmap(NULL, st->mem_bytes, PROT_READ, MAP_SHARED, st->map_fd, 0);
    if (st->mem == MAP_FAILED) {
        snprintf(why, why_bytes, "mmap of the bpf map: %s", strerror(errno));
        st->mem = NULL;
        stamp_detach(st);
        return -1;
    }
    char log[4096];
    int prog_fd = load_program(st->map_fd, log, sizeof(log));
    if (prog_fd < 0) {
        size_t n = strlen(log);
        while (n && (log[n - 1] == '\n' || log[n - 1] == ' '))
            log[--n] = 0;
        const char *last = strrchr(log, '\n');
        snprintf(why, why_bytes, "bpf program: %s%s%s", strerror(errno), n ? ": " : "",
                 last ? last + 1 : log);
        stamp_detach(st);
        return -1;
    }
    if (ioctl(tun_fd, TUNSETFILTEREBPF, &prog_fd) < 0) {
        snprintf(why, why_bytes, "TUNSETFILTEREBPF: %s", strerror(errno));
        close(prog_fd);
        stamp_detach(st);
        return -1;
    }
    close(prog_fd); /* the device holds the program */
    st->tun_fd = tun_fd;
    st->cursor = __atomic_load_n((const uint64_t *)st->mem, __ATOMIC_ACQUIRE);
    return 0;
}

int stamp_take(struct stamp *st, const uint8_t *pkt, size_t len, double *when)
{
    if (!st->mem)
        return 0;
    uint64_t head = __atomic_load_n((const uint64_t *)st->mem, __ATOMIC_ACQUIRE);
    if (head - st->cursor > STAMP_RING) /* overwritten before they were read */
        st->cursor = head - STAMP_RING;
    uint32_t fp = stamp_fingerprint(pkt, len);
    for (uint64_t k = st->cursor; k < head && k - st->cursor < STAMP_WINDOW; k++) {
        const uint8_t *rec = st->mem + (size_t)STAMP_RECORD_BYTES * (1 + (k & (STAMP_RING - 1)));
        uint64_t seq = __atomic_load_n((const uint64_t *)(rec + 16), __ATOMIC_ACQUIRE);
        uint32_t rec_len, rec_fp;
        memcpy(&rec_len, rec + 8, 4);
        memcpy(&rec_fp, rec + 12, 4);
        if (seq != k + 1 || rec_len != len || rec_fp != fp)
            continue;
        uint64_t ns;
        memcpy(&ns, rec, 8);
        st->cursor = k + 1;
        /* as mono_now(): nanoseconds as a double, divided by 1e9 */
        *when = (double)(int64_t)ns / 1e9;
        return 1;
    }
    return 0;
}

void stamp_detach(struct stamp *st)
{
    if (st->tun_fd >= 0) {
        int none = -1;
        if (ioctl(st->tun_fd, TUNSETFILTEREBPF, &none) < 0)
            (void)none; /* the device may be gone already */
    }
    if (st->mem)
        munmap(st->mem, st->mem_bytes);
    if (st->map_fd >= 0)
        close(st->map_fd);
    st->mem = NULL;
    st->map_fd = st->tun_fd = -1;
}

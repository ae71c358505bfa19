/* Arrival times from the kernel: when a packet entered the TUN device's queue toward the
 * emulator, recorded by a small eBPF program the device runs on every packet it queues
 * (TUNSETFILTEREBPF), into a ring the emulator maps. With them a packet's arrival does not
 * depend on when the packet thread woke up to read it, so a direction whose packets cannot
 * be due before the next wake-up is read only at wake-ups (loop.c). */
#ifndef STAMP_H
#define STAMP_H
#include <stddef.h>
#include <stdint.h>

#define STAMP_RING 4096 /* records; a power of two, far more than one wake-up reads */
#define STAMP_RECORD_BYTES 24 /* u64 ns, u32 length, u32 fingerprint, u64 sequence + 1 */
#define STAMP_WINDOW 64 /* records searched ahead for a packet (skipping the kernel's drops) */

struct stamp {
    int map_fd;
    uint8_t *mem; /* record 0: the u64 count of records written; records 1..STAMP_RING */
    size_t mem_bytes;
    uint64_t cursor; /* the next record to match */
    int tun_fd;      /* the device the program is attached to; -1: not attached */
};

/* Attach the program to the TUN behind `tun_fd`; 0, or -1 with `why` filled (errno kept). */
int stamp_attach(struct stamp *st, int tun_fd, char *why, size_t why_bytes);
/* The kernel's time (CLOCK_MONOTONIC seconds) of the packet `pkt` (its IP bytes, as the
 * device queued them); 1 if a record matched, 0 (and `when` untouched) if none did. */
int stamp_take(struct stamp *st, const uint8_t *pkt, size_t len, double *when);
void stamp_detach(struct stamp *st);
uint32_t stamp_fingerprint(const uint8_t *pkt, size_t len);

#endif

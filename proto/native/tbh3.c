/*
 * tb-h3: the testbed's native HTTP/3 endpoint, on Debian's libngtcp2 0.12 (QUIC, RFC 9000,
 * 9001, 9002; GnuTLS crypto) and libnghttp3 0.8 (HTTP/3, RFC 9114; QPACK, RFC 9204).
 *
 * One process per end. It does all the per-datagram work: UDP receive (recvmmsg, GRO) and
 * send (GSO batches), packet protection, loss recovery, congestion control, ngtcp2's pacer,
 * HTTP/3 framing and QPACK, RFC 9218 scheduling (nghttp3's). What a request means is not decided here: a Python edge (proto/native/engine.py)
 * drives it over a stream socket (--control-fd) with one frame per HTTP event, never one
 * per datagram. Frames both ways: a fixed 48-byte header (payload length, type, connection,
 * stream, CLOCK_MONOTONIC time in ns, two integers) then the payload. The edge keeps the
 * routes, the checks and the records (servers/app.py, clients/workload.py), as with the
 * testbed's aioquic endpoints.
 *
 * Server (--server): listens on --bind/--port, admits connections by the limits of
 * servers/guard.py (connection caps in total and per source, Retry always/never/under load,
 * a token bucket of Initials per source, each HTTP/3 frame's length by its type: those
 * values come as options, from the Python modules that define them), and reports requests
 * (HEADERS, DATA, END, RESET, STOP_SENDING) and what it dropped (DROPPED); the edge answers
 * with RESPOND and BODY. Client (--client): opens a connection per CONNECT (its own UDP
 * socket), a request stream per REQUEST; reports the response the same way. Session tickets
 * (TICKET) resume a later connection, with the request as 0-RTT data when the edge asks for
 * early data (made again in 1-RTT if the server refuses it).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <malloc.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <nghttp3/nghttp3.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

/* --- the control protocol (proto/native/engine.py holds the same numbers) ------------- */
enum {
  EV_READY = 1,        /* a = bound port */
  EV_CONN_OPEN = 2,    /* payload: the peer's address */
  EV_HANDSHAKE = 3,    /* a = resumed, b = early data accepted */
  EV_HEADERS = 4,      /* payload: name\0value\0...; a = stream ended with them */
  EV_DATA = 5,         /* payload: body bytes */
  EV_END = 6,          /* the peer's FIN */
  EV_RESET = 7,        /* the peer reset its sending side; a = error code */
  EV_STOP_SENDING = 8, /* the peer asked us to stop sending; a = error code */
  EV_SENT = 9,         /* every byte of our side of the stream and its FIN in packets */
  EV_CLOSED = 10,      /* a = error code, b = 1 if it was the peer's or an error; payload: why */
  EV_STATS = 11,       /* payload: STAT_FIELDS x u64 */
  EV_TICKET = 12,      /* payload: u32 length of the TLS session, it, then transport params */
  EV_STREAM = 13,      /* a request stream opened: a = the edge's tag */
  EV_QLOG = 14,        /* t = the qlog's reference time; payload: its path */
  EV_ERROR = 15,       /* payload: one line */
  EV_ACKED = 16,       /* every byte we sent on the stream acknowledged */
  EV_DROPPED = 17,     /* a = datagrams dropped so far; payload: "peer reason" */
};
enum {
  CMD_CONNECT = 101,  /* conn = the edge's id; a = early data wanted; payload: ticket */
  CMD_REQUEST = 102,  /* a = tag, b = has body; payload: headers */
  CMD_BODY = 103,     /* a = FIN after it; payload: bytes */
  CMD_RESPOND = 104,  /* b = has body; payload: headers */
  CMD_STOP = 105,     /* a = error code, b = 1 stop sending | 2 reset */
  CMD_PRIORITY = 106, /* a = urgency, b = incremental (PRIORITY_UPDATE, RFC 9218 7) */
  CMD_CLOSE = 107,    /* a = application error code */
  CMD_QUIT = 108,
};
#define STAT_FIELDS 12

#pragma pack(push, 1)
typedef struct {
  uint32_t len;
  uint8_t type;
  uint8_t pad[3];
  int64_t conn;
  int64_t stream;
  uint64_t t_ns;
  uint64_t a;
  uint64_t b;
} frame_hdr;
#pragma pack(pop)

#define MAX_DGRAM 1500
#define GSO_MAX 64
#define RECV_BATCH 64
#define SCID_LEN 18
#define MAX_CIDS 8

/* --- configuration ---------------------------------------------------------------------- */
static struct {
  int server;
  const char *bind;
  int port;
  const char *key, *cert, *host, *sni;
  int cc;
  size_t max_udp_payload;
  int pacing;
  uint64_t idle_timeout_ns, handshake_timeout_ns;
  const char *qlog_dir;
  uint64_t max_data, max_stream_data;
  size_t ack_thresh;
  uint64_t max_ack_delay_ns;
  uint64_t sample_ns;
  int udp_buffer;
  int control_fd;
  int gso;
  uint64_t send_policy; /* 0 nghttp3's own (RFC 9218 from the client), 1 rr, 2 fifo */
  uint64_t keep_alive_ns;
  /* the server's abuse limits (servers/guard.py holds the values and their reasons) */
  uint64_t max_conns, max_per_source;
  int retry_mode; /* 0 auto, 1 always, 2 off */
  uint64_t retry_threshold;
  double initials_per_s, initials_burst;
  size_t sources_cap;
  uint64_t frame_cap_type[16], frame_cap_bytes[16];
  size_t nframe_caps;
  uint64_t unknown_frame_cap;
} cfg = {.bind = "0.0.0.0", .cc = NGTCP2_CC_ALGO_CUBIC, .max_udp_payload = 1200,
         .pacing = 1, .idle_timeout_ns = 60 * NGTCP2_SECONDS,
         .handshake_timeout_ns = 30 * NGTCP2_SECONDS, .ack_thresh = 2,
         .max_ack_delay_ns = 25 * NGTCP2_MILLISECONDS, .sample_ns = 10 * NGTCP2_MILLISECONDS,
         .control_fd = 3, .gso = 1, .max_conns = 2048, .max_per_source = 256,
         .retry_threshold = 64, .initials_per_s = 100, .initials_burst = 200,
         .sources_cap = 4096, .unknown_frame_cap = UINT64_MAX};

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * NGTCP2_SECONDS + (uint64_t)ts.tv_nsec;
}

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "tb-h3: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(2);
}

/* --- frames to the edge: buffered, written when the loop turns --------------------------- */
static uint8_t *outq;
static size_t outq_len, outq_cap;
static int flush_out_lock; /* > 0: frames stay queued (emit_at may still insert before them) */

static void flush_out(void) {
  size_t off = 0;
  while (off < outq_len) {
    ssize_t n = write(cfg.control_fd, outq + off, outq_len - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        struct pollfd p = {cfg.control_fd, POLLOUT, 0};
        poll(&p, 1, 1000);
        continue;
      }
      exit(3); /* the edge is gone: nothing to report to */
    }
    off += (size_t)n;
  }
  outq_len = 0;
}

static void emit(int type, int64_t conn, int64_t stream, uint64_t t, uint64_t a, uint64_t b,
                 const void *p1, size_t l1, const void *p2, size_t l2) {
  size_t need = sizeof(frame_hdr) + l1 + l2;
  if (outq_len + need > outq_cap) {
    outq_cap = (outq_len + need) * 2;
    outq = realloc(outq, outq_cap);
    if (!outq) die("out of memory");
  }
  frame_hdr h = {.len = (uint32_t)(l1 + l2), .type = (uint8_t)type, .conn = conn,
                 .stream = stream, .t_ns = t, .a = a, .b = b};
  memcpy(outq + outq_len, &h, sizeof h);
  outq_len += sizeof h;
  if (l1) memcpy(outq + outq_len, p1, l1);
  outq_len += l1;
  if (l2) memcpy(outq + outq_len, p2, l2);
  outq_len += l2;
  if (outq_len > (1u << 20) && !flush_out_lock) flush_out();
}

/* A frame put at ``at`` in the queue, before the frames queued since (a connection's
   announcement before what its first packet produced). */
static void emit_at(size_t at, int type, int64_t conn, uint64_t t, const void *p, size_t l) {
  size_t tail = outq_len - at;
  emit(type, conn, -1, t, 0, 0, p, l, NULL, 0);
  size_t size = sizeof(frame_hdr) + l;
  uint8_t *frame = malloc(size);
  if (!frame) die("out of memory");
  memcpy(frame, outq + outq_len - size, size);
  memmove(outq + at + size, outq + at, tail);
  memcpy(outq + at, frame, size);
  free(frame);
}

static void emit_error(int64_t conn, const char *fmt, ...) {
  char text[400];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof text) n = sizeof text - 1;
  emit(EV_ERROR, conn, -1, now_ns(), 0, 0, text, (size_t)n, NULL, 0);
}

/* --- streams ------------------------------------------------------------------------------ */
typedef struct chunk {
  struct chunk *next;
  size_t len;
  uint8_t data[];
} chunk;

typedef struct stream {
  struct stream *next;
  int64_t id;
  /* our side's body: chunks handed to nghttp3 stay until acknowledged (it does not copy) */
  chunk *head, *tail, *cursor;
  uint64_t head_acked; /* bytes of head already acknowledged */
  uint64_t queued, handed, acked;
  int eof, blocked, has_body, fin_reported, acked_reported, submitted, stop_reported;
  int64_t tag;          /* a client's request: the edge's tag */
  uint8_t *req_hdrs;    /* a client's request head, kept until its 0-RTT fate is known */
  size_t req_hdrs_len;
  /* the peer's side */
  uint8_t *hdrs;
  size_t hdrs_len, hdrs_cap;
  uint8_t *rbuf;
  size_t rlen, rcap;
  uint64_t rt;
} stream;

typedef struct conn {
  struct conn *next;
  int64_t id;
  int fd; /* the client's own socket; the server's listening one */
  struct sockaddr_storage local, remote;
  socklen_t local_len, remote_len;
  ngtcp2_crypto_conn_ref ref;
  ngtcp2_conn *q;
  nghttp3_conn *h;
  gnutls_session_t tls;
  ngtcp2_cid cids[MAX_CIDS];
  size_t ncids;
  ngtcp2_cid odcid;
  ngtcp2_connection_close_error err;
  stream *streams;
  FILE *qlog;
  uint64_t start_ns, next_sample_ns;
  uint64_t tx_pkts, rx_pkts;
  int handshake_reported, closed, want_early, early_refused;
  int sampling; /* the last sample saw a stream open or bytes in flight */
  void *src; /* the server's admission entry of its source (released when it goes) */
  struct scan *scans;
  int announced; /* the edge was told of it (its first packet was read) */
} conn;

/* The client's request and control streams read frame by frame before nghttp3 sees them
   (servers/h3scan.py's rule in C): each frame's length is capped by its type as its head
   arrives, and a longer one closes the connection with H3_EXCESSIVE_LOAD before a byte of
   its payload is held (nghttp3 would hold a blocked request's header block). */
typedef struct scan {
  struct scan *next;
  int64_t id;
  int frames; /* frames follow (a request stream, or the control stream once typed) */
  int done;   /* a uni stream that is not the control stream: not read */
  uint8_t head[16];
  size_t have;
  uint64_t skip;
} scan;

#define H3_EXCESSIVE_LOAD 0x0107
#define H3_DATA_FRAME 0x0

static conn *conns;
static int64_t next_conn_id;
static gnutls_certificate_credentials_t cred;
static gnutls_datum_t ticket_key;
static gnutls_anti_replay_t anti_replay;
static int server_fd = -1;
static struct sockaddr_storage server_local;
static socklen_t server_local_len;
static uint8_t retry_secret[32];

static stream *find_stream(conn *c, int64_t id) {
  for (stream *s = c->streams; s; s = s->next)
    if (s->id == id) return s;
  return NULL;
}

static stream *new_stream(conn *c, int64_t id) {
  stream *s = calloc(1, sizeof *s);
  if (!s) die("out of memory");
  s->id = id;
  s->next = c->streams;
  c->streams = s;
  return s;
}

static void free_stream_data(stream *s) {
  for (chunk *k = s->head; k;) {
    chunk *n = k->next;
    free(k);
    k = n;
  }
  free(s->hdrs);
  free(s->rbuf);
  free(s->req_hdrs);
}

static void drop_stream(conn *c, int64_t id) {
  for (stream **p = &c->streams; *p; p = &(*p)->next) {
    if ((*p)->id == id) {
      stream *s = *p;
      *p = s->next;
      free_stream_data(s);
      free(s);
      return;
    }
  }
}

static void append(uint8_t **buf, size_t *len, size_t *cap, const void *p, size_t n) {
  if (*len + n > *cap) {
    *cap = (*len + n) * 2 + 256;
    *buf = realloc(*buf, *cap);
    if (!*buf) die("out of memory");
  }
  memcpy(*buf + *len, p, n);
  *len += n;
}

static void flush_stream_data(conn *c, stream *s) {
  if (s->rlen) {
    emit(EV_DATA, c->id, s->id, s->rt, 0, 0, s->rbuf, s->rlen, NULL, 0);
    s->rlen = 0;
  }
}

static void flush_all_data(void) {
  for (conn *c = conns; c; c = c->next)
    for (stream *s = c->streams; s; s = s->next) flush_stream_data(c, s);
}

/* --- nghttp3 callbacks ------------------------------------------------------------------- */
static nghttp3_ssize read_body(nghttp3_conn *h, int64_t sid, nghttp3_vec *vec, size_t veccnt,
                               uint32_t *pflags, void *cud, void *sud) {
  (void)h, (void)sid, (void)cud;
  stream *s = sud;
  size_t n = 0;
  while (s->cursor && n < veccnt) {
    vec[n].base = s->cursor->data;
    vec[n].len = s->cursor->len;
    s->handed += s->cursor->len;
    n++;
    s->cursor = s->cursor->next;
  }
  if (!s->cursor && s->eof) {
    *pflags |= NGHTTP3_DATA_FLAG_EOF;
    return (nghttp3_ssize)n;
  }
  if (n == 0) {
    s->blocked = 1;
    return NGHTTP3_ERR_WOULDBLOCK;
  }
  return (nghttp3_ssize)n;
}

static int h_acked(nghttp3_conn *h, int64_t sid, uint64_t datalen, void *cud, void *sud) {
  (void)h;
  conn *c = cud;
  stream *s = sud;
  if (!s) return 0;
  s->acked += datalen;
  s->head_acked += datalen;
  while (s->head && s->head != s->cursor && s->head_acked >= s->head->len) {
    chunk *k = s->head;
    s->head_acked -= k->len;
    s->head = k->next;
    if (s->tail == k) s->tail = NULL;
    free(k);
  }
  if (s->eof && !s->cursor && s->acked == s->queued && !s->acked_reported) {
    s->acked_reported = 1;
    emit(EV_ACKED, c->id, sid, now_ns(), s->acked, 0, NULL, 0, NULL, 0);
  }
  return 0;
}

static int h_stream_close(nghttp3_conn *h, int64_t sid, uint64_t code, void *cud, void *sud) {
  (void)h, (void)code, (void)sud;
  conn *c = cud;
  stream *s = find_stream(c, sid);
  if (s) flush_stream_data(c, s);
  drop_stream(c, sid);
  if (cfg.server && !ngtcp2_conn_is_local_stream(c->q, sid))
    ngtcp2_conn_extend_max_streams_bidi(c->q, 1);
  return 0;
}

static int h_recv_data(nghttp3_conn *h, int64_t sid, const uint8_t *data, size_t len, void *cud,
                       void *sud) {
  (void)h;
  conn *c = cud;
  stream *s = sud;
  ngtcp2_conn_extend_max_stream_offset(c->q, sid, len);
  ngtcp2_conn_extend_max_offset(c->q, len);
  if (!s) return 0;
  append(&s->rbuf, &s->rlen, &s->rcap, data, len);
  s->rt = now_ns();
  if (s->rlen >= 65536) flush_stream_data(c, s);
  return 0;
}

static int h_deferred_consume(nghttp3_conn *h, int64_t sid, size_t n, void *cud, void *sud) {
  (void)h, (void)sud;
  conn *c = cud;
  ngtcp2_conn_extend_max_stream_offset(c->q, sid, n);
  ngtcp2_conn_extend_max_offset(c->q, n);
  return 0;
}

static int h_begin_headers(nghttp3_conn *h, int64_t sid, void *cud, void *sud) {
  conn *c = cud;
  if (!sud) {
    stream *s = find_stream(c, sid);
    if (!s) s = new_stream(c, sid);
    nghttp3_conn_set_stream_user_data(h, sid, s);
  }
  return 0;
}

static int h_recv_header(nghttp3_conn *h, int64_t sid, int32_t token, nghttp3_rcbuf *name,
                         nghttp3_rcbuf *value, uint8_t flags, void *cud, void *sud) {
  (void)h, (void)sid, (void)token, (void)flags, (void)cud;
  stream *s = sud;
  if (!s) return 0;
  nghttp3_vec n = nghttp3_rcbuf_get_buf(name), v = nghttp3_rcbuf_get_buf(value);
  uint8_t zero = 0;
  append(&s->hdrs, &s->hdrs_len, &s->hdrs_cap, n.base, n.len);
  append(&s->hdrs, &s->hdrs_len, &s->hdrs_cap, &zero, 1);
  append(&s->hdrs, &s->hdrs_len, &s->hdrs_cap, v.base, v.len);
  append(&s->hdrs, &s->hdrs_len, &s->hdrs_cap, &zero, 1);
  return 0;
}

static void apply_send_policy(conn *c, int64_t sid) {
  if (!cfg.server || cfg.send_policy == 0) return;
  /* rr: one urgency, incremental (nghttp3 round-robins them); fifo: one urgency, not
     incremental (each in turn to its end) */
  nghttp3_pri pri = {.urgency = 3, .inc = cfg.send_policy == 1};
  nghttp3_conn_set_stream_priority(c->h, sid, &pri);
}

static int h_end_headers(nghttp3_conn *h, int64_t sid, int fin, void *cud, void *sud) {
  (void)h;
  conn *c = cud;
  stream *s = sud;
  if (!s) return 0;
  apply_send_policy(c, sid);
  emit(EV_HEADERS, c->id, sid, now_ns(), (uint64_t)fin, 0, s->hdrs, s->hdrs_len, NULL, 0);
  s->hdrs_len = 0;
  return 0;
}

static int h_end_stream(nghttp3_conn *h, int64_t sid, void *cud, void *sud) {
  (void)h;
  conn *c = cud;
  stream *s = sud;
  if (s) flush_stream_data(c, s);
  emit(EV_END, c->id, sid, now_ns(), 0, 0, NULL, 0, NULL, 0);
  return 0;
}

static int h_stop_sending(nghttp3_conn *h, int64_t sid, uint64_t code, void *cud, void *sud) {
  (void)h, (void)sud;
  conn *c = cud;
  ngtcp2_conn_shutdown_stream_read(c->q, sid, code);
  return 0;
}

static int h_reset_stream(nghttp3_conn *h, int64_t sid, uint64_t code, void *cud, void *sud) {
  (void)h, (void)sud;
  conn *c = cud;
  ngtcp2_conn_shutdown_stream_write(c->q, sid, code);
  return 0;
}

static int setup_h3(conn *c) {
  nghttp3_callbacks cb = {
      .acked_stream_data = h_acked,
      .stream_close = h_stream_close,
      .recv_data = h_recv_data,
      .deferred_consume = h_deferred_consume,
      .begin_headers = h_begin_headers,
      .recv_header = h_recv_header,
      .end_headers = h_end_headers,
      .stop_sending = h_stop_sending,
      .end_stream = h_end_stream,
      .reset_stream = h_reset_stream,
  };
  nghttp3_settings st;
  nghttp3_settings_default(&st);
  st.qpack_max_dtable_capacity = 4096;
  st.qpack_blocked_streams = 100;
  int rv = cfg.server ? nghttp3_conn_server_new(&c->h, &cb, &st, nghttp3_mem_default(), c)
                      : nghttp3_conn_client_new(&c->h, &cb, &st, nghttp3_mem_default(), c);
  if (rv != 0) return -1;
  if (cfg.server) {
    const ngtcp2_transport_params *p = ngtcp2_conn_get_local_transport_params(c->q);
    nghttp3_conn_set_max_client_streams_bidi(c->h, p->initial_max_streams_bidi);
  }
  int64_t ctrl, enc, dec;
  if (ngtcp2_conn_open_uni_stream(c->q, &ctrl, NULL) != 0 ||
      nghttp3_conn_bind_control_stream(c->h, ctrl) != 0 ||
      ngtcp2_conn_open_uni_stream(c->q, &enc, NULL) != 0 ||
      ngtcp2_conn_open_uni_stream(c->q, &dec, NULL) != 0 ||
      nghttp3_conn_bind_qpack_streams(c->h, enc, dec) != 0)
    return -1;
  return 0;
}

/* --- ngtcp2 callbacks --------------------------------------------------------------------- */
static void rand_cb(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx) {
  (void)ctx;
  (void)gnutls_rnd(GNUTLS_RND_RANDOM, dest, len);
}

static int new_cid_cb(ngtcp2_conn *q, ngtcp2_cid *cid, uint8_t *token, size_t cidlen,
                      void *ud) {
  (void)q;
  conn *c = ud;
  if (gnutls_rnd(GNUTLS_RND_RANDOM, cid->data, cidlen) != 0) return NGTCP2_ERR_CALLBACK_FAILURE;
  cid->datalen = cidlen;
  if (gnutls_rnd(GNUTLS_RND_RANDOM, token, NGTCP2_STATELESS_RESET_TOKENLEN) != 0)
    return NGTCP2_ERR_CALLBACK_FAILURE;
  if (c->ncids < MAX_CIDS) c->cids[c->ncids++] = *cid;
  return 0;
}

static int varint(const uint8_t *p, size_t have, uint64_t *v, size_t *used) {
  if (!have) return 0;
  size_t n = (size_t)1 << (p[0] >> 6);
  if (have < n) return 0;
  uint64_t x = p[0] & 0x3f;
  for (size_t i = 1; i < n; i++) x = (x << 8) | p[i];
  *v = x;
  *used = n;
  return 1;
}

static uint64_t frame_cap(uint64_t type) {
  if (type == H3_DATA_FRAME) return UINT64_MAX; /* streamed */
  for (size_t i = 0; i < cfg.nframe_caps; i++)
    if (cfg.frame_cap_type[i] == type) return cfg.frame_cap_bytes[i];
  return cfg.unknown_frame_cap;
}

/* The client's qlog gets an ``http:frame_parsed`` record per HEADERS or DATA frame head of a
   response, as aioquic's qlog has them (ngtcp2's has transport events only): with them the
   receiver's view maps a stream's wire bytes to its body bytes (harness.collect.streamview). */
static void qlog_frame(conn *c, int64_t sid, uint64_t type, uint64_t flen) {
  if (!c->qlog || (type != 0x0 && type != 0x1)) return;
  fprintf(c->qlog,
          "\x1e{\"time\":%" PRIu64 ",\"name\":\"http:frame_parsed\",\"data\":{\"stream_id\":%" PRId64
          ",\"frame\":{\"frame_type\":\"%s\"},\"length\":%" PRIu64 "}}\n",
          (now_ns() - c->start_ns) / NGTCP2_MILLISECONDS, sid, type ? "headers" : "data", flen);
}

/* 0, or H3_EXCESSIVE_LOAD for a frame longer than its type allows (the server); the client
   reads its requests' response frames for its qlog only */
static uint64_t scan_data(conn *c, int64_t sid, const uint8_t *data, size_t len) {
  if (cfg.server ? (sid & 1) != 0 : ((sid & 3) != 0 || !c->qlog)) return 0;
  scan *st = c->scans;
  while (st && st->id != sid) st = st->next;
  if (!st) {
    st = calloc(1, sizeof *st);
    if (!st) die("out of memory");
    st->id = sid;
    st->frames = (sid & 2) == 0;
    st->next = c->scans;
    c->scans = st;
  }
  while (len && !st->done) {
    if (st->skip) {
      size_t n = st->skip < len ? (size_t)st->skip : len;
      st->skip -= n, data += n, len -= n;
      continue;
    }
    st->head[st->have++] = *data++;
    len--;
    uint64_t type, flen;
    size_t u1, u2;
    if (!st->frames) { /* a uni stream's type */
      if (!varint(st->head, st->have, &type, &u1)) continue;
      st->have = 0;
      if (type == 0x00) st->frames = 1; /* the control stream (RFC 9114 section 6.2.1) */
      else st->done = 1;                /* QPACK's streams: nghttp3 bounds them */
      continue;
    }
    if (!varint(st->head, st->have, &type, &u1) ||
        !varint(st->head + u1, st->have - u1, &flen, &u2)) {
      if (st->have == sizeof st->head) return H3_EXCESSIVE_LOAD;
      continue;
    }
    st->have = 0;
    if (!cfg.server) {
      qlog_frame(c, sid, type, flen);
    } else if (flen > frame_cap(type)) {
      return H3_EXCESSIVE_LOAD;
    }
    st->skip = flen;
  }
  return 0;
}

static int recv_stream_data_cb(ngtcp2_conn *q, uint32_t flags, int64_t sid, uint64_t off,
                               const uint8_t *data, size_t len, void *ud, void *sud) {
  (void)q, (void)off, (void)sud;
  conn *c = ud;
  if (!c->h) return 0;
  uint64_t refused = scan_data(c, sid, data, len);
  if (refused) {
    ngtcp2_connection_close_error_set_application_error(&c->err, refused, NULL, 0);
    return NGTCP2_ERR_CALLBACK_FAILURE;
  }
  nghttp3_ssize n =
      nghttp3_conn_read_stream(c->h, sid, data, len, flags & NGTCP2_STREAM_DATA_FLAG_FIN);
  if (n < 0) {
    ngtcp2_connection_close_error_set_application_error(
        &c->err, nghttp3_err_infer_quic_app_error_code((int)n), NULL, 0);
    return NGTCP2_ERR_CALLBACK_FAILURE;
  }
  ngtcp2_conn_extend_max_stream_offset(c->q, sid, (uint64_t)n);
  ngtcp2_conn_extend_max_offset(c->q, (uint64_t)n);
  return 0;
}

static int acked_offset_cb(ngtcp2_conn *q, int64_t sid, uint64_t off, uint64_t len, void *ud,
                           void *sud) {
  (void)q, (void)off, (void)sud;
  conn *c = ud;
  if (c->h && nghttp3_conn_add_ack_offset(c->h, sid, len) != 0) return NGTCP2_ERR_CALLBACK_FAILURE;
  return 0;
}

static int stream_close_cb(ngtcp2_conn *q, uint32_t flags, int64_t sid, uint64_t code, void *ud,
                           void *sud) {
  (void)q, (void)sud;
  conn *c = ud;
  if (!(flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET)) code = NGHTTP3_H3_NO_ERROR;
  if (c->h) {
    int rv = nghttp3_conn_close_stream(c->h, sid, code);
    if (rv == NGHTTP3_ERR_STREAM_NOT_FOUND) {
      if (cfg.server && ngtcp2_is_bidi_stream(sid)) ngtcp2_conn_extend_max_streams_bidi(c->q, 1);
    } else if (rv != 0) {
      return NGTCP2_ERR_CALLBACK_FAILURE;
    }
  }
  return 0;
}

static int stream_reset_cb(ngtcp2_conn *q, int64_t sid, uint64_t final_size, uint64_t code,
                           void *ud, void *sud) {
  (void)q, (void)final_size, (void)sud;
  conn *c = ud;
  emit(EV_RESET, c->id, sid, now_ns(), code, 0, NULL, 0, NULL, 0);
  if (c->h) nghttp3_conn_shutdown_stream_read(c->h, sid);
  return 0;
}

/* ngtcp2 0.12 calls this when *we* stop reading a stream (shutdown_stream_read), not for the
   peer's STOP_SENDING: that one is seen in the received packet's qlog record
   (peer_stop_sending) */
static int stop_sending_cb(ngtcp2_conn *q, int64_t sid, uint64_t code, void *ud, void *sud) {
  (void)q, (void)sud, (void)code;
  conn *c = ud;
  if (c->h) nghttp3_conn_shutdown_stream_read(c->h, sid);
  return 0;
}

/* The peer's STOP_SENDING (RFC 9000 section 19.5): ngtcp2 0.12 resets the stream at once and
   tells the application nothing until it next writes to it. The frame is in the qlog record
   of the packet that carried it, written while the packet is read: the edge learns of it
   then, as aioquic's server does. */
static void peer_stop_sending(conn *c, int64_t sid, uint64_t code) {
  stream *s = find_stream(c, sid);
  if (s && s->stop_reported) return;
  if (s) s->stop_reported = 1;
  emit(EV_STOP_SENDING, c->id, sid, now_ns(), code, 0, NULL, 0, NULL, 0);
}

static uint64_t qlog_number(const char *p, const char *end, const char *key) {
  size_t kl = strlen(key);
  const char *at = memmem(p, (size_t)(end - p), key, kl);
  return at ? strtoull(at + kl, NULL, 10) : UINT64_MAX;
}

static void scan_qlog(conn *c, const char *data, size_t len) {
  static const char frame[] = "{\"frame_type\":\"stop_sending\",";
  static const char received[] = "\"name\":\"transport:packet_received\"";
  const char *end = data + len;
  /* the event's name is in its first bytes ({"time":T,"name":...): a sent packet or any
     other event is passed over without reading its frames */
  size_t head = len < 64 ? len : 64;
  if (!memmem(data, head, received, sizeof received - 1)) return;
  const char *p = memmem(data, len, frame, sizeof frame - 1);
  if (!p) return;
  while (p) {
    const char *close = memchr(p, '}', (size_t)(end - p));
    if (!close) return;
    uint64_t sid = qlog_number(p, close, "\"stream_id\":");
    uint64_t code = qlog_number(p, close, "\"error_code\":");
    if (sid != UINT64_MAX) peer_stop_sending(c, (int64_t)sid, code == UINT64_MAX ? 0 : code);
    p = memmem(close, (size_t)(end - close), frame, sizeof frame - 1);
  }
}

static int extend_stream_data_cb(ngtcp2_conn *q, int64_t sid, uint64_t max, void *ud,
                                 void *sud) {
  (void)q, (void)max, (void)sud;
  conn *c = ud;
  if (c->h) nghttp3_conn_unblock_stream(c->h, sid);
  return 0;
}

static int extend_remote_bidi_cb(ngtcp2_conn *q, uint64_t max, void *ud) {
  (void)q;
  conn *c = ud;
  if (c->h) nghttp3_conn_set_max_client_streams_bidi(c->h, max);
  return 0;
}

static void open_pending_request(conn *c);

static int extend_local_bidi_cb(ngtcp2_conn *q, uint64_t max, void *ud) {
  (void)q, (void)max;
  open_pending_request(ud);
  return 0;
}

static void early_data_refused(conn *c);

static int handshake_completed_cb(ngtcp2_conn *q, void *ud) {
  (void)q;
  conn *c = ud;
  if (cfg.server) {
    gnutls_session_ticket_send(c->tls, 1, 0);
    return 0;
  }
  /* GnuTLS says whether the server took the early data only now (ngtcp2 0.12's client) */
  if (c->want_early && !(gnutls_session_get_flags(c->tls) & GNUTLS_SFLAGS_EARLY_DATA)) {
    c->early_refused = 1;
    early_data_refused(c);
  }
  return 0;
}

static int recv_tx_key_cb(ngtcp2_conn *q, ngtcp2_crypto_level level, void *ud) {
  (void)q;
  conn *c = ud;
  if (cfg.server && level == NGTCP2_CRYPTO_LEVEL_APPLICATION && !c->h) return setup_h3(c);
  return 0;
}

static int recv_rx_key_cb(ngtcp2_conn *q, ngtcp2_crypto_level level, void *ud) {
  (void)q;
  conn *c = ud;
  if (!cfg.server && level == NGTCP2_CRYPTO_LEVEL_APPLICATION && !c->h) {
    if (setup_h3(c) != 0) return NGTCP2_ERR_CALLBACK_FAILURE;
    open_pending_request(c);
  }
  return 0;
}

static void write_qlog(void *ud, uint32_t flags, const void *data, size_t len) {
  (void)flags;
  conn *c = ud;
  if (cfg.server) scan_qlog(c, data, len); /* a client has no use for the peer's STOP_SENDING */
  if (c->qlog) fwrite(data, 1, len, c->qlog);
}

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref) { return ((conn *)ref->user_data)->q; }

static ngtcp2_callbacks callbacks(void) {
  ngtcp2_callbacks cb = {
      .recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb,
      .handshake_completed = handshake_completed_cb,
      .encrypt = ngtcp2_crypto_encrypt_cb,
      .decrypt = ngtcp2_crypto_decrypt_cb,
      .hp_mask = ngtcp2_crypto_hp_mask_cb,
      .recv_stream_data = recv_stream_data_cb,
      .acked_stream_data_offset = acked_offset_cb,
      .stream_close = stream_close_cb,
      .rand = rand_cb,
      .get_new_connection_id = new_cid_cb,
      .update_key = ngtcp2_crypto_update_key_cb,
      .stream_reset = stream_reset_cb,
      .extend_max_remote_streams_bidi = extend_remote_bidi_cb,
      .extend_max_stream_data = extend_stream_data_cb,
      .delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb,
      .delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb,
      .get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb,
      .stream_stop_sending = stop_sending_cb,
      .version_negotiation = ngtcp2_crypto_version_negotiation_cb,
  };
  if (cfg.server) {
    cb.recv_client_initial = ngtcp2_crypto_recv_client_initial_cb;
    cb.recv_tx_key = recv_tx_key_cb;
  } else {
    cb.client_initial = ngtcp2_crypto_client_initial_cb;
    cb.recv_retry = ngtcp2_crypto_recv_retry_cb;
    cb.extend_max_local_streams_bidi = extend_local_bidi_cb;
    cb.recv_rx_key = recv_rx_key_cb;
  }
  return cb;
}

static void settings_of(ngtcp2_settings *st, ngtcp2_transport_params *p, conn *c) {
  ngtcp2_settings_default(st);
  st->initial_ts = c->start_ns;
  st->cc_algo = (ngtcp2_cc_algo)cfg.cc;
  st->max_tx_udp_payload_size = cfg.max_udp_payload;
  st->no_tx_udp_payload_size_shaping = 1;
  st->no_pmtud = 1;
  st->handshake_timeout = cfg.handshake_timeout_ns;
  st->ack_thresh = cfg.ack_thresh;
  if (cfg.max_data) {
    st->max_window = cfg.max_data;
    st->max_stream_window = cfg.max_stream_data;
  }
  ngtcp2_transport_params_default(p);
  p->initial_max_streams_bidi = 100;
  p->initial_max_streams_uni = 3;
  p->initial_max_data = cfg.max_data ? cfg.max_data : 15 * 1024 * 1024;
  uint64_t sd = cfg.max_data ? cfg.max_stream_data : 6 * 1024 * 1024;
  p->initial_max_stream_data_bidi_local = sd;
  p->initial_max_stream_data_bidi_remote = sd;
  p->initial_max_stream_data_uni = sd;
  p->max_idle_timeout = cfg.idle_timeout_ns;
  p->max_ack_delay = cfg.max_ack_delay_ns;
  p->active_connection_id_limit = 7;
}

static void open_qlog(conn *c, ngtcp2_settings *st, const ngtcp2_cid *odcid) {
  /* a server's is always on: the peer's STOP_SENDING is read from it (scan_qlog); a file
     only if asked */
  if (!cfg.server && !cfg.qlog_dir) return;
  st->qlog.write = write_qlog;
  st->qlog.odcid = *odcid;
  if (!cfg.qlog_dir) return;
  char path[4096];
  int n = snprintf(path, sizeof path, "%s/tbh3-%d-%" PRId64 "-", cfg.qlog_dir, (int)getpid(),
                   c->id);
  for (size_t i = 0; i < odcid->datalen && n < (int)sizeof path - 3; i++)
    n += snprintf(path + n, sizeof path - (size_t)n, "%02x", odcid->data[i]);
  snprintf(path + n, sizeof path - (size_t)n, ".sqlog");
  c->qlog = fopen(path, "w");
  if (!c->qlog) {
    emit_error(c->id, "qlog %s: %s", path, strerror(errno));
    return;
  }
  setvbuf(c->qlog, NULL, _IOFBF, 1 << 20); /* a record per packet: written in 1 MB pieces */
  emit(EV_QLOG, c->id, -1, c->start_ns, 0, 0, path, strlen(path), NULL, 0);
}

/* --- TLS --------------------------------------------------------------------------------- */
static const char tls_priority[] =
    "%DISABLE_TLS13_COMPAT_MODE:NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:"
    "+AES-256-GCM:+CHACHA20-POLY1305:+AES-128-CCM:-GROUP-ALL:+GROUP-X25519:+GROUP-SECP256R1:"
    "+GROUP-SECP384R1:+GROUP-SECP521R1";
static const gnutls_datum_t alpn_h3 = {(unsigned char *)"h3", 2};

static int ticket_hook(gnutls_session_t s, unsigned htype, unsigned when, unsigned incoming,
                       const gnutls_datum_t *msg) {
  (void)htype, (void)when, (void)incoming, (void)msg;
  ngtcp2_crypto_conn_ref *ref = gnutls_session_get_ptr(s);
  conn *c = ref->user_data;
  gnutls_datum_t data;
  if (gnutls_session_get_data2(s, &data) != 0) return 0;
  uint8_t tp[256];
  ngtcp2_ssize n = ngtcp2_encode_transport_params(
      tp, sizeof tp, NGTCP2_TRANSPORT_PARAMS_TYPE_ENCRYPTED_EXTENSIONS,
      ngtcp2_conn_get_remote_transport_params(c->q));
  if (n > 0) {
    uint32_t len = data.size;
    uint8_t *buf = malloc(4 + data.size);
    memcpy(buf, &len, 4);
    memcpy(buf + 4, data.data, data.size);
    emit(EV_TICKET, c->id, -1, now_ns(), 0, 0, buf, 4 + data.size, tp, (size_t)n);
    free(buf);
  }
  gnutls_free(data.data);
  return 0;
}

static int alpn_hook(gnutls_session_t s, unsigned htype, unsigned when, unsigned incoming,
                     const gnutls_datum_t *msg) {
  (void)htype, (void)when, (void)incoming, (void)msg;
  gnutls_datum_t got;
  if (gnutls_alpn_get_selected_protocol(s, &got) != 0) return -1;
  return got.size == 2 && memcmp(got.data, "h3", 2) == 0 ? 0 : -1;
}

static int tls_session(conn *c) {
  unsigned flags = GNUTLS_ENABLE_EARLY_DATA | GNUTLS_NO_END_OF_EARLY_DATA;
  flags |= cfg.server ? GNUTLS_SERVER | GNUTLS_NO_AUTO_SEND_TICKET : GNUTLS_CLIENT;
  if (gnutls_init(&c->tls, flags) != 0) return -1;
  if (gnutls_priority_set_direct(c->tls, tls_priority, NULL) != 0) return -1;
  if (cfg.server) {
    if (gnutls_session_ticket_enable_server(c->tls, &ticket_key) != 0) return -1;
    gnutls_handshake_set_hook_function(c->tls, GNUTLS_HANDSHAKE_CLIENT_HELLO, GNUTLS_HOOK_POST,
                                       alpn_hook);
    if (ngtcp2_crypto_gnutls_configure_server_session(c->tls) != 0) return -1;
    gnutls_anti_replay_enable(c->tls, anti_replay);
    gnutls_record_set_max_early_data_size(c->tls, 0xffffffffu);
  } else {
    if (ngtcp2_crypto_gnutls_configure_client_session(c->tls) != 0) return -1;
    gnutls_handshake_set_hook_function(c->tls, GNUTLS_HANDSHAKE_NEW_SESSION_TICKET,
                                       GNUTLS_HOOK_POST, ticket_hook);
    const char *sni = cfg.sni ? cfg.sni : "localhost";
    gnutls_server_name_set(c->tls, GNUTLS_NAME_DNS, sni, strlen(sni));
  }
  c->ref.get_conn = get_conn;
  c->ref.user_data = c;
  gnutls_session_set_ptr(c->tls, &c->ref);
  if (gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, cred) != 0) return -1;
  gnutls_alpn_set_protocols(c->tls, &alpn_h3, 1,
                            GNUTLS_ALPN_MANDATORY |
                                (cfg.server ? GNUTLS_ALPN_SERVER_PRECEDENCE : 0));
  return 0;
}

/* RFC 8446 section 8.2, ClientHello recording: GnuTLS asks this store for every ClientHello
   with early data inside its anti-replay window (the key is the hello's PSK binder, unique to
   that hello); a key seen before makes it refuse the early data (the connection goes on in
   1-RTT), and a hello older than the window has its early data refused anyway. A ticket may
   resume again with a new hello (section 8.1's single-use tickets are not GnuTLS's). Bounded:
   the oldest entries go first once it is full; an entry past its expiry is forgotten. */
#define REPLAY_SLOTS 8192
static struct {
  uint8_t key[64];
  size_t len;
  time_t exp;
} replay[REPLAY_SLOTS];
static size_t replay_next;

static int anti_replay_add(void *db, time_t exp, const gnutls_datum_t *key,
                           const gnutls_datum_t *data) {
  (void)db, (void)data;
  size_t len = key->size < sizeof replay[0].key ? key->size : sizeof replay[0].key;
  time_t now = time(NULL);
  for (size_t i = 0; i < REPLAY_SLOTS; i++)
    if (replay[i].len == len && replay[i].exp >= now && memcmp(replay[i].key, key->data, len) == 0)
      return GNUTLS_E_DB_ENTRY_EXISTS;
  memcpy(replay[replay_next].key, key->data, len);
  replay[replay_next].len = len;
  replay[replay_next].exp = exp;
  replay_next = (replay_next + 1) % REPLAY_SLOTS;
  return 0;
}

/* --- sockets ------------------------------------------------------------------------------ */
static int udp_socket(int family) {
  int fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1; /* UDP_GRO: datagrams of a GSO batch may arrive as one buffer (read_socket) */
  setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one);
  if (cfg.udp_buffer > 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &cfg.udp_buffer, sizeof cfg.udp_buffer);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &cfg.udp_buffer, sizeof cfg.udp_buffer);
  }
  return fd;
}

static int resolve(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len) {
  memset(ss, 0, sizeof *ss);
  struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
  if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)port);
    *len = sizeof *a4;
    return 0;
  }
  if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)port);
    *len = sizeof *a6;
    return 0;
  }
  return -1;
}

static void send_datagrams(int fd, const struct sockaddr_storage *to, socklen_t tolen,
                           const uint8_t *data, size_t len, size_t gso_size) {
  struct iovec iov = {(void *)data, len};
  char cbuf[CMSG_SPACE(sizeof(uint16_t))];
  struct msghdr m = {.msg_name = (void *)to, .msg_namelen = tolen, .msg_iov = &iov,
                     .msg_iovlen = 1};
  if (gso_size && len > gso_size) {
    memset(cbuf, 0, sizeof cbuf);
    m.msg_control = cbuf;
    m.msg_controllen = sizeof cbuf;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_UDP;
    cm->cmsg_type = UDP_SEGMENT;
    cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    uint16_t seg = (uint16_t)gso_size;
    memcpy(CMSG_DATA(cm), &seg, sizeof seg);
  }
  for (;;) {
    ssize_t n = sendmsg(fd, &m, 0);
    if (n >= 0) return;
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      struct pollfd p = {fd, POLLOUT, 0};
      poll(&p, 1, 10);
      continue;
    }
    if (errno == EIO && m.msg_control) { /* no GSO on this device: one by one */
      for (size_t off = 0; off < len; off += gso_size) {
        size_t l = len - off < gso_size ? len - off : gso_size;
        send_datagrams(fd, to, tolen, data + off, l, 0);
      }
      cfg.gso = 0;
      return;
    }
    return; /* a datagram lost at the socket is a loss QUIC recovers from */
  }
}

/* --- the write path ----------------------------------------------------------------------- */
static void close_conn(conn *c, uint64_t code, int by_peer, const char *why);

/* Pacing (RFC 9002 section 7.7) is ngtcp2's: after each send quantum the next send time is
   set from its pacing rate. It starts once the handshake is done: the rate before then
   rests on the initial RTT (333 ms, RFC 9002 section 6.2.2), and pacing the handshake's
   packets by it held the first request ~25 ms on loopback (measured) with no window to
   protect. */
static int flushing; /* a close: what is queued (a STOP_SENDING...) leaves now, unpaced */
static int paced(conn *c) {
  return cfg.pacing && !flushing && ngtcp2_conn_get_handshake_completed(c->q);
}

/* ``ndata`` bytes of stream ``sid`` went into a packet: nghttp3 is told; when they were the
   last of the stream with its FIN, the edge is (EV_SENT: the request's or the response's
   last byte). */
static void stream_written(conn *c, int64_t sid, ngtcp2_ssize ndata, int fin,
                           const nghttp3_vec *vec, nghttp3_ssize n, uint64_t ts) {
  nghttp3_conn_add_write_offset(c->h, sid, (uint64_t)ndata);
  if (!fin || (uint64_t)ndata != nghttp3_vec_len(vec, (size_t)n)) return;
  stream *s = find_stream(c, sid);
  if (s && !s->fin_reported && s->submitted) {
    s->fin_reported = 1;
    emit(EV_SENT, c->id, sid, ts, s->queued, 0, NULL, 0, NULL, 0);
  }
}

static int write_conn(conn *c) {
  if (c->closed) return 0;
  nghttp3_vec vec[16];
  ngtcp2_path_storage ps;
  ngtcp2_pkt_info pi;
  static uint8_t buf[GSO_MAX * MAX_DGRAM];
  uint8_t *pos = buf;
  size_t gso = 0, pkts = 0, total = 0;
  size_t mtu = ngtcp2_conn_get_max_tx_udp_payload_size(c->q);
  size_t quantum = ngtcp2_conn_get_send_quantum(c->q);
  size_t max_pkts = quantum / mtu;
  if (max_pkts == 0) max_pkts = 1;
  if (max_pkts > GSO_MAX) max_pkts = GSO_MAX;
  uint64_t ts = now_ns();
  ngtcp2_path_storage_zero(&ps);
  for (;;) {
    int64_t sid = -1;
    int fin = 0;
    nghttp3_ssize n = 0;
    if (c->h && ngtcp2_conn_get_max_data_left(c->q)) {
      n = nghttp3_conn_writev_stream(c->h, &sid, &fin, vec, 16);
      if (n < 0) {
        close_conn(c, nghttp3_err_infer_quic_app_error_code((int)n), 0, nghttp3_strerror((int)n));
        return -1;
      }
    }
    ngtcp2_ssize ndata = -1;
    uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE | (fin ? NGTCP2_WRITE_STREAM_FLAG_FIN : 0);
    ngtcp2_ssize nw = ngtcp2_conn_writev_stream(c->q, &ps.path, &pi, pos, mtu, &ndata, flags,
                                                sid, (const ngtcp2_vec *)vec, (size_t)n, ts);

    if (nw < 0) {
      if (nw == NGTCP2_ERR_STREAM_DATA_BLOCKED) {
        nghttp3_conn_block_stream(c->h, sid);
        continue;
      }
      if (nw == NGTCP2_ERR_STREAM_SHUT_WR) {
        nghttp3_conn_shutdown_stream_write(c->h, sid);
        stream *s = find_stream(c, sid);
        if (s && s->submitted) peer_stop_sending(c, sid, NGHTTP3_H3_NO_ERROR);
        continue;
      }
      if (nw == NGTCP2_ERR_WRITE_MORE) {
        stream_written(c, sid, ndata, fin, vec, n, ts);
        continue;
      }
      ngtcp2_connection_close_error_set_transport_error_liberr(&c->err, (int)nw, NULL, 0);
      close_conn(c, 0, 0, ngtcp2_strerror((int)nw));
      return -1;
    }
    if (ndata >= 0 && sid >= 0) stream_written(c, sid, ndata, fin, vec, n, ts);
    if (nw == 0) {
      if (pos > buf) send_datagrams(c->fd, &c->remote, c->remote_len, buf, (size_t)(pos - buf), gso);
      if (paced(c)) ngtcp2_conn_update_pkt_tx_time(c->q, ts);
      return 0;
    }
    c->tx_pkts++;
    if (pkts > 0 && (size_t)nw > gso) { /* a GSO batch is of equal datagrams (the last shorter) */
      send_datagrams(c->fd, &c->remote, c->remote_len, buf, (size_t)(pos - buf), gso);
      memmove(buf, pos, (size_t)nw);
      pos = buf;
      pkts = 0;
    }
    if (pkts == 0) gso = (size_t)nw;
    pos += nw;
    pkts++;
    total++;
    if (!cfg.gso || (size_t)nw < gso || pkts >= GSO_MAX) {
      send_datagrams(c->fd, &c->remote, c->remote_len, buf, (size_t)(pos - buf),
                     cfg.gso ? gso : 0);
      pos = buf;
      pkts = 0;
    }
    if (paced(c) && total >= max_pkts) { /* ngtcp2's pacer: one send quantum, then wait */
      if (pos > buf) send_datagrams(c->fd, &c->remote, c->remote_len, buf, (size_t)(pos - buf), gso);
      ngtcp2_conn_update_pkt_tx_time(c->q, ts);
      return 0;
    }
    if (total % GSO_MAX == 0) ts = now_ns();
  }
}

/* --- connections -------------------------------------------------------------------------- */
static void release_source(conn *c);

static void free_conn(conn *c) {
  release_source(c);
  for (conn **p = &conns; *p; p = &(*p)->next) {
    if (*p == c) {
      *p = c->next;
      break;
    }
  }
  while (c->streams) {
    stream *s = c->streams;
    c->streams = s->next;
    free_stream_data(s);
    free(s);
  }
  while (c->scans) {
    scan *st = c->scans;
    c->scans = st->next;
    free(st);
  }
  if (c->h) nghttp3_conn_del(c->h);
  if (c->q) ngtcp2_conn_del(c->q);
  if (c->tls) gnutls_deinit(c->tls);
  if (c->qlog) fclose(c->qlog);
  if (!cfg.server && c->fd >= 0) close(c->fd);
  free(c);
}

static void close_conn(conn *c, uint64_t code, int by_peer, const char *why) {
  if (c->closed) return;
  if (cfg.server && !c->announced) { /* never told to the edge: nothing to tell now */
    c->closed = 1;
    return;
  }
  flush_all_data();
  if (!by_peer && c->q && !ngtcp2_conn_is_in_closing_period(c->q) &&
      !ngtcp2_conn_is_in_draining_period(c->q)) {
    uint8_t buf[MAX_DGRAM];
    ngtcp2_path_storage ps;
    ngtcp2_pkt_info pi;
    ngtcp2_path_storage_zero(&ps);
    if (code && c->err.error_code == 0)
      ngtcp2_connection_close_error_set_application_error(&c->err, code, NULL, 0);
    ngtcp2_ssize n =
        ngtcp2_conn_write_connection_close(c->q, &ps.path, &pi, buf, sizeof buf, &c->err, now_ns());
    if (n > 0) send_datagrams(c->fd, &c->remote, c->remote_len, buf, (size_t)n, 0);
  }
  c->closed = 1;
  uint64_t err = c->err.error_code ? c->err.error_code : code;
  emit(EV_CLOSED, c->id, -1, now_ns(), err, (uint64_t)by_peer, why, why ? strlen(why) : 0, NULL, 0);
}

static void handle_read_error(conn *c, int rv) {
  if (rv == NGTCP2_ERR_DRAINING) {
    /* the peer closed: RFC 9000 10.2.2, the draining period (3 PTO) before the state goes */
    const ngtcp2_connection_close_error *e = NULL;
    ngtcp2_connection_close_error ce;
    ngtcp2_conn_get_connection_close_error(c->q, &ce);
    e = &ce;
    char why[300];
    snprintf(why, sizeof why, "closed by peer: error %" PRIu64 " %.*s", e->error_code,
             (int)(e->reasonlen < 200 ? e->reasonlen : 200), (const char *)e->reason);
    c->err = ce;
    close_conn(c, e->error_code, 1, why);
    return;
  }
  if (rv == NGTCP2_ERR_CALLBACK_FAILURE && c->err.error_code) {
    /* an application error set by the callback (H3_EXCESSIVE_LOAD, nghttp3's) stays */
  } else if (rv == NGTCP2_ERR_CRYPTO) {
    ngtcp2_connection_close_error_set_transport_error_tls_alert(
        &c->err, ngtcp2_conn_get_tls_alert(c->q), NULL, 0);
  } else {
    ngtcp2_connection_close_error_set_transport_error_liberr(&c->err, rv, NULL, 0);
  }
  close_conn(c, 0, 0, ngtcp2_strerror(rv));
}

static void after_read(conn *c) {
  if (!c->handshake_reported && ngtcp2_conn_get_handshake_completed(c->q)) {
    c->handshake_reported = 1;
    int resumed = gnutls_session_is_resumed(c->tls);
    int early = cfg.server ? (gnutls_session_get_flags(c->tls) & GNUTLS_SFLAGS_EARLY_DATA) != 0
                           : c->want_early && !c->early_refused;
    emit(EV_HANDSHAKE, c->id, -1, now_ns(), (uint64_t)resumed, (uint64_t)early, NULL, 0, NULL, 0);
  }
}

static conn *new_conn(void) {
  conn *c = calloc(1, sizeof *c);
  if (!c) die("out of memory");
  c->fd = -1;
  ngtcp2_connection_close_error_default(&c->err);
  c->start_ns = now_ns();
  c->next_sample_ns = c->start_ns;
  c->next = conns;
  conns = c;
  return c;
}

/* --- server ------------------------------------------------------------------------------- */
static conn *find_by_dcid(const uint8_t *dcid, size_t len) {
  for (conn *c = conns; c; c = c->next) {
    if (c->odcid.datalen == len && memcmp(c->odcid.data, dcid, len) == 0) return c;
    for (size_t i = 0; i < c->ncids; i++)
      if (c->cids[i].datalen == len && memcmp(c->cids[i].data, dcid, len) == 0) return c;
  }
  return NULL;
}

static void send_retry(const ngtcp2_pkt_hd *hd, const struct sockaddr_storage *from,
                       socklen_t fromlen) {
  uint8_t token[NGTCP2_CRYPTO_MAX_RETRY_TOKENLEN], buf[MAX_DGRAM];
  ngtcp2_cid scid;
  scid.datalen = SCID_LEN;
  gnutls_rnd(GNUTLS_RND_RANDOM, scid.data, scid.datalen);
  ngtcp2_ssize tl = ngtcp2_crypto_generate_retry_token(
      token, retry_secret, sizeof retry_secret, hd->version, (const struct sockaddr *)from,
      fromlen, &scid, &hd->dcid, now_ns());
  if (tl < 0) return;
  ngtcp2_ssize n = ngtcp2_crypto_write_retry(buf, sizeof buf, hd->version, &hd->scid, &scid,
                                             &hd->dcid, token, (size_t)tl);
  if (n > 0) send_datagrams(server_fd, from, fromlen, buf, (size_t)n, 0);
}

/* --- the server's guard (servers/guard.py's rules, in C: they run per Initial) ----------- */
typedef struct {
  uint8_t addr[16];
  uint8_t len;
  double tokens;
  uint64_t seen_ns;
  uint64_t live; /* connections held */
} source;

static source *sources;
static size_t nsources;
static uint64_t live_conns, garbage, attempts_ns[4096];
static size_t nattempts, attempt_head;

static size_t addr_bytes(const struct sockaddr_storage *a, uint8_t out[16]) {
  if (a->ss_family == AF_INET) {
    memcpy(out, &((const struct sockaddr_in *)a)->sin_addr, 4);
    return 4;
  }
  memcpy(out, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
  return 16;
}

/* The source's entry; a new one takes a free slot or the least recently seen entry that
   holds no connection (memory bounded under spoofing, as guard.SourceRateLimiter). */
static source *source_of(const struct sockaddr_storage *a, uint64_t now) {
  uint8_t key[16];
  size_t len = addr_bytes(a, key);
  source *oldest = NULL;
  for (size_t i = 0; i < nsources; i++) {
    source *s = &sources[i];
    if (s->len == len && memcmp(s->addr, key, len) == 0) return s;
    if (!s->live && (!oldest || s->seen_ns < oldest->seen_ns)) oldest = s;
  }
  source *s = nsources < cfg.sources_cap ? &sources[nsources++] : oldest;
  if (!s) return NULL; /* every tracked source holds a connection */
  memset(s, 0, sizeof *s);
  memcpy(s->addr, key, len);
  s->len = (uint8_t)len;
  s->tokens = cfg.initials_burst;
  s->seen_ns = now;
  return s;
}

static void dropped(const struct sockaddr_storage *from, const char *reason) {
  garbage++;
  if (garbage > 100) return; /* a flood is counted, its first lines only are logged */
  char addr[INET6_ADDRSTRLEN] = "", line[300];
  if (from->ss_family == AF_INET)
    inet_ntop(AF_INET, &((const struct sockaddr_in *)from)->sin_addr, addr, sizeof addr);
  else
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)from)->sin6_addr, addr, sizeof addr);
  int port = ntohs(((const struct sockaddr_in *)from)->sin_port);
  int n = snprintf(line, sizeof line, "%s:%d %s", addr, port, reason);
  emit(EV_DROPPED, -1, -1, now_ns(), garbage, 0, line, n > 0 ? (size_t)n : 0, NULL, 0);
}

/* An Initial of a source within its rate (a token bucket per source). */
static int initial_allowed(source *s, uint64_t now) {
  if (!s) return 0;
  double elapsed = (double)(now - s->seen_ns) / 1e9;
  s->seen_ns = now;
  s->tokens += elapsed * cfg.initials_per_s;
  if (s->tokens > cfg.initials_burst) s->tokens = cfg.initials_burst;
  if (s->tokens < 1.0) return 0;
  s->tokens -= 1.0;
  return 1;
}

static int handshaking(void) {
  int n = 0;
  for (conn *c = conns; c; c = c->next)
    if (!c->closed && !c->handshake_reported) n++;
  return n;
}

/* guard.RetryPolicy: always, never, or (auto) when too many connections are in handshake
   or too many were attempted in the last second */
static int retry_required(uint64_t now) {
  attempts_ns[attempt_head] = now;
  attempt_head = (attempt_head + 1) % 4096;
  if (nattempts < 4096) nattempts++;
  if (cfg.retry_mode == 1) return 1;
  if (cfg.retry_mode == 2) return 0;
  if ((uint64_t)handshaking() >= cfg.retry_threshold) return 1;
  uint64_t recent = 0;
  for (size_t i = 0; i < nattempts; i++)
    if (now - attempts_ns[i] <= NGTCP2_SECONDS) recent++;
  return recent > cfg.retry_threshold;
}

static void release_source(conn *c) {
  source *s = c->src;
  if (!s) return;
  if (s->live) s->live--;
  if (live_conns) live_conns--;
  c->src = NULL;
}

static conn *accept_conn(const uint8_t *pkt, size_t len, const struct sockaddr_storage *from,
                         socklen_t fromlen, uint64_t ts) {
  ngtcp2_pkt_hd hd;
  uint64_t now = ts;
  if (ngtcp2_accept(&hd, pkt, len) != 0) {
    dropped(from, "not a valid Initial for a new connection");
    return NULL;
  }
  source *src = source_of(from, now);
  if (!initial_allowed(src, now)) {
    garbage++; /* the cheap path of a flood: no log line */
    return NULL;
  }
  ngtcp2_cid ocid, *pocid = NULL;
  if (hd.token.len == 0 && retry_required(now)) {
    send_retry(&hd, from, fromlen);
    return NULL;
  }
  if (hd.token.len) {
    /* RFC 9000 section 8.1.3: an invalid token may be dropped (a reply would amplify) */
    if (ngtcp2_crypto_verify_retry_token(&ocid, hd.token.base, hd.token.len, retry_secret,
                                         sizeof retry_secret, hd.version,
                                         (const struct sockaddr *)from, fromlen, &hd.dcid,
                                         10 * NGTCP2_SECONDS, now) != 0) {
      dropped(from, "invalid Retry token");
      return NULL;
    }
    pocid = &ocid;
  }
  if (live_conns >= cfg.max_conns) {
    char why[80];
    snprintf(why, sizeof why, "connection cap reached (%" PRIu64 " in total)", cfg.max_conns);
    dropped(from, why);
    return NULL;
  }
  if (src->live >= cfg.max_per_source) {
    char why[80];
    snprintf(why, sizeof why, "connection cap reached (%" PRIu64 " from one source)",
             cfg.max_per_source);
    dropped(from, why);
    return NULL;
  }
  conn *c = new_conn();
  /* the connection begins with the packet that made it: ngtcp2's clock (its qlog's times
     too) counts from here, and never runs backwards for that packet */
  c->start_ns = c->next_sample_ns = ts;
  c->id = next_conn_id++;
  c->fd = server_fd;
  c->local = server_local;
  c->local_len = server_local_len;
  memcpy(&c->remote, from, fromlen);
  c->remote_len = fromlen;
  c->odcid = hd.dcid;
  ngtcp2_settings st;
  ngtcp2_transport_params p;
  settings_of(&st, &p, c);
  if (hd.token.len) st.token = hd.token;
  p.stateless_reset_token_present = 1;
  gnutls_rnd(GNUTLS_RND_RANDOM, p.stateless_reset_token, sizeof p.stateless_reset_token);
  if (pocid) {
    p.original_dcid = *pocid;
    p.retry_scid = hd.dcid;
    p.retry_scid_present = 1;
  } else {
    p.original_dcid = hd.dcid;
  }
  ngtcp2_cid scid;
  scid.datalen = SCID_LEN;
  gnutls_rnd(GNUTLS_RND_RANDOM, scid.data, scid.datalen);
  c->cids[c->ncids++] = scid;
  open_qlog(c, &st, pocid ? pocid : &hd.dcid);
  ngtcp2_path path = {{(struct sockaddr *)&c->local, c->local_len},
                      {(struct sockaddr *)&c->remote, c->remote_len}, NULL};
  ngtcp2_callbacks cb = callbacks();
  if (tls_session(c) != 0 ||
      ngtcp2_conn_server_new(&c->q, &hd.scid, &scid, &path, hd.version, &cb, &st, &p, NULL, c) != 0) {
    emit_error(c->id, "cannot make a connection");
    free_conn(c);
    return NULL;
  }
  ngtcp2_conn_set_tls_native_handle(c->q, c->tls);
  c->src = src;
  src->live++;
  live_conns++;
  return c;
}

/* One datagram to the server: its connection by DCID, or a new one (the guard first). */
static void server_datagram(uint8_t *pkt, size_t len, struct sockaddr_storage *from,
                            socklen_t fromlen, uint64_t ts) {
  ngtcp2_version_cid vc;
  if (ngtcp2_pkt_decode_version_cid(&vc, pkt, len, SCID_LEN) != 0) {
    dropped(from, "not a QUIC packet");
    return;
  }
  conn *c = find_by_dcid(vc.dcid, vc.dcidlen);
  if (!c && !(pkt[0] & 0x80)) { /* RFC 9000 17.3: a short header, for no connection */
    dropped(from, "a short-header packet for no connection");
    return;
  }
  if (!c) c = accept_conn(pkt, len, from, fromlen, ts);
  if (!c || c->closed) return;
  ngtcp2_path path = {{(struct sockaddr *)&c->local, c->local_len},
                      {(struct sockaddr *)from, fromlen}, NULL};
  ngtcp2_pkt_info pi = {0};
  c->rx_pkts++;
  flush_out_lock++; /* the queue is not written out while a first packet may add to it */
  size_t mark = outq_len;
  int rv = ngtcp2_conn_read_pkt(c->q, &path, &pi, pkt, len, ts);
  flush_out_lock--;
  if (rv != 0 && !c->announced) {
    /* its first packet did not read (a forged Initial): forgotten without a word to the
       edge (what it queued is taken back), as a datagram dropped */
    outq_len = mark;
    dropped(from, "an Initial that does not decrypt");
    c->closed = 1;
    return;
  }
  if (!c->announced) {
    /* announced before the events its first packet made (a 0-RTT request, coalesced) */
    c->announced = 1;
    char addr[INET6_ADDRSTRLEN] = "";
    if (from->ss_family == AF_INET)
      inet_ntop(AF_INET, &((struct sockaddr_in *)from)->sin_addr, addr, sizeof addr);
    else
      inet_ntop(AF_INET6, &((struct sockaddr_in6 *)from)->sin6_addr, addr, sizeof addr);
    emit_at(mark, EV_CONN_OPEN, c->id, c->start_ns, addr, strlen(addr));
  }
  if (rv != 0) {
    handle_read_error(c, rv);
    return;
  }
  after_read(c);
}

/* One datagram to a client connection. */
static void client_datagram(conn *c, uint8_t *pkt, size_t len, struct sockaddr_storage *from,
                            socklen_t fromlen, uint64_t ts) {
  if (c->closed) return;
  ngtcp2_path path = {{(struct sockaddr *)&c->local, c->local_len},
                      {(struct sockaddr *)from, fromlen}, NULL};
  ngtcp2_pkt_info pi = {0};
  c->rx_pkts++;
  int rv = ngtcp2_conn_read_pkt(c->q, &path, &pi, pkt, len, ts);
  if (rv != 0) {
    handle_read_error(c, rv);
    return;
  }
  after_read(c);
}

/* Every datagram waiting on fd, RECV_BATCH per recvmmsg; a GRO buffer (UDP_GRO: several
   datagrams of one size back to back, the last maybe shorter) is cut into its datagrams. */
static void read_socket(int fd, conn *client) {
  static uint8_t bufs[RECV_BATCH][65536];
  static char cbufs[RECV_BATCH][CMSG_SPACE(sizeof(int))];
  struct mmsghdr msgs[RECV_BATCH];
  struct iovec iov[RECV_BATCH];
  struct sockaddr_storage from[RECV_BATCH];
  for (int round = 0; round < 16; round++) {
    for (int i = 0; i < RECV_BATCH; i++) {
      iov[i] = (struct iovec){bufs[i], sizeof bufs[i]};
      msgs[i].msg_hdr = (struct msghdr){.msg_name = &from[i], .msg_namelen = sizeof from[i],
                                        .msg_iov = &iov[i], .msg_iovlen = 1,
                                        .msg_control = cbufs[i],
                                        .msg_controllen = sizeof cbufs[i]};
    }
    int n = recvmmsg(fd, msgs, RECV_BATCH, MSG_DONTWAIT, NULL);
    if (n <= 0) return;
    uint64_t ts = now_ns();
    for (int i = 0; i < n; i++) {
      size_t len = msgs[i].msg_len, seg = len;
      for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msgs[i].msg_hdr); cm;
           cm = CMSG_NXTHDR(&msgs[i].msg_hdr, cm)) {
        if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
          int size;
          memcpy(&size, CMSG_DATA(cm), sizeof size);
          if (size > 0) seg = (size_t)size;
        }
      }
      socklen_t fromlen = msgs[i].msg_hdr.msg_namelen;
      for (size_t off = 0; off < len; off += seg) {
        size_t l = len - off < seg ? len - off : seg;
        if (client) {
          if (client->closed) break;
          client_datagram(client, bufs[i] + off, l, &from[i], fromlen, ts);
        } else {
          server_datagram(bufs[i] + off, l, &from[i], fromlen, ts);
        }
      }
    }
    if (n < RECV_BATCH) return;
  }
}

static void server_read(void) { read_socket(server_fd, NULL); }

/* --- client ------------------------------------------------------------------------------- */
static void client_read(conn *c) { read_socket(c->fd, c); }

static void client_connect(int64_t id, int early, const uint8_t *ticket, size_t ticket_len) {
  conn *c = new_conn();
  c->id = id;
  c->want_early = early;
  if (resolve(cfg.host, cfg.port, &c->remote, &c->remote_len) != 0) {
    emit_error(id, "host %s is not an IP address", cfg.host);
    close_conn(c, 0, 1, "bad host");
    return;
  }
  c->fd = udp_socket(c->remote.ss_family);
  if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&c->remote, c->remote_len) != 0) {
    emit_error(id, "socket: %s", strerror(errno));
    close_conn(c, 0, 1, "socket");
    return;
  }
  c->local_len = sizeof c->local;
  getsockname(c->fd, (struct sockaddr *)&c->local, &c->local_len);
  emit(EV_CONN_OPEN, c->id, -1, c->start_ns, 0, 0, cfg.host, strlen(cfg.host), NULL, 0);
  ngtcp2_cid dcid, scid;
  dcid.datalen = NGTCP2_MIN_INITIAL_DCIDLEN + 2;
  scid.datalen = SCID_LEN;
  gnutls_rnd(GNUTLS_RND_RANDOM, dcid.data, dcid.datalen);
  gnutls_rnd(GNUTLS_RND_RANDOM, scid.data, scid.datalen);
  c->cids[c->ncids++] = scid;
  ngtcp2_settings st;
  ngtcp2_transport_params p;
  settings_of(&st, &p, c);
  open_qlog(c, &st, &dcid);
  ngtcp2_path path = {{(struct sockaddr *)&c->local, c->local_len},
                      {(struct sockaddr *)&c->remote, c->remote_len}, NULL};
  ngtcp2_callbacks cb = callbacks();
  if (tls_session(c) != 0 ||
      ngtcp2_conn_client_new(&c->q, &dcid, &scid, &path, NGTCP2_PROTO_VER_V1, &cb, &st, &p, NULL,
                             c) != 0) {
    emit_error(id, "cannot make a connection");
    close_conn(c, 0, 1, "setup");
    return;
  }
  ngtcp2_conn_set_tls_native_handle(c->q, c->tls);
  if (cfg.keep_alive_ns) ngtcp2_conn_set_keep_alive_timeout(c->q, cfg.keep_alive_ns);
  if (ticket_len > 4) {
    uint32_t sl;
    memcpy(&sl, ticket, 4);
    if ((size_t)sl + 4 <= ticket_len) {
      gnutls_datum_t d = {(unsigned char *)ticket + 4, sl};
      ngtcp2_transport_params tp;
      if (gnutls_session_set_data(c->tls, d.data, d.size) == 0 &&
          ngtcp2_decode_transport_params(&tp, NGTCP2_TRANSPORT_PARAMS_TYPE_ENCRYPTED_EXTENSIONS,
                                         ticket + 4 + sl, ticket_len - 4 - sl) == 0) {
        ngtcp2_conn_set_early_remote_transport_params(c->q, &tp);
        if (early && setup_h3(c) != 0) c->want_early = 0;
      }
    }
  }
  if (!c->h) c->want_early = 0;
  /* with early data, the first flight waits for the first request (as aioquic's client
     does): the Initial and the 0-RTT request leave together */
  if (!c->want_early) write_conn(c);
}

static void submit_request(conn *c, int64_t tag, stream *s);

/* Requests waiting for a stream: the stream credit, the HTTP/3 connection (a client's,
   made when its keys are), or their resubmission after the server refused their 0-RTT. */
typedef struct {
  int64_t conn, tag;
  int has_body;
  uint8_t *hdrs;
  size_t hdrs_len;
  stream *carry; /* a refused 0-RTT request's stream: its body chunks go on */
} pending_req;

static pending_req pending[256];
static size_t npending;

static int add_pending(int64_t conn_id, int64_t tag, int has_body, const uint8_t *hdrs,
                       size_t len, stream *carry) {
  if (npending == sizeof pending / sizeof pending[0]) return -1;
  uint8_t *copy = malloc(len ? len : 1);
  if (!copy) die("out of memory");
  memcpy(copy, hdrs, len);
  pending[npending++] = (pending_req){conn_id, tag, has_body, copy, len, carry};
  return 0;
}

static void open_pending_request(conn *c) {
  if (!c->h) return;
  for (size_t i = 0; i < npending;) {
    if (pending[i].conn != c->id) {
      i++;
      continue;
    }
    int64_t sid;
    if (ngtcp2_conn_open_bidi_stream(c->q, &sid, NULL) != 0) return; /* wait for credit */
    pending_req r = pending[i];
    stream *s = new_stream(c, sid);
    if (r.carry) { /* the refused request's body, from its first byte again */
      s->head = s->cursor = r.carry->head;
      s->tail = r.carry->tail;
      s->queued = r.carry->queued;
      s->eof = r.carry->eof;
      r.carry->head = r.carry->tail = r.carry->cursor = NULL;
      free_stream_data(r.carry);
      free(r.carry);
    }
    s->has_body = r.has_body;
    s->hdrs = r.hdrs;
    s->hdrs_len = s->hdrs_cap = r.hdrs_len;
    npending--;
    memmove(&pending[i], &pending[i + 1], (npending - i) * sizeof pending[0]);
    submit_request(c, r.tag, s);
  }
}

/* RFC 9001 section 4.6.2: the server refused the 0-RTT data. ngtcp2 forgets the streams it
   carried; the requests are made again in 1-RTT, in their order, under the same tags (the
   edge learns their new stream ids from EV_STREAM). */
static void early_data_refused(conn *c) {
  stream *saved = c->streams;
  c->streams = NULL;
  if (c->h) nghttp3_conn_del(c->h);
  c->h = NULL;
  ngtcp2_conn_early_data_rejected(c->q);
  /* oldest first: the list is newest first */
  stream *order[256];
  size_t n = 0;
  for (stream *s = saved; s; s = s->next)
    if (s->submitted && s->req_hdrs && n < 256) order[n++] = s;
  for (size_t i = n; i-- > 0;) {
    stream *s = order[i];
    add_pending(c->id, s->tag, s->has_body, s->req_hdrs, s->req_hdrs_len, s);
  }
  for (stream *s = saved, *nx; s; s = nx) {
    nx = s->next;
    int kept = 0;
    for (size_t i = 0; i < n; i++) kept |= order[i] == s;
    if (!kept) {
      free_stream_data(s);
      free(s);
    }
  }
  if (setup_h3(c) == 0) open_pending_request(c);
}

/* name\0value\0... -> nghttp3_nv */
static size_t parse_nv(const uint8_t *p, size_t len, nghttp3_nv *nv, size_t max) {
  size_t n = 0, off = 0;
  while (off < len && n < max) {
    const uint8_t *name = p + off;
    const uint8_t *z = memchr(name, 0, len - off);
    if (!z) break;
    const uint8_t *val = z + 1;
    const uint8_t *z2 = memchr(val, 0, (size_t)(p + len - val));
    if (!z2) break;
    nv[n++] = (nghttp3_nv){(uint8_t *)name, (uint8_t *)val, (size_t)(z - name),
                           (size_t)(z2 - val), NGHTTP3_NV_FLAG_NONE};
    off = (size_t)(z2 + 1 - p);
  }
  return n;
}

static void submit_request(conn *c, int64_t tag, stream *s) {
  nghttp3_nv nv[64];
  size_t n = parse_nv(s->hdrs, s->hdrs_len, nv, 64);
  nghttp3_data_reader dr = {read_body};
  s->submitted = 1;
  s->tag = tag;
  emit(EV_STREAM, c->id, s->id, now_ns(), (uint64_t)tag, 0, NULL, 0, NULL, 0);
  int rv = nghttp3_conn_submit_request(c->h, s->id, nv, n, s->has_body ? &dr : NULL, s);
  if (c->want_early && !c->handshake_reported) { /* its 0-RTT may be refused: kept */
    s->req_hdrs = s->hdrs;
    s->req_hdrs_len = s->hdrs_len;
  } else {
    free(s->hdrs);
  }
  s->hdrs = NULL;
  s->hdrs_len = s->hdrs_cap = 0;
  if (rv != 0) emit_error(c->id, "submit_request: %s", nghttp3_strerror(rv));
  if (!s->has_body) {
    s->eof = 1;
  }
}

/* --- commands from the edge ------------------------------------------------------------- */
static conn *conn_by_id(int64_t id) {
  for (conn *c = conns; c; c = c->next)
    if (c->id == id) return c;
  return NULL;
}

static void add_body(conn *c, stream *s, const uint8_t *data, size_t len, int fin) {
  if (len) {
    chunk *k = malloc(sizeof *k + len);
    if (!k) die("out of memory");
    k->next = NULL;
    k->len = len;
    memcpy(k->data, data, len);
    if (s->tail) s->tail->next = k;
    else s->head = k;
    s->tail = k;
    if (!s->cursor) s->cursor = k;
    s->queued += len;
  }
  if (fin) s->eof = 1;
  if (s->blocked && c->h) {
    s->blocked = 0;
    nghttp3_conn_resume_stream(c->h, s->id);
  }
}

static int quitting;

static void command(const frame_hdr *h, const uint8_t *p) {
  conn *c = h->type == CMD_CONNECT || h->type == CMD_QUIT ? NULL : conn_by_id(h->conn);
  if (h->type == CMD_QUIT) {
    quitting = 1;
    return;
  }
  if (h->type == CMD_CONNECT) {
    client_connect(h->conn, (int)h->a, p, h->len);
    return;
  }
  if (!c || c->closed) return; /* a command for a connection that ended: nothing to do */
  stream *s;
  switch (h->type) {
  case CMD_REQUEST:
    if (add_pending(c->id, (int64_t)h->a, (int)h->b, p, h->len, NULL) != 0) {
      emit_error(c->id, "too many requests waiting");
      return;
    }
    open_pending_request(c);
    break;
  case CMD_BODY:
    s = find_stream(c, h->stream);
    if (s) add_body(c, s, p, h->len, (int)h->a);
    break;
  case CMD_RESPOND: {
    s = find_stream(c, h->stream);
    if (!s || !c->h) break;
    nghttp3_nv nv[64];
    size_t n = parse_nv(p, h->len, nv, 64);
    nghttp3_data_reader dr = {read_body};
    s->has_body = (int)h->b;
    s->submitted = 1;
    if (!s->has_body) s->eof = 1;
    int rv = nghttp3_conn_submit_response(c->h, s->id, nv, n, s->has_body ? &dr : NULL);
    if (rv != 0) emit_error(c->id, "submit_response %" PRId64 ": %s", s->id, nghttp3_strerror(rv));
    break;
  }
  case CMD_STOP:
    if (h->b & 1) ngtcp2_conn_shutdown_stream_read(c->q, h->stream, h->a);
    if (h->b & 2) {
      ngtcp2_conn_shutdown_stream_write(c->q, h->stream, h->a);
      if (c->h) nghttp3_conn_shutdown_stream_write(c->h, h->stream);
    }
    break;
  case CMD_PRIORITY: {
    nghttp3_pri pri = {.urgency = (uint32_t)h->a, .inc = (int)h->b};
    if (c->h) nghttp3_conn_set_stream_priority(c->h, h->stream, &pri);
    break;
  }
  case CMD_CLOSE:
    flushing = 1;
    write_conn(c);
    flushing = 0;
    close_conn(c, h->a, 0, "closed by us");
    break;
  }
  write_conn(c);
}

static uint8_t *inbuf;
static size_t in_len, in_cap;

static int read_commands(void) {
  if (in_cap - in_len < 65536) {
    in_cap = in_cap * 2 + 131072;
    inbuf = realloc(inbuf, in_cap);
    if (!inbuf) die("out of memory");
  }
  ssize_t n = read(cfg.control_fd, inbuf + in_len, in_cap - in_len);
  if (n == 0) return -1; /* the edge is gone */
  if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
  in_len += (size_t)n;
  size_t off = 0;
  while (in_len - off >= sizeof(frame_hdr)) {
    frame_hdr h;
    memcpy(&h, inbuf + off, sizeof h);
    if (in_len - off < sizeof h + h.len) {
      if (sizeof h + h.len > in_cap) {
        in_cap = sizeof h + h.len + 65536;
        memmove(inbuf, inbuf + off, in_len - off);
        in_len -= off;
        off = 0;
        inbuf = realloc(inbuf, in_cap);
        if (!inbuf) die("out of memory");
      }
      break;
    }
    command(&h, inbuf + off + sizeof h);
    off += sizeof h + h.len;
  }
  if (off) {
    memmove(inbuf, inbuf + off, in_len - off);
    in_len -= off;
  }
  return 0;
}

/* --- sampling ------------------------------------------------------------------------------ */
/* ngtcp2's connection state to the edge every sample period while a stream is open or
   bytes are in flight, and once more when the last of them is acknowledged (the edge's
   samples end with the window drained). */
static void sample(conn *c, uint64_t ts) {
  if (!cfg.sample_ns || c->closed || !c->q) return;
  if (ts < c->next_sample_ns) return;
  ngtcp2_conn_stat st;
  ngtcp2_conn_get_conn_stat(c->q, &st);
  int busy = c->streams != NULL || st.bytes_in_flight > 0;
  if (!busy && !c->sampling) return;
  c->sampling = busy;
  c->next_sample_ns = ts + cfg.sample_ns;
  uint64_t f[STAT_FIELDS] = {
      st.bytes_in_flight, st.cwnd, st.ssthresh, st.smoothed_rtt / 1000, st.latest_rtt / 1000,
      st.min_rtt == UINT64_MAX ? UINT64_MAX : st.min_rtt / 1000, c->tx_pkts, c->rx_pkts,
      st.pto_count, (uint64_t)(st.pacing_rate * 1e9), st.delivery_rate_sec, st.send_quantum};
  emit(EV_STATS, c->id, -1, ts, 0, 0, f, sizeof f, NULL, 0);
}

/* --- the loop ------------------------------------------------------------------------------ */
static volatile sig_atomic_t stop_signal;
static void on_signal(int sig) { stop_signal = sig; }

static void server_listen(void) {
  struct sockaddr_storage ss;
  socklen_t len;
  if (resolve(cfg.bind, cfg.port, &ss, &len) != 0) die("--bind %s: not an IP address", cfg.bind);
  server_fd = udp_socket(ss.ss_family);
  int one = 1;
  setsockopt(server_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (server_fd < 0 || bind(server_fd, (struct sockaddr *)&ss, len) != 0)
    die("bind %s:%d: %s", cfg.bind, cfg.port, strerror(errno));
  len = sizeof ss;
  getsockname(server_fd, (struct sockaddr *)&ss, &len);
  server_local = ss;
  server_local_len = len;
  int port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                           : ((struct sockaddr_in6 *)&ss)->sin6_port);
  emit(EV_READY, -1, -1, now_ns(), (uint64_t)port, 0, NULL, 0, NULL, 0);
}

static void run(void) {
  struct pollfd fds[1024];
  conn *owner[1024];
  while (!stop_signal) {
    uint64_t ts = now_ns();
    uint64_t next = ts + NGTCP2_SECONDS;
    for (conn *c = conns, *nx; c; c = nx) {
      nx = c->next;
      if (c->closed) {
        /* the server forgets a closed connection at once; its late packets are dropped */
        free_conn(c);
        continue;
      }
      uint64_t e = ngtcp2_conn_get_expiry(c->q);
      if (e <= ts) {
        int rv = ngtcp2_conn_handle_expiry(c->q, ts);
        if (rv != 0) {
          if (rv == NGTCP2_ERR_IDLE_CLOSE) close_conn(c, 0, 1, "idle timeout");
          else if (rv == NGTCP2_ERR_HANDSHAKE_TIMEOUT) close_conn(c, 0, 1, "handshake timeout");
          else handle_read_error(c, rv);
          continue;
        }
        write_conn(c);
        e = ngtcp2_conn_get_expiry(c->q);
      }
      sample(c, ts);
      if (e < next) next = e;
      if (cfg.sample_ns && (c->streams || c->sampling) && c->next_sample_ns < next)
        next = c->next_sample_ns;
    }
    flush_all_data();
    flush_out();
    if (quitting && !conns) break;
    if (quitting) {
      for (conn *c = conns; c; c = c->next) close_conn(c, 0, 0, "quit");
      flush_out();
      continue;
    }
    size_t nfds = 0;
    fds[nfds] = (struct pollfd){cfg.control_fd, POLLIN, 0};
    owner[nfds++] = NULL;
    if (server_fd >= 0) {
      fds[nfds] = (struct pollfd){server_fd, POLLIN, 0};
      owner[nfds++] = NULL;
    } else {
      for (conn *c = conns; c && nfds < 1024; c = c->next) {
        fds[nfds] = (struct pollfd){c->fd, POLLIN, 0};
        owner[nfds++] = c;
      }
    }
    ts = now_ns();
    int timeout_ms = 0;
    struct timespec tmo = {0, 0};
    if (next > ts) {
      uint64_t d = next - ts;
      tmo.tv_sec = (time_t)(d / NGTCP2_SECONDS);
      tmo.tv_nsec = (long)(d % NGTCP2_SECONDS);
    }
    (void)timeout_ms;
    int n = ppoll(fds, nfds, &tmo, NULL);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("poll: %s", strerror(errno));
    }
    if (fds[0].revents & (POLLIN | POLLHUP)) {
      if (read_commands() != 0) break;
    }
    for (size_t i = 1; i < nfds; i++) {
      if (!(fds[i].revents & POLLIN)) continue;
      if (owner[i] == NULL) {
        server_read();
      } else {
        client_read(owner[i]);
      }
    }
    for (conn *c = conns; c; c = c->next) write_conn(c);
  }
  for (conn *c = conns; c; c = c->next) close_conn(c, 0, 0, "engine stopped");
  flush_out();
  while (conns) free_conn(conns);
}

static int cc_of(const char *name) {
  if (!strcmp(name, "reno")) return NGTCP2_CC_ALGO_RENO;
  if (!strcmp(name, "cubic")) return NGTCP2_CC_ALGO_CUBIC;
  if (!strcmp(name, "bbr")) return NGTCP2_CC_ALGO_BBR;
  if (!strcmp(name, "bbr2")) return NGTCP2_CC_ALGO_BBR2;
  die("--cc %s: one of reno, cubic, bbr, bbr2", name);
  return 0;
}

static uint64_t number(const char *opt, const char *v) {
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || *end || end == v) die("--%s %s: not a whole number", opt, v);
  return x;
}

int main(int argc, char **argv) {
  static struct option opts[] = {
      {"server", no_argument, 0, 'S'}, {"client", no_argument, 0, 'C'},
      {"bind", required_argument, 0, 'b'}, {"port", required_argument, 0, 'p'},
      {"key", required_argument, 0, 'k'}, {"cert", required_argument, 0, 'c'},
      {"host", required_argument, 0, 'H'}, {"sni", required_argument, 0, 'n'},
      {"cc", required_argument, 0, 'x'}, {"max-udp-payload", required_argument, 0, 'm'},
      {"no-pacing", no_argument, 0, 'P'}, {"idle-timeout-ms", required_argument, 0, 'i'},
      {"handshake-timeout-ms", required_argument, 0, 'h'}, {"qlog-dir", required_argument, 0, 'q'},
      {"max-data", required_argument, 0, 'd'}, {"max-stream-data", required_argument, 0, 's'},
      {"ack-thresh", required_argument, 0, 'a'}, {"max-ack-delay-us", required_argument, 0, 'A'},
      {"sample-ms", required_argument, 0, 'M'},
      {"udp-buffer", required_argument, 0, 'u'}, {"control-fd", required_argument, 0, 'f'},
      {"no-gso", no_argument, 0, 'G'}, {"send-policy", required_argument, 0, 'o'},
      {"keep-alive-ms", required_argument, 0, 'K'},
      {"max-connections", required_argument, 0, 'N'},
      {"max-per-source", required_argument, 0, 'n' + 256},
      {"retry-mode", required_argument, 0, 'R'},
      {"retry-threshold", required_argument, 0, 'T'},
      {"initials-per-s", required_argument, 0, 'I'},
      {"rate-limited-sources", required_argument, 0, 'L'},
      {"frame-cap", required_argument, 0, 'F'},
      {"unknown-frame-cap", required_argument, 0, 'U'},
      {0, 0, 0, 0}};
  int o;
  int mode = 0;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (o) {
    case 'S': mode = 1; break;
    case 'C': mode = 2; break;
    case 'b': cfg.bind = optarg; break;
    case 'p': cfg.port = (int)number("port", optarg); break;
    case 'k': cfg.key = optarg; break;
    case 'c': cfg.cert = optarg; break;
    case 'H': cfg.host = optarg; break;
    case 'n': cfg.sni = optarg; break;
    case 'x': cfg.cc = cc_of(optarg); break;
    case 'm': cfg.max_udp_payload = number("max-udp-payload", optarg); break;
    case 'P': cfg.pacing = 0; break;
    case 'i': cfg.idle_timeout_ns = number("idle-timeout-ms", optarg) * NGTCP2_MILLISECONDS; break;
    case 'h': cfg.handshake_timeout_ns = number("handshake-timeout-ms", optarg) * NGTCP2_MILLISECONDS; break;
    case 'q': cfg.qlog_dir = optarg; break;
    case 'd': cfg.max_data = number("max-data", optarg); break;
    case 's': cfg.max_stream_data = number("max-stream-data", optarg); break;
    case 'a': cfg.ack_thresh = number("ack-thresh", optarg); break;
    case 'A': cfg.max_ack_delay_ns = number("max-ack-delay-us", optarg) * NGTCP2_MICROSECONDS; break;
    case 'M': cfg.sample_ns = number("sample-ms", optarg) * NGTCP2_MILLISECONDS; break;
    case 'u': cfg.udp_buffer = (int)number("udp-buffer", optarg); break;
    case 'f': cfg.control_fd = (int)number("control-fd", optarg); break;
    case 'G': cfg.gso = 0; break;
    case 'K': cfg.keep_alive_ns = number("keep-alive-ms", optarg) * NGTCP2_MILLISECONDS; break;
    case 'N': cfg.max_conns = number("max-connections", optarg); break;
    case 'n' + 256: cfg.max_per_source = number("max-per-source", optarg); break;
    case 'R':
      if (!strcmp(optarg, "auto")) cfg.retry_mode = 0;
      else if (!strcmp(optarg, "always")) cfg.retry_mode = 1;
      else if (!strcmp(optarg, "off")) cfg.retry_mode = 2;
      else die("--retry-mode %s: one of auto, always, off", optarg);
      break;
    case 'T': cfg.retry_threshold = number("retry-threshold", optarg); break;
    case 'I':
      cfg.initials_per_s = (double)number("initials-per-s", optarg);
      cfg.initials_burst = 2 * cfg.initials_per_s;
      break;
    case 'L': cfg.sources_cap = number("rate-limited-sources", optarg); break;
    case 'F': {
      char *colon = strchr(optarg, ':');
      if (!colon || cfg.nframe_caps == 16) die("--frame-cap %s: TYPE:BYTES, at most 16", optarg);
      *colon = 0;
      cfg.frame_cap_type[cfg.nframe_caps] = number("frame-cap", optarg);
      cfg.frame_cap_bytes[cfg.nframe_caps++] = number("frame-cap", colon + 1);
      break;
    }
    case 'U': cfg.unknown_frame_cap = number("unknown-frame-cap", optarg); break;
    case 'o':
      if (!strcmp(optarg, "none") || !strcmp(optarg, "rfc9218")) cfg.send_policy = 0;
      else if (!strcmp(optarg, "rr")) cfg.send_policy = 1;
      else if (!strcmp(optarg, "fifo")) cfg.send_policy = 2;
      else die("--send-policy %s: one of none, rfc9218, rr, fifo", optarg);
      break;
    default: die("usage: tb-h3 --server|--client [options] (proto/native/engine.py)");
    }
  }
  if (!mode) die("--server or --client");
  cfg.server = mode == 1;
  if (cfg.max_udp_payload < 1200 || cfg.max_udp_payload > MAX_DGRAM - 28)
    die("--max-udp-payload %zu: 1200..%d", cfg.max_udp_payload, MAX_DGRAM - 28);
  if (!cfg.max_stream_data) cfg.max_stream_data = cfg.max_data;
  /* body pieces are 256 KB: from the heap, reused, not an mmap and its page faults each */
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  fcntl(cfg.control_fd, F_SETFL, fcntl(cfg.control_fd, F_GETFL) | O_NONBLOCK);
  if (gnutls_certificate_allocate_credentials(&cred) != 0) die("gnutls credentials");
  if (cfg.server) {
    if (!cfg.key || !cfg.cert) die("--server needs --key and --cert");
    int rv = gnutls_certificate_set_x509_key_file(cred, cfg.cert, cfg.key, GNUTLS_X509_FMT_PEM);
    if (rv != 0) die("--cert/--key: %s", gnutls_strerror(rv));
    if (gnutls_session_ticket_key_generate(&ticket_key) != 0) die("ticket key");
    gnutls_anti_replay_init(&anti_replay);
    gnutls_anti_replay_set_add_function(anti_replay, anti_replay_add);
    gnutls_rnd(GNUTLS_RND_RANDOM, retry_secret, sizeof retry_secret);
    sources = calloc(cfg.sources_cap ? cfg.sources_cap : 1, sizeof *sources);
    if (!sources) die("out of memory");
    server_listen();
  } else {
    if (!cfg.host || !cfg.port) die("--client needs --host and --port");
    emit(EV_READY, -1, -1, now_ns(), 0, 0, NULL, 0, NULL, 0);
  }
  flush_out();
  run();
  return 0;
}

/*
 * limits.c — what clients run into: the time limits of the transports
 * (a request head or body too slow, a client that reads nothing, an idle
 * stream or connection, gRPC keepalive and its ping policing, the calls
 * one connection may hold). Each hit is counted, for /metrics, and
 * logged at most once a second per kind, so a flood of slow clients
 * cannot flood the log. Any thread.
 *
 * Also the in-flight byte budget (--max-inflight-bytes): one atomic count
 * of the bytes clients have made the server hold — request bodies being
 * received and their buffers until the request is freed, gRPC messages
 * being assembled or in the engine, replies being written — that a taker
 * may not push past the bound (a reply of a stream, already made, is
 * added past it: its connection stops being read instead). Whoever takes bytes gives back exactly as many, once.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>

#include "frontend/http/http.h"
#include "util/log.h"

#define LOG_EVERY_NS 1000000000ull

typedef struct limit_state {
  const char *name;
  bool info; /* what well-behaved clients meet too (idling): an info line */
  _Atomic uint64_t hits;
  _Atomic uint64_t logged_ns; /* the last line about this kind */
  _Atomic uint64_t unlogged;  /* hits since that line */
} limit_state;

static limit_state limits[HARK_LIMIT_COUNT] = {
    [HARK_LIMIT_HTTP_HEADER_TIMEOUT] = {.name = "http_header_timeout"},
    [HARK_LIMIT_HTTP_BODY_TIMEOUT] = {.name = "http_body_timeout"},
    [HARK_LIMIT_SEND_TIMEOUT] = {.name = "send_timeout"},
    [HARK_LIMIT_WS_IDLE_TIMEOUT] = {.name = "ws_idle_timeout", .info = true},
    [HARK_LIMIT_GRPC_IDLE] = {.name = "grpc_connection_idle", .info = true},
    [HARK_LIMIT_GRPC_MAX_AGE] = {.name = "grpc_connection_age", .info = true},
    [HARK_LIMIT_GRPC_KEEPALIVE_TIMEOUT] = {.name = "grpc_keepalive_timeout"},
    [HARK_LIMIT_GRPC_PING_STRIKES] = {.name = "grpc_ping_strikes"},
    [HARK_LIMIT_GRPC_STREAMS_PER_CONNECTION] = {.name = "grpc_streams_per_connection"},
    [HARK_LIMIT_GRPC_STREAM_IDLE] = {.name = "grpc_stream_idle_timeout"},
    [HARK_LIMIT_INFLIGHT_BYTES] = {.name = "inflight_bytes"},
    [HARK_LIMIT_GRPC_MESSAGE_TIMEOUT] = {.name = "grpc_message_timeout"},
    [HARK_LIMIT_GRPC_DECLARED_BYTES] = {.name = "grpc_declared_bytes"},
};

static _Atomic uint64_t inflight, inflight_max;

void hark_inflight_set_max(uint64_t max) { atomic_store(&inflight_max, max); }

uint64_t hark_inflight_max(void) { return atomic_load(&inflight_max); }

uint64_t hark_inflight_bytes(void) { return atomic_load(&inflight); }

bool hark_inflight_take(uint64_t n) {
  uint64_t max = atomic_load_explicit(&inflight_max, memory_order_relaxed);
  uint64_t cur = atomic_load_explicit(&inflight, memory_order_relaxed);
  do {
    if (max && (n > max || cur > max - n)) return false;
  } while (!atomic_compare_exchange_weak_explicit(&inflight, &cur, cur + n, memory_order_relaxed,
                                                  memory_order_relaxed));
  return true;
}

void hark_inflight_add(uint64_t n) {
  atomic_fetch_add_explicit(&inflight, n, memory_order_relaxed);
}

void hark_inflight_give(uint64_t n) {
  if (!n) return;
  uint64_t before = atomic_fetch_sub_explicit(&inflight, n, memory_order_relaxed);
  if (before < n)
    HARK_ERROR("in-flight bytes given back twice (%llu of %llu)", (unsigned long long)n,
               (unsigned long long)before);
}

void hark_limit_hit(hark_limit limit, const char *fmt, ...) {
  if ((unsigned)limit >= HARK_LIMIT_COUNT) return;
  limit_state *l = &limits[limit];
  atomic_fetch_add_explicit(&l->hits, 1, memory_order_relaxed);
  uint64_t now = hark_now_ns(), last = atomic_load(&l->logged_ns);
  if (last && now - last < LOG_EVERY_NS) {
    atomic_fetch_add_explicit(&l->unlogged, 1, memory_order_relaxed);
    return;
  }
  if (!atomic_compare_exchange_strong(&l->logged_ns, &last, now)) {
    atomic_fetch_add_explicit(&l->unlogged, 1, memory_order_relaxed);
    return; /* another thread logs this second's line */
  }
  hark_log_level level = l->info ? HARK_LOG_INFO : HARK_LOG_WARN;
  if (!hark_log_enabled(level)) return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  uint64_t missed = atomic_exchange(&l->unlogged, 0);
  if (missed)
    hark_log(level, "%s (%llu more like it in the last second, not logged)", line,
             (unsigned long long)missed);
  else
    hark_log(level, "%s", line);
}

void hark_limit_render(hark_buf *b) {
  hark_buf_puts(b,
                "# HELP hark_limit_hits_total Clients cut off or refused by a transport limit "
                "(timeouts, gRPC keepalive policing, per-connection caps)\n"
                "# TYPE hark_limit_hits_total counter\n");
  for (unsigned i = 0; i < HARK_LIMIT_COUNT; i++) {
    hark_buf_puts(b, "hark_limit_hits_total{limit=\"");
    hark_buf_puts(b, limits[i].name);
    hark_buf_puts(b, "\"} ");
    hark_buf_put_u64(b, atomic_load_explicit(&limits[i].hits, memory_order_relaxed));
    hark_buf_puts(b, "\n");
  }
  hark_buf_puts(b,
                "# HELP hark_inflight_bytes Bytes clients make the server hold now (request "
                "bodies and gRPC messages being received or in the engine, replies being "
                "written), bounded by "
                "--max-inflight-bytes\n"
                "# TYPE hark_inflight_bytes gauge\n"
                "hark_inflight_bytes ");
  hark_buf_put_u64(b, hark_inflight_bytes());
  hark_buf_puts(b,
                "\n# HELP hark_inflight_bytes_max The bound on hark_inflight_bytes "
                "(--max-inflight-bytes; 0: none)\n"
                "# TYPE hark_inflight_bytes_max gauge\n"
                "hark_inflight_bytes_max ");
  hark_buf_put_u64(b, hark_inflight_max());
  hark_buf_puts(b, "\n");
}

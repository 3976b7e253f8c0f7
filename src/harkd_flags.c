/*
 * harkd_flags.c — harkd's flags, one row each: name, value, where it is
 * stored, its bounds and its --help lines (with the default). Rows that
 * need more than a store name a set function below the table. What the
 * flags imply together (TLS needs its files; a connection's stream cap
 * follows --max-streams) is settled once all are read, in
 * harkd_options_parse.
 */
#include "harkd_flags.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "frontend/http/http.h"
#include "frontend/security/restrict.h"
#include "util/log.h"

#define PROG "harkd"

/* --max-inflight-bytes by default: 1 GiB, or half the container's memory
 * limit (cgroup v2 memory.max) when that is less, so that what clients
 * make harkd hold leaves room for the models and the decoders. */
#define DEFAULT_INFLIGHT_BYTES (1ull << 30)
static uint64_t default_inflight_bytes(void) {
  uint64_t def = DEFAULT_INFLIGHT_BYTES;
  FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
  if (!f) return def;
  unsigned long long limit;
  if (fscanf(f, "%llu", &limit) == 1 && limit / 2 < def) def = limit / 2; /* "max": none */
  fclose(f);
  return def;
}

void harkd_options_init(harkd_options *o) {
  *o = (harkd_options){
      .server = {.strict_readiness = true, .inline_max_us = 50, .short_batch_us = 1000},
      .fe =
          {
              .http = {.http_port = 8000,
                       .metrics_port = 8002,
                       .max_input_size = 64u << 20,
                       .body_timeout_secs = 30,
                       .header_timeout_secs = 10,
                       .body_deadline_secs = 60,
                       .send_timeout_secs = 60,
                       .ws_max_message = 1u << 20,
                       .ws_idle_timeout_secs = 60},
              /* Triton's keepalive defaults (gRPC core's server defaults). */
              .grpc = {.max_message_bytes = 64u << 20,
                       .max_concurrent_streams = 1024,
                       .stream_idle_timeout_ms = 60000,
                       .message_timeout_ms = 30000,
                       .keepalive_time_ms = 7200000,
                       .keepalive_timeout_ms = 20000,
                       .max_pings_without_data = 2,
                       .min_recv_ping_interval_ms = 300000,
                       .max_ping_strikes = 2,
                       .max_connection_idle_ms = 300000,
                       .max_connection_age_grace_ms = 30000},
              .grpc_port = 8001,
              .speech = {.speech_model = "asr", .max_streams = 1024},
              .shm_max_regions = 1024,
          },
      .inflight_max = default_inflight_bytes(),
      .memory_release_secs = 30,
      .http_restrict = hark_restrict_new(),
      .grpc_restrict = hark_restrict_new(),
  };
  o->fe.http.restricted = o->http_restrict;
  o->fe.grpc.restricted = o->grpc_restrict;
}

void harkd_options_free(harkd_options *o) {
  hark_restrict_free(o->http_restrict);
  hark_restrict_free(o->grpc_restrict);
  o->http_restrict = o->grpc_restrict = NULL;
}

/* ---- the set functions of the rows that need more than a store ------------------- */

static bool set_control_mode(void *opts, const hark_flag *f, const char *val, FILE *err) {
  static const char *const modes[] = {[HARK_MODEL_CONTROL_NONE] = "none",
                                      [HARK_MODEL_CONTROL_EXPLICIT] = "explicit",
                                      [HARK_MODEL_CONTROL_POLL] = "poll"};
  for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
    if (modes[i] && !strcmp(val, modes[i])) {
      ((harkd_options *)opts)->server.model_control = (hark_model_control)i;
      return true;
    }
  fprintf(err, PROG ": --%s must be none, explicit or poll, got '%s'\n", f->name, val);
  return false;
}

static bool set_poll_secs(void *opts, const hark_flag *f, const char *val, FILE *err) {
  char *end;
  double v = strtod(val, &end);
  if (!*val || *end || !(v >= 0.1 && v <= 86400)) {
    fprintf(err, PROG ": --%s expects seconds in [0.1, 86400], got '%s'\n", f->name, val);
    return false;
  }
  ((harkd_options *)opts)->server.repository_poll_secs = v;
  return true;
}

static bool set_exit_timeout(void *opts, const hark_flag *f, const char *val, FILE *err) {
  long v;
  if (!hark_flag_int(f, PROG, val, &v, err)) return false;
  ((harkd_options *)opts)->fe.http.exit_timeout_secs = v ? (int)v : -1; /* 0: do not wait */
  return true;
}

static bool set_load_model(void *opts, const hark_flag *f, const char *val, FILE *err) {
  harkd_options *o = opts;
  if (o->server.n_load_models == HARKD_MAX_LOAD_MODELS) {
    fprintf(err, PROG ": at most %d --%s flags\n", HARKD_MAX_LOAD_MODELS, f->name);
    return false;
  }
  o->loads[o->server.n_load_models++] = val;
  return true;
}

static bool set_streams_per_conn(void *opts, const hark_flag *f, const char *val, FILE *err) {
  harkd_options *o = opts;
  long v;
  if (!hark_flag_int(f, PROG, val, &v, err)) return false;
  o->fe.grpc.max_streams_per_connection = (uint32_t)v;
  o->streams_per_conn_set = true;
  return true;
}

static bool set_restrict(void *opts, const hark_flag *f, const char *val, FILE *err) {
  harkd_options *o = opts;
  bool http = !strcmp(f->name, "http-restricted-api");
  hark_error *e =
      hark_restrict_add(http ? o->http_restrict : o->grpc_restrict,
                        http ? "--http-restricted-api" : "--grpc-restricted-protocol", val);
  if (!e) return true;
  fprintf(err, PROG ": %s\n", hark_error_message(e));
  hark_error_free(e);
  return false;
}

/* The log flags take effect as they are read, as they always have. */
static bool set_log_verbose(void *opts, const hark_flag *f, const char *val, FILE *err) {
  (void)opts;
  long v;
  if (!hark_flag_int(f, PROG, val, &v, err)) return false;
  hark_log_set_verbose((int)v);
  return true;
}

static bool set_log_level(void *opts, const hark_flag *f, const char *val, FILE *err) {
  (void)opts, (void)err;
  hark_log_level level = !strcmp(f->name, "log-info")      ? HARK_LOG_INFO
                         : !strcmp(f->name, "log-warning") ? HARK_LOG_WARN
                                                           : HARK_LOG_ERROR;
  bool on = !strcasecmp(val, "true") || !strcmp(val, "1") || !strcasecmp(val, "on");
  hark_log_set_enabled(level, on);
  return true;
}

static bool set_log_format(void *opts, const hark_flag *f, const char *val, FILE *err) {
  (void)opts;
  hark_log_format fmt;
  if (!hark_log_parse_format(val, &fmt)) {
    fprintf(err, PROG ": --%s must be default, ISO8601 or json, got '%s'\n", f->name, val);
    return false;
  }
  hark_log_set_format(fmt);
  return true;
}

/* ---- the table: one row per flag, in --help's order ------------------------------ */

#define O harkd_options
#define F_STR(n, a, m, h) \
  { .name = n, .arg = a, .kind = HARK_FLAG_STR, HARK_FLAG_MEMBER(O, m), .help = h }
#define F_BOOL(n, m, h) \
  { .name = n, .arg = "BOOL", .kind = HARK_FLAG_BOOL, HARK_FLAG_MEMBER(O, m), .help = h }
#define F_TLS_BOOL(n, m, h) \
  { .name = n, .arg = "BOOL", .kind = HARK_FLAG_STRICT_BOOL, HARK_FLAG_MEMBER(O, m), .help = h }
#define F_INT(n, a, m, lo, hi, h)                                                             \
  {                                                                                           \
    .name = n, .arg = a, .kind = HARK_FLAG_INT, HARK_FLAG_MEMBER(O, m), .min = lo, .max = hi, \
    .help = h                                                                                 \
  }
/* Given in seconds, stored in milliseconds. */
#define F_SECS_MS(n, m, lo, hi, h)                                                              \
  {                                                                                             \
    .name = n, .arg = "N", .kind = HARK_FLAG_INT, HARK_FLAG_MEMBER(O, m), .min = lo, .max = hi, \
    .scale = 1000, .help = h                                                                    \
  }
#define F_FN(n, a, fn, lo, hi, h) \
  { .name = n, .arg = a, .kind = HARK_FLAG_FN, .set = fn, .min = lo, .max = hi, .help = h }

const hark_flag harkd_flags[] = {
    {.name = "model-repository",
     .alias = "model-store", /* Triton's older name */
     .arg = "DIR",
     .kind = HARK_FLAG_STR,
     HARK_FLAG_MEMBER(O, server.model_repository),
     .help = "the model repository (required)"},
    F_INT("http-port", "N", fe.http.http_port, -1, 65535,
          "KServe v2 HTTP + WebSocket (default 8000; -1 off)"),
    F_INT("grpc-port", "N", fe.grpc_port, -1, 65535,
          "gRPC: KServe v2 + health (default 8001; -1 off)"),
    F_STR("grpc-address", "ADDR", fe.grpc_address, "gRPC bind address (default: --http-address's)"),
    F_INT("grpc-max-message-bytes", "N", fe.grpc.max_message_bytes, 1024, 0x7fffffffL,
          "largest gRPC message (default 67108864)"),
    F_INT("grpc-max-concurrent-streams", "N", fe.grpc.max_concurrent_streams, 1, 1 << 20,
          "calls one gRPC connection may have open\n"
          "(HTTP/2 SETTINGS; more are refused) (1024)"),
    F_FN("grpc-max-streams-per-connection", "N", set_streams_per_conn, 0, 1 << 20,
         "bidirectional streams (speech) one gRPC\n"
         "connection may have open (default: half of\n"
         "--max-streams, 512; 0: no cap)"),
    F_SECS_MS("grpc-stream-idle-timeout-secs", fe.grpc.stream_idle_timeout_ms, 0, 86400,
              "end a gRPC stream that sends nothing this\n"
              "long, DEADLINE_EXCEEDED (60; 0: never)"),
    F_SECS_MS("grpc-message-timeout-secs", fe.grpc.message_timeout_ms, 0, 86400,
              "end a gRPC call whose request message gets no\n"
              "byte this long, DEADLINE_EXCEEDED (30; 0: never)"),
    F_INT("grpc-max-declared-bytes-per-connection", "N", fe.grpc.max_declared_bytes_per_connection,
          0, LONG_MAX,
          "bytes of gRPC messages one connection may have\n"
          "declared and not yet sent; more are refused,\n"
          "RESOURCE_EXHAUSTED (default: 4 x\n"
          "--grpc-max-message-bytes; 0: that default)"),
    F_INT("grpc-keepalive-time", "MS", fe.grpc.keepalive_time_ms, 0, INT_MAX,
          "ping a gRPC client silent this long (7200000)"),
    F_INT("grpc-keepalive-timeout", "MS", fe.grpc.keepalive_timeout_ms, 1, INT_MAX,
          "close it if the ping is unanswered this long (20000)"),
    F_BOOL("grpc-keepalive-permit-without-calls", fe.grpc.keepalive_permit_without_calls,
           "keepalive pings both ways on a\n"
           "connection without calls (false)"),
    F_INT("grpc-http2-max-pings-without-data", "N", fe.grpc.max_pings_without_data, 0, INT_MAX,
          "our pings between data (2; 0: any)"),
    F_INT("grpc-http2-min-recv-ping-interval-without-data", "MS", fe.grpc.min_recv_ping_interval_ms,
          0, INT_MAX,
          "a client ping sooner is\n"
          "a strike (300000)"),
    F_INT("grpc-http2-max-ping-strikes", "N", fe.grpc.max_ping_strikes, 0, INT_MAX,
          "strikes before GOAWAY ENHANCE_YOUR_CALM\n"
          "(2; 0: any)"),
    F_INT("grpc-max-connection-idle", "MS", fe.grpc.max_connection_idle_ms, 0, INT_MAX,
          "GOAWAY and close a connection without calls\n"
          "this long (300000; 0: never)"),
    F_INT("grpc-max-connection-age", "MS", fe.grpc.max_connection_age_ms, 0, INT_MAX,
          "GOAWAY a connection this old (0: never)"),
    F_INT("grpc-max-connection-age-grace", "MS", fe.grpc.max_connection_age_grace_ms, 0, INT_MAX,
          "then close it this much later (30000;\n"
          "0: when its calls end)"),
    F_INT("metrics-port", "N", fe.http.metrics_port, -1, 65535,
          "Prometheus /metrics (default 8002; -1 off)"),
    F_FN("http-restricted-api", "CATEGORIES:HEADER=VALUE", set_restrict, 0, 0,
         "\nHTTP endpoints of these categories (health,\n"
         "metadata, inference, shared-memory, model-config,\n"
         "model-repository, statistics, trace, logging;\n"
         "comma-separated) answer 403 without the header\n"
         "(repeatable; default: none; docs/security.md)"),
    F_FN("grpc-restricted-protocol", "CATEGORIES:HEADER=VALUE", set_restrict, 0, 0,
         "\nthe same for gRPC methods (PERMISSION_DENIED;\n"
         "repeatable; default: none)"),
    F_TLS_BOOL("http-use-ssl", http_ssl, "HTTPS and wss:// on the HTTP port (default false)"),
    F_STR("http-server-cert", "FILE", http_cert, "its certificate (chain), PEM (default: none)"),
    F_STR("http-server-key", "FILE", http_key, "its private key, PEM (default: none)"),
    F_TLS_BOOL("grpc-use-ssl", fe.grpc_use_ssl, "TLS on the gRPC port (default false)"),
    F_TLS_BOOL("grpc-use-ssl-mutual", fe.grpc_tls.mutual,
               "TLS, and clients must show a certificate signed\n"
               "by --grpc-root-cert (default false)"),
    F_STR("grpc-server-cert", "FILE", fe.grpc_tls.cert,
          "the gRPC port's certificate (chain), PEM\n"
          "(default: none)"),
    F_STR("grpc-server-key", "FILE", fe.grpc_tls.key, "its private key, PEM (default: none)"),
    F_STR("grpc-root-cert", "FILE", fe.grpc_tls.root,
          "CA certificates client certificates must chain to\n"
          "(default: none)"),
    F_STR("metrics-address", "ADDR", fe.http.metrics_address,
          "metrics bind address (default: --http-address's)"),
    F_STR("http-address", "ADDR", fe.http.address, "bind address (default all interfaces)"),
    F_FN("model-control-mode", "MODE", set_control_mode, 0, 0,
         "none (load all at start) | explicit | poll\n"
         "(default none)"),
    F_FN("load-model", "NAME", set_load_model, 0, 0,
         "with explicit: load NAME at start (repeatable; * = all)\n"
         "(default: none)"),
    F_FN("repository-poll-secs", "N", set_poll_secs, 0, 0,
         "with poll: rescan the repository every N s (15)"),
    F_INT("model-unload-timeout-secs", "N", server.unload_timeout_secs, 1, 86400,
          "a reloaded or unloaded version serves the\n"
          "streams that began on it this long (30)"),
    F_FN("exit-timeout-secs", "N", set_exit_timeout, 0, 86400,
         "on SIGTERM, live streams and requests get this\n"
         "long to finish (default 30)"),
    F_BOOL("strict-readiness", server.strict_readiness,
           "ready only when every model loaded (default true)"),
    F_BOOL("allow-shared-memory", fe.shared_memory,
           "serve Triton's system shared memory extension\n"
           "(default false: a client that reaches the ports\n"
           "could read and write any shm object harkd's user\n"
           "can open; turn on for trusted local clients)"),
    F_INT("shared-memory-max-regions", "N", fe.shm_max_regions, 1, 1048576,
          "system shared memory regions registered at once\n"
          "(each holds a descriptor and a mapping); more\n"
          "are refused, RESOURCE_EXHAUSTED (1024)"),
    F_STR("backend-directory", "DIR", server.backend_directory,
          "where libhark_<backend>.so live\n"
          "(default " HARK_DEFAULT_BACKEND_DIR ")"),
    F_INT("http-max-input-size", "BYTES", fe.http.max_input_size, 1024, 1L << 32,
          "largest request body (default 67108864)"),
    F_INT("http-body-timeout-secs", "N", fe.http.body_timeout_secs, 1, 3600,
          "drop a client that stalls mid-body this long (30)"),
    F_INT("http-header-timeout-secs", "N", fe.http.header_timeout_secs, 1, 3600,
          "a request head must be whole within N s (10;\n"
          "408 and close)"),
    F_INT("http-body-deadline-secs", "N", fe.http.body_deadline_secs, 1, 86400,
          "a request body must be whole within N s of its\n"
          "head (60; 408 and close)"),
    F_INT("send-timeout-secs", "N", fe.http.send_timeout_secs, 1, 86400,
          "drop a client that reads nothing of what is sent\n"
          "to it for N s: HTTP, WebSocket, gRPC (60)"),
    F_INT("http-thread-count", "N", fe.http.threads, 1, HARK_HTTP_MAX_THREADS,
          "event loops serving the HTTP and gRPC ports\n"
          "(default: one per core, at most 16)"),
    F_INT("worker-threads", "N", server.worker_threads, 1, 1024,
          "CPU worker pool size (default: one per core)"),
    F_INT("inline-max-us", "N", server.inline_max_us, 0, 1000000,
          "an event loop runs a model's batch itself,\n"
          "without a hand-off to a worker and back, when\n"
          "the model's executions average <= N us (default\n"
          "50; 0: every batch on the worker pool)"),
    F_INT("short-batch-us", "N", server.short_batch_us, 0, 10000000,
          "on the worker pool, batches of models whose\n"
          "executions average <= N us run before longer\n"
          "ones (default 1000; 0: arrival order)"),
    F_INT("max-queue-size", "N", server.max_queue_size, 1, 1 << 24,
          "per-model queue cap when config sets none (4096)"),
    F_INT("max-recording-bytes", "N", server.max_recording_bytes, 1024, LONG_MAX,
          "largest whole recording: a request to a streaming\n"
          "model with no sequence id, or that starts and ends\n"
          "its sequence (Riva Recognize, a one-shot KServe\n"
          "infer); more is refused 400 / INVALID_ARGUMENT\n"
          "(default 33554432, ~17 min of 16 kHz PCM)"),
    F_INT("max-correlation-id-bytes", "N", server.max_correlation_id_bytes, 1, 1 << 20,
          "longest string sequence id (KServe sequence_id);\n"
          "longer is refused 400 / INVALID_ARGUMENT (256)"),
    F_STR("speech-model", "NAME", fe.speech.speech_model,
          "the model a WebSocket on / and a Riva stream naming\n"
          "no model stream to (default asr)"),
    F_INT("max-streams", "N", fe.speech.max_streams, 1, 1 << 20,
          "concurrent speech streams per protocol (WebSocket,\n"
          "gRPC); more get 503 / RESOURCE_EXHAUSTED (1024)"),
    F_INT("stream-backlog-limit", "N", fe.speech.backlog_limit, 1, 1 << 20,
          "refuse new streams (503) while the model has more\n"
          "than N requests waiting (default 4 per instance)"),
    F_INT("speech-sample-rate", "HZ", fe.speech.sample_rate, 8000, 48000,
          "the rate of a speech stream that names none (a\n"
          "Vosk stream without a config message, Riva PCM\n"
          "without sample_rate_hertz): 8000..48000; default:\n"
          "8000 on a Vosk path (as Vosk's server), else the\n"
          "model's default_sample_rate (asr: 16000)"),
    F_INT("memory-release-secs", "N", memory_release_secs, 0, 86400,
          "return freed memory to the kernel every N s, all\n"
          "at once (30; 0: never, it stays for reuse); with\n"
          "jemalloc, as release builds link it"),
    F_INT("max-inflight-bytes", "N", inflight_max, 0, LONG_MAX,
          "bytes all clients together may make harkd hold\n"
          "(request bodies, gRPC messages) before new ones\n"
          "are refused: 503 / RESOURCE_EXHAUSTED (default\n"
          "1 GiB, or half the cgroup's memory.max if that\n"
          "is less; 0: no bound)"),
    F_INT("ws-max-message-bytes", "N", fe.http.ws_max_message, 1024, 1L << 30,
          "largest WebSocket message (default 1048576)"),
    F_INT("ws-idle-timeout-secs", "N", fe.http.ws_idle_timeout_secs, 1, 86400,
          "close a stream that sends nothing this long (60)"),
    F_FN("log-verbose", "N", set_log_verbose, 0, 9, "1 = verbose logging (default 0)"),
    F_FN("log-info", "BOOL", set_log_level, 0, 0, "info lines (default true)"),
    F_FN("log-warning", "BOOL", set_log_level, 0, 0, "warning lines (default true)"),
    F_FN("log-error", "BOOL", set_log_level, 0, 0, "error lines (default true)"),
    F_FN("log-format", "FORMAT", set_log_format, 0, 0,
         "default | ISO8601 | json (one object per line)\n"
         "(default default)"),
};
const size_t harkd_n_flags = sizeof harkd_flags / sizeof harkd_flags[0];

void harkd_usage(FILE *f) {
  hark_flags_usage(harkd_flags, harkd_n_flags, "usage: harkd --model-repository DIR [options]\n",
                   f);
}

/* ---- what the flags imply together -------------------------------------------------- */

/* The TLS flags as Triton reads them: -mutual implies TLS; a port with
 * TLS needs its certificate and key. False (said why) when they do not
 * add up. */
static bool tls_flags(harkd_options *o, FILE *err) {
  hark_frontend_options *fo = &o->fe;
  if (o->http_ssl) {
    if (!o->http_cert || !o->http_key) {
      fprintf(err, PROG ": --http-use-ssl needs --http-server-cert and --http-server-key\n");
      return false;
    }
    fo->http.tls_cert = o->http_cert;
    fo->http.tls_key = o->http_key;
  } else if (o->http_cert || o->http_key) {
    HARK_WARN("--http-server-cert/--http-server-key have no effect without --http-use-ssl true");
  }
  hark_tls_options *t = &fo->grpc_tls;
  if (t->mutual) fo->grpc_use_ssl = true;
  t->cert_flag = "--grpc-server-cert";
  t->key_flag = "--grpc-server-key";
  t->root_flag = "--grpc-root-cert";
  if (fo->grpc_use_ssl && (!t->cert || !t->key)) {
    fprintf(err, PROG ": --grpc-use-ssl needs --grpc-server-cert and --grpc-server-key\n");
    return false;
  }
  if (t->mutual && !t->root) {
    fprintf(err, PROG
            ": --grpc-use-ssl-mutual needs --grpc-root-cert (the CA that signs "
            "client certificates)\n");
    return false;
  }
  if (!fo->grpc_use_ssl && (t->cert || t->key || t->root))
    HARK_WARN(
        "--grpc-server-cert/--grpc-server-key/--grpc-root-cert have no effect without "
        "--grpc-use-ssl true");
  return true;
}

int harkd_options_parse(harkd_options *o, int argc, char **argv, FILE *err) {
  int first_arg;
  int rc = hark_flags_parse(harkd_flags, harkd_n_flags, o, PROG, argc, argv, &first_arg, err);
  if (rc == HARK_FLAGS_HELP || rc == HARK_FLAGS_BAD) return rc;
  if (rc == HARK_FLAGS_USAGE || first_arg < argc || !o->server.model_repository) {
    harkd_usage(err);
    return HARK_FLAGS_BAD;
  }
  /* Riva's clients put every stream on one channel: by default one
   * connection may hold half the speech streams, never all of them. */
  uint32_t streams = o->fe.speech.max_streams;
  if (!o->streams_per_conn_set)
    o->fe.grpc.max_streams_per_connection = streams > 1 ? streams / 2 : 1;
  if (!tls_flags(o, err)) return HARK_FLAGS_BAD;
  o->server.load_models = o->loads;
  if (o->server.repository_poll_secs > 0 && o->server.model_control != HARK_MODEL_CONTROL_POLL)
    HARK_WARN("--repository-poll-secs has no effect without --model-control-mode poll");
  return HARK_FLAGS_OK;
}

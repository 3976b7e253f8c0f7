/*
 * harkd — the hark server. Parses Triton-style flags, builds the engine on
 * the model repository, starts the gRPC front end (its own thread) and runs
 * the HTTP front end's event loops (--http-thread-count, one of them on the
 * main thread) until SIGINT/SIGTERM.
 * The first signal drains: readiness turns false, new requests and streams
 * get 503, live ones get --exit-timeout-secs to finish, then the rest are
 * closed and the process exits 0. A second signal stops waiting.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "frontend/frontends.h"
#include "hark/server.h"
#include "util/log.h"

static hark_frontends *g_frontends;
static volatile sig_atomic_t g_signals;

/* The shutdown watchdog: the drain bounds live work by --exit-timeout-secs,
 * but a request a backend is still executing, or a loop busy with one
 * client's input, could hold the exit past it. Each signal posts the
 * semaphore (async-signal-safe); past the exit timeout plus a grace after
 * the first, or the grace after the second, the process ends at once. */
#define WATCHDOG_GRACE_SECS 5
static sem_t g_watchdog;
static int g_exit_secs;

static void deadline_in(struct timespec *ts, int secs) {
  clock_gettime(CLOCK_REALTIME, ts);
  ts->tv_sec += secs;
}

static void *watchdog_main(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "hark-watchdog");
  while (sem_wait(&g_watchdog) != 0) { /* the first signal */
  }
  struct timespec ts;
  int secs = g_exit_secs + WATCHDOG_GRACE_SECS;
  deadline_in(&ts, secs);
  int rc;
  while ((rc = sem_timedwait(&g_watchdog, &ts)) != 0 && errno == EINTR) {
  }
  if (rc == 0) { /* a second signal: stop waiting, bar the grace */
    secs = WATCHDOG_GRACE_SECS;
    deadline_in(&ts, secs);
    while (sem_timedwait(&g_watchdog, &ts) != 0 && errno == EINTR) {
    }
  }
  HARK_ERROR(
      "shutdown did not finish within %d s of the signal (work still running in a backend "
      "or a front end): exiting now",
      secs);
  _exit(1);
  return NULL;
}

static void on_signal(int sig) {
  (void)sig;
  if (!g_frontends) return;
  sem_post(&g_watchdog);
  if (g_signals++ == 0)
    hark_frontends_drain(g_frontends); /* readiness off; new work refused; live work finishes */
  else
    hark_frontends_stop(g_frontends); /* a second signal: stop waiting */
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: harkd --model-repository DIR [options]\n"
          "  --model-repository DIR      the model repository (required)\n"
          "  --http-port N               KServe v2 HTTP + WebSocket (default 8000; -1 off)\n"
          "  --grpc-port N               gRPC: KServe v2 + health (default 8001; -1 off)\n"
          "  --grpc-address ADDR         gRPC bind address (default: --http-address's)\n"
          "  --grpc-max-message-bytes N  largest gRPC message (default 67108864)\n"
          "  --grpc-max-concurrent-streams N  calls one gRPC connection may have open\n"
          "                              (HTTP/2 SETTINGS; more are refused) (1024)\n"
          "  --grpc-max-streams-per-connection N  bidirectional streams (speech) one gRPC\n"
          "                              connection may have open (default: half of\n"
          "                              --max-streams, 512; 0: no cap)\n"
          "  --grpc-stream-idle-timeout-secs N  end a gRPC stream that sends nothing this\n"
          "                              long, DEADLINE_EXCEEDED (60; 0: never)\n"
          "  --grpc-message-timeout-secs N  end a gRPC call whose request message gets no\n"
          "                              byte this long, DEADLINE_EXCEEDED (30; 0: never)\n"
          "  --grpc-max-declared-bytes-per-connection N  bytes of gRPC messages one\n"
          "                              connection may have declared and not yet sent;\n"
          "                              more are refused, RESOURCE_EXHAUSTED (default:\n"
          "                              4 x --grpc-max-message-bytes; 0: that default)\n"
          "  --grpc-keepalive-time MS    ping a gRPC client silent this long (7200000)\n"
          "  --grpc-keepalive-timeout MS close it if the ping is unanswered this long (20000)\n"
          "  --grpc-keepalive-permit-without-calls BOOL  keepalive pings both ways on a\n"
          "                              connection without calls (false)\n"
          "  --grpc-http2-max-pings-without-data N  our pings between data (2; 0: any)\n"
          "  --grpc-http2-min-recv-ping-interval-without-data MS  a client ping sooner is\n"
          "                              a strike (300000)\n"
          "  --grpc-http2-max-ping-strikes N  strikes before GOAWAY ENHANCE_YOUR_CALM\n"
          "                              (2; 0: any)\n"
          "  --grpc-max-connection-idle MS  GOAWAY and close a connection without calls\n"
          "                              this long (300000; 0: never)\n"
          "  --grpc-max-connection-age MS  GOAWAY a connection this old (0: never)\n"
          "  --grpc-max-connection-age-grace MS  then close it this much later (30000;\n"
          "                              0: when its calls end)\n"

          "  --metrics-port N            Prometheus /metrics (default 8002; -1 off)\n"
          "  --http-restricted-api CATEGORIES:HEADER=VALUE\n"
          "                              HTTP endpoints of these categories (health,\n"
          "                              metadata, inference, shared-memory, model-config,\n"
          "                              model-repository, statistics, trace, logging;\n"
          "                              comma-separated) answer 403 without the header\n"
          "                              (repeatable; docs/security.md)\n"
          "  --grpc-restricted-protocol CATEGORIES:HEADER=VALUE\n"
          "                              the same for gRPC methods (PERMISSION_DENIED)\n"
          "  --http-use-ssl BOOL         HTTPS and wss:// on the HTTP port (default false)\n"
          "  --http-server-cert FILE     its certificate (chain), PEM\n"
          "  --http-server-key FILE      its private key, PEM\n"
          "  --grpc-use-ssl BOOL         TLS on the gRPC port (default false)\n"
          "  --grpc-use-ssl-mutual BOOL  TLS, and clients must show a certificate signed\n"
          "                              by --grpc-root-cert (default false)\n"
          "  --grpc-server-cert FILE     the gRPC port's certificate (chain), PEM\n"
          "  --grpc-server-key FILE      its private key, PEM\n"
          "  --grpc-root-cert FILE       CA certificates client certificates must chain to\n"
          "  --metrics-address ADDR      metrics bind address (default: --http-address's)\n"
          "  --http-address ADDR         bind address (default all interfaces)\n"
          "  --model-control-mode MODE   none (load all at start) | explicit | poll\n"
          "  --load-model NAME           with explicit: load NAME at start (repeatable; * = all)\n"
          "  --repository-poll-secs N    with poll: rescan the repository every N s (15)\n"
          "  --model-unload-timeout-secs N  a reloaded or unloaded version serves the\n"
          "                              streams that began on it this long (30)\n"
          "  --exit-timeout-secs N       on SIGTERM, live streams and requests get this\n"
          "                              long to finish (default 30)\n"
          "  --strict-readiness BOOL     ready only when every model loaded (default true)\n"
          "  --allow-shared-memory BOOL  serve Triton's system shared memory extension\n"
          "                              (default false: a client that reaches the ports\n"
          "                              could read and write any shm object harkd's user\n"
          "                              can open; turn on for trusted local clients)\n"
          "  --backend-directory DIR     where libhark_<backend>.so live\n"
          "  --http-max-input-size BYTES largest request body (default 67108864)\n"
          "  --http-body-timeout-secs N  drop a client that stalls mid-body this long (30)\n"
          "  --http-header-timeout-secs N  a request head must be whole within N s (10;\n"
          "                              408 and close)\n"
          "  --http-body-deadline-secs N  a request body must be whole within N s of its\n"
          "                              head (60; 408 and close)\n"
          "  --send-timeout-secs N       drop a client that reads nothing of what is sent\n"
          "                              to it for N s: HTTP, WebSocket, gRPC (60)\n"
          "  --http-thread-count N       event loops serving the HTTP and gRPC ports\n"
          "                              (default: one per core, at most 16)\n"
          "  --worker-threads N          CPU worker pool size (default: one per core)\n"
          "  --inline-max-us N           an event loop runs a model's batch itself,\n"
          "                              without a hand-off to a worker and back, when\n"
          "                              the model's executions average <= N us (default\n"
          "                              50; 0: every batch on the worker pool)\n"
          "  --short-batch-us N          on the worker pool, batches of models whose\n"
          "                              executions average <= N us run before longer\n"
          "                              ones (default 1000; 0: arrival order)\n"
          "  --max-queue-size N          per-model queue cap when config sets none (4096)\n"
          "  --speech-model NAME         the model a WebSocket on / and a Riva stream naming\n"
          "                              no model stream to (default asr)\n"
          "  --max-streams N             concurrent speech streams per protocol (WebSocket,\n"
          "                              gRPC); more get 503 / RESOURCE_EXHAUSTED (1024)\n"
          "  --stream-backlog-limit N    refuse new streams (503) while the model has more\n"
          "                              than N requests waiting (default 4 per instance)\n"
          "  --speech-sample-rate HZ     the rate of a speech stream that names none (a\n"
          "                              Vosk stream without a config message, Riva PCM\n"
          "                              without sample_rate_hertz): 8000..48000; default:\n"
          "                              the model's default_sample_rate (asr: 16000)\n"
          "  --max-inflight-bytes N      bytes all clients together may make harkd hold\n"
          "                              (request bodies, gRPC messages) before new ones\n"
          "                              are refused: 503 / RESOURCE_EXHAUSTED (default\n"
          "                              1 GiB, or half the cgroup's memory.max if that\n"
          "                              is less; 0: no bound)\n"
          "  --ws-max-message-bytes N    largest WebSocket message (default 1048576)\n"
          "  --ws-idle-timeout-secs N    close a stream that sends nothing this long (60)\n"
          "  --log-verbose N             1 = verbose logging\n"
          "  --log-info BOOL             info lines (default true)\n"
          "  --log-warning BOOL          warning lines (default true)\n"
          "  --log-error BOOL            error lines (default true)\n"
          "  --log-format FORMAT         default | ISO8601 | json (one object per line)\n");
}

static bool parse_bool(const char *s) {
  return strcasecmp(s, "true") == 0 || strcmp(s, "1") == 0 || strcasecmp(s, "on") == 0;
}

/* A boolean flag of the TLS family: a typo must not leave a port plain. */
static bool parse_strict_bool(const char *flag, const char *s) {
  if (!strcmp(s, "true") || !strcmp(s, "1") || !strcmp(s, "on")) return true;
  if (!strcmp(s, "false") || !strcmp(s, "0") || !strcmp(s, "off")) return false;
  fprintf(stderr, "harkd: %s expects true or false, got '%s'\n", flag, s);
  exit(2);
}

static long parse_num(const char *flag, const char *s, long lo, long hi) {
  char *end;
  long v = strtol(s, &end, 10);
  if (!*s || *end || v < lo || v > hi) {
    fprintf(stderr, "harkd: %s expects a number in [%ld, %ld], got '%s'\n", flag, lo, hi, s);
    exit(2);
  }
  return v;
}

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

/* The TLS flags as Triton reads them: -mutual implies TLS; a port with
 * TLS needs its certificate and key. False (said why) when they do not
 * add up. */
static bool tls_flags(hark_frontend_options *fo, bool http_ssl, const char *http_cert,
                      const char *http_key) {
  if (http_ssl) {
    if (!http_cert || !http_key) {
      fprintf(stderr, "harkd: --http-use-ssl needs --http-server-cert and --http-server-key\n");
      return false;
    }
    fo->http.tls_cert = http_cert;
    fo->http.tls_key = http_key;
  } else if (http_cert || http_key) {
    HARK_WARN("--http-server-cert/--http-server-key have no effect without --http-use-ssl true");
  }
  hark_tls_options *t = &fo->grpc_tls;
  if (t->mutual) fo->grpc_use_ssl = true;
  t->cert_flag = "--grpc-server-cert";
  t->key_flag = "--grpc-server-key";
  t->root_flag = "--grpc-root-cert";
  if (fo->grpc_use_ssl && (!t->cert || !t->key)) {
    fprintf(stderr, "harkd: --grpc-use-ssl needs --grpc-server-cert and --grpc-server-key\n");
    return false;
  }
  if (t->mutual && !t->root) {
    fprintf(stderr,
            "harkd: --grpc-use-ssl-mutual needs --grpc-root-cert (the CA that signs "
            "client certificates)\n");
    return false;
  }
  if (!fo->grpc_use_ssl && (t->cert || t->key || t->root))
    HARK_WARN(
        "--grpc-server-cert/--grpc-server-key/--grpc-root-cert have no effect without "
        "--grpc-use-ssl true");
  return true;
}

/* Every connection holds a descriptor and every WebSocket two (hark reads
 * its frames through a duplicate: frontend/http/ws.c), so a soft limit
 * left at a distribution's 1,024 would cap WebSocket streams near 500.
 * Raise it towards the hard limit, as Go's runtime does for its servers,
 * up to FD_SOFT_CAP: lws sizes its tables by the soft limit, per loop. */
#define FD_SOFT_CAP 65536
static void raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  rlim_t want = rl.rlim_max < FD_SOFT_CAP ? rl.rlim_max : FD_SOFT_CAP;
  if (rl.rlim_cur >= want) return;
  rlim_t was = rl.rlim_cur;
  rl.rlim_cur = want;
  if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
    HARK_VERBOSE("descriptor limit raised from %llu to %llu", (unsigned long long)was,
                 (unsigned long long)want);
}

int main(int argc, char **argv) {
  enum {
    O_REPO = 1,
    O_HTTP,
    O_GRPC,
    O_METRICS,
    O_ADDR,
    O_MODE,
    O_LOAD,
    O_STRICT,
    O_SHM,
    O_BACKENDS,
    O_MAXIN,
    O_BODYTO,
    O_WORKERS,
    O_QUEUE,
    O_VERBOSE,
    O_SPEECH,
    O_STREAMS,
    O_WSMAX,
    O_WSIDLE,
    O_GRPC_ADDR,
    O_GRPC_MAX,
    O_BACKLOG,
    O_SPEECH_RATE,
    O_INFLIGHT,
    O_HELP,
    O_LOG_INFO,
    O_LOG_WARN,
    O_LOG_ERROR,
    O_LOG_FORMAT,
    O_POLL_SECS,
    O_EXIT_TIMEOUT,
    O_UNLOAD_TIMEOUT,
    O_HTTP_THREADS,
    O_INLINE,
    O_SHORT,
    O_HDRTO,
    O_BODYDL,
    O_SENDTO,
    O_GRPC_MAX_CONC,
    O_GRPC_STREAMS_CONN,
    O_GRPC_STREAM_IDLE,
    O_GRPC_MSG_TIMEOUT,
    O_GRPC_DECLARED,
    O_GRPC_KA_TIME,
    O_GRPC_KA_TIMEOUT,
    O_GRPC_KA_PERMIT,
    O_GRPC_MAX_PINGS,
    O_GRPC_MIN_PING,
    O_GRPC_STRIKES,
    O_GRPC_IDLE,
    O_GRPC_AGE,
    O_GRPC_AGE_GRACE,
    O_HTTP_RESTRICT,
    O_GRPC_RESTRICT,
    O_HTTP_SSL,
    O_HTTP_CERT,
    O_HTTP_KEY,
    O_GRPC_SSL,
    O_GRPC_MUTUAL,
    O_GRPC_CERT,
    O_GRPC_KEY,
    O_GRPC_ROOT,
    O_METRICS_ADDR
  };
  static const struct option opts[] = {
      {"model-repository", required_argument, 0, O_REPO},
      {"model-store", required_argument, 0, O_REPO},
      {"http-port", required_argument, 0, O_HTTP},
      {"grpc-port", required_argument, 0, O_GRPC},
      {"metrics-port", required_argument, 0, O_METRICS},
      {"http-address", required_argument, 0, O_ADDR},
      {"model-control-mode", required_argument, 0, O_MODE},
      {"load-model", required_argument, 0, O_LOAD},
      {"repository-poll-secs", required_argument, 0, O_POLL_SECS},
      {"exit-timeout-secs", required_argument, 0, O_EXIT_TIMEOUT},
      {"model-unload-timeout-secs", required_argument, 0, O_UNLOAD_TIMEOUT},
      {"strict-readiness", required_argument, 0, O_STRICT},
      {"allow-shared-memory", required_argument, 0, O_SHM},
      {"backend-directory", required_argument, 0, O_BACKENDS},
      {"http-max-input-size", required_argument, 0, O_MAXIN},
      {"http-body-timeout-secs", required_argument, 0, O_BODYTO},
      {"http-thread-count", required_argument, 0, O_HTTP_THREADS},
      {"worker-threads", required_argument, 0, O_WORKERS},
      {"inline-max-us", required_argument, 0, O_INLINE},
      {"short-batch-us", required_argument, 0, O_SHORT},
      {"max-queue-size", required_argument, 0, O_QUEUE},
      {"log-verbose", required_argument, 0, O_VERBOSE},
      {"log-info", required_argument, 0, O_LOG_INFO},
      {"log-warning", required_argument, 0, O_LOG_WARN},
      {"log-error", required_argument, 0, O_LOG_ERROR},
      {"log-format", required_argument, 0, O_LOG_FORMAT},
      {"speech-model", required_argument, 0, O_SPEECH},
      {"max-streams", required_argument, 0, O_STREAMS},
      {"max-inflight-bytes", required_argument, 0, O_INFLIGHT},
      {"stream-backlog-limit", required_argument, 0, O_BACKLOG},
      {"speech-sample-rate", required_argument, 0, O_SPEECH_RATE},
      {"ws-max-message-bytes", required_argument, 0, O_WSMAX},
      {"ws-idle-timeout-secs", required_argument, 0, O_WSIDLE},
      {"grpc-address", required_argument, 0, O_GRPC_ADDR},
      {"grpc-max-message-bytes", required_argument, 0, O_GRPC_MAX},
      {"http-header-timeout-secs", required_argument, 0, O_HDRTO},
      {"http-body-deadline-secs", required_argument, 0, O_BODYDL},
      {"send-timeout-secs", required_argument, 0, O_SENDTO},
      {"grpc-max-concurrent-streams", required_argument, 0, O_GRPC_MAX_CONC},
      {"grpc-max-streams-per-connection", required_argument, 0, O_GRPC_STREAMS_CONN},
      {"grpc-stream-idle-timeout-secs", required_argument, 0, O_GRPC_STREAM_IDLE},
      {"grpc-message-timeout-secs", required_argument, 0, O_GRPC_MSG_TIMEOUT},
      {"grpc-max-declared-bytes-per-connection", required_argument, 0, O_GRPC_DECLARED},
      {"grpc-keepalive-time", required_argument, 0, O_GRPC_KA_TIME},
      {"grpc-keepalive-timeout", required_argument, 0, O_GRPC_KA_TIMEOUT},
      {"grpc-keepalive-permit-without-calls", required_argument, 0, O_GRPC_KA_PERMIT},
      {"grpc-http2-max-pings-without-data", required_argument, 0, O_GRPC_MAX_PINGS},
      {"grpc-http2-min-recv-ping-interval-without-data", required_argument, 0, O_GRPC_MIN_PING},
      {"grpc-http2-max-ping-strikes", required_argument, 0, O_GRPC_STRIKES},
      {"grpc-max-connection-idle", required_argument, 0, O_GRPC_IDLE},
      {"grpc-max-connection-age", required_argument, 0, O_GRPC_AGE},
      {"grpc-max-connection-age-grace", required_argument, 0, O_GRPC_AGE_GRACE},
      {"http-restricted-api", required_argument, 0, O_HTTP_RESTRICT},
      {"grpc-restricted-protocol", required_argument, 0, O_GRPC_RESTRICT},
      {"http-use-ssl", required_argument, 0, O_HTTP_SSL},
      {"http-server-cert", required_argument, 0, O_HTTP_CERT},
      {"http-server-key", required_argument, 0, O_HTTP_KEY},
      {"grpc-use-ssl", required_argument, 0, O_GRPC_SSL},
      {"grpc-use-ssl-mutual", required_argument, 0, O_GRPC_MUTUAL},
      {"grpc-server-cert", required_argument, 0, O_GRPC_CERT},
      {"grpc-server-key", required_argument, 0, O_GRPC_KEY},
      {"grpc-root-cert", required_argument, 0, O_GRPC_ROOT},
      {"metrics-address", required_argument, 0, O_METRICS_ADDR},
      {"help", no_argument, 0, O_HELP},
      {0, 0, 0, 0}};
  hark_server_options so = {.strict_readiness = true, .inline_max_us = 50, .short_batch_us = 1000};
  hark_frontend_options fo = {
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
  };
  hark_http_options *ho = &fo.http;
  uint64_t inflight_max = default_inflight_bytes();
  hark_grpc_options *go = &fo.grpc;
  const char *loads[64];
  bool streams_per_conn_set = false;
  bool http_ssl = false;
  const char *http_cert = NULL, *http_key = NULL;
  /* Static: still reachable (not a leak) on the early exits below. */
  static hark_restrict *http_restrict, *grpc_restrict;
  http_restrict = hark_restrict_new();
  grpc_restrict = hark_restrict_new();
  ho->restricted = http_restrict;
  go->restricted = grpc_restrict;
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case O_REPO: so.model_repository = optarg; break;
    case O_HTTP: ho->http_port = (int)parse_num("--http-port", optarg, -1, 65535); break;
    case O_GRPC: fo.grpc_port = (int)parse_num("--grpc-port", optarg, -1, 65535); break;
    case O_GRPC_ADDR: fo.grpc_address = optarg; break;
    case O_GRPC_MAX:
      go->max_message_bytes =
          (size_t)parse_num("--grpc-max-message-bytes", optarg, 1024, 0x7fffffffL);
      break;
    case O_METRICS: ho->metrics_port = (int)parse_num("--metrics-port", optarg, -1, 65535); break;
    case O_ADDR: ho->address = optarg; break;
    case O_MODE:
      if (strcmp(optarg, "none") == 0)
        so.model_control = HARK_MODEL_CONTROL_NONE;
      else if (strcmp(optarg, "explicit") == 0)
        so.model_control = HARK_MODEL_CONTROL_EXPLICIT;
      else if (strcmp(optarg, "poll") == 0)
        so.model_control = HARK_MODEL_CONTROL_POLL;
      else {
        fprintf(stderr, "harkd: --model-control-mode must be none, explicit or poll, got '%s'\n",
                optarg);
        return 2;
      }
      break;
    case O_POLL_SECS: {
      char *end;
      double v = strtod(optarg, &end);
      if (!*optarg || *end || !(v >= 0.1 && v <= 86400)) {
        fprintf(stderr, "harkd: --repository-poll-secs expects seconds in [0.1, 86400], got '%s'\n",
                optarg);
        return 2;
      }
      so.repository_poll_secs = v;
      break;
    }
    case O_EXIT_TIMEOUT:
      ho->exit_timeout_secs = (int)parse_num("--exit-timeout-secs", optarg, 0, 86400);
      if (!ho->exit_timeout_secs) ho->exit_timeout_secs = -1; /* 0: do not wait */
      break;
    case O_UNLOAD_TIMEOUT:
      so.unload_timeout_secs = (uint32_t)parse_num("--model-unload-timeout-secs", optarg, 1, 86400);
      break;
    case O_LOAD:
      if (so.n_load_models == 64) {
        fprintf(stderr, "harkd: at most 64 --load-model flags\n");
        return 2;
      }
      loads[so.n_load_models++] = optarg;
      break;
    case O_STRICT: so.strict_readiness = parse_bool(optarg); break;
    case O_SHM: fo.shared_memory = parse_bool(optarg); break;
    case O_BACKENDS: so.backend_directory = optarg; break;
    case O_MAXIN:
      ho->max_input_size = (size_t)parse_num("--http-max-input-size", optarg, 1024, 1L << 32);
      break;
    case O_BODYTO:
      ho->body_timeout_secs = (int)parse_num("--http-body-timeout-secs", optarg, 1, 3600);
      break;
    case O_HDRTO:
      ho->header_timeout_secs = (int)parse_num("--http-header-timeout-secs", optarg, 1, 3600);
      break;
    case O_BODYDL:
      ho->body_deadline_secs = (int)parse_num("--http-body-deadline-secs", optarg, 1, 86400);
      break;
    case O_SENDTO:
      ho->send_timeout_secs = (int)parse_num("--send-timeout-secs", optarg, 1, 86400);
      break;
    case O_GRPC_MAX_CONC:
      go->max_concurrent_streams =
          (uint32_t)parse_num("--grpc-max-concurrent-streams", optarg, 1, 1 << 20);
      break;
    case O_GRPC_STREAMS_CONN:
      go->max_streams_per_connection =
          (uint32_t)parse_num("--grpc-max-streams-per-connection", optarg, 0, 1 << 20);
      streams_per_conn_set = true;
      break;
    case O_GRPC_STREAM_IDLE:
      go->stream_idle_timeout_ms =
          1000u * (uint64_t)parse_num("--grpc-stream-idle-timeout-secs", optarg, 0, 86400);
      break;
    case O_GRPC_MSG_TIMEOUT:
      go->message_timeout_ms =
          1000u * (uint64_t)parse_num("--grpc-message-timeout-secs", optarg, 0, 86400);
      break;
    case O_GRPC_DECLARED:
      go->max_declared_bytes_per_connection =
          (size_t)parse_num("--grpc-max-declared-bytes-per-connection", optarg, 0, LONG_MAX);
      break;
    case O_GRPC_KA_TIME:
      go->keepalive_time_ms = (uint64_t)parse_num("--grpc-keepalive-time", optarg, 0, INT_MAX);
      break;
    case O_GRPC_KA_TIMEOUT:
      go->keepalive_timeout_ms =
          (uint64_t)parse_num("--grpc-keepalive-timeout", optarg, 1, INT_MAX);
      break;
    case O_GRPC_KA_PERMIT: go->keepalive_permit_without_calls = parse_bool(optarg); break;
    case O_GRPC_MAX_PINGS:
      go->max_pings_without_data =
          (uint32_t)parse_num("--grpc-http2-max-pings-without-data", optarg, 0, INT_MAX);
      break;
    case O_GRPC_MIN_PING:
      go->min_recv_ping_interval_ms = (uint64_t)parse_num(
          "--grpc-http2-min-recv-ping-interval-without-data", optarg, 0, INT_MAX);
      break;
    case O_GRPC_STRIKES:
      go->max_ping_strikes =
          (uint32_t)parse_num("--grpc-http2-max-ping-strikes", optarg, 0, INT_MAX);
      break;
    case O_GRPC_IDLE:
      go->max_connection_idle_ms =
          (uint64_t)parse_num("--grpc-max-connection-idle", optarg, 0, INT_MAX);
      break;
    case O_GRPC_AGE:
      go->max_connection_age_ms =
          (uint64_t)parse_num("--grpc-max-connection-age", optarg, 0, INT_MAX);
      break;
    case O_GRPC_AGE_GRACE:
      go->max_connection_age_grace_ms =
          (uint64_t)parse_num("--grpc-max-connection-age-grace", optarg, 0, INT_MAX);
      break;
    case O_HTTP_THREADS:
      ho->threads = (unsigned)parse_num("--http-thread-count", optarg, 1, HARK_HTTP_MAX_THREADS);
      break;
    case O_INLINE:
      so.inline_max_us = (uint32_t)parse_num("--inline-max-us", optarg, 0, 1000000);
      break;
    case O_SHORT:
      so.short_batch_us = (uint32_t)parse_num("--short-batch-us", optarg, 0, 10000000);
      break;
    case O_WORKERS:
      so.worker_threads = (uint32_t)parse_num("--worker-threads", optarg, 1, 1024);
      break;
    case O_QUEUE:
      so.max_queue_size = (uint32_t)parse_num("--max-queue-size", optarg, 1, 1 << 24);
      break;
    case O_VERBOSE: hark_log_set_verbose((int)parse_num("--log-verbose", optarg, 0, 9)); break;
    case O_LOG_INFO: hark_log_set_enabled(HARK_LOG_INFO, parse_bool(optarg)); break;
    case O_LOG_WARN: hark_log_set_enabled(HARK_LOG_WARN, parse_bool(optarg)); break;
    case O_LOG_ERROR: hark_log_set_enabled(HARK_LOG_ERROR, parse_bool(optarg)); break;
    case O_LOG_FORMAT: {
      hark_log_format f;
      if (!hark_log_parse_format(optarg, &f)) {
        fprintf(stderr, "harkd: --log-format must be default, ISO8601 or json, got '%s'\n", optarg);
        return 2;
      }
      hark_log_set_format(f);
      break;
    }
    case O_SPEECH: fo.speech.speech_model = optarg; break;
    case O_SPEECH_RATE:
      fo.speech.sample_rate = (uint32_t)parse_num("--speech-sample-rate", optarg, 8000, 48000);
      break;
    case O_INFLIGHT:
      inflight_max = (uint64_t)parse_num("--max-inflight-bytes", optarg, 0, LONG_MAX);
      break;
    case O_STREAMS:
      fo.speech.max_streams = (uint32_t)parse_num("--max-streams", optarg, 1, 1 << 20);
      break;
    case O_BACKLOG:
      fo.speech.backlog_limit = (uint32_t)parse_num("--stream-backlog-limit", optarg, 1, 1 << 20);
      break;
    case O_WSMAX:
      ho->ws_max_message = (size_t)parse_num("--ws-max-message-bytes", optarg, 1024, 1L << 30);
      break;
    case O_WSIDLE:
      ho->ws_idle_timeout_secs = (int)parse_num("--ws-idle-timeout-secs", optarg, 1, 86400);
      break;
    case O_HTTP_RESTRICT:
    case O_GRPC_RESTRICT: {
      bool http = c == O_HTTP_RESTRICT;
      hark_error *err =
          hark_restrict_add(http ? http_restrict : grpc_restrict,
                            http ? "--http-restricted-api" : "--grpc-restricted-protocol", optarg);
      if (err) {
        fprintf(stderr, "harkd: %s\n", hark_error_message(err));
        hark_error_free(err);
        return 2;
      }
      break;
    }
    case O_HTTP_SSL: http_ssl = parse_strict_bool("--http-use-ssl", optarg); break;
    case O_HTTP_CERT: http_cert = optarg; break;
    case O_HTTP_KEY: http_key = optarg; break;
    case O_GRPC_SSL: fo.grpc_use_ssl = parse_strict_bool("--grpc-use-ssl", optarg); break;
    case O_GRPC_MUTUAL:
      fo.grpc_tls.mutual = parse_strict_bool("--grpc-use-ssl-mutual", optarg);
      break;
    case O_GRPC_CERT: fo.grpc_tls.cert = optarg; break;
    case O_GRPC_KEY: fo.grpc_tls.key = optarg; break;
    case O_GRPC_ROOT: fo.grpc_tls.root = optarg; break;
    case O_METRICS_ADDR: ho->metrics_address = optarg; break;
    case O_HELP: usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (optind < argc || !so.model_repository) {
    usage(stderr);
    return 2;
  }
  /* Riva's clients put every stream on one channel: by default one
   * connection may hold half the speech streams, never all of them. */
  if (!streams_per_conn_set)
    go->max_streams_per_connection = fo.speech.max_streams > 1 ? fo.speech.max_streams / 2 : 1;
  if (!tls_flags(&fo, http_ssl, http_cert, http_key)) return 2;
  so.load_models = loads;
  if (so.repository_poll_secs > 0 && so.model_control != HARK_MODEL_CONTROL_POLL)
    HARK_WARN("--repository-poll-secs has no effect without --model-control-mode poll");
  signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();

  hark_inflight_set_max(inflight_max);
  hark_server *server;
  hark_error *err = hark_server_new(&so, &server);
  if (err) {
    HARK_ERROR("cannot start: %s", hark_error_message(err));
    hark_error_free(err);
    return 1;
  }
  err = hark_frontends_new(server, &fo, &g_frontends);
  if (err) {
    HARK_ERROR("cannot start the front ends: %s", hark_error_message(err));
    hark_error_free(err);
    hark_server_free(server);
    return 1;
  }
  g_exit_secs = ho->exit_timeout_secs < 0   ? 0
                : ho->exit_timeout_secs > 0 ? ho->exit_timeout_secs
                                            : HARK_DEFAULT_EXIT_TIMEOUT_SECS;
  pthread_t watchdog;
  sem_init(&g_watchdog, 0, 0);
  if (pthread_create(&watchdog, NULL, watchdog_main, NULL) == 0)
    pthread_detach(watchdog);
  else
    HARK_WARN("cannot start the shutdown watchdog: a stuck shutdown will not be cut short");
  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  const char *addr = ho->address ? ho->address : "0.0.0.0";
  const char *gaddr = fo.grpc_address ? fo.grpc_address : addr;
  if (ho->http_port >= 0) HARK_INFO("Started HTTPService at %s:%d", addr, ho->http_port);
  if (fo.grpc_port >= 0)
    HARK_INFO("Started GRPCInferenceService at %s:%d", gaddr,
              hark_frontends_grpc_port(g_frontends));
  if (ho->metrics_port >= 0)
    HARK_INFO("Started Metrics Service at %s:%d", ho->metrics_address ? ho->metrics_address : addr,
              ho->metrics_port);
  hark_frontends_run(g_frontends); /* returns once drained, timed out or stopped */
  HARK_INFO("shutting down");
  hark_frontends *f = g_frontends;
  g_frontends = NULL;
  hark_frontends_free(f); /* waits for the requests in flight */
  hark_server_free(server);
  hark_restrict_free(http_restrict);
  hark_restrict_free(grpc_restrict);
  return 0;
}

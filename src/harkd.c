/*
 * harkd — the hark server. Reads Triton-style flags (one table of them:
 * harkd_flags.c), builds the engine on the model repository, starts the
 * front ends and runs their event loops (--http-thread-count, one of them
 * on the main thread) until SIGINT/SIGTERM.
 * The first signal drains: readiness turns false, new requests and streams
 * get 503, live ones get --exit-timeout-secs to finish, then the rest are
 * closed and the process exits 0. A second signal stops waiting.
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "frontend/frontends.h"
#include "hark/server.h"
#include "harkd_flags.h"
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

#ifdef HARK_WITH_JEMALLOC
/* jemalloc's options, which it reads as it starts (MALLOC_CONF in the
 * environment overrides them): keep freed pages for reuse instead of
 * returning them to the kernel as they age. Its default decay returns a
 * few at a time all the time, and a neural model allocates and frees
 * megabytes of tensors every round: each round then paid madvise calls
 * (on a VM, a TLB shootdown each) and page faults to take the same memory
 * back (bench/RESULTS.md, 2026-11-28 evening). The pages go back instead
 * all at once every --memory-release-secs (release_main), which costs one
 * round of faults in that period. */
const char *malloc_conf = "dirty_decay_ms:-1,muzzy_decay_ms:-1";
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);

static void *release_main(void *arg) {
  int secs = *(int *)arg;
  pthread_setname_np(pthread_self(), "hark-mem");
  for (;;) {
    struct timespec ts = {.tv_sec = secs}, rem;
    while (nanosleep(&ts, &rem) != 0 && errno == EINTR) ts = rem;
    /* Every arena's unused pages (4096: MALLCTL_ARENAS_ALL), an arena at
     * a time under its own lock. */
    (void)mallctl("arena.4096.purge", NULL, NULL, NULL, 0);
  }
  return NULL;
}

static void start_memory_release(const int *secs) {
  pthread_t t;
  if (*secs <= 0) return;
  if (pthread_create(&t, NULL, release_main, (void *)secs) == 0)
    pthread_detach(t);
  else
    HARK_WARN("cannot start the memory release thread: freed memory stays for reuse");
}
#else
static void start_memory_release(const int *secs) { (void)secs; }
#endif

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

/* Every connection (a WebSocket stream, a gRPC channel) holds a
 * descriptor, so a soft limit left at a distribution's 1,024 would cap
 * streams near a thousand. Raise it towards the hard limit, as Go's
 * runtime does for its servers, up to FD_SOFT_CAP: lws sizes its tables
 * by the soft limit, per loop. */
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
  /* Static: still reachable (not a leak) on the early exits below. */
  static harkd_options opts;
  harkd_options_init(&opts);
  switch (harkd_options_parse(&opts, argc, argv, stderr)) {
  case HARK_FLAGS_OK: break;
  case HARK_FLAGS_HELP: harkd_usage(stdout); return 0;
  default: return 2;
  }
  hark_server_options *so = &opts.server;
  hark_frontend_options *fo = &opts.fe;
  hark_http_options *ho = &fo->http;
  signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();

  hark_inflight_set_max(opts.inflight_max);
  start_memory_release(&opts.memory_release_secs);
  hark_server *server;
  hark_error *err = hark_server_new(so, &server);
  if (err) {
    HARK_ERROR("cannot start: %s", hark_error_message(err));
    hark_error_free(err);
    return 1;
  }
  err = hark_frontends_new(server, fo, &g_frontends);
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
  const char *gaddr = fo->grpc_address ? fo->grpc_address : addr;
  if (ho->http_port >= 0) HARK_INFO("Started HTTPService at %s:%d", addr, ho->http_port);
  if (fo->grpc_port >= 0)
    HARK_INFO("Started GRPCInferenceService at %s:%d", gaddr,
              hark_frontends_grpc_port(g_frontends));
  if (ho->metrics_port >= 0)
    HARK_INFO("Started Metrics Service at %s:%d", ho->metrics_address ? ho->metrics_address : addr,
              ho->metrics_port);
  hark_frontends_run(g_frontends); /* returns once drained, timed out or stopped */
  HARK_INFO("shutting down");
  hark_server_cut_queued(server); /* a second signal's stop: nothing queued runs now */
  hark_frontends *f = g_frontends;
  g_frontends = NULL;
  hark_frontends_free(f); /* waits for the requests in flight */
  hark_server_free(server);
  harkd_options_free(&opts);
  return 0;
}

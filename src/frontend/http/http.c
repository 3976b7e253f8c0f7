/*
 * http.c — the transport's event loops: their lws contexts, listen
 * sockets, lifecycle (run, drain, stop, free), and the lws callbacks that
 * accept connections and hand their events to raw.c (whose listener says
 * whose they are: exchange.c's HTTP/1.1, or the raw service's). Calls and
 * their completion list are in call.c.
 *
 * Debian's libwebsockets serves one context from one thread, so the
 * transport runs N loops (--http-thread-count), each a context with its
 * own listen sockets on the shared HTTP and gRPC ports (SO_REUSEPORT,
 * accepted by the loop itself; port 0 is the first loop's pick, shared
 * with the rest) and its own thread; loop 0 runs on the thread in
 * hark_http_run() and also serves the metrics port. lws carries every
 * connection as a raw socket: hark speaks the protocols. At the descriptor
 * limit the listeners stop accepting for a moment rather than spin. No
 * loop ever blocks.
 *
 * Each context runs on a libev loop of its own (a "foreign" loop to lws;
 * epoll on Linux): lws's own loop poll()s every socket at each wake-up,
 * which with hundreds of streams cost the loops more CPU than their work
 * (bench/RESULTS.md, 2026-11-27). Three gaps of lws 4.1 on libev are
 * bridged here: lws_service() runs the libev loop until it is empty, so a
 * pass of ours runs it once (service()); lws_cancel_service's pipe is not
 * watched, so a loop is woken through an eventfd of ours that lws polls
 * like a connection (hark_http_loop_wake); and lws re-arms its timer only
 * when it is not running, so a timer set sooner than the one armed would
 * wait for it (up to the 1 s sweep): while a loop is busy it nudges lws
 * every KICK_SECS (10 ms), which bounds a timer's lateness by that.
 * Without lws's libev plugin (libwebsockets-evlib-ev) a loop falls back to
 * lws's poll(), with a warning.
 *
 * Shutdown drains: while what is live on every loop finishes (loop 0
 * watches the others' counts), up to the exit timeout; then every loop
 * closes its own WebSockets, idle connections and gRPC connections, and
 * lets its last replies out.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>

#include "frontend/http/http_impl.h"
#include "util/alloc.h"
#include "util/log.h"

#define SHUTDOWN_GRACE_NS (5ull * 1000000000ull)
#define STOP_GRACE_NS (1ull * 1000000000ull)
#define DEFAULT_MAX_INPUT (64u << 20)
#define DEFAULT_BODY_TIMEOUT_SECS 30
#define DEFAULT_HEADER_TIMEOUT_SECS 10
#define DEFAULT_BODY_DEADLINE_SECS 60
#define DEFAULT_SEND_TIMEOUT_SECS 60

bool hark_http_stopping(const hark_http *http) { return atomic_load(&http->stop); }

int hark_http_raw_port(const hark_http *http) { return http->raw_port; }

/* ---- the lws callback ---------------------------------------------------------------- */

/* How often a busy libev loop has lws look at its timers (see the top),
 * and after how many kicks without an lws event of its own it stops
 * (then lws's own timer, re-armed at least at every 1 s sweep, is late by
 * at most that). */
#define KICK_SECS 0.01
#define KICKS_BEFORE_IDLE 100

static void on_kick(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)revents;
  hark_http_loop *loop = w->data;
  if (++loop->kicks >= KICKS_BEFORE_IDLE) {
    loop->kicks = 0;
    if (!loop->events_seen) {
      ev_timer_stop(ev, w);
      return;
    }
    loop->events_seen = false;
  }
  hark_http_loop_wake(loop);
}

/* Loop thread: an lws event of a connection or listener (not a kick's). */
static void note_event(hark_http_loop *loop) {
  loop->events_seen = true;
  if (loop->kick && !ev_is_active(loop->kick)) ev_timer_again(loop->ev, loop->kick);
}

/* Once a second, every time limit of the loop's connections (no timer is
 * armed per request or stream). */
#define SWEEP_US (1000 * LWS_US_PER_MS)
static void on_sweep(lws_sorted_usec_list_t *sul) {
  hark_http_loop *loop = lws_container_of(sul, hark_http_loop, sweep);
  hark_ws_sweep(loop);
  hark_http_conns_sweep(loop);
  hark_raw_sweep(loop);
  lws_sul_schedule(loop->ctx, 0, &loop->sweep, on_sweep, SWEEP_US);
  hark_http_drain_soon(); /* what the closes posted to this loop */
}

/* ---- our own listen sockets ------------------------------------------------ */

/* Each loop has a listening socket of its own on the HTTP port
 * (SO_REUSEPORT: the kernel spreads connections over them), which the
 * loop polls as a raw descriptor: when it is readable the loop accepts and
 * hands each connection to its HTTP vhost, all on its own thread. (Debian's
 * lws sets SO_REUSEPORT only in its multi-threaded builds.) */
#define ACCEPT_BATCH 64
/* Out of descriptors (or kernel memory), accept fails at once while the
 * listen socket stays readable: polling on would spin the loop and flood
 * the log. As nginx does, stop accepting for a moment (the connections
 * wait in the listen backlog), then try again; warn at most once a
 * second, with how many failures were not logged. */
#define ACCEPT_PAUSE_US (250 * LWS_US_PER_MS)
#define ACCEPT_LOG_EVERY_NS 1000000000ull

static void listeners_flow(hark_http_loop *loop, int on) {
  for (int k = 0; k < LISTEN_KINDS; k++)
    if (loop->listeners[k].wsi) lws_rx_flow_control(loop->listeners[k].wsi, on);
}

static void accept_resume(lws_sorted_usec_list_t *sul) {
  hark_http_loop *loop = lws_container_of(sul, hark_http_loop, accept_resume);
  loop->accept_paused = false;
  listeners_flow(loop, 1);
}

static void accept_pause(hark_http_loop *loop, int err) {
  uint64_t now = hark_now_ns();
  loop->accept_unlogged++;
  if (!loop->accept_logged_ns || now - loop->accept_logged_ns >= ACCEPT_LOG_EVERY_NS) {
    HARK_WARN(
        "http: cannot accept connections: %s; not accepting for %d ms (%u failure%s since "
        "the last warning)",
        strerror(err), (int)(ACCEPT_PAUSE_US / LWS_US_PER_MS), loop->accept_unlogged,
        loop->accept_unlogged == 1 ? "" : "s");
    loop->accept_logged_ns = now;
    loop->accept_unlogged = 0;
  }
  if (loop->accept_paused) return;
  loop->accept_paused = true;
  listeners_flow(loop, 0);
  lws_sul_schedule(loop->ctx, 0, &loop->accept_resume, accept_resume, ACCEPT_PAUSE_US);
}

static int on_listen_event(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                           size_t len) {
  (void)user, (void)in, (void)len;
  if (reason != LWS_CALLBACK_RAW_RX_FILE) return 0;
  hark_http_loop *loop = hark_http_loop_of(wsi);
  const hark_listener *l = lws_get_opaque_user_data(wsi);
  if (!l) return 0;
  note_event(loop);
  for (int i = 0; i < ACCEPT_BATCH; i++) {
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        accept_pause(loop, errno);
      else if (errno != EAGAIN && errno != EWOULDBLOCK)
        HARK_WARN("http: cannot accept a connection: %s", strerror(errno));
      break;
    }
    int one = 1; /* replies leave at once */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    lws_sock_file_fd_type desc = {.sockfd = fd};
    loop->adopting = l; /* raw.c's adopt callback reads it, within this call */
    struct lws *taken =
        lws_adopt_descriptor_vhost(loop->vh, LWS_ADOPT_SOCKET, desc, "hark-raw", NULL);
    loop->adopting = NULL;
    if (!taken) HARK_WARN("http: cannot take a new connection (out of memory?)");
  }
  return 0;
}

/* The loop's wake-up descriptor (hark_http_loop_wake) became readable:
 * an lws event like any other, after which lws also re-arms its timers
 * (on libev it does that only after an event of its own). */
static int on_wake_event(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                         size_t len) {
  (void)user, (void)in, (void)len;
  if (reason != LWS_CALLBACK_RAW_RX_FILE) return 0;
  hark_http_loop *loop = hark_http_loop_of(wsi);
  uint64_t n;
  ssize_t got;
  do got = read(loop->wake_fd, &n, sizeof n); /* resets the count */
  while (got < 0 && errno == EINTR);
  hark_http_drain_calls(loop);
  return 0;
}

/* Every connection's events (raw.c), then the calls that finished
 * meanwhile. */
static int on_raw_event(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                        size_t len) {
  if (reason == LWS_CALLBACK_EVENT_WAIT_CANCELLED) { /* lws_cancel_service: lws's own poll() */
    if (wsi) hark_http_drain_calls(hark_http_loop_of(wsi));
    return 0;
  }
  if (wsi) note_event(hark_http_loop_of(wsi));
  int rc = hark_raw_on_event(wsi, reason, user, in, len);
  hark_http_drain_soon();
  return rc;
}

static const struct lws_protocols protocols[] = {
    {"hark-listen", on_listen_event, 0, 0, 0, NULL, 0},
    {"hark-raw", on_raw_event, sizeof(hark_raw), 0, 0, NULL, 0},
    {"hark-wake", on_wake_event, 0, 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* An interface's name ("lo", "eth0") as its first IPv4 address (else its
 * first IPv6 one) into buf: false when `name` is an address, or names no
 * interface with one. */
static bool iface_address(const char *name, char buf[INET6_ADDRSTRLEN]) {
  unsigned char a[sizeof(struct in6_addr)];
  if (inet_pton(AF_INET, name, a) == 1 || inet_pton(AF_INET6, name, a) == 1) return false;
  struct ifaddrs *list, *i;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (int family = AF_INET; !found && family; family = family == AF_INET ? AF_INET6 : 0)
    for (i = list; i && !found; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != family || strcmp(i->ifa_name, name) != 0)
        continue;
      const void *src = family == AF_INET
                            ? (const void *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
                            : (const void *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
      found = inet_ntop(family, src, buf, INET6_ADDRSTRLEN) != NULL;
    }
  freeifaddrs(list);
  return found;
}

/* A non-blocking listening socket on address:port (NULL: every interface,
 * IPv6 and IPv4 where the machine has IPv6, as lws binds), shared with the
 * other loops; -1 with errno set. */
static int listen_socket(const char *address, int port) {
  char ifaddr[INET6_ADDRSTRLEN];
  if (address && iface_address(address, ifaddr)) address = ifaddr;
  struct addrinfo hints, *res;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = address ? AF_UNSPEC : AF_INET6;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  char serv[16];
  snprintf(serv, sizeof serv, "%d", port);
  int fd = -1, rc = getaddrinfo(address, serv, &hints, &res);
  if (rc != 0 && !address) { /* no IPv6 */
    hints.ai_family = AF_INET;
    rc = getaddrinfo(NULL, serv, &hints, &res);
  }
  if (rc != 0) {
    errno = EINVAL;
    return -1;
  }
  fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 && !address && res->ai_family == AF_INET6) { /* IPv6 compiled, not configured */
    freeaddrinfo(res);
    hints.ai_family = AF_INET;
    if (getaddrinfo(NULL, serv, &hints, &res) != 0) return -1;
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  }
  int one = 1, zero = 0;
  if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
                  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) ||
                  (!address && res->ai_family == AF_INET6 &&
                   setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero)) ||
                  bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, SOMAXCONN))) {
    int e = errno;
    close(fd);
    errno = e;
    fd = -1;
  }
  freeaddrinfo(res);
  return fd;
}

/* ---- lifecycle ------------------------------------------------------------------------ */

/* How many loops serve the ports (--http-thread-count; 0: one per core). */
static unsigned loop_count(const hark_http_options *opts) {
  unsigned n = opts->threads;
  if (!n) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    n = cores < 1 ? 1 : (unsigned)cores;
  }
  return n > HARK_HTTP_MAX_THREADS ? HARK_HTTP_MAX_THREADS : n;
}

/* The loops' listen sockets share a port (SO_REUSEPORT), so another
 * process (of the same user) could bind it too, and the two would split
 * the clients. A plain bind (SO_REUSEADDR, so only listening sockets
 * count, not connections in TIME_WAIT) fails while anyone listens there:
 * try one on every address the loops will bind, then close it. */
static bool port_taken(const char *address, int port) {
  char ifaddr[INET6_ADDRSTRLEN];
  if (address && iface_address(address, ifaddr)) address = ifaddr;
  struct addrinfo hints, *res, *ai;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  char serv[16];
  snprintf(serv, sizeof serv, "%d", port);
  if (getaddrinfo(address, serv, &hints, &res) != 0) return false; /* the bind will say */
  bool taken = false;
  for (ai = res; ai && !taken; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue; /* no IPv6 here: the loops will not bind it either */
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    taken = bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno == EADDRINUSE;
    close(fd);
  }
  freeaddrinfo(res);
  return taken;
}

static void lws_log_to_hark(int level, const char *line) {
  size_t n = strlen(line);
  while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
  hark_log(level == LLL_ERR ? HARK_LOG_ERROR : HARK_LOG_WARN, "http: %.*s", (int)n, line);
}

/* The loop's one vhost: it listens on nothing (the loop's own sockets
 * do) and carries every connection as a raw one. */
static struct lws_vhost *make_vhost(hark_http_loop *loop) {
  struct lws_context_creation_info info;
  memset(&info, 0, sizeof info);
  info.vhost_name = "hark";
  info.port = CONTEXT_PORT_NO_LISTEN_SERVER;
  info.protocols = protocols;
  return lws_create_vhost(loop->ctx, &info);
}

static const char *const KIND_NAME[LISTEN_KINDS] = {"HTTP", "metrics", "gRPC"};

/* Listener `kind` of the loop: its own socket on the shared port (the
 * first loop's bind picks it when it is 0, and the others take that one),
 * polled by the loop. */
static hark_error *listen_on(hark_http_loop *loop, hark_listener_kind kind, const char *address,
                             int *port, const hark_raw_handler *handler, void *userp,
                             struct hark_tls *tls) {
  hark_listener *l = &loop->listeners[kind];
  const char *where = address ? address : "0.0.0.0";
  int fd = listen_socket(address, *port);
  if (fd < 0)
    return hark_error_new(HARK_ERR_UNAVAILABLE, "cannot listen for %s on %s:%d (in use?): %s",
                          KIND_NAME[kind], where, *port, strerror(errno));
  if (*port == 0) { /* the kernel picked one: the other loops share it */
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                           : ((struct sockaddr_in *)&ss)->sin_port);
  }
  l->loop = loop;
  l->kind = kind;
  l->fd = fd;
  l->handler = handler;
  l->userp = userp;
  l->tls = tls;
  lws_sock_file_fd_type desc = {.filefd = fd};
  if (!(l->wsi = lws_adopt_descriptor_vhost(loop->vh, LWS_ADOPT_RAW_FILE_DESC, desc, "hark-listen",
                                            NULL))) { /* closes fd */
    l->fd = -1;
    return hark_error_new(HARK_ERR_INTERNAL, "cannot poll the %s listen socket", KIND_NAME[kind]);
  }
  lws_set_opaque_user_data(l->wsi, l);
  return NULL;
}

/* The loop's wake-up: an eventfd that lws polls like a connection
 * (lws_cancel_service's pipe is not watched on a libev loop in lws 4.1). */
static hark_error *wake_listen(hark_http_loop *loop) {
  int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0)
    return hark_error_new(HARK_ERR_INTERNAL, "cannot make the event loop's wake-up: %s",
                          strerror(errno));
  lws_sock_file_fd_type desc = {.filefd = fd};
  if (!lws_adopt_descriptor_vhost(loop->vh, LWS_ADOPT_RAW_FILE_DESC, desc, "hark-wake",
                                  NULL)) /* closes fd */
    return hark_error_new(HARK_ERR_INTERNAL, "cannot poll the event loop's wake-up");
  loop->wake_fd = fd; /* lws closes it with the context */
  if (loop->ev) {
    loop->kick = hark_xcalloc(1, sizeof *loop->kick);
    ev_timer_init(loop->kick, on_kick, KICK_SECS, KICK_SECS);
    loop->kick->data = loop;
    ev_timer_start(loop->ev, loop->kick);
  }
  return NULL;
}

/* Makes loop `i`'s context and its listeners. */
static hark_error *loop_new(hark_http *http, unsigned i) {
  hark_http_loop *loop = hark_xcalloc(1, sizeof *loop);
  http->loops[i] = loop;
  loop->http = http;
  loop->index = i;
  for (int k = 0; k < LISTEN_KINDS; k++) loop->listeners[k].fd = -1;
  loop->wake_fd = -1;
  atomic_init(&loop->replying, 0);
  pthread_mutex_init(&loop->lock, NULL);
  pthread_cond_init(&loop->idle, NULL);

  struct lws_context_creation_info info;
  memset(&info, 0, sizeof info);
  info.options = LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
  info.user = loop;
  info.pt_serv_buf_size = 64 * 1024; /* fewer, larger reads of bodies */
  info.count_threads = 1;
  /* EVFLAG_NOSIGMASK: signals are harkd's (lws installs no watcher of its
   * own on a foreign loop). */
  loop->ev = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
  void *foreign[] = {loop->ev};
  if (loop->ev) {
    info.options |= LWS_SERVER_OPTION_LIBEV;
    info.foreign_loops = foreign;
    loop->ctx = lws_create_context(&info);
  }
  if (!loop->ctx) {
    HARK_WARN(
        "http: libwebsockets cannot run on a libev loop (%s); loop %u polls with poll(), "
        "which costs more with many connections",
        loop->ev ? "is libwebsockets-evlib-ev installed?" : strerror(errno), i);
    if (loop->ev) ev_loop_destroy(loop->ev);
    loop->ev = NULL;
    info.options &= ~(uint64_t)LWS_SERVER_OPTION_LIBEV;
    info.foreign_loops = NULL;
    loop->ctx = lws_create_context(&info);
  }
  if (!loop->ctx) return hark_error_new(HARK_ERR_INTERNAL, "cannot create the HTTP event loop");
  loop->ctx_alive = true;
  if (!(loop->vh = make_vhost(loop)))
    return hark_error_new(HARK_ERR_INTERNAL, "cannot make the event loop's vhost");
  lws_sul_schedule(loop->ctx, 0, &loop->sweep, on_sweep, SWEEP_US);
  const hark_http_options *opts = &http->opts;
  hark_error *err = NULL;
  if (opts->http_port >= 0)
    err = listen_on(loop, LISTEN_HTTP, opts->address, &http->http_port, &hark_http_conn_handler,
                    http, opts->http_tls);
  if (!err && i == 0 && opts->metrics_port >= 0)
    err = listen_on(loop, LISTEN_METRICS,
                    opts->metrics_address ? opts->metrics_address : opts->address,
                    &http->metrics_port, &hark_http_metrics_conn_handler, http, NULL);
  if (!err && http->raw_port >= 0)
    err = listen_on(loop, LISTEN_RAW, opts->raw_address ? opts->raw_address : opts->address,
                    &http->raw_port, http->handler->raw, http->handler->raw_userp, opts->raw_tls);
  return err ? err : wake_listen(loop);
}

hark_error *hark_http_new(const hark_http_options *opts, const hark_http_handler *handler,
                          hark_http **out) {
  hark_http *http = hark_xcalloc(1, sizeof *http);
  http->handler = handler;
  http->opts = *opts;
  if (!http->opts.max_input_size) http->opts.max_input_size = DEFAULT_MAX_INPUT;
  if (http->opts.body_timeout_secs <= 0) http->opts.body_timeout_secs = DEFAULT_BODY_TIMEOUT_SECS;
  if (http->opts.header_timeout_secs <= 0)
    http->opts.header_timeout_secs = DEFAULT_HEADER_TIMEOUT_SECS;
  if (http->opts.body_deadline_secs <= 0)
    http->opts.body_deadline_secs = DEFAULT_BODY_DEADLINE_SECS;
  if (http->opts.send_timeout_secs <= 0) http->opts.send_timeout_secs = DEFAULT_SEND_TIMEOUT_SECS;
  atomic_init(&http->stop, false);
  atomic_init(&http->stop_now, false);
  atomic_init(&http->draining, false);
  atomic_init(&http->n_sockets, 0);
  lws_set_log_level(LLL_ERR | LLL_WARN, lws_log_to_hark);
  http->n_loops = loop_count(opts);
  http->http_port = opts->http_port;
  http->metrics_port = opts->metrics_port;
  http->raw_port = handler->raw ? opts->raw_port : -1;
  const char *where = opts->address ? opts->address : "0.0.0.0";
  const char *metrics_address = opts->metrics_address ? opts->metrics_address : opts->address;
  const char *raw_address = opts->raw_address ? opts->raw_address : opts->address;
  hark_error *err = NULL;
  if (http->http_port > 0 && port_taken(opts->address, http->http_port))
    err = hark_error_new(HARK_ERR_UNAVAILABLE, "cannot listen for HTTP on %s:%d (in use?)", where,
                         http->http_port);
  else if (http->metrics_port > 0 && port_taken(metrics_address, http->metrics_port))
    err = hark_error_new(HARK_ERR_UNAVAILABLE, "cannot listen for metrics on %s:%d (in use?)",
                         metrics_address ? metrics_address : "0.0.0.0", http->metrics_port);
  else if (http->raw_port > 0 && port_taken(raw_address, http->raw_port))
    err = hark_error_new(HARK_ERR_UNAVAILABLE, "cannot listen for gRPC on %s:%d (in use?)",
                         raw_address ? raw_address : "0.0.0.0", http->raw_port);
  if (err) {
    http->n_loops = 0;
    hark_http_free(http);
    return err;
  }
  http->loops = hark_xcalloc(http->n_loops, sizeof *http->loops);
  for (unsigned i = 0; i < http->n_loops; i++) {
    err = loop_new(http, i);
    if (err) {
      hark_http_free(http);
      return err;
    }
  }
  *out = http;
  return NULL;
}

/* While shutting down: wake the loop now and then so the grace period ends
 * even when nothing happens. */
static void on_tick(lws_sorted_usec_list_t *sul) {
  hark_http_loop *loop = lws_container_of(sul, hark_http_loop, tick);
  lws_sul_schedule(loop->ctx, 0, &loop->tick, on_tick, 100 * LWS_US_PER_MS);
}

/* Any thread: work held on this loop, calls posted, or replies not yet
 * written. */
static bool loop_has_work(hark_http_loop *loop) {
  pthread_mutex_lock(&loop->lock);
  bool b = loop->holds > 0 || loop->done_head;
  pthread_mutex_unlock(&loop->lock);
  return b || atomic_load_explicit(&loop->replying, memory_order_relaxed) > 0;
}

/* The same for every loop, and any WebSocket open on any. */
static bool has_work(hark_http *http) {
  if (atomic_load(&http->n_sockets) > 0) return true;
  for (unsigned i = 0; i < http->n_loops; i++)
    if (loop_has_work(http->loops[i])) return true;
  return false;
}

/* Shutting down, loop thread: tells the loop's WebSockets and raw
 * connections to go (once); true while it has anything left to finish. */
static bool busy(hark_http_loop *loop) {
  bool sockets = hark_ws_close_all(loop);
  bool conns = hark_http_conns_close_all(loop);
  bool raws = hark_raw_close_all(loop);
  return loop_has_work(loop) || sockets || conns || raws;
}

/* Loop 0, draining: true once everything live on every loop has finished
 * or the exit timeout passed. */
static bool drained(hark_http_loop *loop, uint64_t *deadline) {
  hark_http *http = loop->http;
  uint64_t now = hark_now_ns();
  if (!*deadline) {
    int secs = http->opts.exit_timeout_secs < 0   ? 0
               : http->opts.exit_timeout_secs > 0 ? http->opts.exit_timeout_secs
                                                  : HARK_DEFAULT_EXIT_TIMEOUT_SECS;
    *deadline = now + (uint64_t)secs * 1000000000ull;
    lws_sul_schedule(loop->ctx, 0, &loop->tick, on_tick, 100 * LWS_US_PER_MS);
    hark_http_loop_wake(loop);
    HARK_INFO(
        "draining: not ready, refusing new requests and streams; waiting up to %d s for "
        "%u stream(s) and the requests in flight",
        secs, (unsigned)atomic_load(&http->n_sockets));
  }
  if (!has_work(http) &&
      (!http->opts.drain_idle || http->opts.drain_idle(http->opts.drain_idle_userp))) {
    HARK_INFO("drained: every stream and request finished");
    return true;
  }
  if (now < *deadline) return false;
  HARK_WARN("exit timeout: closing %u stream(s) still open, answering what is still queued",
            (unsigned)atomic_load(&http->n_sockets));
  if (http->opts.drain_timeout) http->opts.drain_timeout(http->opts.drain_idle_userp);
  return true;
}

/* Async-signal-safe: a loop's wake-up only writes to its eventfd (or
 * lws's pipe). */
static void wake_all(hark_http *http) {
  for (unsigned i = 0; i < http->n_loops; i++) {
    hark_http_loop *loop = http->loops[i];
    if (loop && loop->ctx) hark_http_loop_wake(loop);
  }
}

/* One pass of the loop: wait for events (or a wake-up, or a timer) and
 * handle them. On libev this runs the loop itself: lws 4.1's
 * lws_service() would run it until it has no watchers left. */
static int service(hark_http_loop *loop) {
  if (!loop->ev) return lws_service(loop->ctx, 0);
  ev_run(loop->ev, EVRUN_ONCE);
  return 0;
}

/* One loop's life: serve until told to stop (loop 0 also ends the drain
 * for all), then close its WebSockets (1001) and let the calls in flight
 * finish and their replies go out (new requests get 503), for a while;
 * briefly when told to stop at once. */
static void loop_run(hark_http_loop *loop) {
  hark_http *http = loop->http;
  uint64_t drain_deadline = 0;
  hark_http_set_current_loop(loop);
  if (http->handler->thread_hook) http->handler->thread_hook(true);
  hark_http_loop_wake(loop); /* a first event: lws arms the timers set so far */
  while (!atomic_load(&http->stop)) {
    if (service(loop) < 0) break;
    if (loop->index == 0 && atomic_load(&http->draining) && drained(loop, &drain_deadline)) break;
  }
  uint64_t deadline =
      hark_now_ns() + (atomic_load(&http->stop_now) ? STOP_GRACE_NS : SHUTDOWN_GRACE_NS);
  if (!atomic_exchange(&http->stop, true)) wake_all(http); /* the first to stop tells the rest */
  lws_sul_schedule(loop->ctx, 0, &loop->tick, on_tick, 100 * LWS_US_PER_MS);
  hark_http_loop_wake(loop); /* set outside lws's events: see it armed */
  while (busy(loop) && hark_now_ns() < deadline)
    if (service(loop) < 0) break;
  lws_sul_cancel(&loop->tick);
  if (http->handler->thread_hook) http->handler->thread_hook(false);
  hark_http_set_current_loop(NULL);
}

static void *loop_thread(void *arg) {
  pthread_setname_np(pthread_self(), "hark-loop");
  loop_run(arg);
  return NULL;
}

/* Closes the loop's context (its connections' calls lose their client). */
static void loop_close(hark_http_loop *loop) {
  if (!loop->ctx) return;
  lws_sul_cancel(&loop->sweep);
  pthread_mutex_lock(&loop->lock);
  loop->ctx_alive = false;
  pthread_mutex_unlock(&loop->lock);
  struct lws_context *ctx = loop->ctx;
  loop->ctx = NULL;
  lws_context_destroy(ctx);
  if (loop->kick) ev_timer_stop(loop->ev, loop->kick);
  free(loop->kick);
  loop->kick = NULL;
  if (loop->ev) ev_loop_destroy(loop->ev); /* after lws stopped its watchers */
  loop->ev = NULL;
}

void hark_http_run(hark_http *http) {
  unsigned started = 1;
  for (; started < http->n_loops; started++) {
    hark_http_loop *loop = http->loops[started];
    int rc = pthread_create(&loop->thread, NULL, loop_thread, loop);
    if (rc) {
      /* Its socket would take connections nobody serves: close them all. */
      HARK_ERROR("http: cannot start event loop thread %u (%s); serving with %u", started,
                 strerror(rc), started);
      for (unsigned i = started; i < http->n_loops; i++) loop_close(http->loops[i]);
      break;
    }
  }
  loop_run(http->loops[0]);
  for (unsigned i = 1; i < started; i++) pthread_join(http->loops[i]->thread, NULL);
}

void hark_http_drain(hark_http *http) {
  atomic_store(&http->draining, true);
  wake_all(http);
}

void hark_http_stop(hark_http *http) {
  atomic_store(&http->stop_now, true);
  atomic_store(&http->stop, true);
  wake_all(http);
}

/* What holds the loop will let go, and calls will be posted (every
 * engine request gets its final); their handlers need the loop, so wait
 * for them, then free it. */
static void loop_free(hark_http_loop *loop) {
  for (;;) {
    pthread_mutex_lock(&loop->lock);
    while (loop->holds > 0 && !loop->done_head) pthread_cond_wait(&loop->idle, &loop->lock);
    bool more = loop->holds > 0 || loop->done_head;
    pthread_mutex_unlock(&loop->lock);
    if (!more) break;
    hark_http_drain_calls(loop);
  }
  pthread_cond_destroy(&loop->idle);
  pthread_mutex_destroy(&loop->lock);
  free(loop);
}

void hark_http_free(hark_http *http) {
  if (!http) return;
  /* Every context first: a stream closing on one loop may still end its
   * work through the engine. */
  for (unsigned i = 0; i < http->n_loops; i++)
    if (http->loops[i]) loop_close(http->loops[i]);
  for (unsigned i = 0; i < http->n_loops; i++)
    if (http->loops[i]) loop_free(http->loops[i]);
  free(http->loops);
  free(http);
}

/*
 * transcribe_ws.c — `hark transcribe` over Vosk's WebSocket protocol, on
 * libwebsockets' client API: ONE lws context on this thread holds every
 * stream's connection; each of --parallel slots holds one, and takes the
 * next job when its stream ends.
 *
 * lws runs on our libev loop (a "foreign" loop): epoll, where lws's own
 * loop poll()s every socket at each wake-up (with 200 real-time streams,
 * about a fifth of a core taken from the server being measured), and
 * timers that round up, where lws 4.1's truncate a sub-millisecond wait
 * into a busy poll(0). One libev timer runs the timer pass (real-time
 * pacing, reply timeouts, the next job) at the earliest slot deadline; a
 * callback that makes a deadline sooner moves it earlier (wake_at).
 *
 * A stream sends the config message, then the PCM in --chunk-ms chunks —
 * at real time with --simulate-realtime (slots start staggered across one
 * chunk period, or --stagger-ms), else the next chunk once the previous one's reply came —
 * then {"eof" : 1}. lws writes from the WRITEABLE callback only, one
 * message per call, so the slot counts the messages that are due; a send
 * time is taken as the message goes to lws_write. The server answers each
 * message but the config with exactly one JSON text, in order, so reply k
 * belongs to message k: chunk latency is chunk k's write to its reply,
 * final latency the eof's write to the final result. How a connection
 * ended is kept once, first cause wins (slot_end).
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>
#include <libwebsockets.h>

#include "transcribe_ws.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "hark transcribe sends host-order samples as little-endian PCM"
#endif

#define TR_CLOSE_GRACE_NS 2000000000ull /* after the final, for the server's close */
#define TR_MAX_MESSAGE (4u << 20)
#define TR_CONFIG_MAX 128

typedef enum slot_phase {
  SL_IDLE,    /* no job, or waiting for start_ns */
  SL_CONNECT, /* TCP + upgrade */
  SL_STREAM,  /* sending audio */
  SL_DRAIN,   /* eof sent, waiting for the final */
  SL_CLOSE,   /* final received, waiting for the server to close */
} slot_phase;

typedef struct ws_loop ws_loop;

/* How a connection ended: the first cause recorded wins. */
typedef struct slot_end {
  bool set;
  int code;        /* close code: the server's, else why we ended it (1002, 1006, 1009) */
  bool by_server;  /* code and reason came in the server's close frame */
  int http_status; /* the server refused the upgrade with this status; else 0 */
  char reason[512];
} slot_end;

typedef struct slot {
  ws_loop *l;
  struct lws *wsi; /* the connection, NULL when there is none */
  bool ended;      /* the connection is gone: recycle after the lws pass */
  bool timed_out;  /* we ended it for a missing reply */
  bool kill;       /* we ended it: close at the next chance */
  bool config_sent, close_wanted;
  slot_phase phase;
  tr_job *job;
  const tr_file *file;
  uint64_t start_ns;    /* when to connect (stagger) */
  uint64_t phase_ns;    /* when the current phase began */
  uint64_t next_due_ns; /* --simulate-realtime: the next chunk's time */
  size_t n_chunks;      /* binary messages; eof is message n_chunks */
  size_t due;           /* messages (chunks, then eof) the pacing allows so far */
  size_t sent, replies;
  uint64_t *sent_ns;  /* n_chunks + 1 send times, owned */
  unsigned char *out; /* LWS_PRE + the largest message, owned */
  char *msg;          /* the message being received, owned */
  size_t msg_len, msg_cap;
  bool msg_binary;
  char *last_partial; /* owned, for --interim */
  slot_end end;
} slot;

struct ws_loop {
  tr_run *run;
  const tr_opts *o;
  struct lws_context *ctx;
  struct ev_loop *ev; /* owned; lws runs on it */
  ev_timer tick;      /* the timer pass */
  uint64_t tick_ns;   /* when the tick is set for; UINT64_MAX: not set */
  uint64_t limit_ns;  /* --timeout-secs */
  slot *slots;
  int n_slots;
  int next_job;
  char address[INET6_ADDRSTRLEN]; /* numeric: the address resolve() found */
  int port;
  size_t max_chunks; /* of any file: sent_ns holds max_chunks + 1 */
  uint64_t chunk_ns;
  int16_t *zeros; /* one chunk of silence at the highest rate, for silent streams */
};

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Makes sure the timer pass runs by `at` (ns, monotonic). */
static void wake_at(ws_loop *l, uint64_t at) {
  if (at >= l->tick_ns) return;
  uint64_t t = now_ns();
  l->tick_ns = at;
  ev_timer_stop(l->ev, &l->tick);
  ev_timer_set(&l->tick, at > t ? (double)(at - t) / 1e9 : 0, 0);
  ev_timer_start(l->ev, &l->tick);
}

/* ---- setup -------------------------------------------------------------------- */

/* Picks the first address that accepts a connection, so that "localhost"
 * resolving to ::1 and 127.0.0.1 works whichever the server listens on;
 * every stream then connects to that numeric address. */
static int resolve(ws_loop *l) {
  const tr_opts *o = l->o;
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
  int rc = getaddrinfo(o->host, o->port, &hints, &ai);
  if (rc) {
    fprintf(stderr, "hark transcribe: %s: %s\n", o->host, gai_strerror(rc));
    return -1;
  }
  int err = 0;
  for (const struct addrinfo *a = ai; a; a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = {.tv_sec = o->timeout_s};
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getnameinfo(a->ai_addr, a->ai_addrlen, l->address, sizeof l->address, NULL, 0,
                    NI_NUMERICHOST) == 0) {
      close(fd);
      freeaddrinfo(ai);
      l->port = atoi(o->port);
      return 0;
    }
    err = errno;
    if (fd >= 0) close(fd);
  }
  freeaddrinfo(ai);
  fprintf(stderr, "hark transcribe: cannot connect to %s: %s\n", o->hostport, strerror(err));
  return -1;
}

/* Room for one file descriptor per stream; lws sizes its tables from the
 * limit when the context is created, so this comes first. */
static void raise_fd_limit(int streams) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= (rlim_t)streams + 64) return;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > (rlim_t)streams + 64
                    ? (rlim_t)streams + 64
                    : rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
}

/* ---- one stream: how it ends ---------------------------------------------------- */

__attribute__((format(printf, 5, 6))) static void note_end(slot *s, int code, bool by_server,
                                                           int http_status, const char *fmt, ...) {
  if (s->end.set) return;
  s->end =
      (slot_end){.set = true, .code = code, .by_server = by_server, .http_status = http_status};
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->end.reason, sizeof s->end.reason, fmt, ap);
  va_end(ap);
}

/* We end the stream: the reason is kept, and the connection closes from
 * the callback (which returns -1) or, outside one, in the timer pass. */
static void fail(slot *s, int code, const char *why) {
  note_end(s, code, false, 0, "%s", why);
  s->kill = true;
}

/* The connection is gone: settle the job's status from how it ended. */
static void ended(slot *s) {
  if (s->ended) return;
  s->ended = true;
  s->wsi = NULL;
  wake_at(s->l, 0); /* the timer pass recycles the slot */
  tr_job *j = s->job;
  if (j->status == TR_OK) return; /* however it closed, the stream got its final */
  note_end(s, LWS_CLOSE_STATUS_ABNORMAL_CLOSE, false, 0, "connection closed without a close frame");
  j->status = s->timed_out ? TR_TIMEOUT : TR_ERROR;
  j->close_code = s->end.code;
  j->http_status = s->end.http_status;
  snprintf(j->reason, sizeof j->reason, "%s",
           s->end.by_server && s->end.code == LWS_CLOSE_STATUS_NORMAL && !*s->end.reason
               ? "closed before the final result"
               : s->end.reason);
}

/* ---- one stream: sending ---------------------------------------------------------- */

/* Writes one message from s->out + LWS_PRE. Returns 0 or -1 (failed). */
static int write_msg(slot *s, size_t len, enum lws_write_protocol kind) {
  if (lws_write(s->wsi, s->out + LWS_PRE, len, kind) < (int)len) {
    fail(s, LWS_CLOSE_STATUS_ABNORMAL_CLOSE, "cannot send");
    return -1;
  }
  return 0;
}

static int write_config(slot *s) {
  int n = snprintf((char *)s->out + LWS_PRE, TR_CONFIG_MAX, "{\"config\": {\"sample_rate\": %d%s}}",
                   s->file->wav.sample_rate, s->l->o->words ? ", \"words\": true" : "");
  s->config_sent = true;
  return write_msg(s, (size_t)n, LWS_WRITE_TEXT);
}

/* Message s->sent: the next chunk, or after the last one the eof. */
static int write_next(slot *s) {
  size_t k = s->sent++;
  if (k == s->n_chunks) {
    static const char eof[] = "{\"eof\" : 1}";
    memcpy(s->out + LWS_PRE, eof, sizeof eof - 1);
    s->phase = SL_DRAIN;
    s->sent_ns[k] = s->phase_ns = now_ns();
    wake_at(s->l, s->sent_ns[k] + s->l->limit_ns); /* its reply's deadline */
    return write_msg(s, sizeof eof - 1, LWS_WRITE_TEXT);
  }
  size_t per = tr_chunk_samples(s->l->o, s->file);
  size_t off = k * per, n = s->file->wav.n - off < per ? s->file->wav.n - off : per;
  const int16_t *pcm = s->job->silent ? s->l->zeros : s->file->wav.samples + off;
  memcpy(s->out + LWS_PRE, pcm, n * sizeof *pcm);
  s->sent_ns[k] = now_ns();
  wake_at(s->l, s->sent_ns[k] + s->l->limit_ns);
  return write_msg(s, n * sizeof *pcm, LWS_WRITE_BINARY);
}

/* Lets `n` messages in all go out, as the pacing allows. */
static void allow(slot *s, size_t n) {
  if (n > s->n_chunks + 1) n = s->n_chunks + 1;
  if (n <= s->due) return;
  s->due = n;
  if (s->wsi) lws_callback_on_writable(s->wsi);
}

/* WRITEABLE: the config first, then one due message per callback. Returns
 * -1 to have lws close the connection. */
static int on_writeable(slot *s) {
  if (s->kill) return -1;
  if (s->close_wanted) {
    lws_close_reason(s->wsi, LWS_CLOSE_STATUS_NORMAL, NULL, 0);
    return -1; /* lws sends the close frame and waits for the server's */
  }
  if (!s->config_sent) {
    if (write_config(s) < 0) return -1;
  } else if (s->sent < s->due) {
    if (write_next(s) < 0) return -1;
  }
  if (s->sent < s->due) lws_callback_on_writable(s->wsi);
  return 0;
}

static void on_established(slot *s) {
  s->phase = SL_STREAM;
  s->phase_ns = now_ns();
  s->next_due_ns = s->phase_ns; /* realtime: the timer pass lets chunk 0 go */
  if (s->l->o->realtime)
    wake_at(s->l, s->phase_ns);
  else
    s->due = 1;
  lws_callback_on_writable(s->wsi); /* the config, and chunk 0 after it */
}

/* ---- one stream: replies ------------------------------------------------------------ */

/* One reply: a partial or a final (which may be the eof's). */
static void handle_reply(slot *s, cJSON *doc) {
  const cJSON *partial = cJSON_GetObjectItemCaseSensitive(doc, "partial"),
              *text = cJSON_GetObjectItemCaseSensitive(doc, "text");
  if (cJSON_IsString(partial))
    tr_partial(s->l->o, s->file, s->job, partial->valuestring, &s->last_partial);
  if (!cJSON_IsString(text)) return;
  free(s->last_partial);
  s->last_partial = NULL;
  tr_final(s->l->o, s->file, s->job, doc);
}

static void on_message(slot *s, bool binary, const char *data, size_t len) {
  uint64_t t = now_ns();
  if (binary) {
    fail(s, LWS_CLOSE_STATUS_PROTOCOL_ERR, "binary message from the server");
    return;
  }
  if (s->replies >= s->sent) {
    fail(s, LWS_CLOSE_STATUS_PROTOCOL_ERR, "a reply to no message");
    return;
  }
  cJSON *doc = cJSON_ParseWithLength(data, len);
  if (!cJSON_IsObject(doc)) {
    cJSON_Delete(doc);
    fail(s, LWS_CLOSE_STATUS_PROTOCOL_ERR, "reply is not a JSON object");
    return;
  }
  size_t k = s->replies++;
  stats_series_push(k < s->n_chunks ? &s->l->run->chunk_ns : &s->l->run->final_ns,
                    t - s->sent_ns[k]);
  handle_reply(s, doc);
  cJSON_Delete(doc);
  if (k == s->n_chunks) { /* the final: now the server closes */
    s->phase = SL_CLOSE;
    s->phase_ns = t;
    s->job->status = TR_OK;
    s->l->run->ended_ns = t; /* the wall clock stops at the last final, not at the close */
    wake_at(s->l, t + TR_CLOSE_GRACE_NS);
  } else if (!s->l->o->realtime)
    allow(s, s->replies + 1);
}

/* A piece of a message: joined until the last fragment's last byte. */
static void on_receive(slot *s, struct lws *wsi, const char *in, size_t len) {
  if (lws_is_first_fragment(wsi)) {
    s->msg_len = 0;
    s->msg_binary = lws_frame_is_binary(wsi);
  }
  if (s->msg_len + len > TR_MAX_MESSAGE) {
    char why[64];
    snprintf(why, sizeof why, "message larger than %u bytes", TR_MAX_MESSAGE);
    fail(s, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, why);
    return;
  }
  if (s->msg_len + len > s->msg_cap) {
    size_t cap = s->msg_cap ? s->msg_cap : 4096;
    while (cap < s->msg_len + len) cap *= 2;
    char *p = realloc(s->msg, cap);
    if (!p) {
      fail(s, LWS_CLOSE_STATUS_ABNORMAL_CLOSE, "out of memory");
      return;
    }
    s->msg = p;
    s->msg_cap = cap;
  }
  memcpy(s->msg + s->msg_len, in, len);
  s->msg_len += len;
  if (lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi))
    on_message(s, s->msg_binary, s->msg, s->msg_len);
}

/* The server's close frame: its code and reason (lws answers it). */
static void on_peer_close(slot *s, const unsigned char *p, size_t len) {
  int code = len >= 2 ? p[0] << 8 | p[1] : LWS_CLOSE_STATUS_NO_STATUS;
  note_end(s, code, true, 0, "%.*s", (int)(len > 2 ? len - 2 : 0), (const char *)p + 2);
}

static void on_connection_error(slot *s, struct lws *wsi, const char *why) {
  unsigned status = lws_http_client_http_response(wsi);
  /* lws does not read the body of a refused upgrade: the status and what
   * was asked for say it. */
  if (status && status != 101)
    note_end(s, LWS_CLOSE_STATUS_ABNORMAL_CLOSE, false, (int)status,
             "upgrade refused: HTTP %u for %s", status, s->l->o->path);
  else
    note_end(s, LWS_CLOSE_STATUS_ABNORMAL_CLOSE, false, 0, "connect: %s", why ? why : "failed");
  ended(s);
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len) {
  slot *s = lws_get_opaque_user_data(wsi);
  if (!s || !s->job || s->wsi != wsi || s->ended) return 0; /* not (or no longer) a stream's */
  switch (reason) {
  case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
    unsigned char **p = in, *end = *p + len;
    return lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_USER_AGENT,
                                        (const unsigned char *)"hark", 4, p, end)
               ? -1
               : 0;
  }
  case LWS_CALLBACK_CLIENT_ESTABLISHED: on_established(s); return 0;
  case LWS_CALLBACK_CLIENT_WRITEABLE: return on_writeable(s);
  case LWS_CALLBACK_CLIENT_RECEIVE: on_receive(s, wsi, in, len); return s->kill ? -1 : 0;
  case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE: on_peer_close(s, in, len); return 0;
  case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: on_connection_error(s, wsi, in); return 0;
  case LWS_CALLBACK_CLIENT_CLOSED:
  case LWS_CALLBACK_WSI_DESTROY: ended(s); return 0;
  default: return 0;
  }
}

/* ---- slots: jobs, timers, the loop ------------------------------------------------ */

/* Gives the slot the next job, to connect at `at`; or leaves it idle. */
static void slot_assign(ws_loop *l, slot *s, uint64_t at) {
  s->job = NULL;
  s->phase = SL_IDLE;
  if (l->next_job >= l->run->n_jobs) return;
  s->job = &l->run->jobs[l->next_job++];
  s->file = &l->run->files[s->job->file];
  size_t per = tr_chunk_samples(l->o, s->file);
  s->n_chunks = (s->file->wav.n + per - 1) / per;
  s->due = s->sent = s->replies = 0;
  s->ended = s->timed_out = s->kill = s->config_sent = s->close_wanted = false;
  s->end = (slot_end){0};
  s->start_ns = at;
}

static void slot_connect(ws_loop *l, slot *s, uint64_t now) {
  const tr_opts *o = l->o;
  s->phase = SL_CONNECT;
  s->phase_ns = now;
  struct lws_client_connect_info i = {.context = l->ctx,
                                      .address = l->address,
                                      .port = l->port,
                                      .path = o->path,
                                      .host = o->hostport,
                                      .origin = o->hostport,
                                      .ietf_version_or_minus_one = -1,
                                      .pwsi = &s->wsi,
                                      .opaque_user_data = s};
  if (!lws_client_connect_via_info(&i) && !s->ended) {
    note_end(s, LWS_CLOSE_STATUS_ABNORMAL_CLOSE, false, 0, "connect: cannot start the connection");
    ended(s);
  }
}

/* A finished stream: account for it, take the next job. */
static void slot_recycle(ws_loop *l, slot *s, uint64_t now) {
  free(s->last_partial);
  s->last_partial = NULL;
  if (s->job->status == TR_PENDING)
    s->job->status = TR_ERROR; /* cannot happen; never count it ok */
  if (s->job->status == TR_OK) l->run->audio_seconds += s->file->seconds;
  if (!l->o->json) tr_print_end(s->file, s->job);
  if (s->job->status != TR_OK) l->run->ended_ns = now;
  slot_assign(l, s, now);
}

static void timeout(slot *s, const char *what) {
  char why[160];
  snprintf(why, sizeof why, "no %s within %d s", what, s->l->o->timeout_s);
  s->timed_out = true;
  fail(s, LWS_CLOSE_STATUS_ABNORMAL_CLOSE, why);
}

static void earliest(uint64_t *wake, uint64_t t) {
  if (t < *wake) *wake = t;
}

/* Times out the stream when its oldest unanswered message waited too long. */
static void overdue(slot *s, uint64_t now, uint64_t limit, uint64_t *wake) {
  if (s->replies >= s->sent) return;
  uint64_t due = s->sent_ns[s->replies] + limit;
  if (now < due)
    earliest(wake, due);
  else
    timeout(s, s->replies < s->n_chunks ? "reply to a chunk" : "final result");
}

/* --simulate-realtime: lets every chunk whose time has come go, and the
 * eof with the last one (the audio ends with its last chunk). */
static void pace(ws_loop *l, slot *s, uint64_t now, uint64_t *wake) {
  size_t chunks = s->due < s->n_chunks ? s->due : s->n_chunks;
  while (chunks < s->n_chunks && s->next_due_ns <= now) {
    chunks++;
    s->next_due_ns += l->chunk_ns;
  }
  allow(s, chunks == s->n_chunks ? chunks + 1 : chunks);
  if (chunks < s->n_chunks) earliest(wake, s->next_due_ns);
}

/* Runs the slot's due timers; lowers *wake to its next one. */
static void slot_timers(ws_loop *l, slot *s, uint64_t now, uint64_t *wake) {
  uint64_t limit = l->limit_ns;
  if (s->kill) return; /* closing: nothing more is due */
  switch (s->phase) {
  case SL_IDLE:
    if (!s->job) return;
    if (now >= s->start_ns)
      slot_connect(l, s, now);
    else
      earliest(wake, s->start_ns);
    if (s->phase == SL_CONNECT) earliest(wake, now + limit);
    return;
  case SL_CONNECT:
    if (now >= s->phase_ns + limit)
      timeout(s, "connection or handshake");
    else
      earliest(wake, s->phase_ns + limit);
    return;
  case SL_STREAM:
    if (l->o->realtime) pace(l, s, now, wake);
    overdue(s, now, limit, wake);
    return;
  case SL_DRAIN: overdue(s, now, limit, wake); return;
  case SL_CLOSE: /* the server should close now; if it does not, we do */
    if (!s->close_wanted && now >= s->phase_ns + TR_CLOSE_GRACE_NS) {
      s->close_wanted = true;
      lws_callback_on_writable(s->wsi);
    } else if (now >= s->phase_ns + 2 * TR_CLOSE_GRACE_NS) {
      fail(s, LWS_CLOSE_STATUS_ABNORMAL_CLOSE, "no close from the server");
    }
    earliest(wake, s->phase_ns + (s->close_wanted ? 2 : 1) * TR_CLOSE_GRACE_NS);
    return;
  }
}

/* The timer pass: every slot's due timers, recycling; then the tick is set
 * for the earliest deadline, or the loop stops when no job is left. */
static void on_tick(struct ev_loop *ev, ev_timer *w, int revents) {
  ws_loop *l = w->data;
  uint64_t now = now_ns(), wake = UINT64_MAX;
  bool active = false;
  l->tick_ns = UINT64_MAX; /* callbacks during the pass may set it again */
  for (int i = 0; i < l->n_slots; i++) {
    slot *s = &l->slots[i];
    if (s->job && !s->ended) slot_timers(l, s, now, &wake);
    /* Outside lws's callbacks a connection can be closed at once (lws's
     * timers would not run before its next I/O on this loop). */
    if (s->job && !s->ended && s->kill && s->wsi)
      lws_set_timeout(s->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_SYNC);
    if (s->job && s->ended)
      slot_recycle(l, s, now), wake = now; /* the new job's timers run next pass */
    active |= s->job != NULL;
  }
  if (!active)
    ev_break(ev, EVBREAK_ALL);
  else if (wake != UINT64_MAX)
    wake_at(l, wake);
}

/* ---- the run ------------------------------------------------------------------------ */

static const struct lws_protocols protocols[] = {
    {.name = "hark-transcribe", .callback = callback},
    {0},
};

/* Returns 0, or -1 after a message. */
static int setup(ws_loop *l, tr_run *run, const tr_opts *o) {
  *l = (ws_loop){.run = run,
                 .o = o,
                 .chunk_ns = (uint64_t)o->chunk_ms * 1000000u,
                 .tick_ns = UINT64_MAX,
                 .limit_ns = (uint64_t)o->timeout_s * 1000000000u};
  l->n_slots = o->parallel < run->n_jobs ? o->parallel : run->n_jobs;
  l->slots = calloc((size_t)l->n_slots, sizeof *l->slots);
  size_t max_chunk = 1;
  for (int i = 0; i < o->n_files; i++) {
    size_t per = tr_chunk_samples(o, &run->files[i]), n = (run->files[i].wav.n + per - 1) / per;
    if (n > l->max_chunks) l->max_chunks = n;
    if (per > max_chunk) max_chunk = per;
  }
  l->zeros = calloc(max_chunk, sizeof *l->zeros);
  bool mem = l->slots && l->zeros;
  size_t out = LWS_PRE + (max_chunk * sizeof(int16_t) > TR_CONFIG_MAX ? max_chunk * sizeof(int16_t)
                                                                      : TR_CONFIG_MAX);
  for (int i = 0; mem && i < l->n_slots; i++) {
    l->slots[i].l = l;
    l->slots[i].sent_ns = malloc((l->max_chunks + 1) * sizeof(uint64_t));
    l->slots[i].out = malloc(out);
    mem = l->slots[i].sent_ns && l->slots[i].out;
  }
  if (!mem) {
    fprintf(stderr, "hark transcribe: out of memory\n");
    return -1;
  }
  raise_fd_limit(l->n_slots);
  lws_set_log_level(0, NULL); /* every failure reaches a stream's report */
  l->ev = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
  if (!l->ev) {
    fprintf(stderr, "hark transcribe: cannot create an event loop (libev): %s\n", strerror(errno));
    return -1;
  }
  ev_init(&l->tick, on_tick);
  l->tick.data = l;
  void *loops[] = {l->ev};
  struct lws_context_creation_info info = {
      .port = CONTEXT_PORT_NO_LISTEN,
      .protocols = protocols,
      .gid = -1,
      .uid = -1,
      .options = LWS_SERVER_OPTION_LIBEV,
      .foreign_loops = loops,
      /* ours bound every wait; lws's own handshake timeout comes later */
      .timeout_secs = (unsigned)o->timeout_s + 5};
  l->ctx = lws_create_context(&info);
  if (!l->ctx)
    fprintf(stderr,
            "hark transcribe: cannot start libwebsockets on libev (is libwebsockets-evlib-ev "
            "installed?)\n");
  return l->ctx ? 0 : -1;
}

static void teardown(ws_loop *l) {
  if (l->ev) ev_timer_stop(l->ev, &l->tick);
  if (l->ctx) lws_context_destroy(l->ctx); /* closes what is still open, with callbacks */
  if (l->ev) ev_loop_destroy(l->ev);
  for (int i = 0; l->slots && i < l->n_slots; i++) {
    free(l->slots[i].sent_ns);
    free(l->slots[i].out);
    free(l->slots[i].msg);
    free(l->slots[i].last_partial);
  }
  free(l->slots);
  free(l->zeros);
}

int tr_ws_run(tr_run *run) {
  const tr_opts *o = run->o;
  ws_loop l;
  int rc = -1;
  if (setup(&l, run, o) == 0 && resolve(&l) == 0) {
    uint64_t t0 = now_ns();
    for (int i = 0; i < l.n_slots; i++)
      slot_assign(&l, &l.slots[i], t0 + tr_start_offset_ns(o, i, l.n_slots));
    run->started_ns = run->ended_ns = t0;
    wake_at(&l, t0);
    ev_run(l.ev, 0);
    rc = 0;
  }
  teardown(&l);
  return rc;
}

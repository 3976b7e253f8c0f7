/*
 * transcribe.c — `hark transcribe`: a streaming speech client over the
 * Vosk WebSocket protocol (here) or Riva's gRPC StreamingRecognize
 * (transcribe_grpc.c, the same jobs and report), modelled on Riva's
 * streaming ASR client.
 *
 * Every file is read once into memory. A run is a list of jobs (one stream
 * each: --iterations passes over max(--parallel, files) streams, cycling
 * through the files) served by --parallel slots, all on ONE thread and one
 * epoll loop: each slot holds a wsc connection, and when its stream ends
 * the slot takes the next job. A stream sends the config message, then the
 * PCM in --chunk-ms chunks — at real time on the loop's timers with
 * --simulate-realtime (slots start staggered across one chunk period),
 * else the next chunk as soon as the previous one's reply came — then
 * {"eof" : 1}. The server answers each message with exactly one JSON text
 * in order, so reply k belongs to message k: chunk latency is the time from
 * sending chunk k to its reply, final latency from sending eof to the
 * final result. transcribe_report.c prints what the jobs collected.
 */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "hostport.h"
#include "transcribe.h"
#include "wsc.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "hark transcribe sends host-order samples as little-endian PCM"
#endif

enum { EXIT_FAILED = 1, EXIT_USAGE = 2 };

#define TR_MAX_PARALLEL 10000
#define TR_MAX_EVENTS 256
#define TR_CLOSE_GRACE_NS 2000000000ull /* after the final, for the server's close */
#define TR_MAX_MESSAGE (4u << 20)

typedef enum slot_phase {
  SL_IDLE,      /* no job, or waiting for start_ns */
  SL_CONNECT,   /* TCP + upgrade */
  SL_STREAM,    /* sending audio */
  SL_DRAIN,     /* eof sent, waiting for the final */
  SL_CLOSE,     /* final received, waiting for the server to close */
} slot_phase;

typedef struct loop loop;

typedef struct slot {
  wsc ws;
  loop *l;
  bool ws_live;   /* ws needs wsc_free */
  bool ended;     /* on_closed fired: recycle after the loop iteration */
  bool timed_out; /* we aborted it for a missing reply */
  slot_phase phase;
  tr_job *job;
  const tr_file *file;
  uint64_t start_ns;    /* when to connect (stagger) */
  uint64_t phase_ns;    /* when the current phase began */
  uint64_t next_due_ns; /* --simulate-realtime: the next chunk's time */
  size_t n_chunks, sent, replies; /* binary messages; eof is message n_chunks */
  uint64_t *sent_ns;    /* n_chunks + 1 send times, owned */
  char *last_partial;   /* owned, for --interim */
} slot;

struct loop {
  tr_run *run;
  const tr_opts *o;
  int epfd;
  slot *slots;
  int n_slots;
  int next_job;
  struct sockaddr_storage addr;
  socklen_t addrlen;
  size_t max_chunks; /* of any file: sent_ns holds max_chunks + 1 */
  uint64_t chunk_ns;
  int16_t *zeros; /* one chunk of silence at the highest rate, for silent streams */
};

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- options ---------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: hark transcribe FILE.wav... [options]\n"
          "Streams WAV files (16-bit PCM) to harkd's Vosk-compatible WebSocket, or to its Riva\n"
          "StreamingRecognize over gRPC, and prints the transcripts, then a report like Riva's\n"
          "streaming client: RTFX, per-chunk latency (chunk sent -> its reply) and final\n"
          "latency (end of audio -> final result).\n\n"
          "  -s, --server URL          ws://HOST:PORT[/PATH] or HOST:PORT (default localhost:8000),\n"
          "                            or grpc://HOST:PORT (Riva's API; port 8001 when not given)\n"
          "  -m, --model M             stream to /v2/models/M/stream, or over gRPC ask for model M\n"
          "                            (default: the server's speech model; WebSocket: the URL's\n"
          "                            path, else /)\n"
          "      --language-code L     gRPC: the language asked for (default en-US)\n"
          "      --simulate-realtime   send each chunk at real time (default: the next chunk as\n"
          "                            soon as the previous one's reply came)\n"
          "      --chunk-ms MS         audio per message (default 100)\n"
          "  -p, --parallel N          streams at once, on one thread (default 1)\n"
          "  -n, --iterations K        passes over max(N, number of files) streams (default 1)\n"
          "      --interim             also print partial results when they change\n"
          "      --words               ask for word times and confidences, and print them\n"
          "      --silent-fraction F   send silence (zeros) instead of the file on this fraction\n"
          "                            of the streams, e.g. 0.9: 10%% speaking (default 0)\n"
          "      --timeout-secs S      fail a stream whose reply takes longer than S (default 10)\n"
          "      --json                print one JSON object on stdout instead of the text\n"
          "  -h, --help                this help\n\n"
          "Exit status: 0 every stream finished; 1 some stream failed (error or timeout);\n"
          "2 bad usage or an unreadable file.\n");
}

static int bad(const char *fmt, const char *arg) {
  fprintf(stderr, "hark transcribe: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(see hark transcribe --help)\n");
  return -1;
}

static bool parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = (int)v;
  return true;
}

/* The model name percent-encoded into /v2/models/{m}/stream. */
static void model_path(const char *model, char *out, size_t cap) {
  size_t n = (size_t)snprintf(out, cap, "/v2/models/");
  for (const unsigned char *p = (const unsigned char *)model; *p && n + 4 < cap; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("-._~", *p))
      out[n++] = (char)*p;
    else n += (size_t)snprintf(out + n, cap - n, "%%%02X", *p);
  }
  snprintf(out + n, cap - n, "/stream");
}

static int parse_server(tr_opts *o) {
  const char *s = o->server;
  if (strncmp(s, "wss://", 6) == 0 || strncmp(s, "https://", 8) == 0 || strncmp(s, "grpcs://", 8) == 0)
    return bad("'%s': TLS is not supported; use ws:// or grpc://", s);
  if (strncmp(s, "grpc://", 7) == 0) {
    o->grpc = true;
    s += 7;
    if (s[strcspn(s, "/")] || hark_split_hostport(s, "8001", o->host, sizeof o->host, o->port, sizeof o->port) < 0)
      return bad("bad --server '%s' (grpc://HOST:PORT)", o->server);
    bool v6 = strchr(o->host, ':') != NULL;
    snprintf(o->hostport, sizeof o->hostport, "%s%s%s:%s", v6 ? "[" : "", o->host, v6 ? "]" : "", o->port);
    return 0;
  }
  if (strncmp(s, "ws://", 5) == 0) s += 5;
  else if (strncmp(s, "http://", 7) == 0) s += 7;
  if (hark_split_hostport(s, "8000", o->host, sizeof o->host, o->port, sizeof o->port) < 0)
    return bad("bad --server '%s' (ws://HOST:PORT[/PATH])", o->server);
  size_t hp = strcspn(s, "/");
  snprintf(o->hostport, sizeof o->hostport, "%.*s", (int)hp, s);
  if (o->model) model_path(o->model, o->path, sizeof o->path);
  else snprintf(o->path, sizeof o->path, "%s", s[hp] ? s + hp : "/");
  return 0;
}

enum { O_REALTIME = 256, O_CHUNK, O_INTERIM, O_WORDS, O_JSON, O_TIMEOUT, O_SILENT, O_LANGUAGE };

static const struct option long_opts[] = {
    {"server", required_argument, NULL, 's'},
    {"model", required_argument, NULL, 'm'},
    {"language-code", required_argument, NULL, O_LANGUAGE},
    {"simulate-realtime", no_argument, NULL, O_REALTIME},
    {"chunk-ms", required_argument, NULL, O_CHUNK},
    {"parallel", required_argument, NULL, 'p'},
    {"iterations", required_argument, NULL, 'n'},
    {"interim", no_argument, NULL, O_INTERIM},
    {"words", no_argument, NULL, O_WORDS},
    {"silent-fraction", required_argument, NULL, O_SILENT},
    {"timeout-secs", required_argument, NULL, O_TIMEOUT},
    {"json", no_argument, NULL, O_JSON},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int parse_one(tr_opts *o, int c, const char *arg) {
  char *end;
  switch (c) {
  case 's': o->server = arg; return 0;
  case 'm': o->model = arg; return 0;
  case O_LANGUAGE: o->language = arg; return 0;
  case 'p': return parse_int(arg, 1, TR_MAX_PARALLEL, &o->parallel) ? 0 : bad("bad --parallel '%s'", arg);
  case 'n': return parse_int(arg, 1, 1000000, &o->iterations) ? 0 : bad("bad --iterations '%s'", arg);
  case O_CHUNK: return parse_int(arg, 1, 60000, &o->chunk_ms) ? 0 : bad("bad --chunk-ms '%s'", arg);
  case O_TIMEOUT: return parse_int(arg, 1, 86400, &o->timeout_s) ? 0 : bad("bad --timeout-secs '%s'", arg);
  case O_REALTIME: o->realtime = true; return 0;
  case O_INTERIM: o->interim = true; return 0;
  case O_WORDS: o->words = true; return 0;
  case O_JSON: o->json = true; return 0;
  case O_SILENT:
    errno = 0;
    o->silent_fraction = strtod(arg, &end);
    if (errno || end == arg || *end || !(o->silent_fraction >= 0 && o->silent_fraction <= 1))
      return bad("bad --silent-fraction '%s' (0 to 1)", arg);
    return 0;
  case 'h': usage(stdout); return 1;
  default: return bad("%s", "unknown option");
  }
}

static int parse_opts(int argc, char **argv, tr_opts *o) {
  *o = (tr_opts){.server = "localhost:8000", .language = "en-US", .chunk_ms = 100, .parallel = 1, .iterations = 1, .timeout_s = 10};
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":s:m:p:n:h", long_opts, NULL)) != -1) {
    if (c == '?') return bad("unknown option '%s'", argv[optind - 1]);
    if (c == ':') return bad("option '%s' needs a value", argv[optind - 1]);
    int rc = parse_one(o, c, optarg);
    if (rc) return rc;
  }
  o->files = (const char **)argv + optind;
  o->n_files = argc - optind;
  if (o->n_files == 0) return bad("%s", "no audio file given");
  return parse_server(o);
}

/* ---- setup ---------------------------------------------------------------- */

static int load_files(const tr_opts *o, tr_file *files) {
  char err[512];
  for (int i = 0; i < o->n_files; i++) {
    files[i].path = o->files[i];
    if (wavfile_read(o->files[i], &files[i].wav, err, sizeof err) < 0) {
      fprintf(stderr, "hark transcribe: %s\n", err);
      return -1;
    }
    files[i].seconds = (double)files[i].wav.n / files[i].wav.sample_rate;
  }
  return 0;
}

/* Picks the first address that accepts a connection, so that "localhost"
 * resolving to ::1 and 127.0.0.1 works whichever the server listens on. */
static int resolve(loop *l) {
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
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      memcpy(&l->addr, a->ai_addr, a->ai_addrlen);
      l->addrlen = a->ai_addrlen;
      close(fd);
      freeaddrinfo(ai);
      return 0;
    }
    err = errno;
    if (fd >= 0) close(fd);
  }
  freeaddrinfo(ai);
  fprintf(stderr, "hark transcribe: cannot connect to %s: %s\n", o->hostport, strerror(err));
  return -1;
}

/* Room for one file descriptor per stream. */
static void raise_fd_limit(int streams) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= (rlim_t)streams + 64) return;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > (rlim_t)streams + 64 ? (rlim_t)streams + 64 : rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
}

/* Spreads the silent streams evenly: job j is silent when the running
 * count floor((j+1)·F) steps up at j. */
static bool job_silent(int j, double f) { return (int)((j + 1) * f + 1e-9) > (int)(j * f + 1e-9); }

/* ---- one stream ------------------------------------------------------------- */

const char *tr_file_tag(const tr_file *f) {
  const char *p = strrchr(f->path, '/');
  return p ? p + 1 : f->path;
}

static void fail(slot *s, int code, const char *why) { wsc_abort(&s->ws, code, why); }

size_t tr_chunk_samples(const tr_opts *o, const tr_file *f) {
  size_t per = (size_t)f->wav.sample_rate * (size_t)o->chunk_ms / 1000;
  return per ? per : 1;
}

static void send_chunk(slot *s) {
  size_t per = tr_chunk_samples(s->l->o, s->file);
  size_t off = s->sent * per, n = s->file->wav.n - off < per ? s->file->wav.n - off : per;
  const int16_t *pcm = s->job->silent ? s->l->zeros : s->file->wav.samples + off;
  s->sent_ns[s->sent] = now_ns();
  s->sent++;
  if (wsc_send(&s->ws, WSC_OP_BINARY, pcm, n * sizeof *pcm) < 0 && s->ws.state != WSC_CLOSED)
    fail(s, WSC_CLOSE_ABNORMAL, "cannot send");
}

static void send_eof(slot *s) {
  static const char eof[] = "{\"eof\" : 1}";
  s->sent_ns[s->n_chunks] = now_ns();
  s->sent++;
  s->phase = SL_DRAIN;
  s->phase_ns = s->sent_ns[s->n_chunks];
  if (wsc_send(&s->ws, WSC_OP_TEXT, eof, sizeof eof - 1) < 0 && s->ws.state != WSC_CLOSED)
    fail(s, WSC_CLOSE_ABNORMAL, "cannot send");
}

/* The next message of a stream not paced at real time. */
static void send_next(slot *s) {
  if (s->sent < s->n_chunks) send_chunk(s);
  else if (s->sent == s->n_chunks) send_eof(s);
}

static void on_open(wsc *c) {
  slot *s = c->user;
  char cfg[128];
  int n = snprintf(cfg, sizeof cfg, "{\"config\": {\"sample_rate\": %d%s}}", s->file->wav.sample_rate,
                   s->l->o->words ? ", \"words\": true" : "");
  s->phase = SL_STREAM;
  s->phase_ns = now_ns();
  if (wsc_send(c, WSC_OP_TEXT, cfg, (size_t)n) < 0) {
    if (c->state != WSC_CLOSED) fail(s, WSC_CLOSE_ABNORMAL, "cannot send");
    return;
  }
  s->next_due_ns = s->phase_ns; /* realtime: the timer pass sends chunk 0 */
  if (!s->l->o->realtime) send_next(s);
}

static void append_final(tr_job *j, const char *text) {
  size_t old = j->transcript ? strlen(j->transcript) : 0, add = strlen(text);
  char *p = realloc(j->transcript, old + add + 2);
  if (!p) return;
  if (old) p[old++] = ' ';
  memcpy(p + old, text, add + 1);
  j->transcript = p;
}

static void print_words(const cJSON *result) {
  const cJSON *w;
  cJSON_ArrayForEach(w, result) {
    const cJSON *word = cJSON_GetObjectItemCaseSensitive(w, "word"),
                *start = cJSON_GetObjectItemCaseSensitive(w, "start"),
                *end = cJSON_GetObjectItemCaseSensitive(w, "end"),
                *conf = cJSON_GetObjectItemCaseSensitive(w, "conf");
    printf("    %-16s %7.2f %7.2f  conf %.3f\n", cJSON_IsString(word) ? word->valuestring : "?",
           cJSON_IsNumber(start) ? start->valuedouble : 0, cJSON_IsNumber(end) ? end->valuedouble : 0,
           cJSON_IsNumber(conf) ? conf->valuedouble : 0);
  }
}

void tr_partial(const tr_opts *o, const tr_file *f, const tr_job *j, const char *text, char **last) {
  if (!o->interim || o->json || (*last && strcmp(*last, text) == 0)) return;
  free(*last);
  *last = strdup(text);
  if (*text) printf("%s [stream %d] partial: %s\n", tr_file_tag(f), j->id, text);
}

void tr_final(const tr_opts *o, const tr_file *f, tr_job *j, const cJSON *doc) {
  const cJSON *text = cJSON_GetObjectItemCaseSensitive(doc, "text");
  if (!cJSON_IsString(text) || !*text->valuestring) return; /* no words in it */
  append_final(j, text->valuestring);
  if (o->json) {
    if (!j->finals) j->finals = cJSON_CreateArray();
    cJSON_AddItemToArray(j->finals, cJSON_Duplicate(doc, true));
    return;
  }
  printf("%s [stream %d] final: %s\n", tr_file_tag(f), j->id, text->valuestring);
  if (o->words) print_words(cJSON_GetObjectItemCaseSensitive(doc, "result"));
}

/* One reply: a partial or a final (which may be the eof's). */
static void handle_reply(slot *s, cJSON *doc) {
  const cJSON *partial = cJSON_GetObjectItemCaseSensitive(doc, "partial"),
              *text = cJSON_GetObjectItemCaseSensitive(doc, "text");
  if (cJSON_IsString(partial)) tr_partial(s->l->o, s->file, s->job, partial->valuestring, &s->last_partial);
  if (!cJSON_IsString(text)) return;
  free(s->last_partial);
  s->last_partial = NULL;
  tr_final(s->l->o, s->file, s->job, doc);
}

static void on_message(wsc *c, bool binary, const char *data, size_t len) {
  slot *s = c->user;
  uint64_t t = now_ns();
  if (binary) {
    fail(s, WSC_CLOSE_PROTOCOL, "binary message from the server");
    return;
  }
  if (s->replies >= s->sent) {
    fail(s, WSC_CLOSE_PROTOCOL, "a reply to no message");
    return;
  }
  cJSON *doc = cJSON_ParseWithLength(data, len);
  if (!cJSON_IsObject(doc)) {
    cJSON_Delete(doc);
    fail(s, WSC_CLOSE_PROTOCOL, "reply is not a JSON object");
    return;
  }
  size_t k = s->replies++;
  stats_series_push(k < s->n_chunks ? &s->l->run->chunk_ns : &s->l->run->final_ns, t - s->sent_ns[k]);
  handle_reply(s, doc);
  cJSON_Delete(doc);
  if (k == s->n_chunks) { /* the final: now the server closes */
    s->phase = SL_CLOSE;
    s->phase_ns = t;
    s->job->status = TR_OK;
    s->l->run->ended_ns = t; /* the wall clock stops at the last final, not at the close */
  } else if (!s->l->o->realtime) send_next(s);
}

static void on_closed(wsc *c, const wsc_close_info *info) {
  slot *s = c->user;
  tr_job *j = s->job;
  s->ended = true;
  if (j->status == TR_OK) return; /* however it closed, the stream got its final */
  j->status = s->timed_out ? TR_TIMEOUT : TR_ERROR;
  j->close_code = info->code;
  j->http_status = info->http_status;
  snprintf(j->reason, sizeof j->reason, "%s",
           info->by_server && info->code == WSC_CLOSE_NORMAL && !*info->reason ? "closed before the final result"
                                                                            : info->reason);
}

static const wsc_callbacks callbacks = {.on_open = on_open, .on_message = on_message, .on_closed = on_closed};

/* ---- slots: jobs, timers, the loop ------------------------------------------ */

/* Gives the slot the next job, to connect at `at`; or leaves it idle. */
static void slot_assign(loop *l, slot *s, uint64_t at) {
  s->job = NULL;
  s->phase = SL_IDLE;
  if (l->next_job >= l->run->n_jobs) return;
  s->job = &l->run->jobs[l->next_job++];
  s->file = &l->run->files[s->job->file];
  size_t per = tr_chunk_samples(l->o, s->file);
  s->n_chunks = (s->file->wav.n + per - 1) / per;
  s->sent = s->replies = 0;
  s->ended = s->timed_out = false;
  s->start_ns = at;
}

static void slot_connect(loop *l, slot *s, uint64_t now) {
  s->phase = SL_CONNECT;
  s->phase_ns = now;
  s->ws_live = true;
  if (wsc_connect(&s->ws, l->epfd, (const struct sockaddr *)&l->addr, l->addrlen, l->o->hostport, l->o->path,
                  TR_MAX_MESSAGE, &callbacks, s) < 0) {
    s->job->status = TR_ERROR;
    s->job->close_code = WSC_CLOSE_ABNORMAL;
    snprintf(s->job->reason, sizeof s->job->reason, "%s", s->ws.close.reason);
    s->ended = true;
  }
}

void tr_print_end(const tr_file *f, const tr_job *j) {
  if (j->status == TR_OK) {
    printf("%s [stream %d] transcript: %s\n", tr_file_tag(f), j->id, j->transcript ? j->transcript : "");
    return;
  }
  printf("%s [stream %d] %s: ", tr_file_tag(f), j->id, j->status == TR_TIMEOUT ? "timeout" : "error");
  if (j->http_status || j->grpc_status) printf("%s\n", j->reason);
  else printf("close %d: %s\n", j->close_code, j->reason);
}

/* A finished stream: account for it, free its connection, take the next job. */
static void slot_recycle(loop *l, slot *s, uint64_t now) {
  if (s->ws_live) wsc_free(&s->ws);
  s->ws_live = false;
  free(s->last_partial);
  s->last_partial = NULL;
  if (s->job->status == TR_PENDING) s->job->status = TR_ERROR; /* cannot happen; never count it ok */
  if (s->job->status == TR_OK) l->run->audio_seconds += s->file->seconds;
  if (!l->o->json) tr_print_end(s->file, s->job);
  if (s->job->status != TR_OK) l->run->ended_ns = now;
  slot_assign(l, s, now);
}

static void timeout(slot *s, const char *what) {
  char why[160];
  snprintf(why, sizeof why, "no %s within %d s", what, s->l->o->timeout_s);
  s->timed_out = true;
  fail(s, WSC_CLOSE_ABNORMAL, why);
}

static void earliest(uint64_t *wake, uint64_t t) {
  if (t < *wake) *wake = t;
}

/* Times out the stream when its oldest unanswered message waited too long. */
static void overdue(slot *s, uint64_t now, uint64_t limit, uint64_t *wake) {
  if (s->ws.state != WSC_OPEN || s->replies >= s->sent) return;
  uint64_t due = s->sent_ns[s->replies] + limit;
  if (now < due) earliest(wake, due);
  else timeout(s, s->replies < s->n_chunks ? "reply to a chunk" : "final result");
}

/* Runs the slot's due timers; lowers *wake to its next one. */
static void slot_timers(loop *l, slot *s, uint64_t now, uint64_t *wake) {
  uint64_t limit = (uint64_t)l->o->timeout_s * 1000000000u;
  switch (s->phase) {
  case SL_IDLE:
    if (!s->job) return;
    if (now >= s->start_ns) slot_connect(l, s, now);
    else earliest(wake, s->start_ns);
    if (s->phase == SL_CONNECT) earliest(wake, now + limit);
    return;
  case SL_CONNECT:
    if (now >= s->phase_ns + limit) timeout(s, "connection or handshake");
    else earliest(wake, s->phase_ns + limit);
    return;
  case SL_STREAM:
    if (l->o->realtime) {
      while (s->ws.state == WSC_OPEN && s->sent < s->n_chunks && s->next_due_ns <= now) {
        send_chunk(s);
        s->next_due_ns += l->chunk_ns;
      }
      if (s->ws.state == WSC_OPEN && s->sent == s->n_chunks) send_eof(s); /* the audio ends with its last chunk */
      else if (s->sent < s->n_chunks) earliest(wake, s->next_due_ns);
    }
    overdue(s, now, limit, wake);
    return;
  case SL_DRAIN: overdue(s, now, limit, wake); return;
  case SL_CLOSE: /* the server should close now; if it does not, we do */
    if (s->ws.state == WSC_OPEN && now >= s->phase_ns + TR_CLOSE_GRACE_NS) wsc_close(&s->ws, WSC_CLOSE_NORMAL, "");
    else if (s->ws.state == WSC_CLOSING && now >= s->phase_ns + 2 * TR_CLOSE_GRACE_NS)
      wsc_abort(&s->ws, WSC_CLOSE_ABNORMAL, "no close from the server");
    earliest(wake, s->phase_ns + (s->ws.state == WSC_OPEN ? 1 : 2) * TR_CLOSE_GRACE_NS);
    return;
  }
}

static int wait_ms(uint64_t now, uint64_t wake) {
  if (wake == UINT64_MAX) return -1;
  if (wake <= now) return 0;
  uint64_t ms = (wake - now + 999999) / 1000000; /* round up: never wake early and spin */
  return ms > 60000 ? 60000 : (int)ms;
}

static void run_loop(loop *l) {
  struct epoll_event ev[TR_MAX_EVENTS];
  for (;;) {
    uint64_t now = now_ns(), wake = UINT64_MAX;
    bool active = false;
    for (int i = 0; i < l->n_slots; i++) {
      slot *s = &l->slots[i];
      if (s->job && !s->ended) slot_timers(l, s, now, &wake);
      if (s->job && s->ended) slot_recycle(l, s, now), wake = now; /* the new job's timers run next pass */
      active |= s->job != NULL;
    }
    if (!active) return;
    int n = epoll_wait(l->epfd, ev, TR_MAX_EVENTS, wait_ms(now_ns(), wake));
    if (n < 0 && errno != EINTR) {
      perror("hark transcribe: epoll_wait");
      return;
    }
    for (int i = 0; i < n; i++) wsc_handle(ev[i].data.ptr, ev[i].events);
  }
}

/* ---- main ---------------------------------------------------------------------- */

/* The jobs: --iterations passes over max(--parallel, files) streams. */
static int setup_jobs(tr_run *run, const tr_opts *o) {
  int per_pass = o->parallel > o->n_files ? o->parallel : o->n_files;
  run->n_jobs = o->iterations * per_pass;
  run->jobs = calloc((size_t)run->n_jobs, sizeof *run->jobs);
  if (!run->jobs) return -1;
  for (int j = 0; j < run->n_jobs; j++)
    run->jobs[j] = (tr_job){.id = j, .file = j % o->n_files, .silent = job_silent(j, o->silent_fraction)};
  return 0;
}

static int setup(loop *l, tr_run *run, const tr_opts *o) {
  *l = (loop){.run = run, .o = o, .epfd = -1, .chunk_ns = (uint64_t)o->chunk_ms * 1000000u};
  l->n_slots = o->parallel < run->n_jobs ? o->parallel : run->n_jobs;
  l->slots = calloc((size_t)l->n_slots, sizeof *l->slots);
  size_t max_chunk = 1;
  for (int i = 0; i < o->n_files; i++) {
    size_t per = tr_chunk_samples(o, &run->files[i]), n = (run->files[i].wav.n + per - 1) / per;
    if (n > l->max_chunks) l->max_chunks = n;
    if (per > max_chunk) max_chunk = per;
  }
  l->zeros = calloc(max_chunk, sizeof *l->zeros);
  if (!l->slots || !l->zeros) return -1;
  for (int i = 0; i < l->n_slots; i++) {
    l->slots[i].l = l;
    l->slots[i].sent_ns = malloc((l->max_chunks + 1) * sizeof(uint64_t));
    if (!l->slots[i].sent_ns) return -1;
  }
  l->epfd = epoll_create1(EPOLL_CLOEXEC);
  return l->epfd < 0 ? -1 : 0;
}

static void teardown(loop *l, tr_run *run) {
  for (int i = 0; l->slots && i < l->n_slots; i++) {
    if (l->slots[i].ws_live) wsc_free(&l->slots[i].ws);
    free(l->slots[i].sent_ns);
    free(l->slots[i].last_partial);
  }
  free(l->slots);
  free(l->zeros);
  if (l->epfd >= 0) close(l->epfd);
  for (int j = 0; run->jobs && j < run->n_jobs; j++) {
    free(run->jobs[j].transcript);
    cJSON_Delete(run->jobs[j].finals);
  }
  free(run->jobs);
  for (int i = 0; run->files && i < run->o->n_files; i++) wavfile_free(&run->files[i].wav);
  free(run->files);
  stats_series_free(&run->chunk_ns);
  stats_series_free(&run->final_ns);
}

int hark_transcribe_main(int argc, char **argv) {
  tr_opts o;
  int rc = parse_opts(argc, argv, &o);
  if (rc) return rc > 0 ? 0 : EXIT_USAGE;
  tr_run run = {.o = &o, .files = calloc((size_t)o.n_files, sizeof(tr_file))};
  loop l = {.epfd = -1};
  rc = EXIT_USAGE;
  if (!run.files || load_files(&o, run.files) < 0) goto out;
  rc = EXIT_FAILED;
  if (setup_jobs(&run, &o) < 0) {
    fprintf(stderr, "hark transcribe: out of memory\n");
    goto out;
  }
  if (o.grpc) {
    if (tr_grpc_run(&run, run.files) < 0) goto out;
    goto report;
  }
  if (setup(&l, &run, &o) < 0) {
    fprintf(stderr, "hark transcribe: out of memory or file descriptors\n");
    goto out;
  }
  raise_fd_limit(l.n_slots);
  if (resolve(&l) < 0) goto out;
  uint64_t t0 = now_ns();
  for (int i = 0; i < l.n_slots; i++) /* stagger real-time streams over one chunk period */
    slot_assign(&l, &l.slots[i], t0 + (o.realtime ? l.chunk_ns * (uint64_t)i / (uint64_t)l.n_slots : 0));
  run.started_ns = run.ended_ns = t0;
  run_loop(&l);
report:
  tr_report(&run);
  rc = 0;
  for (int j = 0; j < run.n_jobs; j++)
    if (run.jobs[j].status != TR_OK) rc = EXIT_FAILED;
out:
  teardown(&l, &run);
  return rc;
}

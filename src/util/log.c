/*
 * log.c — leveled stderr logging. Each line is formatted into a stack
 * buffer and leaves in one write(), so lines from different threads never
 * interleave mid-line and nothing is locked. The ids a line carries come
 * from a thread-local context the workers and front ends set while they
 * work for one request or stream; reading it costs nothing extra.
 */
#include "util/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 8192
#define MSG_MAX_BYTES 4096

/* Bit per level: error, warning, info on; verbose off. */
static atomic_uint enabled_mask =
    (1u << HARK_LOG_ERROR) | (1u << HARK_LOG_WARN) | (1u << HARK_LOG_INFO);
static atomic_int log_format = HARK_LOG_FORMAT_DEFAULT;
static atomic_int verbose_level; /* as set; verbose lines are on above 0 */

static _Thread_local hark_log_context tls_ctx;
static _Thread_local long tls_tid;

void hark_log_set_level(hark_log_level level) {
  unsigned mask = 0;
  for (int l = HARK_LOG_ERROR; l <= (int)level && l <= HARK_LOG_VERBOSE; l++) mask |= 1u << l;
  atomic_store(&enabled_mask, mask);
}

void hark_log_set_enabled(hark_log_level level, bool on) {
  if (on)
    atomic_fetch_or(&enabled_mask, 1u << level);
  else
    atomic_fetch_and(&enabled_mask, ~(1u << level));
}

void hark_log_set_verbose(int verbose) {
  atomic_store(&verbose_level, verbose > 0 ? verbose : 0);
  hark_log_set_enabled(HARK_LOG_VERBOSE, verbose > 0);
}

int hark_log_verbose_level(void) {
  if (!hark_log_enabled(HARK_LOG_VERBOSE)) return 0;
  int n = atomic_load(&verbose_level);
  return n > 0 ? n : 1; /* turned on by hark_log_set_level */
}

hark_log_format hark_log_get_format(void) { return (hark_log_format)atomic_load(&log_format); }

void hark_log_set_format(hark_log_format format) { atomic_store(&log_format, (int)format); }

bool hark_log_parse_format(const char *s, hark_log_format *out) {
  static const struct {
    const char *name;
    hark_log_format f;
  } names[] = {{"default", HARK_LOG_FORMAT_DEFAULT},
               {"ISO8601", HARK_LOG_FORMAT_ISO8601},
               {"json", HARK_LOG_FORMAT_JSON}};
  for (size_t i = 0; s && i < sizeof names / sizeof *names; i++)
    if (strcasecmp(s, names[i].name) == 0) {
      *out = names[i].f;
      return true;
    }
  return false;
}

const char *hark_log_format_name(hark_log_format format) {
  switch (format) {
  case HARK_LOG_FORMAT_ISO8601: return "ISO8601";
  case HARK_LOG_FORMAT_JSON: return "json";
  default: return "default";
  }
}

int hark_log_enabled(hark_log_level level) {
  return (unsigned)level <= HARK_LOG_VERBOSE && (atomic_load(&enabled_mask) >> level) & 1u;
}

/* ---- context --------------------------------------------------------------- */

static void copy_id(char *dst, size_t cap, const char *src) {
  if (!src) src = "";
  size_t n = strnlen(src, cap - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

void hark_log_context_set(const char *request_id, const char *sequence_id) {
  copy_id(tls_ctx.request_id, sizeof tls_ctx.request_id, request_id);
  copy_id(tls_ctx.sequence_id, sizeof tls_ctx.sequence_id, sequence_id);
}

void hark_log_context_set_stream(const char *stream_id) {
  copy_id(tls_ctx.stream_id, sizeof tls_ctx.stream_id, stream_id);
}

void hark_log_context_save(hark_log_context *out) { *out = tls_ctx; }
void hark_log_context_restore(const hark_log_context *saved) { tls_ctx = *saved; }
void hark_log_context_clear(void) { memset(&tls_ctx, 0, sizeof tls_ctx); }

/* ---- formatting ------------------------------------------------------------ */

typedef struct line {
  char buf[LINE_MAX_BYTES];
  size_t len;
} line;

static void put(line *l, const char *s, size_t n) {
  size_t room = sizeof l->buf - 1 - l->len; /* one byte kept for the newline */
  if (n > room) n = room;
  memcpy(l->buf + l->len, s, n);
  l->len += n;
}

static void puts_(line *l, const char *s) { put(l, s, strlen(s)); }

static void putf(line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(line *l, const char *fmt, ...) {
  char tmp[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0) put(l, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if none. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  size_t need;
  if (s[0] < 0x80) return 1;
  if (s[0] >= 0xc2 && s[0] <= 0xdf)
    need = 2;
  else if (s[0] >= 0xe0 && s[0] <= 0xef)
    need = 3;
  else if (s[0] >= 0xf0 && s[0] <= 0xf4)
    need = 4;
  else
    return 0;
  if (n < need) return 0;
  for (size_t i = 1; i < need; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  if (s[0] == 0xe0 && s[1] < 0xa0) return 0;  /* overlong */
  if (s[0] == 0xed && s[1] >= 0xa0) return 0; /* surrogate */
  if (s[0] == 0xf0 && s[1] < 0x90) return 0;
  if (s[0] == 0xf4 && s[1] >= 0x90) return 0;
  return need;
}

/* A JSON string: quotes, escapes, and U+FFFD for bytes that are not UTF-8,
 * so every line parses whatever a message quotes. A string that would
 * leave fewer than `keep` bytes of the line free is cut, whole escapes and
 * characters only, and ends in "...". */
static void put_jstr(line *l, const char *s, size_t keep) {
  const unsigned char *p = (const unsigned char *)s;
  size_t n = strlen(s);
  size_t limit = sizeof l->buf - 1 - keep - 5; /* room for ...", the newline */
  put(l, "\"", 1);
  while (n > 0) {
    unsigned char c = *p;
    char esc[8];
    const char *piece = esc;
    size_t k = 1, len;
    if (c == '"' || c == '\\') {
      esc[0] = '\\';
      esc[1] = (char)c;
      len = 2;
    } else if (c == '\n') {
      piece = "\\n";
      len = 2;
    } else if (c == '\t') {
      piece = "\\t";
      len = 2;
    } else if (c < 0x20 || c == 0x7f) {
      len = (size_t)snprintf(esc, sizeof esc, "\\u%04x", c);
    } else if ((k = utf8_len(p, n)) == 0) {
      piece = "\\ufffd";
      len = 6;
      k = 1;
    } else {
      piece = (const char *)p;
      len = k;
    }
    if (l->len + len > limit) {
      put(l, "...", 3);
      break;
    }
    put(l, piece, len);
    p += k;
    n -= k;
  }
  put(l, "\"", 1);
}

/* "/work/main/src/sched/dynamic.c" -> "sched/dynamic.c". */
static const char *short_file(const char *file) {
  const char *last = NULL, *prev = NULL;
  for (const char *p = file; *p; p++)
    if (*p == '/') {
      prev = last;
      last = p;
    }
  return prev ? prev + 1 : last ? last + 1 : file;
}

static long thread_id(void) {
  if (!tls_tid) tls_tid = (long)syscall(SYS_gettid);
  return tls_tid;
}

static void put_ids_text(line *l) {
  const hark_log_context *c = &tls_ctx;
  if (!c->request_id[0] && !c->sequence_id[0] && !c->stream_id[0]) return;
  bool sep = false;
  put(l, "[", 1);
  if (c->request_id[0]) {
    putf(l, "request_id=%s", c->request_id);
    sep = true;
  }
  if (c->sequence_id[0]) {
    putf(l, "%ssequence_id=%s", sep ? " " : "", c->sequence_id);
    sep = true;
  }
  if (c->stream_id[0]) putf(l, "%sstream_id=%s", sep ? " " : "", c->stream_id);
  put(l, "] ", 2);
}

static void format_text(line *l, hark_log_format fmt, hark_log_level level, const char *file,
                        int lineno, const char *msg) {
  static const char tag[] = "EWIV";
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  if (fmt == HARK_LOG_FORMAT_ISO8601)
    putf(l, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %c %ld", tm.tm_year + 1900, tm.tm_mon + 1,
         tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, tag[level],
         thread_id());
  else
    putf(l, "%c%02d%02d %02d:%02d:%02d.%06ld %ld", tag[level], tm.tm_mon + 1, tm.tm_mday,
         tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000, thread_id());
  if (file) putf(l, " %s:%d", short_file(file), lineno);
  put(l, "] ", 2);
  put_ids_text(l);
  puts_(l, msg);
}

static void format_json(line *l, hark_log_level level, const char *file, int lineno,
                        const char *msg) {
  static const char *const names[] = {"ERROR", "WARNING", "INFO", "VERBOSE"};
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  putf(l, "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ\",\"level\":\"%s\",\"thread\":%ld",
       tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
       ts.tv_nsec / 1000, names[level], thread_id());
  if (file) {
    puts_(l, ",\"file\":");
    put_jstr(l, short_file(file), 1024);
    putf(l, ",\"line\":%d", lineno);
  }
  puts_(l, ",\"message\":");
  put_jstr(l, msg, 3 * (6 * sizeof tls_ctx.request_id + 32));
  const hark_log_context *c = &tls_ctx;
  const struct {
    const char *key, *value;
  } ids[] = {
      {"request_id", c->request_id}, {"sequence_id", c->sequence_id}, {"stream_id", c->stream_id}};
  for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
    if (!ids[i].value[0]) continue;
    putf(l, ",\"%s\":", ids[i].key);
    put_jstr(l, ids[i].value, 2);
  }
  put(l, "}", 1);
}

static void write_all(const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(STDERR_FILENO, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= (size_t)w;
  }
}

static void logv(hark_log_level level, const char *file, int lineno, const char *fmt, va_list ap) {
  if (!hark_log_enabled(level)) return;
  char msg[MSG_MAX_BYTES];
  vsnprintf(msg, sizeof msg, fmt, ap);
  line l;
  l.len = 0;
  hark_log_format f = (hark_log_format)atomic_load(&log_format);
  if (f == HARK_LOG_FORMAT_JSON)
    format_json(&l, level, file, lineno, msg);
  else
    format_text(&l, f, level, file, lineno, msg);
  l.buf[l.len++] = '\n';
  write_all(l.buf, l.len);
}

void hark_log(hark_log_level level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  logv(level, NULL, 0, fmt, ap);
  va_end(ap);
}

void hark_log_at(hark_log_level level, const char *file, int lineno, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  logv(level, file, lineno, fmt, ap);
  va_end(ap);
}

void hark_log_atv(hark_log_level level, const char *file, int lineno, const char *fmt, va_list ap) {
  logv(level, file, lineno, fmt, ap);
}

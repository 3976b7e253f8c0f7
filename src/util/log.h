/*
 * log.h — leveled logging to stderr, one write() per line, safe from any
 * thread. Three formats, as Triton's --log-format:
 *   default  I1121 17:16:00.123456 4242 sched/dynamic.c:277] [request_id=abc] message
 *   ISO8601  2026-11-21T17:16:00.123Z I 4242 sched/dynamic.c:277] [request_id=abc] message
 *   json     {"time":"2026-11-21T17:16:00.123456Z","level":"INFO","thread":4242,
 *             "file":"sched/dynamic.c","line":277,"message":"...","request_id":"abc"}
 * (times in UTC, 4242 the thread id). A line written while the thread has
 * a log context (a request, a sequence or a stream it works for) carries
 * those ids; without one the bracket / keys are left out.
 */
#ifndef HARK_LOG_H
#define HARK_LOG_H

#include <stdarg.h>
#include <stdbool.h>

typedef enum hark_log_level {
  HARK_LOG_ERROR = 0,
  HARK_LOG_WARN,
  HARK_LOG_INFO,
  HARK_LOG_VERBOSE,
} hark_log_level;

typedef enum hark_log_format {
  HARK_LOG_FORMAT_DEFAULT = 0,
  HARK_LOG_FORMAT_ISO8601,
  HARK_LOG_FORMAT_JSON,
} hark_log_format;

/* Errors, warnings and info on, verbose off, until told otherwise. */
void hark_log_set_level(hark_log_level level);            /* that level and the more severe */
void hark_log_set_enabled(hark_log_level level, bool on); /* --log-info/-warning/-error */
void hark_log_set_verbose(int verbose);                   /* --log-verbose N; 0 = off */
void hark_log_set_format(hark_log_format format);
/* "default", "ISO8601" or "json" (any case); false for anything else. */
bool hark_log_parse_format(const char *s, hark_log_format *out);
int hark_log_enabled(hark_log_level level);
/* What was last set, for Triton's log settings API: the verbose level
 * (any level above 0 turns verbose lines on), the format and its name. */
int hark_log_verbose_level(void);
hark_log_format hark_log_get_format(void);
const char *hark_log_format_name(hark_log_format format);

void hark_log(hark_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* As hark_log, naming the source line (the macros below pass it). */
void hark_log_at(hark_log_level level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* As hark_log_at, with the arguments in a va_list (the backend API's
 * hark_backend_log, in core/backends.c, passes its own on). */
void hark_log_atv(hark_log_level level, const char *file, int line, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/*
 * The calling thread's log context: ids its lines carry until changed.
 * Strings are copied (long ones truncated); NULL or "" clears that id.
 * Workers set it around each batch (sched.c), the WebSocket front end
 * around each stream's lines. Save and restore around nested work.
 */
#define HARK_LOG_ID_MAX 128
typedef struct hark_log_context {
  char request_id[HARK_LOG_ID_MAX];
  char sequence_id[48];
  char stream_id[48];
} hark_log_context;

void hark_log_context_set(const char *request_id, const char *sequence_id);
void hark_log_context_set_stream(const char *stream_id);
void hark_log_context_save(hark_log_context *out);
void hark_log_context_restore(const hark_log_context *saved);
void hark_log_context_clear(void);

#define HARK_LOG_AT_(level, ...)                                                      \
  do {                                                                                \
    if (hark_log_enabled(level)) hark_log_at(level, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define HARK_ERROR(...) HARK_LOG_AT_(HARK_LOG_ERROR, __VA_ARGS__)
#define HARK_WARN(...) HARK_LOG_AT_(HARK_LOG_WARN, __VA_ARGS__)
#define HARK_INFO(...) HARK_LOG_AT_(HARK_LOG_INFO, __VA_ARGS__)
#define HARK_VERBOSE(...) HARK_LOG_AT_(HARK_LOG_VERBOSE, __VA_ARGS__)

/* A line about one stream: `sid` is its stream id for this line only. */
#define HARK_LOG_STREAM(level, sid, ...)                   \
  do {                                                     \
    if (hark_log_enabled(level)) {                         \
      hark_log_context saved_;                             \
      hark_log_context_save(&saved_);                      \
      hark_log_context_set_stream(sid);                    \
      hark_log_at(level, __FILE__, __LINE__, __VA_ARGS__); \
      hark_log_context_restore(&saved_);                   \
    }                                                      \
  } while (0)

#endif

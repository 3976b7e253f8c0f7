/*
 * log.h — leveled logging to stderr, one line per call, safe from any
 * thread. Format: "2026-11-21T17:16:00.123Z I harkd: message".
 */
#ifndef HARK_LOG_H
#define HARK_LOG_H

typedef enum hark_log_level {
  HARK_LOG_ERROR = 0,
  HARK_LOG_WARN,
  HARK_LOG_INFO,
  HARK_LOG_VERBOSE,
} hark_log_level;

void hark_log_set_level(hark_log_level level);
int hark_log_enabled(hark_log_level level);
void hark_log(hark_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define HARK_ERROR(...) hark_log(HARK_LOG_ERROR, __VA_ARGS__)
#define HARK_WARN(...) hark_log(HARK_LOG_WARN, __VA_ARGS__)
#define HARK_INFO(...) hark_log(HARK_LOG_INFO, __VA_ARGS__)
#define HARK_VERBOSE(...) \
  do { if (hark_log_enabled(HARK_LOG_VERBOSE)) hark_log(HARK_LOG_VERBOSE, __VA_ARGS__); } while (0)

#endif

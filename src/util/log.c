/*
 * log.c — leveled stderr logging. One fprintf per line, so lines from
 * different threads never interleave mid-line (stdio locks the stream).
 */
#include "util/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

static atomic_int log_level = HARK_LOG_INFO;

void hark_log_set_level(hark_log_level level) { atomic_store(&log_level, (int)level); }

int hark_log_enabled(hark_log_level level) { return (int)level <= atomic_load(&log_level); }

void hark_log(hark_log_level level, const char *fmt, ...) {
  static const char tag[] = "EWIV";
  if (!hark_log_enabled(level)) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %c %s\n", tm.tm_year + 1900,
          tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
          ts.tv_nsec / 1000000, tag[level], msg);
}

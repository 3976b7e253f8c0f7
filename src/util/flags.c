/*
 * flags.c — the flag table's parser and --help printer (flags.h). The
 * parser builds getopt_long's option array from the rows (a row's alias
 * is a second entry with the same index), then stores each value by the
 * row's kind; the printer lays the rows out in two columns.
 */
#include "util/flags.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/alloc.h"

#define HELP_COLUMN 30 /* where each flag's help starts in --help */

bool hark_flag_int(const hark_flag *f, const char *prog, const char *val, long *out, FILE *err) {
  char *end;
  errno = 0;
  long v = strtol(val, &end, 10);
  if (!*val || *end || errno == ERANGE || v < f->min || v > f->max) {
    fprintf(err, "%s: --%s expects a number in [%ld, %ld], got '%s'\n", prog, f->name, f->min,
            f->max, val);
    return false;
  }
  *out = v;
  return true;
}

static bool set_bool(const hark_flag *f, const char *prog, const char *val, bool *out, FILE *err) {
  if (f->kind == HARK_FLAG_BOOL) {
    *out = !strcasecmp(val, "true") || !strcmp(val, "1") || !strcasecmp(val, "on");
    return true;
  }
  if (!strcmp(val, "true") || !strcmp(val, "1") || !strcmp(val, "on")) {
    *out = true;
    return true;
  }
  if (!strcmp(val, "false") || !strcmp(val, "0") || !strcmp(val, "off")) {
    *out = false;
    return true;
  }
  fprintf(err, "%s: --%s expects true or false, got '%s'\n", prog, f->name, val);
  return false;
}

/* Stores v into the 4- or 8-byte integer member at p: the rows' ranges keep
 * v within both the signed and the unsigned type of that width. */
static void store_int(void *p, size_t size, long v) {
  if (size == sizeof(int32_t)) {
    int32_t x = (int32_t)v;
    memcpy(p, &x, sizeof x);
  } else {
    int64_t x = v;
    memcpy(p, &x, sizeof x);
  }
}

static bool set_one(const hark_flag *f, void *opts, const char *prog, const char *val, FILE *err) {
  char *p = (char *)opts + f->offset;
  switch (f->kind) {
  case HARK_FLAG_STR: memcpy(p, &val, sizeof val); return true;
  case HARK_FLAG_BOOL:
  case HARK_FLAG_STRICT_BOOL: return set_bool(f, prog, val, (bool *)p, err);
  case HARK_FLAG_INT: {
    long v;
    if (!hark_flag_int(f, prog, val, &v, err)) return false;
    store_int(p, f->size, v * (f->scale ? f->scale : 1));
    return true;
  }
  case HARK_FLAG_FN: return f->set(opts, f, val, err);
  }
  return false;
}

int hark_flags_parse(const hark_flag *tab, size_t n, void *opts, const char *prog, int argc,
                     char **argv, int *first_arg, FILE *err) {
  /* Each row, its alias, --help and the terminator. */
  struct option *o = hark_xcalloc(2 * n + 2, sizeof *o);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    o[k++] = (struct option){tab[i].name, required_argument, NULL, (int)i + 1};
    if (tab[i].alias) o[k++] = (struct option){tab[i].alias, required_argument, NULL, (int)i + 1};
  }
  const int help = (int)n + 1;
  o[k++] = (struct option){"help", no_argument, NULL, help};
  int rc = HARK_FLAGS_OK, c;
  optind = 0; /* glibc: start afresh (a second parse in one process) */
  while (rc == HARK_FLAGS_OK && (c = getopt_long(argc, argv, "", o, NULL)) != -1) {
    if (c == help)
      rc = HARK_FLAGS_HELP;
    else if (c < 1 || c > (int)n)
      rc = HARK_FLAGS_USAGE;
    else if (!set_one(&tab[c - 1], opts, prog, optarg, err))
      rc = HARK_FLAGS_BAD;
  }
  *first_arg = optind;
  free(o);
  return rc;
}

void hark_flags_usage(const hark_flag *tab, size_t n, const char *head, FILE *f) {
  fputs(head, f);
  for (size_t i = 0; i < n; i++) {
    int w =
        fprintf(f, "  --%s%s%s", tab[i].name, tab[i].arg ? " " : "", tab[i].arg ? tab[i].arg : "");
    const char *s = tab[i].help;
    if (*s == '\n') /* the help starts on a line of its own */
      fprintf(f, "\n%*s", HELP_COLUMN, ""), s++;
    else
      fprintf(f, "%*s", w < HELP_COLUMN ? HELP_COLUMN - w : 2, "");
    while (*s) {
      const char *nl = strchr(s, '\n');
      size_t len = nl ? (size_t)(nl - s) : strlen(s);
      fprintf(f, "%.*s\n", (int)len, s);
      s += len + (nl != NULL);
      if (*s) fprintf(f, "%*s", HELP_COLUMN, "");
    }
  }
}

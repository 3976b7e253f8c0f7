/*
 * flags.h — a program's command-line flags as one table, as nginx writes
 * its directives (ngx_command_t) and src/core/config_walk.h the fields of
 * config.pbtxt: one row per flag says its name, the kind of value it
 * takes, the range a number must fall in, where in the program's options
 * struct the value goes, and its --help text. The parser (getopt_long, so
 * --name=value, --name value and unambiguous prefixes all work) and the
 * --help printer both read the table, so adding a flag is adding a row.
 */
#ifndef HARK_FLAGS_H
#define HARK_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum hark_flag_kind {
  HARK_FLAG_STR,         /* a const char * pointing into argv */
  HARK_FLAG_BOOL,        /* true, 1 or on (any case) is true; anything else false */
  HARK_FLAG_STRICT_BOOL, /* true/1/on or false/0/off, else an error (TLS: a typo must
                            not leave a port plain) */
  HARK_FLAG_INT,         /* a base-10 integer in [min, max], times scale, into an
                            integer member of 4 or 8 bytes */
  HARK_FLAG_FN,          /* the row's set function parses and stores it */
} hark_flag_kind;

typedef struct hark_flag hark_flag;
/* Parses val and stores it into opts; on a bad value writes one line to err
 * ("prog: --name ...") and returns false. */
typedef bool (*hark_flag_set_fn)(void *opts, const hark_flag *f, const char *val, FILE *err);

struct hark_flag {
  const char *name;  /* without the leading "--" */
  const char *alias; /* another name for the same flag, or NULL */
  const char *arg;   /* the value's name in --help: N, DIR, BOOL ... */
  hark_flag_kind kind;
  size_t offset, size; /* where in opts the value goes, and its width */
  long min, max;       /* HARK_FLAG_INT, and FN rows that call hark_flag_int() */
  long scale;          /* HARK_FLAG_INT: stored = given * scale (0: 1) */
  hark_flag_set_fn set;
  const char *help; /* its lines, '\n'-separated; the default in each */
};

#define HARK_FLAG_MEMBER(st, m) .offset = offsetof(st, m), .size = sizeof(((st *)0)->m)

/* Returned by hark_flags_parse: all read; --help; a value its row refused
 * (err says why); a command line of the wrong shape (an unknown flag, a
 * flag without its value: getopt said which), for which --help helps. */
enum { HARK_FLAGS_OK = 0, HARK_FLAGS_HELP = 1, HARK_FLAGS_BAD = 2, HARK_FLAGS_USAGE = 3 };

/* Parses argv's flags (and --help) into opts. Errors name the flag, the
 * value and what it accepts, on err, prefixed with prog; an unknown flag
 * is getopt's message. Arguments left over are the caller's: *first_arg
 * is the index of the first one (argc when none). */
int hark_flags_parse(const hark_flag *tab, size_t n, void *opts, const char *prog, int argc,
                     char **argv, int *first_arg, FILE *err);

/* Writes --help: head, then one entry per row ("  --name ARG" and its
 * help, continuation lines indented to the help's column). */
void hark_flags_usage(const hark_flag *tab, size_t n, const char *head, FILE *f);

/* For set functions: val as a base-10 integer in [f->min, f->max], or an
 * error naming the flag, the value and the range. */
bool hark_flag_int(const hark_flag *f, const char *prog, const char *val, long *out, FILE *err);

#endif

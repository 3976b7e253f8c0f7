/*
 * tokens.c — a model's tokens.txt: one `<token> <id>` a line (the token
 * is everything before the last space), ids 0..n-1 each exactly once, as
 * icefall and sherpa write it. A BPE piece that begins with U+2581 ("▁")
 * begins a word; `<blk>`/`<blank>` is the CTC blank; `<...>` symbols
 * (<unk>, <sos/eos>) never reach text; `<0xNN>` is a raw byte (byte-level
 * BPE). A vocabulary in which no piece marks a word start (characters, as
 * Chinese models have) makes every token a word of its own.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "asr.h"

#define WORD_MARK "\xe2\x96\x81" /* U+2581 */
#define MAX_TOKENS 1000000u

void asr_tokens_free(asr_tokens *t) {
  if (t->text)
    for (uint32_t i = 0; i < t->n; i++) free(t->text[i]);
  free(t->text);
  free(t->starts);
  free(t->skip);
  memset(t, 0, sizeof *t);
}

static int grow(asr_tokens *t, uint32_t need, uint32_t *cap) {
  if (need <= *cap) return 0;
  uint32_t c = *cap ? *cap * 2 : 256;
  while (c < need) c *= 2;
  char **x = realloc(t->text, c * sizeof *x);
  if (!x) return -1;
  t->text = x;
  uint8_t *s = realloc(t->starts, c), *k = x ? realloc(t->skip, c) : NULL;
  if (s) t->starts = s;
  if (k) t->skip = k;
  if (!s || !k) return -1;
  for (uint32_t i = *cap; i < c; i++) {
    t->text[i] = NULL;
    t->starts[i] = t->skip[i] = 0;
  }
  *cap = c;
  return 0;
}

/* The piece's text: the word mark dropped, <0xNN> as its byte. */
static char *piece_text(const char *tok, uint8_t *starts, uint8_t *skip) {
  size_t ml = strlen(WORD_MARK);
  *starts = !strncmp(tok, WORD_MARK, ml);
  if (*starts) tok += ml;
  unsigned byte;
  char tail;
  if (strlen(tok) == 6 && sscanf(tok, "<0x%2X%c", &byte, &tail) == 2 && tail == '>') {
    char *b = malloc(2);
    if (b) b[0] = (char)byte, b[1] = 0;
    return b;
  }
  size_t l = strlen(tok);
  *skip = l >= 2 && tok[0] == '<' && tok[l - 1] == '>';
  return strdup(tok);
}

int asr_tokens_load(asr_tokens *t, const char *path, char *err, size_t errlen) {
  memset(t, 0, sizeof *t);
  t->blank = -1;
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    return -1;
  }
  char line[1024];
  uint32_t cap = 0, lineno = 0, seen = 0;
  int rc = 0;
  bool any_mark = false;
  while (rc == 0 && fgets(line, sizeof line, f)) {
    lineno++;
    size_t l = strlen(line);
    if (l == sizeof line - 1 && line[l - 1] != '\n') {
      snprintf(err, errlen, "%s:%u: line longer than %zu bytes", path, lineno, sizeof line - 2);
      rc = -1;
      break;
    }
    while (l && (line[l - 1] == '\n' || line[l - 1] == '\r')) line[--l] = 0;
    if (!l) continue;
    char *sp = strrchr(line, ' ');
    if (!sp || sp == line) {
      snprintf(err, errlen, "%s:%u: expected '<token> <id>', got '%s'", path, lineno, line);
      rc = -1;
      break;
    }
    *sp = 0;
    char *end;
    errno = 0;
    long id = strtol(sp + 1, &end, 10);
    if (!sp[1] || *end || errno || id < 0 || id >= (long)MAX_TOKENS) {
      snprintf(err, errlen, "%s:%u: id '%s' is not a whole number 0..%u", path, lineno, sp + 1,
               MAX_TOKENS - 1);
      rc = -1;
      break;
    }
    if (grow(t, (uint32_t)id + 1, &cap) != 0) {
      snprintf(err, errlen, "%s: out of memory", path);
      rc = -1;
      break;
    }
    if (t->text[id]) {
      snprintf(err, errlen, "%s:%u: id %ld given twice", path, lineno, id);
      rc = -1;
      break;
    }
    t->text[id] = piece_text(line, &t->starts[id], &t->skip[id]);
    if (!t->text[id]) {
      snprintf(err, errlen, "%s: out of memory", path);
      rc = -1;
      break;
    }
    any_mark |= t->starts[id];
    if (!strcmp(line, "<blk>") || !strcmp(line, "<blank>")) t->blank = id;
    if ((uint32_t)id + 1 > t->n) t->n = (uint32_t)id + 1;
    seen++;
  }
  fclose(f);
  if (rc == 0 && seen == 0) {
    snprintf(err, errlen, "%s: no tokens", path);
    rc = -1;
  }
  if (rc == 0 && seen != t->n) {
    uint32_t gap = 0;
    while (gap < t->n && t->text[gap]) gap++;
    snprintf(err, errlen, "%s: ids must be 0..%u with none missing; id %u is missing", path,
             t->n - 1, gap);
    rc = -1;
  }
  if (rc != 0) {
    asr_tokens_free(t);
    return -1;
  }
  t->every_token_a_word = !any_mark;
  return 0;
}

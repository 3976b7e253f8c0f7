/*
 * phrases.c — a Vosk phrase_list as a pocketsphinx grammar. The request
 * parameter phrase_list is a JSON array of strings (what Vosk clients send
 * in their config); recognition is then restricted to any sequence of
 * those phrases, as Vosk's grammar restricts it. Each phrase's words are
 * lowercased (the dictionaries are) and must be in the model's dictionary:
 * an unknown one is refused, by name. "[unk]", Vosk's garbage word, has no
 * pocketsphinx counterpart and is skipped.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_internal.h"

#define JSGF_HEAD "#JSGF V1.0;\ngrammar hark;\npublic <phrases> = ( "
#define JSGF_TAIL " ) + ;\n"

/* Appends s (n bytes) to the growing text t. */
static int put(char **t, size_t *len, size_t *cap, const char *s, size_t n) {
  if (*len + n + 1 > *cap) {
    size_t c = *cap ? *cap : 256;
    while (*len + n + 1 > c) c *= 2;
    char *nt = realloc(*t, c);
    if (!nt) return -1;
    *t = nt;
    *cap = c;
  }
  memcpy(*t + *len, s, n);
  *len += n;
  (*t)[*len] = 0;
  return 0;
}

char *ps_phrases_jsgf(const char *json, ps_word_known known, void *arg, char *err, size_t errlen) {
  cJSON *doc = cJSON_Parse(json);
  char *t = NULL;
  size_t len = 0, cap = 0;
  int phrases = 0;
  bool ok = cJSON_IsArray(doc);
  if (!ok) snprintf(err, errlen, "phrase_list must be a JSON array of strings");
  if (ok) ok = put(&t, &len, &cap, JSGF_HEAD, strlen(JSGF_HEAD)) == 0;
  for (const cJSON *e = ok ? doc->child : NULL; ok && e; e = e->next) {
    if (!cJSON_IsString(e)) {
      snprintf(err, errlen, "phrase_list must be a JSON array of strings");
      ok = false;
      break;
    }
    char *p = strdup(e->valuestring);
    if (!p) {
      snprintf(err, errlen, "out of memory");
      ok = false;
      break;
    }
    int words = 0;
    size_t mark = len;
    if (phrases) ok = put(&t, &len, &cap, " | ", 3) == 0;
    char *save = NULL;
    for (char *w = strtok_r(p, " \t\r\n", &save); ok && w; w = strtok_r(NULL, " \t\r\n", &save)) {
      for (char *c = w; *c; c++) *c = (char)tolower((unsigned char)*c);
      if (!strcmp(w, "[unk]")) continue;
      if (strpbrk(w, ";=|*+<>()[]{}/\"\\") || !known(arg, w)) {
        snprintf(err, errlen, "phrase_list: the word '%.64s' is not in this model's dictionary", w);
        ok = false;
        break;
      }
      ok = (words ? put(&t, &len, &cap, " ", 1) : 0) == 0 && put(&t, &len, &cap, w, strlen(w)) == 0;
      words++;
      if (!ok) snprintf(err, errlen, "out of memory");
    }
    free(p);
    if (ok && words == 0) { /* an empty phrase, or "[unk]" alone */
      len = mark;
      t[len] = 0;
      continue;
    }
    phrases += words > 0;
  }
  if (ok && phrases == 0) {
    snprintf(err, errlen, "phrase_list has no words to recognise");
    ok = false;
  }
  if (ok) ok = put(&t, &len, &cap, JSGF_TAIL, strlen(JSGF_TAIL)) == 0;
  cJSON_Delete(doc);
  if (!ok) {
    free(t);
    return NULL;
  }
  return t;
}

/*
 * transcribe_job.c — what a `hark transcribe` stream does with what the
 * server sends, whichever driver received it: a partial is printed when it
 * changed (--interim), a final is appended to the job's transcript and
 * printed (or kept for --json), and the stream's end is one line.
 * Everything runs on the run's one thread.
 */
#include "transcribe_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- what every stream shares ------------------------------------------------ */

const char *tr_file_tag(const tr_file *f) {
  const char *p = strrchr(f->path, '/');
  return p ? p + 1 : f->path;
}

size_t tr_chunk_samples(const tr_opts *o, const tr_file *f) {
  size_t per = (size_t)f->wav.sample_rate * (size_t)o->chunk_ms / 1000;
  return per ? per : 1;
}

uint64_t tr_start_offset_ns(const tr_opts *o, int i, int n) {
  if (!o->realtime || n <= 0) return 0;
  uint64_t span = (uint64_t)(o->stagger_ms >= 0 ? o->stagger_ms : o->chunk_ms) * 1000000u;
  return span * (uint64_t)i / (uint64_t)n;
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
           cJSON_IsNumber(start) ? start->valuedouble : 0,
           cJSON_IsNumber(end) ? end->valuedouble : 0,
           cJSON_IsNumber(conf) ? conf->valuedouble : 0);
  }
}

void tr_partial(const tr_opts *o, const tr_file *f, const tr_job *j, const char *text,
                char **last) {
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

void tr_print_end(const tr_file *f, const tr_job *j) {
  if (j->status == TR_OK) {
    printf("%s [stream %d] transcript: %s\n", tr_file_tag(f), j->id,
           j->transcript ? j->transcript : "");
    return;
  }
  printf("%s [stream %d] %s: ", tr_file_tag(f), j->id,
         j->status == TR_TIMEOUT ? "timeout" : "error");
  if (j->http_status || j->grpc_status)
    printf("%s\n", j->reason);
  else
    printf("close %d: %s\n", j->close_code, j->reason);
}

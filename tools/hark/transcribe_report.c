/*
 * transcribe_report.c — the end of `hark transcribe`: the summary Riva's
 * streaming client prints (streams, audio seconds, wall time, RTFX, chunk
 * and final latency percentiles, failures), as text or as one JSON object
 * holding every figure plus each stream's transcript, grouped by file.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transcribe_report.h"

#define TR_MAX_FAILURES_SHOWN 20

typedef struct tr_counts {
  int ok, errors, timeouts;
} tr_counts;

static tr_counts count(const tr_run *r) {
  tr_counts c = {0};
  for (int j = 0; j < r->n_jobs; j++) {
    c.ok += r->jobs[j].status == TR_OK;
    c.errors += r->jobs[j].status == TR_ERROR || r->jobs[j].status == TR_PENDING;
    c.timeouts += r->jobs[j].status == TR_TIMEOUT;
  }
  return c;
}

static const char *base(const char *path) {
  const char *p = strrchr(path, '/');
  return p ? p + 1 : path;
}

static const char *status_name(tr_status s) {
  return s == TR_OK ? "ok" : s == TR_TIMEOUT ? "timeout" : "error";
}

static double round2(double v) { return round(v * 100.0) / 100.0; }

static void print_latency(const char *what, const stats_summary *s) {
  if (s->count == 0) {
    printf("  %s latency: no replies\n", what);
    return;
  }
  printf("  %s latency (ms): p50 %.1f, p90 %.1f, p99 %.1f, max %.1f, avg %.1f (%zu replies)\n",
         what, s->p50, s->p90, s->p99, s->max, s->avg, s->count);
}

static void print_failures(const tr_run *r) {
  int shown = 0, failed = 0;
  for (int j = 0; j < r->n_jobs; j++) {
    const tr_job *job = &r->jobs[j];
    if (job->status == TR_OK) continue;
    if (failed++ == 0) printf("  Failures:\n");
    if (shown++ >= TR_MAX_FAILURES_SHOWN) continue;
    printf("    %s [stream %d] %s: ", base(r->files[job->file].path), job->id,
           status_name(job->status));
    if (job->http_status || job->grpc_status)
      printf("%s\n", job->reason);
    else
      printf("close %d: %s\n", job->close_code, job->reason);
  }
  if (failed > TR_MAX_FAILURES_SHOWN)
    printf("    ... and %d more\n", failed - TR_MAX_FAILURES_SHOWN);
}

/* The server as the user would write it. */
static void server_url(const tr_opts *o, char *out, size_t cap) {
  if (o->grpc)
    snprintf(out, cap, "grpc://%s", o->hostport);
  else
    snprintf(out, cap, "ws://%s%s", o->hostport, o->path);
}

static void print_text(const tr_run *r, double wall, const stats_summary *chunk,
                       const stats_summary *final) {
  const tr_opts *o = r->o;
  tr_counts c = count(r);
  char url[1400];
  server_url(o, url, sizeof url);
  printf("\n*** Run summary ***\n");
  printf("  Server: %s\n", url);
  printf(
      "  Streams: %d (ok %d, errors %d, timeouts %d); parallel %d, %d iteration%s, %d ms chunks, "
      "%s\n",
      r->n_jobs, c.ok, c.errors, c.timeouts, o->parallel, o->iterations,
      o->iterations == 1 ? "" : "s", o->chunk_ms,
      o->realtime ? "real-time pacing" : "next chunk on reply");
  if (o->silent_fraction > 0)
    printf("  Silent streams: %.0f%% (zeros instead of the file)\n", 100 * o->silent_fraction);
  printf("  Audio processed: %.2f s in %.3f s wall time: RTFX %.2f\n", r->audio_seconds, wall,
         wall > 0 ? r->audio_seconds / wall : 0);
  print_latency("Chunk", chunk);
  print_latency("Final", final);
  print_failures(r);
}

static cJSON *latency_json(const stats_summary *s) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "count", (double)s->count);
  cJSON_AddNumberToObject(o, "p50", round2(s->p50));
  cJSON_AddNumberToObject(o, "p90", round2(s->p90));
  cJSON_AddNumberToObject(o, "p99", round2(s->p99));
  cJSON_AddNumberToObject(o, "max", round2(s->max));
  cJSON_AddNumberToObject(o, "avg", round2(s->avg));
  return o;
}

static cJSON *job_json(tr_job *job) {
  cJSON *s = cJSON_CreateObject();
  cJSON_AddNumberToObject(s, "stream", job->id);
  cJSON_AddStringToObject(s, "status", status_name(job->status));
  if (job->silent) cJSON_AddTrueToObject(s, "silent");
  cJSON_AddStringToObject(s, "transcript", job->transcript ? job->transcript : "");
  cJSON_AddItemToObject(s, "finals", job->finals ? job->finals : cJSON_CreateArray());
  job->finals = NULL; /* now the document's */
  if (job->status != TR_OK) {
    if (job->grpc_status)
      cJSON_AddNumberToObject(s, "grpc_status", job->grpc_status);
    else
      cJSON_AddNumberToObject(s, "close_code", job->close_code);
    if (job->http_status) cJSON_AddNumberToObject(s, "http_status", job->http_status);
    cJSON_AddStringToObject(s, "reason", job->reason);
  }
  return s;
}

static void print_json(tr_run *r, double wall, const stats_summary *chunk,
                       const stats_summary *final) {
  const tr_opts *o = r->o;
  tr_counts c = count(r);
  char url[1400];
  server_url(o, url, sizeof url);
  cJSON *doc = cJSON_CreateObject(), *files = cJSON_CreateArray();
  cJSON_AddStringToObject(doc, "server", url);
  cJSON_AddBoolToObject(doc, "simulate_realtime", o->realtime);
  cJSON_AddNumberToObject(doc, "chunk_ms", o->chunk_ms);
  cJSON_AddNumberToObject(doc, "parallel", o->parallel);
  cJSON_AddNumberToObject(doc, "iterations", o->iterations);
  cJSON_AddNumberToObject(doc, "silent_fraction", o->silent_fraction);
  cJSON_AddNumberToObject(doc, "streams", r->n_jobs);
  cJSON_AddNumberToObject(doc, "ok", c.ok);
  cJSON_AddNumberToObject(doc, "errors", c.errors);
  cJSON_AddNumberToObject(doc, "timeouts", c.timeouts);
  cJSON_AddNumberToObject(doc, "audio_seconds", round(r->audio_seconds * 1000) / 1000);
  cJSON_AddNumberToObject(doc, "wall_seconds", round(wall * 1000) / 1000);
  cJSON_AddNumberToObject(doc, "rtfx", wall > 0 ? round2(r->audio_seconds / wall) : 0);
  cJSON_AddItemToObject(doc, "chunk_latency_ms", latency_json(chunk));
  cJSON_AddItemToObject(doc, "final_latency_ms", latency_json(final));
  for (int f = 0; f < o->n_files; f++) {
    cJSON *fo = cJSON_CreateObject(), *streams = cJSON_CreateArray();
    cJSON_AddStringToObject(fo, "file", r->files[f].path);
    cJSON_AddNumberToObject(fo, "audio_seconds", round(r->files[f].seconds * 1000) / 1000);
    cJSON_AddNumberToObject(fo, "sample_rate", r->files[f].wav.sample_rate);
    for (int j = 0; j < r->n_jobs; j++)
      if (r->jobs[j].file == f) cJSON_AddItemToArray(streams, job_json(&r->jobs[j]));
    cJSON_AddItemToObject(fo, "streams", streams);
    cJSON_AddItemToArray(files, fo);
  }
  cJSON_AddItemToObject(doc, "files", files);
  char *s = cJSON_PrintUnformatted(doc);
  if (s) printf("%s\n", s);
  free(s);
  cJSON_Delete(doc);
}

void tr_report(tr_run *r) {
  stats_summary chunk, final;
  stats_summarize(r->chunk_ns.v, r->chunk_ns.n, 1e6, &chunk); /* ns -> ms */
  stats_summarize(r->final_ns.v, r->final_ns.n, 1e6, &final);
  double wall = (double)(r->ended_ns - r->started_ns) / 1e9;
  if (r->o->json)
    print_json(r, wall, &chunk, &final);
  else
    print_text(r, wall, &chunk, &final);
  fflush(stdout);
}

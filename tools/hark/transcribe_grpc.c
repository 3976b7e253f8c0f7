/*
 * transcribe_grpc.c — `hark transcribe --server grpc://HOST:PORT`: the
 * same jobs as the WebSocket path, over Riva's
 * nvidia.riva.asr.RivaSpeechRecognition/StreamingRecognize.
 *
 * All streams share one channel (one HTTP/2 connection, as Riva's clients
 * do) and ONE completion queue on this thread: each slot holds a call with
 * at most one write, one read and the status batch in flight, tagged with
 * the slot; the loop waits on the queue up to the next timer (real-time
 * pacing, reply timeouts), so hundreds of streams cost one thread.
 *
 * A stream sends streaming_config (LINEAR_PCM at the file's rate,
 * interim_results on) and then the audio in --chunk-ms messages — at real
 * time with --simulate-realtime, else the next one when the previous one's
 * reply came — then half-closes: the end of the audio. With interim
 * results the server answers each audio message with exactly one response
 * (a partial, a final, or no results), in order, so response k belongs to
 * audio message k: chunk latency is the time from starting that write to
 * its response. After the half-close the server sends the last final (when
 * it has words) and the OK status; final latency is from the half-close to
 * that response, or to the status when no response follows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/support/time.h>

#include "grpcc.h"
#include "riva_asr.pb-c.h"
#include "transcribe_grpc.h"

#define RIVA_STREAMING "/nvidia.riva.asr.RivaSpeechRecognition/StreamingRecognize"
#define CONNECT_WAIT_MS 5000

typedef struct gloop gloop;
typedef struct gslot gslot;

typedef enum { T_WRITE, T_READ, T_STATUS, T_CONNECT } tag_kind;

typedef struct gtag {
  gslot *s;
  tag_kind kind;
} gtag;

struct gslot {
  gloop *l;
  tr_job *job; /* NULL: idle, no more jobs */
  const tr_file *file;
  grpc_call *call; /* NULL until started */
  gtag t_write, t_read, t_status;
  int in_flight; /* batches started and not completed */
  bool writing, half_closed, read_done, status_done, timed_out, got_final;
  uint64_t start_ns, phase_ns, next_due_ns, close_ns;
  size_t n_chunks, sent, replies; /* audio messages sent and answered */
  uint64_t *sent_ns;              /* n_chunks send times, owned */
  grpc_byte_buffer *wbuf, *rbuf;
  grpc_metadata_array md, trailing;
  grpc_status_code code;
  grpc_slice details;
  char *last_partial; /* owned, for --interim */
};

struct gloop {
  tr_run *run;
  const tr_opts *o;
  const tr_file *files;
  grpc_channel *ch;
  grpc_completion_queue *cq;
  void *method; /* registered StreamingRecognize */
  gslot *slots;
  int n_slots, next_job;
  uint64_t chunk_ns, limit_ns;
  int16_t *zeros; /* one chunk of silence at the highest rate */
};

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- calls ---------------------------------------------------------------------- */

static bool start(gslot *s, const grpc_op *ops, size_t n, gtag *tag) {
  if (grpc_call_start_batch(s->call, ops, n, tag, NULL) != GRPC_CALL_OK) return false;
  s->in_flight++;
  return true;
}

/* Ends the stream from our side; the status batch then completes. */
static void fail(gslot *s, const char *why) {
  if (s->job->status == TR_PENDING) {
    s->job->status = s->timed_out ? TR_TIMEOUT : TR_ERROR;
    snprintf(s->job->reason, sizeof s->job->reason, "%s", why);
    s->job->grpc_status = GRPC_STATUS_CANCELLED;
  }
  grpc_call_cancel(s->call, NULL);
}

static void write_msg(gslot *s, const ProtobufCMessage *m, bool with_metadata) {
  s->wbuf = grpcc_pack(m);
  grpc_op ops[2] = {{.op = GRPC_OP_SEND_INITIAL_METADATA},
                    {.op = GRPC_OP_SEND_MESSAGE, .data.send_message.send_message = s->wbuf}};
  s->writing = true;
  if (!start(s, with_metadata ? ops : ops + 1, with_metadata ? 2 : 1, &s->t_write)) {
    s->writing = false;
    fail(s, "cannot send");
  }
}

static void send_config(gslot *s) {
  const tr_opts *o = s->l->o;
  Nvidia__Riva__Asr__RecognitionConfig rc = NVIDIA__RIVA__ASR__RECOGNITION_CONFIG__INIT;
  Nvidia__Riva__Asr__StreamingRecognitionConfig sc =
      NVIDIA__RIVA__ASR__STREAMING_RECOGNITION_CONFIG__INIT;
  Nvidia__Riva__Asr__StreamingRecognizeRequest q =
      NVIDIA__RIVA__ASR__STREAMING_RECOGNIZE_REQUEST__INIT;
  rc.encoding = NVIDIA__RIVA__AUDIO_ENCODING__LINEAR_PCM;
  rc.sample_rate_hertz = s->file->wav.sample_rate;
  rc.language_code = (char *)o->language;
  rc.max_alternatives = 1;
  rc.audio_channel_count = 1;
  rc.enable_word_time_offsets = o->words;
  if (o->model) rc.model = (char *)o->model;
  sc.config = &rc;
  sc.interim_results = true; /* one response per audio message: chunk latency */
  q.streaming_request_case =
      NVIDIA__RIVA__ASR__STREAMING_RECOGNIZE_REQUEST__STREAMING_REQUEST_STREAMING_CONFIG;
  q.streaming_config = &sc;
  write_msg(s, &q.base, true);
}

static void send_chunk(gslot *s, uint64_t now) {
  size_t per = tr_chunk_samples(s->l->o, s->file);
  size_t off = s->sent * per, n = s->file->wav.n - off < per ? s->file->wav.n - off : per;
  const int16_t *pcm = s->job->silent ? s->l->zeros : s->file->wav.samples + off;
  Nvidia__Riva__Asr__StreamingRecognizeRequest q =
      NVIDIA__RIVA__ASR__STREAMING_RECOGNIZE_REQUEST__INIT;
  q.streaming_request_case =
      NVIDIA__RIVA__ASR__STREAMING_RECOGNIZE_REQUEST__STREAMING_REQUEST_AUDIO_CONTENT;
  q.audio_content.data = (uint8_t *)pcm;
  q.audio_content.len = n * sizeof *pcm; /* host order is little-endian (transcribe.c checks) */
  s->sent_ns[s->sent++] = now;
  write_msg(s, &q.base, false);
}

static void half_close(gslot *s, uint64_t now) {
  grpc_op op = {.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT};
  s->half_closed = true;
  s->close_ns = now;
  s->writing = true;
  if (!start(s, &op, 1, &s->t_write)) {
    s->writing = false;
    fail(s, "cannot send");
  }
}

/* Sends what is due: the next chunk (paced, or after the previous reply),
 * then the half-close. One write at a time. */
static void pump(gslot *s, uint64_t now) {
  const tr_opts *o = s->l->o;
  if (s->writing || s->half_closed || s->status_done || s->job->status != TR_PENDING) return;
  if (s->sent < s->n_chunks) {
    if (o->realtime ? s->next_due_ns <= now : s->replies >= s->sent) {
      send_chunk(s, now);
      s->next_due_ns += s->l->chunk_ns;
    }
  } else if (o->realtime || s->replies >= s->sent) {
    half_close(s, now); /* real time: the audio ends with its last chunk */
  }
}

/* Reads the next response (the first read also takes the metadata). */
static void read_next(gslot *s, bool first) {
  grpc_op ops[2] = {{.op = GRPC_OP_RECV_INITIAL_METADATA,
                     .data.recv_initial_metadata.recv_initial_metadata = &s->md},
                    {.op = GRPC_OP_RECV_MESSAGE, .data.recv_message.recv_message = &s->rbuf}};
  if (!start(s, first ? ops : ops + 1, first ? 2 : 1, &s->t_read)) s->read_done = true;
}

/* ---- results -------------------------------------------------------------------- */

/* A final result as the Vosk document tr_final() takes. */
static cJSON *final_doc(const Nvidia__Riva__Asr__StreamingRecognitionResult *r) {
  const Nvidia__Riva__Asr__SpeechRecognitionAlternative *a = r->alternatives[0];
  cJSON *doc = cJSON_CreateObject();
  cJSON_AddStringToObject(doc, "text", a->transcript ? a->transcript : "");
  cJSON_AddNumberToObject(doc, "confidence", a->confidence);
  cJSON_AddNumberToObject(doc, "audio_processed", r->audio_processed);
  if (a->n_words) {
    cJSON *words = cJSON_AddArrayToObject(doc, "result");
    for (size_t i = 0; i < a->n_words; i++) {
      cJSON *w = cJSON_CreateObject();
      cJSON_AddStringToObject(w, "word", a->words[i]->word ? a->words[i]->word : "");
      cJSON_AddNumberToObject(w, "start", a->words[i]->start_time / 1000.0);
      cJSON_AddNumberToObject(w, "end", a->words[i]->end_time / 1000.0);
      cJSON_AddNumberToObject(w, "conf", a->words[i]->confidence);
      cJSON_AddItemToArray(words, w);
    }
  }
  return doc;
}

static void handle_response(gslot *s, const Nvidia__Riva__Asr__StreamingRecognizeResponse *m) {
  const tr_opts *o = s->l->o;
  for (size_t i = 0; i < m->n_results; i++) {
    const Nvidia__Riva__Asr__StreamingRecognitionResult *r = m->results[i];
    if (!r->n_alternatives) continue;
    if (!r->is_final) {
      tr_partial(o, s->file, s->job, r->alternatives[0]->transcript, &s->last_partial);
      continue;
    }
    free(s->last_partial);
    s->last_partial = NULL;
    cJSON *doc = final_doc(r);
    tr_final(o, s->file, s->job, doc);
    cJSON_Delete(doc);
  }
}

static void on_read(gslot *s, bool ok, uint64_t now) {
  tr_run *run = s->l->run;
  if (!ok || !s->rbuf) { /* the server is done: the status follows */
    s->read_done = true;
    return;
  }
  ProtobufCMessage *m =
      grpcc_unpack(&nvidia__riva__asr__streaming_recognize_response__descriptor, s->rbuf);
  grpc_byte_buffer_destroy(s->rbuf);
  s->rbuf = NULL;
  if (!m) {
    fail(s, "a response that does not parse");
    return;
  }
  if (s->replies < s->n_chunks) { /* the reply to audio message `replies` */
    if (s->replies >= s->sent) {
      protobuf_c_message_free_unpacked(m, NULL);
      fail(s, "a response to no audio message");
      return;
    }
    stats_series_push(&run->chunk_ns, now - s->sent_ns[s->replies]);
    s->replies++;
  } else if (!s->half_closed) {
    protobuf_c_message_free_unpacked(m, NULL);
    fail(s, "more responses than audio messages");
    return;
  } else if (!s->got_final) { /* the last final, after the end of the audio */
    s->got_final = true;
    stats_series_push(&run->final_ns, now - s->close_ns);
  }
  handle_response(s, (Nvidia__Riva__Asr__StreamingRecognizeResponse *)m);
  protobuf_c_message_free_unpacked(m, NULL);
  read_next(s, false);
}

static void on_status(gslot *s, uint64_t now) {
  tr_job *j = s->job;
  tr_run *run = s->l->run;
  s->status_done = true;
  if (j->status != TR_PENDING) return; /* we failed it already */
  if (s->code == GRPC_STATUS_OK && s->half_closed && s->replies == s->n_chunks) {
    if (!s->got_final) stats_series_push(&run->final_ns, now - s->close_ns);
    j->status = TR_OK;
    run->ended_ns = now; /* the wall clock stops at the last final */
    return;
  }
  j->status = TR_ERROR;
  j->grpc_status = s->code == GRPC_STATUS_OK ? GRPC_STATUS_UNKNOWN : s->code;
  if (s->code == GRPC_STATUS_OK)
    snprintf(j->reason, sizeof j->reason, "OK before the end: %zu of %zu audio messages answered",
             s->replies, s->n_chunks);
  else
    snprintf(j->reason, sizeof j->reason, "%s: %.*s", grpcc_status_name(s->code),
             (int)GRPC_SLICE_LENGTH(s->details), (const char *)GRPC_SLICE_START_PTR(s->details));
}

/* ---- slots ------------------------------------------------------------------------ */

static void slot_assign(gloop *l, gslot *s, uint64_t at) {
  s->job = NULL;
  if (l->next_job >= l->run->n_jobs) return;
  s->job = &l->run->jobs[l->next_job++];
  s->file = &l->files[s->job->file];
  size_t per = tr_chunk_samples(l->o, s->file);
  s->n_chunks = (s->file->wav.n + per - 1) / per;
  s->start_ns = at;
}

static void slot_begin(gloop *l, gslot *s, uint64_t now) {
  s->call =
      grpc_channel_create_registered_call(l->ch, NULL, GRPC_PROPAGATE_DEFAULTS, l->cq, l->method,
                                          gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
  s->sent = s->replies = 0;
  s->in_flight = 0;
  s->writing = s->half_closed = s->read_done = s->status_done = s->timed_out = s->got_final = false;
  s->phase_ns = s->next_due_ns = now;
  s->code = GRPC_STATUS_UNKNOWN;
  s->details = grpc_empty_slice();
  grpc_metadata_array_init(&s->md);
  grpc_metadata_array_init(&s->trailing);
  grpc_op st = {
      .op = GRPC_OP_RECV_STATUS_ON_CLIENT,
      .data.recv_status_on_client = {
          .trailing_metadata = &s->trailing, .status = &s->code, .status_details = &s->details}};
  if (!start(s, &st, 1, &s->t_status)) { /* cannot happen on a new call */
    s->status_done = true;
    s->job->status = TR_ERROR;
    snprintf(s->job->reason, sizeof s->job->reason, "cannot start the call");
    s->job->grpc_status = GRPC_STATUS_INTERNAL;
    return;
  }
  send_config(s);
  read_next(s, true);
}

/* The stream is over and nothing of it is in flight: account, free, next. */
static void slot_recycle(gloop *l, gslot *s, uint64_t now) {
  if (s->job->status == TR_PENDING)
    s->job->status = TR_ERROR; /* cannot happen; never count it ok */
  if (s->job->status == TR_OK)
    l->run->audio_seconds += s->file->seconds;
  else
    l->run->ended_ns = now;
  if (!l->o->json) tr_print_end(s->file, s->job);
  grpc_call_unref(s->call);
  s->call = NULL;
  grpc_metadata_array_destroy(&s->md);
  grpc_metadata_array_destroy(&s->trailing);
  grpc_slice_unref(s->details);
  if (s->rbuf) grpc_byte_buffer_destroy(s->rbuf);
  s->rbuf = NULL;
  free(s->last_partial);
  s->last_partial = NULL;
  slot_assign(l, s, now);
}

static void earliest(uint64_t *wake, uint64_t t) {
  if (t < *wake) *wake = t;
}

static void timeout(gslot *s, const char *what) {
  char why[160];
  snprintf(why, sizeof why, "no %s within %d s", what, s->l->o->timeout_s);
  s->timed_out = true;
  fail(s, why);
}

/* Runs the slot's due timers; lowers *wake to its next one. */
static void slot_timers(gloop *l, gslot *s, uint64_t now, uint64_t *wake) {
  if (!s->call) {
    if (now >= s->start_ns)
      slot_begin(l, s, now);
    else
      return earliest(wake, s->start_ns);
  }
  if (s->status_done || s->job->status != TR_PENDING) return;
  pump(s, now);
  /* While a write is in flight its completion sends what is due. */
  if (l->o->realtime && !s->writing && !s->half_closed && s->sent < s->n_chunks)
    earliest(wake, s->next_due_ns);
  uint64_t since;
  const char *what;
  if (s->replies < s->sent)
    since = s->sent_ns[s->replies], what = "reply to a chunk";
  else if (s->half_closed)
    since = s->close_ns, what = "final result";
  else if (s->sent == 0)
    since = s->phase_ns, what = "connection";
  else
    return;
  if (now >= since + l->limit_ns)
    timeout(s, what);
  else
    earliest(wake, since + l->limit_ns);
}

static void dispatch(const grpc_event *ev, uint64_t now) {
  gtag *t = ev->tag;
  gslot *s = t->s;
  if (t->kind == T_CONNECT) return; /* a connectivity watch (connect_channel) */
  s->in_flight--;
  switch (t->kind) {
  case T_WRITE:
    s->writing = false;
    if (s->wbuf) grpc_byte_buffer_destroy(s->wbuf);
    s->wbuf = NULL;
    if (ev->success) pump(s, now); /* a failed write: the status says why */
    break;
  case T_READ: on_read(s, ev->success, now); break;
  case T_STATUS: on_status(s, now); break;
  case T_CONNECT: break;
  }
}

static gpr_timespec until(uint64_t now, uint64_t wake) {
  if (wake == UINT64_MAX)
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(60000, GPR_TIMESPAN));
  uint64_t ns = wake > now ? wake - now : 0;
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_nanos((int64_t)ns, GPR_TIMESPAN));
}

static void run_loop(gloop *l) {
  for (;;) {
    uint64_t now = now_ns(), wake = UINT64_MAX;
    bool active = false;
    for (int i = 0; i < l->n_slots; i++) {
      gslot *s = &l->slots[i];
      if (s->job && s->call && s->status_done && s->in_flight == 0) slot_recycle(l, s, now);
      if (s->job) slot_timers(l, s, now, &wake);
      active |= s->job != NULL;
    }
    if (!active) return;
    grpc_event ev = grpc_completion_queue_next(l->cq, until(now_ns(), wake), NULL);
    /* Take everything that is ready before the next pass over the slots. */
    while (ev.type == GRPC_OP_COMPLETE) {
      dispatch(&ev, now_ns());
      ev = grpc_completion_queue_next(l->cq, gpr_inf_past(GPR_CLOCK_MONOTONIC), NULL);
    }
  }
}

/* ---- setup ------------------------------------------------------------------------ */

/* Waits for the channel to connect, so an unreachable server is one clear
 * message rather than a failed stream per job. */
static int connect_channel(gloop *l) {
  gtag tag = {.kind = T_CONNECT};
  grpc_connectivity_state st = grpc_channel_check_connectivity_state(l->ch, 1);
  gpr_timespec deadline = grpcc_deadline(CONNECT_WAIT_MS);
  while (st != GRPC_CHANNEL_READY) {
    if (st == GRPC_CHANNEL_TRANSIENT_FAILURE || st == GRPC_CHANNEL_SHUTDOWN) break;
    grpc_channel_watch_connectivity_state(l->ch, st, deadline, l->cq, &tag);
    grpc_event ev = grpc_completion_queue_next(l->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    if (ev.type != GRPC_OP_COMPLETE || !ev.success) break; /* the deadline passed */
    st = grpc_channel_check_connectivity_state(l->ch, 0);
  }
  if (st == GRPC_CHANNEL_READY) return 0;
  fprintf(stderr, "hark transcribe: cannot connect to grpc://%s: %s\n", l->o->hostport,
          st == GRPC_CHANNEL_TRANSIENT_FAILURE ? "connection failed" : "timed out");
  return -1;
}

static int setup(gloop *l, tr_run *run, const tr_file *files) {
  const tr_opts *o = run->o;
  *l = (gloop){.run = run,
               .o = o,
               .files = files,
               .chunk_ns = (uint64_t)o->chunk_ms * 1000000u,
               .limit_ns = (uint64_t)o->timeout_s * 1000000000u};
  l->n_slots = o->parallel < run->n_jobs ? o->parallel : run->n_jobs;
  l->slots = calloc((size_t)l->n_slots, sizeof *l->slots);
  size_t max_chunk = 1, max_chunks = 1;
  for (int i = 0; i < o->n_files; i++) {
    size_t per = tr_chunk_samples(o, &files[i]), n = (files[i].wav.n + per - 1) / per;
    if (n > max_chunks) max_chunks = n;
    if (per > max_chunk) max_chunk = per;
  }
  l->zeros = calloc(max_chunk, sizeof *l->zeros);
  if (!l->slots || !l->zeros) return -1;
  for (int i = 0; i < l->n_slots; i++) {
    gslot *s = &l->slots[i];
    s->l = l;
    s->t_write = (gtag){s, T_WRITE};
    s->t_read = (gtag){s, T_READ};
    s->t_status = (gtag){s, T_STATUS};
    s->sent_ns = malloc(max_chunks * sizeof *s->sent_ns);
    if (!s->sent_ns) return -1;
  }
  grpcc_init();
  l->ch = grpcc_channel(o->hostport);
  l->cq = grpc_completion_queue_create_for_next(NULL);
  l->method = grpc_channel_register_call(l->ch, RIVA_STREAMING, NULL, NULL);
  return 0;
}

static void teardown(gloop *l) {
  for (int i = 0; l->slots && i < l->n_slots; i++) free(l->slots[i].sent_ns);
  free(l->slots);
  free(l->zeros);
  if (l->ch) grpc_channel_destroy(l->ch);
  if (l->cq) {
    grpc_completion_queue_shutdown(l->cq);
    while (grpc_completion_queue_next(l->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(l->cq);
  }
  if (l->ch) grpcc_shutdown();
}

int tr_grpc_run(tr_run *run, const tr_file *files) {
  gloop l;
  int rc = -1;
  if (setup(&l, run, files) < 0)
    fprintf(stderr, "hark transcribe: out of memory\n");
  else if (connect_channel(&l) == 0) {
    uint64_t t0 = now_ns();
    for (int i = 0; i < l.n_slots; i++)
      slot_assign(&l, &l.slots[i], t0 + tr_start_offset_ns(run->o, i, l.n_slots));
    run->started_ns = run->ended_ns = t0;
    run_loop(&l);
    rc = 0;
  }
  teardown(&l);
  return rc;
}

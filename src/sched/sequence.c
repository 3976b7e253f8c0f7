/*
 * sequence.c — Triton's sequence batcher, for stateful (streaming) models.
 *
 * Requests carry a correlation id (uint64 or string) in a namespace their
 * front end chose (hark_request_correlation_ns) and START/END flags.
 * seqtab.c owns the rules — which request may run next, which sequences
 * hold slots, when a batch forms, when a sequence ends or expires idle —
 * and this file runs them on the skeleton (skeleton.c: the lock, the
 * pump, the pool's timer, the instances, stop), adding what surrounds
 * each execution:
 *   - the request's sequence state (hark_request_sequence_state) points at
 *     its sequence's slot for the backend's own per-stream state;
 *   - control_input tensors (START/END/READY/CORRID) and implicit `state`
 *     tensors are added as inputs; a state's output is taken out of the
 *     response (clients never see it) and kept for the next request;
 *   - the front end's callback is wrapped: a sequence's next request is
 *     dispatched only after its previous one has delivered its FINAL *and*
 *     the execute that carried it returned, so a sequence never runs twice
 *     at once and its responses arrive in order;
 *   - dropped sequences' state (END done, idle expiry, restart, unload)
 *     goes to the descriptor's sequence_fini (the backend's) outside the
 *     lock, never inside an execute on the same thread, never while that
 *     sequence runs;
 *   - the implicit state held is counted (bytes, sequences) in atomics
 *     that /metrics reads (hark_sched_sequence_state).
 * A pass of the pump expires idle sequences and forms batches by seqtab's
 * rules, and takes the drops out of the lock. Stop flushes: every queued
 * request still runs, idle sequences end at once, and it returns when no
 * sequence is left.
 *
 * Not (yet) honoured for sequence models: request priorities and queue
 * timeouts (Triton's sequence batcher has no queue policy either). Waiting
 * is bounded instead: requests of slotted sequences by the server's max
 * queue size, and the backlog of sequences waiting for a slot by the same
 * number, beyond which requests get UNAVAILABLE "queue full". KServe
 * clients' sequences together get only a share of the slots, the queue and
 * the backlog (seqtab.h, "Quotas"; the model's sequence_client_share
 * parameter), beyond which they get RESOURCE_EXHAUSTED naming the quota.
 *
 * Hark extension: a request with no correlation id (0 or "") to a
 * sequence model is a one-shot sequence — implicit START|END, fresh state,
 * freed after — so offline recognition over plain KServe infer works.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "hark/request.h"
#include "sched/seqtab.h"
#include "sched/skeleton.h"
#include "util/alloc.h"
#include "util/log.h"

typedef struct seq_sched seq_sched;

/* One accepted request, from enqueue until its sequence is done with it. */
typedef struct seq_call {
  seq_sched *s;
  hark_request *req; /* valid until its FINAL is delivered */
  hark_seq *seq;     /* set at dispatch */
  uint32_t flags;    /* START/END as it runs */
  hark_response_fn fn;
  void *userp;
  bool final_seen, returned;
} seq_call;

typedef struct seq_instance {
  hark_skel_inst base; /* first */
  seq_call **calls;
  hark_request **reqs;
  uint32_t n;
} seq_instance;

/* The engine's copy of one sequence's implicit state tensors. */
typedef struct seq_tensor {
  void *data;
  size_t bytes;
  uint32_t ndims;
  int64_t dims[HARK_MAX_DIMS];
} seq_tensor;

typedef struct seq_implicit {
  uint32_t n;
  seq_tensor t[];
} seq_implicit;

struct seq_sched {
  hark_skel sk; /* first */
  const hark_sequence_batching *sb;
  hark_seqtab *tab;
  hark_seq_entry *entries; /* max_batch scratch for forming */
  seq_instance *insts;
  uint32_t n_insts, next_inst, max_batch;
  bool oldest, batched;
  uint32_t client_share; /* percent */
  /* hark_seqtab_parked for a session and for a client namespace, as of
   * the last admit or pass (hark_sched_parked reads them without the lock). */
  _Atomic uint32_t parked_client, parked_other;
  /* The implicit state held now (hark_sched_sequence_state), moved by
   * whichever thread allocates, replaces or frees a sequence's tensors:
   * adding before subtracting, so a reader never sees it below 0. */
  atomic_uint_fast64_t state_bytes, state_seqs;
};

/* The scheduler whose execute this thread is inside, if any. */
static _Thread_local seq_sched *tls_executing;

/* ---- dropped state ------------------------------------------------------------ */

/* A state tensor's data goes from `was` bytes to `now`. */
static void state_bytes_move(seq_sched *s, size_t was, size_t now) {
  if (now) atomic_fetch_add_explicit(&s->state_bytes, now, memory_order_relaxed);
  if (was) atomic_fetch_sub_explicit(&s->state_bytes, was, memory_order_relaxed);
}

static void implicit_free(seq_sched *s, seq_implicit *im) {
  if (!im) return;
  for (uint32_t i = 0; i < im->n; i++) {
    state_bytes_move(s, im->t[i].bytes, 0);
    free(im->t[i].data);
  }
  free(im);
  atomic_fetch_sub_explicit(&s->state_seqs, 1, memory_order_relaxed);
}

static void drops_fini(seq_sched *s, hark_seq_drop *d) {
  const hark_sched_desc *desc = &s->sk.d;
  for (hark_seq_drop *next; d; d = next) {
    next = d->next;
    if (d->states.backend && desc->sequence_fini) desc->sequence_fini(desc->ctx, d->states.backend);
    implicit_free(s, d->states.implicit);
    free(d);
  }
}

/* ---- around one execution -------------------------------------------------------- */

static void seq_on_response(hark_response *resp, uint32_t flags, hark_error *err, void *userp);

static void add_input(seq_sched *s, hark_request *req, const char *name, hark_datatype dt,
                      const int64_t *dims, uint32_t ndims, void *data, size_t bytes) {
  int64_t shape[HARK_MAX_DIMS + 1];
  uint32_t n = 0;
  if (s->batched) shape[n++] = 1;
  for (uint32_t i = 0; i < ndims && n < HARK_MAX_DIMS; i++) shape[n++] = dims[i];
  hark_request_attach(req, data, free);
  hark_error *err = hark_request_add_input(req, name, dt, shape, n, data, bytes);
  if (err) {
    HARK_ERROR("model '%s': cannot add sequence input '%s': %s", s->sk.d.name, name,
               hark_error_message(err));
    hark_error_free(err);
  }
}

static void add_control(seq_sched *s, hark_request *req, const hark_seq_control *c,
                        uint32_t flags) {
  static const int64_t one[1] = {1};
  bool on = c->kind == HARK_SEQ_CONTROL_READY ||
            (c->kind == HARK_SEQ_CONTROL_START && (flags & HARK_REQUEST_SEQUENCE_START)) ||
            (c->kind == HARK_SEQ_CONTROL_END && (flags & HARK_REQUEST_SEQUENCE_END));
  const char *sid = hark_request_correlation_id_str(req);
  uint64_t nid = hark_request_correlation_id(req);
  void *data = NULL;
  size_t bytes = 0;
  if (c->kind != HARK_SEQ_CONTROL_CORRID) {
    bytes = c->datatype == HARK_TYPE_BOOL ? 1 : 4;
    data = hark_xmalloc(4);
    if (c->datatype == HARK_TYPE_BOOL)
      *(bool *)data = c->bool_false_true[on];
    else if (c->datatype == HARK_TYPE_FP32)
      memcpy(data, &c->fp32_false_true[on], 4);
    else
      memcpy(data, &c->int32_false_true[on], 4);
  } else if (c->datatype == HARK_TYPE_BYTES) {
    char num[24];
    if (!sid) snprintf(num, sizeof num, "%llu", (unsigned long long)nid);
    const char *text = sid ? sid : num;
    uint32_t len = (uint32_t)strlen(text);
    bytes = 4 + len;
    data = hark_xmalloc(bytes);
    uint8_t *p = data;
    p[0] = (uint8_t)len, p[1] = (uint8_t)(len >> 8), p[2] = (uint8_t)(len >> 16),
    p[3] = (uint8_t)(len >> 24);
    memcpy(p + 4, text, len);
  } else {
    /* A string id has no numeric value: numeric CORRID tensors get 0. */
    uint64_t v = sid ? 0 : nid;
    bytes = hark_datatype_size(c->datatype);
    data = hark_xmalloc(8);
    if (bytes == 8) {
      memcpy(data, &v, 8);
    } else {
      uint32_t v32 = (uint32_t)v;
      memcpy(data, &v32, 4);
    }
  }
  add_input(s, req, c->name, c->datatype, one, 1, data, bytes);
}

/* Zeros of the state's initial shape. */
static void tensor_reset(seq_sched *s, const hark_seq_state *st, seq_tensor *t) {
  size_t was = t->bytes;
  free(t->data);
  t->ndims = st->has_initial ? st->initial_ndims : st->ndims;
  memcpy(t->dims, st->has_initial ? st->initial_dims : st->dims, t->ndims * sizeof *t->dims);
  int64_t count = hark_shape_count(t->dims, t->ndims);
  t->bytes = count > 0 ? (size_t)count * hark_datatype_size(st->datatype) : 0;
  t->data = hark_xcalloc(1, t->bytes);
  state_bytes_move(s, was, t->bytes);
}

static void add_states(seq_sched *s, hark_request *req, hark_seq_states *states, uint32_t flags) {
  const hark_sequence_batching *sb = s->sb;
  seq_implicit *im = states->implicit;
  bool fresh = !im || (flags & HARK_REQUEST_SEQUENCE_START);
  if (!im) {
    im = hark_xcalloc(1, sizeof *im + sb->n_states * sizeof im->t[0]);
    im->n = sb->n_states;
    states->implicit = im;
    atomic_fetch_add_explicit(&s->state_seqs, 1, memory_order_relaxed);
  }
  for (uint32_t i = 0; i < sb->n_states; i++) {
    seq_tensor *t = &im->t[i];
    if (fresh || !t->data) tensor_reset(s, &sb->states[i], t);
    void *copy = hark_xmalloc(t->bytes);
    memcpy(copy, t->data, t->bytes);
    add_input(s, req, sb->states[i].input_name, sb->states[i].datatype, t->dims, t->ndims, copy,
              t->bytes);
  }
}

/* Takes the state outputs out of a response into the sequence's state. */
static void keep_states(seq_sched *s, seq_call *call, hark_response *resp) {
  const hark_sequence_batching *sb = s->sb;
  seq_implicit *im = hark_seq_states_of(call->seq)->implicit;
  for (uint32_t i = 0; i < sb->n_states; i++) {
    hark_tensor out;
    if (!hark_response_take_output(resp, sb->states[i].output_name, &out)) continue;
    if (!im || out.datatype != sb->states[i].datatype) {
      HARK_ERROR("model '%s': state output '%s' has type %s, expected %s; state kept", s->sk.d.name,
                 sb->states[i].output_name, hark_datatype_name(out.datatype),
                 hark_datatype_name(sb->states[i].datatype));
      free((void *)out.data);
      continue;
    }
    seq_tensor *t = &im->t[i];
    state_bytes_move(s, t->bytes, out.byte_size);
    free(t->data);
    t->data = (void *)out.data;
    t->bytes = out.byte_size;
    uint32_t skip = s->batched && out.ndims > 0 ? 1 : 0;
    t->ndims = out.ndims - skip;
    memcpy(t->dims, out.shape + skip, t->ndims * sizeof *t->dims);
  }
}

/* Before execute, outside the lock: the sequence is this request's alone. */
static void prepare(seq_sched *s, seq_call *call) {
  hark_request *req = call->req;
  hark_seq_states *states = hark_seq_states_of(call->seq);
  hark_request_set_sequence_slot(req, &states->backend);
  hark_request_get_callback(req, &call->fn, &call->userp);
  hark_request_set_callback(req, seq_on_response, call);
  for (uint32_t i = 0; i < s->sb->n_controls; i++)
    add_control(s, req, &s->sb->controls[i], call->flags);
  if (s->sb->n_states) add_states(s, req, states, call->flags);
}

/* ---- pumping -------------------------------------------------------------------- */

/* oldest: the smallest share of a batch worth an instance of its own. A
 * forward call has a fixed cost besides its rows (silero_vad: ~0.6 ms, and
 * ~0.1 ms per row), so halves of a small batch would cost more than they
 * save. A model that lists preferred batch sizes gets no part smaller than
 * the smallest of them (split_min). */
#define SPLIT_MIN 16u

static uint32_t split_min(const hark_sequence_batching *sb) {
  uint32_t m = 0;
  for (uint32_t i = 0; i < sb->n_preferred_batch_size; i++)
    if (!m || sb->preferred_batch_size[i] < m) m = sb->preferred_batch_size[i];
  return m > SPLIT_MIN ? m : SPLIT_MIN;
}

/* Hands `n` formed entries (from s->entries + first) to free instance `si`. */
static void give(seq_sched *s, seq_instance *si, uint32_t first, uint32_t n, hark_skel_pass *p) {
  for (uint32_t k = 0; k < n; k++) {
    hark_seq_entry *e = &s->entries[first + k];
    seq_call *call = e->item;
    call->seq = e->seq;
    call->flags = e->flags;
    si->calls[k] = call;
  }
  si->n = n;
  s->next_inst = (uint32_t)(si - s->insts + 1) % s->n_insts;
  hark_skel_claim(&s->sk, &si->base, p);
}

/* Forms batches for free instances, claiming each. Called with the lock
 * held. `oldest` forms one batch from the ready sequences and shares it
 * among the free instances, in parts of at least split_min(), so that a
 * round of many streams runs on as many cores as are free instead of one
 * instance after another. */
static void form_batches(seq_sched *s, uint64_t now, hark_skel_pass *p) {
  if (s->oldest) {
    for (;;) {
      uint32_t k = 0;
      for (uint32_t i = 0; i < s->n_insts; i++) k += !s->insts[i].base.busy;
      if (k == 0) return;
      uint32_t n = hark_seqtab_form(s->tab, 0, s->sk.stopping || s->sk.flushing, now, s->entries,
                                    &p->wake_ns);
      if (n == 0) return;
      uint32_t least = split_min(s->sb);
      uint32_t parts = n / least < k ? n / least : k;
      if (parts < 1) parts = 1;
      for (uint32_t i = 0, first = 0; i < parts; i++) {
        seq_instance *si = &s->insts[s->next_inst];
        while (si->base.busy) si = &s->insts[(uint32_t)(si - s->insts + 1) % s->n_insts];
        uint32_t size = (n - first + (parts - i) - 1) / (parts - i);
        give(s, si, first, size, p);
        first += size;
      }
    }
  }
  for (uint32_t i = 0; i < s->n_insts; i++) {
    seq_instance *si = &s->insts[(s->next_inst + i) % s->n_insts];
    if (si->base.busy) continue;
    uint32_t n = hark_seqtab_form(s->tab, (uint32_t)(si - s->insts),
                                  s->sk.stopping || s->sk.flushing, now, s->entries, &p->wake_ns);
    if (n) give(s, si, 0, n, p);
  }
}

/* Under the lock: what hark_sched_parked reads without it. */
static void publish_parked(seq_sched *s) {
  atomic_store(&s->parked_client, hark_seqtab_parked(s->tab, HARK_CORR_NS_SESSION));
  atomic_store(&s->parked_other, hark_seqtab_parked(s->tab, HARK_CORR_NS_KSERVE_HTTP));
}

/* The pass: idle sequences end, batches form, and the dropped states
 * leave the lock (p->out[0]) for seq_finish. */
static void seq_pass(hark_skel *sk, uint64_t now, hark_skel_pass *p) {
  seq_sched *s = (seq_sched *)sk;
  hark_seqtab_expire(s->tab, sk->stopping || sk->flushing, now, &p->wake_ns);
  form_batches(s, now, p);
  /* Inside this scheduler's execute the drops wait for it to return. */
  hark_seq_drop *drops = tls_executing == s ? NULL : hark_seqtab_take_drops(s->tab);
  if (drops) p->out[p->n_out++] = drops;
  p->queued = hark_seqtab_queued(s->tab);
  publish_parked(s);
}

static void seq_finish(hark_skel *sk, hark_skel_pass *p) {
  if (p->n_out) drops_fini((seq_sched *)sk, p->out[0]);
}

/* The request is finished for its sequence. Called with the lock held. */
static void call_done(seq_sched *s, seq_call *call, uint64_t now) {
  hark_seqtab_done(s->tab, call->seq, now);
  free(call);
}

static void seq_on_response(hark_response *resp, uint32_t flags, hark_error *err, void *userp) {
  seq_call *call = userp;
  seq_sched *s = call->s;
  if (resp && s->sb->n_states) keep_states(s, call, resp);
  if (call->fn) {
    call->fn(resp, flags, err, call->userp);
  } else {
    hark_response_free(resp);
    hark_error_free(err);
  }
  if (!(flags & HARK_RESPONSE_FINAL)) return;
  pthread_mutex_lock(&s->sk.lock);
  call->final_seen = true;
  bool done = call->returned; /* a decoupled final after execute returned */
  if (done) {
    call_done(s, call, hark_now_ns());
    s->sk.users++;
  }
  pthread_mutex_unlock(&s->sk.lock);
  if (done) hark_skel_pump(&s->sk);
}

/* A batch of whole recordings (each request both starts and ends its
 * sequence: Riva's Recognize, a one-shot KServe request) is bulk work: it
 * waits behind the others in the pool's bulk lane rather than taking the
 * worker that live streams need (issue 24). */
static bool seq_bulk(hark_skel *sk, hark_skel_inst *inst) {
  (void)sk;
  seq_instance *si = (seq_instance *)inst;
  const uint32_t both = HARK_REQUEST_SEQUENCE_START | HARK_REQUEST_SEQUENCE_END;
  for (uint32_t k = 0; k < si->n; k++)
    if ((si->calls[k]->flags & both) != both) return false;
  return si->n > 0;
}

static void seq_execute(hark_skel *sk, hark_skel_inst *inst) {
  seq_sched *s = (seq_sched *)sk;
  seq_instance *si = (seq_instance *)inst;
  for (uint32_t k = 0; k < si->n; k++) {
    prepare(s, si->calls[k]);
    si->reqs[k] = si->calls[k]->req;
  }
  seq_sched *outer = tls_executing;
  tls_executing = s;
  hark_log_context saved;
  hark_sched_log_batch(&sk->d, inst->index, si->reqs, si->n, &saved);
  sk->d.run(sk->d.ctx, inst->index, si->reqs, si->n);
  hark_sched_log_restore(&saved);
  tls_executing = outer;
}

/* Under the lock, after the execute returned: a request whose FINAL came
 * already is done for its sequence; the others are when it comes. */
static void seq_executed(hark_skel *sk, hark_skel_inst *inst) {
  seq_sched *s = (seq_sched *)sk;
  seq_instance *si = (seq_instance *)inst;
  uint64_t now = hark_now_ns();
  for (uint32_t k = 0; k < si->n; k++) {
    seq_call *call = si->calls[k];
    call->returned = true;
    if (call->final_seen) call_done(s, call, now);
  }
  si->n = 0;
}

static bool seq_drained(const hark_skel *sk) {
  return hark_seqtab_live(((const seq_sched *)sk)->tab) == 0;
}

/* ---- the hark_sched interface ----------------------------------------------------------- */

static void id_text(const hark_seq_key *key, char *buf, size_t cap) {
  if (key->is_str)
    snprintf(buf, cap, "'%.200s'", key->str);
  else
    snprintf(buf, cap, "%llu", (unsigned long long)key->num);
}

static hark_error *refusal(seq_sched *s, hark_seq_status st, const hark_seq_key *key) {
  const char *model = s->sk.d.name;
  char id[224] = "(none)";
  if (key) id_text(key, id, sizeof id);
  switch (st) {
  case HARK_SEQ_NEED_START:
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "inference request for sequence %s to model '%s' must specify the "
                          "START flag on the first request of the sequence",
                          id, model);
  case HARK_SEQ_TIMED_OUT:
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "inference request for sequence %s to model '%s': the sequence timed "
                          "out idle (no request for max_sequence_idle_microseconds = %llu) and "
                          "was ended; send START to begin it again",
                          id, model, (unsigned long long)s->sb->max_sequence_idle_us);
  case HARK_SEQ_QUEUE_FULL:
    return hark_error_new(HARK_ERR_UNAVAILABLE,
                          "Exceeds maximum queue size: model '%s' has %u sequence requests "
                          "waiting (queue full)",
                          model, hark_seqtab_queued(s->tab));
  case HARK_SEQ_BACKLOG_FULL:
    return hark_error_new(HARK_ERR_UNAVAILABLE,
                          "queue full: model '%s' has every sequence slot taken and %u sequences "
                          "waiting for one in its backlog; sequence %s refused",
                          model, hark_seqtab_backlog(s->tab), id);
  case HARK_SEQ_QUOTA:
    return hark_error_new(HARK_ERR_RESOURCE_EXHAUSTED,
                          "sequence quota exceeded: KServe clients' sequences on model '%s' hold "
                          "their share (%u%%, parameter " HARK_SEQ_CLIENT_SHARE_PARAM
                          ") of its sequence slots, queue and backlog (%u slots, %u requests "
                          "waiting); sequence %s refused, try again later",
                          model, s->client_share, hark_seqtab_client_slotted(s->tab),
                          hark_seqtab_client_queued(s->tab), id);
  case HARK_SEQ_OK: break;
  }
  return hark_error_new(HARK_ERR_INTERNAL, "unexpected sequence status %d", (int)st);
}

/* Under the lock: seqtab's admission rules. */
static hark_error *seq_admit(hark_skel *sk, hark_request *req, void *arg, uint64_t now) {
  seq_sched *s = (seq_sched *)sk;
  const char *sid = hark_request_correlation_id_str(req);
  uint64_t nid = hark_request_correlation_id(req);
  bool oneshot = sid ? !*sid : nid == 0;
  hark_seq_key key = {.ns = hark_request_correlation_ns(req),
                      .oneshot = oneshot,
                      .is_str = sid != NULL,
                      .num = nid,
                      .str = sid};
  hark_seq_status st = hark_seqtab_push(s->tab, &key, hark_request_flags(req), arg, now);
  publish_parked(s);
  return st == HARK_SEQ_OK ? NULL : refusal(s, st, oneshot ? NULL : &key);
}

static hark_error *seq_enqueue(hark_sched *base, hark_request *req) {
  seq_sched *s = (seq_sched *)base;
  if (s->batched && hark_request_batch_size(req) != 1)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "model '%s' uses sequence_batching: each request must have batch size "
                          "1, got %u",
                          s->sk.d.name, hark_request_batch_size(req));
  seq_call *call = hark_xcalloc(1, sizeof *call);
  call->s = s;
  call->req = req;
  hark_error *err = hark_skel_enqueue(&s->sk, req, call);
  if (err) free(call);
  return err;
}

static void seq_stop(hark_sched *base) {
  seq_sched *s = (seq_sched *)base;
  hark_skel_stop(&s->sk);
  pthread_mutex_lock(&s->sk.lock);
  hark_seq_drop *drops = hark_seqtab_take_drops(s->tab);
  pthread_mutex_unlock(&s->sk.lock);
  drops_fini(s, drops);
}

static void seq_destroy(seq_sched *s) {
  hark_skel_fini(&s->sk);
  if (s->tab) {
    drops_fini(s, hark_seqtab_take_drops(s->tab));
    hark_seqtab_free(s->tab);
  }
  for (uint32_t i = 0; s->insts && i < s->n_insts; i++) {
    free(s->insts[i].calls);
    free(s->insts[i].reqs);
  }
  free(s->insts);
  free(s->entries);
  free(s);
}

static void seq_free(hark_sched *base) { seq_destroy((seq_sched *)base); }

static const struct hark_adaptive *seq_delay(const hark_sched *base) {
  const seq_sched *s = (const seq_sched *)base;
  return s->tab ? hark_seqtab_delay(s->tab) : NULL;
}

static uint32_t seq_parked(const hark_sched *base, uint32_t ns) {
  const seq_sched *s = (const seq_sched *)base;
  return atomic_load(hark_seq_ns_is_client(ns) ? &s->parked_other : &s->parked_client);
}

static bool seq_state(const hark_sched *base, hark_sched_seq_state *out) {
  const seq_sched *s = (const seq_sched *)base;
  if (!s->sb->n_states) return false;
  out->bytes = atomic_load_explicit(&s->state_bytes, memory_order_relaxed);
  out->sequences = atomic_load_explicit(&s->state_seqs, memory_order_relaxed);
  return true;
}

/* The model's sequence_client_share parameter: a percentage, 1..100. */
static hark_error *client_share(const hark_sched_desc *desc, uint32_t *pct) {
  const char *v = hark_model_config_parameter(desc->config, HARK_SEQ_CLIENT_SHARE_PARAM);
  if (!v) return NULL;
  char *end;
  errno = 0;
  unsigned long n = strtoul(v, &end, 10);
  if (errno || end == v || *end || n < 1 || n > 100)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "model '%s': parameter " HARK_SEQ_CLIENT_SHARE_PARAM
                          " must be a percentage from 1 to 100, got '%s'",
                          desc->name, v);
  *pct = (uint32_t)n;
  return NULL;
}

static const hark_sched_ops seq_ops = {
    .enqueue = seq_enqueue,
    .stop = seq_stop,
    .free = seq_free,
    .queued = hark_skel_queued,
    .busy = hark_skel_busy,
    .delay = seq_delay,
    .parked = seq_parked,
    .seq_state = seq_state,
    .flush = hark_skel_flush,
};

static const hark_skel_ops seq_skel_ops = {
    .pass = seq_pass,
    .finish = seq_finish,
    .execute = seq_execute,
    .bulk = seq_bulk,
    .executed = seq_executed,
    .admit = seq_admit,
    .drained = seq_drained,
};

hark_error *hark_sched_sequence_new(const hark_sched_desc *desc, hark_sched **out) {
  *out = NULL;
  const hark_model_config *cfg = desc->config;
  uint32_t n_insts = desc->n_instances;
  if (n_insts == 0)
    return hark_error_new(HARK_ERR_INVALID_ARG, "model '%s' has no instances to run on",
                          desc->name);
  seq_sched *s = hark_xcalloc(1, sizeof *s);
  hark_skel_init(&s->sk, &seq_skel_ops, desc);
  s->sk.base.ops = &seq_ops;
  s->sb = &cfg->sequence_batching;
  atomic_init(&s->state_bytes, 0);
  atomic_init(&s->state_seqs, 0);
  s->oldest = s->sb->strategy == HARK_SEQ_OLDEST;
  s->batched = cfg->max_batch_size > 0;
  s->max_batch = cfg->max_batch_size ? cfg->max_batch_size : 1;

  hark_seq_policy policy;
  hark_seq_policy_init(&policy, cfg, n_insts, desc->default_max_queue);
  hark_error *err = client_share(desc, &policy.client_share_pct);
  if (err) {
    seq_destroy(s);
    return err;
  }
  s->client_share = policy.client_share_pct;
  s->tab = hark_seqtab_new(&policy);
  s->entries = calloc(s->max_batch, sizeof *s->entries);
  s->insts = calloc(n_insts, sizeof *s->insts);
  if (!s->tab || !s->entries || !s->insts) {
    seq_destroy(s);
    return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  }
  s->n_insts = n_insts;
  for (uint32_t i = 0; i < n_insts; i++) {
    seq_instance *si = &s->insts[i];
    hark_skel_inst_init(&s->sk, &si->base, i);
    si->calls = calloc(s->max_batch, sizeof *si->calls);
    si->reqs = calloc(s->max_batch, sizeof *si->reqs);
    if (!si->calls || !si->reqs) {
      seq_destroy(s);
      return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
    }
  }
  *out = &s->sk.base;
  return NULL;
}

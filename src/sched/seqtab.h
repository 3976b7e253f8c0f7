/*
 * seqtab.h — the sequence batcher's bookkeeping and decisions, as a plain
 * data structure: no threads, no locks (sequence.c holds its own), no clock
 * (every call that needs the time takes `now_ns`), and it never looks
 * inside what it queues, so each rule is a unit test with fake items and a
 * fake clock (tests/unit/test_sequence.c).
 *
 * It keeps the live sequences by (namespace, correlation id), each with its FIFO of
 * waiting requests, and decides:
 *   - admission: a request for an unknown sequence needs START (or it gets
 *     NEED_START, or TIMED_OUT when the id recently expired idle); START on
 *     a live sequence queues behind its earlier requests and restarts it
 *     when it runs; after a queued END, only START continues the id;
 *   - slots: `direct` binds each live sequence to one batch slot of one
 *     instance, `oldest` admits up to max_candidate_sequences; sequences
 *     beyond wait in a FIFO backlog (bounded) and take slots as they free;
 *   - batches: at most one request of a sequence is dispatched at a time,
 *     the head of its FIFO; `direct` batches the ready slots of one
 *     instance (minimum_slot_utilization, max_queue_delay), `oldest` the
 *     oldest ready heads of distinct sequences (the dynamic batcher's rules
 *     over them: max batch, preferred sizes, max_queue_delay — which
 *     adaptive_queue_delay moves by the count of ready sequences);
 *   - endings: after an END request, after max_sequence_idle without a
 *     request (remembering the id for a while, bounded), or — when
 *     flushing — as soon as a sequence is idle. The sequence's opaque
 *     states then move to the drop list for the caller to free.
 * A push with no key is a one-shot sequence: START|END, its own fresh slot.
 *
 * Quotas (issue 13, finding 6): the namespaces whose ids network clients
 * choose — KServe HTTP and gRPC, together the "client group" — may hold
 * at most client_share_pct of the slots (candidates for oldest), of the
 * requests waiting to run and of the backlog; a START past the slot share
 * waits in the backlog, and one past the backlog (or queue) share is
 * refused with HARK_SEQ_QUOTA. The rest — the server's own speech sessions
 * and in-process callers — keep the other share of the backlog and queue
 * for themselves, and may use any free slot: they are bounded already (by
 * --max-streams and the speech admission check), while a client's START
 * costs it one HTTP request. The backlog is one FIFO per namespace, and a
 * freed slot goes to the namespaces' heads in turn (round robin), so a
 * namespace with a long backlog delays another's next sequence by at most
 * one promotion each.
 */
#ifndef HARK_SCHED_SEQTAB_H
#define HARK_SCHED_SEQTAB_H

#include <stdbool.h>
#include <stdint.h>

#include "hark/config.h"

/* How many expired ids are remembered, and for how long. */
#define HARK_SEQ_EXPIRED_MEMORY 1024u
#define HARK_SEQ_EXPIRED_KEEP_NS (600ull * 1000000000ull)

typedef struct hark_seqtab hark_seqtab;
typedef struct hark_seq hark_seq;

/* A sequence is named by its id *and* the namespace the front end put it
 * in (hark_request_correlation_ns): the same id in two namespaces names two
 * sequences, and a push in one namespace can neither reach nor learn of a
 * sequence (or an expired id) of another. */
typedef struct hark_seq_key {
  uint32_t ns;
  bool oneshot; /* no id (num, str unused): a one-shot sequence in namespace ns */
  bool is_str;
  uint64_t num;
  const char *str; /* is_str: borrowed for the call; the table copies it */
} hark_seq_key;

typedef struct hark_seq_policy {
  bool oldest;             /* strategy oldest, else direct */
  uint32_t n_instances;    /* >= 1 */
  uint32_t max_batch;      /* >= 1: requests per execution, slots per instance (direct) */
  uint32_t max_candidates; /* oldest: live sequences holding a slot */
  uint32_t preferred[HARK_MAX_PREFERRED_BATCH_SIZES]; /* oldest */
  uint32_t n_preferred;
  uint64_t max_queue_delay_ns;
  hark_adaptive_delay adaptive; /* oldest: max_queue_delay_ns adapts (adaptive.h) */
  float min_slot_utilization;   /* direct: fraction of an instance's slots */
  uint64_t idle_ns;             /* max_sequence_idle */
  uint32_t max_queued;          /* requests waiting to run, sequences with a slot */
  uint32_t max_backlog;         /* requests waiting for a slot (backlog sequences) */
  /* The client group's share, in percent, of the slots, max_queued and
   * max_backlog (each at least 1); 0 or 100: no quota. */
  uint32_t client_share_pct;
  /* oldest: one-shot sequences (whole recordings) that may run at once;
   * 0: no bound. By default n_instances - 1 (with two or more), so a
   * flood of whole recordings, which wait for the worker pool's bulk lane
   * once they hold an instance, always leaves an instance to the streams'
   * chunks; they run before younger streaming work otherwise. */
  uint32_t max_oneshots_running;
} hark_seq_policy;

/* The default client share of a speech model, and the model config
 * parameter that sets it on any model ("1".."100"). Half: a flood of
 * client STARTs leaves the speech sessions at least half of everything,
 * and clients alone still get half. Other models, which no speech session
 * uses, default to 100 (no quota), as in Triton. */
#define HARK_SEQ_CLIENT_SHARE_DEFAULT 50u
#define HARK_SEQ_CLIENT_SHARE_PARAM "sequence_client_share"

/* Whether ids of namespace `ns` are chosen by network clients (the quota's
 * client group). */
bool hark_seq_ns_is_client(uint32_t ns);

/* From the model's config; n_instances and the bound on waiting requests
 * come from the scheduler. The client share is the default; the caller
 * parses HARK_SEQ_CLIENT_SHARE_PARAM (it can refuse a bad value). */
void hark_seq_policy_init(hark_seq_policy *p, const hark_model_config *cfg, uint32_t n_instances,
                          uint32_t max_queue);

typedef enum hark_seq_status {
  HARK_SEQ_OK = 0,
  HARK_SEQ_NEED_START,   /* unknown (or ended) sequence, request without START */
  HARK_SEQ_TIMED_OUT,    /* ... and the id expired idle recently */
  HARK_SEQ_QUEUE_FULL,   /* max_queued requests of slotted sequences wait */
  HARK_SEQ_BACKLOG_FULL, /* the request would wait for a slot; max_backlog do */
  HARK_SEQ_QUOTA,        /* the client group's share of the queue or backlog is full */
} hark_seq_status;

/* What a caller keeps per sequence; the table only moves these around. */
typedef struct hark_seq_states {
  void *backend;  /* the backend's state (hark_request_set_sequence_state) */
  void *implicit; /* the engine's implicit state tensors */
} hark_seq_states;

/* A dropped sequence's states, for the caller to free. */
typedef struct hark_seq_drop {
  hark_seq_states states;
  struct hark_seq_drop *next;
} hark_seq_drop;

/* One request of a formed batch. */
typedef struct hark_seq_entry {
  void *item;
  hark_seq *seq;
  uint32_t flags; /* HARK_REQUEST_SEQUENCE_START / _END as it will run */
  uint64_t enqueued_ns;
} hark_seq_entry;

hark_seqtab *hark_seqtab_new(const hark_seq_policy *p); /* NULL: out of memory */
/* Frees the table, its records and queued nodes (not the items) and any
 * states not yet taken (not freed: the caller drains first). */
void hark_seqtab_free(hark_seqtab *t);

/* Queues `item`. key NULL: a one-shot sequence in namespace 0. */
hark_seq_status hark_seqtab_push(hark_seqtab *t, const hark_seq_key *key, uint32_t flags,
                                 void *item, uint64_t now_ns);

/*
 * Forms the next batch for free instance `instance` (direct: only its
 * slots; oldest: any ready candidate), writing up to max_batch entries to
 * `out` and marking their sequences in flight. A START entry whose
 * sequence holds states moves them to the drop list first (a restart), so
 * take the drops before executing. Returns the count; 0 leaves *wake_ns at
 * when to form again (UINT64_MAX: only when something changes), lowered
 * only, never raised. `flush` sends whatever is ready without waiting.
 */
uint32_t hark_seqtab_form(hark_seqtab *t, uint32_t instance, bool flush, uint64_t now_ns,
                          hark_seq_entry *out, uint64_t *wake_ns);

/* The request dispatched for `seq` is finished: the sequence may run its
 * next request, or ends (END) and frees its slot. */
void hark_seqtab_done(hark_seqtab *t, hark_seq *seq, uint64_t now_ns);

/* Ends idle sequences (all idle ones when flushing, without remembering
 * their ids) and lowers *wake_ns to the next idle deadline. */
void hark_seqtab_expire(hark_seqtab *t, bool flush, uint64_t now_ns, uint64_t *wake_ns);

/* Detaches the drop list (NULL: empty); free each node with free(). */
hark_seq_drop *hark_seqtab_take_drops(hark_seqtab *t);

/* The states slot of a sequence, valid while one of its requests is in
 * flight (only that request touches it). */
hark_seq_states *hark_seq_states_of(hark_seq *seq);

uint32_t hark_seqtab_queued(const hark_seqtab *t);  /* requests waiting */
uint32_t hark_seqtab_live(const hark_seqtab *t);    /* sequences, backlog included */
uint32_t hark_seqtab_backlog(const hark_seqtab *t); /* sequences without a slot */
uint32_t hark_seqtab_in_flight(const hark_seqtab *t);
/* Client group: sequences holding a slot, requests waiting (backlog
 * included), requests waiting in the backlog. */
uint32_t hark_seqtab_client_slotted(const hark_seqtab *t);
uint32_t hark_seqtab_client_queued(const hark_seqtab *t);
uint32_t hark_seqtab_client_backlog(const hark_seqtab *t);
/* Requests parked in the backlog of the other quota group than `ns`'s:
 * they wait within their own share and stand in no way of a new sequence
 * of `ns` beyond one promotion turn (what speech admission discounts). */
uint32_t hark_seqtab_parked(const hark_seqtab *t, uint32_t ns);
/* oldest: the queue delay's controller, which a scrape may read from any
 * thread (adaptive.h); NULL for direct. The depth it sees is the number of
 * sequences with a request ready to run. */
const struct hark_adaptive *hark_seqtab_delay(const hark_seqtab *t);

#endif

/*
 * seqtab.c — the sequence batcher's bookkeeping (rules in seqtab.h).
 *
 * Records live in a chained hash by (namespace, correlation id) (one-shot sequences are
 * not hashed). Each record is on at most one of three lists: `ready`
 * (oldest only: holds a candidate slot, has a waiting request, nothing in
 * flight; kept sorted by the arrival of its head request, so a batch takes
 * the oldest heads), `idle` (slot, nothing waiting or in flight; sorted by
 * when it went idle, so expiry pops from the front) and one `backlog` per
 * namespace (no slot yet; FIFO; a freed slot goes to their heads in turn,
 * skipping the client group while it holds its share). Direct finds an instance's ready sequences by scanning that
 * instance's max_batch slots. Expired ids go to a small ring that is only
 * read on the error path and when a sequence starts.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "hark/request.h"
#include "sched/adaptive.h"
#include "sched/batcher.h"
#include "sched/seqtab.h"
#include "util/alloc.h"

/* LIST_BACKLOG + i: namespace i's backlog (namespaces past the last front
 * end's share namespace 0's list). */
enum { LIST_NONE = 0, LIST_READY, LIST_IDLE, LIST_BACKLOG };
#define SEQ_NS_LISTS 4u

typedef struct seq_node {
  void *item;
  uint32_t flags;
  uint64_t enqueued_ns;
  struct seq_node *next;
} seq_node;

struct hark_seq {
  uint32_t ns;
  bool is_str, oneshot;
  bool client; /* in the client group (quota) */
  uint64_t num;
  char *str;
  uint64_t hash;
  hark_seq *hnext;
  seq_node *head, *tail;
  uint32_t n;
  bool in_flight, tail_ended;
  uint32_t flight_flags;
  int64_t slot; /* -1: in the backlog */
  uint64_t idle_since;
  int list;
  hark_seq *prev, *next;
  hark_seq *aprev, *anext; /* every record, for teardown */
  hark_seq_states states;
};

typedef struct seq_list {
  hark_seq *head, *tail;
  uint32_t n;
} seq_list;

typedef struct expired_id {
  uint32_t ns;
  bool used, is_str;
  uint64_t num;
  char *str;
  uint64_t at_ns;
} expired_id;

struct hark_seqtab {
  hark_seq_policy p;
  hark_seq **buckets;
  uint32_t n_buckets, n_hashed, n_live;
  uint64_t seed; /* of key_hash */
  hark_seq *all;
  bool tearing_down;
  hark_seq **slots; /* direct: n_instances * max_batch */
  uint32_t n_slots, n_slotted;
  seq_list ready, idle, backlog[SEQ_NS_LISTS];
  uint32_t n_backlog, next_backlog; /* sequences in all backlogs; whose turn */
  uint32_t queued, in_flight;
  uint32_t oneshots_in_flight; /* of in_flight, one-shot sequences */
  uint32_t queued_backlog;     /* of `queued`, those of sequences without a slot */
  /* The client group: its bounds (the policy's share) and use. */
  uint32_t client_max_slots, client_max_queued, client_max_backlog;
  uint32_t other_max_queued, other_max_backlog;
  uint32_t client_slotted, client_queued, client_queued_backlog;
  hark_seq_drop *drops;
  expired_id expired[HARK_SEQ_EXPIRED_MEMORY];
  uint32_t expired_next;
  hark_batch_policy bp;
  hark_adaptive adapt;    /* oldest: bp's max_queue_delay_ns */
  hark_batch_item *items; /* oldest: max_batch + 1 */
  hark_seq **cands;       /* oldest: the sequences of items */
};

void hark_seq_policy_init(hark_seq_policy *p, const hark_model_config *cfg, uint32_t n_instances,
                          uint32_t max_queue) {
  const hark_sequence_batching *sb = &cfg->sequence_batching;
  *p = (hark_seq_policy){0};
  p->oldest = sb->strategy == HARK_SEQ_OLDEST;
  p->n_instances = n_instances ? n_instances : 1;
  p->max_batch = cfg->max_batch_size ? cfg->max_batch_size : 1;
  p->max_candidates = sb->max_candidate_sequences ? sb->max_candidate_sequences : 1;
  for (uint32_t i = 0; i < sb->n_preferred_batch_size && i < HARK_MAX_PREFERRED_BATCH_SIZES; i++)
    if (sb->preferred_batch_size[i] >= 1 && sb->preferred_batch_size[i] <= p->max_batch)
      p->preferred[p->n_preferred++] = sb->preferred_batch_size[i];
  p->max_queue_delay_ns =
      (p->oldest ? sb->oldest_max_queue_delay_us : sb->direct_max_queue_delay_us) * 1000u;
  if (p->oldest) p->adaptive = cfg->oldest_adaptive_delay;
  p->min_slot_utilization = sb->minimum_slot_utilization;
  p->idle_ns = (sb->max_sequence_idle_us ? sb->max_sequence_idle_us : 1000000u) * 1000u;
  p->max_queued = max_queue ? max_queue : 4096;
  p->max_backlog = p->max_queued;
  p->client_share_pct = hark_model_config_is_speech(cfg) ? HARK_SEQ_CLIENT_SHARE_DEFAULT : 100;
  p->max_oneshots_running = p->oldest && p->n_instances > 1 ? p->n_instances - 1 : 0;
}

bool hark_seq_ns_is_client(uint32_t ns) {
  return ns == HARK_CORR_NS_KSERVE_HTTP || ns == HARK_CORR_NS_KSERVE_GRPC;
}

/* ---- lists ---------------------------------------------------------------------- */

static seq_list *list_of(hark_seqtab *t, int which) {
  return which == LIST_READY  ? &t->ready
         : which == LIST_IDLE ? &t->idle
                              : &t->backlog[which - LIST_BACKLOG];
}

static int backlog_of(uint32_t ns) { return LIST_BACKLOG + (int)(ns < SEQ_NS_LISTS ? ns : 0); }

static void list_unlink(hark_seqtab *t, hark_seq *s) {
  if (s->list == LIST_NONE) return;
  seq_list *l = list_of(t, s->list);
  if (s->prev)
    s->prev->next = s->next;
  else
    l->head = s->next;
  if (s->next)
    s->next->prev = s->prev;
  else
    l->tail = s->prev;
  s->prev = s->next = NULL;
  s->list = LIST_NONE;
  l->n--;
}

/* Inserts after `after` (NULL: at the front). */
static void list_insert(hark_seqtab *t, int which, hark_seq *after, hark_seq *s) {
  seq_list *l = list_of(t, which);
  s->prev = after;
  s->next = after ? after->next : l->head;
  if (s->next)
    s->next->prev = s;
  else
    l->tail = s;
  if (after)
    after->next = s;
  else
    l->head = s;
  s->list = which;
  l->n++;
}

static void list_append(hark_seqtab *t, int which, hark_seq *s) {
  list_insert(t, which, list_of(t, which)->tail, s);
}

/* ---- keys ------------------------------------------------------------------------- */

/* Client-chosen ids land in the hash: the table's random seed keeps a
 * client from choosing ids that share one chain. */
static uint64_t key_hash(const hark_seqtab *t, const hark_seq_key *k) {
  uint64_t ns = ((uint64_t)k->ns * 0xc2b2ae3d27d4eb4full) ^ t->seed;
  if (k->is_str) {
    uint64_t h = 1469598103934665603ull ^ ns; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)k->str; *p; p++)
      h = (h ^ *p) * 1099511628211ull;
    return h ^ 0x5bd1e995u;
  }
  uint64_t z = (k->num ^ ns) + 0x9e3779b97f4a7c15ull; /* splitmix64 */
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static bool key_is(uint32_t ns, bool is_str, uint64_t num, const char *str, const hark_seq_key *k) {
  return ns == k->ns && is_str == k->is_str && (is_str ? strcmp(str, k->str) == 0 : num == k->num);
}

static hark_seq *lookup(const hark_seqtab *t, const hark_seq_key *k, uint64_t h) {
  for (hark_seq *s = t->buckets[h & (t->n_buckets - 1)]; s; s = s->hnext)
    if (s->hash == h && key_is(s->ns, s->is_str, s->num, s->str, k)) return s;
  return NULL;
}

static void hash_insert(hark_seqtab *t, hark_seq *s) {
  if (t->n_hashed >= t->n_buckets) {
    uint32_t nb = t->n_buckets * 2;
    hark_seq **b = calloc(nb, sizeof *b);
    if (b) {
      for (uint32_t i = 0; i < t->n_buckets; i++)
        for (hark_seq *x = t->buckets[i], *next; x; x = next) {
          next = x->hnext;
          x->hnext = b[x->hash & (nb - 1)];
          b[x->hash & (nb - 1)] = x;
        }
      free(t->buckets);
      t->buckets = b;
      t->n_buckets = nb;
    } /* else: longer chains, still correct */
  }
  hark_seq **head = &t->buckets[s->hash & (t->n_buckets - 1)];
  s->hnext = *head;
  *head = s;
  t->n_hashed++;
}

static void hash_remove(hark_seqtab *t, hark_seq *s) {
  for (hark_seq **p = &t->buckets[s->hash & (t->n_buckets - 1)]; *p; p = &(*p)->hnext)
    if (*p == s) {
      *p = s->hnext;
      t->n_hashed--;
      return;
    }
}

/* ---- expired ids ------------------------------------------------------------------ */

static void expired_clear(expired_id *e) {
  free(e->str);
  memset(e, 0, sizeof *e);
}

static void expired_remember(hark_seqtab *t, const hark_seq *s, uint64_t now) {
  expired_id *e = &t->expired[t->expired_next];
  t->expired_next = (t->expired_next + 1) % HARK_SEQ_EXPIRED_MEMORY;
  expired_clear(e);
  char *copy = s->is_str ? hark_xstrdup(s->str) : NULL;
  if (s->is_str && !copy) return; /* forgetting is the safe failure */
  *e = (expired_id){
      .ns = s->ns, .used = true, .is_str = s->is_str, .num = s->num, .str = copy, .at_ns = now};
}

static expired_id *expired_find(hark_seqtab *t, const hark_seq_key *k, uint64_t now) {
  for (uint32_t i = 0; i < HARK_SEQ_EXPIRED_MEMORY; i++) {
    expired_id *e = &t->expired[i];
    if (e->used && key_is(e->ns, e->is_str, e->num, e->str, k))
      return now - e->at_ns < HARK_SEQ_EXPIRED_KEEP_NS ? e : NULL;
  }
  return NULL;
}

/* ---- records ------------------------------------------------------------------------- */

static void drop_states(hark_seqtab *t, hark_seq *s) {
  if (!s->states.backend && !s->states.implicit) return;
  hark_seq_drop *d = hark_xmalloc(sizeof *d);
  d->states = s->states;
  d->next = t->drops;
  t->drops = d;
  s->states = (hark_seq_states){0};
}

static bool slot_free(const hark_seqtab *t) {
  return t->p.oldest ? t->n_slotted < t->p.max_candidates : t->n_slotted < t->n_slots;
}

/* A free slot this group may take: the client group only within its share. */
static bool slot_free_for(const hark_seqtab *t, bool client) {
  return slot_free(t) && (!client || t->client_slotted < t->client_max_slots);
}

/* Oldest: ready sequences sorted by their head's arrival (mostly appends). */
static void make_ready(hark_seqtab *t, hark_seq *s) {
  if (!t->p.oldest) return; /* direct scans its slots */
  hark_seq *after = t->ready.tail;
  while (after && after->head->enqueued_ns > s->head->enqueued_ns) after = after->prev;
  list_insert(t, LIST_READY, after, s);
}

/* Direct: the least loaded instance's first free slot, so sequences spread. */
static void slot_take(hark_seqtab *t, hark_seq *s) {
  t->n_slotted++;
  if (s->client) t->client_slotted++;
  if (t->p.oldest) {
    s->slot = 0;
    return;
  }
  uint32_t best = 0, best_load = UINT32_MAX;
  for (uint32_t i = 0; i < t->p.n_instances; i++) {
    uint32_t load = 0, first_free = UINT32_MAX;
    for (uint32_t j = 0; j < t->p.max_batch; j++) {
      if (t->slots[i * t->p.max_batch + j])
        load++;
      else if (first_free == UINT32_MAX)
        first_free = i * t->p.max_batch + j;
    }
    if (first_free != UINT32_MAX && load < best_load) {
      best_load = load;
      best = first_free;
    }
  }
  t->slots[best] = s;
  s->slot = best;
}

/* The backlog head whose turn it is and that may take the free slot: the
 * namespaces in turn, so none waits behind another's whole backlog. */
static hark_seq *backlog_next(hark_seqtab *t) {
  for (uint32_t i = 0; i < SEQ_NS_LISTS; i++) {
    uint32_t at = (t->next_backlog + i) % SEQ_NS_LISTS;
    hark_seq *s = t->backlog[at].head;
    if (!s || !slot_free_for(t, s->client)) continue;
    t->next_backlog = (at + 1) % SEQ_NS_LISTS;
    return s;
  }
  return NULL;
}

static void promote_backlog(hark_seqtab *t) {
  hark_seq *s;
  while (slot_free(t) && (s = backlog_next(t))) {
    list_unlink(t, s);
    t->n_backlog--;
    slot_take(t, s);
    t->queued_backlog -= s->n;
    if (s->client) t->client_queued_backlog -= s->n;
    if (s->n) make_ready(t, s);
  }
}

static void record_remove(hark_seqtab *t, hark_seq *s) {
  if (s->list >= LIST_BACKLOG) t->n_backlog--; /* only at teardown */
  list_unlink(t, s);
  if (!s->oneshot) hash_remove(t, s);
  drop_states(t, s);
  if (s->slot >= 0) {
    if (!t->p.oldest) t->slots[s->slot] = NULL;
    t->n_slotted--;
    if (s->client) t->client_slotted--;
  }
  if (s->aprev)
    s->aprev->anext = s->anext;
  else
    t->all = s->anext;
  if (s->anext) s->anext->aprev = s->aprev;
  for (seq_node *n = s->head, *next; n; n = next) { /* only at free time */
    next = n->next;
    free(n);
  }
  t->n_live--;
  free(s->str);
  free(s);
  if (!t->tearing_down) promote_backlog(t);
}

/* ---- the table ------------------------------------------------------------------------ */

static uint32_t share_of(uint32_t total, uint32_t pct) {
  uint64_t n = (uint64_t)total * pct / 100u;
  return n ? (uint32_t)n : 1;
}

/* The client group's share of each bound, and the others' rest (at least
 * one each; the whole bound still holds for both together). */
static void quota_init(hark_seqtab *t) {
  uint32_t pct = t->p.client_share_pct;
  uint32_t slots = t->p.oldest ? t->p.max_candidates : t->p.n_instances * t->p.max_batch;
  if (pct == 0 || pct >= 100) {
    t->client_max_slots = slots;
    t->client_max_queued = t->other_max_queued = t->p.max_queued;
    t->client_max_backlog = t->other_max_backlog = t->p.max_backlog;
    return;
  }
  t->client_max_slots = share_of(slots, pct);
  t->client_max_queued = share_of(t->p.max_queued, pct);
  t->client_max_backlog = share_of(t->p.max_backlog, pct);
  t->other_max_queued =
      t->p.max_queued > t->client_max_queued ? t->p.max_queued - t->client_max_queued : 1;
  t->other_max_backlog =
      t->p.max_backlog > t->client_max_backlog ? t->p.max_backlog - t->client_max_backlog : 1;
}

/* Whether one more request fits where it would wait: the whole bound, then
 * its group's share of it. */
static hark_seq_status room_for(const hark_seqtab *t, bool client, bool to_backlog) {
  if (to_backlog) {
    uint32_t mine =
        client ? t->client_queued_backlog : t->queued_backlog - t->client_queued_backlog;
    if (t->queued_backlog >= t->p.max_backlog) return HARK_SEQ_BACKLOG_FULL;
    if (mine >= (client ? t->client_max_backlog : t->other_max_backlog))
      return client ? HARK_SEQ_QUOTA : HARK_SEQ_BACKLOG_FULL;
    return HARK_SEQ_OK;
  }
  uint32_t slotted = t->queued - t->queued_backlog;
  uint32_t client_slotted = t->client_queued - t->client_queued_backlog;
  uint32_t mine = client ? client_slotted : slotted - client_slotted;
  if (slotted >= t->p.max_queued) return HARK_SEQ_QUEUE_FULL;
  if (mine >= (client ? t->client_max_queued : t->other_max_queued))
    return client ? HARK_SEQ_QUOTA : HARK_SEQ_QUEUE_FULL;
  return HARK_SEQ_OK;
}

hark_seqtab *hark_seqtab_new(const hark_seq_policy *p) {
  hark_seqtab *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->p = *p;
  if (!t->p.n_instances) t->p.n_instances = 1;
  if (!t->p.max_batch) t->p.max_batch = 1;
  if (!t->p.max_candidates) t->p.max_candidates = 1;
  if (!t->p.max_backlog) t->p.max_backlog = 1;
  quota_init(t);
  if (getrandom(&t->seed, sizeof t->seed, GRND_NONBLOCK) != (ssize_t)sizeof t->seed)
    t->seed = (uint64_t)(uintptr_t)t ^ hark_now_ns(); /* no entropy yet: still not fixed */
  t->n_buckets = 64;
  t->buckets = calloc(t->n_buckets, sizeof *t->buckets);
  t->n_slots = t->p.oldest ? 0 : t->p.n_instances * t->p.max_batch;
  t->slots = calloc(t->n_slots ? t->n_slots : 1, sizeof *t->slots);
  t->items = calloc(t->p.max_batch + 1, sizeof *t->items);
  t->cands = calloc(t->p.max_batch + 1, sizeof *t->cands);
  t->bp = (hark_batch_policy){.max_batch_size = t->p.max_batch,
                              .max_queue_delay_ns = t->p.max_queue_delay_ns};
  for (uint32_t i = 0; i < t->p.n_preferred; i++)
    t->bp.preferred[t->bp.n_preferred++] = t->p.preferred[i];
  hark_adaptive_init(&t->adapt, t->p.oldest ? &t->p.adaptive : NULL, t->p.max_queue_delay_ns);
  t->bp.max_queue_delay_ns = atomic_load(&t->adapt.delay_ns);
  if (!t->buckets || !t->slots || !t->items || !t->cands) {
    hark_seqtab_free(t);
    return NULL;
  }
  return t;
}

void hark_seqtab_free(hark_seqtab *t) {
  if (!t) return;
  t->tearing_down = true;
  while (t->all && t->buckets && t->slots) record_remove(t, t->all);
  for (hark_seq_drop *d = t->drops, *next; d; d = next) {
    next = d->next;
    free(d);
  }
  for (uint32_t i = 0; i < HARK_SEQ_EXPIRED_MEMORY; i++) expired_clear(&t->expired[i]);
  free(t->buckets);
  free(t->slots);
  free(t->items);
  free(t->cands);
  free(t);
}

hark_seq_status hark_seqtab_push(hark_seqtab *t, const hark_seq_key *key, uint32_t flags,
                                 void *item, uint64_t now) {
  uint32_t ns = key ? key->ns : 0;
  bool client = hark_seq_ns_is_client(ns);
  if (key && key->oneshot) key = NULL;
  uint64_t h = key ? key_hash(t, key) : 0;
  hark_seq *s = key ? lookup(t, key, h) : NULL;
  if (!key) flags = HARK_REQUEST_SEQUENCE_START | HARK_REQUEST_SEQUENCE_END;
  flags &= HARK_REQUEST_SEQUENCE_START | HARK_REQUEST_SEQUENCE_END;
  if ((!s || s->tail_ended) && !(flags & HARK_REQUEST_SEQUENCE_START))
    return !s && expired_find(t, key, now) ? HARK_SEQ_TIMED_OUT : HARK_SEQ_NEED_START;
  /* Waiting for a slot and waiting to run are bounded apart, so a full
   * backlog never keeps a live sequence from reaching its END. */
  bool to_backlog = s ? s->slot < 0 : !slot_free_for(t, client);
  hark_seq_status room = room_for(t, client, to_backlog);
  if (room != HARK_SEQ_OK) return room;

  seq_node *node = hark_xmalloc(sizeof *node);
  *node = (seq_node){.item = item, .flags = flags, .enqueued_ns = now};
  if (!s) {
    s = hark_xcalloc(1, sizeof *s);
    s->oneshot = !key;
    s->slot = -1;
    s->ns = ns;
    s->client = client;
    if (key) {
      s->is_str = key->is_str;
      s->num = key->num;
      s->hash = h;
      if (key->is_str) s->str = hark_xstrdup(key->str);
      expired_id *e = expired_find(t, key, now);
      if (e) expired_clear(e);
      hash_insert(t, s);
    }
    t->n_live++;
    s->anext = t->all;
    if (t->all) t->all->aprev = s;
    t->all = s;
    if (!to_backlog) {
      slot_take(t, s);
    } else {
      list_append(t, backlog_of(ns), s);
      t->n_backlog++;
    }
  }
  if (s->tail)
    s->tail->next = node;
  else
    s->head = node;
  s->tail = node;
  s->n++;
  t->queued++;
  if (s->slot < 0) t->queued_backlog++;
  if (client) {
    t->client_queued++;
    if (s->slot < 0) t->client_queued_backlog++;
  }
  s->tail_ended = (flags & HARK_REQUEST_SEQUENCE_END) != 0;
  if (s->list == LIST_IDLE) list_unlink(t, s);
  if (s->slot >= 0 && !s->in_flight && s->n == 1) make_ready(t, s);
  return HARK_SEQ_OK;
}

static void dispatch(hark_seqtab *t, hark_seq *s, hark_seq_entry *out) {
  if (s->list == LIST_READY) list_unlink(t, s);
  seq_node *node = s->head;
  s->head = node->next;
  if (!s->head) s->tail = NULL;
  s->n--;
  t->queued--;
  if (s->client) t->client_queued--;
  *out = (hark_seq_entry){node->item, s, node->flags, node->enqueued_ns};
  free(node);
  s->in_flight = true;
  s->flight_flags = out->flags;
  t->in_flight++;
  if (s->oneshot) t->oneshots_in_flight++;
  if (out->flags & HARK_REQUEST_SEQUENCE_START) drop_states(t, s); /* a restart */
}

static uint32_t form_direct(hark_seqtab *t, uint32_t instance, bool flush, uint64_t now,
                            hark_seq_entry *out, uint64_t *wake) {
  if (instance >= t->p.n_instances) return 0;
  hark_seq **slots = &t->slots[instance * t->p.max_batch];
  uint32_t k = 0;
  uint64_t oldest = UINT64_MAX;
  for (uint32_t j = 0; j < t->p.max_batch; j++) {
    hark_seq *s = slots[j];
    if (!s || s->in_flight || !s->n) continue;
    k++;
    if (s->head->enqueued_ns < oldest) oldest = s->head->enqueued_ns;
  }
  if (k == 0) return 0;
  uint64_t delay = t->p.max_queue_delay_ns;
  uint32_t need = (uint32_t)(t->p.min_slot_utilization * (float)t->p.max_batch + 0.999f);
  if (need < 1) need = 1;
  uint64_t due = oldest <= UINT64_MAX - delay ? oldest + delay : UINT64_MAX;
  if (!flush && delay && k < need && now < due) {
    if (due < *wake) *wake = due;
    return 0;
  }
  uint32_t n = 0;
  for (uint32_t j = 0; j < t->p.max_batch; j++) {
    hark_seq *s = slots[j];
    if (s && !s->in_flight && s->n) dispatch(t, s, &out[n++]);
  }
  return n;
}

static uint32_t form_oldest(hark_seqtab *t, bool flush, uint64_t now, hark_seq_entry *out,
                            uint64_t *wake) {
  uint32_t n = 0, oneshots = t->oneshots_in_flight, cap = t->p.max_oneshots_running;
  uint64_t first = UINT64_MAX;
  for (hark_seq *s = t->ready.head; s && n <= t->p.max_batch; s = s->next) {
    if (s->oneshot && cap && oneshots++ >= cap) continue; /* waits for a running one */
    t->cands[n] = s;
    t->items[n++] = (hark_batch_item){1, s->head->enqueued_ns};
    if (s->head->enqueued_ns < first) first = s->head->enqueued_ns;
  }
  if (n && t->adapt.enabled) t->bp.max_queue_delay_ns = hark_adaptive_delay_for(&t->adapt, first);
  /* Waiting for company is pointless once every live sequence is ready or
   * running: no other request can come before one of those returns (a
   * closed loop of N clients then runs at full batches instead of a batch
   * per max_queue_delay). */
  bool nobody_else = t->ready.n + t->in_flight >= t->n_live;
  hark_batch_decision d;
  hark_batch_decide(&t->bp, t->items, n, flush || nobody_else, now, &d);
  if (d.n_requests == 0) {
    if (d.wait_until_ns < *wake) *wake = d.wait_until_ns;
    return 0;
  }
  hark_adaptive_formed(&t->adapt, t->ready.n);
  for (uint32_t i = 0; i < d.n_requests; i++) dispatch(t, t->cands[i], &out[i]);
  return d.n_requests;
}

uint32_t hark_seqtab_form(hark_seqtab *t, uint32_t instance, bool flush, uint64_t now,
                          hark_seq_entry *out, uint64_t *wake) {
  return t->p.oldest ? form_oldest(t, flush, now, out, wake)
                     : form_direct(t, instance, flush, now, out, wake);
}

void hark_seqtab_done(hark_seqtab *t, hark_seq *s, uint64_t now) {
  s->in_flight = false;
  t->in_flight--;
  if (s->oneshot) t->oneshots_in_flight--;
  bool ended = false;
  if (s->flight_flags & HARK_REQUEST_SEQUENCE_END) {
    drop_states(t, s);
    if (!s->n) {
      record_remove(t, s);
      ended = true;
    }
  }
  if (!ended && s->n) {
    make_ready(t, s);
  } else if (!ended) {
    s->idle_since = now;
    list_append(t, LIST_IDLE, s);
  }
  /* Nothing runs and nothing is ready: the adaptive delay's idle spell. */
  if (t->in_flight == 0 && t->ready.n == 0) hark_adaptive_idle(&t->adapt, now);
}

void hark_seqtab_expire(hark_seqtab *t, bool flush, uint64_t now, uint64_t *wake) {
  while (t->idle.head) {
    hark_seq *s = t->idle.head;
    uint64_t due = s->idle_since + t->p.idle_ns;
    if (!flush && due > now) {
      if (due < *wake) *wake = due;
      return;
    }
    if (!flush && !s->oneshot) expired_remember(t, s, now);
    record_remove(t, s);
  }
}

hark_seq_drop *hark_seqtab_take_drops(hark_seqtab *t) {
  hark_seq_drop *d = t->drops;
  t->drops = NULL;
  return d;
}

hark_seq_states *hark_seq_states_of(hark_seq *s) { return &s->states; }
uint32_t hark_seqtab_queued(const hark_seqtab *t) { return t->queued; }
uint32_t hark_seqtab_live(const hark_seqtab *t) { return t->n_live; }
uint32_t hark_seqtab_backlog(const hark_seqtab *t) { return t->n_backlog; }
uint32_t hark_seqtab_in_flight(const hark_seqtab *t) { return t->in_flight; }
uint32_t hark_seqtab_client_slotted(const hark_seqtab *t) { return t->client_slotted; }
uint32_t hark_seqtab_client_queued(const hark_seqtab *t) { return t->client_queued; }
uint32_t hark_seqtab_client_backlog(const hark_seqtab *t) { return t->client_queued_backlog; }

uint32_t hark_seqtab_parked(const hark_seqtab *t, uint32_t ns) {
  return hark_seq_ns_is_client(ns) ? t->queued_backlog - t->client_queued_backlog
                                   : t->client_queued_backlog;
}

const struct hark_adaptive *hark_seqtab_delay(const hark_seqtab *t) {
  return t->p.oldest ? &t->adapt : NULL;
}

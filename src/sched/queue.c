/*
 * queue.c — priority levels of FIFO lists with timeout policies.
 *
 * Each level keeps two intrusive lists of nodes: `live` (arrival order) and
 * `delayed` (requests whose DELAY timeout expired, in expiry order). The
 * nodes that carry a deadline are also threaded on one list sorted by
 * deadline, so finding what expired and the next wake-up time are O(1) at
 * the head; insertion scans from the tail, which is O(1) when every request
 * uses the level's default timeout (deadlines then arrive in order).
 * A node is malloc'ed per push; the level bound caps how many exist.
 */
#include <stdlib.h>

#include "sched/queue.h"
#include "util/alloc.h"

struct hark_queue_node {
  void *item;
  uint64_t enqueued_ns;
  uint64_t deadline_ns; /* 0: none (or already expired into `delayed`) */
  uint32_t batch_size;
  uint32_t level; /* index into q->levels */
  bool delayed;
  struct hark_queue_node *prev, *next;   /* the level's live or delayed list */
  struct hark_queue_node *dprev, *dnext; /* the deadline list */
};

typedef struct node_list {
  hark_queue_node *head, *tail;
} node_list;

typedef struct queue_level {
  hark_queue_policy policy;
  uint32_t max;
  uint32_t count; /* live + delayed */
  node_list live, delayed;
} queue_level;

struct hark_queue {
  uint32_t n_levels;
  uint32_t default_level; /* 1-based */
  uint32_t size;
  queue_level *levels;
  hark_queue_node *dhead, *dtail; /* sorted by deadline_ns */
};

/* ---- construction -------------------------------------------------------- */

hark_error *hark_queue_new(const hark_dynamic_batching *db, uint32_t default_max_queue,
                           hark_queue **out) {
  *out = NULL;
  uint32_t levels = db->priority_levels ? db->priority_levels : 1;
  uint32_t def = 1;
  if (db->priority_levels) {
    /* 0 picks the middle level, as the config's documentation says. */
    def = db->default_priority_level ? db->default_priority_level : (levels + 1) / 2;
    if (def > levels)
      return hark_error_new(HARK_ERR_INVALID_ARG,
                            "dynamic_batching: default_priority_level %u is outside [1, %u]", def,
                            levels);
  }
  for (uint32_t i = 0; i < db->n_priority_queue_policy; i++) {
    uint32_t lv = db->priority_queue_policy[i].level;
    if (lv < 1 || lv > levels)
      return hark_error_new(HARK_ERR_INVALID_ARG,
                            "dynamic_batching: priority_queue_policy key %u is outside [1, %u]", lv,
                            levels);
  }
  hark_queue *q = hark_xcalloc(1, sizeof *q);
  q->levels = hark_xcalloc(levels, sizeof *q->levels);
  q->n_levels = levels;
  q->default_level = def;
  uint32_t cap = default_max_queue ? default_max_queue : HARK_QUEUE_FALLBACK_MAX;
  for (uint32_t i = 0; i < levels; i++) q->levels[i].policy = db->default_queue_policy;
  for (uint32_t i = 0; i < db->n_priority_queue_policy; i++)
    q->levels[db->priority_queue_policy[i].level - 1].policy = db->priority_queue_policy[i].policy;
  for (uint32_t i = 0; i < levels; i++) {
    uint32_t m = q->levels[i].policy.max_queue_size;
    q->levels[i].max = m ? m : cap;
  }
  *out = q;
  return NULL;
}

static void list_free(node_list *l) {
  for (hark_queue_node *n = l->head, *next; n; n = next) {
    next = n->next;
    free(n);
  }
}

void hark_queue_free(hark_queue *q) {
  if (!q) return;
  for (uint32_t i = 0; i < q->n_levels; i++) {
    list_free(&q->levels[i].live);
    list_free(&q->levels[i].delayed);
  }
  free(q->levels);
  free(q);
}

uint32_t hark_queue_levels(const hark_queue *q) { return q->n_levels; }

uint32_t hark_queue_level(const hark_queue *q, uint32_t priority) {
  if (q->n_levels == 1) return 1;
  if (priority == 0 || priority > q->n_levels) return q->default_level;
  return priority;
}

uint32_t hark_queue_size(const hark_queue *q) { return q->size; }

uint32_t hark_queue_level_size(const hark_queue *q, uint32_t level) {
  return level >= 1 && level <= q->n_levels ? q->levels[level - 1].count : 0;
}

/* ---- list helpers ---------------------------------------------------------- */

static void list_append(node_list *l, hark_queue_node *n) {
  n->next = NULL;
  n->prev = l->tail;
  if (l->tail)
    l->tail->next = n;
  else
    l->head = n;
  l->tail = n;
}

static void list_remove(node_list *l, hark_queue_node *n) {
  if (n->prev)
    n->prev->next = n->next;
  else
    l->head = n->next;
  if (n->next)
    n->next->prev = n->prev;
  else
    l->tail = n->prev;
  n->prev = n->next = NULL;
}

static void deadline_insert(hark_queue *q, hark_queue_node *n) {
  hark_queue_node *after = q->dtail;
  while (after && after->deadline_ns > n->deadline_ns) after = after->dprev;
  n->dprev = after;
  n->dnext = after ? after->dnext : q->dhead;
  if (n->dnext)
    n->dnext->dprev = n;
  else
    q->dtail = n;
  if (after)
    after->dnext = n;
  else
    q->dhead = n;
}

static void deadline_remove(hark_queue *q, hark_queue_node *n) {
  if (n->dprev)
    n->dprev->dnext = n->dnext;
  else
    q->dhead = n->dnext;
  if (n->dnext)
    n->dnext->dprev = n->dprev;
  else
    q->dtail = n->dprev;
  n->dprev = n->dnext = NULL;
  n->deadline_ns = 0;
}

/* Takes a node out of the queue entirely and frees it. */
static void *node_take(hark_queue *q, hark_queue_node *n) {
  queue_level *lv = &q->levels[n->level];
  list_remove(n->delayed ? &lv->delayed : &lv->live, n);
  if (n->deadline_ns) deadline_remove(q, n);
  lv->count--;
  q->size--;
  void *item = n->item;
  free(n);
  return item;
}

/* ---- push / expire / pop --------------------------------------------------- */

hark_error *hark_queue_push(hark_queue *q, void *item, uint32_t priority, uint64_t timeout_us,
                            uint32_t batch_size, uint64_t now_ns) {
  uint32_t level = hark_queue_level(q, priority);
  queue_level *lv = &q->levels[level - 1];
  if (lv->count >= lv->max)
    return hark_error_new(HARK_ERR_UNAVAILABLE, "Exceeds maximum queue size");
  hark_queue_node *n = hark_xcalloc(1, sizeof *n);
  n->item = item;
  n->enqueued_ns = now_ns;
  n->batch_size = batch_size ? batch_size : 1;
  n->level = level - 1;
  uint64_t us = (timeout_us && lv->policy.allow_timeout_override) ? timeout_us
                                                                  : lv->policy.default_timeout_us;
  list_append(&lv->live, n);
  /* A timeout too long to represent never expires (0 means none). */
  if (us && us <= (UINT64_MAX - now_ns) / 1000u) {
    n->deadline_ns = now_ns + us * 1000u;
    if (n->deadline_ns == 0) n->deadline_ns = 1;
    deadline_insert(q, n);
  }
  lv->count++;
  q->size++;
  return NULL;
}

uint32_t hark_queue_expire(hark_queue *q, uint64_t now_ns, void **out, uint32_t cap) {
  uint32_t taken = 0;
  while (q->dhead && q->dhead->deadline_ns <= now_ns) {
    hark_queue_node *n = q->dhead;
    queue_level *lv = &q->levels[n->level];
    if (lv->policy.timeout_action == HARK_TIMEOUT_DELAY) {
      deadline_remove(q, n);
      list_remove(&lv->live, n);
      n->delayed = true;
      list_append(&lv->delayed, n);
    } else {
      if (taken == cap) break;
      out[taken++] = node_take(q, n);
    }
  }
  return taken;
}

uint64_t hark_queue_next_deadline(const hark_queue *q) {
  return q->dhead ? q->dhead->deadline_ns : UINT64_MAX;
}

static const hark_queue_node *first_from(const hark_queue *q, uint32_t level, bool delayed) {
  for (uint32_t i = level; i < q->n_levels; i++) {
    const queue_level *lv = &q->levels[i];
    if (!delayed && lv->live.head) return lv->live.head;
    if (lv->delayed.head) return lv->delayed.head;
    delayed = false;
  }
  return NULL;
}

const hark_queue_node *hark_queue_first(const hark_queue *q) { return first_from(q, 0, false); }

const hark_queue_node *hark_queue_next(const hark_queue *q, const hark_queue_node *n) {
  if (n->next) return n->next;
  return n->delayed ? first_from(q, n->level + 1, false) : first_from(q, n->level, true);
}

void *hark_queue_node_item(const hark_queue_node *n) { return n->item; }
uint32_t hark_queue_node_batch_size(const hark_queue_node *n) { return n->batch_size; }
uint64_t hark_queue_node_enqueued_ns(const hark_queue_node *n) { return n->enqueued_ns; }

uint32_t hark_queue_pop(hark_queue *q, void **out, uint32_t n) {
  uint32_t i = 0;
  for (; i < n; i++) {
    hark_queue_node *node = (hark_queue_node *)hark_queue_first(q);
    if (!node) break;
    out[i] = node_take(q, node);
  }
  return i;
}

/*
 * queue.h — the scheduler's request queue: priority levels, FIFO within a
 * level, per-level bounds and timeout policies, as Triton's dynamic batcher
 * queue. A plain data structure: no threads, no locks (the scheduler holds
 * its own), no clock (every call that needs the time takes `now_ns`), and it
 * never looks inside what it queues — the caller passes each item's
 * priority, timeout and batch size — so it is testable with fake items and
 * a fake clock.
 *
 * Dequeue order: level 1 (highest) first; within a level, the requests that
 * have not expired in arrival order, then those whose DELAY timeout expired,
 * in the order they expired (Triton's per-level "delayed" queue).
 */
#ifndef HARK_SCHED_QUEUE_H
#define HARK_SCHED_QUEUE_H

#include <stdint.h>

#include "hark/config.h"

/* The cap a level gets when neither its policy nor the server sets one. */
#define HARK_QUEUE_FALLBACK_MAX 4096u

typedef struct hark_queue hark_queue;
typedef struct hark_queue_node hark_queue_node;

/*
 * Levels, default level and policies come from `db` (which may be a
 * disabled block: one level, no timeouts). A policy's max_queue_size of 0
 * means `default_max_queue` (0 there too: HARK_QUEUE_FALLBACK_MAX).
 * INVALID_ARG names the field when the block is incoherent.
 */
hark_error *hark_queue_new(const hark_dynamic_batching *db, uint32_t default_max_queue,
                           hark_queue **out);
/* Frees the queue and its nodes; the items are the caller's business. */
void hark_queue_free(hark_queue *q);

/* The level (1-based) a request of `priority` goes to: 0 means the default
 * level; with priorities off everything is level 1. A priority above the
 * levels also gets the default level (Triton's InferenceRequest does that;
 * hark's scheduler refuses such requests before they get here). */
uint32_t hark_queue_level(const hark_queue *q, uint32_t priority);
uint32_t hark_queue_levels(const hark_queue *q);

/*
 * Appends `item` to its level. `timeout_us` is the request's own timeout (0
 * = none), honoured when the level's policy allows an override; otherwise
 * the policy's default applies. `batch_size` is carried for the batcher.
 * UNAVAILABLE "Exceeds maximum queue size" when the level is full.
 */
hark_error *hark_queue_push(hark_queue *q, void *item, uint32_t priority, uint64_t timeout_us,
                            uint32_t batch_size, uint64_t now_ns);

uint32_t hark_queue_size(const hark_queue *q);
uint32_t hark_queue_level_size(const hark_queue *q, uint32_t level);

/*
 * Applies the timeout policies at `now_ns` (a request whose deadline is
 * <= now has expired). DELAY requests move behind the non-expired requests
 * of their level and never expire again. REJECT requests leave the queue:
 * up to `cap` of them are stored in `out` (in deadline order) and their
 * count returned; if it returns `cap`, call again for the rest.
 */
uint32_t hark_queue_expire(hark_queue *q, uint64_t now_ns, void **out, uint32_t cap);
/* The earliest deadline still pending, or UINT64_MAX. */
uint64_t hark_queue_next_deadline(const hark_queue *q);

/* Walking in dequeue order without removing; NULL at the end. */
const hark_queue_node *hark_queue_first(const hark_queue *q);
const hark_queue_node *hark_queue_next(const hark_queue *q, const hark_queue_node *node);
void *hark_queue_node_item(const hark_queue_node *node);
uint32_t hark_queue_node_batch_size(const hark_queue_node *node);
uint64_t hark_queue_node_enqueued_ns(const hark_queue_node *node);

/* Removes the first `n` items in dequeue order into `out`; returns how many
 * there were (fewer when the queue runs out). */
uint32_t hark_queue_pop(hark_queue *q, void **out, uint32_t n);

#endif

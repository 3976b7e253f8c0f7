/*
 * sched_impl.h — private to src/sched: the pieces the schedulers share
 * beyond the public contract in sched.h: the log context around a batch,
 * and the scheduler vtable that sched.c dispatches through. (Embedded pool
 * tasks and the shared timer are the runtime's: runtime/pool.h.)
 */
#ifndef HARK_SCHED_IMPL_H
#define HARK_SCHED_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "sched/sched.h"
#include "util/log.h"

/* ---- log context (sched.c) -------------------------------------------------- */

/*
 * Around one batch's execute on a worker: saves the thread's log context in
 * *saved and names the batch's requests in it (their ids, else nothing;
 * their sequences' correlation ids), so every line the engine and the
 * backend log meanwhile carries them; logs the batch at verbose level. Call
 * before the execute (the requests may be gone after it), restore after.
 */
void hark_sched_log_batch(const hark_sched_desc *desc, uint32_t instance, hark_request **requests,
                          uint32_t n, hark_log_context *saved);
static inline void hark_sched_log_restore(const hark_log_context *saved) {
  hark_log_context_restore(saved);
}

/* ---- schedulers (sched.c, dynamic.c, sequence.c, ensemble.c) ----------------- */

typedef struct hark_sched_ops {
  hark_error *(*enqueue)(hark_sched *sched, hark_request *req);
  void (*stop)(hark_sched *sched); /* idempotent */
  void (*free)(hark_sched *sched); /* called after stop */
  uint32_t (*queued)(const hark_sched *sched);
  uint32_t (*busy)(const hark_sched *sched);
  /* The queue delay's controller (adaptive.h), read from any thread;
   * NULL (or a NULL hook): the scheduler has no queue delay. */
  const struct hark_adaptive *(*delay)(const hark_sched *sched);
  /* hark_sched_parked; NULL: nothing is parked. */
  uint32_t (*parked)(const hark_sched *sched, uint32_t ns);
  /* hark_sched_sequence_state; NULL: no implicit sequence state. */
  bool (*seq_state)(const hark_sched *sched, hark_sched_seq_state *out);
  /* hark_sched_flush; NULL: nothing waits that a flush would send on. */
  void (*flush)(hark_sched *sched);
} hark_sched_ops;

/* Every scheduler struct starts with this. */
struct hark_sched {
  const hark_sched_ops *ops;
};

/* The default scheduler and the dynamic batcher (dynamic.c). */
hark_error *hark_sched_dynamic_new(const hark_sched_desc *desc, hark_sched **out);
/* The sequence batcher (sequence.c). */
hark_error *hark_sched_sequence_new(const hark_sched_desc *desc, hark_sched **out);
/* The ensemble scheduler (ensemble.c). */
hark_error *hark_sched_ensemble_new(const hark_sched_desc *desc, hark_sched **out);

#endif

/*
 * test_sequence.c — the sequence batcher.
 *
 * First its decisions (src/sched/seqtab.c) with made-up items and a made-up
 * clock: admission (START required, timed-out ids), per-sequence order and
 * one request in flight, END, restart, idle expiry, direct slots and the
 * backlog, oldest-first batches, one-shot sequences, bounds. Then the
 * scheduler itself (src/sched/sequence.c) through hark_sched_* with a fake
 * run function and no server (fake_run.h): one request of a sequence at a
 * time and in order, the backend state carried along and handed to
 * sequence_fini at END, at idle expiry (from the timer) and at a restart,
 * never inside an execute on the same thread, and stop flushing. Last, the
 * scheduler with the real accumulate backend: interleaved sequences from
 * several threads keep their running sums, and freeing the server with
 * sequences live still finalizes every request (ASan checks the states
 * are freed).
 */
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fake_run.h"
#include "hark/request.h"
#include "hark/server.h"
#include "sched/adaptive.h"
#include "sched/seqtab.h"
#include "test_repo.h"

#define START HARK_REQUEST_SEQUENCE_START
#define END HARK_REQUEST_SEQUENCE_END

/* ---- the table's decisions ------------------------------------------------------ */

static hark_seq_policy direct_policy(uint32_t instances, uint32_t max_batch) {
  return (hark_seq_policy){.n_instances = instances,
                           .max_batch = max_batch,
                           .idle_ns = 1000 * MS,
                           .max_queued = 64,
                           .max_backlog = 8};
}

static hark_seq_policy oldest_policy(uint32_t candidates, uint32_t max_batch) {
  hark_seq_policy p = direct_policy(1, max_batch);
  p.oldest = true;
  p.max_candidates = candidates;
  return p;
}

static hark_seq_key num(uint64_t id) { return (hark_seq_key){.num = id}; }
static hark_seq_key str(const char *id) { return (hark_seq_key){.is_str = true, .str = id}; }

/* Items are small integers cast to pointers. */
#define ITEM(i) ((void *)(uintptr_t)(i))
#define ID(e) ((int)(uintptr_t)(e).item)

static void push_ok(hark_seqtab *t, hark_seq_key k, uint32_t flags, int item, uint64_t now) {
  assert_int_equal(hark_seqtab_push(t, &k, flags, ITEM(item), now), HARK_SEQ_OK);
}

static uint32_t form(hark_seqtab *t, uint32_t inst, uint64_t now, hark_seq_entry *out) {
  uint64_t wake = UINT64_MAX;
  return hark_seqtab_form(t, inst, false, now, out, &wake);
}

static uint32_t count_drops(hark_seqtab *t, void **first) {
  uint32_t n = 0;
  hark_seq_drop *d = hark_seqtab_take_drops(t);
  if (first) *first = d ? d->states.backend : NULL;
  for (hark_seq_drop *next; d; d = next, n++) {
    next = d->next;
    free(d);
  }
  return n;
}

static void test_start_required(void **state) {
  (void)state;
  hark_seq_policy p = direct_policy(1, 1);
  hark_seqtab *t = hark_seqtab_new(&p);
  hark_seq_key a = num(7), s = str("call-1");
  assert_int_equal(hark_seqtab_push(t, &a, 0, ITEM(1), 0), HARK_SEQ_NEED_START);
  assert_int_equal(hark_seqtab_push(t, &a, END, ITEM(1), 0), HARK_SEQ_NEED_START);
  assert_int_equal(hark_seqtab_live(t), 0);
  push_ok(t, a, START, 1, 0);
  push_ok(t, a, 0, 2, 0);
  /* Numeric 7 and string "7" are different ids. */
  hark_seq_key s7 = str("7");
  assert_int_equal(hark_seqtab_push(t, &s7, 0, ITEM(3), 0), HARK_SEQ_NEED_START);
  assert_int_equal(hark_seqtab_push(t, &s, 0, ITEM(3), 0), HARK_SEQ_NEED_START);
  push_ok(t, s, START, 3, 0);
  /* After a queued END only START continues the id. */
  push_ok(t, a, END, 4, 0);
  assert_int_equal(hark_seqtab_push(t, &a, 0, ITEM(5), 0), HARK_SEQ_NEED_START);
  push_ok(t, a, START | END, 5, 0);
  assert_int_equal(hark_seqtab_live(t), 2);
  assert_int_equal(hark_seqtab_queued(t), 5);
  hark_seqtab_free(t);
}

/* Stream isolation: the same id in two namespaces names two sequences, and
 * a push can neither continue nor learn of another namespace's sequence:
 * a live or recently expired id elsewhere answers exactly as an unknown. */
static void test_namespaces_isolate(void **state) {
  (void)state;
  hark_seq_policy p = direct_policy(1, 4);
  p.idle_ns = 100 * MS;
  hark_seqtab *t = hark_seqtab_new(&p);
  hark_seq_entry e[4];
  hark_seq_key victim = {.ns = HARK_CORR_NS_SESSION, .num = 42};
  hark_seq_key http = {.ns = HARK_CORR_NS_KSERVE_HTTP, .num = 42};
  hark_seq_key grpc = {.ns = HARK_CORR_NS_KSERVE_GRPC, .num = 42};
  hark_seq_key unknown = {.ns = HARK_CORR_NS_KSERVE_HTTP, .num = 43};
  hark_seq_key vstr = {.ns = HARK_CORR_NS_SESSION, .is_str = true, .str = "call"};
  hark_seq_key hstr = {.ns = HARK_CORR_NS_KSERVE_HTTP, .is_str = true, .str = "call"};
  push_ok(t, victim, START, 1, 0);
  push_ok(t, vstr, START, 2, 0);
  /* Continuing or ending the live id from elsewhere: as for an unknown id. */
  assert_int_equal(hark_seqtab_push(t, &unknown, 0, ITEM(9), 0), HARK_SEQ_NEED_START);
  assert_int_equal(hark_seqtab_push(t, &http, 0, ITEM(9), 0), HARK_SEQ_NEED_START);
  assert_int_equal(hark_seqtab_push(t, &http, END, ITEM(9), 0), HARK_SEQ_NEED_START);
  assert_int_equal(hark_seqtab_push(t, &grpc, 0, ITEM(9), 0), HARK_SEQ_NEED_START);
  assert_int_equal(hark_seqtab_push(t, &hstr, END, ITEM(9), 0), HARK_SEQ_NEED_START);
  assert_int_equal(hark_seqtab_live(t), 2);
  assert_int_equal(hark_seqtab_queued(t), 2);
  /* START with the same id elsewhere is a sequence of its own: it neither
   * restarts nor queues behind the victim's. */
  push_ok(t, http, START, 3, 0);
  push_ok(t, http, END, 4, 0);
  assert_int_equal(hark_seqtab_live(t), 3);
  assert_int_equal(form(t, 0, 0, e), 3);
  for (int i = 0; i < 3; i++) hark_seqtab_done(t, e[i].seq, 1 * MS);
  assert_int_equal(form(t, 0, 1 * MS, e), 1); /* http's END; the victim is untouched */
  assert_int_equal(ID(e[0]), 4);
  hark_seqtab_done(t, e[0].seq, 1 * MS);
  assert_int_equal(hark_seqtab_live(t), 2);
  push_ok(t, victim, 0, 5, 2 * MS); /* still the victim's to continue */
  assert_int_equal(form(t, 0, 2 * MS, e), 1);
  assert_int_equal(ID(e[0]), 5);
  assert_int_equal(e[0].flags, 0);
  hark_seqtab_done(t, e[0].seq, 2 * MS);
  /* Expired ids are remembered per namespace too. */
  uint64_t wake = UINT64_MAX;
  hark_seqtab_expire(t, false, 500 * MS, &wake);
  assert_int_equal(hark_seqtab_live(t), 0);
  assert_int_equal(hark_seqtab_push(t, &http, 0, ITEM(9), 501 * MS), HARK_SEQ_NEED_START);
  assert_int_equal(hark_seqtab_push(t, &hstr, 0, ITEM(9), 501 * MS), HARK_SEQ_NEED_START);
  assert_int_equal(hark_seqtab_push(t, &victim, 0, ITEM(9), 501 * MS), HARK_SEQ_TIMED_OUT);
  hark_seqtab_free(t);
}

static void test_order_and_one_in_flight(void **state) {
  (void)state;
  hark_seq_policy p = oldest_policy(8, 4);
  hark_seqtab *t = hark_seqtab_new(&p);
  hark_seq_entry e[4];
  push_ok(t, num(1), START, 1, 10);
  push_ok(t, num(1), 0, 2, 11);
  push_ok(t, num(1), END, 3, 12);
  for (int i = 1; i <= 3; i++) {
    assert_int_equal(form(t, 0, 100, e), 1); /* never two of one sequence */
    assert_int_equal(ID(e[0]), i);
    assert_int_equal(e[0].flags, i == 1 ? START : i == 3 ? END : 0);
    assert_int_equal(hark_seqtab_in_flight(t), 1);
    assert_int_equal(form(t, 1, 100, e), 0); /* in flight: nothing more */
    hark_seqtab_done(t, e[0].seq, 100);
  }
  assert_int_equal(hark_seqtab_live(t), 0);
  assert_int_equal(hark_seqtab_queued(t), 0);
  hark_seqtab_free(t);
}

static void test_end_and_restart_drop_state(void **state) {
  (void)state;
  hark_seq_policy p = direct_policy(1, 1);
  hark_seqtab *t = hark_seqtab_new(&p);
  hark_seq_entry e[1];
  int st1, st2;
  void *got;
  push_ok(t, num(5), START, 1, 0);
  assert_int_equal(form(t, 0, 0, e), 1);
  hark_seq_states_of(e[0].seq)->backend = &st1;
  hark_seqtab_done(t, e[0].seq, 0);
  assert_int_equal(count_drops(t, NULL), 0);
  /* START on a live sequence: the old state goes when the START runs. */
  push_ok(t, num(5), START, 2, 1);
  assert_int_equal(form(t, 0, 1, e), 1);
  assert_int_equal(count_drops(t, &got), 1);
  assert_ptr_equal(got, &st1);
  assert_null(hark_seq_states_of(e[0].seq)->backend);
  hark_seq_states_of(e[0].seq)->backend = &st2;
  hark_seqtab_done(t, e[0].seq, 1);
  /* END: state dropped once that request is done, the id forgotten. */
  push_ok(t, num(5), END, 3, 2);
  assert_int_equal(form(t, 0, 2, e), 1);
  assert_int_equal(count_drops(t, NULL), 0);
  hark_seqtab_done(t, e[0].seq, 2);
  assert_int_equal(count_drops(t, &got), 1);
  assert_ptr_equal(got, &st2);
  assert_int_equal(hark_seqtab_live(t), 0);
  hark_seq_key k = num(5);
  assert_int_equal(hark_seqtab_push(t, &k, 0, ITEM(4), 3), HARK_SEQ_NEED_START);
  hark_seqtab_free(t);
}

static void test_idle_expiry(void **state) {
  (void)state;
  hark_seq_policy p = direct_policy(1, 2);
  p.idle_ns = 500 * MS;
  hark_seqtab *t = hark_seqtab_new(&p);
  hark_seq_entry e[2];
  int st;
  push_ok(t, str("s"), START, 1, 0);
  assert_int_equal(form(t, 0, 0, e), 1);
  hark_seq_states_of(e[0].seq)->backend = &st;
  hark_seqtab_done(t, e[0].seq, 10 * MS);
  uint64_t wake = UINT64_MAX;
  hark_seqtab_expire(t, false, 509 * MS, &wake);
  assert_int_equal(hark_seqtab_live(t), 1);
  assert_int_equal(wake, 510 * MS); /* idle since the request finished */
  /* A request in time keeps it alive and moves the deadline. */
  push_ok(t, str("s"), 0, 2, 400 * MS);
  assert_int_equal(form(t, 0, 400 * MS, e), 1);
  hark_seqtab_done(t, e[0].seq, 450 * MS);
  wake = UINT64_MAX;
  hark_seqtab_expire(t, false, 900 * MS, &wake);
  assert_int_equal(wake, 950 * MS);
  hark_seqtab_expire(t, false, 950 * MS, &wake);
  assert_int_equal(hark_seqtab_live(t), 0);
  assert_int_equal(count_drops(t, NULL), 1);
  hark_seq_key k = str("s");
  assert_int_equal(hark_seqtab_push(t, &k, 0, ITEM(3), 1000 * MS), HARK_SEQ_TIMED_OUT);
  /* Memory fades, and a new START forgets the expiry. */
  assert_int_equal(hark_seqtab_push(t, &k, 0, ITEM(3), 950 * MS + HARK_SEQ_EXPIRED_KEEP_NS),
                   HARK_SEQ_NEED_START);
  push_ok(t, k, START | END, 4, 1001 * MS);
  assert_int_equal(form(t, 0, 1001 * MS, e), 1);
  hark_seqtab_done(t, e[0].seq, 1001 * MS);
  assert_int_equal(hark_seqtab_push(t, &k, 0, ITEM(5), 1002 * MS), HARK_SEQ_NEED_START);
  /* A sequence with work waiting, or in flight, never expires. */
  push_ok(t, num(1), START, 6, 2000 * MS);
  wake = UINT64_MAX;
  hark_seqtab_expire(t, false, 9000 * MS, &wake);
  assert_int_equal(hark_seqtab_live(t), 1);
  assert_int_equal(form(t, 0, 9000 * MS, e), 1);
  hark_seqtab_expire(t, false, 99000 * MS, &wake);
  assert_int_equal(hark_seqtab_live(t), 1);
  hark_seqtab_done(t, e[0].seq, 99000 * MS);
  /* Flushing (unload) ends idle sequences at once, forgetting them. */
  hark_seqtab_expire(t, true, 99000 * MS, &wake);
  assert_int_equal(hark_seqtab_live(t), 0);
  hark_seq_key one = num(1);
  assert_int_equal(hark_seqtab_push(t, &one, 0, ITEM(7), 99001 * MS), HARK_SEQ_NEED_START);
  hark_seqtab_free(t);
}

static void test_direct_slots_and_backlog(void **state) {
  (void)state;
  hark_seq_policy p = direct_policy(2, 1); /* two instances, one slot each */
  p.max_backlog = 1;
  hark_seqtab *t = hark_seqtab_new(&p);
  hark_seq_entry e[1];
  push_ok(t, num(1), START, 1, 0);
  push_ok(t, num(2), START, 2, 0);
  push_ok(t, num(3), START, 3, 0);
  assert_int_equal(hark_seqtab_backlog(t), 1);
  hark_seq_key four = num(4);
  assert_int_equal(hark_seqtab_push(t, &four, START, ITEM(4), 0), HARK_SEQ_BACKLOG_FULL);
  /* Each instance runs only its own slot's sequence. */
  assert_int_equal(form(t, 0, 0, e), 1);
  assert_int_equal(ID(e[0]), 1);
  hark_seq *one = e[0].seq;
  assert_int_equal(form(t, 1, 0, e), 1);
  assert_int_equal(ID(e[0]), 2);
  hark_seqtab_done(t, e[0].seq, 0);
  assert_int_equal(form(t, 1, 0, e), 0); /* 3 waits for a slot */
  /* Sequence 1 ends: its slot (instance 0) goes to 3. */
  push_ok(t, num(1), END, 5, 1);
  hark_seqtab_done(t, one, 1);
  assert_int_equal(form(t, 0, 1, e), 1);
  assert_int_equal(ID(e[0]), 5);
  hark_seqtab_done(t, e[0].seq, 1);
  assert_int_equal(hark_seqtab_backlog(t), 0);
  assert_int_equal(form(t, 0, 1, e), 1);
  assert_int_equal(ID(e[0]), 3);
  hark_seqtab_free(t);
}

static void test_direct_batches_an_instance(void **state) {
  (void)state;
  hark_seq_policy p = direct_policy(1, 4);
  p.max_queue_delay_ns = 100 * MS;
  p.min_slot_utilization = 0.5f; /* two of four slots */
  hark_seqtab *t = hark_seqtab_new(&p);
  hark_seq_entry e[4];
  push_ok(t, num(1), START, 1, 0);
  uint64_t wake = UINT64_MAX;
  assert_int_equal(hark_seqtab_form(t, 0, false, 10 * MS, e, &wake), 0);
  assert_int_equal(wake, 100 * MS);
  push_ok(t, num(2), START, 2, 20 * MS);
  assert_int_equal(hark_seqtab_form(t, 0, false, 20 * MS, e, &wake), 2);
  assert_int_equal(ID(e[0]) + ID(e[1]), 3);
  hark_seqtab_done(t, e[0].seq, 30 * MS);
  hark_seqtab_done(t, e[1].seq, 30 * MS);
  /* Alone, it goes when its delay runs out (or when flushing). */
  push_ok(t, num(1), 0, 3, 40 * MS);
  wake = UINT64_MAX;
  assert_int_equal(hark_seqtab_form(t, 0, false, 139 * MS, e, &wake), 0);
  assert_int_equal(wake, 140 * MS);
  assert_int_equal(hark_seqtab_form(t, 0, true, 50 * MS, e, &wake), 1);
  hark_seqtab_free(t);
}

static void test_oldest_batches(void **state) {
  (void)state;
  hark_seq_policy p = oldest_policy(3, 2);
  p.max_backlog = 2;
  hark_seqtab *t = hark_seqtab_new(&p);
  hark_seq_entry e[2];
  push_ok(t, num(1), START, 1, 10);
  push_ok(t, num(2), START, 2, 20);
  push_ok(t, num(3), START, 3, 30);
  push_ok(t, num(4), START, 4, 40); /* beyond the candidates: backlog */
  assert_int_equal(hark_seqtab_backlog(t), 1);
  assert_int_equal(form(t, 0, 50, e), 2); /* the two oldest, distinct sequences */
  assert_int_equal(ID(e[0]), 1);
  assert_int_equal(ID(e[1]), 2);
  hark_seq *s1 = e[0].seq, *s2 = e[1].seq;
  /* Sequence 1's next request arrives after 3's head: 3 goes first. */
  push_ok(t, num(1), 0, 5, 60);
  hark_seqtab_done(t, s1, 70);
  assert_int_equal(form(t, 1, 70, e), 2);
  assert_int_equal(ID(e[0]), 3);
  assert_int_equal(ID(e[1]), 5);
  hark_seqtab_done(t, e[0].seq, 80);
  hark_seqtab_done(t, e[1].seq, 80);
  /* Sequence 2's END runs; once it is done, 4 leaves the backlog. */
  push_ok(t, num(2), END, 6, 90);
  hark_seqtab_done(t, s2, 90);
  assert_int_equal(hark_seqtab_backlog(t), 1);
  assert_int_equal(form(t, 0, 95, e), 1);
  assert_int_equal(ID(e[0]), 6);
  hark_seqtab_done(t, e[0].seq, 96);
  assert_int_equal(hark_seqtab_backlog(t), 0);
  assert_int_equal(form(t, 0, 97, e), 1);
  assert_int_equal(ID(e[0]), 4);
  hark_seqtab_free(t);
}

static void test_oldest_waits_for_preferred(void **state) {
  (void)state;
  hark_seq_policy p = oldest_policy(8, 4);
  p.preferred[p.n_preferred++] = 2;
  p.max_queue_delay_ns = 100 * MS;
  hark_seqtab *t = hark_seqtab_new(&p);
  hark_seq_entry e[4];
  /* A live sequence with nothing queued, whose next request could join. */
  push_ok(t, num(9), START, 9, 0);
  assert_int_equal(form(t, 0, 0, e), 1);
  hark_seqtab_done(t, e[0].seq, 0);
  push_ok(t, num(1), START, 1, 0);
  uint64_t wake = UINT64_MAX;
  assert_int_equal(hark_seqtab_form(t, 0, false, 1 * MS, e, &wake), 0);
  assert_int_equal(wake, 100 * MS);
  push_ok(t, num(2), START, 2, 2 * MS);
  assert_int_equal(hark_seqtab_form(t, 0, false, 2 * MS, e, &wake), 2);
  push_ok(t, num(3), START, 3, 3 * MS);
  assert_int_equal(hark_seqtab_form(t, 0, false, 103 * MS, e, &wake), 1); /* delay ran out */
  hark_seqtab_free(t);
}

/* oldest waits for company only while some live sequence could still send
 * it: once every live sequence is ready or running, the batch goes (a
 * closed loop of clients runs at full batches, not one per delay). */
static void test_oldest_no_wait_when_nobody_else_can_come(void **state) {
  (void)state;
  hark_seq_policy p = oldest_policy(8, 8);
  p.max_queue_delay_ns = 100 * MS;
  hark_seqtab *t = hark_seqtab_new(&p);
  hark_seq_entry e[8];
  hark_seq *seqs[3];
  for (int i = 0; i < 3; i++) push_ok(t, num(1 + i), START, 1 + i, 0);
  assert_int_equal(form(t, 0, 1 * MS, e), 3); /* all three live ones are here */
  for (int i = 0; i < 3; i++) seqs[i] = e[i].seq;
  for (int i = 0; i < 3; i++) hark_seqtab_done(t, seqs[i], 2 * MS);

  push_ok(t, num(1), 0, 11, 2 * MS);
  push_ok(t, num(2), 0, 12, 2 * MS);
  assert_int_equal(form(t, 0, 3 * MS, e), 0); /* 3 may still send */
  push_ok(t, num(3), 0, 13, 4 * MS);
  assert_int_equal(form(t, 0, 4 * MS, e), 3);

  /* Two still running, the first one's next request goes at once. */
  hark_seqtab_done(t, e[0].seq, 5 * MS);
  push_ok(t, num(1), 0, 21, 5 * MS);
  assert_int_equal(form(t, 1, 5 * MS, e), 1);
  hark_seqtab_free(t);
}

/* oldest with adaptive_queue_delay (min 0, max 16 ms: rungs 1, 2, 4, 8,
 * 16 ms; target 4 ready sequences): many streams with a frame ready widen
 * the delay, which then gathers the next round of frames into one batch; a
 * lone frame narrows it, and a quiet spell takes it back to 0. */
static void test_oldest_adaptive_delay(void **state) {
  (void)state;
  hark_seq_policy p = oldest_policy(16, 8);
  p.adaptive =
      (hark_adaptive_delay){.enabled = true, .min_us = 0, .max_us = 16000, .target_queue_depth = 4};
  hark_seqtab *t = hark_seqtab_new(&p);
  const hark_adaptive *a = hark_seqtab_delay(t);
  assert_non_null(a);
  hark_seq_entry e[8];
  hark_seq *seqs[6];
  uint64_t wake;

  /* Six streams start at once: delay 0 sends them at once, and widens. */
  for (int i = 0; i < 6; i++) push_ok(t, num(1 + i), START, 1 + i, 1 * MS);
  assert_int_equal(form(t, 0, 1 * MS, e), 6);
  for (int i = 0; i < 6; i++) seqs[i] = e[i].seq;
  assert_int_equal(hark_adaptive_current(a, 1 * MS), 1 * MS);
  for (int i = 0; i < 6; i++) hark_seqtab_done(t, seqs[i], 2 * MS);

  /* Their next frames trickle in: the first now waits for the others. */
  push_ok(t, num(1), 0, 11, 2 * MS);
  wake = UINT64_MAX;
  assert_int_equal(hark_seqtab_form(t, 0, false, 2 * MS, e, &wake), 0);
  assert_int_equal(wake, 3 * MS);
  for (int i = 1; i < 6; i++) push_ok(t, num(1 + i), 0, 11 + i, 2 * MS + 500000);
  assert_int_equal(form(t, 0, 3 * MS, e), 6); /* one batch, and wider still */
  assert_int_equal(hark_adaptive_current(a, 3 * MS), 2 * MS);
  for (int i = 0; i < 6; i++) hark_seqtab_done(t, e[i].seq, 3 * MS);

  /* One stream alone: it waits out the delay, and narrows it. */
  push_ok(t, num(1), 0, 21, 4 * MS);
  assert_int_equal(form(t, 0, 5 * MS, e), 0);
  assert_int_equal(form(t, 0, 6 * MS, e), 1);
  assert_int_equal(hark_adaptive_current(a, 6 * MS), 1 * MS);
  hark_seqtab_done(t, e[0].seq, 6 * MS);

  /* Quiet for longer than the delay: back to 0, and a frame goes at once. */
  assert_int_equal(hark_adaptive_current(a, 8 * MS), 0);
  push_ok(t, num(2), 0, 22, 20 * MS);
  assert_int_equal(form(t, 0, 20 * MS, e), 1);
  assert_int_equal(atomic_load(&a->widened), 2);
  assert_int_equal(atomic_load(&a->narrowed), 2);
  hark_seqtab_free(t);

  /* direct has no queue delay to adapt. */
  hark_seq_policy d = direct_policy(1, 4);
  t = hark_seqtab_new(&d);
  assert_null(hark_seqtab_delay(t));
  hark_seqtab_free(t);
}

static void test_one_shot(void **state) {
  (void)state;
  hark_seq_policy p = oldest_policy(1, 1);
  p.max_backlog = 1;
  hark_seqtab *t = hark_seqtab_new(&p);
  hark_seq_entry e[1];
  int st;
  assert_int_equal(hark_seqtab_push(t, NULL, 0, ITEM(1), 0), HARK_SEQ_OK);
  assert_int_equal(hark_seqtab_push(t, NULL, 0, ITEM(2), 0), HARK_SEQ_OK); /* backlog */
  assert_int_equal(hark_seqtab_push(t, NULL, 0, ITEM(3), 0), HARK_SEQ_BACKLOG_FULL);
  assert_int_equal(hark_seqtab_live(t), 2);
  assert_int_equal(form(t, 0, 0, e), 1);
  assert_int_equal(e[0].flags, START | END);
  hark_seq_states_of(e[0].seq)->backend = &st;
  hark_seqtab_done(t, e[0].seq, 0);
  assert_int_equal(count_drops(t, NULL), 1);
  assert_int_equal(form(t, 0, 0, e), 1);
  assert_int_equal(ID(e[0]), 2);
  hark_seqtab_done(t, e[0].seq, 0);
  assert_int_equal(hark_seqtab_live(t), 0);
  hark_seqtab_free(t);
}

/* oldest: whole recordings hold at most max_oneshots_running instances; a
 * stream's younger request passes the ones waiting (issue 24). */
static void test_oneshots_leave_an_instance(void **state) {
  (void)state;
  hark_seq_policy p = oldest_policy(8, 1);
  p.n_instances = 3;
  p.max_oneshots_running = 2;
  hark_seqtab *t = hark_seqtab_new(&p);
  hark_seq_entry e[3];
  for (int i = 1; i <= 3; i++) assert_int_equal(hark_seqtab_push(t, NULL, 0, ITEM(i), 0), 0);
  push_ok(t, num(7), START, 7, 1);
  assert_int_equal(form(t, 0, 2, &e[0]), 1);
  assert_int_equal(form(t, 1, 2, &e[1]), 1);
  assert_int_equal(form(t, 2, 2, &e[2]), 1);
  assert_int_equal(ID(e[0]), 1);
  assert_int_equal(ID(e[1]), 2);
  assert_int_equal(ID(e[2]), 7); /* not the third one-shot */
  hark_seq_entry more;
  assert_int_equal(form(t, 0, 2, &more), 0);
  hark_seqtab_done(t, e[0].seq, 3);
  assert_int_equal(form(t, 0, 3, &more), 1);
  assert_int_equal(ID(more), 3);
  hark_seqtab_done(t, more.seq, 4);
  hark_seqtab_done(t, e[1].seq, 4);
  hark_seqtab_done(t, e[2].seq, 4);
  hark_seqtab_free(t);
}

static void test_queue_bound(void **state) {
  (void)state;
  hark_seq_policy p = direct_policy(1, 1);
  p.max_queued = 2;
  hark_seqtab *t = hark_seqtab_new(&p);
  hark_seq_key k = num(1);
  push_ok(t, k, START, 1, 0);
  push_ok(t, k, 0, 2, 0);
  assert_int_equal(hark_seqtab_push(t, &k, 0, ITEM(3), 0), HARK_SEQ_QUEUE_FULL);
  hark_seq_entry e[1];
  assert_int_equal(form(t, 0, 0, e), 1); /* running does not count as waiting */
  push_ok(t, k, 0, 3, 0);
  hark_seqtab_free(t); /* frees the queued nodes too */
}

static void test_many_sequences(void **state) {
  (void)state;
  /* Thousands of candidates, as a speech model has: the hash grows. */
  hark_seq_policy p = oldest_policy(5000, 8);
  p.max_queued = 10000;
  hark_seqtab *t = hark_seqtab_new(&p);
  char id[32];
  for (int i = 0; i < 4000; i++) {
    snprintf(id, sizeof id, "stream-%d", i);
    push_ok(t, str(id), START, i, (uint64_t)i);
  }
  hark_seq_entry e[8];
  int next = 0;
  uint32_t n;
  while ((n = form(t, 0, 1000000, e)) > 0)
    for (uint32_t i = 0; i < n; i++) {
      assert_int_equal(ID(e[i]), next++); /* arrival order across sequences */
      hark_seqtab_done(t, e[i].seq, 1000000);
    }
  assert_int_equal(next, 4000);
  for (int i = 0; i < 4000; i += 7) {
    snprintf(id, sizeof id, "stream-%d", i);
    push_ok(t, str(id), END, i, 2000000);
  }
  assert_int_equal(hark_seqtab_live(t), 4000);
  hark_seqtab_free(t);
}

/* ---- quotas (issue 13, finding 6) ------------------------------------------------ */

static hark_seq_key in_ns(uint32_t ns, uint64_t id) { return (hark_seq_key){.ns = ns, .num = id}; }

#define HTTP HARK_CORR_NS_KSERVE_HTTP
#define GRPC HARK_CORR_NS_KSERVE_GRPC
#define SESSION HARK_CORR_NS_SESSION

/* KServe clients (HTTP and gRPC together) get half the slots, the queue
 * and the backlog; past that a START is refused with QUOTA, while speech
 * sessions still take the other slots and their own half of the backlog. */
static void test_client_quota(void **state) {
  (void)state;
  hark_seq_policy p = oldest_policy(4, 1);
  p.max_queued = 4;
  p.max_backlog = 8;
  p.client_share_pct = 50;
  hark_seqtab *t = hark_seqtab_new(&p);
  /* Two slots, then the backlog's half; the group is HTTP and gRPC. */
  push_ok(t, in_ns(HTTP, 1), START, 1, 0);
  push_ok(t, in_ns(GRPC, 1), START, 2, 0);
  assert_int_equal(hark_seqtab_client_slotted(t), 2);
  for (int i = 3; i <= 6; i++) push_ok(t, in_ns(i % 2 ? HTTP : GRPC, (uint64_t)i), START, i, 0);
  assert_int_equal(hark_seqtab_backlog(t), 4); /* two slots were still free */
  hark_seq_key k = in_ns(HTTP, 7);
  assert_int_equal(hark_seqtab_push(t, &k, START, ITEM(7), 0), HARK_SEQ_QUOTA);
  k = in_ns(GRPC, 7);
  assert_int_equal(hark_seqtab_push(t, &k, START, ITEM(7), 0), HARK_SEQ_QUOTA);
  /* A client's one-shot request counts in its group too. */
  k = (hark_seq_key){.ns = HTTP, .oneshot = true};
  assert_int_equal(hark_seqtab_push(t, &k, 0, ITEM(7), 0), HARK_SEQ_QUOTA);
  /* The client half of the queue is full as well: 1 may not queue more. */
  k = in_ns(HTTP, 1);
  assert_int_equal(hark_seqtab_push(t, &k, 0, ITEM(8), 0), HARK_SEQ_QUOTA);
  /* Sessions take the free slots, then their own half of the backlog. */
  push_ok(t, in_ns(SESSION, 100), START, 100, 0);
  push_ok(t, in_ns(SESSION, 101), START, 101, 0);
  assert_int_equal(hark_seqtab_client_slotted(t), 2);
  for (int i = 102; i < 106; i++) push_ok(t, in_ns(SESSION, (uint64_t)i), START, i, 0);
  k = in_ns(SESSION, 106);
  assert_int_equal(hark_seqtab_push(t, &k, START, ITEM(106), 0), HARK_SEQ_BACKLOG_FULL);
  /* In-process callers share the server's half. */
  k = in_ns(HARK_CORR_NS_LOCAL, 1);
  assert_int_equal(hark_seqtab_push(t, &k, START, ITEM(107), 0), HARK_SEQ_BACKLOG_FULL);
  /* What a new session waits behind does not include the clients' parked. */
  assert_int_equal(hark_seqtab_client_backlog(t), 4);
  assert_int_equal(hark_seqtab_parked(t, SESSION), 4);
  assert_int_equal(hark_seqtab_parked(t, HTTP), 4);
  hark_seqtab_free(t);
}

/* Without a quota (share 0 or 100) a client may take every slot, as before. */
static void test_no_quota(void **state) {
  (void)state;
  hark_seq_policy p = oldest_policy(4, 1);
  p.client_share_pct = 100;
  hark_seqtab *t = hark_seqtab_new(&p);
  for (int i = 1; i <= 4; i++) push_ok(t, in_ns(HTTP, (uint64_t)i), START, i, 0);
  assert_int_equal(hark_seqtab_client_slotted(t), 4);
  assert_int_equal(hark_seqtab_backlog(t), 0);
  for (int i = 5; i <= 12; i++) push_ok(t, in_ns(HTTP, (uint64_t)i), START, i, 0);
  hark_seq_key k = in_ns(HTTP, 13);
  assert_int_equal(hark_seqtab_push(t, &k, START, ITEM(13), 0), HARK_SEQ_BACKLOG_FULL);
  hark_seqtab_free(t);
}

/* A freed slot goes to the namespaces' backlogs in turn: sessions queued
 * behind a client's long backlog are not served after all of it. */
static void test_backlog_round_robin(void **state) {
  (void)state;
  hark_seq_policy p = oldest_policy(1, 1);
  hark_seqtab *t = hark_seqtab_new(&p);
  hark_seq_entry e[1];
  push_ok(t, in_ns(HARK_CORR_NS_LOCAL, 1), START | END, 1, 0);
  for (int i = 10; i < 13; i++) push_ok(t, in_ns(HTTP, (uint64_t)i), START | END, i, 1);
  for (int i = 20; i < 22; i++) push_ok(t, in_ns(SESSION, (uint64_t)i), START | END, i, 2);
  assert_int_equal(hark_seqtab_backlog(t), 5);
  const int want[] = {1, 10, 20, 11, 21, 12};
  for (uint32_t i = 0; i < sizeof want / sizeof *want; i++) {
    hark_seq_entry *x = &e[0];
    assert_int_equal(hark_seqtab_form(t, 0, true, 10, x, &(uint64_t){UINT64_MAX}), 1);
    assert_int_equal(ID(*x), want[i]);
    hark_seqtab_done(t, x->seq, 10);
  }
  assert_int_equal(hark_seqtab_live(t), 0);
  hark_seqtab_free(t);
}

/* A client at its slot share waits in the backlog even with a slot free,
 * and takes the next slot its group may have: when one of its own ends. */
static void test_quota_promotion(void **state) {
  (void)state;
  hark_seq_policy p = oldest_policy(2, 1);
  p.client_share_pct = 50;
  hark_seqtab *t = hark_seqtab_new(&p);
  hark_seq_entry e[1];
  uint64_t wake = UINT64_MAX;
  push_ok(t, in_ns(HTTP, 1), START, 1, 0);
  push_ok(t, in_ns(HTTP, 2), START | END, 2, 1); /* parked, a slot still free */
  assert_int_equal(hark_seqtab_backlog(t), 1);
  push_ok(t, in_ns(SESSION, 9), START | END, 9, 2); /* takes the free slot at once */
  assert_int_equal(hark_seqtab_backlog(t), 1);
  assert_int_equal(hark_seqtab_form(t, 0, true, 3, e, &wake), 1);
  assert_int_equal(ID(e[0]), 1);
  hark_seqtab_done(t, e[0].seq, 3);
  assert_int_equal(hark_seqtab_form(t, 0, true, 3, e, &wake), 1);
  assert_int_equal(ID(e[0]), 9);
  hark_seqtab_done(t, e[0].seq, 3); /* the session's slot frees: still not the client's */
  assert_int_equal(hark_seqtab_backlog(t), 1);
  push_ok(t, in_ns(HTTP, 1), END, 3, 4);
  assert_int_equal(hark_seqtab_form(t, 0, true, 4, e, &wake), 1);
  assert_int_equal(ID(e[0]), 3);
  hark_seqtab_done(t, e[0].seq, 4); /* 1 ends: 2 may go */
  assert_int_equal(hark_seqtab_backlog(t), 0);
  assert_int_equal(hark_seqtab_form(t, 0, true, 5, e, &wake), 1);
  assert_int_equal(ID(e[0]), 2);
  hark_seqtab_done(t, e[0].seq, 5);
  assert_int_equal(hark_seqtab_live(t), 0);
  hark_seqtab_free(t);
}

/* ---- the scheduler with a fake run ------------------------------------------------ */

#define OLDEST(extra)   \
  "max_batch_size: 4\n" \
  "sequence_batching { " extra " oldest { max_candidate_sequences: 8 } }\n"

/* The run gives each sequence a state at START: the value 1000 + tag. */
static void set_state_at_start(fake *f, hark_request *req, int tag) {
  (void)f;
  if (hark_request_flags(req) & START) fake_set_state(req, 1000 + tag);
}

/* Every batch in run order: a sequence's tags only grow, one per batch. */
static void assert_sequence_order(fake *f) {
  for (int i = 0; i < f->n_batches; i++)
    for (uint32_t k = 0; k < f->batches[i].n; k++) {
      for (uint32_t j = 0; j < k; j++) assert_true(f->batches[i].corr[j] != f->batches[i].corr[k]);
      for (int p = 0; p < i; p++)
        for (uint32_t j = 0; j < f->batches[p].n; j++)
          if (f->batches[p].corr[j] == f->batches[i].corr[k])
            assert_true(f->batches[p].tags[j] < f->batches[i].tags[k]);
    }
}

/* While a sequence's request runs, its next ones wait, even with an
 * instance free; a request of another sequence takes that instance. */
static void test_fake_one_at_a_time_in_order(void **state) {
  (void)state;
  fake *f = fake_start(OLDEST(""), 2, 4);
  f->hold_all = true;
  fake_send(f, 0, 11, START);
  fake_wait(f, &f->held, 1);
  for (int i = 1; i < 4; i++) fake_send(f, i, 11, i == 3 ? END : 0);
  sleep_ms(50);
  assert_int_equal(fake_count(f, &f->n_batches), 1); /* the other instance idles */
  fake_send(f, 10, 12, START);
  fake_wait(f, &f->held, 2);
  assert_int_equal(f->batches[1].tags[0], 10);
  assert_int_not_equal(f->batches[1].instance, f->batches[0].instance);
  fake_send(f, 11, 12, 0);
  fake_send(f, 12, 12, END);
  fake_send(f, 20, 0, 0); /* one-shot */
  assert_int_equal(hark_sched_queued(f->sched), 6);
  fake_release(f);
  fake_wait(f, &f->n_finals, 8);
  for (int i = 0; i < 8; i++) assert_int_equal(f->finals[i].code, HARK_OK);
  assert_int_equal(f->seq_overlaps, 0);
  assert_int_equal(f->overlaps, 0);
  assert_sequence_order(f);
  fake_stop(f);
}

/* The state a START's run sets is there for the sequence's later
 * requests, and goes to sequence_fini once the END has run. */
static void test_fake_state_to_fini_at_end(void **state) {
  (void)state;
  fake *f = fake_start(OLDEST(""), 1, 2);
  f->hook = set_state_at_start;
  fake_send(f, 0, 5, START);
  fake_wait(f, &f->n_finals, 1);
  fake_send(f, 1, 5, 0);
  fake_wait(f, &f->n_finals, 2);
  assert_int_equal(fake_count(f, &f->n_finied), 0);
  fake_send(f, 2, 5, END);
  fake_wait(f, &f->n_finied, 1);
  assert_int_equal(f->batches[0].state[0], 0);
  assert_int_equal(f->batches[1].state[0], 1000);
  assert_int_equal(f->batches[2].state[0], 1000);
  assert_int_equal(f->finied[0], 1000);
  assert_int_equal(f->fini_inside_run, 0);
  /* Ended: only START continues the id. */
  hark_error *err = fake_try(f, 3, 5, 0);
  assert_non_null(err);
  assert_int_equal(hark_error_code(err), HARK_ERR_INVALID_ARG);
  assert_non_null(strstr(hark_error_message(err), "must specify the START flag"));
  hark_error_free(err);
  hark_sched_stop(f->sched);
  assert_int_equal(f->n_finied, 1);
  fake_stop(f);
}

/* A sequence that sends nothing for max_sequence_idle ends on its own (the
 * pool's timer pumps): its state goes to sequence_fini no earlier than
 * that, and a later request without START is refused as timed out. */
static void test_fake_idle_expiry(void **state) {
  (void)state;
  fake *f = fake_start(OLDEST("max_sequence_idle_microseconds: 100000"), 1, 2);
  f->hook = set_state_at_start;
  fake_send(f, 0, 9, START);
  fake_wait(f, &f->n_finals, 1);
  uint64_t last = f->finals[0].at_ns;
  fake_wait(f, &f->n_finied, 1);
  assert_int_equal(f->finied[0], 1000);
  assert_true(f->finied_at[0] - last >= 100 * MS);
  hark_error *err = fake_try(f, 1, 9, 0);
  assert_non_null(err);
  assert_int_equal(hark_error_code(err), HARK_ERR_INVALID_ARG);
  assert_non_null(strstr(hark_error_message(err), "timed out idle"));
  hark_error_free(err);
  fake_stop(f);
}

/* Inside an execute, a request that restarts another sequence forms at
 * once on the free instance, but the old state waits for the execute to
 * return before it goes to sequence_fini. Stopping flushes: the live
 * sequences end, and their states go too. */
static void restart_b_inside(fake *f, hark_request *req, int tag) {
  set_state_at_start(f, req, tag);
  if (tag == 2) fake_send(f, 3, 22, START); /* sequence 22 again */
}

static void test_fake_drops_wait_for_the_execute(void **state) {
  (void)state;
  fake *f = fake_start(OLDEST(""), 2, 4);
  f->hook = restart_b_inside;
  fake_send(f, 1, 22, START);
  fake_wait(f, &f->n_finals, 1);
  fake_send(f, 2, 21, START);
  fake_wait(f, &f->n_finals, 3);
  fake_wait(f, &f->n_finied, 1);
  assert_int_equal(f->finied[0], 1001); /* sequence 22's first state */
  assert_int_equal(f->fini_inside_run, 0);
  hark_sched_stop(f->sched);
  assert_int_equal(f->n_finied, 3); /* 21's and 22's second */
  assert_int_equal(f->fini_inside_run, 0);
  hark_error *err = fake_try(f, 4, 21, 0);
  assert_non_null(err);
  assert_int_equal(hark_error_code(err), HARK_ERR_UNAVAILABLE);
  hark_error_free(err);
  fake_stop(f);
}

/* ---- the scheduler with the accumulate backend ------------------------------------ */

typedef struct waiter {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool done;
  hark_code code;
  int32_t value;
  char msg[256];
} waiter;

static void on_final(hark_response *resp, uint32_t flags, hark_error *err, void *userp) {
  waiter *w = userp;
  if (!(flags & HARK_RESPONSE_FINAL)) fail_msg("only finals expected");
  pthread_mutex_lock(&w->lock);
  w->code = err ? hark_error_code(err) : HARK_OK;
  snprintf(w->msg, sizeof w->msg, "%s", err ? hark_error_message(err) : "");
  const hark_tensor *t = resp ? hark_response_output_by_name(resp, "OUTPUT") : NULL;
  if (t && t->byte_size >= 4) memcpy(&w->value, t->data, 4);
  w->done = true;
  pthread_cond_broadcast(&w->cond);
  pthread_mutex_unlock(&w->lock);
  hark_response_free(resp);
  hark_error_free(err);
}

static void waiter_init(waiter *w) {
  memset(w, 0, sizeof *w);
  pthread_mutex_init(&w->lock, NULL);
  pthread_cond_init(&w->cond, NULL);
}

static void waiter_wait(waiter *w) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 30;
  pthread_mutex_lock(&w->lock);
  while (!w->done)
    if (pthread_cond_timedwait(&w->cond, &w->lock, &until) == ETIMEDOUT) break;
  bool done = w->done;
  pthread_mutex_unlock(&w->lock);
  assert_true(done);
}

/* Sends value v to sequence `id` (0: none); the waiter gets the final. */
static hark_error *send_value(hark_server *s, hark_model *m, uint64_t id, uint32_t flags, int32_t v,
                              waiter *w) {
  hark_request *req = hark_request_new(m);
  int32_t *data = malloc(4);
  assert_non_null(data);
  *data = v;
  int64_t shape[2] = {1, 1};
  assert_null(hark_request_add_input(req, "INPUT", HARK_TYPE_INT32, shape, 2, data, 4));
  hark_request_attach(req, data, free);
  if (id) hark_request_set_correlation_id(req, id);
  hark_request_set_flags(req, flags);
  hark_request_set_callback(req, on_final, w);
  hark_error *err = hark_server_infer(s, req);
  if (err) hark_request_free(req);
  return err;
}

static const char ACC_CONFIG[] =
    "backend: \"accumulate\"\nmax_batch_size: 4\n"
    "input [ { name: \"INPUT\" data_type: TYPE_INT32 dims: [ 1 ] } ]\n"
    "output [ { name: \"OUTPUT\" data_type: TYPE_INT32 dims: [ 1 ] } ]\n"
    "instance_group [ { count: 3 } ]\n"
    "sequence_batching { oldest { max_candidate_sequences: 16 max_queue_delay_microseconds: 500 } "
    "}\n";

typedef struct stream_arg {
  hark_server *s;
  hark_model *m;
  uint64_t id;
  int failures;
} stream_arg;

/* One client stream: START, 20 values, END; each sum checked in turn. */
static void *stream_main(void *p) {
  stream_arg *a = p;
  int32_t sum = 0;
  for (int i = 0; i <= 20; i++) {
    waiter w;
    waiter_init(&w);
    int32_t v = (int32_t)(a->id * 100 + (uint64_t)i);
    uint32_t flags = i == 0 ? START : i == 20 ? END : 0;
    hark_error *err = send_value(a->s, a->m, a->id, flags, v, &w);
    if (err) {
      a->failures++;
      hark_error_free(err);
      break;
    }
    waiter_wait(&w);
    sum += v;
    if (w.code != HARK_OK || w.value != sum) a->failures++;
  }
  return NULL;
}

static void test_scheduler_interleaved_streams(void **state) {
  (void)state;
  repo_make("sequence");
  model_write("acc", ACC_CONFIG);
  hark_server *s = server_start();
  hark_model *m = NULL;
  assert_null(hark_server_model_acquire(s, "acc", -1, &m));
  enum { N = 12 };
  pthread_t th[N];
  stream_arg args[N];
  for (int i = 0; i < N; i++) {
    args[i] = (stream_arg){s, m, (uint64_t)i + 1, 0};
    pthread_create(&th[i], NULL, stream_main, &args[i]);
  }
  for (int i = 0; i < N; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(args[i].failures, 0);
  }
  /* A request for an unknown sequence without START is refused. */
  waiter w;
  waiter_init(&w);
  hark_error *err = send_value(s, m, 999, 0, 1, &w);
  assert_non_null(err);
  assert_int_equal(hark_error_code(err), HARK_ERR_INVALID_ARG);
  assert_non_null(strstr(hark_error_message(err), "sequence 999"));
  assert_non_null(strstr(hark_error_message(err), "START"));
  hark_error_free(err);
  /* Live sequences at shutdown: every request still gets its final, and
   * their states go to sequence_fini (leaks would fail under ASan). */
  waiter live[4];
  for (int i = 0; i < 4; i++) {
    waiter_init(&live[i]);
    assert_null(send_value(s, m, 500 + (uint64_t)i, START, i, &live[i]));
  }
  hark_model_release(m);
  hark_server_free(s);
  for (int i = 0; i < 4; i++) {
    waiter_wait(&live[i]);
    assert_int_equal(live[i].code, HARK_OK);
    assert_int_equal(live[i].value, i);
  }
  repo_remove();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_start_required),
      cmocka_unit_test(test_namespaces_isolate),
      cmocka_unit_test(test_order_and_one_in_flight),
      cmocka_unit_test(test_end_and_restart_drop_state),
      cmocka_unit_test(test_idle_expiry),
      cmocka_unit_test(test_direct_slots_and_backlog),
      cmocka_unit_test(test_direct_batches_an_instance),
      cmocka_unit_test(test_oldest_batches),
      cmocka_unit_test(test_oldest_waits_for_preferred),
      cmocka_unit_test(test_oldest_no_wait_when_nobody_else_can_come),
      cmocka_unit_test(test_oldest_adaptive_delay),
      cmocka_unit_test(test_one_shot),
      cmocka_unit_test(test_oneshots_leave_an_instance),
      cmocka_unit_test(test_queue_bound),
      cmocka_unit_test(test_many_sequences),
      cmocka_unit_test(test_client_quota),
      cmocka_unit_test(test_no_quota),
      cmocka_unit_test(test_backlog_round_robin),
      cmocka_unit_test(test_quota_promotion),
      cmocka_unit_test(test_fake_one_at_a_time_in_order),
      cmocka_unit_test(test_fake_state_to_fini_at_end),
      cmocka_unit_test(test_fake_idle_expiry),
      cmocka_unit_test(test_fake_drops_wait_for_the_execute),
      cmocka_unit_test(test_scheduler_interleaved_streams),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * pool.c — the model's bounded pool of pocketsphinx decoders.
 *
 * A decoder holds the acoustic model, dictionary, language model and
 * search tables (tens of MiB), so the pool makes pool_preload of them at
 * load and the rest lazily, up to pool_size, and streams borrow one only
 * for the length of an utterance. A creation costs about half a second of
 * CPU. With pool_spare (the default), the pool's own thread keeps that
 * many decoders idle ahead of demand, so a new speaker takes a ready one
 * and no worker ever spends its half second on a creation while chunks
 * of other streams wait behind it; a stream that still finds none keeps
 * its audio and answers at once (its partial catches up when the decoder
 * comes). Without spares the stream that needs one makes it on its worker.
 * Borrowers wait on a condition variable with a deadline; nobody waits
 * forever and nothing grows without bound. Decoders never carry stream
 * state between borrowers: the front end lives in the stream, and the
 * only state the search keeps across utterances — the cepstral mean — is
 * saved and restored by the stream (ps_cmn_save / ps_cmn_restore).
 *
 * Every decoder carries two searches over one language model: the
 * library's default (the accurate profile) and PS_FAST_SEARCH, made with
 * the fast profile's arguments in place for the moment of its creation
 * (the library reads them then); a stream picks one per utterance. The
 * second search shares the models, so a profile costs no second decoder.
 *
 * One client (one address: hark_request_client) may hold at most
 * max_decoders_per_client of the decoders at once (by default all but a
 * quarter of the pool, at least one kept back), so a client that opens many
 * streams, or sends faster than real time, or stops reading, cannot take
 * every decoder from the others: past its share it is refused as if none
 * were free. A borrower that waits in place (a closing call) registers as a
 * waiter; a freed decoder goes first to the waiting client that holds the
 * fewest (a borrower leaves a decoder to the waiters whose clients hold
 * fewer than its own). Streams in the middle of an utterance do not wait
 * here but ask again on their next call, so they are not waiters: for
 * them the share alone is what keeps a decoder for others.
 *
 * Each decoder gets its own cmd_ln_t: ps_init writes into its
 * configuration (the model's feat.params), and sphinxbase reference counts
 * are not atomic. Streams' front ends share the first decoder's
 * configuration, created and freed under the pool lock for that reason.
 */
#include "ps_internal.h"

#include <errno.h>
#include <pthread.h>
#include <sphinxbase/err.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct pool_job {
  void (*fn)(void *);
  void *arg;
  struct pool_job *next;
} pool_job;

/* Threads and their FIFO of jobs (under the pool's lock). */
struct job_lane {
  struct ps_pool *pool;
  const char *name; /* the threads' name */
  pthread_cond_t cv;
  pthread_t *threads;
  uint32_t n;
  pool_job *head, *tail;
  bool stopping; /* its threads end once the queue is empty */
};

struct ps_pool {
  ps_settings settings;     /* a copy; argv strings owned by the pool */
  cmd_ln_t *fast_cfg;       /* the fast profile's configuration (values only) */
  char accurate_search[64]; /* the library's default search's name */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_mutex_t create_mu;
  pthread_cond_t spare_cv; /* wakes the spare maker */
  pthread_t spare_thread;
  bool spare_running, stopping;
  uint64_t spare_failed_ns; /* when a spare's creation last failed (0: never) */
  /* Threads that run the pool's jobs: utterance-end passes (finish,
   * ps_pool_run) and streams' decoding (decode, ps_pool_run_decode) */
  struct job_lane finish, decode;
  ps_decoder_t **idle; /* stack of idle decoders */
  uint32_t n_idle;
  ps_decoder_t **all; /* every decoder created, for ps_pool_free */
  uint32_t n_all;
  uint32_t creating; /* decoders being created outside the lock */
  uint32_t in_use;
  /* Per-client shares: what each client holds (pool_size slots, a slot
   * with held 0 is free: at most pool_size clients hold one), and, for
   * each decoder of `all`, the slot of the client it is lent to (+1; 0:
   * none, or a borrower without a client). */
  struct client_hold {
    char client[PS_CLIENT_MAX];
    uint32_t held;
  } * holds;
  uint32_t *lent;
  struct waiter *waiters; /* borrowers waiting in place, for the fewest-first rule */
  uint64_t waits, timeouts;
  ps_decoder_t *first; /* its configuration configures the front ends */
  ps_cmn_state cmn0;
  uint32_t sample_rate;
};

void ps_cmn_save(ps_decoder_t *ps, ps_cmn_state *st) {
  cmn_t *c = ps_get_feat(ps)->cmn_struct;
  if (!c) {
    st->veclen = 0;
    return;
  }
  st->veclen = c->veclen > 32 ? 32 : c->veclen;
  memcpy(st->mean, c->cmn_mean, (size_t)st->veclen * sizeof(mfcc_t));
  memcpy(st->sum, c->sum, (size_t)st->veclen * sizeof(mfcc_t));
  st->nframe = c->nframe;
}

void ps_cmn_restore(ps_decoder_t *ps, const ps_cmn_state *st) {
  cmn_t *c = ps_get_feat(ps)->cmn_struct;
  if (!c || st->veclen == 0 || c->veclen != st->veclen) return;
  memcpy(c->cmn_mean, st->mean, (size_t)st->veclen * sizeof(mfcc_t));
  memcpy(c->sum, st->sum, (size_t)st->veclen * sizeof(mfcc_t));
  c->nframe = st->nframe;
}

/* Adds PS_FAST_SEARCH to ps, over the language model of its default
 * search `accurate`: the fast profile's values stand in the decoder's
 * configuration while the search is made, then the decoder's own come
 * back. The library sets the acoustic model's one growable feature buffer
 * from the last search made (a second pass needs the utterance's every
 * frame), so the default search is then made again with its own values. */
static int add_fast_search(ps_pool *p, ps_decoder_t *ps, const char *accurate, char *err,
                           size_t errlen) {
  const ps_settings *s = &p->settings;
  cmd_ln_t *c = ps_get_config(ps);
  /* The search wraps its model in a set: take the model itself, so that
   * lookups do not go through two sets. */
  ngram_model_t *lm = ps_get_lm(ps, accurate);
  if (lm && ngram_model_set_count(lm) == 1) {
    ngram_model_set_iter_t *it = ngram_model_set_iter(lm);
    lm = it ? ngram_model_set_iter_model(it, NULL) : lm;
    ngram_model_set_iter_free(it);
  }
  if (!lm) {
    snprintf(err, errlen,
             "pocketsphinx: the latency profiles need a language model search (-lm); this "
             "model's search has none");
    return -1;
  }
  ngram_model_retain(lm); /* the default search is replaced below */
  anytype_t saved[PS_MAX_ARGS / 2];
  int n = 0;
  for (int j = 0; j + 1 < s->fast_argc; j += 2, n++) {
    anytype_t *dst = cmd_ln_access_r(c, s->fast_argv[j]);
    anytype_t *src = cmd_ln_access_r(p->fast_cfg, s->fast_argv[j]);
    if (!dst || !src) break; /* cannot be: fast_cfg parsed these names */
    saved[n] = *dst;
    *dst = *src;
  }
  int rc = ps_set_lm(ps, PS_FAST_SEARCH, lm);
  for (int j = 0, k = 0; k < n; j += 2, k++) *cmd_ln_access_r(c, s->fast_argv[j]) = saved[k];
  if (rc >= 0) rc = ps_set_lm(ps, accurate, lm);
  ngram_model_free(lm);
  if (rc < 0) snprintf(err, errlen, "pocketsphinx: the fast profile's search could not be made");
  return rc < 0 ? -1 : 0;
}

/* A borrower waiting in ps_pool_acquire (on its stack). */
struct waiter {
  const char *client;
  struct waiter *next;
};

static ps_decoder_t *decoder_new(ps_pool *p, char *err, size_t errlen) {
  cmd_ln_t *c = ps_settings_cmdln(&p->settings, 0, err, errlen);
  if (!c) return NULL;
  ps_decoder_t *ps = ps_init(c);
  cmd_ln_free_r(c); /* the decoder keeps its own reference */
  if (!ps) {
    snprintf(err, errlen,
             "pocketsphinx: ps_init failed (check -hmm, -lm and -dict exist and match; set "
             "parameter verbose=true for the library's log)");
    return NULL;
  }
  const char *cur = ps_get_search(ps);
  if (!cur) {
    snprintf(err, errlen, "pocketsphinx: the decoder has no search");
    ps_free(ps);
    return NULL;
  }
  char accurate[sizeof p->accurate_search];
  snprintf(accurate, sizeof accurate, "%s", cur);
  if (add_fast_search(p, ps, accurate, err, errlen) != 0 || ps_set_search(ps, accurate) < 0) {
    ps_free(ps);
    return NULL;
  }
  if (!p->first) memcpy(p->accurate_search, accurate, sizeof accurate); /* the same in all */
  return ps;
}

/* How much longer than decoder_wait_ms a borrower waits for a decoder
 * being made for it. */
#define SPARE_WAIT_MS 30000u

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Spares are wanted while fewer than pool_spare are idle and the pool has
 * room. A failed creation (memory, say) is not retried for a second, so
 * the thread cannot spin. Called with the lock held. */
static bool spare_wanted(const ps_pool *p) {
  return !p->stopping && p->n_idle < p->settings.pool_spare &&
         p->n_all + p->creating < p->settings.pool_size &&
         (!p->spare_failed_ns || mono_ns() - p->spare_failed_ns > 1000000000u);
}

/* A lane's thread: runs queued jobs until the pool stops (and the queue
 * is empty: every job answers a request, or a stream waits for it). */
static void *lane_main(void *arg) {
  struct job_lane *l = arg;
  ps_pool *p = l->pool;
  pthread_setname_np(pthread_self(), l->name);
  pthread_mutex_lock(&p->mu);
  for (;;) {
    pool_job *j = l->head;
    if (!j) {
      if (l->stopping) break;
      pthread_cond_wait(&l->cv, &p->mu);
      continue;
    }
    if (!(l->head = j->next)) l->tail = NULL;
    pthread_mutex_unlock(&p->mu);
    j->fn(j->arg);
    free(j);
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

static int lane_run(ps_pool *p, struct job_lane *l, void (*fn)(void *), void *arg) {
  if (!l->n) return -1;
  pool_job *j = malloc(sizeof *j);
  if (!j) return -1;
  *j = (pool_job){fn, arg, NULL};
  pthread_mutex_lock(&p->mu);
  if (l->tail)
    l->tail->next = j;
  else
    l->head = j;
  l->tail = j;
  pthread_cond_signal(&l->cv);
  pthread_mutex_unlock(&p->mu);
  return 0;
}

int ps_pool_run(ps_pool *p, void (*fn)(void *), void *arg) {
  return lane_run(p, &p->finish, fn, arg);
}

int ps_pool_run_decode(ps_pool *p, void (*fn)(void *), void *arg) {
  return lane_run(p, &p->decode, fn, arg);
}

/* Starts a lane's n threads (at least one of them, or -1). */
static int lane_start(ps_pool *p, struct job_lane *l, const char *name, uint32_t n) {
  l->pool = p;
  l->name = name;
  l->threads = calloc(n, sizeof *l->threads);
  for (uint32_t i = 0; l->threads && i < n; i++) {
    if (pthread_create(&l->threads[i], NULL, lane_main, l) != 0) break;
    l->n++;
  }
  return l->n ? 0 : -1;
}

static void lane_join(struct job_lane *l) {
  for (uint32_t i = 0; i < l->n; i++) pthread_join(l->threads[i], NULL);
  free(l->threads);
}

/* Makes one decoder outside the pool lock (held on entry and on return;
 * creations one at a time) and lists it; NULL when it fails. */
static ps_decoder_t *create_locked(ps_pool *p) {
  p->creating++;
  pthread_mutex_unlock(&p->mu);
  char err[256];
  pthread_mutex_lock(&p->create_mu);
  ps_decoder_t *ps = decoder_new(p, err, sizeof err);
  pthread_mutex_unlock(&p->create_mu);
  pthread_mutex_lock(&p->mu);
  p->creating--;
  if (ps) p->all[p->n_all++] = ps;
  return ps;
}

/* A decoder is being made, or will be, for whoever waits (lock held). */
static bool growing(const ps_pool *p) {
  return p->spare_running && (p->creating > 0 || p->n_all < p->settings.pool_size);
}

bool ps_pool_growing(ps_pool *p) {
  pthread_mutex_lock(&p->mu);
  bool g = growing(p);
  pthread_mutex_unlock(&p->mu);
  return g;
}

/* The spare maker: creates decoders one at a time while spares are
 * wanted, outside the pool lock, and hands each to the idle stack. */
static void *spare_main(void *arg) {
  ps_pool *p = arg;
  pthread_setname_np(pthread_self(), "ps-spare");
  pthread_mutex_lock(&p->mu);
  while (!p->stopping) {
    if (!spare_wanted(p)) {
      if (p->spare_failed_ns && p->n_idle < p->settings.pool_spare) { /* retry in a second */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&p->spare_cv, &p->mu, &ts);
      } else {
        pthread_cond_wait(&p->spare_cv, &p->mu);
      }
      continue;
    }
    ps_decoder_t *ps = create_locked(p);
    if (ps) {
      p->idle[p->n_idle++] = ps;
      p->spare_failed_ns = 0;
    } else {
      p->spare_failed_ns = mono_ns();
    }
    pthread_cond_broadcast(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

ps_pool *ps_pool_new(const ps_settings *s, char *err, size_t errlen) {
  ps_pool *p = calloc(1, sizeof *p);
  if (!p) {
    snprintf(err, errlen, "pocketsphinx: out of memory");
    return NULL;
  }
  /* The library logs every argument and model detail to stderr. */
  if (!s->verbose) err_set_logfp(NULL);
  p->settings = *s;
  for (int i = 0; i < s->argc; i++) p->settings.argv[i] = strdup(s->argv[i]);
  for (int i = 0; i < s->fast_argc; i++) p->settings.fast_argv[i] = strdup(s->fast_argv[i]);
  pthread_mutex_init(&p->mu, NULL);
  pthread_mutex_init(&p->create_mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  pthread_cond_init(&p->spare_cv, NULL);
  pthread_cond_init(&p->finish.cv, NULL);
  pthread_cond_init(&p->decode.cv, NULL);
  p->idle = calloc(s->pool_size, sizeof *p->idle);
  p->all = calloc(s->pool_size, sizeof *p->all);
  p->holds = calloc(s->pool_size, sizeof *p->holds);
  p->lent = calloc(s->pool_size, sizeof *p->lent);
  if (!p->idle || !p->all || !p->holds || !p->lent) {
    snprintf(err, errlen, "pocketsphinx: out of memory");
    ps_pool_free(p);
    return NULL;
  }
  p->fast_cfg = ps_settings_cmdln(&p->settings, 1, err, errlen);
  if (!p->fast_cfg) {
    ps_pool_free(p);
    return NULL;
  }
  p->first = decoder_new(p, err, errlen);
  if (!p->first) {
    ps_pool_free(p);
    return NULL;
  }
  double rate = cmd_ln_float32_r(ps_get_config(p->first), "-samprate");
  if (rate < 8000 || rate > 48000) {
    snprintf(err, errlen, "pocketsphinx: -samprate %.0f outside 8000..48000", rate);
    ps_free(p->first);
    p->first = NULL;
    ps_pool_free(p);
    return NULL;
  }
  p->sample_rate = (uint32_t)rate;
  ps_cmn_save(p->first, &p->cmn0);
  p->all[p->n_all++] = p->first;
  p->idle[p->n_idle++] = p->first;
  while (p->n_all < s->pool_preload) { /* nobody else sees the pool yet */
    ps_decoder_t *ps = decoder_new(p, err, errlen);
    if (!ps) {
      ps_pool_free(p);
      return NULL;
    }
    p->all[p->n_all++] = ps;
    p->idle[p->n_idle++] = ps;
  }
  if (s->pool_spare) {
    if (pthread_create(&p->spare_thread, NULL, spare_main, p) != 0) {
      snprintf(err, errlen, "pocketsphinx: cannot start the spare decoder thread");
      ps_pool_free(p);
      return NULL;
    }
    p->spare_running = true; /* it makes the spares the preload left wanting */
  }
  if (s->final_threads && lane_start(p, &p->finish, "ps-final", s->final_threads) != 0) {
    snprintf(err, errlen, "pocketsphinx: cannot start the utterance-end threads");
    ps_pool_free(p);
    return NULL;
  }
  if (s->decode_threads && lane_start(p, &p->decode, "ps-decode", s->decode_threads) != 0) {
    snprintf(err, errlen, "pocketsphinx: cannot start the decoding threads");
    ps_pool_free(p);
    return NULL;
  }
  return p;
}

void ps_pool_free(ps_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stopping = true;
  p->decode.stopping = true;
  pthread_cond_signal(&p->spare_cv);
  pthread_cond_broadcast(&p->decode.cv);
  pthread_mutex_unlock(&p->mu);
  if (p->spare_running) pthread_join(p->spare_thread, NULL); /* waits out a creation */
  /* Decoding first: a decoding job may hand its utterance's end to the
   * finishers, which run until that queue is empty too. */
  lane_join(&p->decode);
  pthread_mutex_lock(&p->mu);
  p->finish.stopping = true;
  pthread_cond_broadcast(&p->finish.cv);
  pthread_mutex_unlock(&p->mu);
  lane_join(&p->finish);
  for (uint32_t i = 0; i < p->n_all; i++) ps_free(p->all[i]);
  free(p->idle);
  free(p->all);
  free(p->holds);
  free(p->lent);
  ps_settings_fini(&p->settings);
  if (p->fast_cfg) cmd_ln_free_r(p->fast_cfg);
  pthread_cond_destroy(&p->cv);
  pthread_cond_destroy(&p->spare_cv);
  pthread_cond_destroy(&p->finish.cv);
  pthread_cond_destroy(&p->decode.cv);
  pthread_mutex_destroy(&p->mu);
  pthread_mutex_destroy(&p->create_mu);
  free(p);
}

static void deadline_after(struct timespec *ts, uint32_t ms) {
  clock_gettime(CLOCK_REALTIME, ts);
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

/* The slot of what `client` holds, or NULL when it holds nothing (lock
 * held). */
static struct client_hold *hold_of(const ps_pool *p, const char *client) {
  if (!client || !*client) return NULL;
  for (uint32_t i = 0; i < p->settings.pool_size; i++)
    if (p->holds[i].held && !strcmp(p->holds[i].client, client)) return &p->holds[i];
  return NULL;
}

static uint32_t held_by(const ps_pool *p, const char *client) {
  const struct client_hold *h = hold_of(p, client);
  return h ? h->held : 0;
}

/* The client holds its share (lock held). */
static bool at_share(const ps_pool *p, const char *client) {
  uint32_t share = p->settings.max_per_client;
  return share && held_by(p, client) >= share;
}

/* Waiters whose clients hold fewer decoders than `client` (lock held):
 * the idle decoders are theirs first. */
static uint32_t waiters_ahead(const ps_pool *p, const char *client) {
  uint32_t mine = held_by(p, client), ahead = 0;
  for (const struct waiter *w = p->waiters; w; w = w->next)
    if (held_by(p, w->client) < mine) ahead++;
  return ahead;
}

/* Counts `ps` as lent to `client` (lock held). */
static void lend(ps_pool *p, ps_decoder_t *ps, const char *client) {
  p->in_use++;
  if (!client || !*client) return;
  struct client_hold *h = hold_of(p, client);
  for (uint32_t i = 0; !h && i < p->settings.pool_size; i++)
    if (!p->holds[i].held) { /* one is free: each slot in use holds a decoder */
      h = &p->holds[i];
      snprintf(h->client, sizeof h->client, "%s", client);
    }
  for (uint32_t i = 0; h && i < p->n_all; i++)
    if (p->all[i] == ps) {
      h->held++;
      p->lent[i] = (uint32_t)(h - p->holds) + 1;
      break;
    }
}

static void unregister(ps_pool *p, struct waiter *me) {
  for (struct waiter **w = &p->waiters; *w; w = &(*w)->next)
    if (*w == me) {
      *w = me->next;
      break;
    }
  /* What it would have taken, or left to it, may be another's now. */
  if (p->waiters) pthread_cond_broadcast(&p->cv);
}

ps_decoder_t *ps_pool_acquire(ps_pool *p, const char *client, uint32_t wait_ms) {
  struct timespec deadline;
  struct waiter me = {client, NULL};
  int have_deadline = 0, waited = 0;
  bool registered = false;
  ps_decoder_t *ps = NULL;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    bool refused = at_share(p, client); /* only a release of its own helps */
    if (!refused && p->n_idle > waiters_ahead(p, client)) {
      ps = p->idle[--p->n_idle];
      lend(p, ps, client);
      if (spare_wanted(p)) pthread_cond_signal(&p->spare_cv);
      break;
    }
    if (refused) {
      /* no decoder is made for it either */
    } else if (p->spare_running) {
      if (spare_wanted(p)) pthread_cond_signal(&p->spare_cv);
    } else if (p->n_all + p->creating < p->settings.pool_size) {
      ps = create_locked(p);
      if (ps) lend(p, ps, client);
      pthread_cond_broadcast(&p->cv); /* a failed slot is free again */
      break;
    }
    if (!have_deadline) {
      /* A decoder the spare maker is making for us is on its way: wait
       * for it longer than for another stream's release (a creation takes
       * seconds on a slow or sanitised build). */
      deadline_after(&deadline,
                     wait_ms && !refused && growing(p) ? wait_ms + SPARE_WAIT_MS : wait_ms);
      have_deadline = 1;
    }
    if (!waited) {
      p->waits++;
      waited = 1;
    }
    if (wait_ms == 0) break;
    if (!registered) {
      me.next = p->waiters;
      p->waiters = &me;
      registered = true;
    }
    if (pthread_cond_timedwait(&p->cv, &p->mu, &deadline) == ETIMEDOUT) {
      if (!at_share(p, client) && p->n_idle > waiters_ahead(p, client))
        continue; /* one came with the deadline */
      break;
    }
  }
  if (registered) unregister(p, &me);
  pthread_mutex_unlock(&p->mu);
  return ps;
}

void ps_pool_release(ps_pool *p, ps_decoder_t *ps) {
  if (!ps) return;
  pthread_mutex_lock(&p->mu);
  p->idle[p->n_idle++] = ps;
  p->in_use--;
  for (uint32_t i = 0; i < p->n_all; i++)
    if (p->all[i] == ps) {
      if (p->lent[i]) p->holds[p->lent[i] - 1].held--;
      p->lent[i] = 0;
      break;
    }
  /* Every waiter looks: the decoder goes to the one whose client holds
   * the fewest, and one at its share cannot take it. */
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

uint32_t ps_pool_client_held(ps_pool *p, const char *client) {
  pthread_mutex_lock(&p->mu);
  uint32_t n = held_by(p, client);
  pthread_mutex_unlock(&p->mu);
  return n;
}

bool ps_pool_client_at_share(ps_pool *p, const char *client) {
  pthread_mutex_lock(&p->mu);
  bool at = at_share(p, client);
  pthread_mutex_unlock(&p->mu);
  return at;
}

void ps_pool_count_timeout(ps_pool *p) {
  pthread_mutex_lock(&p->mu);
  p->timeouts++;
  pthread_mutex_unlock(&p->mu);
}

void ps_pool_get_stats(ps_pool *p, ps_pool_stats *out) {
  pthread_mutex_lock(&p->mu);
  out->max = p->settings.pool_size;
  out->created = p->n_all;
  out->in_use = p->in_use;
  out->waits = p->waits;
  out->timeouts = p->timeouts;
  pthread_mutex_unlock(&p->mu);
}

/* A stream's endpointing is the front end's voice activity detector, set
 * from the config when the front end is made: so the config is changed for
 * that moment, under the lock every front end is made under. Nothing else
 * reads these arguments after the decoders were built. */
fe_t *ps_pool_fe_new(ps_pool *p, const ps_endpointing *ep, bool gated) {
  pthread_mutex_lock(&p->mu);
  cmd_ln_t *cfg = ps_get_config(p->first);
  long post = cmd_ln_int32_r(cfg, "-vad_postspeech"),
       start = cmd_ln_int32_r(cfg, "-vad_startspeech");
  long remove = cmd_ln_boolean_r(cfg, "-remove_silence");
  /* 100 frames a second */
  if (!gated && ep && ep->silence_ms)
    cmd_ln_set_int32_r(cfg, "-vad_postspeech", (int32)((ep->silence_ms + 5) / 10));
  if (!gated && ep && ep->startspeech_ms)
    cmd_ln_set_int32_r(cfg, "-vad_startspeech", (int32)((ep->startspeech_ms + 5) / 10));
  if (gated) cmd_ln_set_boolean_r(cfg, "-remove_silence", 0);
  fe_t *fe = fe_init_auto_r(cfg);
  cmd_ln_set_int32_r(cfg, "-vad_postspeech", (int32)post);
  cmd_ln_set_int32_r(cfg, "-vad_startspeech", (int32)start);
  cmd_ln_set_boolean_r(cfg, "-remove_silence", remove);
  pthread_mutex_unlock(&p->mu);
  return fe;
}

void ps_pool_fe_free(ps_pool *p, fe_t *fe) {
  if (!fe) return;
  pthread_mutex_lock(&p->mu);
  fe_free(fe);
  pthread_mutex_unlock(&p->mu);
}

void ps_pool_cmn_initial(const ps_pool *p, ps_cmn_state *out) { *out = p->cmn0; }
uint32_t ps_pool_sample_rate(const ps_pool *p) { return p->sample_rate; }
const ps_settings *ps_pool_settings(const ps_pool *p) { return &p->settings; }

const char *ps_pool_search(const ps_pool *p, ps_profile prof) {
  return prof == PS_PROFILE_FAST ? PS_FAST_SEARCH : p->accurate_search;
}

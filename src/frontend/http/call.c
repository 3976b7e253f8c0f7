/*
 * call.c — calls and the completion list: a call (http.h) is started on a
 * loop, handed to another thread, and posted back; the poster appends it to
 * its loop's mutex-guarded list and wakes only that loop
 * (hark_http_loop_wake), and the loop runs each call's done handler. A loop
 * that posts one of its own calls (work that ran on the loop thread itself,
 * e.g. a cheap batch run inline) is not woken: it drains its list as soon
 * as the lws callback it was in returns (hark_http_drain_soon).
 *
 * A loop's holds count what is live on it (calls, gRPC calls, WebSocket
 * items); shutdown waits for them to reach zero.
 */
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "frontend/http/http_impl.h"

/* The loop this thread runs, if it is a loop thread. */
static _Thread_local hark_http_loop *tl_loop;

hark_http_loop *hark_http_current_loop(void) { return tl_loop; }

void hark_http_loop_hold(hark_http_loop *loop) {
  pthread_mutex_lock(&loop->lock);
  loop->holds++;
  pthread_mutex_unlock(&loop->lock);
}

void hark_http_loop_release(hark_http_loop *loop) {
  pthread_mutex_lock(&loop->lock);
  if (--loop->holds == 0) pthread_cond_broadcast(&loop->idle);
  pthread_mutex_unlock(&loop->lock);
}

void hark_http_call_init(hark_http_call *call, hark_http_loop *loop, hark_http_done_fn done) {
  call->done = done;
  call->loop = loop;
  call->conn = NULL;
  call->next = NULL;
  call->held = false;
}

void hark_http_call_start(hark_http_conn *c, hark_http_call *call, hark_http_done_fn done) {
  hark_http_call_init(call, c->loop, done);
  call->conn = c;
  call->held = true;
  c->call = call;
  c->state = CONN_BUSY;
  hark_http_loop_hold(c->loop);
}

void hark_http_call_abort(hark_http_call *call) {
  if (call->conn) call->conn->call = NULL; /* the service answers it itself */
  call->conn = NULL;
  if (call->held) hark_http_loop_release(call->loop);
}

void hark_http_call_post(hark_http_call *call) {
  hark_http_loop *loop = call->loop;
  pthread_mutex_lock(&loop->lock);
  /* Else a wake-up is already on its way; and a loop that completed one of
   * its own calls drains when its callback returns. */
  bool wake = !loop->done_head && tl_loop != loop;
  if (tl_loop == loop) loop->drain_soon = true;
  call->next = NULL;
  if (loop->done_tail)
    loop->done_tail->next = call;
  else
    loop->done_head = call;
  loop->done_tail = call;
  /* Under the lock, so hark_http_free cannot destroy the context between
   * the check and the call. */
  if (wake && loop->ctx_alive) hark_http_loop_wake(loop);
  if (!loop->ctx_alive) pthread_cond_broadcast(&loop->idle); /* loop_free waits */
  pthread_mutex_unlock(&loop->lock);
}

void hark_http_loop_wake(hark_http_loop *loop) {
  if (loop->wake_fd < 0) {
    lws_cancel_service(loop->ctx);
    return;
  }
  uint64_t one = 1;
  ssize_t n;
  do n = write(loop->wake_fd, &one, sizeof one); /* EAGAIN: already awake */
  while (n < 0 && errno == EINTR);
}

static hark_http_call *take_completions(hark_http_loop *loop) {
  pthread_mutex_lock(&loop->lock);
  hark_http_call *call = loop->done_head;
  loop->done_head = loop->done_tail = NULL;
  pthread_mutex_unlock(&loop->lock);
  return call;
}

/* Runs one finished call's handler; `c` NULL when its client is gone. The
 * handler may free the call: what comes after is read first. */
static void complete(hark_http_call *call) {
  hark_http_conn *c = call->conn;
  hark_http_loop *loop = call->loop;
  bool held = call->held;
  if (c) c->call = NULL;
  call->conn = NULL;
  call->done(call, c);
  if (held) hark_http_loop_release(loop);
}

/* Loop thread: every finished call's done handler, including those the
 * handlers post to this loop meanwhile: posted from the loop's own thread
 * they wake nobody, and while the list is not empty a worker's post wakes
 * nobody either (it takes the wake-up to be on its way), so a call left
 * on the list here would wait for an unrelated event. */
void hark_http_drain_calls(hark_http_loop *loop) {
  hark_http_call *call;
  while ((call = take_completions(loop))) {
    loop->drain_soon = false;
    for (hark_http_call *next; call; call = next) {
      next = call->next;
      complete(call);
    }
  }
}

void hark_http_set_current_loop(hark_http_loop *loop) { tl_loop = loop; }

void hark_http_drain_soon(void) {
  if (tl_loop && tl_loop->drain_soon) {
    tl_loop->drain_soon = false;
    hark_http_drain_calls(tl_loop);
  }
}

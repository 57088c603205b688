/* loop.c: time and the loop: the clock, timers firing, the libuv loop of
 * real engines (pump, signals), settle and advance of virtual ones, and the
 * delivery of events to subscribers.
 */
#include "engine/internal.h"

#include <lauxlib.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/lifecycle.h"
#include "engine/watchdog.h"

/* ---- clock ---------------------------------------------------------- */

double arbor_engine_now(arbor_engine *e) {
  if (e->virtual_clock) return e->vnow;
  return (double)(uv_hrtime() - e->t0) / 1e9;
}

/* xorshift64*: the engine's seedable generator (P5). */
uint64_t arbor_engine_random(arbor_engine *e) {
  uint64_t x = e->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  e->rng = x;
  return x * 2685821657736338717ull;
}

/* Forced close at the shutdown deadline (T7). */
void arbor__force_close(arbor_engine *e, pnode *pn) {
  pn->n.flags |= ARBOR_F_FORCED;
  if (e->stop_requested && !e->closing) {
    if (!e->first_forced) {
      char *dn = arbor_node_dn_dup(&pn->n);
      e->first_forced = arbor_str_lit(dn ? dn : "?");
      free(dn);
    }
    e->forced_in_stop++;
  }
  arbor__node_exit(e, pn, ARBOR_CANCELED, arbor_str_ref(e->r_forced), NULL);
}

static void fire(arbor_engine *e, arbor_timer *t) {
  pnode *pn;
  switch (t->kind) {
  case TIMER_WAKE:
    pn = (pnode *)((char *)t - offsetof(pnode, wake));
    pn->wait = WAIT_NONE;
    arbor__enqueue(e, pn);
    break;
  case TIMER_RESTART:
    pn = (pnode *)((char *)t - offsetof(pnode, wake));
    arbor_engine_start(e, pn);
    break;
  case TIMER_DEADLINE:
    pn = ((pnode_stop *)((char *)t - offsetof(pnode_stop, deadline)))->owner;
    if (arbor_node_running(&pn->n)) arbor__force_close(e, pn);
    break;
  case TIMER_BOUND:
    pn = ((pnode_stop *)((char *)t - offsetof(pnode_stop, deadline)))->owner;
    if (!arbor_node_canceled(&pn->n)) arbor__lc_bound_fired(e, pn);
    break;
  }
}

/* Fires every timer due now. */
static void fire_due(arbor_engine *e) {
  arbor__step_begin(e);
  double now = arbor__step_time(e);
  arbor_timer *t;
  arbor_engine *prev = arbor__current;
  arbor__current = e;
  while ((t = arbor_timers_pop_due(&e->timers, now))) fire(e, t);
  arbor__current = prev;
}

int arbor_engine_finished(arbor_engine *e) {
  return e->tree.root->live == 0 && !e->ready_head && !e->lc_head &&
         !arbor_timers_peek(&e->timers);
}

/* ---- subscribers ---------------------------------------------------- */

/* Subscribers live in an array in subscription order; a removed one is
   marked (LUA_NOREF) and swept out when no delivery walks the array, so a
   delivery walks only the subscribers there are, however many came and
   went before. */

uint64_t arbor__subscribe(arbor_engine *e, int ref) {
  if (!e->outbox.ev &&
      arbor_ring_init(&e->outbox, e->outbox_cap, e->ring.max_bytes) < 0)
    return 0;
  if (e->nsubs == e->subs_cap) {
    size_t cap = e->subs_cap ? 2 * e->subs_cap : 4;
    arbor_sub *subs = realloc(e->subs, cap * sizeof *subs);
    if (!subs) return 0;
    e->subs = subs;
    e->subs_cap = cap;
  }
  if (e->nsubs == 0) { /* nothing is owed: the outbox starts at the next */
    arbor_ring_clear(&e->outbox);
    e->outbox.next_seq = e->ring.next_seq;
    e->delivered = e->ring.next_seq - 1;
  }
  e->subs[e->nsubs++] = (arbor_sub){ref, ++e->sub_ids, e->ring.next_seq};
  return e->sub_ids;
}

/* Drops the removed subscribers from the array, keeping the order; with
   none left, the outbox lets its events go. */
static void sweep(arbor_engine *e) {
  size_t k = 0;
  for (size_t i = 0; i < e->nsubs; i++)
    if (e->subs[i].ref != LUA_NOREF) e->subs[k++] = e->subs[i];
  e->nsubs = k;
  if (k == 0) arbor_ring_clear(&e->outbox);
}

static void remove_sub(arbor_engine *e, arbor_sub *sub) {
  luaL_unref(e->L, LUA_REGISTRYINDEX, sub->ref);
  sub->ref = LUA_NOREF;
  if (!e->delivering) sweep(e);
}

void arbor__unsubscribe(arbor_engine *e, uint64_t id) {
  size_t lo = 0, hi = e->nsubs; /* ids increase along the array */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (e->subs[mid].id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < e->nsubs && e->subs[lo].id == id && e->subs[lo].ref != LUA_NOREF)
    remove_sub(e, &e->subs[lo]);
}

void arbor__subscribers_free(arbor_engine *e) {
  for (size_t i = 0; i < e->nsubs; i++)
    luaL_unref(e->L, LUA_REGISTRYINDEX, e->subs[i].ref);
  free(e->subs);
  e->subs = NULL;
  e->nsubs = e->subs_cap = 0;
}

/* Calls subscriber i with the table on top of e->L [-1, +0, -]; one that
   raises (or runs past its budget) is removed and the removal logged. */
static void call_sub(arbor_engine *e, size_t i) {
  lua_State *L = e->L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, e->subs[i].ref);
  lua_insert(L, -2);
  if (arbor__budget_call(e, L, 1) == LUA_OK) {
    lua_pop(L, 1);
    return;
  }
  arbor_str *msg = arbor__error_message(e, L, NULL);
  arbor_str *why = arbor_str_fmt("on_event subscriber removed: %s",
                                 msg ? msg->s : "(error)");
  arbor_str_unref(msg);
  lua_pop(L, 1);
  remove_sub(e, &e->subs[i]); /* the call may have moved the array */
  arbor_engine_log(e, (pnode *)e->tree.root, why);
  arbor_str_unref(why);
}

/* Tells each subscriber owed some of the events first..last that they left
   the outbox before their turn. */
static void deliver_gap(arbor_engine *e, uint64_t first, uint64_t last) {
  e->events_missed += last - first + 1;
  for (size_t i = 0; i < e->nsubs; i++) {
    if (e->subs[i].ref == LUA_NOREF || e->subs[i].from > last) continue;
    uint64_t from = e->subs[i].from > first ? e->subs[i].from : first;
    arbor_push_gap_table(e->L, from, last, arbor__step_time(e));
    call_sub(e, i);
  }
}

/* Delivers the events emitted since the last delivery, in order, each to the
   subscribers owed it; events the subscribers emit meanwhile are delivered
   in this same pass. Those that left the outbox (more than it holds in one
   pass) become one gap marker per run of them. */
void arbor__deliver_events(arbor_engine *e) {
  if (!e->nsubs || e->delivering || e->delivered + 1 >= e->ring.next_seq)
    return;
  e->delivering = 1;
  arbor_engine *prev = arbor__current;
  arbor__current = e;
  while (e->delivered + 1 < e->ring.next_seq) {
    uint64_t s = e->delivered + 1, first = arbor_ring_first(&e->outbox);
    if (s < first) {
      e->delivered = first - 1;
      deliver_gap(e, s, first - 1);
      continue;
    }
    /* a copy: the calls may push the event out of the outbox */
    arbor_event ev = *arbor_ring_get(&e->outbox, s);
    arbor_node_ref(ev.node);
    arbor_str_ref(ev.reason);
    e->delivered = s;
    for (size_t i = 0; i < e->nsubs; i++) {
      if (e->subs[i].ref == LUA_NOREF || e->subs[i].from > s) continue;
      arbor_push_event_table(e, e->L, &ev);
      call_sub(e, i);
    }
    arbor_node_unref(ev.node);
    arbor_str_unref(ev.reason);
  }
  arbor_ring_clear(&e->outbox);
  e->delivering = 0;
  sweep(e);
  arbor__current = prev;
}

/* ---- stuck nodes ---------------------------------------------------- */

void arbor_engine_stuck(arbor_engine *e, void (*fn)(pnode *, void *),
                        void *ud) {
  double now = arbor_engine_now(e);
  arbor_node *top = e->tree.root, *n = top;
  while (n) {
    pnode *pn = (pnode *)n;
    if (arbor_node_running(n) && (pn->pflags & PN_NOTIFIED) && pn->stop &&
        now >= pn->stop->deadline.due)
      fn(pn, ud);
    if (n->first) {
      n = n->first;
      continue;
    }
    while (n && n != top && !n->next) n = n->parent;
    n = (n && n != top) ? n->next : NULL;
  }
}

/* ---- the loop ------------------------------------------------------- */

static void pump(arbor_engine *e);
static void on_timer(uv_timer_t *h);

/* An active idle handle keeps the loop from blocking in poll, so work
   enqueued from outside a drain runs in this loop iteration. */
static void on_idle(uv_idle_t *h) { (void)h; }

void arbor__need_drain(arbor_engine *e) {
  if (e->loop && !e->draining && !uv_is_active((uv_handle_t *)&e->idle))
    uv_idle_start(&e->idle, on_idle);
}

static void rearm_uv_timer(arbor_engine *e) {
  arbor_timer *t = arbor_timers_peek(&e->timers);
  if (!t) {
    uv_timer_stop(&e->timer);
    return;
  }
  double wait = t->due - arbor_engine_now(e);
  uint64_t ms = wait <= 0 ? 0 : (uint64_t)ceil(wait * 1000.0);
  uv_timer_start(&e->timer, on_timer, ms, 0);
}

static void on_timer(uv_timer_t *h) { pump(h->data); }
static void on_check(uv_check_t *h) { pump(h->data); }

void arbor__kill_all(arbor_engine *e) {
  e->closing = 1;
  arbor_node *top = e->tree.root, *n = top;
  while (n) {
    if (arbor_node_running(n)) arbor__force_close(e, (pnode *)n);
    if (n->first) {
      n = n->first;
      continue;
    }
    while (n && n != top && !n->next) n = n->parent;
    n = (n && n != top) ? n->next : NULL;
  }
}

static void on_signal(uv_signal_t *h, int signum) {
  arbor_engine *e = h->data;
  arbor_watchdog_signal_handled();
  arbor__step_begin(e);
  if (e->stop_requested && signum == SIGINT) {
    e->interrupted = 1;
    arbor__kill_all(e);
  } else {
    arbor_str *line = arbor_str_fmt("%s: stopping the tree",
                                    signum == SIGINT ? "SIGINT" : "SIGTERM");
    arbor_engine_log(e, (pnode *)e->tree.root, line);
    arbor_str_unref(line);
    arbor_engine_stop(e);
  }
  pump(e);
}

/* One turn: fire due timers, drain, re-arm; stops the loop when finished. */
static void pump(arbor_engine *e) {
  e->wakeups++;
  fire_due(e);
  arbor__drain(e);
  if (e->ready_head) {
    uv_idle_start(&e->idle, on_idle); /* more to do: do not block in poll */
  } else {
    uv_idle_stop(&e->idle);
    arbor_watchdog_idle();
  }
  if (arbor_engine_finished(e) || e->interrupted) {
    uv_timer_stop(&e->timer);
    uv_stop(e->loop);
    return;
  }
  rearm_uv_timer(e);
}

void arbor_engine_run(arbor_engine *e) {
  if (!e->loop) return;
  uv_check_start(&e->check, on_check);
  if (e->signals) {
    uv_signal_start(&e->sigint, on_signal, SIGINT);
    uv_signal_start(&e->sigterm, on_signal, SIGTERM);
    arbor_watchdog_signals_on(); /* a stuck loop still ends (T12) */
  }
  double loop_limit = arbor_watchdog_loop_limit();
  arbor_watchdog_set_loop_limit(e->runaway); /* luv callbacks */
  pump(e);
  if (!arbor_engine_finished(e) && !e->interrupted)
    uv_run(e->loop, UV_RUN_DEFAULT);
  arbor_watchdog_set_loop_limit(loop_limit);
  uv_check_stop(&e->check);
  if (e->signals) arbor_watchdog_signals_off();
  uv_signal_stop(&e->sigint);
  uv_signal_stop(&e->sigterm);
  uv_timer_stop(&e->timer);
}

int arbor_engine_settle(arbor_engine *e) {
  if (e->draining) return 0;
  uint64_t limit = e->resumes + e->settle_limit;
  do {
    fire_due(e);
    arbor__drain(e);
    if (e->resumes > limit) {
      arbor_watchdog_idle();
      return -1;
    }
  } while (e->ready_head || e->lc_head ||
           (arbor_timers_peek(&e->timers) &&
            arbor_timers_peek(&e->timers)->due <= arbor__step_time(e)));
  arbor_watchdog_idle();
  return 0;
}

int arbor_engine_advance(arbor_engine *e, double dt) {
  double target = e->vnow + dt;
  if (arbor_engine_settle(e) < 0) return -1;
  arbor_timer *t;
  while ((t = arbor_timers_peek(&e->timers)) && t->due <= target) {
    if (t->due > e->vnow) e->vnow = t->due;
    if (arbor_engine_settle(e) < 0) return -1;
  }
  if (target > e->vnow) e->vnow = target;
  return arbor_engine_settle(e);
}

/* loop.c: time and the loop: the clock, timers firing, the libuv loop of
 * real engines (pump, signals), settle and advance of virtual ones, and the
 * delivery of events to subscribers.
 */
#include "internal.h"

#include <lauxlib.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lifecycle.h"
#include "watchdog.h"

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
  while ((t = arbor_sched_pop_due(&e->sched, now))) fire(e, t);
  arbor__current = prev;
}

int arbor_engine_finished(arbor_engine *e) {
  return e->tree.root->live == 0 && !e->ready_head && !e->lc_head &&
         !arbor_sched_peek(&e->sched);
}

/* ---- subscribers ---------------------------------------------------- */

void arbor__deliver_events(arbor_engine *e) {
  if (!e->outbox.len || e->delivering) return;
  lua_State *L = e->L;
  e->delivering = 1;
  arbor_engine *prev = arbor__current;
  arbor__current = e;
  lua_rawgeti(L, LUA_REGISTRYINDEX, e->subscribers_ref);
  int subs = lua_gettop(L);
  /* events emitted by subscribers themselves are appended and delivered in
     this same pass */
  for (size_t k = 0; k < e->outbox.len; k++) {
    const arbor_event *ev = &e->outbox.ev[(e->outbox.start + k) %
                                          e->outbox.cap];
    lua_Integer n = luaL_len(L, subs);
    for (lua_Integer i = 1; i <= n; i++) {
      if (lua_rawgeti(L, subs, i) != LUA_TFUNCTION) {
        lua_pop(L, 1);
        continue;
      }
      arbor_push_event_table(e, L, ev);
      if (arbor__budget_call(e, L, 1) != LUA_OK) {
        arbor_str *why = arbor_str_fmt("on_event subscriber removed: %s",
                                       lua_tostring(L, -1));
        lua_pop(L, 1);
        lua_pushboolean(L, 0); /* keep indices stable */
        lua_rawseti(L, subs, i);
        arbor_engine_log(e, (pnode *)e->tree.root, why);
        arbor_str_unref(why);
      } else {
        lua_pop(L, 1);
      }
    }
  }
  lua_pop(L, 1);
  arbor_ring_clear(&e->outbox);
  arbor__current = prev;
  e->delivering = 0;
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
  arbor_timer *t = arbor_sched_peek(&e->sched);
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
  }
  pump(e);
  if (!arbor_engine_finished(e) && !e->interrupted)
    uv_run(e->loop, UV_RUN_DEFAULT);
  uv_check_stop(&e->check);
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
           (arbor_sched_peek(&e->sched) &&
            arbor_sched_peek(&e->sched)->due <= arbor__step_time(e)));
  arbor_watchdog_idle();
  return 0;
}

int arbor_engine_advance(arbor_engine *e, double dt) {
  double target = e->vnow + dt;
  if (arbor_engine_settle(e) < 0) return -1;
  arbor_timer *t;
  while ((t = arbor_sched_peek(&e->sched)) && t->due <= target) {
    if (t->due > e->vnow) e->vnow = t->due;
    if (arbor_engine_settle(e) < 0) return -1;
  }
  if (target > e->vnow) e->vnow = target;
  return arbor_engine_settle(e);
}

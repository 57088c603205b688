/* processor.c: the engine's event processing. See processor.h.
 *
 * Everything happens on one thread. libuv callbacks (and the harness) only
 * fire timers and enqueue incarnations; arbor__pr_drain() is the single place
 * that resumes coroutines, so resumes never nest. When an incarnation ends,
 * its exit is classified, death is spread, ordered stops advance, and the GC
 * decides a restart in O(depth), all before the next resume.
 */
#include "engine/internal.h"
#include "core/mem.h"

#include <lauxlib.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gc.h"
#include "engine/ctx.h"
#include "engine/home.h"
#include "engine/lifecycle.h"
#include "engine/watchdog.h"
#include "core/window.h"

/* ---- ready queue and timers ----------------------------------------- */

void arbor__pr_enqueue(arbor_engine *e, pnode *pn) {
  if (pn->pflags & PN_QUEUED) return;
  pn->pflags |= PN_QUEUED;
  arbor__clock_need_drain(e);
  if (pn->pflags & PN_INLIST) return; /* still linked: wanted again */
  pn->pflags |= PN_INLIST;
  pn->ready_next = NULL;
  if (e->ready_tail)
    e->ready_tail->ready_next = pn;
  else
    e->ready_head = pn;
  e->ready_tail = pn;
  e->ready_len++;
}

/* Takes pn out of the ready queue: lazily, the drain skips it. */
static void dequeue(pnode *pn) { pn->pflags &= (uint16_t)~PN_QUEUED; }

/* Unlinks pn for good (it is being discarded): O(queue), and rare. */
void arbor__pr_unlink_ready(arbor_engine *e, pnode *pn) {
  if (!(pn->pflags & PN_INLIST)) return;
  pnode **p = &e->ready_head, *prev = NULL;
  while (*p && *p != pn) {
    prev = *p;
    p = &(*p)->ready_next;
  }
  if (*p) {
    *p = pn->ready_next;
    if (e->ready_tail == pn) e->ready_tail = prev;
    e->ready_len--;
  }
  pn->ready_next = NULL;
  pn->pflags &= (uint16_t)~(PN_INLIST | PN_QUEUED);
}


/* ---- starting incarnations ------------------------------------------ */

void arbor_engine_start(arbor_engine *e, pnode *pn) {
  lua_State *L = e->L;
  arbor_assert(!arbor_node_running(&pn->n));
  pnode *parent = (pnode *)pn->n.parent;
  if (parent && parent->coord && arbor__lc_hold_at_gate(e, pn))
    return; /* L7: gates control starting */
  arbor_state from = (arbor_state)pn->n.state;
  if (arbor__strategy_hold(e, pn)) return; /* waits for its predecessor */
  arbor_timers_disarm(&e->timers, &pn->wake);
  if (pn->n.incarnation > 0) {
    pn->restarts++;
    e->restarts++;
  }
  pn->pflags &= PN_INLIST | PN_LC_QUEUED | PN_LC_BUSY;
  arbor__tr_started(e, pn, from);
  pn->wait = WAIT_NONE;
  pn->resume = RESUME_VALUES;
  pn->shield = 0;
  pn->done = 0;
  pn->started = arbor__step_time(e);
  pn->healthy_at = -1;
  lua_State *co;
  if (e->npool > 0) {
    e->npool--;
    co = e->pool[e->npool].co;
    pn->co_ref = e->pool[e->npool].ref;
  } else {
    co = lua_newthread(L);
    pn->co_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  pn->co = co;
  lua_rawgeti(co, LUA_REGISTRYINDEX, pn->fn_ref);
  arbor_push_ctx(co, pn);
  pn->nargs = 1;
  arbor__pr_enqueue(e, pn);
  arbor__strategy_release(e, pn);
}

/* ---- exits ---------------------------------------------------------- */

/* T6: a node that died has its own context canceled (its subtree stops,
   children first) and so have the other members of its group. */
void arbor__pr_spread_death(arbor_engine *e, pnode *pn) {
  arbor__tr_cancel(e, pn);
  arbor__pr_stop_advance(e, pn);
  /* First cancel every member; members that had already exited are then
     decided one by one. A decision can restructure the tree (an escalation
     restarts the group's parent, discarding the group), so they are
     collected first, referenced, and skipped once discarded. */
  size_t exited = 0;
  for (arbor_node *g = pn->n.gnext; g != &pn->n; g = g->gnext) {
    if (!arbor__strategy_spreads(pn, (pnode *)g)) continue;
    arbor__tr_cancel(e, (pnode *)g);
    arbor__pr_stop_advance(e, (pnode *)g);
    if (g->live == 0) exited++;
  }
  if (exited == 0) return;
  arbor_node **todo = arbor_xalloc(exited * sizeof *todo);
  size_t k = 0;
  for (arbor_node *g = pn->n.gnext; g != &pn->n && k < exited; g = g->gnext)
    if (g->live == 0 && arbor__strategy_spreads(pn, (pnode *)g)) {
      arbor_node_ref(g);
      todo[k++] = g;
    }
  for (size_t i = 0; i < k; i++) {
    if (!(todo[i]->flags & ARBOR_F_DETACHED))
      arbor__pr_after_exit(e, (pnode *)todo[i]);
    arbor_node_unref(todo[i]);
  }
  free(todo);
}

/* Resets co, which runs its pending <close> variables: user code, on the
   engine's thread, so under the runnable's own limit. One that had to be
   stopped is logged on pn. */
static void reset_thread(arbor_engine *e, pnode *pn, lua_State *co) {
  arbor_watch saved;
  arbor_watchdog_push(&saved, co, e->runaway,
                      "a <close> variable was stopped: ran %d ms "
                      "(limit %d ms)");
  lua_resetthread(co); /* leaves the last error (the hook's) on the stack */
  if (arbor_watchdog_pop(&saved, co) && lua_type(co, -1) == LUA_TSTRING) {
    size_t len;
    const char *msg = lua_tolstring(co, -1, &len);
    arbor_str *line = arbor_str_new(msg, len);
    if (line) arbor_engine_log(e, pn, line);
    arbor_str_unref(line);
  }
}

/* Keeps a finished coroutine's thread for a later incarnation (up to
   ARBOR_THREAD_POOL), which spares the allocator and the GC, or lets Lua
   collect it. A thread that returned is as good as new once emptied; one
   that is suspended (a forced close) or died of an error is reset first,
   which runs its pending <close> variables. A thread that may have hooks
   disabled (Lua 5.4 leaves them off in a coroutine killed by an error
   raised in a hook) or that has a hook of its own is not reused: the next
   incarnation could tell, and the watchdog could not stop it. */
static void release_thread(arbor_engine *e, pnode *pn, lua_State *co,
                           int ref, int poolable) {
  if (lua_status(co) != LUA_OK) /* suspended, or dead of an error */
    reset_thread(e, pn, co);
  lua_settop(co, 0);
  if (poolable && !lua_gethook(co) && e->npool < ARBOR_THREAD_POOL &&
      !e->closing) {
    e->pool[e->npool].co = co;
    e->pool[e->npool].ref = ref;
    e->npool++;
  } else {
    luaL_unref(e->L, LUA_REGISTRYINDEX, ref);
  }
}

static pnode_hist *hist(pnode *pn) {
  if (!pn->failures) {
    pn->failures = calloc(1, sizeof *pn->failures);
    if (!pn->failures) return NULL;
    pn->failures->memory_ref = LUA_NOREF;
  }
  return pn->failures;
}

/* Ends the incarnation's coroutine: its pending <close> variables run now,
   before the node's defers, its policy and its next incarnation. */
void arbor__pr_close_coroutine(arbor_engine *e, pnode *pn) {
  if (!pn->co) return;
  release_thread(e, pn, pn->co, pn->co_ref, !(pn->pflags & PN_NOPOOL));
  pn->pflags &= (uint16_t)~PN_NOPOOL;
  pn->co = NULL;
  pn->co_ref = LUA_NOREF;
}

void arbor__pr_record_failure(arbor_engine *e, pnode *pn) {
  pn->consecutive++;
  pnode_hist *h = hist(pn);
  if (!h) return;
  h->count++;
  unsigned idx = (pn->fail_start + pn->nfail) % ARBOR_FAILURES;
  h->time[idx] = arbor__step_time(e);
  if (pn->nfail < ARBOR_FAILURES)
    pn->nfail++;
  else
    pn->fail_start = (uint8_t)((pn->fail_start + 1) % ARBOR_FAILURES);
}

/* Ends pn's incarnation in state s. reason (taken) is the error message for
   DEAD, or a note; trace (taken) the traceback. */
void arbor__pr_node_exit(arbor_engine *e, pnode *pn, arbor_state s,
                      arbor_str *reason, arbor_str *trace) {
  s = arbor__strategy_auto_exit(pn, s);
  int declared = (pn->n.flags & ARBOR_F_DECLARED) != 0;
  int failed = s == ARBOR_DEAD && !declared;
  dequeue(pn);
  arbor__pr_close_coroutine(e, pn);
  if (pn->pflags & PN_DEFER) arbor__defer_run(e, pn);
  if (pn->pflags & PN_PROCS) { /* set only once proc/ registered */
    pn->pflags &= (uint16_t)~PN_PROCS;
    arbor_engine_get_procs()->incarnation_end(pn, s);
  }
  arbor_timers_disarm(&e->timers, &pn->wake);
  if (pn->stop) arbor_timers_disarm(&e->timers, &pn->stop->deadline);
  pn->wait = WAIT_NONE;
  pn->exited = arbor__step_time(e);
  if (failed) {
    arbor__pr_record_failure(e, pn);
    arbor_str_set(&pn->error, reason);
    arbor_str_set(&pn->trace, trace);
  } else if (s == ARBOR_CANCELED && reason && !declared) {
    arbor_str_set(&pn->error, reason);
  }
  arbor_str_unref(trace);
  arbor__tr_exited(e, pn, s, reason);
  arbor_str_unref(reason);
  if (s == ARBOR_DEAD && !declared) arbor__pr_spread_death(e, pn);
  if (s == ARBOR_DONE) arbor__strategy_significant_done(e, pn);
  arbor__strategy_release(e, pn); /* exited for good: the next member may start */
  arbor__pr_after_exit(e, pn);
}

/* Walks up from a node whose subtree may just have exited: ordered stops
   waiting on it advance, and the GC decides a restart. O(depth). */
void arbor__pr_after_exit(arbor_engine *e, pnode *pn) {
  arbor_node *a = &pn->n;
  if (a->flags & ARBOR_F_DETACHED) return; /* discarded meanwhile */
  while (a->parent && a->live == 0) {
    pnode *p = (pnode *)a->parent;
    if ((p->pflags & PN_STOPPING) && p->stop && p->stop->cursor == (pnode *)a)
      arbor__pr_stop_advance(e, p);
    a = a->parent;
  }
  arbor_node_ref(a = &pn->n); /* a decision may discard pn */
  arbor_node *cand = arbor_gc_candidate(a);
  if (cand) arbor__decide(e, (pnode *)cand);
  if ((pn_lc(pn) & ARBOR_LC_KIND) == ARBOR_LC_POSTSTOP)
    arbor__lc_poststop_ended(e, pn);
  arbor_node_unref(a);
}

/* ---- cancellation and ordered stop (T7, T12) ------------------------ */

/* pn's stop record, made at its first stop. */
static pnode_stop *stop_of(pnode *pn) {
  if (!pn->stop) {
    pn->stop = arbor_xcalloc(1, sizeof *pn->stop);
    pn->stop->owner = pn;
  }
  return pn->stop;
}

pnode_stop *arbor__pr_stop_of(pnode *pn) { return stop_of(pn); }

/* Tells pn's incarnation it is canceled: its blocking calls raise from now
   on, and it has `shutdown` seconds to exit. */
static void notify(arbor_engine *e, pnode *pn) {
  if (!arbor_node_running(&pn->n) || (pn->pflags & PN_NOTIFIED)) return;
  pn->pflags |= PN_NOTIFIED;
  arbor__clock_arm(e, &stop_of(pn)->deadline, TIMER_DEADLINE,
             arbor__step_time(e) + pn->shutdown);
  if (!(pn->pflags & PN_RESUMED)) {
    /* never ran: it ends CANCELED without running (T8) */
    pn->resume = RESUME_CANCEL;
    arbor__pr_enqueue(e, pn);
  } else if (pn->wait != WAIT_NONE && pn->shield == 0) {
    arbor_timers_disarm(&e->timers, &pn->wake);
    pn->wait = WAIT_NONE;
    pn->resume = RESUME_CANCEL;
    arbor__pr_enqueue(e, pn);
  }
}

/* Advances the ordered stop of pn: its running children are stopped one at
   a time, last started first; when none is left, pn itself is notified.
   Iterative: descends into the child being stopped. */
void arbor__pr_stop_advance(arbor_engine *e, pnode *pn) {
  while (pn && arbor_node_canceled(&pn->n)) {
    arbor_node *c;
    if (!(pn->pflags & PN_STOPPING)) {
      pn->pflags |= PN_STOPPING;
      c = pn->n.last;
    } else {
      c = pn->stop && pn->stop->cursor ? &pn->stop->cursor->n : NULL;
    }
    while (c && c->live == 0) c = c->prev;
    if (!c && pn->coord && arbor__lc_poststop_first(e, pn)) {
      /* L3: poststop runs first */
      c = pn->n.last;
      while (c && c->live == 0) c = c->prev;
    }
    if (c || pn->stop) stop_of(pn)->cursor = (pnode *)c;
    if (!c) {
      pn->pflags &= (uint16_t)~PN_STOPPING;
      notify(e, pn);
      return;
    }
    pnode *child = (pnode *)c;
    if (child->pflags & PN_STOPPING) return; /* already under way */
    if (!arbor_node_canceled(c)) { /* a poststop child: bounded (L3) */
      arbor__lc_bound(e, child);
      return;
    }
    pn = child;
  }
}

void arbor_engine_cancel(arbor_engine *e, pnode *pn) {
  arbor__tr_cancel(e, pn);
  arbor__pr_stop_advance(e, pn);
  if (pn->n.live == 0) arbor__pr_after_exit(e, pn);
}

void arbor_engine_hold(arbor_engine *e, pnode *pn) {
  pn->n.flags |= ARBOR_F_HELD;
  if (pn->n.flags & ARBOR_F_PENDING) {
    /* a delayed restart: it will not happen */
    arbor_timers_disarm(&e->timers, &pn->wake);
    pn->n.flags &= (uint8_t)~ARBOR_F_PENDING;
    arbor__tr_set_state(e, pn, ARBOR_CANCELED, e->r_held);
  }
  arbor_engine_cancel(e, pn);
  arbor__tr_held(e, pn);
}

void arbor_engine_stop(arbor_engine *e) {
  e->stop_requested = 1;
  arbor_engine_hold(e, (pnode *)e->tree.root);
}

int arbor_engine_restart(arbor_engine *e, pnode *pn, const char **err) {
  arbor_node *n = &pn->n;
  if (n->parent && arbor_node_canceled(n->parent)) {
    *err = "its parent is being stopped";
    return -1;
  }
  if (!n->parent && e->stop_requested && n->live > 0) {
    *err = "the tree is being stopped";
    return -1;
  }
  if (arbor_lc_blocked(pn)) {
    *err = "it waits behind a closed lifecycle gate (L7)";
    return -1;
  }
  n->flags &= (uint8_t)~ARBOR_F_HELD;
  if (!n->parent) e->stop_requested = 0, e->gave_up = 0;
  if (n->flags & ARBOR_F_PENDING) {
    arbor_engine_start(e, pn);
    return 0;
  }
  if (n->live > 0 || n->state == ARBOR_DONE || n->state == ARBOR_NEW ||
      n->state == ARBOR_HEALTHY) {
    arbor_engine_cancel(e, pn); /* restarts once its subtree exited */
    return 0;
  }
  /* exited and held (given up, or stopped by hand): restart now */
  arbor_gc_reset(n);
  arbor_engine_start(e, pn);
  return 0;
}

int arbor_engine_fail(arbor_engine *e, pnode *pn) {
  lua_State *L = e->L;
  if (!arbor_node_running(&pn->n)) {
    lua_pop(L, 1);
    return -1;
  }
  luaL_unref(L, LUA_REGISTRYINDEX, pn->fail_ref);
  pn->fail_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  pn->resume = RESUME_FAIL;
  arbor_timers_disarm(&e->timers, &pn->wake);
  pn->wait = WAIT_NONE;
  arbor__pr_enqueue(e, pn);
  return 0;
}

/* ---- nodes ---------------------------------------------------------- */

const char *arbor_engine_signal(arbor_engine *e, pnode *pn, const char *what) {
  arbor_node *n = &pn->n;
  if (strcmp(what, "healthy") == 0) {
    if (n->state != ARBOR_NEW) return "healthy";
    pn->consecutive = 0;
    pn->healthy_at = arbor__step_time(e);
    arbor__tr_set_state(e, pn, ARBOR_HEALTHY, NULL);
    arbor__strategy_release(e, pn); /* an ordered successor may start */
    return NULL;
  }
  if (strcmp(what, "done") == 0) {
    if (n->state != ARBOR_HEALTHY) return "done";
    pn->consecutive = 0;
    pn->done = 1;
    arbor__tr_set_state(e, pn, ARBOR_DONE, NULL);
    return NULL;
  }
  return "unknown";
}

void arbor_engine_park(arbor_engine *e, pnode *pn, int wait, double seconds) {
  pn->wait = (uint8_t)wait;
  pn->wait_seq++;
  if (wait == WAIT_SLEEP)
    arbor__clock_arm(e, &pn->wake, TIMER_WAKE, arbor__step_time(e) + seconds);
}

int arbor_engine_unpark(arbor_engine *e, pnode *pn, uint32_t seq, lua_State *L,
                        int nvals) {
  if (!arbor_node_running(&pn->n) || pn->wait != WAIT_PARK ||
      pn->wait_seq != seq || pn->resume != RESUME_VALUES)
    return 0;
  lua_xmove(L, pn->co, nvals);
  pn->nargs = (uint8_t)nvals;
  pn->wait = WAIT_NONE;
  arbor__pr_enqueue(e, pn);
  return 1;
}

int arbor_engine_wake(arbor_engine *e, pnode *pn, uint32_t seq) {
  if (!arbor_node_running(&pn->n) || pn->wait == WAIT_NONE ||
      pn->wait_seq != seq)
    return 0;
  arbor_timers_disarm(&e->timers, &pn->wake);
  pn->wait = WAIT_NONE;
  arbor__pr_enqueue(e, pn);
  return 1;
}

static void resume_node(arbor_engine *e, pnode *pn) {
  lua_State *co = pn->co;
  if (!(pn->pflags & PN_RESUMED) && pn->resume != RESUME_VALUES) {
    /* canceled or failed before it ever ran */
    if (pn->resume == RESUME_CANCEL) {
      arbor__pr_node_exit(e, pn, ARBOR_CANCELED, NULL, NULL);
    } else {
      lua_rawgeti(e->L, LUA_REGISTRYINDEX, pn->fail_ref);
      lua_xmove(e->L, co, 1);
      arbor__pr_node_exit(e, pn, ARBOR_DEAD, arbor__failure_message(e, co, pn),
                arbor_str_lit("(failed before it ran)"));
    }
    return;
  }
  pn->pflags |= PN_RESUMED;
  int nargs = pn->nargs, nres = 0;
  pn->nargs = 0;
  pnode *prev = e->current;
  e->current = pn;
  e->resumes++;
  arbor_watchdog_enter(co, e->runaway);
  int status = lua_resume(co, e->L, nargs, &nres);
  int runaway = arbor_watchdog_leave(co);
  e->current = prev;
  if (!(pn->pflags & PN_STEPPED)) arbor__tr_stepped(e, pn);
  if (runaway && status == LUA_YIELD) { /* the watchdog's hook yielded */
    lua_pop(co, nres);
    arbor_watchdog_push_error(co);
  } else if (status == LUA_YIELD) {
    lua_pop(co, nres);
    if (pn->wait == WAIT_NONE) arbor__pr_enqueue(e, pn); /* a plain coroutine.yield() */
    return;
  }
  if (status == LUA_OK) {
    lua_pop(co, nres);
    if (pn->done)
      arbor__pr_node_exit(e, pn, ARBOR_DONE, NULL, NULL);
    else if (pn->pflags & PN_NOTIFIED)
      arbor__pr_node_exit(e, pn, ARBOR_CANCELED, NULL, NULL);
    else {
      pn->pflags |= PN_RETURNED;
      arbor__pr_node_exit(e, pn, ARBOR_DEAD,
                arbor_str_fmt("runnable returned without signaling done "
                              "(state %s)",
                              arbor_state_name((arbor_state)pn->n.state)),
                NULL);
    }
    return;
  }
  if ((pn->pflags & PN_NOTIFIED) && arbor_is_canceled(co, -1)) {
    arbor__pr_node_exit(e, pn, ARBOR_CANCELED, NULL, NULL);
    return;
  }
  /* the coroutine died (or was stopped): its traceback is read before
     node_exit resets it */
  arbor_str *msg = arbor__failure_message(e, co, pn);
  if (runaway && status != LUA_YIELD) pn->pflags |= PN_NOPOOL;
  arbor__pr_node_exit(e, pn, ARBOR_DEAD, msg, arbor__failure_traceback(co, pn));
}

/* The single drain point: resumes the incarnations that were ready when it
   began (one batch, at least DRAIN_MIN resumes when more work keeps coming),
   so timers and I/O get their turn between batches even in a restart
   storm. */
#define DRAIN_MIN 256

void arbor__pr_drain(arbor_engine *e) {
  if (e->draining) return;
  e->draining = 1;
  if (e->ready_head && e->runaway > 0) arbor_watchdog_busy();
  arbor_engine *prev = arbor__current;
  arbor__current = e;
  size_t batch = e->ready_len > DRAIN_MIN ? e->ready_len : DRAIN_MIN;
  arbor__lc_run(e);
  while (batch > 0 && e->ready_head) {
    pnode *pn = e->ready_head;
    e->ready_head = pn->ready_next;
    if (!e->ready_head) e->ready_tail = NULL;
    e->ready_len--;
    pn->ready_next = NULL;
    int wanted = (pn->pflags & PN_QUEUED) != 0;
    pn->pflags &= (uint16_t)~(PN_QUEUED | PN_INLIST);
    if (!wanted) continue;
    batch--;
    arbor__step_begin(e);
    resume_node(e, pn);
    arbor__lc_run(e);
    arbor__deliver_events(e);
  }
  arbor__current = prev;
  e->draining = 0;
  arbor__deliver_events(e);
}

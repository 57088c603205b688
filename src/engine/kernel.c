/* kernel.c: a node's life as the engine drives it.
 *
 * Starting an incarnation, ending one (T5) and spreading its death (T6),
 * acting on the restart decision (T8, P2), the ordered stop (T7, T12) with
 * its poststop rules (L3), and the lifecycle coordinators' answers (start,
 * start bounded, retire). These call each other by nature: an exit decides
 * a restart that starts, or escalates and fails the parent, whose exit
 * decides again; a start releases the next member of its group; a stop
 * that ends a subtree lets the GC decide; a stop runs poststop children
 * first, and a retire cancels. So they live in one file, and everything
 * they use is below them: the funnel (transition.c), the ready queue
 * (ready.c), the policy call (decide.c), the group rules (strategy.c) and
 * the pure cores (the coordinator is asked, and answers with actions).
 * Nothing below calls back up.
 */
#include "engine/internal.h"
#include "engine/clock.h"
#include "engine/deadline.h"
#include "engine/ready.h"
#include "core/mem.h"

#include <lauxlib.h>
#include <stdlib.h>

#include "core/gc.h"
#include "engine/ctx.h"
#include "engine/lifecycle.h"

/* ---- starting incarnations ------------------------------------------ */

const char arbor_standin_key = 0;

/* pn is about to start: 1 when its gate is closed, so it waits (blocked)
   instead, e.g. a restart of a child that was canceled while blocked. */
static int hold_at_gate(arbor_engine *e, pnode *pn) {
  arbor_coord *co = arbor__tr_parent_coord(pn);
  if (!co || arbor_coord_may_start(co, pn_slot(pn))) return 0;
  arbor_node *n = &pn->n;
  arbor_timers_disarm(&e->timers, &pn->wake);
  n->flags |= ARBOR_F_PENDING;
  if (n->incarnation == 0 && n->state != ARBOR_NEW)
    arbor__tr_set_state(e, pn, ARBOR_NEW, e->r_blocked);
  arbor__tr_report(e, pn, ARBOR_CO_WAITING);
  return 1;
}

void arbor_engine_start(arbor_engine *e, pnode *pn) {
  arbor_assert(!arbor_node_running(&pn->n));
  pnode *parent = (pnode *)pn->n.parent;
  if (parent && parent->coord && hold_at_gate(e, pn))
    return; /* L7: gates control starting */
  arbor_state from = (arbor_state)pn->n.state;
  if (arbor__strategy_hold(e, pn)) return; /* waits for its predecessor */
  arbor_timers_disarm(&e->timers, &pn->wake);
  if (pn->n.incarnation > 0) {
    pn->restarts++;
    e->restarts++;
  }
  pn->pflags &=
      PN_INLIST | PN_LC_QUEUED | PN_LC_BUSY | PN_PARALLEL | PN_OVERRIDDEN;
  arbor__tr_started(e, pn, from);
  pn->wait = WAIT_NONE;
  pn->resume = RESUME_VALUES;
  pn->shield = 0;
  pn->done = 0;
  pn->started = arbor__step_time(e);
  pn->healthy_at = -1;
  pn->healthy_wall = 0;
  if (pn->timing) arbor__deadline_started(e, pn); /* ready_timeout */
  lua_State *co = arbor__ready_thread(e, pn);
  if (pn->standin) { /* a finished job restored by a reexec: DONE at once */
    pn->standin = 0;
    lua_rawgetp(co, LUA_REGISTRYINDEX, &arbor_standin_key);
  } else {
    lua_rawgeti(co, LUA_REGISTRYINDEX, pn->fn_ref);
  }
  arbor_push_ctx(co, pn);
  pn->nargs = 1;
  arbor__ready_enqueue(e, pn);
  arbor__kernel_release(e, pn);
}

void arbor__kernel_release(arbor_engine *e, pnode *pn) {
  if (!(pn->gflags & GF_MEMBER)) return; /* not in a group */
  pnode *next = arbor__strategy_released(e, pn);
  if (next) arbor_engine_start(e, next);
}

/* ---- exits ---------------------------------------------------------- */

static void after_exit(arbor_engine *e, pnode *pn);
static void stop_advance(arbor_engine *e, pnode *pn);
static int poststop_first(arbor_engine *e, pnode *pn);

static void reload_abort_below(arbor_engine *e, pnode *pn);

/* Cancels pn's context (T7) and starts its ordered stop (T12). A reload
   under way in pn's subtree is given up: the children it kept running
   stop too. */
static void cancel(arbor_engine *e, pnode *pn) {
  if (e->reloads > 0) reload_abort_below(e, pn);
  arbor__tr_cancel(e, pn);
  stop_advance(e, pn);
}

/* T6: a node that died has its own context canceled (its subtree stops,
   children first) and so have the other members of its group. */
static void spread_death(arbor_engine *e, pnode *pn) {
  cancel(e, pn);
  /* First cancel every member; members that had already exited are then
     decided one by one. A decision can restructure the tree (an escalation
     restarts the group's parent, discarding the group), so they are
     collected first, referenced, and skipped once discarded. */
  size_t exited = 0;
  for (arbor_node *g = pn->n.gnext; g != &pn->n; g = g->gnext) {
    if (!arbor__strategy_spreads(e, pn, (pnode *)g)) continue;
    if (arbor__decide_temporary(e, (pnode *)g))
      g->flags |= ARBOR_F_HELD; /* OTP's temporary child: not restarted */
    cancel(e, (pnode *)g);
    if (g->live == 0) exited++;
  }
  if (exited == 0) return;
  arbor_node **todo = arbor_xalloc(exited * sizeof *todo);
  size_t k = 0;
  for (arbor_node *g = pn->n.gnext; g != &pn->n && k < exited; g = g->gnext)
    if (g->live == 0 && arbor__strategy_spreads(e, pn, (pnode *)g)) {
      arbor_node_ref(g);
      todo[k++] = g;
    }
  for (size_t i = 0; i < k; i++) {
    if (!(todo[i]->flags & ARBOR_F_DETACHED)) after_exit(e, (pnode *)todo[i]);
    arbor_node_unref(todo[i]);
  }
  free(todo);
}

static pnode_hist *hist(pnode *pn) {
  if (!pn->failures) {
    pn->failures = calloc(1, sizeof *pn->failures);
    if (!pn->failures) return NULL;
    pn->failures->memory_ref = LUA_NOREF;
  }
  return pn->failures;
}

static void record_failure(arbor_engine *e, pnode *pn) {
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

void arbor__kernel_exit(arbor_engine *e, pnode *pn, arbor_state s,
                        arbor_str *reason, arbor_str *trace) {
  s = arbor__strategy_auto_exit(pn, s);
  if (pn->claiming) arbor__kernel_claims_end(e, pn); /* never stepped */
  int declared = (pn->n.flags & ARBOR_F_DECLARED) != 0;
  int failed = s == ARBOR_DEAD && !declared;
  arbor__ready_dequeue(pn);
  arbor__ready_close_coroutine(e, pn);
  if (pn->pflags & PN_DEFER) arbor__defer_run(e, pn);
  if (pn->pflags & PN_PROCS) { /* set only once proc/ registered */
    pn->pflags &= (uint16_t)~PN_PROCS;
    arbor_engine_get_procs()->incarnation_end(pn, s);
  }
  arbor_timers_disarm(&e->timers, &pn->wake);
  if (pn->stop) arbor_timers_disarm(&e->timers, &pn->stop->deadline);
  arbor__deadline_clear(e, pn);
  pn->wait = WAIT_NONE;
  pn->exited = arbor__step_time(e);
  pn->exited_wall = arbor__wall(e);
  /* up for min_uptime: its streak starts again (a declared node was
     counted when it was declared) */
  if (!declared && arbor__deadline_was_up(pn, pn->exited)) pn->consecutive = 0;
  if (failed) {
    record_failure(e, pn);
    arbor_str_set(&pn->error, reason);
    arbor_str_set(&pn->trace, trace);
  } else if (s == ARBOR_CANCELED && reason && !declared) {
    arbor_str_set(&pn->error, reason);
  }
  arbor_str_unref(trace);
  arbor__tr_exited(e, pn, s, reason);
  arbor_str_unref(reason);
  if (s == ARBOR_DEAD && !declared) spread_death(e, pn);
  if (s == ARBOR_DONE || (s == ARBOR_DEAD && (pn->gflags & GF_SIGNIFICANT))) {
    pnode *p = arbor__strategy_shutdown(e, pn, s); /* significant: OTP's */
    if (p) arbor_engine_cancel(e, p);             /* auto_shutdown */
  }
  arbor__kernel_release(e, pn); /* exited for good: the next may start */
  after_exit(e, pn);
}

/* ---- acting on restart decisions (T8, P2) --------------------------- */

/* Declares pn DEAD from outside (escalation, P2): it is failed as if its
   incarnation had died, and its own policy decides once its subtree has
   exited. */
static void declare_dead(arbor_engine *e, pnode *pn, arbor_str *why) {
  if (pn->n.state == ARBOR_DEAD) return; /* already failing */
  if (arbor_node_running(&pn->n)) {
    pn->exited = arbor__step_time(e);
    pn->exited_wall = arbor__wall(e);
    arbor__deadline_clear(e, pn);
  }
  if (arbor__deadline_was_up(pn, pn->exited)) pn->consecutive = 0;
  record_failure(e, pn);
  arbor_str_set(&pn->error, why);
  arbor_str_set(&pn->trace, NULL);
  pn->n.flags |= ARBOR_F_DECLARED;
  arbor__tr_set_state(e, pn, ARBOR_DEAD, why);
  spread_death(e, pn);
  if (pn->n.live == 0) after_exit(e, pn);
}

void arbor__kernel_fail(arbor_engine *e, pnode *pn, arbor_str *why) {
  declare_dead(e, pn, why);
}

/* pn's subtree has exited and it wants a restart (T8): its policy decides
   (a DEAD node's) and the decision is carried out. */
static void decide(arbor_engine *e, pnode *pn) {
  if (e->closing) return;
  double delay = 0;
  int d = pn->n.state == ARBOR_DEAD ? arbor__decide(e, pn, &delay)
                                    : DECISION_RESTART;
  if (d == DECISION_RESTART) {
    arbor_gc_reset(&pn->n);
    if (delay <= 0)
      arbor_engine_start(e, pn);
    else
      arbor__clock_arm(e, &pn->wake, TIMER_RESTART,
                       arbor__step_time(e) + delay);
    return;
  }
  pn->n.flags |= ARBOR_F_HELD;
  arbor__tr_held(e, pn);
  arbor__kernel_release(e, pn); /* given up: no longer holds the next */
  pnode *parent = (pnode *)pn->n.parent;
  if (!parent) {
    e->gave_up = 1;
    arbor_str_unref(e->gave_up_reason);
    e->gave_up_reason = arbor_str_fmt(
        "root gave up (%s): %s", d == DECISION_STOP ? "stop" : "escalate",
        pn->error ? pn->error->s : "");
    return;
  }
  if (d == DECISION_ESCALATE) {
    char *dn = arbor_node_dn_dup(&pn->n);
    arbor_str *why = arbor_str_fmt("child %s escalated: %s", dn ? dn : "?",
                                   pn->error ? pn->error->s : "");
    free(dn);
    declare_dead(e, parent, why);
    arbor_str_unref(why);
  }
}

/* A poststop child that ended while its parent stops: what it left running
   or waiting stops now (L3). */
static void poststop_ended(arbor_engine *e, pnode *pn) {
  arbor_node *n = &pn->n;
  if (n->parent && !(n->flags & (ARBOR_F_DETACHED | ARBOR_F_PENDING)) &&
      !arbor_node_running(n) && !arbor_node_canceled(n) &&
      arbor_node_canceled(n->parent))
    arbor_engine_cancel(e, pn);
}

static void reload_resume(arbor_engine *e, pnode *pn);

/* Walks up from a node whose subtree may just have exited: ordered stops
   waiting on it advance, and the GC decides a restart (a node reloading
   starts its next incarnation instead). O(depth). */
static void after_exit(arbor_engine *e, pnode *pn) {
  arbor_node *a = &pn->n, *removed = NULL;
  if (a->flags & ARBOR_F_DETACHED) return; /* discarded meanwhile */
  if (pn->reloading && !arbor_node_running(a)) { /* its new incarnation */
    reload_resume(e, pn);
    return;
  }
  while (a->parent && a->live == 0) {
    pnode *p = (pnode *)a->parent;
    if (((pnode *)a)->pflags & PN_REMOVE) removed = a;
    if ((p->pflags & PN_STOPPING) && p->stop && p->stop->cursor == (pnode *)a)
      stop_advance(e, p);
    a = a->parent;
  }
  if (removed) { /* node:remove: its subtree exited, it goes */
    pn = (pnode *)removed->parent;
    arbor_tree_discard(removed);
    if (pn->n.live > 0) return;
  }
  arbor_node_ref(a = &pn->n); /* a decision may discard pn */
  arbor_node *cand = arbor_gc_candidate(a);
  if (cand) decide(e, (pnode *)cand);
  if ((pn_lc(pn) & ARBOR_LC_KIND) == ARBOR_LC_POSTSTOP) poststop_ended(e, pn);
  arbor_node_unref(a);
}

/* ---- cancellation and ordered stop (T7, T12, L3) -------------------- */

/* pn's stop record, made at its first stop. */
static pnode_stop *stop_of(pnode *pn) {
  if (!pn->stop) {
    pn->stop = arbor_xcalloc(1, sizeof *pn->stop);
    pn->stop->owner = pn;
  }
  return pn->stop;
}

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
    arbor__ready_enqueue(e, pn);
  } else if (pn->wait != WAIT_NONE && pn->shield == 0) {
    arbor_timers_disarm(&e->timers, &pn->wake);
    pn->wait = WAIT_NONE;
    pn->resume = RESUME_CANCEL;
    arbor__ready_enqueue(e, pn);
  }
}

/* pn stops and none of its children runs: 1 when it has poststop children
   waiting, which were started first (L3), so the caller looks again. */
static int poststop_first(arbor_engine *e, pnode *pn) {
  arbor_coord *co = pn->coord;
  if (!co || e->closing || pn->reloading || (pn->pflags & PN_LC_BUSY) ||
      arbor_coord_poststop_waiting(co) == 0)
    return 0;
  arbor_coord_parent(co, ARBOR_CO_PARENT_STOPPING);
  arbor__kernel_answer(e, pn, 1);
  return 1;
}

/* c runs on while its parent's incarnation ends for a reload. */
static int kept(const arbor_node *c) {
  return ((const pnode *)c)->adopt && ((const pnode *)c->parent)->reloading;
}

/* stop = "parallel": every running child of pn that is not stopping yet
   starts its own stop now. Returns the last started child still running
   (the stop's cursor: when it exits, the stop looks again), or NULL. */
static arbor_node *stop_all(arbor_engine *e, pnode *pn) {
  pn->pflags |= PN_STOPPING;
  arbor_node *left = NULL;
  for (arbor_node *c = pn->n.last; c; c = c->prev) {
    if (c->live == 0 || kept(c)) continue;
    if (!left) left = c;
    pnode *child = (pnode *)c;
    if (child->pflags & (PN_STOPPING | PN_NOTIFIED)) continue; /* under way */
    if (!arbor_node_canceled(c))
      arbor__kernel_bound(e, child); /* a poststop child: bounded (L3) */
    else
      stop_advance(e, child); /* recursion: as deep as parallel parents nest */
  }
  return left;
}

/* Advances the ordered stop of pn: its running children are stopped one at
   a time, last started first (or all at once, stop = "parallel"); when none
   is left, pn itself is notified. Iterative: descends into the child being
   stopped. */
static void stop_advance(arbor_engine *e, pnode *pn) {
  while (pn && arbor_node_canceled(&pn->n)) {
    arbor_node *c;
    if (pn->pflags & PN_PARALLEL) {
      c = stop_all(e, pn);
      if (!c && poststop_first(e, pn)) c = stop_all(e, pn);
      if (c || pn->stop) stop_of(pn)->cursor = (pnode *)c;
      if (c) return;
      pn->pflags &= (uint16_t)~PN_STOPPING;
      notify(e, pn);
      return;
    }
    if (!(pn->pflags & PN_STOPPING)) {
      pn->pflags |= PN_STOPPING;
      c = pn->n.last;
    } else {
      c = pn->stop && pn->stop->cursor ? &pn->stop->cursor->n : NULL;
    }
    while (c && (c->live == 0 || kept(c))) c = c->prev;
    if (!c && poststop_first(e, pn)) { /* L3: poststop runs first */
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
      arbor__kernel_bound(e, child);
      return;
    }
    pn = child;
  }
}

void arbor__kernel_bound(arbor_engine *e, pnode *pn) {
  if (!arbor_node_running(&pn->n)) { /* it ended; its children run on */
    arbor_engine_cancel(e, pn);
    return;
  }
  if (pn->pflags & PN_NOTIFIED) return;
  pnode_stop *st = stop_of(pn);
  if (arbor_timer_armed(&st->deadline)) return;
  arbor__clock_arm(e, &st->deadline, TIMER_BOUND,
                   arbor__step_time(e) + pn->shutdown);
}

void arbor_engine_cancel(arbor_engine *e, pnode *pn) {
  cancel(e, pn);
  if (pn->n.live == 0) after_exit(e, pn);
}

/* ---- performing the coordinators' answers (L3-L8) ------------------- */

/* The coordinator is done with c: it never starts again in this parent
   incarnation (L4). A running child is canceled (children first), a
   waiting one ends CANCELED without running. */
static void retire(arbor_engine *e, pnode *c) {
  arbor_node *n = &c->n;
  n->flags |= ARBOR_F_RETIRED;
  if (n->flags & ARBOR_F_PENDING) {
    n->flags &= (uint8_t)~ARBOR_F_PENDING;
    arbor__tr_set_state(e, c, ARBOR_CANCELED, e->r_retired);
  }
  if (n->live > 0) arbor_engine_cancel(e, c);
}

static void perform(arbor_engine *e, pnode *p, const arbor_co_action *a) {
  pnode *c = a->child;
  switch (a->verb) {
  case ARBOR_CO_MOVED: {
    e->lc_moves++;
    arbor_str *r = arbor_str_lit(a->why);
    arbor__emit(e, p, ARBOR_EV_COORDINATOR, (arbor_state)a->from,
                (arbor_state)a->to, r);
    arbor_str_unref(r);
    return;
  }
  case ARBOR_CO_RETIRE:
    retire(e, c);
    return;
  case ARBOR_CO_START:
  case ARBOR_CO_START_BOUNDED:
    /* one answer's starts are performed in turn: an earlier one may have
       started this child already (its ordered group released it) */
    if ((c->n.flags & (ARBOR_F_PENDING | ARBOR_F_RUNNING | ARBOR_F_CANCEL)) !=
        ARBOR_F_PENDING)
      return;
    arbor_engine_start(e, c);
    if (a->verb == ARBOR_CO_START_BOUNDED) arbor__kernel_bound(e, c);
    return;
  }
}

#define ACTIONS 16

void arbor__kernel_answer(arbor_engine *e, pnode *p, int poststop) {
  if ((p->pflags & PN_LC_BUSY) || (p->n.flags & ARBOR_F_DETACHED) ||
      e->closing)
    return;
  arbor_coord *co = p->coord;
  p->pflags |= PN_LC_BUSY;
  arbor_node_ref(&p->n);
  e->lc_evals++;
  arbor_co_action a[ACTIONS];
  int k;
  do {
    k = poststop ? arbor_coord_poststop(co, a, ACTIONS)
                 : arbor_coord_step(co, a, ACTIONS);
    for (int i = 0; i < k; i++)
      if (a[i].child) arbor_node_ref(a[i].child);
    for (int i = 0; i < k; i++) {
      pnode *c = a[i].child;
      if (p->coord == co && !(c && (c->n.flags & ARBOR_F_DETACHED)))
        perform(e, p, &a[i]);
      if (c) arbor_node_unref(&c->n);
    }
  } while (k == ACTIONS && p->coord == co);
  p->pflags &= (uint16_t)~PN_LC_BUSY;
  arbor_node_unref(&p->n);
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

/* ---- reload (docs/restore.md) --------------------------------------- */

static void reload_event(arbor_engine *e, pnode *pn, arbor_event_kind kind,
                         const char *why) {
  arbor_str *r = arbor_str_lit(why);
  arbor__emit(e, pn, kind, ARBOR_NEW, ARBOR_NEW, r);
  arbor_str_unref(r);
}

void arbor__kernel_reload(arbor_engine *e, pnode *pn) {
  for (arbor_node *c = pn->n.first; c; c = c->next) ((pnode *)c)->adopt = 1;
  pn->reloading = 1;
  e->reloads++;
  reload_event(e, pn, ARBOR_EV_RELOAD,
               "reloaded: a new incarnation adopts its children");
  arbor__tr_cancel(e, pn); /* its children are exempt (transition.c) */
  stop_advance(e, pn);     /* none to stop first: pn is told at once */
}

/* pn's incarnation ended for a reload: the new one starts, its children
   still in place, and adopts them during its first step. */
static void reload_resume(arbor_engine *e, pnode *pn) {
  arbor_node *n = &pn->n;
  pn->reloading = 0;
  pn->claiming = 1; /* still counted in e->reloads until its claims end */
  n->flags &= (uint8_t)~(ARBOR_F_HELD | ARBOR_F_PENDING);
  arbor_engine_start(e, pn);
}

/* A reload under way at pn or below is given up (pn is being canceled):
   the children it kept are canceled like the rest of the subtree. */
static void reload_abort_below(arbor_engine *e, pnode *pn) {
  if (pn->reloading) {
    pn->reloading = 0;
    e->reloads--;
    for (arbor_node *c = pn->n.first; c; c = c->next) {
      if (!((pnode *)c)->adopt) continue;
      ((pnode *)c)->adopt = 0;
      if (c->live > 0) cancel(e, (pnode *)c);
    }
    if (e->reloads == 0) return;
  }
  for (arbor_node *c = pn->n.first; c && e->reloads > 0; c = c->next)
    if (c->live > 0) reload_abort_below(e, (pnode *)c);
}

void arbor__kernel_claims_end(arbor_engine *e, pnode *pn) {
  pn->claiming = 0;
  e->reloads--;
  for (arbor_node *c = pn->n.first, *next; c; c = next) {
    next = c->next;
    pnode *cp = (pnode *)c;
    if (!cp->adopt) continue;
    cp->adopt = 0;
    reload_event(e, cp, ARBOR_EV_RELOAD, "removed: not in the new script");
    arbor_node_ref(c);
    cp->pflags |= PN_REMOVE; /* discarded once its subtree exited */
    arbor_engine_hold(e, cp);
    arbor_node_unref(c);
  }
}

/* lifecycle.c: the lifecycle gates in the engine. See lifecycle.h. */
#include "engine/lifecycle.h"

#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"

/* Why a coordinator winds down (arbor_pcoord.cause). */
enum { WIND_STOPPING = 1, WIND_MAIN_FINISHED, WIND_PRESTART_GAVE_UP };

static const char *const lc_names[] = {"main", "prestart", "poststart",
                                       "poststop"};

const char *arbor_lc_name(unsigned lc) { return lc_names[lc & ARBOR_LC_KIND]; }

static arbor_gate gate_of(const arbor_node *n) {
  return arbor_gate_of(n->lc & ARBOR_LC_KIND, (n->lc & ARBOR_LC_SIDECAR) != 0);
}

static arbor_pcoord *coord_of(const arbor_node *n) {
  return n ? ((const pnode *)n)->coord : NULL;
}

/* What the parent's coordinator sees of n. */
static arbor_phase phase_of(const arbor_node *n) {
  if (arbor_node_running(n))
    return n->state == ARBOR_NEW    ? ARBOR_PH_STARTING
           : n->state == ARBOR_DONE ? ARBOR_PH_SIGNALED
                                    : ARBOR_PH_READY;
  if (n->incarnation == 0)
    return n->state == ARBOR_CANCELED ? ARBOR_PH_FAILED : ARBOR_PH_WAITING;
  if ((n->lc & ARBOR_LC_BLOCKED) && (n->flags & ARBOR_F_PENDING))
    return ARBOR_PH_WAITING; /* a restart held at its closed gate */
  int done = n->state == ARBOR_DONE;
  if (done && !arbor_node_canceled(n)) return ARBOR_PH_DONE;
  /* no restart: retired, held (its policy gave up), or under a canceled
     parent (T8) */
  if ((n->lc & ARBOR_LC_RETIRED) || (n->flags & ARBOR_F_HELD) ||
      arbor_node_canceled(n->parent))
    return done ? ARBOR_PH_DONE : ARBOR_PH_FAILED;
  return ARBOR_PH_RETRYING;
}

/* ---- the queue of coordinators to evaluate -------------------------- */

static void queue(arbor_engine *e, arbor_pcoord *pc) {
  pc->dirty = 1;
  if (pc->queued) return;
  pc->queued = 1;
  pc->next = NULL;
  arbor_node_ref(&pc->owner->n);
  if (e->lc_tail)
    e->lc_tail->next = pc;
  else
    e->lc_head = pc;
  e->lc_tail = pc;
  arbor__need_drain(e);
}

void arbor__lc_clear(arbor_engine *e) {
  while (e->lc_head) {
    arbor_pcoord *pc = e->lc_head;
    e->lc_head = pc->next;
    pc->queued = 0;
    arbor_node_unref(&pc->owner->n);
  }
  e->lc_tail = NULL;
}

/* ---- children ------------------------------------------------------- */

static void step(arbor_engine *e, arbor_pcoord *pc, int stop_ready);

const char *arbor_lc_check_add(pnode *parent, unsigned lc) {
  arbor_pcoord *pc = parent->coord;
  /* under a canceled parent a child is created CANCELED anyway (T8) */
  if (!pc || !pc->c.started || arbor_node_canceled(&parent->n)) return NULL;
  arbor_gate g = arbor_gate_of(lc & ARBOR_LC_KIND, (lc & ARBOR_LC_SIDECAR) != 0);
  if (arbor_gate_can_open((arbor_coord_state)pc->c.state, g)) return NULL;
  return arbor_gate_name(g);
}

void arbor_lc_register(arbor_engine *e, pnode *child) {
  pnode *parent = (pnode *)child->n.parent;
  arbor_pcoord *pc = parent->coord;
  if (!pc) {
    pc = calloc(1, sizeof *pc);
    if (!pc) abort(); /* out of memory */
    pc->owner = parent;
    pc->c.started = (parent->pflags & PN_STEPPED) != 0;
    parent->coord = pc;
  }
  child->n.phase = (uint8_t)phase_of(&child->n);
  arbor_coord_add(&pc->c, gate_of(&child->n), (arbor_phase)child->n.phase);
  pc->added = 1;
  if (pc->c.state == ARBOR_CO_INIT && pc->c.started)
    step(e, pc, 0); /* the first child after the first step: leave init */
  else if (pc->c.winding)
    queue(e, pc);
}

int arbor_lc_admit(arbor_engine *e, pnode *child) {
  arbor_pcoord *pc = ((pnode *)child->n.parent)->coord;
  (void)e;
  if (pc->c.started && !pc->c.winding &&
      arbor_gate_open((arbor_coord_state)pc->c.state, gate_of(&child->n)))
    return 1;
  child->n.lc |= ARBOR_LC_BLOCKED;
  return 0;
}

const char *arbor_lc_state(const pnode *pn) {
  return pn->coord ? arbor_coord_state_name((arbor_coord_state)pn->coord->c.state)
                   : NULL;
}

int arbor_lc_gated(const pnode *pn) {
  const arbor_pcoord *pc = pn->coord;
  if (!pc) return 0;
  for (int g = 0; g < ARBOR_GATES; g++)
    if (g != ARBOR_GATE_MAIN && pc->c.total[g] > 0) return 1;
  return 0;
}

int arbor_lc_blocked(const pnode *pn) {
  const arbor_node *n = &pn->n;
  return (n->lc & ARBOR_LC_BLOCKED) && (n->flags & ARBOR_F_PENDING) &&
         !arbor_node_running(n);
}

int arbor__lc_hold_at_gate(arbor_engine *e, pnode *pn) {
  arbor_node *n = &pn->n;
  arbor_pcoord *pc = coord_of(n->parent);
  if (!pc || (pc->c.started &&
              arbor_gate_open((arbor_coord_state)pc->c.state, gate_of(n)))) {
    /* past its gate: whatever else holds it (an ordered group's
       predecessor) is not the gate */
    if (n->lc & ARBOR_LC_BLOCKED) {
      n->lc &= (uint8_t)~ARBOR_LC_BLOCKED;
      arbor__lc_touch(e, pn);
    }
    return 0;
  }
  arbor_timers_disarm(&e->timers, &pn->wake);
  n->flags |= ARBOR_F_PENDING;
  n->lc |= ARBOR_LC_BLOCKED;
  if (n->incarnation == 0 && n->state != ARBOR_NEW) {
    arbor__set_reason(e, arbor_str_lit("blocked at its lifecycle gate"));
    arbor_tree_set_state(n, ARBOR_NEW);
    arbor__set_reason(e, NULL);
  }
  arbor__lc_touch(e, pn);
  return 1;
}

void arbor__lc_touch(arbor_engine *e, pnode *pn) {
  arbor_node *n = &pn->n;
  arbor_pcoord *pc = coord_of(n->parent);
  if (!pc || (n->flags & ARBOR_F_DETACHED)) return;
  arbor_phase now = phase_of(n);
  if (now == (arbor_phase)n->phase) return;
  arbor_gate g = gate_of(n);
  arbor_coord_move(&pc->c, g, (arbor_phase)n->phase, now);
  n->phase = (uint8_t)now;
  e->lc_changes++;
  /* L5: a finished prestart or poststart job does not run again (done
     counts, even when it fails after signaling it) */
  if ((now == ARBOR_PH_DONE || now == ARBOR_PH_SIGNALED) &&
      (g == ARBOR_GATE_PRESTART || g == ARBOR_GATE_POSTSTART))
    n->lc |= ARBOR_LC_RETIRED;
  queue(e, pc);
}

void arbor__lc_exited(arbor_engine *e, pnode *pn) {
  arbor_node *n = &pn->n;
  arbor__lc_touch(e, pn);
  /* a poststop child that ended while its parent stops: what it left
     running (or waiting to start) stops now */
  if ((n->lc & ARBOR_LC_KIND) == ARBOR_LC_POSTSTOP && n->parent &&
      !(n->flags & (ARBOR_F_DETACHED | ARBOR_F_PENDING)) &&
      !arbor_node_running(n) && !arbor_node_canceled(n) &&
      arbor_node_canceled(n->parent))
    arbor_engine_cancel(e, pn);
}

void arbor__lc_started(arbor_engine *e, pnode *pn) {
  pn->n.lc &= (uint8_t)~ARBOR_LC_BLOCKED;
  arbor_pcoord *pc = pn->coord;
  if (pc && pc->c.state != ARBOR_CO_INIT) {
    arbor_str *r = arbor_str_lit("parent restarted: from init again");
    arbor__emit(e, pn, ARBOR_EV_COORDINATOR, (arbor_state)pc->c.state,
                (arbor_state)ARBOR_CO_INIT, r);
    arbor_str_unref(r);
  }
  if (pc) {
    arbor_coord_init(&pc->c); /* its children were discarded */
    pc->wound = pc->added = pc->recount = pc->cause = 0;
  }
  arbor__lc_touch(e, pn);
}

void arbor__lc_stepped(arbor_engine *e, pnode *pn) {
  pn->pflags |= PN_STEPPED;
  if (pn->coord) queue(e, pn->coord);
}

/* The children's phases are recomputed at the next evaluation. That comes
   with the children's own changes as they stop; only a parent whose
   children all exited already is evaluated for its cancellation alone. */
void arbor__lc_canceled(arbor_engine *e, pnode *pn) {
  arbor_pcoord *pc = pn->coord;
  if (!pc) return;
  pc->recount = pc->dirty = 1;
  if (arbor_coord_others_finished(&pc->c)) queue(e, pc);
}

void arbor__lc_detached(pnode *pn) {
  arbor_pcoord *pc = coord_of(pn->n.parent);
  if (pc) arbor_coord_remove(&pc->c, gate_of(&pn->n), (arbor_phase)pn->n.phase);
}

void arbor__lc_free(pnode *pn) {
  free(pn->coord);
  pn->coord = NULL;
}

/* ---- acting on the coordinator -------------------------------------- */

/* The coordinator is done with c: it never starts again in this parent
   incarnation (L4). A running child is canceled (children first), a
   waiting one ends CANCELED without running. */
static void retire(arbor_engine *e, pnode *c) {
  arbor_node *n = &c->n;
  n->lc = (uint8_t)((n->lc | ARBOR_LC_RETIRED) & ~ARBOR_LC_BLOCKED);
  if (n->flags & ARBOR_F_PENDING) {
    arbor_timers_disarm(&e->timers, &c->wake);
    n->flags &= (uint8_t)~ARBOR_F_PENDING;
    arbor__set_reason(e, arbor_str_lit("retired by the coordinator (L4)"));
    arbor_tree_set_state(n, ARBOR_CANCELED);
    arbor__set_reason(e, NULL);
  }
  if (n->live > 0) arbor_engine_cancel(e, c);
  arbor__lc_touch(e, c);
}

/* Winding down (L4, L8): sidecars are canceled, children whose gate is
   closed now never start. A stopping parent needs none of this: its
   cancellation reached them all. */
static void wind_down(arbor_engine *e, arbor_pcoord *pc) {
  arbor_coord_state s = (arbor_coord_state)pc->c.state;
  pnode *p = pc->owner;
  arbor_node_ref(&p->n);
  for (arbor_node *n = p->n.first, *next; n; n = next) {
    next = n->next;
    arbor_node_ref(n);
    arbor_gate g = gate_of(n);
    arbor_phase ph = (arbor_phase)n->phase;
    int over = ph == ARBOR_PH_DONE || ph == ARBOR_PH_FAILED ||
               (n->lc & ARBOR_LC_RETIRED);
    if (!over && g != ARBOR_GATE_POSTSTOP &&
        (arbor_gate_is_sidecar(g) ||
         (ph == ARBOR_PH_WAITING && !arbor_gate_open(s, g))))
      retire(e, (pnode *)n);
    if (n->flags & ARBOR_F_DETACHED) next = NULL; /* restructured */
    arbor_node_unref(n);
  }
  arbor_node_unref(&p->n);
}

/* Starts the children waiting behind gates open in the current state, in
   creation order. Under a stopping parent, poststop children start only
   once no other child's subtree runs (stop_ready: T12, children first). */
static void open_gates(arbor_engine *e, arbor_pcoord *pc, int stop_ready) {
  unsigned open = arbor_gate_vector((arbor_coord_state)pc->c.state);
  if (pc->c.stopping && !stop_ready) open &= ~(1u << ARBOR_GATE_POSTSTOP);
  int any = 0;
  for (int g = 0; g < ARBOR_GATES; g++)
    if (((open >> g) & 1u) && pc->c.count[g][ARBOR_PH_WAITING] > 0) any = 1;
  if (!any) return;
  pnode *p = pc->owner;
  int stopping = arbor_node_canceled(&p->n);
  for (arbor_node *n = p->n.first; n; n = n->next) {
    if (!arbor_lc_blocked((pnode *)n) || !((open >> gate_of(n)) & 1u) ||
        arbor_node_canceled(n))
      continue;
    arbor_engine_start(e, (pnode *)n);
    if (stopping) arbor__lc_bound(e, (pnode *)n);
  }
}

static const char *move_reason(const arbor_pcoord *pc, arbor_coord_state to) {
  switch (to) {
  case ARBOR_CO_PRESTART: return "the parent's first step ended";
  case ARBOR_CO_MAIN: return "prestart jobs done, prestart sidecars healthy (L1)";
  case ARBOR_CO_POSTSTART: return "every main child healthy or exited (L2)";
  case ARBOR_CO_RUNNING: return "poststart jobs finished";
  case ARBOR_CO_POSTSTOP:
    if (pc->cause == WIND_PRESTART_GAVE_UP)
      return "a prestart child gave up: main will not start (L8)";
    if (pc->cause == WIND_MAIN_FINISHED)
      return "every main child finished; the others exited (L4)";
    return "the parent is stopping; the others exited (L3)";
  default: return "";
  }
}

/* Recomputes every child's phase (the parent was canceled: exited children
   will not restart). O(children), once per cancellation. */
static void recount(arbor_pcoord *pc) {
  uint8_t keep[] = {pc->c.state, pc->c.started, pc->c.stopping, pc->c.winding};
  arbor_coord_init(&pc->c);
  pc->c.state = keep[0], pc->c.started = keep[1];
  pc->c.stopping = keep[2], pc->c.winding = keep[3];
  for (arbor_node *n = pc->owner->n.first; n; n = n->next) {
    n->phase = (uint8_t)phase_of(n);
    arbor_coord_add(&pc->c, gate_of(n), (arbor_phase)n->phase);
  }
  pc->recount = 0;
}

/* One evaluation of pc: step the machine until it stops, one event per
   transition, then act on it. */
static void step(arbor_engine *e, arbor_pcoord *pc, int stop_ready) {
  pnode *p = pc->owner;
  if (pc->busy || (p->n.flags & ARBOR_F_DETACHED) || e->closing) return;
  pc->busy = 1;
  pc->dirty = 0;
  if (pc->recount) recount(pc);
  arbor_coord *c = &pc->c;
  c->stopping = arbor_node_canceled(&p->n);
  c->started = (p->pflags & PN_STEPPED) != 0 || c->started;
  e->lc_evals++;
  for (;;) {
    if (!c->winding && arbor_coord_wind_wanted(c)) {
      c->winding = 1;
      pc->cause = c->stopping ? WIND_STOPPING
                  : c->state <= ARBOR_CO_PRESTART ? WIND_PRESTART_GAVE_UP
                                                  : WIND_MAIN_FINISHED;
    }
    arbor_coord_state from = (arbor_coord_state)c->state;
    arbor_coord_state to = arbor_coord_next(c);
    if (to == from) break;
    c->state = (uint8_t)to;
    e->lc_moves++;
    const char *why = move_reason(pc, to);
    arbor_str *r = arbor_str_new(why, strlen(why));
    arbor__emit(e, p, ARBOR_EV_COORDINATOR, (arbor_state)from, (arbor_state)to,
                r);
    arbor_str_unref(r);
  }
  if (c->winding && !c->stopping && (!pc->wound || pc->added)) {
    pc->wound = 1;
    pc->added = 0;
    wind_down(e, pc);
  }
  open_gates(e, pc, stop_ready);
  pc->busy = 0;
}

void arbor__lc_run(arbor_engine *e) {
  while (e->lc_head) {
    arbor_pcoord *pc = e->lc_head;
    e->lc_head = pc->next;
    if (!e->lc_head) e->lc_tail = NULL;
    pc->queued = 0;
    pnode *p = pc->owner;
    if (pc->dirty) step(e, pc, 0); /* not when evaluated meanwhile */
    arbor_node_unref(&p->n); /* may free p and pc */
  }
}

int arbor__lc_poststop_first(arbor_engine *e, pnode *pn) {
  arbor_pcoord *pc = pn->coord;
  if (!pc || e->closing || pc->busy ||
      pc->c.count[ARBOR_GATE_POSTSTOP][ARBOR_PH_WAITING] == 0)
    return 0;
  /* the others' phases may be stale (a parent declared DEAD is canceled
     without the cancellation hook): this runs once per stop */
  pc->recount = 1;
  step(e, pc, 1);
  return 1;
}

void arbor__lc_bound(arbor_engine *e, pnode *pn) {
  if (!arbor_node_running(&pn->n)) { /* it ended; its children run on */
    arbor_engine_cancel(e, pn);
    return;
  }
  if (pn->pflags & PN_NOTIFIED) return;
  pnode_stop *st = arbor__stop_of(pn);
  if (arbor_timer_armed(&st->deadline)) return;
  arbor__arm(e, &st->deadline, TIMER_BOUND,
             arbor__step_time(e) + pn->shutdown);
}

/* The bound passed: the poststop child is canceled like any node (its
   children first, then it is told, and its own shutdown deadline runs). */
void arbor__lc_bound_fired(arbor_engine *e, pnode *pn) {
  arbor_str *why = arbor_str_fmt("poststop ran past its shutdown time "
                                 "(%.6gs) while its parent stops: canceled "
                                 "(L3)",
                                 pn->shutdown);
  arbor_engine_log(e, pn, why);
  arbor_str_unref(why);
  arbor_engine_cancel(e, pn);
}

/* lifecycle.c: the lifecycle gates in the engine. See lifecycle.h. */
#include "engine/lifecycle.h"

#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "core/mem.h"

static const char *const lc_names[] = {"main", "prestart", "poststart",
                                       "poststop"};

const char *arbor_lc_name(unsigned lc) { return lc_names[lc & ARBOR_LC_KIND]; }

static arbor_gate gate_of(const pnode *pn) {
  return arbor_gate_of(pn_lc(pn) & ARBOR_LC_KIND, (pn_lc(pn) & ARBOR_LC_SIDECAR) != 0);
}

void arbor__lc_clear(arbor_engine *e) {
  for (size_t i = 0; i < e->lc_len; i++) {
    e->lc_queue[i]->pflags &= (uint16_t)~PN_LC_QUEUED;
    arbor_node_unref(&e->lc_queue[i]->n);
  }
  e->lc_len = 0;
  free(e->lc_queue);
  e->lc_queue = NULL;
  e->lc_cap = 0;
}

/* ---- performing the answers ----------------------------------------- */

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
    if (a->verb == ARBOR_CO_START_BOUNDED) arbor__lc_bound(e, c);
    return;
  }
}

#define ACTIONS 16

/* Asks p's coordinator what to do and does it, until it has nothing more
   to say. Performing may end p's incarnation (a retired child was the last
   to exit and p restarts): its coordinator is then gone. */
static void answer(arbor_engine *e, pnode *p, int poststop) {
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

/* A parent without a coordinator ended its first step: the children it
   added meanwhile start now, in creation order (L0: children start once
   the parent's first step ended). */
static void start_waiting(arbor_engine *e, pnode *p) {
  for (arbor_node *n = p->n.first; n; n = n->next)
    if ((n->flags & (ARBOR_F_PENDING | ARBOR_F_CANCEL | ARBOR_F_RUNNING)) ==
            ARBOR_F_PENDING &&
        n->incarnation == 0)
      arbor_engine_start(e, (pnode *)n);
}

void arbor__lc_run(arbor_engine *e) {
  /* in order; what answering queues is answered in this pass */
  for (size_t i = 0; i < e->lc_len; i++) {
    pnode *p = e->lc_queue[i];
    p->pflags &= (uint16_t)~PN_LC_QUEUED;
    if (!p->coord)
      start_waiting(e, p);
    else if (arbor_coord_dirty(p->coord)) /* not when answered meanwhile */
      answer(e, p, 0);
    arbor_node_unref(&p->n); /* may free p */
  }
  e->lc_len = 0;
}

/* ---- children ------------------------------------------------------- */

/* A plain child's place in a coordinator made after it: its phase now. */
static arbor_phase phase_now(const arbor_node *n) {
  if (arbor_node_running(n))
    return n->state == ARBOR_NEW    ? ARBOR_PH_STARTING
           : n->state == ARBOR_DONE ? ARBOR_PH_SIGNALED
                                    : ARBOR_PH_READY;
  if (n->incarnation == 0)
    return n->state == ARBOR_CANCELED ? ARBOR_PH_FAILED : ARBOR_PH_WAITING;
  int done = n->state == ARBOR_DONE;
  if (done && !arbor_node_canceled(n)) return ARBOR_PH_DONE;
  if ((n->flags & (ARBOR_F_RETIRED | ARBOR_F_HELD)) ||
      arbor_node_canceled(n->parent))
    return done ? ARBOR_PH_DONE : ARBOR_PH_FAILED;
  return ARBOR_PH_RETRYING;
}

/* parent's coordinator, made at its first child that needs one: the plain
   children it has already (but `fresh`, being added) are counted as they
   are. */
static arbor_coord *coord_for(pnode *parent, const pnode *fresh) {
  if (parent->coord) return parent->coord;
  arbor_coord *co = arbor_coord_new(0);
  if (!co) arbor_oom();
  parent->coord = co;
  if (arbor_node_canceled(&parent->n))
    arbor_coord_parent(co, ARBOR_CO_PARENT_STOPPING);
  for (arbor_node *n = parent->n.first; n; n = n->next)
    if ((const pnode *)n != fresh &&
        arbor_coord_add(co, n, ARBOR_GATE_MAIN, phase_now(n),
                        &n->slot) < 0)
      arbor_oom();
  /* counted as they are, the machine may leave init at the next add */
  if (parent->pflags & PN_STEPPED)
    arbor_coord_parent(co, ARBOR_CO_PARENT_STEPPED);
  return co;
}

const char *arbor_lc_check_add(arbor_engine *e, pnode *parent, unsigned lc) {
  /* under a canceled parent a child is created CANCELED anyway (T8) */
  if ((!parent->coord && lc == ARBOR_LC_MAIN) || arbor_node_canceled(&parent->n))
    return NULL;
  arbor_coord *co = coord_for(parent, NULL);
  arbor_gate g = arbor_gate_of(lc & ARBOR_LC_KIND, (lc & ARBOR_LC_SIDECAR) != 0);
  int ok = arbor_coord_may_add(co, g);
  if (arbor_coord_dirty(co)) arbor__tr_queue(e, parent);
  return ok ? NULL : arbor_gate_name(g);
}

void arbor_lc_register(arbor_engine *e, pnode *child) {
  pnode *parent = (pnode *)child->n.parent;
  if (!parent->coord && pn_lc(child) == ARBOR_LC_MAIN) return;
  arbor_coord *co = coord_for(parent, child);
  arbor_gate_state before = arbor_coord_state(co);
  if (arbor_coord_add(co, child, gate_of(child), phase_now(&child->n),
                      &child->n.slot) < 0)
    arbor_oom();
  /* the first child after the first step leaves init at once; a child
     added while winding down is answered at the drain */
  if (before == ARBOR_CO_INIT && arbor_coord_state(co) != ARBOR_CO_INIT)
    answer(e, parent, 0);
  else if (arbor_coord_dirty(co))
    arbor__tr_queue(e, parent);
}

int arbor_lc_admit(pnode *child) {
  const pnode *parent = (const pnode *)child->n.parent;
  if (!parent->coord) return (parent->pflags & PN_STEPPED) != 0;
  return !arbor_coord_blocked(parent->coord, pn_slot(child));
}


const char *arbor_lc_state(const pnode *pn) {
  return pn->coord ? arbor_gate_state_name(arbor_coord_state(pn->coord)) : NULL;
}

int arbor_lc_gated(const pnode *pn) {
  return pn->coord && arbor_coord_gated(pn->coord);
}

int arbor_lc_blocked(const pnode *pn) {
  arbor_coord *co = arbor__tr_parent_coord(pn);
  return co && arbor_coord_blocked(co, pn_slot(pn)) &&
         (pn->n.flags & ARBOR_F_PENDING) && !arbor_node_running(&pn->n);
}

int arbor__lc_hold_at_gate(arbor_engine *e, pnode *pn) {
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


/* ---- poststop (L3) -------------------------------------------------- */

int arbor__lc_poststop_first(arbor_engine *e, pnode *pn) {
  arbor_coord *co = pn->coord;
  if (!co || e->closing || (pn->pflags & PN_LC_BUSY) ||
      arbor_coord_poststop_waiting(co) == 0)
    return 0;
  arbor_coord_parent(co, ARBOR_CO_PARENT_STOPPING);
  answer(e, pn, 1);
  return 1;
}

void arbor__lc_poststop_ended(arbor_engine *e, pnode *pn) {
  arbor_node *n = &pn->n;
  if ((pn_lc(pn) & ARBOR_LC_KIND) == ARBOR_LC_POSTSTOP && n->parent &&
      !(n->flags & (ARBOR_F_DETACHED | ARBOR_F_PENDING)) &&
      !arbor_node_running(n) && !arbor_node_canceled(n) &&
      arbor_node_canceled(n->parent))
    arbor_engine_cancel(e, pn);
}

void arbor__lc_bound(arbor_engine *e, pnode *pn) {
  if (!arbor_node_running(&pn->n)) { /* it ended; its children run on */
    arbor_engine_cancel(e, pn);
    return;
  }
  if (pn->pflags & PN_NOTIFIED) return;
  pnode_stop *st = arbor__pr_stop_of(pn);
  if (arbor_timer_armed(&st->deadline)) return;
  arbor__clock_arm(e, &st->deadline, TIMER_BOUND,
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

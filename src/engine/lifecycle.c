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
    if (!p->coord) {
      start_waiting(e, p);
    } else if (arbor_coord_dirty(p->coord)) { /* not when answered meanwhile */
      arbor__kernel_answer(e, p, 0);
    }
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
    arbor__kernel_answer(e, parent, 0);
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

/* transition.c: the one funnel for every change in a node's life.
 *
 * Each function updates the tree, emits the event (its reason is an
 * argument) and reports to the parent's lifecycle coordinator, when the
 * parent has one (lifecycle.c). Nothing else in the engine sets a node's
 * state, starts or ends an incarnation, or cancels a context.
 */
#include "core/mem.h"
#include "engine/internal.h"
#include "engine/clock.h"
#include "engine/lifecycle.h"

/* ---- reports to the parent's coordinator ---------------------------- */

/* The coordinator pn reports to, or NULL. */
arbor_coord *arbor__tr_parent_coord(const pnode *pn) {
  const pnode *p = (const pnode *)pn->n.parent;
  return p && !(pn->n.flags & ARBOR_F_DETACHED) ? p->coord : NULL;
}

void arbor__tr_queue(arbor_engine *e, pnode *p) {
  if (p->pflags & PN_LC_QUEUED) return;
  p->pflags |= PN_LC_QUEUED;
  if (e->lc_len == e->lc_cap) {
    e->lc_cap = e->lc_cap ? 2 * e->lc_cap : 16;
    e->lc_queue = arbor_xrealloc(e->lc_queue, e->lc_cap * sizeof *e->lc_queue);
  }
  e->lc_queue[e->lc_len++] = p;
  arbor_node_ref(&p->n);
  arbor__clock_need_drain(e);
}

void arbor__tr_report(arbor_engine *e, pnode *child, arbor_co_child_event ev) {
  arbor_coord *co = arbor__tr_parent_coord(child);
  if (!co) return;
  e->lc_changes++;
  if (arbor_coord_child(co, pn_slot(child), ev) & ARBOR_CO_FINISHED)
    child->n.flags |= ARBOR_F_RETIRED; /* L5 */
  if (arbor_coord_dirty(co)) arbor__tr_queue(e, (pnode *)child->n.parent);
}

static void parent(arbor_engine *e, pnode *pn, arbor_co_parent_event ev) {
  if (!pn->coord) return;
  arbor_coord_parent(pn->coord, ev);
  if (arbor_coord_dirty(pn->coord)) arbor__tr_queue(e, pn);
}

static void restarted(arbor_engine *e, pnode *pn) {
  arbor_coord *co = pn->coord;
  if (!co) return;
  arbor_gate_state s = arbor_coord_state(co);
  if (s != ARBOR_CO_INIT) {
    static arbor_str r = ARBOR_STR_STATIC("parent restarted: from init again");
    arbor__emit(e, pn, ARBOR_EV_COORDINATOR, (arbor_state)s,
                (arbor_state)ARBOR_CO_INIT, &r);
  }
  arbor_coord_free(co);
  pn->coord = NULL;
}

static int exempt(const arbor_node *n, void *ud) {
  (void)ud;
  const pnode *pn = (const pnode *)n;
  if (pn->adopt && n->parent && ((const pnode *)n->parent)->reloading)
    return 1; /* runs on for its parent's next incarnation (kernel.c) */
  arbor_coord *co = arbor__tr_parent_coord(pn);
  return co && arbor_coord_exempt(co, pn_slot(pn));
}

/* pn's first step ended: its children may start. */
static void stepped_children(arbor_engine *e, pnode *pn) {
  if (pn->coord)
    parent(e, pn, ARBOR_CO_PARENT_STEPPED);
  else if (pn->n.first)
    arbor__tr_queue(e, pn);
}

void arbor__tr_free_coord(pnode *pn) {
  arbor_coord_free(pn->coord);
  pn->coord = NULL;
}

/* ---- the funnel ----------------------------------------------------- */

/* How the parent's coordinator sees a running node whose state is s. */
static arbor_co_child_event running_event(arbor_state s) {
  return s == ARBOR_NEW    ? ARBOR_CO_STARTED
         : s == ARBOR_DONE ? ARBOR_CO_SIGNALED_DONE
                           : ARBOR_CO_READY;
}

/* How it sees a node that does not run (exited, or its start will not
   come): exited for good, DONE, or to be restarted. */
static arbor_co_child_event exit_event(const arbor_node *n) {
  if (n->incarnation == 0) return ARBOR_CO_EXIT_FAILED; /* canceled first */
  int done = n->state == ARBOR_DONE;
  if (done && !arbor_node_canceled(n)) return ARBOR_CO_EXIT_DONE;
  /* no restart: retired, held (its policy gave up), or under a canceled
     parent (T8) */
  if ((n->flags & (ARBOR_F_RETIRED | ARBOR_F_HELD)) ||
      arbor_node_canceled(n->parent))
    return done ? ARBOR_CO_EXIT_DONE : ARBOR_CO_EXIT_FAILED;
  return ARBOR_CO_EXIT_RETRY;
}

/* 1 when pn's parent has a coordinator to report to. */
static int coordinated(const pnode *pn) {
  const pnode *p = (const pnode *)pn->n.parent;
  return p && p->coord;
}

/* After a change of pn's state or flags. */
static void report(arbor_engine *e, pnode *pn) {
  arbor_node *n = &pn->n;
  if (coordinated(pn))
    arbor__tr_report(e, pn, arbor_node_running(n)
                                ? running_event((arbor_state)n->state)
                                : exit_event(n));
  if (pn->coord && arbor_node_canceled(n) && !pn->reloading)
    parent(e, pn, ARBOR_CO_PARENT_STOPPING);
}

void arbor__tr_started(arbor_engine *e, pnode *pn, arbor_state from) {
  arbor_tree_start(&pn->n);
  if (pn->coord && !pn->claiming) restarted(e, pn); /* a reload keeps it */
  arbor__emit(e, pn, ARBOR_EV_STATE, from, ARBOR_NEW,
              pn->n.incarnation > 1 ? e->r_restart : e->r_start);
  if (coordinated(pn)) arbor__tr_report(e, pn, ARBOR_CO_STARTED);
}

void arbor__tr_set_state(arbor_engine *e, pnode *pn, arbor_state to,
                      arbor_str *reason) {
  arbor_state from = arbor_tree_set_state(&pn->n, to);
  if (from == to) return;
  if (to == ARBOR_CANCELED && !arbor_node_running(&pn->n))
    arbor_timers_disarm(&e->timers, &pn->wake); /* a pending start canceled */
  arbor__emit(e, pn, ARBOR_EV_STATE, from, to, reason);
  /* a start held at its closed gate reports itself (lifecycle.c) */
  if (arbor_node_running(&pn->n) || pn->n.incarnation > 0 ||
      to != ARBOR_NEW)
    report(e, pn);
}

void arbor__tr_exited(arbor_engine *e, pnode *pn, arbor_state s,
                   arbor_str *reason) {
  arbor_state from = arbor_tree_exit(&pn->n, s);
  if (from != (arbor_state)pn->n.state)
    arbor__emit(e, pn, ARBOR_EV_STATE, from, (arbor_state)pn->n.state, reason);
  report(e, pn);
}

void arbor__tr_held(arbor_engine *e, pnode *pn) {
  if (!arbor_node_running(&pn->n)) report(e, pn);
}

void arbor__tr_stepped(arbor_engine *e, pnode *pn) {
  pn->pflags |= PN_STEPPED;
  stepped_children(e, pn);
}

/* The tree tells of each context it cancels. */
static void canceled(arbor_node *n, arbor_state from, void *ud) {
  arbor_engine *e = ud;
  pnode *pn = (pnode *)n;
  if (from != (arbor_state)n->state) { /* a pending start dropped */
    if (!arbor_node_running(n)) arbor_timers_disarm(&e->timers, &pn->wake);
    arbor__emit(e, pn, ARBOR_EV_STATE, from, (arbor_state)n->state, NULL);
    if (coordinated(pn)) arbor__tr_report(e, pn, exit_event(n));
  }
  /* a reload's cancellation does not stop the children: no poststop */
  if (pn->coord && !pn->reloading) parent(e, pn, ARBOR_CO_PARENT_STOPPING);
}

void arbor__tr_cancel(arbor_engine *e, pnode *pn) {
  arbor_tree_cancel(&pn->n, exempt, canceled, e);
}

void arbor__tr_discarded(arbor_engine *e, pnode *pn) {
  pnode *p = (pnode *)pn->n.parent;
  if (p && p->coord) arbor_coord_child(p->coord, pn_slot(pn), ARBOR_CO_DISCARDED);
  arbor__tr_free_coord(pn);
}

/* ops.c: what is asked of a node from outside its incarnation: stop and
 * hold it, restart it, fail it now (the bindings, the control plane, the
 * harness, a process's watchdog), and its runnable's signals (healthy,
 * done).
 */
#include "engine/internal.h"
#include "engine/clock.h"
#include "engine/deadline.h"

#include <string.h>

#include "core/gc.h"
#include "engine/lifecycle.h"

const char *arbor_engine_remove_check(const pnode *pn) {
  const pnode *parent = (const pnode *)pn->n.parent;
  if (!parent) return "the root cannot be removed (stop the tree instead)";
  if (pn->gflags & GF_MEMBER)
    return "it is a member of a group, whose strategy ties it to its "
           "siblings (stop it, or restart its parent)";
  if (parent->coord)
    return "its parent orders its children with lifecycle gates (stop it, "
           "or restart its parent)";
  return NULL;
}

void arbor_engine_remove(arbor_engine *e, pnode *pn) {
  pn->pflags |= PN_REMOVE; /* kernel.c discards it once it exited */
  arbor_engine_hold(e, pn);
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

const char *arbor_engine_signal(arbor_engine *e, pnode *pn, const char *what) {
  arbor_node *n = &pn->n;
  if (strcmp(what, "healthy") == 0) {
    if (n->state != ARBOR_NEW) return "healthy";
    /* the streak starts again only once it stayed up for min_uptime: seen
       at its exit (kernel.c), no timer per start */
    pn->healthy_at = arbor__step_time(e);
    pn->healthy_wall = arbor__wall(e);
    if (pn->timing) arbor__deadline_healthy(e, pn);
    arbor__tr_set_state(e, pn, ARBOR_HEALTHY, NULL);
    arbor__kernel_release(e, pn); /* an ordered successor may start */
    return NULL;
  }
  if (strcmp(what, "done") == 0) {
    if (n->state != ARBOR_HEALTHY) return "done";
    pn->consecutive = 0;
    pn->done = 1;
    arbor__deadline_clear(e, pn);
    arbor__tr_set_state(e, pn, ARBOR_DONE, NULL);
    return NULL;
  }
  return "unknown";
}

int arbor_engine_fail_now(arbor_engine *e, pnode *pn, arbor_str *reason) {
  arbor_node *n = &pn->n;
  if (!arbor_node_running(n) || arbor_node_canceled(n) ||
      n->state == ARBOR_DEAD)
    return -1;
  arbor__kernel_fail(e, pn, reason);
  return 0;
}

/* ---- reload (docs/restore.md) --------------------------------------- */

int arbor_engine_reload(arbor_engine *e, pnode *pn, const char **err) {
  arbor_node *n = &pn->n;
  if (pn->reloading || pn->claiming) {
    *err = "a reload of it is under way";
    return -1;
  }
  if (!arbor_node_running(n) || arbor_node_canceled(n) || !n->first ||
      n->state == ARBOR_DEAD)
    return arbor_engine_restart(e, pn, err) < 0 ? -1 : 0;
  if (!n->parent && e->stop_requested) {
    *err = "the tree is being stopped";
    return -1;
  }
  arbor__kernel_reload(e, pn);
  return 1;
}

pnode *arbor_engine_adoptable(pnode *parent, const char *name, size_t len) {
  if (!parent->claiming) return NULL;
  pnode *c = (pnode *)arbor_tree_child(&parent->n, name, len);
  return c && c->adopt ? c : NULL;
}

void arbor_engine_adopt(arbor_engine *e, pnode *c) {
  arbor_node *n = &c->n;
  c->adopt = 0;
  static arbor_str why = ARBOR_STR_STATIC("definition unchanged: kept running");
  arbor__emit(e, c, ARBOR_EV_RESTORED, ARBOR_NEW, ARBOR_NEW, &why);
  if (!arbor_node_running(n) && n->live == 0 &&
      !(n->flags & (ARBOR_F_PENDING | ARBOR_F_HELD | ARBOR_F_RETIRED))) {
    const char *err;
    arbor_engine_restart(e, c, &err); /* it exited meanwhile */
  }
}


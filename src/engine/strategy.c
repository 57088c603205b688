/* strategy.c: group strategies and significant children (issue 4).
 *
 * The members of one ctx:group are contiguous siblings, created and
 * started in name order; GF_MEMBER / GF_FIRST mark them, so a member's
 * predecessor and successor are its sibling neighbours, found in O(1).
 *
 * - Death spreads (T6) to every other member (one_for_all), to the members
 *   started after the dead one (rest_for_one), or to none (one_for_one).
 * - Members (re)start in start order: a member whose predecessor is about
 *   to (re)start waits for it, parked PENDING without a timer; with
 *   `ordered`, it waits until the predecessor is HEALTHY. Starting (or
 *   becoming HEALTHY, or being given up) releases the successor.
 * - A significant child that ends DONE makes a parent with auto_shutdown
 *   stop its subtree in order and end DONE itself, not restarted; so does
 *   a temporary one (policy never, OTP's temporary) that ends DEAD.
 * - A temporary node's death spreads to no other member (OTP restarts
 *   nothing for it), and a temporary member canceled by another's death is
 *   held: it stays CANCELED (the kernel holds it).
 *
 * This file only answers: which member waits, which one a change releases,
 * which parent shuts down. The kernel (kernel.c) starts and stops them.
 */
#include "engine/internal.h"

#include <stdlib.h>
#include <string.h>

static int strategy_of(const pnode *pn) { return pn->gflags & GF_STRATEGY; }

static pnode *prev_member(pnode *pn) {
  if (!(pn->gflags & GF_MEMBER) || (pn->gflags & GF_FIRST)) return NULL;
  return (pnode *)pn->n.prev;
}

static pnode *next_member(pnode *pn) {
  if (!(pn->gflags & GF_MEMBER)) return NULL;
  pnode *s = (pnode *)pn->n.next;
  if (!s || !(s->gflags & GF_MEMBER) || (s->gflags & GF_FIRST)) return NULL;
  return s;
}

int arbor__strategy_spreads(arbor_engine *e, pnode *dead, pnode *member) {
  switch (strategy_of(dead)) {
  case GS_ONE_FOR_ONE:
    return 0;
  case GS_REST_FOR_ONE:
    if (arbor__decide_temporary(e, dead)) return 0;
    for (pnode *s = next_member(dead); s; s = next_member(s))
      if (s == member) return 1;
    return 0;
  default:
    return !arbor__decide_temporary(e, dead); /* OTP: it is not restarted,
                                                 so nothing else is */
  }
}

/* p will be (re)started: a restart pending, or exited and wanted by the GC
   (not given up, not held). */
static int will_start(const pnode *p) {
  const arbor_node *n = &p->n;
  if (n->flags & ARBOR_F_PENDING) return 1;
  if (n->flags & (ARBOR_F_RUNNING | ARBOR_F_HELD)) return 0;
  return n->state == ARBOR_DEAD || n->state == ARBOR_CANCELED ||
         (n->state == ARBOR_DONE && arbor_node_canceled(n));
}

/* pn's predecessor lets it start now. A running predecessor that was
   canceled (the same death is stopping it) will restart: not yet. */
static int predecessor_ready(const pnode *pn, const pnode *p) {
  const arbor_node *n = &p->n;
  int up = arbor_node_running(n) && !arbor_node_canceled(n);
  if (pn->gflags & GF_ORDERED)
    return (up && n->state == ARBOR_HEALTHY) ||
           (n->state == ARBOR_DONE && !will_start(p) && !arbor_node_running(n)) ||
           (up && n->state == ARBOR_DONE);
  if (strategy_of(pn) == GS_ONE_FOR_ONE) return 1;
  return up || (!arbor_node_running(n) && !will_start(p));
}

pnode *arbor_engine_waits_for(pnode *pn) {
  pnode *p = prev_member(pn);
  if (!p || predecessor_ready(pn, p)) return NULL;
  return p;
}

int arbor__strategy_hold(arbor_engine *e, pnode *pn) {
  (void)e;
  if (!arbor_engine_waits_for(pn)) return 0;
  pn->n.flags |= ARBOR_F_PENDING; /* parked: released by its predecessor */
  return 1;
}

pnode *arbor__strategy_released(arbor_engine *e, pnode *pn) {
  pnode *s = next_member(pn);
  if (!s || e->closing) return NULL;
  arbor_node *n = &s->n;
  if (!(n->flags & ARBOR_F_PENDING) || arbor_timer_armed(&s->wake) ||
      arbor_node_canceled(n) || (n->flags & ARBOR_F_HELD))
    return NULL;
  return predecessor_ready(s, pn) ? s : NULL;
}

/* ---- significant children (OTP's auto_shutdown) ---------------------- */

/* Every significant child of parent ended by itself: DONE, or DEAD when
   temporary (OTP's temporary child that died). */
static int all_significant_ended(arbor_engine *e, pnode *parent) {
  for (arbor_node *c = parent->n.first; c; c = c->next) {
    pnode *pc = (pnode *)c;
    if (!(pc->gflags & GF_SIGNIFICANT)) continue;
    if (arbor_node_running(c)) return 0;
    if (c->state == ARBOR_DONE) continue;
    if (c->state != ARBOR_DEAD || !arbor__decide_temporary(e, pc)) return 0;
  }
  return 1;
}

pnode *arbor__strategy_shutdown(arbor_engine *e, pnode *pn, arbor_state s) {
  pnode *p = (pnode *)pn->n.parent;
  if (!p || !(pn->gflags & GF_SIGNIFICANT) || e->closing) return NULL;
  int mode = (p->gflags & GF_AUTO) >> 4;
  if (mode == GA_NEVER || !arbor_node_running(&p->n) ||
      arbor_node_canceled(&p->n) || (p->pflags & PN_AUTODONE))
    return NULL;
  if (s == ARBOR_DEAD && !arbor__decide_temporary(e, pn)) return NULL;
  if (mode == GA_ALL && !all_significant_ended(e, p)) return NULL;
  char *dn = arbor_node_dn_dup(&pn->n);
  arbor_str *why = arbor_str_fmt("auto_shutdown (%s): significant child %s "
                                 "%s",
                                 mode == GA_ANY ? "any_significant"
                                                : "all_significant",
                                 dn ? dn : "?",
                                 s == ARBOR_DONE ? "done" : "ended (temporary)");
  free(dn);
  arbor_engine_event(e, p, ARBOR_EV_POLICY, why);
  arbor_str_set(&p->error, why);
  arbor_str_unref(why);
  p->pflags |= PN_AUTODONE;
  return p;
}

arbor_state arbor__strategy_auto_exit(pnode *pn, arbor_state s) {
  if (!(pn->pflags & PN_AUTODONE) || s != ARBOR_CANCELED) return s;
  pn->n.flags |= ARBOR_F_HELD; /* ended for good: not restarted */
  return ARBOR_DONE;
}

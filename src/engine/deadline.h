/* deadline.h: a node's timing rules (deadline.c): min_uptime (when an
 * incarnation counts as up, so its failure streak starts again),
 * ready_timeout (HEALTHY within S seconds of the start) and the watchdog
 * (a heartbeat every S seconds once HEALTHY). What the kernel calls at
 * every start and exit is inline: one pointer test for a node without
 * timing options.
 */
#ifndef ARBOR_DEADLINE_H
#define ARBOR_DEADLINE_H

#include "engine/engine.h"

/* The seconds pn must stay HEALTHY to count as up. */
static inline double arbor__min_uptime(const pnode *pn) {
  return pn->timing && pn->timing->min_uptime >= 0 ? pn->timing->min_uptime
                                                   : ARBOR_MIN_UPTIME;
}

/* 1 when pn's incarnation, ending at `end`, was up: HEALTHY for at least
   min_uptime seconds. */
static inline int arbor__deadline_was_up(const pnode *pn, double end) {
  return pn->healthy_at >= 0 && end - pn->healthy_at >= arbor__min_uptime(pn);
}

/* pn's timing record, made at the first option set. */
pnode_timing *arbor__deadline_of(pnode *pn);
/* pn's incarnation started: its ready deadline is armed, if it has one. */
void arbor__deadline_started(arbor_engine *e, pnode *pn);
/* pn became HEALTHY: the ready deadline goes, the watchdog's comes. */
void arbor__deadline_healthy(arbor_engine *e, pnode *pn);
/* pn's incarnation ended, failed or signaled done: no deadline is left. */
static inline void arbor__deadline_clear(arbor_engine *e, pnode *pn) {
  if (pn->timing) arbor_timers_disarm(&e->timers, &pn->timing->timer);
}
/* The timer t of a node fired: the reason its node fails (new), or NULL
   when nothing is due (the heartbeat came meanwhile: re-armed; the node
   no longer runs in that state). */
arbor_str *arbor__deadline_fired(arbor_engine *e, arbor_timer *t,
                                 pnode **owner);
/* pn is discarded: its record goes. */
void arbor__deadline_free(arbor_engine *e, pnode *pn);

#endif

/* lifecycle.h: the lifecycle gates in the engine (L0-L8).
 *
 * A parent gets a coordinator (core/coord.h, pure) at its first child that
 * is not a plain main one. The engine reports to it from one place, the
 * transition funnel (transition.c). This file makes coordinators, counts
 * children in them and answers them at the drain; the kernel performs the
 * answers: starts children whose gate opened, retires them (L4), runs
 * poststop children before a stopping parent is told (L3) and bounds them.
 * A parent without a coordinator does no lifecycle work at all.
 *
 * The five call points between the engine and a coordinator:
 *   1. adding a child            arbor_lc_register     (l_ctx.c)
 *   2. a change in a node's life the funnel            (transition.c)
 *   3. the drain                 arbor__lc_run         (drain.c)
 *   4. the ordered stop          poststop_first        (kernel.c)
 *   5. starting a child          hold_at_gate          (kernel.c)
 * 1 and 3 are above the kernel; 4 and 5 are in it, 2 below it.
 */
#ifndef ARBOR_LIFECYCLE_H
#define ARBOR_LIFECYCLE_H

#include "core/coord.h"
#include "engine/engine.h"

/* NULL when a child with lifecycle bits lc (ARBOR_LC_*) may be added to
   parent now, else the name of its gate, which never opens again (L0). A
   parent of plain children gets its coordinator here, at the first child
   that needs one: it starts from what its children do now. */
const char *arbor_lc_check_add(arbor_engine *e, pnode *parent, unsigned lc);
/* Counts a new child (its pn_lc set, the last of its parent's) in its
   parent's coordinator, made now when it is the first that needs one. */
void arbor_lc_register(arbor_engine *e, pnode *child);
/* 1 when the new child may start now; 0 when it waits behind its closed
   gate. */
int arbor_lc_admit(pnode *child);
/* The coordinator state of pn, or NULL when pn has none. */
const char *arbor_lc_state(const pnode *pn);
/* 1 when pn's coordinator orders any child that is not a plain main one. */
int arbor_lc_gated(const pnode *pn);
/* 1 when pn is blocked behind a closed gate. */
int arbor_lc_blocked(const pnode *pn);
const char *arbor_lc_name(unsigned lc);

/* The coordinator pn reports to, or NULL (transition.c). */
arbor_coord *arbor__tr_parent_coord(const pnode *pn);
/* Queues p's coordinator to be answered at the drain (transition.c). */
void arbor__tr_queue(arbor_engine *e, pnode *p);
/* Reports what happened to child to its parent's coordinator, if any
   (transition.c). */
void arbor__tr_report(arbor_engine *e, pnode *child, arbor_co_child_event ev);
/* The bound of a poststop child passed (L3): it is canceled. */
void arbor__lc_bound_fired(arbor_engine *e, pnode *pn);
/* Answers the coordinators reported to since the last run. */
void arbor__lc_run(arbor_engine *e);
/* Drops the queue (the engine closes). */
void arbor__lc_clear(arbor_engine *e);
/* Frees pn's coordinator (transition.c). */
void arbor__tr_free_coord(pnode *pn);

#endif

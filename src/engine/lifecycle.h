/* lifecycle.h: the lifecycle gates in the engine (L0-L8). Each parent that
 * has children keeps a coordinator (the pure machine of gate.h); this file
 * keeps its counts up to date as children change, evaluates it once per
 * change (deferred to the end of the current step, never polled), and acts
 * on it: starts children whose gate opened, winds down (retires sidecars,
 * L4), runs poststop children before a stopping parent is told (L3).
 */
#ifndef ARBOR_LIFECYCLE_H
#define ARBOR_LIFECYCLE_H

#include "core/gate.h"
#include "engine/processor.h"

typedef struct arbor_pcoord {
  arbor_coord c;
  pnode *owner;
  struct arbor_pcoord *next; /* in the engine's queue of coordinators */
  uint8_t queued;            /* in the queue (holds a node reference) */
  uint8_t dirty;             /* an input changed since the last evaluation */
  uint8_t busy;              /* being evaluated */
  uint8_t recount;           /* phases to be recomputed (parent canceled) */
  uint8_t wound;             /* wind-down retirements done */
  uint8_t added;             /* a child was added since */
  uint8_t cause;             /* why it winds down (lifecycle.c) */
} arbor_pcoord;

/* Checks that a child with lifecycle bits lc (ARBOR_LC_*) may be added to
   parent now: NULL, or what is wrong (L0). */
const char *arbor_lc_check_add(pnode *parent, unsigned lc);
/* Counts a new child (its n.lc set) in its parent's coordinator, made at
   the parent's first child. */
void arbor_lc_register(arbor_engine *e, pnode *child);
/* 1 when the new child's gate is open now (start it); 0 when it waits
   behind a closed gate (marked blocked). */
int arbor_lc_admit(arbor_engine *e, pnode *child);
/* The coordinator state of pn, or NULL when pn has no children yet in this
   incarnation. */
const char *arbor_lc_state(const pnode *pn);
/* 1 when pn's coordinator orders any child that is not a plain main one
   (prestart, poststart, poststop or sidecar children). */
int arbor_lc_gated(const pnode *pn);
/* 1 when pn is blocked behind a closed gate. */
int arbor_lc_blocked(const pnode *pn);
const char *arbor_lc_name(unsigned lc);

/* Engine-side hooks (processor.c, loop.c). */
void arbor__lc_touch(arbor_engine *e, pnode *pn);   /* pn may have changed */
void arbor__lc_exited(arbor_engine *e, pnode *pn);  /* after pn's exit */
/* pn is about to start: 1 when its gate is closed, so it waits (blocked)
   instead, e.g. a restart of a child that was canceled while blocked. */
int arbor__lc_hold_at_gate(arbor_engine *e, pnode *pn);
void arbor__lc_started(arbor_engine *e, pnode *pn); /* a new incarnation */
void arbor__lc_stepped(arbor_engine *e, pnode *pn); /* first step ended */
void arbor__lc_canceled(arbor_engine *e, pnode *pn);
void arbor__lc_detached(pnode *pn);
void arbor__lc_free(pnode *pn);
/* pn stops and none of its children runs: 1 when its poststop children
   were started first (L3), so the caller looks again. */
int arbor__lc_poststop_first(arbor_engine *e, pnode *pn);
/* A poststop child running for a stopping parent: bounded by its shutdown
   time. */
void arbor__lc_bound(arbor_engine *e, pnode *pn);
void arbor__lc_bound_fired(arbor_engine *e, pnode *pn);
/* Evaluates the queued coordinators. */
void arbor__lc_run(arbor_engine *e);
/* Drops the queue (the engine closes). */
void arbor__lc_clear(arbor_engine *e);

#endif

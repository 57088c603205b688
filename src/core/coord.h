/* coord.h: the lifecycle coordinator of one parent (rules L0-L8), pure.
 *
 * The engine reports what happened to the parent and to its children; the
 * coordinator keeps each child's gate and phase, steps the gate machine
 * (gate.h) and answers with actions for the engine to perform. It never
 * calls the engine: no Lua, no libuv, no callbacks.
 *
 * A parent has a coordinator only once it has a child that is not a plain
 * main one (prestart, poststart, poststop or a sidecar); a parent of plain
 * children has none and does no lifecycle work at all.
 *
 * Children are named by the slot arbor_coord_add returned (the engine keeps
 * it with the child) and carried in actions as the `child` pointer the
 * engine gave. Slots follow creation order, which is the order starts and
 * retirements are answered in.
 */
#ifndef ARBOR_COORD_H
#define ARBOR_COORD_H

#include <stdint.h>

#include "core/gate.h"

typedef struct arbor_coord arbor_coord;

/* What happened to a child. */
typedef enum arbor_co_child_event {
  ARBOR_CO_STARTED,       /* a new incarnation runs, not ready yet */
  ARBOR_CO_READY,         /* running and HEALTHY (or declared DEAD) */
  ARBOR_CO_SIGNALED_DONE, /* signaled DONE, still running */
  ARBOR_CO_WAITING,       /* its start waits: held at its closed gate */
  ARBOR_CO_EXIT_RETRY,    /* exited; a restart may come */
  ARBOR_CO_EXIT_DONE,     /* exited DONE: finished */
  ARBOR_CO_EXIT_FAILED,   /* exited for good: policy gave up, held, canceled
                             before it started, or under a stopping parent */
  ARBOR_CO_DISCARDED      /* no longer the parent's child */
} arbor_co_child_event;

/* What happened to the parent. */
typedef enum arbor_co_parent_event {
  ARBOR_CO_PARENT_STEPPED,  /* its first step ended: its children are known */
  ARBOR_CO_PARENT_STOPPING, /* its context is canceled (idempotent) */
} arbor_co_parent_event;

/* What the engine is to do. */
typedef enum arbor_co_verb {
  ARBOR_CO_START,         /* start child: its gate opened */
  ARBOR_CO_START_BOUNDED, /* start child, bounded by its shutdown time: the
                             parent is stopping (L3) */
  ARBOR_CO_RETIRE,        /* child never starts again in this parent
                             incarnation: cancel it if it runs or waits (L4) */
  ARBOR_CO_MOVED          /* the coordinator moved from `from` to `to` */
} arbor_co_verb;

typedef struct arbor_co_action {
  arbor_co_verb verb;
  void *child;       /* the engine's child; NULL for ARBOR_CO_MOVED */
  uint8_t from, to;  /* ARBOR_CO_MOVED: arbor_gate_state */
  const char *why;   /* ARBOR_CO_MOVED: static text naming the rule */
} arbor_co_action;

/* arbor_coord_add's answers. */
enum { ARBOR_CO_NEVER = -1, ARBOR_CO_WAIT = 0, ARBOR_CO_GO = 1 };
/* arbor_coord_child's answer: bit set when the child is finished with for
   this parent incarnation (L5: a prestart or poststart job that signaled or
   exited DONE); the engine keeps it from being restarted. */
enum { ARBOR_CO_FINISHED = 1 };

/* A coordinator in init, with no children; started says the parent's first
   step ended already. NULL when out of memory. */
arbor_coord *arbor_coord_new(int started);
void arbor_coord_free(arbor_coord *c);

/* Gate g can still open in this parent incarnation: a child behind it may
   be added (L0). Steps the machine first (the moves are answered at the
   next step). */
int arbor_coord_may_add(arbor_coord *c, arbor_gate g);
/* Adds child behind gate g in phase p (ARBOR_PH_WAITING for a new child;
   a coordinator made late counts the plain children already there in
   theirs). Stores its slot in *slot and answers ARBOR_CO_GO (start it now)
   or ARBOR_CO_WAIT (it waits behind its gate, marked blocked). -1 when out
   of memory. */
int arbor_coord_add(arbor_coord *c, void *child, arbor_gate g, arbor_phase p,
                    uint32_t *slot);
/* Reports what happened to the child in slot. Returns ARBOR_CO_FINISHED or
   0. */
unsigned arbor_coord_child(arbor_coord *c, uint32_t slot,
                           arbor_co_child_event ev);
void arbor_coord_parent(arbor_coord *c, arbor_co_parent_event ev);

/* The engine's two questions. */
/* The child in slot may start now: its gate is open (L7). Starting it
   clears its blocked mark. */
int arbor_coord_may_start(arbor_coord *c, uint32_t slot);
/* The child in slot is left out of its parent's cancellation: a poststop
   child that runs or waits behind its gate (L3). */
int arbor_coord_exempt(const arbor_coord *c, uint32_t slot);

/* 1 when something was reported since the last step (step it). */
int arbor_coord_dirty(const arbor_coord *c);
/* Steps the machine and writes at most max actions: the moves first, then
   retirements and starts in creation order. Returns how many; call again
   while it returns max. Children already answered are marked (started
   children are no longer blocked, retired ones retired), so a call never
   repeats an action. */
int arbor_coord_step(arbor_coord *c, arbor_co_action *out, int max);
/* The parent is stopping and none of its children runs: steps the machine
   with the poststop gate allowed, so its waiting poststop children come
   out as ARBOR_CO_START_BOUNDED actions (L3). Same contract as step. */
int arbor_coord_poststop(arbor_coord *c, arbor_co_action *out, int max);

/* Views. */
arbor_gate_state arbor_coord_state(const arbor_coord *c);
/* 1 when the coordinator orders any child that is not a plain main one. */
int arbor_coord_gated(const arbor_coord *c);
int arbor_coord_blocked(const arbor_coord *c, uint32_t slot);
int arbor_coord_retired(const arbor_coord *c, uint32_t slot);
/* Waiting poststop children (the engine's stop looks for them). */
uint32_t arbor_coord_poststop_waiting(const arbor_coord *c);

#endif

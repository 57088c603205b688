/* gate.h: the lifecycle coordinator of one parent (rules L0-L8 of
 * SEMANTICS.md) as a pure state machine.
 *
 * A coordinator knows, for each of the six gates, how many of the parent's
 * children stand behind it in each phase (waiting, starting, ready, ...).
 * arbor_gate_next() is a function from (state, those counts) to the next
 * state; arbor_gate_eval() steps it until it stops changing. Each state
 * opens an absolute set of gates (the table of SEMANTICS.md), so opening
 * and closing are idempotent and reversible; a gate only says whether a
 * child may start. No libuv, no Lua: the coordinator (coord.c) keeps the
 * counts up to date and answers the engine with what to do.
 */
#ifndef ARBOR_GATE_H
#define ARBOR_GATE_H

#include <stdint.h>

/* Coordinator states, in the only order they are visited (L0). */
typedef enum arbor_gate_state {
  ARBOR_CO_INIT = 0,
  ARBOR_CO_PRESTART,
  ARBOR_CO_MAIN,
  ARBOR_CO_POSTSTART,
  ARBOR_CO_RUNNING,
  ARBOR_CO_POSTSTOP,
  ARBOR_CO_STATES
} arbor_gate_state;

/* The six gates: a child's lifecycle and whether it is a sidecar. */
typedef enum arbor_gate {
  ARBOR_GATE_PRESTART = 0,
  ARBOR_GATE_PRESTART_SIDECAR,
  ARBOR_GATE_MAIN,
  ARBOR_GATE_POSTSTART,
  ARBOR_GATE_POSTSTART_SIDECAR,
  ARBOR_GATE_POSTSTOP,
  ARBOR_GATES
} arbor_gate;

/* A child's lifecycle as declared (ctx:run's `lifecycle` and `sidecar`):
   the lifecycle in the low two bits, then the sidecar flag. */
enum arbor_lifecycle {
  ARBOR_LC_MAIN = 0,
  ARBOR_LC_PRESTART,
  ARBOR_LC_POSTSTART,
  ARBOR_LC_POSTSTOP,
  ARBOR_LC_KIND = 3u,         /* mask of the lifecycle */
  ARBOR_LC_SIDECAR = 1u << 2, /* a prestart or poststart sidecar */
};

/* What the coordinator needs to know about one child. */
typedef enum arbor_phase {
  ARBOR_PH_WAITING = 0, /* not started yet in this parent incarnation */
  ARBOR_PH_STARTING,    /* running, not ready (NEW) */
  ARBOR_PH_READY,       /* running and HEALTHY */
  ARBOR_PH_SIGNALED,    /* signaled DONE, still running */
  ARBOR_PH_RETRYING,    /* exited; its policy starts it again */
  ARBOR_PH_DONE,        /* exited DONE: finished */
  ARBOR_PH_FAILED,      /* exited for good: its policy gave up, or retired */
  ARBOR_PHASES
} arbor_phase;

typedef struct arbor_gate_fsm {
  uint32_t count[ARBOR_GATES][ARBOR_PHASES];
  uint32_t total[ARBOR_GATES]; /* children behind each gate, any phase */
  uint8_t state;    /* arbor_gate_state */
  uint8_t started;  /* input: the parent's first step ended (children known) */
  uint8_t stopping; /* input: the parent's context is canceled */
  uint8_t winding;  /* sticky: winding down to poststop (L3, L4, L8) */
} arbor_gate_fsm;

/* The gates open in state s: bit g set when gate g is open (the table). */
unsigned arbor_gate_vector(arbor_gate_state s);
static inline int arbor_gate_open(arbor_gate_state s, arbor_gate g) {
  return (arbor_gate_vector(s) >> g) & 1u;
}
/* 1 when gate g is open in s or in a later state: a child behind it can
   still start in this incarnation (L0). */
int arbor_gate_can_open(arbor_gate_state s, arbor_gate g);

/* The gate of a child: lifecycle (ARBOR_LC_MAIN ...) and sidecar. */
arbor_gate arbor_gate_of(unsigned lifecycle, int sidecar);
int arbor_gate_is_sidecar(arbor_gate g);

/* Resets c to init with no children (a parent incarnation starts). */
void arbor_gate_init(arbor_gate_fsm *c);
/* Counts a child behind gate g in phase p (added), or moves it. */
void arbor_gate_add(arbor_gate_fsm *c, arbor_gate g, arbor_phase p);
void arbor_gate_move(arbor_gate_fsm *c, arbor_gate g, arbor_phase from,
                      arbor_phase to);
/* Forgets a child behind gate g in phase p (it was discarded). */
void arbor_gate_remove(arbor_gate_fsm *c, arbor_gate g, arbor_phase p);

/* 1 when c winds down: the parent is stopping, a prestart child gave up
   (L8), or every main child finished in a parent that has sidecars or
   poststop children (L4). Sidecars are then canceled, and children whose
   gate is closed never start. */
int arbor_gate_wind_wanted(const arbor_gate_fsm *c);
/* 1 when every child but the poststop ones has exited for good (L3). */
int arbor_gate_others_finished(const arbor_gate_fsm *c);
/* One step: the state that follows c's state, or the same one. Pure. */
arbor_gate_state arbor_gate_next(const arbor_gate_fsm *c);
/* Steps c until its state stops changing (updating `winding` first).
   Returns the number of transitions taken (0..5). */
int arbor_gate_eval(arbor_gate_fsm *c);

const char *arbor_gate_state_name(arbor_gate_state s);
const char *arbor_gate_name(arbor_gate g);

#endif

/* gate.c: the lifecycle coordinator as a pure state machine. See gate.h. */
#include "core/gate.h"

#include <string.h>


#define BIT(g) (1u << (g))

/* The table of SEMANTICS.md: the gates each state opens. */
static const unsigned gate_table[ARBOR_CO_STATES] = {
    [ARBOR_CO_INIT] = 0,
    [ARBOR_CO_PRESTART] = BIT(ARBOR_GATE_PRESTART) |
                          BIT(ARBOR_GATE_PRESTART_SIDECAR),
    [ARBOR_CO_MAIN] = BIT(ARBOR_GATE_PRESTART_SIDECAR) | BIT(ARBOR_GATE_MAIN),
    [ARBOR_CO_POSTSTART] =
        BIT(ARBOR_GATE_PRESTART_SIDECAR) | BIT(ARBOR_GATE_MAIN) |
        BIT(ARBOR_GATE_POSTSTART) | BIT(ARBOR_GATE_POSTSTART_SIDECAR),
    [ARBOR_CO_RUNNING] = BIT(ARBOR_GATE_PRESTART_SIDECAR) |
                         BIT(ARBOR_GATE_MAIN) |
                         BIT(ARBOR_GATE_POSTSTART_SIDECAR),
    [ARBOR_CO_POSTSTOP] = BIT(ARBOR_GATE_POSTSTOP),
};

static const char *const state_names[ARBOR_CO_STATES] = {
    "init", "prestart", "main", "poststart", "running", "poststop"};

static const char *const gate_names[ARBOR_GATES] = {
    "prestart",  "prestart sidecar",  "main",
    "poststart", "poststart sidecar", "poststop"};

unsigned arbor_gate_vector(arbor_gate_state s) {
  return (unsigned)s < ARBOR_CO_STATES ? gate_table[s] : 0;
}

int arbor_gate_can_open(arbor_gate_state s, arbor_gate g) {
  for (unsigned t = s; t < ARBOR_CO_STATES; t++)
    if (gate_table[t] & BIT(g)) return 1;
  return 0;
}

arbor_gate arbor_gate_of(unsigned lifecycle, int sidecar) {
  switch (lifecycle) {
  case ARBOR_LC_PRESTART:
    return sidecar ? ARBOR_GATE_PRESTART_SIDECAR : ARBOR_GATE_PRESTART;
  case ARBOR_LC_POSTSTART:
    return sidecar ? ARBOR_GATE_POSTSTART_SIDECAR : ARBOR_GATE_POSTSTART;
  case ARBOR_LC_POSTSTOP:
    return ARBOR_GATE_POSTSTOP;
  default:
    return ARBOR_GATE_MAIN;
  }
}

int arbor_gate_is_sidecar(arbor_gate g) {
  return g == ARBOR_GATE_PRESTART_SIDECAR || g == ARBOR_GATE_POSTSTART_SIDECAR;
}

const char *arbor_gate_state_name(arbor_gate_state s) {
  return (unsigned)s < ARBOR_CO_STATES ? state_names[s] : "?";
}

const char *arbor_gate_name(arbor_gate g) {
  return (unsigned)g < ARBOR_GATES ? gate_names[g] : "?";
}

void arbor_gate_init(arbor_gate_fsm *c) { memset(c, 0, sizeof *c); }

void arbor_gate_add(arbor_gate_fsm *c, arbor_gate g, arbor_phase p) {
  c->count[g][p]++;
  c->total[g]++;
}

void arbor_gate_remove(arbor_gate_fsm *c, arbor_gate g, arbor_phase p) {
  c->count[g][p]--;
  c->total[g]--;
}

void arbor_gate_move(arbor_gate_fsm *c, arbor_gate g, arbor_phase from,
                      arbor_phase to) {
  c->count[g][from]--;
  c->count[g][to]++;
}

/* ---- what the counts say -------------------------------------------- */

static uint32_t total(const arbor_gate_fsm *c, arbor_gate g) {
  return c->total[g];
}

/* Children of g that exited for good. */
static uint32_t finished(const arbor_gate_fsm *c, arbor_gate g) {
  return c->count[g][ARBOR_PH_DONE] + c->count[g][ARBOR_PH_FAILED];
}

static int all_finished(const arbor_gate_fsm *c, arbor_gate g) {
  return finished(c, g) == total(c, g);
}

int arbor_gate_others_finished(const arbor_gate_fsm *c) {
  for (int g = 0; g < ARBOR_GATES; g++)
    if (g != ARBOR_GATE_POSTSTOP && !all_finished(c, (arbor_gate)g)) return 0;
  return 1;
}

/* L1: prestart jobs DONE (exited or not), prestart sidecars ready. */
static int prestart_satisfied(const arbor_gate_fsm *c) {
  const uint32_t *side = c->count[ARBOR_GATE_PRESTART_SIDECAR];
  const uint32_t *pre = c->count[ARBOR_GATE_PRESTART];
  return pre[ARBOR_PH_DONE] + pre[ARBOR_PH_SIGNALED] ==
             total(c, ARBOR_GATE_PRESTART) &&
         side[ARBOR_PH_READY] + side[ARBOR_PH_SIGNALED] +
                 side[ARBOR_PH_DONE] ==
             total(c, ARBOR_GATE_PRESTART_SIDECAR);
}

/* L2: every main child is ready or has exited. */
static int main_up(const arbor_gate_fsm *c) {
  const uint32_t *m = c->count[ARBOR_GATE_MAIN];
  return m[ARBOR_PH_WAITING] + m[ARBOR_PH_STARTING] == 0;
}

int arbor_gate_wind_wanted(const arbor_gate_fsm *c) {
  if (!c->started) return 0;
  if (c->stopping) return 1;
  if (c->state <= ARBOR_CO_PRESTART &&
      c->count[ARBOR_GATE_PRESTART][ARBOR_PH_FAILED] +
              c->count[ARBOR_GATE_PRESTART_SIDECAR][ARBOR_PH_FAILED] >
          0)
    return 1; /* L8 */
  uint32_t mains = total(c, ARBOR_GATE_MAIN);
  uint32_t coordinated = total(c, ARBOR_GATE_PRESTART_SIDECAR) +
                         total(c, ARBOR_GATE_POSTSTART_SIDECAR) +
                         total(c, ARBOR_GATE_POSTSTOP);
  return mains > 0 && coordinated > 0 && all_finished(c, ARBOR_GATE_MAIN);
}

arbor_gate_state arbor_gate_next(const arbor_gate_fsm *c) {
  arbor_gate_state s = (arbor_gate_state)c->state;
  if (s == ARBOR_CO_INIT) return c->started ? ARBOR_CO_PRESTART : s;
  if (s == ARBOR_CO_POSTSTOP) return s;
  int winding = c->winding || arbor_gate_wind_wanted(c);
  if (winding && arbor_gate_others_finished(c)) return ARBOR_CO_POSTSTOP;
  /* a stopping parent starts nothing but poststop; a failed prestart
     keeps main from starting (L8) */
  if (c->stopping || (winding && s == ARBOR_CO_PRESTART)) return s;
  switch (s) {
  case ARBOR_CO_PRESTART:
    return prestart_satisfied(c) ? ARBOR_CO_MAIN : s;
  case ARBOR_CO_MAIN:
    return main_up(c) ? ARBOR_CO_POSTSTART : s;
  case ARBOR_CO_POSTSTART:
    return all_finished(c, ARBOR_GATE_POSTSTART) ? ARBOR_CO_RUNNING : s;
  default:
    return s;
  }
}

int arbor_gate_eval(arbor_gate_fsm *c) {
  int moves = 0;
  for (;;) {
    if (!c->winding && arbor_gate_wind_wanted(c)) c->winding = 1;
    arbor_gate_state next = arbor_gate_next(c);
    if (next == (arbor_gate_state)c->state) return moves;
    c->state = (uint8_t)next;
    moves++;
  }
}

/* clock.h: the engine's time (clock.c). The step's time is read inline:
 * every event and every restart reads it. */
#ifndef ARBOR_CLOCK_H
#define ARBOR_CLOCK_H

#include "engine/engine.h"

/* The engine draining now, if any. */
extern arbor_engine *arbor__current;

/* The time of the current step: read once per resume or timer pass, so one
   restart does not read the clock a dozen times. */
static inline double arbor__step_time(arbor_engine *e) {
  return e->virtual_clock ? e->vnow : e->step_now;
}

static inline void arbor__step_begin(arbor_engine *e) {
  if (!e->virtual_clock) e->step_now = arbor_engine_now(e);
}

/* The wall clock now (CLOCK_REALTIME, seconds since the epoch): the time
   of a log line, an event, an exit as people read it, right after a step
   of the clock or a suspend too. Under the virtual clock, its time. */
double arbor__wall(arbor_engine *e);

void arbor__clock_arm(arbor_engine *e, arbor_timer *t, int kind, double due);
/* The loop is not to block in poll: there is work for the drain. */
void arbor__clock_need_drain(arbor_engine *e);
void arbor__clock_keep_polling(arbor_engine *e);

#endif

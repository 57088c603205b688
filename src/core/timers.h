/* timers.h: the one timer heap behind every timer of an engine (sleep,
 * restart delays, shutdown deadlines), whatever the clock: real time on
 * libuv or the test harness's virtual time. Pure C: the caller says what
 * "now" is. Timers due at the same time fire in the order they were armed.
 */
#ifndef ARBOR_SCHED_H
#define ARBOR_SCHED_H

#include <stddef.h>
#include <stdint.h>

typedef struct arbor_timer {
  double due;     /* seconds on the engine's clock */
  uint64_t seq;   /* arming order, breaks ties */
  uint32_t idx;   /* position in the heap + 1; 0 when not armed */
  int32_t kind;   /* caller's tag */
} arbor_timer;

typedef struct arbor_timers {
  arbor_timer **heap;
  size_t len, cap;
  uint64_t seq;
} arbor_timers;

void arbor_timers_init(arbor_timers *s);
void arbor_timers_close(arbor_timers *s);
/* Arms (or re-arms) t to fire at `due`. Returns 0 or -1 when out of memory. */
int arbor_timers_arm(arbor_timers *s, arbor_timer *t, double due);
/* Disarms t; nothing happens if it was not armed. */
void arbor_timers_disarm(arbor_timers *s, arbor_timer *t);
static inline int arbor_timer_armed(const arbor_timer *t) { return t->idx != 0; }
/* The earliest timer, or NULL. */
static inline arbor_timer *arbor_timers_peek(const arbor_timers *s) {
  return s->len ? s->heap[0] : NULL;
}
/* Removes and returns the earliest timer if it is due at or before now. */
arbor_timer *arbor_timers_pop_due(arbor_timers *s, double now);

#endif

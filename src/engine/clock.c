/* clock.c: the engine's time (virtual or real), its timers, its random
 * generator, and the engine running the calling code. */
#include "engine/internal.h"
#include "engine/clock.h"
#include "core/mem.h"


/* The engine running the calling code, if any (set while draining). */
arbor_engine *arbor__current;

arbor_engine *arbor_engine_current(void) { return arbor__current; }

double arbor_engine_step_time(arbor_engine *e) { return arbor__step_time(e); }

double arbor_engine_now(arbor_engine *e) {
  if (e->virtual_clock) return e->vnow;
  return (double)(uv_hrtime() - e->t0) / 1e9;
}

double arbor__wall(arbor_engine *e) {
  if (e->virtual_clock) return e->vnow;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* xorshift64*: the engine's seedable generator (P5). */
uint64_t arbor_engine_random(arbor_engine *e) {
  uint64_t x = e->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  e->rng = x;
  return x * 2685821657736338717ull;
}

/* An active idle handle keeps the loop from blocking in poll, so work
   enqueued from outside a drain runs in this loop iteration. */
static void on_idle(uv_idle_t *h) { (void)h; }

void arbor__clock_keep_polling(arbor_engine *e) { uv_idle_start(&e->idle, on_idle); }

void arbor__clock_need_drain(arbor_engine *e) {
  if (e->loop && !e->draining && !uv_is_active((uv_handle_t *)&e->idle))
    arbor__clock_keep_polling(e);
}

void arbor__clock_arm(arbor_engine *e, arbor_timer *t, int kind, double due) {
  t->kind = kind;
  if (arbor_timers_arm(&e->timers, t, due) < 0) arbor_oom();
}

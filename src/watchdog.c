/* watchdog.c: see watchdog.h. */
#define _POSIX_C_SOURCE 200809L
#include "watchdog.h"

#include <lauxlib.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define TICK_NS 250000000L

static _Atomic(lua_State *) running;   /* the coroutine being resumed */
static _Atomic uint64_t since;        /* when its resume began, ns */
static _Atomic uint64_t limit_ns;     /* its limit, 0 for none */
static _Atomic int fired;             /* the hook is set on `running` */
static const char *what = "runaway runnable: ran %d ms without yielding "
                          "(limit %d ms)";
static timer_t timer;

/* The watched state is published by the store to `running` (release), read
   from `running` first (acquire); the other fields need no ordering of their
   own. Clearing `running` stays sequentially consistent: the tick must see
   it cleared before `fired` is read back. Locked stores on every resume cost
   more than the rest of the watchdog. */
#define relaxed memory_order_relaxed

static int ready, armed;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Runs inside the runaway coroutine: the error ends its incarnation. */
static void runaway_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, what, (int)((now_ns() - atomic_load(&since)) / 1000000u),
             (int)(atomic_load(&limit_ns) / 1000000u));
}

static void on_tick(int sig) {
  (void)sig;
  lua_State *co = atomic_load_explicit(&running, memory_order_acquire);
  uint64_t limit = atomic_load_explicit(&limit_ns, relaxed);
  if (!co || !limit || atomic_load(&fired)) return;
  if (now_ns() - atomic_load_explicit(&since, relaxed) < limit) return;
  atomic_store(&fired, 1);
  lua_sethook(co, runaway_hook,
              LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

/* Creates the timer and its signal handler once. */
static int setup(void) {
  if (ready) return ready > 0;
  ready = -1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_tick;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  int signo = SIGRTMIN + 5;
  if (sigaction(signo, &sa, NULL) != 0) return 0;
  struct sigevent sev;
  memset(&sev, 0, sizeof sev);
  sev.sigev_notify = SIGEV_SIGNAL;
  sev.sigev_signo = signo;
  if (timer_create(CLOCK_MONOTONIC, &sev, &timer) != 0) return 0;
  ready = 1;
  return 1;
}

void arbor_watchdog_busy(void) {
  if (armed || !setup()) return;
  struct itimerspec its = {{0, TICK_NS}, {0, TICK_NS}};
  if (timer_settime(timer, 0, &its, NULL) == 0) armed = 1;
}

void arbor_watchdog_idle(void) {
  if (!armed) return;
  struct itimerspec its;
  memset(&its, 0, sizeof its);
  timer_settime(timer, 0, &its, NULL);
  armed = 0;
}

/* The coarse clock is cheap, and close enough: the tick comes every 250 ms. */
static uint64_t coarse_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void arbor_watchdog_enter(lua_State *co, double limit) {
  atomic_store_explicit(&limit_ns, limit > 0 ? (uint64_t)(limit * 1e9) : 0,
                        relaxed);
  atomic_store_explicit(&since, coarse_ns(), relaxed);
  atomic_store_explicit(&running, co, memory_order_release);
}

void arbor_watchdog_leave(lua_State *co) {
  atomic_store(&running, NULL);
  if (atomic_load_explicit(&fired, relaxed)) {
    lua_sethook(co, NULL, 0, 0);
    atomic_store_explicit(&fired, 0, relaxed);
  }
}

void arbor_watchdog_push(arbor_watch *saved, lua_State *L, double limit,
                         const char *message) {
  saved->co = atomic_exchange(&running, NULL);
  saved->since = atomic_load_explicit(&since, relaxed);
  saved->limit = atomic_load_explicit(&limit_ns, relaxed);
  saved->fired = atomic_load_explicit(&fired, relaxed);
  saved->what = what;
  atomic_store_explicit(&fired, 0, relaxed);
  what = message;
  arbor_watchdog_enter(L, limit);
}

void arbor_watchdog_pop(const arbor_watch *saved, lua_State *L) {
  atomic_store(&running, NULL);
  if (atomic_load_explicit(&fired, relaxed)) lua_sethook(L, NULL, 0, 0);
  what = saved->what;
  atomic_store_explicit(&fired, saved->fired, relaxed);
  atomic_store_explicit(&limit_ns, saved->limit, relaxed);
  atomic_store_explicit(&since, saved->since, relaxed);
  atomic_store_explicit(&running, saved->co, memory_order_release);
}

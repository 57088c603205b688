/* watchdog.c: see watchdog.h. */
#define _POSIX_C_SOURCE 200809L
#include "engine/watchdog.h"

#include <lauxlib.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TICK_NS 250000000L

static _Atomic(lua_State *) running;   /* the coroutine being resumed */
static _Atomic uint64_t since;        /* when its resume began, ns */
static _Atomic uint64_t limit_ns;     /* its limit, 0 for none */
static _Atomic int fired;             /* it passed its limit: hooked */
static int may_yield;                 /* a resume: the hook may yield it */
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

/* The coroutines resumed through arbor's coroutine.resume and
   coroutine.wrap (l_coroutine.c) that are running now, innermost last: a
   runnable (or a policy) may loop inside one of them, where a hook on the
   watched coroutine alone never runs. The tick hooks those of the current
   watch (from nested_base on) too. Deeper ones than NESTED_MAX are counted
   but not kept. */
#define NESTED_MAX 64
static lua_State *nested[NESTED_MAX];
static _Atomic int nnested;
static _Atomic int nested_base;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void arbor_watchdog_push_error(lua_State *L) {
  lua_pushfstring(L, what,
                  (int)((now_ns() - atomic_load(&since)) / 1000000u),
                  (int)(atomic_load(&limit_ns) / 1000000u));
}

/* Runs at every instruction of the watched coroutine once it passed its
   limit, of the coroutines it makes meanwhile (they inherit the hook) and of
   those it resumes (arbor_watchdog_resume).
   Yielding ends a resume for good: no pcall sees it. An error is caught by
   a pcall, but the hook raises again at the caller's next instruction, so
   every pcall on the way out is passed. */
static void runaway_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  if (!atomic_load_explicit(&fired, relaxed)) {
    lua_sethook(L, NULL, 0, 0); /* inherited from a watch that has ended */
    return;
  }
  if (may_yield && L == atomic_load_explicit(&running, relaxed) &&
      lua_isyieldable(L)) {
    lua_yield(L, 0);
    return;
  }
  arbor_watchdog_push_error(L);
  lua_error(L);
}

static void hook(lua_State *co) {
  lua_sethook(co, runaway_hook, LUA_MASKCOUNT, 1);
}

static void on_tick(int sig) {
  (void)sig;
  lua_State *co = atomic_load_explicit(&running, memory_order_acquire);
  uint64_t limit = atomic_load_explicit(&limit_ns, relaxed);
  if (!co || !limit || atomic_load(&fired)) return;
  if (now_ns() - atomic_load_explicit(&since, relaxed) < limit) return;
  atomic_store(&fired, 1);
  hook(co);
  int n = atomic_load_explicit(&nnested, memory_order_acquire);
  for (int i = atomic_load_explicit(&nested_base, relaxed);
       i < n && i < NESTED_MAX; i++)
    hook(nested[i]);
}

int arbor_watchdog_resume(lua_State *L, lua_State *co, int narg, int *nres) {
  int i = atomic_load_explicit(&nnested, relaxed);
  if (i < NESTED_MAX) nested[i] = co;
  atomic_store_explicit(&nnested, i + 1, memory_order_release);
  /* past its limit, a watch stops what it resumes too */
  if (lua_gethook(L) == runaway_hook && !lua_gethook(co)) hook(co);
  int st = lua_resume(co, L, narg, nres);
  atomic_store_explicit(&nnested, i, memory_order_release);
  return st;
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
  may_yield = 1;
  atomic_store_explicit(&nested_base, atomic_load_explicit(&nnested, relaxed),
                        relaxed);
  atomic_store_explicit(&limit_ns, limit > 0 ? (uint64_t)(limit * 1e9) : 0,
                        relaxed);
  atomic_store_explicit(&since, coarse_ns(), relaxed);
  atomic_store_explicit(&running, co, memory_order_release);
}

int arbor_watchdog_leave(lua_State *co) {
  atomic_store(&running, NULL);
  if (!atomic_load_explicit(&fired, relaxed)) return 0;
  lua_sethook(co, NULL, 0, 0);
  atomic_store_explicit(&fired, 0, relaxed);
  return 1;
}

void arbor_watchdog_push(arbor_watch *saved, lua_State *L, double limit,
                         const char *message) {
  saved->co = atomic_exchange(&running, NULL);
  saved->since = atomic_load_explicit(&since, relaxed);
  saved->limit = atomic_load_explicit(&limit_ns, relaxed);
  saved->fired = atomic_load_explicit(&fired, relaxed);
  saved->may_yield = may_yield;
  saved->nested_base = atomic_load_explicit(&nested_base, relaxed);
  saved->what = what;
  atomic_store_explicit(&fired, 0, relaxed);
  what = message;
  if (limit > 0) arbor_watchdog_busy();
  arbor_watchdog_enter(L, limit);
  may_yield = 0;
}

int arbor_watchdog_pop(const arbor_watch *saved, lua_State *L) {
  atomic_store(&running, NULL);
  int passed = atomic_load_explicit(&fired, relaxed);
  if (passed) lua_sethook(L, NULL, 0, 0);
  what = saved->what;
  may_yield = saved->may_yield;
  atomic_store_explicit(&nested_base, saved->nested_base, relaxed);
  atomic_store_explicit(&fired, saved->fired, relaxed);
  atomic_store_explicit(&limit_ns, saved->limit, relaxed);
  atomic_store_explicit(&since, saved->since, relaxed);
  if (saved->fired && saved->co) hook(saved->co); /* L may be that thread */
  atomic_store_explicit(&running, saved->co, memory_order_release);
  return passed;
}

static double loop_limit;

void arbor_watchdog_set_loop_limit(double limit) { loop_limit = limit; }

double arbor_watchdog_loop_limit(void) { return loop_limit; }

/* ---- stop signals while the loop is stuck --------------------------- */

static struct sigaction uv_int, uv_term; /* libuv's handlers */
static volatile sig_atomic_t unhandled;  /* a stop signal the loop has not
                                            handled yet */
static int guarding;

/* In front of libuv's handler, which only wakes the loop: when the loop has
   not handled the previous stop signal, it is stuck, and this one ends the
   process (the process guard then kills the supervised groups, as after a
   SIGKILL of arbor). */
static void on_stop_signal(int sig, siginfo_t *info, void *uctx) {
  if (unhandled) {
    static const char msg[] =
        "arbor: a second stop signal while the engine is stuck in one step: "
        "exiting now\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(sig == SIGINT ? 130 : 143);
  }
  unhandled = 1;
  struct sigaction *uv = sig == SIGINT ? &uv_int : &uv_term;
  if (uv->sa_flags & SA_SIGINFO) {
    uv->sa_sigaction(sig, info, uctx);
  } else if (uv->sa_handler == SIG_DFL) {
    signal(sig, SIG_DFL);
    raise(sig);
  } else if (uv->sa_handler != SIG_IGN) {
    uv->sa_handler(sig);
  }
}

void arbor_watchdog_signals_on(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_stop_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigfillset(&sa.sa_mask);
  unhandled = 0;
  if (sigaction(SIGINT, &sa, &uv_int) != 0) return;
  if (sigaction(SIGTERM, &sa, &uv_term) != 0) {
    sigaction(SIGINT, &uv_int, NULL);
    return;
  }
  guarding = 1;
}

void arbor_watchdog_signal_handled(void) { unhandled = 0; }

void arbor_watchdog_signals_off(void) {
  if (!guarding) return;
  sigaction(SIGINT, &uv_int, NULL);
  sigaction(SIGTERM, &uv_term, NULL);
  guarding = 0;
}

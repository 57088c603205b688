/* watchdog.c: see watchdog.h. */
#define _GNU_SOURCE /* SIGEV_THREAD_ID, gettid */
#include "engine/watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef sigev_notify_thread_id /* glibc 2.36 names only the union member */
#define sigev_notify_thread_id _sigev_un._tid
#endif

#define TICK_NS 100000000L

static _Atomic(lua_State *) running;   /* the coroutine being resumed */
static _Atomic uint64_t since;        /* the engine thread's own time when a
                                         tick first saw this watch, ns; 0:
                                         not seen yet */
static _Atomic uint64_t limit_ns;     /* its limit, 0 for none */
static _Atomic uint64_t ran_ns;       /* what it had run when it fired */
static _Atomic uint64_t last_own;     /* the own time the last tick read */
static _Atomic int fired;             /* it passed its limit: hooked */
static int may_yield;                 /* a resume: the hook may yield it */
static const char *what = "runaway runnable: ran %d ms without yielding "
                          "(limit %d ms)";
static timer_t timer;

/* The watched state is published by the store to `running` (release), read
   from `running` first (acquire); the other fields need no ordering of their
   own. Clearing `running` stays sequentially consistent: the tick must see
   it cleared before `fired` is read back. Locked stores on every resume cost
   more than the rest of the watchdog. The tick is a signal handler on the
   engine's own thread, so these orders are between it and the code it
   interrupted. */
#define relaxed memory_order_relaxed

static int ready, armed;
static pthread_t owner; /* the engine thread: the timer signals it */

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

/* ---- the engine thread's own time ------------------------------------ */

/* A limit counts the time the engine thread runs or is blocked in a system
   call, not the time it waits for a CPU: real time minus the thread's
   run-queue wait (the second field of /proc/thread-self/schedstat), so a
   loaded machine never turns a long job into a runaway, and a loop of
   blocking calls is still stopped. Without schedstat, the thread's CPU
   time. Both are read by the tick only: reading either costs microseconds,
   too much for every resume. */
static int sched_fd = -1;
static clockid_t cpu_clock;

/* Reads the unsigned decimal at *p, moving *p past it and the blanks after
   it; -1 when there is none. Async-signal-safe (the tick calls it). */
static int64_t read_u64(const char **p) {
  const char *s = *p;
  if (*s < '0' || *s > '9') return -1;
  uint64_t v = 0;
  while (*s >= '0' && *s <= '9') v = v * 10 + (uint64_t)(*s++ - '0');
  while (*s == ' ') s++;
  *p = s;
  return (int64_t)v;
}

/* The engine thread's run-queue wait so far, ns, from its schedstat; -1
   when it cannot be read. */
static int64_t run_queue_ns(void) {
  char buf[96];
  ssize_t n = pread(sched_fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return -1;
  buf[n] = 0;
  const char *p = buf;
  if (read_u64(&p) < 0) return -1; /* its CPU time */
  return read_u64(&p);
}

/* The clock's time in ns, 0 when it cannot be read. */
static uint64_t clock_ns(clockid_t clock) {
  struct timespec ts;
  if (clock_gettime(clock, &ts) != 0) return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The engine thread's own time, ns (never 0), or 0 when it cannot be read.
   Called by the tick, on the engine thread: the thread runs, so its
   run-queue wait is counted up to now; the real time is read first, so a
   preemption in between makes the time shorter, never longer. */
static uint64_t own_ns(void) {
  if (sched_fd < 0) return clock_ns(cpu_clock);
  uint64_t now = clock_ns(CLOCK_MONOTONIC);
  int64_t wait = run_queue_ns();
  if (!now || wait < 0 || (uint64_t)wait >= now) return 0;
  return now - (uint64_t)wait;
}

void arbor_watchdog_push_error(lua_State *L) {
  lua_pushfstring(L, what,
                  (int)(atomic_load_explicit(&ran_ns, relaxed) / 1000000u),
                  (int)(atomic_load_explicit(&limit_ns, relaxed) / 1000000u));
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

/* The current watch passed its limit after `ran` ns: hooks its coroutine
   and those it resumed. */
static void fire(lua_State *co, uint64_t ran) {
  atomic_store_explicit(&ran_ns, ran, relaxed);
  atomic_store(&fired, 1);
  hook(co);
  int n = atomic_load_explicit(&nnested, memory_order_acquire);
  for (int i = atomic_load_explicit(&nested_base, relaxed);
       i < n && i < NESTED_MAX; i++)
    hook(nested[i]);
}

/* The tick: the first tick that sees a watch notes the engine thread's own
   time; a later one that finds it past its limit hooks its coroutines. A
   watch is thus stopped between its limit and its limit plus two ticks
   (the watches it is nested in are checked when it ends). */
static void on_tick(int sig) {
  (void)sig;
  int saved_errno = errno;
  lua_State *co = atomic_load_explicit(&running, memory_order_acquire);
  if (!co || atomic_load(&fired)) goto out;
  uint64_t now = own_ns();
  if (!now) goto out;
  atomic_store_explicit(&last_own, now, relaxed);
  uint64_t start = atomic_load_explicit(&since, relaxed);
  if (!start) { /* noted even without a limit: an outer watch inherits it */
    atomic_store_explicit(&since, now, relaxed);
    goto out;
  }
  uint64_t limit = atomic_load_explicit(&limit_ns, relaxed);
  if (limit && now - start >= limit) fire(co, now - start);
out:
  errno = saved_errno;
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

/* Opens what measures the calling thread's own time. */
static void own_open(void) {
  if (sched_fd >= 0) close(sched_fd);
  sched_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  if (sched_fd >= 0 && run_queue_ns() < 0) {
    close(sched_fd);
    sched_fd = -1;
  }
  if (pthread_getcpuclockid(pthread_self(), &cpu_clock) != 0)
    cpu_clock = CLOCK_THREAD_CPUTIME_ID;
}

/* Creates the timer, which signals the calling thread (the engine's), and
   the signal handler, once per thread that runs an engine: libuv's and
   the log files' threads never get the tick. */
static int setup(void) {
  pthread_t self = pthread_self();
  if (ready && pthread_equal(owner, self)) return ready > 0;
  if (ready > 0) {
    timer_delete(timer);
    armed = 0;
  }
  ready = -1;
  owner = self;
  int signo = SIGRTMIN + 5;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_tick;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(signo, &sa, NULL) != 0) return 0;
  own_open();
  struct sigevent sev;
  memset(&sev, 0, sizeof sev);
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = signo;
  sev.sigev_notify_thread_id = gettid();
  if (timer_create(CLOCK_MONOTONIC, &sev, &timer) != 0) return 0;
  ready = 1;
  return 1;
}

void arbor_watchdog_busy(void) {
  if (!setup() || armed) return;
  struct itimerspec its = {{0, TICK_NS}, {0, TICK_NS}};
  if (timer_settime(timer, 0, &its, NULL) == 0) armed = 1;
}

void arbor_watchdog_idle(void) {
  if (!armed || !pthread_equal(owner, pthread_self())) return;
  struct itimerspec its;
  memset(&its, 0, sizeof its);
  timer_settime(timer, 0, &its, NULL);
  armed = 0;
}

void arbor_watchdog_enter(lua_State *co, double limit) {
  may_yield = 1;
  atomic_store_explicit(&nested_base, atomic_load_explicit(&nnested, relaxed),
                        relaxed);
  atomic_store_explicit(&limit_ns, limit > 0 ? (uint64_t)(limit * 1e9) : 0,
                        relaxed);
  atomic_store_explicit(&since, 0, relaxed); /* the next tick notes it */
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
  saved->ran = atomic_load_explicit(&ran_ns, relaxed);
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
  /* the outer watch has run at least since a tick saw this one */
  uint64_t inner = atomic_load_explicit(&since, relaxed);
  uint64_t start = saved->since ? saved->since : inner;
  if (passed) lua_sethook(L, NULL, 0, 0);
  what = saved->what;
  may_yield = saved->may_yield;
  atomic_store_explicit(&nested_base, saved->nested_base, relaxed);
  atomic_store_explicit(&fired, saved->fired, relaxed);
  atomic_store_explicit(&limit_ns, saved->limit, relaxed);
  atomic_store_explicit(&since, start, relaxed);
  atomic_store_explicit(&ran_ns, saved->ran, relaxed);
  if (saved->fired && saved->co) {
    hook(saved->co); /* L may be that thread */
  } else if (saved->co && saved->limit && start) {
    /* the ticks that came meanwhile saw only this watch: a code that spends
       its time in watched calls (a log sink) is stopped all the same, at the
       end of one */
    uint64_t last = atomic_load_explicit(&last_own, relaxed);
    if (last > start && last - start >= saved->limit)
      fire(saved->co, last - start);
  }
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

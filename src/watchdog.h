/* watchdog.h: stops runaway runnables (T7: a stuck node never blocks the
 * engine forever).
 *
 * One thread runs every coroutine, so a runnable that loops without yielding
 * would freeze the whole tree. While the engine is busy, a timer ticks every
 * quarter second; when one resume has run longer than its limit, the tick's
 * signal handler sets a hook on that coroutine (lua.c's way to interrupt a
 * script: lua_sethook is async-signal-safe) and the hook raises an error at
 * the runnable's next instruction. While the loop sleeps the timer is off,
 * so an idle engine gets no wakeups from it.
 */
#ifndef ARBOR_WATCHDOG_H
#define ARBOR_WATCHDOG_H

#include <lua.h>

/* The engine has work to do: tick while it runs. */
void arbor_watchdog_busy(void);
/* The engine is about to wait: stop ticking. */
void arbor_watchdog_idle(void);
/* co is resumed now and may run `limit` seconds (0: no limit). */
void arbor_watchdog_enter(lua_State *co, double limit);
/* The resume of co returned; removes the hook if the watchdog set one. */
void arbor_watchdog_leave(lua_State *co);

/* Watches a call on L (a policy, a subscriber) for `limit` seconds, nested
   in whatever was watched: push saves that, pop restores it. The error
   raised past the limit is `message`, formatted with the milliseconds run
   and the limit. */
typedef struct arbor_watch {
  lua_State *co;
  uint64_t since, limit;
  int fired;
  const char *what;
} arbor_watch;
void arbor_watchdog_push(arbor_watch *saved, lua_State *L, double limit,
                         const char *message);
void arbor_watchdog_pop(const arbor_watch *saved, lua_State *L);

#endif

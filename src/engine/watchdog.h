/* watchdog.h: stops runaway runnables, policies and subscribers (T7: a
 * stuck node never blocks the engine forever), and ends arbor when a
 * SIGINT or SIGTERM comes while the previous one is still unhandled.
 *
 * One thread runs every coroutine, so a runnable that loops without yielding
 * would freeze the whole tree. While the engine is busy, a timer signals the
 * engine thread every 100 ms; when one resume (or call) has run longer than
 * its limit, the tick's signal handler sets a hook on that coroutine (lua.c's
 * way to interrupt a script: lua_sethook is async-signal-safe). Limits count
 * the engine thread's own time: real time minus the time it waited for a
 * CPU, so a loaded machine does not make a long job a runaway. From then on the
 * hook runs at every instruction until the resume or call returns: where the
 * watched coroutine can yield it yields, which no pcall can catch, and the
 * engine ends the incarnation; elsewhere (inside a C function calling Lua,
 * a policy) it raises, again at the next instruction after a pcall caught
 * it, until the code is back where it can yield or the call returned. While
 * the loop sleeps the timer is off, so an idle engine gets no wakeups.
 */
#ifndef ARBOR_WATCHDOG_H
#define ARBOR_WATCHDOG_H

#include <lua.h>
#include <stdint.h>

/* The engine has work to do: tick while it runs. */
void arbor_watchdog_busy(void);
/* The engine is about to wait: stop ticking. */
void arbor_watchdog_idle(void);
/* co is resumed now and may run `limit` seconds (0: no limit). */
void arbor_watchdog_enter(lua_State *co, double limit);
/* The resume of co returned; removes the hook. Returns 1 when the limit
   was passed: a resume that returned LUA_YIELD was then stopped by the
   hook (not a yield of the runnable), and one that ended in an error may
   have been ended by the hook's error. */
int arbor_watchdog_leave(lua_State *co);
/* Pushes the error of the last watch that passed its limit onto L.
   [-0, +1, m] */
void arbor_watchdog_push_error(lua_State *L);

/* Watches a call on L (a policy, a subscriber, a <close> variable) for
   `limit` seconds (0: no limit), nested in whatever was watched: push saves
   that, pop restores it and returns 1 when this call passed its limit. The
   error raised past the limit is `message`, formatted with the
   milliseconds run and the limit. */
typedef struct arbor_watch {
  lua_State *co;
  uint64_t since, limit, ran;
  int fired, may_yield, nested_base;
  const char *what;
} arbor_watch;
void arbor_watchdog_push(arbor_watch *saved, lua_State *L, double limit,
                         const char *message);
int arbor_watchdog_pop(const arbor_watch *saved, lua_State *L);

/* lua_resume(co, L, narg, nres) for coroutine.resume and coroutine.wrap
   (l_coroutine.c): while co runs, a watch that passes its limit stops co
   too, and a watch past its limit already stops co at once. */
int arbor_watchdog_resume(lua_State *L, lua_State *co, int narg, int *nres);

/* The limit of Lua code the loop runs between the engine's steps (luv
   callbacks): the runaway limit of the tree being run, 0 for none. */
void arbor_watchdog_set_loop_limit(double limit);
double arbor_watchdog_loop_limit(void);

/* Installs arbor's own SIGINT and SIGTERM handler in front of libuv's
   (call after uv_signal_start): a signal that comes while the previous one
   has not been handled by the loop yet (the engine is stuck in one step:
   a long C call, a __gc) ends the process at once with status 130
   (SIGINT) or 143 (SIGTERM). */
void arbor_watchdog_signals_on(void);
/* The loop handled the signals received so far (its signal callback). */
void arbor_watchdog_signal_handled(void);
/* Gives the signals back to libuv (call before uv_signal_stop). */
void arbor_watchdog_signals_off(void);

#endif

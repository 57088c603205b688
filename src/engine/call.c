/* call.c: calling user code (policies, subscribers, the log sink, defers,
 * error objects' __tostring) under the engine's time budget. */
#include "engine/internal.h"

#include "engine/watchdog.h"

/* Calls the function on top of L with nargs under the time budget (the
   watchdog interrupts it past e->budget seconds). A count hook would be
   deterministic, but it makes every Lua instruction of every policy call
   several times dearer, and policies run at every restart.
   [-(nargs+1), +1, -]: pushes the result or the error message. */
int arbor__call_budget(arbor_engine *e, lua_State *L, int nargs) {
  arbor_watch saved;
  arbor_watchdog_push(&saved, L, e->budget,
                      "time budget exceeded: ran %d ms (limit %d ms)");
  int st = lua_pcall(L, nargs, 1, 0);
  arbor_watchdog_pop(&saved, L);
  return st;
}

/* slice.c: REPL evaluations in slices (C2). core.slice resumes an
 * evaluation coroutine with a count hook that yields back to the caller
 * every `quantum` instructions (Lua 5.4 hooks may yield), so the control
 * server runs a runaway evaluation a little at a time between loop turns
 * and the tree never freezes. Where the coroutine cannot yield (inside a C
 * function calling back into Lua, or a coroutine it made) the hook counts
 * instead and raises past slice_limit.
 */
#include <lauxlib.h>

void arbor_open_slice(lua_State *L);

static lua_State *slice_co;   /* the evaluation being run */
static long slice_stuck;      /* instructions run where it cannot yield */
static long slice_stuck_limit = 100000000;
static int slice_quantum;
static int slice_yielded;    /* the hook yielded (not the code) */

static void slice_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  if (!slice_co) { /* a coroutine made by an evaluation, run later */
    lua_sethook(L, NULL, 0, 0);
    return;
  }
  if (L == slice_co && lua_isyieldable(L)) {
    slice_yielded = 1;
    lua_yield(L, 0); /* back to the loop; resumed at the next slice */
    return;
  }
  slice_stuck += slice_quantum;
  if (slice_stuck > slice_stuck_limit)
    luaL_error(L, "evaluation stopped: ran %d instructions in a call that "
                  "cannot be interrupted (inside a C function such as "
                  "table.sort or string.gsub, or a nested coroutine)",
               (int)slice_stuck);
}

/* core.slice(co, quantum, ...) -> "slice" | "yield", ... | "return", ... |
   "error", err. Resumes co with the values; the count hook yields back here
   every quantum instructions, so one call runs about quantum instructions
   of co. */
static int l_slice(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  luaL_argexpected(L, co, 1, "thread");
  int quantum = (int)luaL_checkinteger(L, 2);
  luaL_argcheck(L, quantum > 0, 2, "want a positive instruction count");
  int nargs = lua_gettop(L) - 2;
  int st = lua_status(co);
  if (st != LUA_YIELD && !(st == LUA_OK && lua_gettop(co) > 0))
    return luaL_error(L, "slice: the coroutine cannot be resumed");
  luaL_checkstack(co, nargs, "slice: too many arguments");
  lua_xmove(L, co, nargs);
  lua_State *prev_co = slice_co;
  long prev_stuck = slice_stuck;
  int prev_quantum = slice_quantum;
  slice_co = co;
  slice_stuck = 0;
  slice_quantum = quantum;
  slice_yielded = 0;
  lua_sethook(co, slice_hook, LUA_MASKCOUNT, quantum);
  int nres = 0;
  st = lua_resume(co, L, nargs, &nres);
  lua_sethook(co, NULL, 0, 0);
  int hooked = slice_yielded;
  slice_yielded = 0;
  slice_co = prev_co;
  slice_stuck = prev_stuck;
  slice_quantum = prev_quantum;
  lua_settop(L, 0);
  if (st == LUA_OK) {
    lua_pushliteral(L, "return");
  } else if (st == LUA_YIELD) {
    lua_pushstring(L, hooked ? "slice" : "yield");
  } else {
    lua_pushliteral(L, "error");
    lua_xmove(co, L, 1);
    return 2;
  }
  luaL_checkstack(L, nres, "slice: too many results");
  lua_xmove(co, L, nres);
  return nres + 1;
}

/* core.slice_limit(n): instructions an evaluation may run where it cannot
   yield (tests lower it). Returns the previous value. */
static int l_slice_limit(lua_State *L) {
  long prev = slice_stuck_limit;
  if (!lua_isnoneornil(L, 1)) {
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n > 0, 1, "want a positive instruction count");
    slice_stuck_limit = (long)n;
  }
  lua_pushinteger(L, prev);
  return 1;
}

/* [-0, +0, m] adds core.slice and core.slice_limit to the table on top. */
void arbor_open_slice(lua_State *L) {
  static const luaL_Reg funcs[] = {
      {"slice", l_slice},
      {"slice_limit", l_slice_limit},
      {NULL, NULL},
  };
  luaL_setfuncs(L, funcs, 0);
}

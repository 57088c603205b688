/* slice.c: REPL evaluations in slices (C2). core.slice resumes an
 * evaluation coroutine with a count hook that yields back to the caller
 * every `quantum` instructions (Lua 5.4 hooks may yield), so the control
 * server runs a runaway evaluation a little at a time between loop turns
 * and the tree never freezes. Every instruction counts against the budget
 * the caller gives, also where the coroutine cannot yield (inside a C
 * function calling back into Lua, or in a coroutine it made: those inherit
 * the hook). Past the budget the hook runs at every instruction of whatever
 * thread of the evaluation runs: the evaluation's own coroutine yields
 * where it can, anything else raises, again at the next instruction after a
 * pcall caught it, so no pcall keeps the evaluation running.
 * core.slice_close closes a coroutine (its pending <close> variables run)
 * under a budget the same way.
 */
#include <lauxlib.h>

void arbor_open_slice(lua_State *L);

static lua_State *slice_co; /* the evaluation being run */
static long slice_left;     /* instructions it may still run */
static long slice_used;     /* instructions run in this call */
static int slice_quantum;
static int slice_yielded;   /* the hook yielded (not the code) */
static int slice_over;      /* the budget is spent */

static void slice_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  if (!slice_co) { /* a coroutine made by an evaluation, run later */
    lua_sethook(L, NULL, 0, 0);
    return;
  }
  if (!slice_over) {
    int count = lua_gethookcount(L);
    slice_used += count;
    if (count != slice_quantum) /* left by an evaluation that was over */
      lua_sethook(L, slice_hook, LUA_MASKCOUNT, slice_quantum);
    if (slice_used <= slice_left) {
      if (L == slice_co && lua_isyieldable(L)) {
        slice_yielded = 1;
        lua_yield(L, 0); /* back to the loop; resumed at the next slice */
      }
      return;
    }
    slice_over = 1;
  }
  if (lua_gethookcount(L) != 1) lua_sethook(L, slice_hook, LUA_MASKCOUNT, 1);
  if (L == slice_co && lua_isyieldable(L)) {
    slice_yielded = 1;
    lua_yield(L, 0);
    return;
  }
  luaL_error(L, "evaluation stopped: instruction budget exceeded");
}

/* The statics of one core.slice or core.slice_close, saved around a nested
   one. */
typedef struct slice_state {
  lua_State *co;
  long left, used;
  int quantum, yielded, over;
} slice_state;

static void slice_begin(slice_state *saved, lua_State *co, int quantum,
                        long left) {
  *saved = (slice_state){slice_co,      slice_left,    slice_used,
                         slice_quantum, slice_yielded, slice_over};
  slice_co = co;
  slice_left = left;
  slice_used = 0;
  slice_quantum = quantum;
  slice_yielded = slice_over = 0;
  lua_sethook(co, slice_hook, LUA_MASKCOUNT, quantum);
}

static void slice_end(const slice_state *saved, lua_State *co) {
  lua_sethook(co, NULL, 0, 0);
  slice_co = saved->co;
  slice_left = saved->left;
  slice_used = saved->used;
  slice_quantum = saved->quantum;
  slice_yielded = saved->yielded;
  slice_over = saved->over;
}

/* core.slice(co, quantum, budget, ...) -> kind, used, ...: resumes co with
   the values; the count hook yields back here every quantum instructions,
   so one call runs about quantum instructions of co. kind is "slice" (the
   hook yielded), "yield" and "return" (with the values), "error" (with the
   error) or "budget" (co ran `budget` instructions in all); used is the
   instructions run. */
static int l_slice(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  luaL_argexpected(L, co, 1, "thread");
  int quantum = (int)luaL_checkinteger(L, 2);
  luaL_argcheck(L, quantum > 0, 2, "want a positive instruction count");
  long budget = (long)luaL_checkinteger(L, 3);
  int nargs = lua_gettop(L) - 3;
  int st = lua_status(co);
  if (st != LUA_YIELD && !(st == LUA_OK && lua_gettop(co) > 0))
    return luaL_error(L, "slice: the coroutine cannot be resumed");
  luaL_checkstack(co, nargs, "slice: too many arguments");
  lua_xmove(L, co, nargs);
  slice_state saved;
  slice_begin(&saved, co, quantum, budget);
  int nres = 0;
  st = lua_resume(co, L, nargs, &nres);
  long used = slice_used;
  int hooked = slice_yielded, over = slice_over;
  slice_end(&saved, co);
  lua_settop(L, 0);
  if (over) {
    lua_pushliteral(L, "budget");
    lua_pushinteger(L, used);
    return 2;
  }
  if (st == LUA_OK) {
    lua_pushliteral(L, "return");
  } else if (st == LUA_YIELD) {
    lua_pushstring(L, hooked ? "slice" : "yield");
  } else {
    lua_pushliteral(L, "error");
    lua_pushinteger(L, used);
    lua_xmove(co, L, 1);
    return 3;
  }
  lua_pushinteger(L, used);
  luaL_checkstack(L, nres, "slice: too many results");
  lua_xmove(co, L, nres);
  return nres + 2;
}

/* core.slice_close(co, budget) -> true | false, err: coroutine.close under a
   budget: co's pending <close> variables run, stopped past `budget`
   instructions. */
static int l_slice_close(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  luaL_argexpected(L, co, 1, "thread");
  long budget = (long)luaL_checkinteger(L, 2);
  luaL_argcheck(L, budget > 0, 2, "want a positive instruction count");
  lua_Debug ar;
  if (co == L || (lua_status(co) == LUA_OK && lua_getstack(co, 0, &ar)))
    return luaL_error(L, "slice_close: the coroutine is running");
  slice_state saved;
  slice_begin(&saved, co, budget < 10000 ? (int)budget : 10000, budget);
  int st = lua_resetthread(co);
  slice_end(&saved, co);
  if (st == LUA_OK) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushboolean(L, 0);
  lua_xmove(co, L, 1);
  return 2;
}

/* [-0, +0, m] adds core.slice and core.slice_close to the table on top. */
void arbor_open_slice(lua_State *L) {
  static const luaL_Reg funcs[] = {
      {"slice", l_slice},
      {"slice_close", l_slice_close},
      {NULL, NULL},
  };
  luaL_setfuncs(L, funcs, 0);
}

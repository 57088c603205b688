/* l_coroutine.c: coroutine.resume and coroutine.wrap as Lua 5.4's own
 * (lcorolib.c), but resuming through the watchdog (arbor_watchdog_resume),
 * so a runnable or a policy that loops inside a coroutine it resumed is
 * stopped like one that loops in its own code (T7). require "arbor" puts
 * them in the global coroutine table.
 */
#include <lauxlib.h>

#include "lua/l_arbor.h"
#include "engine/watchdog.h"

/* Resumes co with narg values from L; moves its results (or its error) to
   L. Returns the number of results, or -1 with the error on top. */
static int auxresume(lua_State *L, lua_State *co, int narg) {
  if (!lua_checkstack(co, narg)) {
    lua_pushliteral(L, "too many arguments to resume");
    return -1;
  }
  lua_xmove(L, co, narg);
  int nres;
  int status = arbor_watchdog_resume(L, co, narg, &nres);
  if (status == LUA_OK || status == LUA_YIELD) {
    if (!lua_checkstack(L, nres + 1)) {
      lua_pop(co, nres);
      lua_pushliteral(L, "too many results to resume");
      return -1;
    }
    lua_xmove(co, L, nres);
    return nres;
  }
  lua_xmove(co, L, 1);
  return -1;
}

/* coroutine.resume(co, ...) -> true, ... | false, err */
static int l_resume(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  luaL_argexpected(L, co, 1, "coroutine");
  int r = auxresume(L, co, lua_gettop(L) - 1);
  if (r < 0) {
    lua_pushboolean(L, 0);
    lua_insert(L, -2);
    return 2;
  }
  lua_pushboolean(L, 1);
  lua_insert(L, -(r + 1));
  return r + 1;
}

/* The function coroutine.wrap returns: resumes its coroutine, raises its
   error (after closing its pending <close> variables, as lcorolib.c
   does). */
static int auxwrap(lua_State *L) {
  lua_State *co = lua_tothread(L, lua_upvalueindex(1));
  int r = auxresume(L, co, lua_gettop(L));
  if (r >= 0) return r;
  int st = lua_status(co);
  if (st != LUA_OK && st != LUA_YIELD) { /* an error in the coroutine */
    st = lua_resetthread(co);
    lua_xmove(co, L, 1);
  }
  if (st != LUA_ERRMEM && lua_type(L, -1) == LUA_TSTRING) {
    luaL_where(L, 1);
    lua_insert(L, -2);
    lua_concat(L, 2);
  }
  return lua_error(L);
}

/* coroutine.wrap(f) -> function */
static int l_wrap(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_State *co = lua_newthread(L);
  lua_pushvalue(L, 1);
  lua_xmove(L, co, 1);
  lua_pushcclosure(L, auxwrap, 1);
  return 1;
}

/* [-0, +0, m] adds core.resume and core.wrap to the table on top. */
void arbor_open_coroutine(lua_State *L) {
  static const luaL_Reg funcs[] = {
      {"resume", l_resume},
      {"wrap", l_wrap},
      {NULL, NULL},
  };
  luaL_setfuncs(L, funcs, 0);
}

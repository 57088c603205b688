/* l_defer.c: ctx:defer(v), the binding of engine/defer.c. */
#include <lauxlib.h>

#include "lua/l_arbor.h"

/* ctx:defer(v): v runs when this incarnation ends. Returns v. */
static int ctx_defer(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  if (!lua_isfunction(L, 2) &&
      luaL_getmetafield(L, 2, "__close") == LUA_TNIL)
    return arbor_dn_error(L, pn,
                          "ctx:defer(v): want a function or a value with a "
                          "__close metamethod, got %s",
                          luaL_typename(L, 2));
  lua_settop(L, 2);
  arbor_defer_push(L, pn, 2);
  return 1;
}

/* [-0, +0, m] adds defer to the ctx methods table on top. */
void arbor_open_defer(lua_State *L) {
  lua_pushcfunction(L, ctx_defer);
  lua_setfield(L, -2, "defer");
}

/* defer.c: what ctx:defer(v) records (lua/l_defer.c) runs when the
 * incarnation ends, for any reason
 * (return, error, cancellation, a forced close, the engine closing). v is a
 * function, or a value with a __close metamethod (a process handle, a luv
 * handle wrapped by the caller); they run last deferred first, after the
 * runnable's own <close> variables, on the engine's thread under the
 * instruction budget. An error is logged on the node and the rest still
 * run.
 */
#include <lauxlib.h>

#include "engine/internal.h"
#include "engine/clock.h"

/* registry[&defers_key] = { [lightuserdata pn] = {v1, v2, ...} } */
static const char defers_key = 'd';

/* Pushes the defers table. [-0, +1, m] */
static void push_defers(lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &defers_key) == LUA_TTABLE) return;
  lua_pop(L, 1);
  lua_newtable(L);
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &defers_key);
}

/* Records v (at idx) to run when pn's incarnation ends. */
void arbor_defer_push(lua_State *L, pnode *pn, int idx) {
  idx = lua_absindex(L, idx);
  push_defers(L);
  if (lua_rawgetp(L, -1, pn) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, -3, pn);
  }
  lua_pushvalue(L, idx);
  lua_rawseti(L, -2, luaL_len(L, -2) + 1);
  lua_pop(L, 2);
  pn->pflags |= PN_DEFER;
}

void arbor__defer_run(arbor_engine *e, pnode *pn) {
  lua_State *L = e->L;
  pn->pflags &= (uint16_t)~PN_DEFER;
  push_defers(L);
  lua_rawgetp(L, -1, pn);
  lua_pushnil(L);
  lua_rawsetp(L, -3, pn);
  int list = lua_gettop(L);
  arbor_engine *prev = arbor__current;
  arbor__current = e;
  for (lua_Integer i = luaL_len(L, list); i >= 1; i--) {
    lua_rawgeti(L, list, i);
    if (!lua_isfunction(L, -1)) {
      if (luaL_getmetafield(L, -1, "__close") == LUA_TNIL) {
        lua_pop(L, 1);
        continue;
      }
      lua_insert(L, -2); /* __close(v, nil) */
      lua_pushnil(L);
      if (arbor__call_budget(e, L, 2) == LUA_OK) {
        lua_pop(L, 1);
        continue;
      }
    } else if (arbor__call_budget(e, L, 0) == LUA_OK) {
      lua_pop(L, 1);
      continue;
    }
    arbor_str *msg = arbor__failure_message(e, L, NULL);
    arbor_str *line = arbor_str_fmt("ctx:defer: %s", msg ? msg->s : "(error)");
    arbor_str_unref(msg);
    if (line) arbor_engine_log(e, pn, line);
    arbor_str_unref(line);
    lua_pop(L, 1);
  }
  arbor__current = prev;
  lua_settop(L, list - 2);
}

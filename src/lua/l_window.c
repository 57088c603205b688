/* l_window.c: core.intensity_count, the bookkeeping of the intensity
 * policy (lua/arbor/policy.lua) on the sliding-window counter of window.h.
 * In C because intensity decides at every restart of a storm and must cost
 * almost nothing next to the restart itself (spec/bench/policy.lua).
 */
#include <lauxlib.h>
#include <math.h>

#include "lua/l_arbor.h"
#include "core/window.h"

#define WINDOW_MT "arbor.Window"

/* The metatable of the windows kept in ev.memory (plain events), also
   under a pointer key: comparing by pointer is cheaper than by name. */
static const char window_mt_key = 'w';

/* core.intensity_count(ev, key, period) -> the failures within the window
   of `period` seconds, this one included. For the event the engine is
   deciding with, the window lives with the node's failure history (C, by
   period); for another table, in ev.memory[key] (nil when ev has no
   `memory`). A new window starts from the failure ring. One C call:
   intensity decides at every restart, and this is all its bookkeeping. */
static int l_intensity_count(lua_State *L) {
  double period = lua_tonumber(L, 3);
  arbor_engine *e = arbor_engine_current();
  if (e && e->policy_pn && e->policy_pn->failures && period > 0 &&
      lua_topointer(L, 1) == e->policy_ev) {
    /* the engine's own event: the window is kept with the node's failure
       history in C, which spares every table access */
    pnode *pn = e->policy_pn;
    pnode_hist *h = pn->failures;
    double now = arbor_engine_step_time(e);
    int made;
    arbor_window *w = arbor_window_of(&h->windows, period, now, &made);
    if (w) {
      if (made) /* from the ring: every failure but this one, the newest */
        for (unsigned i = 0; i + 1 < pn->nfail; i++)
          arbor_window_add(w, h->time[(pn->fail_start + i) % ARBOR_FAILURES], -1);
      lua_pushinteger(L, (lua_Integer)arbor_window_add(w, now, (int64_t)h->count));
      return 1;
    }
  }
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TSTRING);
  period = luaL_checknumber(L, 3);
  lua_settop(L, 3);
  if (lua_getfield(L, 1, "memory") != LUA_TTABLE) return lua_pushnil(L), 1;
  int isnum;
  lua_getfield(L, 1, "now"); /* 5 */
  double now = lua_tonumberx(L, 5, &isnum);
  if (!isnum || !isfinite(now)) now = 0;
  lua_getfield(L, 1, "failure"); /* 6 */
  int64_t id = lua_isinteger(L, 6) ? (int64_t)lua_tointeger(L, 6) : -1;
  lua_pushvalue(L, 2);
  arbor_window *w = lua_rawget(L, 4) == LUA_TUSERDATA ? lua_touserdata(L, -1)
                                                      : NULL; /* 7 */
  if (w) { /* check it is a window: memory is the user's table too */
    lua_getmetatable(L, 7);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &window_mt_key);
    if (!lua_rawequal(L, -1, -2)) w = NULL;
    lua_pop(L, 2);
  }
  if (!w) {
    if (!(period > 0) || !isfinite(period))
      return luaL_argerror(L, 3, "period: want a finite number > 0");
    w = lua_newuserdatauv(L, sizeof *w, 0);
    arbor_window_init(w, period, now);
    luaL_setmetatable(L, WINDOW_MT);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, -2);
    lua_rawset(L, 4);
    if (lua_getfield(L, 1, "failures") == LUA_TTABLE) {
      lua_Integer n = luaL_len(L, -1);
      for (lua_Integer i = 1; i < n; i++) { /* the last one is this failure */
        lua_rawgeti(L, -1, i);
        double t = lua_tonumberx(L, -1, &isnum);
        if (isnum && isfinite(t)) arbor_window_add(w, t, -1);
        lua_pop(L, 1);
      }
    }
  }
  lua_pushinteger(L, (lua_Integer)arbor_window_add(w, now, id));
  return 1;
}

/* [-0, +0, m] registers core.intensity_count in the table on top. */
void arbor_open_window(lua_State *L) {
  luaL_newmetatable(L, WINDOW_MT);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &window_mt_key);
  lua_pushcfunction(L, l_intensity_count);
  lua_setfield(L, -2, "intensity_count");
}

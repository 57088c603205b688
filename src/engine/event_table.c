/* event_table.c: events as Lua tables, for the subscribers (deliver.c)
 * and for e:events (lua/l_view.c), and the DN cache they share with the log
 * sink (log.c).
 */
#include <lauxlib.h>
#include <stdio.h>

#include "core/gate.h"
#include "engine/internal.h"

void arbor__event_table_dn(arbor_engine *e, lua_State *L, pnode *pn) {
  if (e->dn_pn == pn) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, e->dn_ref);
    return;
  }
  arbor_push_dn(L, &pn->n);
  lua_pushvalue(L, -1);
  if (e->dn_ref == LUA_NOREF)
    e->dn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  else
    lua_rawseti(L, LUA_REGISTRYINDEX, e->dn_ref);
  e->dn_pn = pn;
}

static void setint(lua_State *L, const char *k, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, k);
}

static void setnum(lua_State *L, const char *k, double v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}

void arbor_push_event_table(arbor_engine *e, lua_State *L,
                            const arbor_event *ev) {
  static const char *const kinds[] = {"state", "policy", "coordinator",
                                      "restored", "reload"};
  lua_createtable(L, 0, 8);
  setint(L, "seq", (lua_Integer)ev->seq);
  setnum(L, "time", ev->time);
  if (!e->virtual_clock && ev->wall > 0) setnum(L, "wall", ev->wall);
  arbor__event_table_dn(e, L, (pnode *)ev->node);
  lua_setfield(L, -2, "dn");
  setint(L, "incarnation", (lua_Integer)ev->incarnation);
  lua_pushstring(L, kinds[ev->kind]);
  lua_setfield(L, -2, "kind");
  if (ev->kind == ARBOR_EV_STATE) {
    lua_pushstring(L, arbor_state_name((arbor_state)ev->from));
    lua_setfield(L, -2, "from");
    lua_pushstring(L, arbor_state_name((arbor_state)ev->to));
    lua_setfield(L, -2, "to");
  } else if (ev->kind == ARBOR_EV_COORDINATOR) {
    lua_pushstring(L, arbor_gate_state_name((arbor_gate_state)ev->from));
    lua_setfield(L, -2, "from");
    lua_pushstring(L, arbor_gate_state_name((arbor_gate_state)ev->to));
    lua_setfield(L, -2, "to");
  }
  if (ev->reason) {
    lua_pushlstring(L, ev->reason->s, ev->reason->len);
    lua_setfield(L, -2, "reason");
  } else if (ev->delay == 0) { /* the common case, without snprintf */
    lua_pushliteral(L, "restart in 0s");
    lua_setfield(L, -2, "reason");
    setnum(L, "delay", ev->delay);
  } else if (ev->delay > 0) {
    char r[64];
    snprintf(r, sizeof r, "restart in %.6gs", ev->delay);
    lua_pushstring(L, r);
    lua_setfield(L, -2, "reason");
    setnum(L, "delay", ev->delay);
  }
}

void arbor_push_gap_table(lua_State *L, uint64_t first, uint64_t last,
                          double time) {
  lua_createtable(L, 0, 5);
  lua_pushliteral(L, "gap");
  lua_setfield(L, -2, "kind");
  setint(L, "missed", (lua_Integer)(last - first + 1));
  setint(L, "first", (lua_Integer)first);
  setint(L, "last", (lua_Integer)last);
  setnum(L, "time", time);
}

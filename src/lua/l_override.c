/* l_override.c: runtime changes that last (T13, issue 15). A runnable
 * swapped in or a policy set on a live tree (REPL, `arbor ctl`) is kept by
 * DN in the engine's override table: when the node's parent restarts and
 * creates the node again, the new node gets the override instead of what
 * the script gave. node:unswap() and node:set_policy(nil) go back to the
 * script's runnable and policy, as the script gave them at the node's last
 * creation. An entry: {fn = swapped runnable, policy = policy set,
 * script_fn = ..., script_policy = ... (nil: the default)}.
 *
 * e->noverrides is 0 in a tree nobody changed: creating a node then costs
 * one test (arbor_override_spawn).
 */
#include <lauxlib.h>

#include "engine/internal.h"
#include "lua/l_arbor.h"

/* Pushes pn's entry and returns 1; with create, makes it when missing
   (remembering pn's runnable and policy as the script's). Else pushes
   nothing and returns 0. */
static int push_entry(lua_State *L, arbor_engine *e, pnode *pn, int create) {
  if (e->overrides_ref == LUA_NOREF) {
    if (!create) return 0;
    lua_newtable(L);
    e->overrides_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, e->overrides_ref);
  arbor_push_dn(L, &pn->n);
  lua_pushvalue(L, -1);
  if (lua_rawget(L, -3) == LUA_TTABLE || !create) {
    int found = lua_istable(L, -1);
    if (found) {
      lua_replace(L, -3);
      lua_pop(L, 1);
    } else {
      lua_pop(L, 3);
    }
    return found;
  }
  lua_pop(L, 1);
  lua_createtable(L, 0, 4);
  lua_rawgeti(L, LUA_REGISTRYINDEX, pn->fn_ref);
  lua_setfield(L, -2, "script_fn");
  if (pn->policy_ref != LUA_NOREF) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, pn->policy_ref);
    lua_setfield(L, -2, "script_policy");
  }
  lua_pushvalue(L, -2);
  lua_pushvalue(L, -2);
  lua_rawset(L, -5); /* overrides[dn] = entry */
  e->noverrides++;
  lua_replace(L, -3);
  lua_pop(L, 1);
  return 1;
}

/* The entry on top has nothing overridden left: it goes. Pops it. Marks
   pn (PN_OVERRIDDEN) for views either way. */
static void drop_if_empty(lua_State *L, arbor_engine *e, pnode *pn) {
  int fn = lua_getfield(L, -1, "fn") != LUA_TNIL;
  int policy = lua_getfield(L, -2, "policy") != LUA_TNIL;
  lua_pop(L, 3);
  if (fn || policy) {
    pn->pflags |= PN_OVERRIDDEN;
    return;
  }
  pn->pflags &= (uint16_t)~PN_OVERRIDDEN;
  lua_rawgeti(L, LUA_REGISTRYINDEX, e->overrides_ref);
  arbor_push_dn(L, &pn->n);
  lua_pushnil(L);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  e->noverrides--;
}

/* pn's reference *ref now to the value on top (nil: LUA_NOREF). Pops it. */
static void set_fn(lua_State *L, arbor_engine *e, int *ref) {
  int r = lua_isnil(L, -1) ? LUA_NOREF : arbor_engine_ref_fn(e, L, -1);
  lua_pop(L, 1);
  arbor_engine_unref_fn(e, *ref);
  *ref = r;
}

void arbor_override_spawn(lua_State *L, pnode *c, int fn_idx, int policy_idx) {
  arbor_engine *e = pn_engine(c);
  if (e->noverrides == 0) return;
  fn_idx = lua_absindex(L, fn_idx);
  if (policy_idx) policy_idx = lua_absindex(L, policy_idx);
  if (!push_entry(L, e, c, 0)) return;
  lua_pushvalue(L, fn_idx); /* the script's, as it gave them this time */
  lua_setfield(L, -2, "script_fn");
  if (policy_idx)
    lua_pushvalue(L, policy_idx);
  else
    lua_pushnil(L);
  lua_setfield(L, -2, "script_policy");
  if (lua_getfield(L, -1, "fn") != LUA_TNIL)
    set_fn(L, e, &c->fn_ref);
  else
    lua_pop(L, 1);
  if (lua_getfield(L, -1, "policy") != LUA_TNIL)
    set_fn(L, e, &c->policy_ref);
  else
    lua_pop(L, 1);
  lua_pop(L, 1);
  c->pflags |= PN_OVERRIDDEN;
}

void arbor_override_push_script_fn(lua_State *L, pnode *pn) {
  arbor_engine *e = pn_engine(pn);
  if (e->noverrides > 0 && push_entry(L, e, pn, 0)) {
    lua_getfield(L, -1, "script_fn");
    lua_replace(L, -2);
    return;
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, pn->fn_ref);
}

void arbor_override_drop(lua_State *L, pnode *pn) {
  arbor_engine *e = pn_engine(pn);
  if (e->noverrides == 0 || !push_entry(L, e, pn, 0)) return;
  lua_pushnil(L);
  lua_setfield(L, -2, "fn");
  lua_pushnil(L);
  lua_setfield(L, -2, "policy");
  drop_if_empty(L, e, pn);
}

static void event(arbor_engine *e, pnode *pn, const char *what) {
  arbor_str *r = arbor_str_fmt("%s", what);
  arbor_engine_event(e, pn, ARBOR_EV_POLICY, r);
  arbor_str_unref(r);
}

/* Restarts pn when the argument at idx is true (a swap's restart option). */
static void restart_if(lua_State *L, arbor_engine *e, pnode *pn, int idx,
                       const char *what) {
  if (!lua_toboolean(L, idx)) return;
  const char *err = NULL;
  if (arbor_engine_restart(e, pn, &err) < 0)
    luaL_error(L, "%s %s: %s", what, lua_tostring(L, 2), err);
}

void arbor_override_swap(lua_State *L, pnode *pn, int idx) {
  arbor_engine *e = pn_engine(pn);
  idx = lua_absindex(L, idx);
  push_entry(L, e, pn, 1);
  lua_pushvalue(L, idx);
  lua_setfield(L, -2, "fn");
  lua_pop(L, 1);
  pn->pflags |= PN_OVERRIDDEN;
  lua_pushvalue(L, idx);
  set_fn(L, e, &pn->fn_ref);
}

/* e:swap(dn, fn, restart) */
static int l_swap(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  pnode *pn = arbor_check_node(L, e, 2);
  if (!lua_isfunction(L, 3))
    return luaL_error(L, "swap %s: the runnable must be a function, got %s",
                      lua_tostring(L, 2), luaL_typename(L, 3));
  arbor_override_swap(L, pn, 3);
  event(e, pn, "runnable swapped");
  restart_if(L, e, pn, 4, "swap");
  return 0;
}

/* e:unswap(dn, restart): back to the script's runnable. */
static int l_unswap(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  pnode *pn = arbor_check_node(L, e, 2);
  if (!push_entry(L, e, pn, 0) || lua_getfield(L, -1, "fn") == LUA_TNIL)
    return luaL_error(L, "unswap %s: no runnable swapped in", lua_tostring(L, 2));
  lua_pop(L, 1);
  lua_pushnil(L);
  lua_setfield(L, -2, "fn");
  lua_getfield(L, -1, "script_fn");
  set_fn(L, e, &pn->fn_ref);
  lua_pushvalue(L, -1);
  drop_if_empty(L, e, pn);
  lua_pop(L, 1);
  event(e, pn, "runnable restored (the script's)");
  restart_if(L, e, pn, 3, "unswap");
  return 0;
}

/* e:set_policy(dn, p); nil goes back to the script's policy. */
static int l_set_policy(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  pnode *pn = arbor_check_node(L, e, 2);
  if (!lua_isnoneornil(L, 3) && !lua_isfunction(L, 3))
    return luaL_error(L, "set_policy %s: the policy must be a function, got %s",
                      lua_tostring(L, 2), luaL_typename(L, 3));
  int restore = lua_isnoneornil(L, 3);
  if (restore && !push_entry(L, e, pn, 0)) return 0; /* the script's already */
  if (!restore) push_entry(L, e, pn, 1);
  lua_pushvalue(L, 3);
  lua_setfield(L, -2, "policy");
  if (restore)
    lua_getfield(L, -1, "script_policy");
  else
    lua_pushvalue(L, 3);
  set_fn(L, e, &pn->policy_ref);
  drop_if_empty(L, e, pn);
  event(e, pn, restore ? "policy restored (the script's)" : "policy replaced");
  return 0;
}

/* e:overridden(dn) -> {runnable = true, policy = true} | nil */
static int l_overridden(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  pnode *pn = arbor_check_node(L, e, 2);
  if (e->noverrides == 0 || !push_entry(L, e, pn, 0)) return 0;
  lua_createtable(L, 0, 2);
  if (lua_getfield(L, -2, "fn") != LUA_TNIL) {
    lua_pushboolean(L, 1);
    lua_setfield(L, -3, "runnable");
  }
  lua_pop(L, 1);
  if (lua_getfield(L, -2, "policy") != LUA_TNIL) {
    lua_pushboolean(L, 1);
    lua_setfield(L, -3, "policy");
  }
  lua_pop(L, 1);
  return 1;
}

/* e:override(dn) -> fn, policy: the runnable and the policy swapped in at
   runtime for dn (nil: the script's). */
static int l_override(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  pnode *pn = arbor_check_node(L, e, 2);
  if (e->noverrides == 0 || !push_entry(L, e, pn, 0)) return 0;
  lua_getfield(L, -1, "fn");
  lua_getfield(L, -2, "policy");
  return 2;
}

/* e:remove(dn): node:remove, stops the node (held) and removes it once its
   subtree has exited; its overrides go now. */
static int l_remove(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  pnode *pn = arbor_check_node(L, e, 2);
  const char *err = arbor_engine_remove_check(pn);
  if (err) return luaL_error(L, "remove %s: %s", lua_tostring(L, 2), err);
  arbor_override_drop(L, pn);
  arbor_engine_remove(e, pn);
  return 0;
}

void arbor_open_override(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"swap", l_swap},
      {"unswap", l_unswap},
      {"set_policy", l_set_policy},
      {"overridden", l_overridden},
      {"override", l_override},
      {"remove", l_remove},
      {NULL, NULL},
  };
  arbor_engine_methods(L, methods);
}

/* l_strategy.c: the options of group strategies and significant children
 * (strategy.c) as ctx:run / ctx:group / start options, checked before
 * anything changes.
 */
#include <lauxlib.h>
#include <string.h>

#include "lua/l_arbor.h"

static int pick(lua_State *L, const char *const names[], const char *key,
                const pnode *where, const char *what) {
  const char *v = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
  for (int i = 0; v && names[i]; i++)
    if (strcmp(v, names[i]) == 0) return i;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 0; names[i]; i++) {
    if (i) luaL_addstring(&b, ", ");
    luaL_addchar(&b, '"');
    luaL_addstring(&b, names[i]);
    luaL_addchar(&b, '"');
  }
  luaL_pushresult(&b);
  const char *got = v ? arbor_push_cut(L, v, lua_rawlen(L, -2))
                      : luaL_typename(L, -2);
  arbor_dn_error(L, where, "%s: option '%s' must be one of %s, got %s%s%s",
                 what, key, lua_tostring(L, v ? -2 : -1), v ? "\"" : "", got,
                 v ? "\"" : "");
  return 0;
}

static int boolean(lua_State *L, const char *key, const pnode *where,
                   const char *what) {
  if (!lua_isboolean(L, -1))
    arbor_dn_error(L, where, "%s: option '%s' must be a boolean, got %s", what,
                   key, luaL_typename(L, -1));
  return lua_toboolean(L, -1);
}

int arbor_strategy_opt(lua_State *L, const char *key, arbor_child_opts *o,
                       const pnode *where, const char *what) {
  static const char *const strategies[] = {"one_for_all", "rest_for_one",
                                           "one_for_one", NULL};
  static const char *const autos[] = {"never", "any_significant",
                                      "all_significant", NULL};
  static const char *const stops[] = {"ordered", "parallel", NULL};
  if (strcmp(key, "strategy") == 0) {
    o->gflags = (o->gflags & ~GF_STRATEGY) | pick(L, strategies, key, where, what);
    o->grouping = 1;
  } else if (strcmp(key, "ordered") == 0) {
    if (boolean(L, key, where, what)) o->gflags |= GF_ORDERED;
    o->grouping = 1;
  } else if (strcmp(key, "significant") == 0) {
    if (boolean(L, key, where, what)) o->gflags |= GF_SIGNIFICANT;
  } else if (strcmp(key, "auto_shutdown") == 0) {
    o->gflags = (o->gflags & ~GF_AUTO) | (pick(L, autos, key, where, what) << 4);
  } else if (strcmp(key, "stop") == 0) { /* how its children stop (T12) */
    o->parallel = pick(L, stops, key, where, what);
  } else {
    return 0;
  }
  return 1;
}

void arbor_strategy_check(lua_State *L, const arbor_child_opts *o,
                          const pnode *where, const char *what) {
  if (o->grouping && strcmp(what, "ctx:group") != 0)
    arbor_dn_error(L, where,
                   "%s: options 'strategy' and 'ordered' are for ctx:group "
                   "(children of ctx:run are one_for_one)",
                   what);
  if ((o->gflags & GF_SIGNIFICANT) && strcmp(what, "ctx:group") == 0 &&
      (o->gflags & GF_STRATEGY) == GS_ONE_FOR_ALL)
    arbor_dn_error(L, where,
                   "%s: option 'significant' on a one_for_all group: its "
                   "members restart together, so one of them ending DONE is "
                   "undone by a sibling's death; use rest_for_one or "
                   "one_for_one, or make the group's parent significant",
                   what);
}

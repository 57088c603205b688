/* l_util.c: helpers shared by the bindings (declared in l_arbor.h): the
 * userdata type maker, messages that echo a caller's value cut short or
 * name a node, and the node lookup of the engine's methods.
 */
#include <lauxlib.h>
#include <stdarg.h>

#include "lua/l_arbor.h"

void arbor_new_type(lua_State *L, const char *name, const luaL_Reg *m,
                    lua_CFunction close) {
  luaL_newmetatable(L, name);
  lua_newtable(L);
  luaL_setfuncs(L, m, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, close);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, close);
  lua_setfield(L, -2, "__close");
  lua_pop(L, 1);
}

const char *arbor_push_cut(lua_State *L, const char *s, size_t len) {
  if (len <= ARBOR_CUT) return lua_pushlstring(L, s, len);
  size_t keep = ARBOR_CUT;
  while (keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80) keep--;
  lua_pushlstring(L, s, keep);
  lua_pushfstring(L, "... (%I bytes)", (lua_Integer)len);
  lua_concat(L, 2);
  return lua_tostring(L, -1);
}

int arbor_dn_error(lua_State *L, const pnode *pn, const char *fmt, ...) {
  va_list ap;
  luaL_where(L, 1);
  arbor_push_dn(L, &pn->n);
  lua_pushliteral(L, ": ");
  va_start(ap, fmt);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  lua_concat(L, 4);
  return lua_error(L);
}

pnode *arbor_check_node(lua_State *L, arbor_engine *e, int idx) {
  size_t len;
  const char *dn = luaL_checklstring(L, idx, &len);
  arbor_node *n = arbor_tree_find(&e->tree, dn, len);
  if (!n) luaL_error(L, "no node %s", arbor_push_cut(L, dn, len));
  return (pnode *)n;
}

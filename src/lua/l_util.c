/* l_util.c: helpers shared by the bindings (declared in l_arbor.h): the
 * userdata type maker, messages that echo a caller's value cut short or
 * name a node, the node lookup of the engine's methods, and the one shape
 * of runtime failures (nil, "ENAME: message", "ENAME").
 */
#define _GNU_SOURCE /* strerrorname_np */
#include <ctype.h>
#include <lauxlib.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

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

/* Pushes nil, "<ename>: <text: ><fmt...>", ename; text may be NULL. */
static void push_failv(lua_State *L, const char *ename, const char *text,
                       const char *fmt, va_list ap) {
  lua_pushnil(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addstring(&b, ename);
  if (text || fmt) luaL_addstring(&b, ": ");
  if (text) luaL_addstring(&b, text);
  if (text && fmt) luaL_addstring(&b, ": ");
  if (fmt) {
    lua_pushvfstring(L, fmt, ap);
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);
  lua_pushstring(L, ename);
}

int arbor_push_fail(lua_State *L, const char *ename, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  push_failv(L, ename, NULL, fmt, ap);
  va_end(ap);
  return 3;
}

/* libuv's words for a code it does not know. */
static int unknown(const char *s) {
  return strncmp(s, "Unknown system error", 20) == 0;
}

/* libuv's name of err, or glibc's for a code libuv does not know. */
const char *arbor_errname(int err, char *buf) {
  uv_err_name_r(err, buf, ARBOR_ERRNAME);
  if (unknown(buf)) {
    const char *name = err < 0 ? strerrorname_np(-err) : NULL;
    snprintf(buf, ARBOR_ERRNAME, "%s", name ? name : "EUNKNOWN");
  }
  return buf;
}

/* libuv's text for err (luv's), or strerror's when libuv has none, in
   libuv's lower case ("exec format error"). */
int arbor_push_errno(lua_State *L, int err, const char *fmt, ...) {
  char name[ARBOR_ERRNAME], text[128];
  uv_strerror_r(err, text, sizeof text);
  if (unknown(text)) {
    snprintf(text, sizeof text, "%s", strerror(-err));
    if (islower((unsigned char)text[1])) text[0] = (char)tolower(text[0]);
  }
  va_list ap;
  va_start(ap, fmt);
  push_failv(L, arbor_errname(err, name), text, fmt, ap);
  va_end(ap);
  return 3;
}

void arbor_engine_methods(lua_State *L, const luaL_Reg *m) {
  luaL_getmetatable(L, ARBOR_ENGINE_MT);
  lua_getfield(L, -1, "__index");
  luaL_setfuncs(L, m, 0);
  lua_pop(L, 2);
}

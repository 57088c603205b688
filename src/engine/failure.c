/* failure.c: what an incarnation leaves with: its error as a message, its
 * traceback, and the cancellation error value.
 */
#include "engine/internal.h"

#include <lauxlib.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The cancellation error: a unique table with a __tostring. */
static const char canceled_key = 'c';

static int canceled_tostring(lua_State *L) {
  lua_pushliteral(L, "canceled");
  return 1;
}

void arbor_push_canceled(lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &canceled_key) == LUA_TNIL) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_newtable(L);
    lua_pushcfunction(L, canceled_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, "arbor.canceled");
    lua_setfield(L, -2, "__name");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &canceled_key);
  }
}

int arbor_is_canceled(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  arbor_push_canceled(L);
  int r = lua_rawequal(L, idx, -1);
  lua_pop(L, 1);
  return r;
}

/* ---- resuming ------------------------------------------------------- */

/* [-0, +1, -] the error object at idx as a string, never raising. */
static int tostring_k(lua_State *L) {
  luaL_tolstring(L, 1, NULL);
  return 1;
}

/* s as a string, sharing `same` when it holds the same bytes: a crash loop
   repeats its error, and this spares an allocation per restart. */
static arbor_str *str_reuse(arbor_str *same, const char *s, size_t len) {
  if (same && same->len == len && memcmp(same->s, s, len) == 0)
    return arbor_str_ref(same);
  return arbor_str_new(s, len);
}

arbor_str *arbor__failure_message(arbor_engine *e, lua_State *co, pnode *pn) {
  size_t len;
  if (lua_type(co, -1) == LUA_TSTRING) {
    const char *s = lua_tolstring(co, -1, &len);
    return str_reuse(pn ? pn->error : NULL, s, len);
  }
  lua_State *L = e->L;
  if (luaL_getmetafield(co, -1, "__tostring") != LUA_TNIL) {
    lua_pop(co, 1);
    lua_pushvalue(co, -1);
    lua_xmove(co, L, 1); /* nothing to move when co is L */
    lua_pushcfunction(L, tostring_k);
    lua_insert(L, -2);
    /* user code: under the budget of policies */
    if (arbor__call_budget(e, L, 1) == LUA_OK &&
        lua_type(L, -1) == LUA_TSTRING) {
      const char *s = lua_tolstring(L, -1, &len);
      arbor_str *r = arbor_str_new(s, len);
      lua_pop(L, 1);
      return r;
    }
    lua_pop(L, 1);
    return arbor_str_fmt("(error object is a %s value whose __tostring failed)",
                         luaL_typename(co, -1));
  }
  if (lua_type(co, -1) == LUA_TNUMBER) {
    const char *s = lua_tolstring(co, -1, &len);
    return arbor_str_new(s, len);
  }
  return arbor_str_fmt("(error object is a %s value)", luaL_typename(co, -1));
}

/* Appends to a fixed buffer, truncating. */
typedef struct sbuf {
  char b[2048];
  size_t n;
} sbuf;

static void sb_add(sbuf *sb, const char *s, size_t len) {
  if (len > sizeof sb->b - 1 - sb->n) len = sizeof sb->b - 1 - sb->n;
  memcpy(sb->b + sb->n, s, len);
  sb->n += len;
}

static void sb_str(sbuf *sb, const char *s) { sb_add(sb, s, strlen(s)); }

static void sb_int(sbuf *sb, int v) {
  char tmp[16];
  size_t i = sizeof tmp;
  unsigned u = v < 0 ? 0u - (unsigned)v : (unsigned)v;
  do {
    tmp[--i] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0) tmp[--i] = '-';
  sb_add(sb, tmp + i, sizeof tmp - i);
}

/* The traceback of a dead (or stopped) coroutine, in luaL_traceback's
   format but without its search of package.loaded for function names (and
   without printf), which would cost more than the rest of a restart. A
   crash loop repeats its traceback: pn's last one is shared when equal. */
arbor_str *arbor__failure_traceback(lua_State *co, pnode *pn) {
  sbuf sb;
  sb.n = 0;
  lua_Debug ar;
  sb_str(&sb, "stack traceback:");
  for (int level = 0; lua_getstack(co, level, &ar); level++) {
    if (level >= 22) {
      sb_str(&sb, "\n\t...");
      break;
    }
    lua_getinfo(co, "Sln", &ar);
    sb_str(&sb, "\n\t");
    sb_str(&sb, ar.short_src);
    sb_str(&sb, ":");
    if (ar.currentline > 0) {
      sb_int(&sb, ar.currentline);
      sb_str(&sb, ":");
    }
    sb_str(&sb, " in ");
    if (ar.name) {
      sb_str(&sb, *ar.namewhat ? ar.namewhat : "function");
      sb_str(&sb, " '");
      sb_str(&sb, ar.name);
      sb_str(&sb, "'");
    } else if (*ar.what == 'm') {
      sb_str(&sb, "main chunk");
    } else if (*ar.what != 'C') {
      sb_str(&sb, "function <");
      sb_str(&sb, ar.short_src);
      sb_str(&sb, ":");
      sb_int(&sb, ar.linedefined);
      sb_str(&sb, ">");
    } else {
      sb_str(&sb, "?");
    }
  }
  return str_reuse(pn->trace, sb.b, sb.n);
}

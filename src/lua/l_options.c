/* l_options.c: unknown option names, all at once (issue 15: a typo fails
 * at the user's line, naming every bad option and what was meant).
 */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "lua/l_arbor.h"
#include "lua/l_options.h"

/* The optimal string alignment distance of a and b (an edit is an insert,
   a delete, a change or two neighbours swapped), or `cap` + 1 once it is
   past cap. Names are short: lengths past 64 are not worth comparing. */
static size_t distance(const char *a, size_t la, const char *b, size_t lb,
                       size_t cap) {
  if (la > 64 || lb > 64) return cap + 1;
  if ((la > lb ? la - lb : lb - la) > cap) return cap + 1;
  size_t d[65][65];
  for (size_t i = 0; i <= la; i++) d[i][0] = i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[la][lb];
}

/* The known name closest to s, when it is close: at most one edit in
   four letters of the known name (and at most two), or NULL. */
static const char *closest(const char *s, size_t len,
                           const char *const known[]) {
  const char *best = NULL;
  size_t best_d = 3;
  for (size_t i = 0; known[i]; i++) {
    size_t kl = strlen(known[i]);
    size_t cap = kl / 4 < 1 ? 1 : kl / 4 > 2 ? 2 : kl / 4;
    size_t d = distance(s, len, known[i], kl, cap);
    if (d <= cap && d < best_d) best = known[i], best_d = d;
  }
  return best;
}

static int is_known(const char *k, const char *const known[]) {
  for (size_t i = 0; known[i]; i++)
    if (strcmp(k, known[i]) == 0) return 1;
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int arbor_unknown_options(lua_State *L, int idx, const char *const known[]) {
  idx = lua_absindex(L, idx);
  size_t n = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING || !is_known(lua_tostring(L, -1), known))
      n++;
  }
  if (n == 0) return 0;
  /* the bad names, as the message shows them, in a table kept on the
     stack while they are sorted */
  int names = lua_gettop(L) + 1;
  lua_createtable(L, (int)n, 0);
  size_t i = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    int t = lua_type(L, -1);
    if (t == LUA_TSTRING && is_known(lua_tostring(L, -1), known)) continue;
    if (t == LUA_TSTRING) {
      size_t len;
      const char *s = lua_tolstring(L, -1, &len);
      const char *near = closest(s, len, known);
      lua_pushfstring(L, "'%s'", arbor_push_cut(L, s, len));
      lua_remove(L, -2);
      if (near) {
        lua_pushfstring(L, " (did you mean '%s'?)", near);
        lua_concat(L, 2);
      }
    } else {
      lua_pushvalue(L, -1);
      const char *s = luaL_tolstring(L, -1, NULL);
      lua_pushfstring(L, "[%s]", t == LUA_TNUMBER ? s : luaL_typename(L, -3));
      lua_remove(L, -2);
      lua_remove(L, -2);
    }
    lua_rawseti(L, names, (lua_Integer)++i);
  }
  const char **v = lua_newuserdatauv(L, n * sizeof *v, 0);
  for (i = 0; i < n; i++) {
    lua_rawgeti(L, names, (lua_Integer)i + 1);
    v[i] = lua_tostring(L, -1);
    lua_pop(L, 1); /* still referenced by the table */
  }
  qsort(v, n, sizeof *v, cmp_str);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addstring(&b, n == 1 ? "unknown option " : "unknown options ");
  for (i = 0; i < n; i++) {
    if (i) luaL_addstring(&b, ", ");
    luaL_addstring(&b, v[i]);
  }
  luaL_addstring(&b, "; known: ");
  for (i = 0; known[i]; i++) {
    if (i) luaL_addstring(&b, ", ");
    luaL_addstring(&b, known[i]);
  }
  luaL_pushresult(&b);
  lua_replace(L, names);
  lua_settop(L, names);
  return 1;
}

/* l_core.c: luaopen_arbor_core, the C module behind require "arbor". */
#include <lauxlib.h>
#include <unistd.h>

#include "engine/home.h"
#include "lua/l_arbor.h"
#include "lua/l_options.h"

#ifndef ARBOR_VERSION
#define ARBOR_VERSION "0.1.0"
#endif

/* core.hrtime(): monotonic nanoseconds (benchmarks). */
static int l_hrtime(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)uv_hrtime());
  return 1;
}

/* core.is_canceled(v): true when v is the cancellation error. */
static int l_is_canceled(lua_State *L) {
  lua_pushboolean(L, arbor_is_canceled(L, 1));
  return 1;
}

/* core.name_valid(s) (T2). */
static int l_name_valid(lua_State *L) {
  size_t len;
  const char *s = lua_tolstring(L, 1, &len);
  lua_pushboolean(L, s && lua_type(L, 1) == LUA_TSTRING &&
                         arbor_name_valid(s, len));
  return 1;
}

/* core.cut(v): tostring(v) cut for an error message (arbor_push_cut). */
static int l_cut(lua_State *L) {
  size_t len;
  const char *s = luaL_tolstring(L, 1, &len);
  arbor_push_cut(L, s, len);
  return 1;
}

/* core.unknown_options(opts, known) -> message | nil: "unknown options
   'a', 'b' (did you mean 'c'?); known: ..." when the table opts has keys
   not in the list known (strings, in the order to list them), as ctx:run
   reports them (arbor.exec uses it). */
static int l_unknown_options(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_Integer n = luaL_len(L, 2);
  const char **known = lua_newuserdatauv(L, ((size_t)n + 1) * sizeof *known, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, 2, i);
    known[i - 1] = luaL_checkstring(L, -1); /* kept alive by the list */
    lua_pop(L, 1);
  }
  known[n] = NULL;
  if (!arbor_unknown_options(L, 1, known)) lua_pushnil(L);
  return 1;
}

/* core.rss(): resident set size in bytes, from /proc/self/statm. */
static int l_rss(lua_State *L) {
  size_t rss = 0;
  uv_resident_set_memory(&rss);
  lua_pushinteger(L, (lua_Integer)rss);
  return 1;
}

/* core.getpid() */
static int l_getpid(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)getpid());
  return 1;
}

/* core.isatty(fd): true when fd is a terminal (arbor.term). */
static int l_isatty(lua_State *L) {
  lua_pushboolean(L, isatty((int)luaL_checkinteger(L, 1)));
  return 1;
}

static const luaL_Reg funcs[] = {
    {"cut", l_cut},
    {"getpid", l_getpid},
    {"hrtime", l_hrtime},
    {"is_canceled", l_is_canceled},
    {"isatty", l_isatty},
    {"name_valid", l_name_valid},
    {"rss", l_rss},
    {"unknown_options", l_unknown_options},
    {NULL, NULL},
};

int luaopen_arbor_core(lua_State *L) {
  luaL_newlib(L, funcs);
  arbor_open_engine(L);
  arbor_open_ctx(L); /* after arbor_open_engine: adds e:add_child */
  arbor_open_view(L);
  arbor_open_metrics(L);
  arbor_open_log(L);
  arbor_open_override(L);
  arbor_open_reload(L);
  arbor_open_reexec(L);
  arbor_open_control(L);
  arbor_open_conn(L);
  arbor_open_slice(L);
  arbor_open_exec(L);
  arbor_preload_luv(L);
  arbor_open_window(L);
  arbor_open_coroutine(L);
  arbor_open_sdnotify(L);
  luaL_getmetatable(L, ARBOR_CTX_MT);
  lua_getfield(L, -1, "methods");
  arbor_open_defer(L);
  lua_setfield(L, -3, "ctx_methods");
  lua_pop(L, 1);
  arbor_push_canceled(L);
  lua_setfield(L, -2, "canceled");
  lua_pushliteral(L, ARBOR_VERSION);
  lua_setfield(L, -2, "version");
  return 1;
}

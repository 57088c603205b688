/* home.c: the one libuv loop of a Lua state. Every real engine of the state
 * runs on it, and so does luv: `require "luv"` inside a runnable gets arbor's
 * loop (luv_set_loop before luv opens), so luv handles are served by the
 * same uv_run as the tree. When luv was loaded before arbor, arbor adopts
 * luv's loop instead.
 */
#include "engine/home.h"

#include <lauxlib.h>
#include <luv/luv.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/internal.h"
#include "engine/watchdog.h"

static const char home_key = 'h';

typedef struct home {
  uv_loop_t loop;
  int owned; /* we created it (not luv) */
} home;

static void close_cb(uv_handle_t *h) { (void)h; }

static void close_walk(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, close_cb);
}

/* Closes the loop at lua_close: processes still running are killed (by
   proc/, through its hooks), handles left open (by luv code) are closed,
   then uv_loop_close. */
static int home_gc(lua_State *L) {
  home *h = lua_touserdata(L, 1);
  const arbor_engine_procs *procs = arbor_engine_get_procs();
  if (procs) procs->loop_close(&h->loop);
  if (!h->owned) return 0;
  uv_walk(&h->loop, close_walk, NULL);
  uv_run(&h->loop, UV_RUN_DEFAULT);
  uv_loop_close(&h->loop);
  return 0;
}

/* luv's callback runner: an error in a luv callback is printed on stderr
   (logged on the root when a tree is being resumed) instead of luv's
   default, which exits the process. The callback runs under the tree's
   runaway limit (T7). */
static int luv_pcall(lua_State *L, int nargs, int nresults, int flags) {
  (void)flags;
  int base = lua_gettop(L) - nargs;
  arbor_watch saved;
  arbor_watchdog_push(&saved, L, arbor_watchdog_loop_limit(),
                      "luv callback stopped: ran %d ms (limit %d ms)");
  int status = lua_pcall(L, nargs, nresults < 0 ? LUA_MULTRET : nresults, 0);
  arbor_watchdog_pop(&saved, L);
  if (status == LUA_OK) return lua_gettop(L) - base + 1;
  const char *msg = lua_tostring(L, -1);
  arbor_str *line = arbor_str_fmt("luv callback error: %s",
                                  msg ? msg : "(error object)");
  arbor_engine *e = arbor_engine_current();
  if (e && line)
    arbor_engine_log(e, (pnode *)e->tree.root, line);
  else
    fprintf(stderr, "arbor: %s\n", line ? line->s : "luv callback error");
  arbor_str_unref(line);
  lua_pop(L, 1);
  return -status;
}

uv_loop_t *arbor_home_loop(lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &home_key) == LUA_TUSERDATA) {
    home *h = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return h->owned ? &h->loop : luv_loop(L);
  }
  lua_pop(L, 1);
  home *h = lua_newuserdatauv(L, sizeof *h, 0);
  lua_newtable(L);
  lua_pushcfunction(L, home_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &home_key);
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  lua_State *main = lua_tothread(L, -1);
  lua_pop(L, 1);
  uv_loop_t *theirs = luv_loop(main);
  if (theirs) { /* luv is already open: share its loop */
    h->owned = 0;
    return theirs;
  }
  if (uv_loop_init(&h->loop) != 0) abort();
  h->owned = 1;
  luv_set_loop(main, &h->loop);
  luv_set_callback(main, luv_pcall);
  return &h->loop;
}

/* package.preload.luv: luv on arbor's loop. */
static int open_luv(lua_State *L) {
  arbor_home_loop(L);
  return luaopen_luv(L);
}

void arbor_preload_luv(lua_State *L) {
  int top = lua_gettop(L);
  if (lua_getglobal(L, "package") == LUA_TTABLE &&
      lua_getfield(L, -1, "loaded") == LUA_TTABLE &&
      lua_getfield(L, -1, "luv") == LUA_TNIL &&
      lua_getfield(L, -3, "preload") == LUA_TTABLE) {
    lua_pushcfunction(L, open_luv);
    lua_setfield(L, -2, "luv");
  }
  lua_settop(L, top);
}

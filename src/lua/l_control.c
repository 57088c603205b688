/* l_control.c: the control socket's server as a Lua object
 * (core.control_listen). The socket, clients and frames are
 * control/server.c; this file hands each frame, closed client and idle turn
 * to the Lua handler (lua/arbor/control.lua) on the server's own thread,
 * under pcall, and writes the server's messages into the root's log.
 */
#include <lauxlib.h>
#include <stdio.h>
#include <string.h>

#include "control/server.h"
#include "core/frame.h"
#include "lua/l_arbor.h"

#define SERVER_MT "arbor.ControlServer"

typedef struct lserver {
  arbor_server *s; /* NULL once closed */
  arbor_engine *e;
  lua_State *L; /* our own thread for the callbacks */
  int L_ref, handler_ref;
} lserver;

/* Writes line into the root's log (`arbor ctl logs root`, the printer). */
static void log_root(lserver *u, const char *line) {
  arbor_str *s = arbor_str_new(line, strlen(line));
  if (s) {
    arbor_engine_log(u->e, (pnode *)u->e->tree.root, s);
    arbor_str_unref(s);
  }
}

/* Calls handler[name](args...) on the server's thread, under pcall; an
   error is logged, never raised into libuv. The nargs arguments are on top
   of u->L. Returns the first result as a boolean. */
static int call_handler(lserver *u, const char *name, int nargs) {
  lua_State *L = u->L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, u->handler_ref);
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
  lua_insert(L, -(nargs + 1));
  int ok = 0;
  if (lua_pcall(L, nargs, 1, 0) != LUA_OK) {
    char buf[512];
    snprintf(buf, sizeof buf, "control: %s failed: %s", name,
             lua_tostring(L, -1));
    log_root(u, buf);
  } else {
    ok = lua_toboolean(L, -1);
  }
  lua_pop(L, 1);
  return ok;
}

/* ---- the server's hooks ---------------------------------------------- */

static void on_frame(void *ud, int64_t id, const char *p, size_t n) {
  lserver *u = ud;
  lua_pushinteger(u->L, (lua_Integer)id);
  lua_pushlstring(u->L, p, n);
  call_handler(u, "on_frame", 2);
}

static void on_closed(void *ud, int64_t id, const char *why) {
  lserver *u = ud;
  lua_pushinteger(u->L, (lua_Integer)id);
  lua_pushstring(u->L, why);
  call_handler(u, "on_close", 2);
}

static int on_idle(void *ud) { return call_handler(ud, "on_idle", 0); }

static void on_log(void *ud, const char *line) { log_root(ud, line); }

static const arbor_server_hooks hooks = {on_frame, on_closed, on_idle,
                                         on_log};

/* ---- the Lua object ------------------------------------------------- */

/* core.control_listen(engine, path, handler) -> server | nil, "ENAME:
   message", "ENAME" (EADDRINUSE: another arbor serves path; EUNTRUSTED:
   its directory is unsafe; EEXIST, ENAMETOOLONG, an errno).
   handler: {on_frame = f(id, payload), on_close = f(id, why),
   on_idle = f() -> busy}. */
static int l_listen(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  const char *path = luaL_checkstring(L, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  if (!e->loop) return luaL_error(L, "control_listen: the engine is virtual");
  lserver *u = lua_newuserdatauv(L, sizeof *u, 1);
  u->s = NULL;
  u->e = e;
  u->L = NULL;
  u->L_ref = u->handler_ref = LUA_NOREF;
  luaL_setmetatable(L, SERVER_MT);
  lua_pushvalue(L, 1); /* keep the engine alive as long as the server */
  lua_setiuservalue(L, -2, 1);
  char msg[600];
  int r = arbor_server_listen(&u->s, e->loop, path, &hooks, u, msg, sizeof msg);
  if (r == UV_ENOMEM) return luaL_error(L, "control_listen: out of memory");
  if (r == ARBOR_SERVER_EUNTRUSTED)
    return arbor_push_fail(L, "EUNTRUSTED", "%s", msg);
  char name[ARBOR_ERRNAME];
  if (r < 0) return arbor_push_fail(L, arbor_errname(r, name), "%s", msg);
  u->L = lua_newthread(L);
  u->L_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushvalue(L, 3);
  u->handler_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 1;
}

static arbor_server *check_server(lua_State *L) {
  lserver *u = luaL_checkudata(L, 1, SERVER_MT);
  if (!u->s) luaL_error(L, "control server is closed");
  return u->s;
}

/* server:send(id, payload) -> true | false (the client is gone) */
static int l_send(lua_State *L) {
  arbor_server *s = check_server(L);
  lua_Integer id = luaL_checkinteger(L, 2);
  size_t n;
  const char *p = luaL_checklstring(L, 3, &n);
  if (n == 0 || n > ARBOR_FRAME_MAX_REPLY)
    return luaL_error(L, "send: payload of %d bytes (want 1 to %d)", (int)n,
                      (int)ARBOR_FRAME_MAX_REPLY);
  lua_pushboolean(L, arbor_server_send(s, id, p, n) == 0);
  return 1;
}

/* server:unsent(id) -> bytes sent to the client that it has not read */
static int l_unsent(lua_State *L) {
  arbor_server *s = check_server(L);
  lua_pushinteger(L, (lua_Integer)arbor_server_unsent(s, luaL_checkinteger(L, 2)));
  return 1;
}

/* server:drop(id, why) */
static int l_drop(lua_State *L) {
  arbor_server *s = check_server(L);
  lua_Integer id = luaL_checkinteger(L, 2);
  arbor_server_drop(s, id, luaL_optstring(L, 3, "dropped"));
  return 0;
}

/* server:busy(): on_idle is called each loop turn until it returns false. */
static int l_busy(lua_State *L) {
  arbor_server_busy(check_server(L));
  return 0;
}

/* server:info() -> {clients=, path=, out_limit=, reply_limit=} */
static int l_info(lua_State *L) {
  arbor_server *s = check_server(L);
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, (lua_Integer)arbor_server_clients(s));
  lua_setfield(L, -2, "clients");
  lua_pushstring(L, arbor_server_path(s));
  lua_setfield(L, -2, "path");
  lua_pushinteger(L, (lua_Integer)arbor_server_out_limit(s));
  lua_setfield(L, -2, "out_limit");
  lua_pushinteger(L, (lua_Integer)ARBOR_FRAME_MAX_REPLY);
  lua_setfield(L, -2, "reply_limit");
  return 1;
}

/* server:close(): closes every client and the socket, removes the file.
   Idempotent; also __gc and __close. */
static int l_close(lua_State *L) {
  lserver *u = luaL_checkudata(L, 1, SERVER_MT);
  if (!u->s) return 0;
  arbor_server_close(u->s);
  u->s = NULL;
  luaL_unref(L, LUA_REGISTRYINDEX, u->handler_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, u->L_ref);
  return 0;
}

static const luaL_Reg server_methods[] = {
    {"send", l_send},
    {"drop", l_drop},
    {"unsent", l_unsent},
    {"busy", l_busy},
    {"info", l_info},
    {"close", l_close},
    {NULL, NULL},
};

/* [-0, +0, m] adds core.control_listen to the module table on top. */
void arbor_open_control(lua_State *L) {
  arbor_new_type(L, SERVER_MT, server_methods, l_close);
  lua_pushcfunction(L, l_listen);
  lua_setfield(L, -2, "control_listen");
}

/* l_conn.c: core.connect, the blocking control client as a Lua object
 * (control/client.c), used by lua/arbor/client.lua (`arbor ctl`,
 * `arbor repl`), the specs and the benchmarks.
 */
#include <lauxlib.h>

#include "control/client.h"
#include "lua/l_arbor.h"

#define CONN_MT "arbor.ControlConn"

static arbor_client *check_conn(lua_State *L) {
  arbor_client *c = luaL_checkudata(L, 1, CONN_MT);
  if (c->fd < 0) luaL_error(L, "connection is closed");
  return c;
}

/* core.connect(path) -> conn | nil, "ENAME: message", "ENAME": the errno
   of the connect (ENOENT: no socket, ECONNREFUSED: a stale one), or
   EUNTRUSTED when another user could be serving path (nothing was sent) */
static int l_connect(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  arbor_client *c = lua_newuserdatauv(L, sizeof *c, 0);
  arbor_client_init(c);
  luaL_setmetatable(L, CONN_MT);
  char why[400];
  int r = arbor_client_connect(c, path, why, sizeof why);
  if (r == ARBOR_CLIENT_OK) return 1;
  if (r == ARBOR_CLIENT_UNTRUSTED)
    return arbor_push_fail(L, "EUNTRUSTED", "refusing %s: %s", path, why);
  return arbor_push_errno(L, -c->err, "%s", path);
}

/* conn:send(payload) -> true | nil, "ENAME: message", "ENAME" (EPIPE: the
   engine is gone). conn:send_raw(bytes) writes bytes as they are (tests
   of the protocol's error handling). */
static int conn_write(lua_State *L, int framed) {
  arbor_client *c = check_conn(L);
  size_t n;
  const char *p = luaL_checklstring(L, 2, &n);
  if (arbor_client_send(c, p, n, framed) != ARBOR_CLIENT_OK)
    return arbor_push_errno(L, -c->err, NULL);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_conn_send(lua_State *L) { return conn_write(L, 1); }
static int l_conn_send_raw(lua_State *L) { return conn_write(L, 0); }

/* conn:recv([timeout_ms [, wake_fd]]) -> payload | nil, "ENAME: message",
   "ENAME": ETIMEDOUT, EOF (the engine closed the connection), EINTR (a
   signal arrived, or wake_fd is readable), EPROTO (a bad frame) or an
   errno. Without a timeout it waits. */
static int l_conn_recv(lua_State *L) {
  arbor_client *c = check_conn(L);
  int timeout = lua_isnoneornil(L, 2) ? -1 : (int)luaL_checkinteger(L, 2);
  int wake = (int)luaL_optinteger(L, 3, -1);
  const char *p;
  size_t n;
  switch (arbor_client_recv(c, timeout, wake, &p, &n)) {
  case ARBOR_CLIENT_OK:
    lua_pushlstring(L, p, n);
    return 1;
  case ARBOR_CLIENT_TIMEOUT:
    return arbor_push_fail(L, "ETIMEDOUT", "no frame from the engine in %d ms",
                           timeout);
  case ARBOR_CLIENT_INTERRUPTED:
    return arbor_push_fail(L, "EINTR", "interrupted");
  case ARBOR_CLIENT_CLOSED:
    return arbor_push_fail(L, "EOF", "the engine closed the connection");
  case ARBOR_CLIENT_BAD:
    return arbor_push_fail(L, "EPROTO", "bad frame from the engine: %s",
                           arbor_frame_strerror(c->err));
  default: /* ARBOR_CLIENT_ERRNO */
    return arbor_push_errno(L, -c->err, NULL);
  }
}

/* conn:shutdown_write(): half-closes (tests of truncated frames). */
static int l_conn_shutdown_write(lua_State *L) {
  arbor_client_shutdown_write(check_conn(L));
  return 0;
}

static int l_conn_fileno(lua_State *L) {
  lua_pushinteger(L, check_conn(L)->fd);
  return 1;
}

/* conn:close(), also __gc and __close: idempotent. */
static int l_conn_close(lua_State *L) {
  arbor_client_close(luaL_checkudata(L, 1, CONN_MT));
  return 0;
}

static const luaL_Reg conn_methods[] = {
    {"send", l_conn_send},
    {"send_raw", l_conn_send_raw},
    {"recv", l_conn_recv},
    {"shutdown_write", l_conn_shutdown_write},
    {"fileno", l_conn_fileno},
    {"close", l_conn_close},
    {NULL, NULL},
};

/* [-0, +0, m] adds core.connect to the table on top. */
void arbor_open_conn(lua_State *L) {
  arbor_new_type(L, CONN_MT, conn_methods, l_conn_close);
  lua_pushcfunction(L, l_connect);
  lua_setfield(L, -2, "connect");
}

/* l_conn.c: core.connect, the blocking control client as a Lua object
 * (control/client.c), used by lua/arbor/client.lua (`arbor ctl`,
 * `arbor repl`), the specs and the benchmarks.
 */
#include <errno.h>
#include <lauxlib.h>
#include <string.h>

#include "control/client.h"
#include "lua/l_arbor.h"

#define CONN_MT "arbor.ControlConn"

static arbor_client *check_conn(lua_State *L) {
  arbor_client *c = luaL_checkudata(L, 1, CONN_MT);
  if (c->fd < 0) luaL_error(L, "connection is closed");
  return c;
}

/* The name of a connect failure's errno, for client.lua. */
static const char *errno_name(int err) {
  switch (err) {
  case ENOENT: return "ENOENT";
  case ECONNREFUSED: return "ECONNREFUSED";
  case EACCES: return "EACCES";
  default: return "OTHER";
  }
}

/* core.connect(path) -> conn | nil, message, errno name ("EUNTRUSTED" when
   another user could be serving path: nothing was sent) */
static int l_connect(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  arbor_client *c = lua_newuserdatauv(L, sizeof *c, 0);
  arbor_client_init(c);
  luaL_setmetatable(L, CONN_MT);
  char why[400];
  int r = arbor_client_connect(c, path, why, sizeof why);
  if (r == ARBOR_CLIENT_OK) return 1;
  lua_pushnil(L);
  if (r == ARBOR_CLIENT_UNTRUSTED) {
    lua_pushfstring(L, "refusing %s: %s", path, why);
    lua_pushliteral(L, "EUNTRUSTED");
  } else if (c->err == ENAMETOOLONG) {
    lua_pushfstring(L, "socket path too long: %s", path);
    lua_pushliteral(L, "ENAMETOOLONG");
  } else {
    lua_pushfstring(L, "%s: %s", path, strerror(c->err));
    lua_pushstring(L, errno_name(c->err));
  }
  return 3;
}

/* conn:send(payload) -> true | nil, message. conn:send_raw(bytes) writes
   bytes as they are (tests of the protocol's error handling). */
static int conn_write(lua_State *L, int framed) {
  arbor_client *c = check_conn(L);
  size_t n;
  const char *p = luaL_checklstring(L, 2, &n);
  if (arbor_client_send(c, p, n, framed) != ARBOR_CLIENT_OK) {
    lua_pushnil(L);
    lua_pushstring(L, strerror(c->err));
    return 2;
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int l_conn_send(lua_State *L) { return conn_write(L, 1); }
static int l_conn_send_raw(lua_State *L) { return conn_write(L, 0); }

/* conn:recv([timeout_ms [, wake_fd]]) -> payload | nil, "timeout" |
   "closed" | "interrupted" (a signal arrived, or wake_fd is readable) |
   message. Without a timeout it waits. */
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
    lua_pushnil(L);
    lua_pushliteral(L, "timeout");
    break;
  case ARBOR_CLIENT_INTERRUPTED:
    lua_pushnil(L);
    lua_pushliteral(L, "interrupted");
    break;
  case ARBOR_CLIENT_CLOSED:
    lua_pushnil(L);
    lua_pushliteral(L, "closed");
    break;
  case ARBOR_CLIENT_BAD:
    lua_pushnil(L);
    lua_pushfstring(L, "bad reply from the engine: %s",
                    arbor_frame_strerror(c->err));
    break;
  default: /* ARBOR_CLIENT_ERRNO */
    lua_pushnil(L);
    lua_pushstring(L, strerror(c->err));
    break;
  }
  return 2;
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

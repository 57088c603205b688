/* conn.c: the blocking client side of the control socket (core.connect),
 * used by `arbor ctl`, `arbor repl`, the specs and the benchmarks. A signal
 * (SIGINT at the REPL) interrupts a wait: recv returns "interrupted".
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include <errno.h>
#include <lauxlib.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/frame.h"

#define CONN_MT "arbor.ControlConn"
#define READ_CHUNK 65536

int arbor_peer_cred(int fd, int *uid, int *pid);
const char *arbor_sock_dir_unsafe(const char *dir, char *buf, size_t size);
void arbor_open_conn(lua_State *L);
void arbor_new_type(lua_State *L, const char *name, const luaL_Reg *m,
                    lua_CFunction close);

typedef struct conn {
  int fd;
  arbor_frame_reader rd;
} conn;

static conn *check_conn(lua_State *L) {
  conn *c = luaL_checkudata(L, 1, CONN_MT);
  if (c->fd < 0) luaL_error(L, "connection is closed");
  return c;
}

/* Why the engine at path, connected on fd, must not be trusted (C1), in
   buf, or NULL: its directory could hold another user's socket (see
   arbor_sock_dir_unsafe), or another user than this one and root serves
   it. */
static const char *untrusted(const char *path, int fd, char *buf,
                             size_t size) {
  char dir[sizeof ((struct sockaddr_un *)0)->sun_path];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == dir) dir[1] = '\0';
  else *slash = '\0';
  if (arbor_sock_dir_unsafe(dir, buf, size)) return buf;
  int uid, pid;
  uid_t me = geteuid();
  if (arbor_peer_cred(fd, &uid, &pid) != 0) {
    snprintf(buf, size, "its server's credentials cannot be read: %s",
             strerror(errno));
    return buf;
  }
  if ((uid_t)uid != me && uid != 0) {
    snprintf(buf, size, "it is served by uid %d (pid %d), not by you "
             "(uid %d) or root", uid, pid, (int)me);
    return buf;
  }
  return NULL;
}

/* core.connect(path) -> conn | nil, message, errno name ("EUNTRUSTED" when
   another user could be serving path: nothing was sent) */
static int l_connect(lua_State *L) {
  size_t plen;
  const char *path = luaL_checklstring(L, 1, &plen);
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  if (plen >= sizeof sa.sun_path) {
    lua_pushnil(L);
    lua_pushfstring(L, "socket path too long: %s", path);
    lua_pushliteral(L, "ENAMETOOLONG");
    return 3;
  }
  memcpy(sa.sun_path, path, plen);
  conn *c = lua_newuserdatauv(L, sizeof *c, 0);
  c->fd = -1;
  arbor_frame_init(&c->rd, ARBOR_FRAME_MAX_REPLY);
  luaL_setmetatable(L, CONN_MT);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    int err = errno;
    if (fd >= 0) close(fd);
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", path, strerror(err));
    lua_pushstring(L, err == ENOENT ? "ENOENT"
                      : err == ECONNREFUSED ? "ECONNREFUSED"
                      : err == EACCES ? "EACCES" : "OTHER");
    return 3;
  }
  char why[400];
  if (untrusted(path, fd, why, sizeof why)) {
    close(fd);
    lua_pushnil(L);
    lua_pushfstring(L, "refusing %s: %s", path, why);
    lua_pushliteral(L, "EUNTRUSTED");
    return 3;
  }
  c->fd = fd;
  return 1;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        struct pollfd pf = {fd, POLLOUT, 0};
        poll(&pf, 1, -1);
        continue;
      }
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* conn:send(payload) -> true | nil, message. conn:send_raw(bytes) writes
   bytes as they are (tests of the protocol's error handling). */
static int conn_write(lua_State *L, int framed) {
  conn *c = check_conn(L);
  size_t n;
  const char *p = luaL_checklstring(L, 2, &n);
  unsigned char h[ARBOR_FRAME_HEADER];
  arbor_frame_header(h, (uint32_t)n);
  if ((framed && write_all(c->fd, (const char *)h, sizeof h) < 0) ||
      write_all(c->fd, p, n) < 0) {
    lua_pushnil(L);
    lua_pushstring(L, strerror(errno));
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
  conn *c = check_conn(L);
  int timeout = lua_isnoneornil(L, 2) ? -1 : (int)luaL_checkinteger(L, 2);
  int wake = (int)luaL_optinteger(L, 3, -1);
  static char chunk[READ_CHUNK];
  for (;;) {
    const char *p;
    size_t n;
    int r = arbor_frame_next(&c->rd, &p, &n);
    if (r == ARBOR_FRAME_OK) {
      lua_pushlstring(L, p, n);
      return 1;
    }
    if (r < 0) {
      lua_pushnil(L);
      lua_pushfstring(L, "bad reply from the engine: %s",
                      arbor_frame_strerror(r));
      return 2;
    }
    struct pollfd pf[2] = {{c->fd, POLLIN, 0}, {wake, POLLIN, 0}};
    int pr = poll(pf, wake >= 0 ? 2 : 1, timeout);
    if ((pr < 0 && errno == EINTR) ||
        (pr > 0 && wake >= 0 && (pf[1].revents & POLLIN))) {
      lua_pushnil(L);
      lua_pushliteral(L, "interrupted");
      return 2;
    }
    if (pr == 0) {
      lua_pushnil(L);
      lua_pushliteral(L, "timeout");
      return 2;
    }
    ssize_t got = recv(c->fd, chunk, sizeof chunk, 0);
    if (got < 0 && errno == EINTR) {
      lua_pushnil(L);
      lua_pushliteral(L, "interrupted");
      return 2;
    }
    if (got <= 0) {
      lua_pushnil(L);
      lua_pushstring(L, got == 0 ? "closed" : strerror(errno));
      return 2;
    }
    r = arbor_frame_feed(&c->rd, chunk, (size_t)got);
    if (r < 0) {
      lua_pushnil(L);
      lua_pushfstring(L, "bad reply from the engine: %s",
                      arbor_frame_strerror(r));
      return 2;
    }
  }
}

/* conn:shutdown_write(): half-closes (tests of truncated frames). */
static int l_conn_shutdown_write(lua_State *L) {
  conn *c = check_conn(L);
  shutdown(c->fd, SHUT_WR);
  return 0;
}

static int l_conn_fileno(lua_State *L) {
  lua_pushinteger(L, check_conn(L)->fd);
  return 1;
}

static int l_conn_close(lua_State *L) {
  conn *c = luaL_checkudata(L, 1, CONN_MT);
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  arbor_frame_free(&c->rd);
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

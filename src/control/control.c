/* control.c: the live control plane's server (C1, C4).
 *
 * The server listens on a Unix stream socket on the engine's libuv loop,
 * refuses peers whose uid is neither arbor's nor root, cuts the byte stream
 * into frames (frame.c) and hands each to Lua (lua/arbor/control.lua), which
 * answers through server:send. Each client's unsent output is bounded: a
 * client that stops reading is dropped, the engine never waits for it; one
 * that reads a large reply, however slowly, is not.
 *
 * Evaluation slices are in slice.c, the blocking client side in conn.c.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include <errno.h>
#include <lauxlib.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/frame.h"
#include "engine/lifecycle.h"
#include "lua/l_arbor.h"

int arbor_peer_cred(int fd, int *uid, int *pid);
const char *arbor_sock_dir_unsafe(const char *dir, char *buf, size_t size);
void arbor_open_slice(lua_State *L);
void arbor_open_conn(lua_State *L);
void arbor_new_type(lua_State *L, const char *name, const luaL_Reg *m,
                    lua_CFunction close);

#define SERVER_MT "arbor.ControlServer"
#define READ_CHUNK 65536
/* Unsent output past which a client that takes no bytes for STALL_MS is
   dropped (C4); past OUT_LIMIT + ARBOR_FRAME_MAX_REPLY it is dropped at
   once. The largest reply thus reaches a client that reads it. */
#define OUT_LIMIT (64u << 20)
#define STALL_MS 5000

typedef struct server server;

typedef struct client {
  uv_pipe_t pipe; /* first: handle->data is not needed */
  server *srv;
  lua_Integer id;
  arbor_frame_reader rd;
  uint64_t sent;  /* bytes handed to uv_write in all */
  uint64_t taken; /* bytes the client had taken at the last stall check */
  uint64_t since; /* loop time it last took bytes while over the limit */
  int over;       /* its unsent output is over the limit: watched */
  int closing;
  struct client *prev, *next;
} client;

typedef struct write_req {
  uv_write_t req;
  client *c;
  char data[];
} write_req;

struct server {
  uv_pipe_t pipe;
  uv_idle_t idle;
  uv_timer_t stall; /* checks the clients over the limit while any is */
  arbor_engine *e;
  lua_State *L;     /* our own thread for the callbacks */
  int L_ref, handler_ref;
  client *clients;
  lua_Integer next_id;
  size_t nclients;
  size_t out_limit;
  int open_handles; /* freed when the last close callback ran */
  int closed;
  char *path;
};

typedef struct userver {
  server *s;
} userver;

/* ---- helpers -------------------------------------------------------- */

static void log_root(server *s, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  arbor_str *line = arbor_str_new(buf, strlen(buf));
  if (line) {
    arbor_engine_log(s->e, (pnode *)s->e->tree.root, line);
    arbor_str_unref(line);
  }
}

static void server_release(server *s) {
  if (--s->open_handles > 0) return;
  free(s->path);
  free(s);
}

static void on_server_handle_closed(uv_handle_t *h) { server_release(h->data); }

/* Calls handler[name](args...) on the server's thread, under pcall; an
   error is logged, never raised into libuv. The nargs arguments are on top
   of s->L. Returns the first result as a boolean. */
static int call_handler(server *s, const char *name, int nargs) {
  lua_State *L = s->L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, s->handler_ref);
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
  lua_insert(L, -(nargs + 1));
  int ok = 0;
  if (lua_pcall(L, nargs, 1, 0) != LUA_OK) {
    log_root(s, "control: %s failed: %s", name, lua_tostring(L, -1));
  } else {
    ok = lua_toboolean(L, -1);
  }
  lua_pop(L, 1);
  return ok;
}

/* ---- clients -------------------------------------------------------- */

static void on_client_closed(uv_handle_t *h) {
  client *c = (client *)h;
  server *s = c->srv;
  arbor_frame_free(&c->rd);
  free(c);
  server_release(s);
}

/* Closes a client (idempotent); tells Lua with why. */
static void client_close(client *c, const char *why) {
  if (c->closing) return;
  c->closing = 1;
  server *s = c->srv;
  if (c->prev) c->prev->next = c->next;
  else s->clients = c->next;
  if (c->next) c->next->prev = c->prev;
  s->nclients--;
  uv_read_stop((uv_stream_t *)&c->pipe);
  uv_close((uv_handle_t *)&c->pipe, on_client_closed);
  if (!s->closed) {
    lua_pushinteger(s->L, c->id);
    lua_pushstring(s->L, why);
    call_handler(s, "on_close", 2);
  }
}

static void on_written(uv_write_t *req, int status) {
  write_req *w = (write_req *)req;
  if (status < 0 && status != UV_ECANCELED)
    client_close(w->c, uv_strerror(status));
  free(w);
}

/* Bytes queued for the client and not yet written. */
static size_t unsent(client *c) {
  return uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe);
}

/* Drops each client over the output limit that took no bytes for STALL_MS
   (it stopped reading); stops when no client is over the limit. */
static void on_stall_check(uv_timer_t *t) {
  server *s = t->data;
  uint64_t now = uv_now(t->loop);
  int watched = 0;
  for (client *c = s->clients, *next; c; c = next) {
    next = c->next;
    if (!c->over) continue;
    size_t left = unsent(c);
    uint64_t taken = c->sent - left;
    if (left <= s->out_limit) {
      c->over = 0;
    } else if (taken > c->taken) {
      c->taken = taken;
      c->since = now;
      watched = 1;
    } else if (now - c->since >= STALL_MS) {
      log_root(s, "control: dropped client %d: it stopped reading (no byte "
               "taken for %d s, %zu bytes unsent, limit %zu)", (int)c->id,
               STALL_MS / 1000, left, s->out_limit);
      client_close(c, "slow reader: output limit exceeded");
    } else {
      watched = 1;
    }
  }
  if (!watched) uv_timer_stop(t);
}

/* Sends one frame: written at once when the socket takes it, else queued.
   A client whose queue passes the limit is watched (on_stall_check), one
   past the hard limit dropped. Returns 0 or -1. */
static int client_send(client *c, const char *p, size_t n) {
  if (c->closing) return -1;
  unsigned char h[ARBOR_FRAME_HEADER];
  arbor_frame_header(h, (uint32_t)n);
  size_t done = 0, total = n + sizeof h;
  if (unsent(c) == 0) {
    uv_buf_t bufs[2] = {uv_buf_init((char *)h, sizeof h),
                        uv_buf_init((char *)p, (unsigned)n)};
    int r = uv_try_write((uv_stream_t *)&c->pipe, bufs, 2);
    if (r == (int)total) return 0;
    if (r < 0 && r != UV_EAGAIN) {
      client_close(c, uv_strerror(r));
      return -1;
    }
    if (r > 0) done = (size_t)r;
  }
  size_t rest = total - done;
  server *s = c->srv;
  if (unsent(c) + rest > s->out_limit + ARBOR_FRAME_MAX_REPLY) {
    log_root(s, "control: dropped client %d: it is not keeping up (%zu bytes "
             "unsent, limit %zu)", (int)c->id, unsent(c) + rest,
             s->out_limit + ARBOR_FRAME_MAX_REPLY);
    client_close(c, "slow reader: output limit exceeded");
    return -1;
  }
  write_req *w = malloc(sizeof *w + rest);
  if (!w) {
    client_close(c, "out of memory");
    return -1;
  }
  w->c = c;
  /* copy the unsent tail of header + payload */
  size_t off = 0;
  if (done < sizeof h) {
    memcpy(w->data, h + done, sizeof h - done);
    off = sizeof h - done;
    memcpy(w->data + off, p, n);
  } else {
    memcpy(w->data, p + (done - sizeof h), rest);
  }
  uv_buf_t buf = uv_buf_init(w->data, (unsigned)rest);
  if (uv_write(&w->req, (uv_stream_t *)&c->pipe, &buf, 1, on_written) < 0) {
    free(w);
    client_close(c, "write failed");
    return -1;
  }
  c->sent += rest;
  if (unsent(c) > s->out_limit && !c->over) {
    c->over = 1;
    c->taken = c->sent - unsent(c);
    c->since = uv_now(s->e->loop);
    if (!uv_is_active((uv_handle_t *)&s->stall))
      uv_timer_start(&s->stall, on_stall_check, STALL_MS / 5, STALL_MS / 5);
  }
  return 0;
}

/* Sends a protocol error and closes the connection (C4). */
static void client_fail(client *c, const char *fmt, ...) {
  char msg[256], json[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  int n = snprintf(json, sizeof json,
                   "{\"id\":null,\"end\":true,\"ok\":false,\"error\":"
                   "\"%s\"}",
                   msg);
  client_send(c, json, (size_t)n);
  client_close(c, msg);
}

static void on_alloc(uv_handle_t *h, size_t want, uv_buf_t *buf) {
  (void)h;
  (void)want;
  static char chunk[READ_CHUNK]; /* one loop thread: reused */
  *buf = uv_buf_init(chunk, sizeof chunk);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  client *c = (client *)st;
  server *s = c->srv;
  if (nread == 0) return;
  if (nread < 0) {
    size_t pending = arbor_frame_pending(&c->rd);
    if (nread == UV_EOF && pending > 0)
      client_fail(c, "protocol error: truncated frame: the connection ended %zu byte(s) "
                     "into a frame", pending);
    else
      client_close(c, nread == UV_EOF ? "closed" : uv_strerror((int)nread));
    return;
  }
  int st_feed = arbor_frame_feed(&c->rd, buf->base, (size_t)nread);
  const char *p;
  size_t n;
  for (;;) {
    int r = arbor_frame_next(&c->rd, &p, &n);
    if (r == ARBOR_FRAME_MORE) break;
    if (r < 0) st_feed = r;
    if (r != ARBOR_FRAME_OK) break;
    lua_pushinteger(s->L, c->id);
    lua_pushlstring(s->L, p, n);
    call_handler(s, "on_frame", 2);
    if (c->closing || s->closed) return;
  }
  if (st_feed == ARBOR_FRAME_TOO_BIG)
    client_fail(c, "protocol error: frame too large (%u bytes, limit %zu)", c->rd.bad_len,
                c->rd.max);
  else if (st_feed < 0)
    client_fail(c, "protocol error: %s", arbor_frame_strerror(st_feed));
}

static void on_connection(uv_stream_t *st, int status) {
  server *s = st->data;
  if (status < 0 || s->closed) return;
  client *c = calloc(1, sizeof *c);
  if (!c) return;
  c->srv = s;
  uv_pipe_init(st->loop, &c->pipe, 0);
  s->open_handles++;
  if (uv_accept(st, (uv_stream_t *)&c->pipe) < 0) {
    c->closing = 1;
    uv_close((uv_handle_t *)&c->pipe, on_client_closed);
    return;
  }
  arbor_frame_init(&c->rd, ARBOR_FRAME_MAX_REQUEST);
  c->id = ++s->next_id;
  c->next = s->clients;
  if (s->clients) s->clients->prev = c;
  s->clients = c;
  s->nclients++;
  /* C1: the peer must be arbor's own user or root */
  uv_os_fd_t fd;
  int uid, pid;
  uid_t me = geteuid();
  if (uv_fileno((uv_handle_t *)&c->pipe, &fd) != 0 ||
      arbor_peer_cred(fd, &uid, &pid) != 0) {
    log_root(s, "control: refused a connection: no peer credentials");
    client_fail(c, "refused: no peer credentials");
    return;
  }
  if ((uid_t)uid != me && (uid_t)uid != 0) {
    log_root(s, "control: refused a connection from uid %d (pid %d): only "
                "uid %d and root may connect",
             (int)(uid_t)uid, pid, (int)me);
    client_fail(c, "refused: uid %d may not control this engine (owner uid "
                   "%d)", (int)(uid_t)uid, (int)me);
    return;
  }
  uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
}

/* ---- the listening socket ------------------------------------------- */

/* 1 when something answers at path (another arbor), 0 when nothing does
   (a stale socket left by a crashed run, or no file). */
static int socket_alive(const char *path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  strncpy(sa.sun_path, path, sizeof sa.sun_path - 1);
  int alive = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
  close(fd);
  return alive;
}

/* Makes path's directory (mode 0700) when missing; an existing one must be
   safe (arbor_sock_dir_unsafe). Returns NULL or a message in buf. */
static const char *prepare_dir(const char *path, char *buf, size_t size) {
  char dir[sizeof ((struct sockaddr_un *)0)->sun_path], why[400];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) return NULL;
  *slash = '\0';
  if (mkdir(dir, 0700) == 0) return NULL;
  if (errno != EEXIST) {
    snprintf(buf, size, "cannot create the directory %s: %s", dir,
             strerror(errno));
    return buf;
  }
  /* another user could swap the socket for theirs */
  if (!arbor_sock_dir_unsafe(dir, why, sizeof why)) return NULL;
  snprintf(buf, size, "%s; refusing to serve the control socket there", why);
  return buf;
}

static void on_idle(uv_idle_t *h) {
  server *s = h->data;
  if (!call_handler(s, "on_idle", 0)) uv_idle_stop(&s->idle);
}

/* core.control_listen(engine, path, handler) -> server | nil, message.
   handler: {on_frame = f(id, payload), on_close = f(id, why),
   on_idle = f() -> busy}. */
static int l_listen(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  size_t plen;
  const char *path = luaL_checklstring(L, 2, &plen);
  luaL_checktype(L, 3, LUA_TTABLE);
  if (!e->loop) return luaL_error(L, "control_listen: the engine is virtual");
  char msg[600];
  if (plen >= sizeof ((struct sockaddr_un *)0)->sun_path) {
    lua_pushnil(L);
    lua_pushfstring(L, "control socket path too long (%d bytes, limit %d): %s",
                    (int)plen,
                    (int)sizeof ((struct sockaddr_un *)0)->sun_path - 1, path);
    return 2;
  }
  if (prepare_dir(path, msg, sizeof msg)) {
    lua_pushnil(L);
    lua_pushstring(L, msg);
    return 2;
  }
  struct stat sb;
  if (lstat(path, &sb) == 0) {
    if (!S_ISSOCK(sb.st_mode)) {
      lua_pushnil(L);
      lua_pushfstring(L, "%s exists and is not a socket; not replacing it",
                      path);
      return 2;
    }
    if (socket_alive(path)) {
      lua_pushnil(L);
      lua_pushfstring(L, "another arbor is serving %s (stop it, or pass "
                         "--control with another path)", path);
      return 2;
    }
    unlink(path); /* stale: its engine is gone */
  }
  server *s = calloc(1, sizeof *s);
  if (!s || !(s->path = strdup(path))) {
    free(s);
    return luaL_error(L, "control_listen: out of memory");
  }
  s->e = e;
  s->out_limit = OUT_LIMIT;
  uv_pipe_init(e->loop, &s->pipe, 0);
  s->pipe.data = s;
  uv_idle_init(e->loop, &s->idle);
  s->idle.data = s;
  uv_timer_init(e->loop, &s->stall);
  uv_unref((uv_handle_t *)&s->stall);
  s->stall.data = s;
  s->open_handles = 3;
  mode_t old = umask(0177);
  int r = uv_pipe_bind(&s->pipe, path);
  umask(old);
  if (r == 0) chmod(path, 0600);
  if (r == 0) r = uv_listen((uv_stream_t *)&s->pipe, 128, on_connection);
  if (r < 0) {
    s->closed = 1;
    uv_close((uv_handle_t *)&s->pipe, on_server_handle_closed);
    uv_close((uv_handle_t *)&s->idle, on_server_handle_closed);
    uv_close((uv_handle_t *)&s->stall, on_server_handle_closed);
    lua_pushnil(L);
    lua_pushfstring(L, "cannot listen on %s: %s", path, uv_strerror(r));
    return 2;
  }
  /* a peer that vanishes must not kill the engine with SIGPIPE */
  signal(SIGPIPE, SIG_IGN);
  s->L = lua_newthread(L);
  s->L_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushvalue(L, 3);
  s->handler_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  userver *u = lua_newuserdatauv(L, sizeof *u, 1);
  u->s = s;
  lua_pushvalue(L, 1); /* keep the engine alive as long as the server */
  lua_setiuservalue(L, -2, 1);
  luaL_setmetatable(L, SERVER_MT);
  return 1;
}

static server *check_server(lua_State *L) {
  userver *u = luaL_checkudata(L, 1, SERVER_MT);
  if (!u->s) luaL_error(L, "control server is closed");
  return u->s;
}

static client *find_client(server *s, lua_Integer id) {
  for (client *c = s->clients; c; c = c->next)
    if (c->id == id) return c;
  return NULL;
}

/* server:send(id, payload) -> true | false (the client is gone) */
static int l_send(lua_State *L) {
  server *s = check_server(L);
  client *c = find_client(s, luaL_checkinteger(L, 2));
  size_t n;
  const char *p = luaL_checklstring(L, 3, &n);
  if (n == 0 || n > ARBOR_FRAME_MAX_REPLY)
    return luaL_error(L, "send: payload of %d bytes (want 1 to %d)", (int)n,
                      (int)ARBOR_FRAME_MAX_REPLY);
  lua_pushboolean(L, c && client_send(c, p, n) == 0);
  return 1;
}

/* server:drop(id, why) */
static int l_drop(lua_State *L) {
  server *s = check_server(L);
  client *c = find_client(s, luaL_checkinteger(L, 2));
  if (c) client_close(c, luaL_optstring(L, 3, "dropped"));
  return 0;
}

/* server:busy(): on_idle is called each loop turn until it returns false. */
static int l_busy(lua_State *L) {
  server *s = check_server(L);
  if (!uv_is_active((uv_handle_t *)&s->idle)) uv_idle_start(&s->idle, on_idle);
  return 0;
}

/* server:info() -> {clients=, path=, out_limit=, reply_limit=} */
static int l_info(lua_State *L) {
  server *s = check_server(L);
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, (lua_Integer)s->nclients);
  lua_setfield(L, -2, "clients");
  lua_pushstring(L, s->path);
  lua_setfield(L, -2, "path");
  lua_pushinteger(L, (lua_Integer)s->out_limit);
  lua_setfield(L, -2, "out_limit");
  lua_pushinteger(L, (lua_Integer)ARBOR_FRAME_MAX_REPLY);
  lua_setfield(L, -2, "reply_limit");
  return 1;
}

/* server:close(): closes every client and the socket, removes the file.
   Idempotent; also __gc and __close. */
static int l_close(lua_State *L) {
  userver *u = luaL_checkudata(L, 1, SERVER_MT);
  server *s = u->s;
  if (!s) return 0;
  u->s = NULL;
  s->closed = 1;
  while (s->clients) client_close(s->clients, "engine closing");
  unlink(s->path);
  uv_close((uv_handle_t *)&s->pipe, on_server_handle_closed);
  uv_close((uv_handle_t *)&s->idle, on_server_handle_closed);
  uv_close((uv_handle_t *)&s->stall, on_server_handle_closed);
  luaL_unref(L, LUA_REGISTRYINDEX, s->handler_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, s->L_ref);
  return 0;
}

/* core.runnable(engine, dn) -> the function the node's next start runs
   (reload matches it against a module's fields). */
static int l_runnable(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  size_t len;
  const char *dn = luaL_checklstring(L, 2, &len);
  arbor_node *n = arbor_tree_find(&e->tree, dn, len);
  if (!n) return luaL_error(L, "no node %s", arbor_push_cut(L, dn, len));
  lua_rawgeti(L, LUA_REGISTRYINDEX, ((pnode *)n)->fn_ref);
  return 1;
}

/* ---- tree --json --------------------------------------------------- */

/* Adds s as a JSON string: runs of plain bytes are copied whole, so a
   string of many megabytes is quoted in milliseconds. */
static void json_str(luaL_Buffer *b, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  static const char short_esc[32] = {['\b'] = 'b', ['\f'] = 'f',
                                     ['\n'] = 'n', ['\r'] = 'r',
                                     ['\t'] = 't'};
  size_t run = 0; /* the first byte not added yet */
  luaL_addchar(b, '"');
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch >= 0x20 && ch != '"' && ch != '\\' && ch != 0x7f) continue;
    luaL_addlstring(b, s + run, i - run);
    run = i + 1;
    char esc[6] = {'\\', (char)ch};
    if (ch == '"' || ch == '\\') {
      luaL_addlstring(b, esc, 2);
    } else if (ch < 0x20 && short_esc[ch]) {
      esc[1] = short_esc[ch];
      luaL_addlstring(b, esc, 2);
    } else {
      esc[1] = 'u', esc[2] = '0', esc[3] = '0';
      esc[4] = hex[ch >> 4], esc[5] = hex[ch & 15];
      luaL_addlstring(b, esc, 6);
    }
  }
  luaL_addlstring(b, s + run, n - run);
  luaL_addchar(b, '"');
}

/* core.json_quote(s) -> s as a JSON string (arbor.json's encoder).
   [-0, +1, m] */
static int l_json_quote(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  luaL_Buffer b;
  luaL_buffinitsize(L, &b, n + 2); /* one allocation when nothing escapes */
  json_str(&b, s, n);
  luaL_pushresult(&b);
  return 1;
}

/* One node's fields, as e:tree() has them, without the closing brace. */
static void json_node(luaL_Buffer *b, pnode *pn, double now) {
  char num[64];
  arbor_node *n = &pn->n;
  /* a DN is made of [A-Za-z0-9_.-]: nothing to escape */
  size_t len = arbor_node_dn(n, NULL, 0);
  luaL_addstring(b, "{\"dn\":\"");
  arbor_node_dn(n, luaL_prepbuffsize(b, len + 1), len + 1);
  luaL_addsize(b, len);
  luaL_addstring(b, "\",\"name\":");
  json_str(b, n->name, strlen(n->name));
  luaL_addstring(b, ",\"state\":\"");
  luaL_addstring(b, arbor_state_name((arbor_state)n->state));
  snprintf(num, sizeof num, "\",\"restarts\":%u,\"incarnation\":%llu",
           (unsigned)pn->restarts, (unsigned long long)n->incarnation);
  luaL_addstring(b, num);
  if (n->incarnation > 0) {
    double up = (arbor_node_running(n) ? now : pn->exited) - pn->started;
    snprintf(num, sizeof num, ",\"uptime\":%.6f", up);
    luaL_addstring(b, num);
  }
  if (pn->error) {
    luaL_addstring(b, ",\"error\":");
    json_str(b, pn->error->s, pn->error->len);
  }
  luaL_addstring(b, arbor_lc_blocked(pn) ? ",\"blocked\":true" : ",\"blocked\":false");
  luaL_addstring(b, ",\"lifecycle\":\"");
  luaL_addstring(b, arbor_lc_name(pn->lc));
  luaL_addstring(b, (pn->lc & ARBOR_LC_SIDECAR) ? "\",\"sidecar\":true"
                                                : "\",\"sidecar\":false");
  const char *co = arbor_lc_state(pn);
  if (co) {
    luaL_addstring(b, ",\"coordinator\":\"");
    luaL_addstring(b, co);
    luaL_addstring(b, arbor_lc_gated(pn) ? "\",\"gated\":true"
                                          : "\",\"gated\":false");
  }
  luaL_addstring(b, ",\"children\":[");
}

/* core.tree_json(engine [, dn]) -> the tree (or dn's subtree) as JSON, the
   fields of e:tree(); written in C because `arbor ctl tree --json` must
   stay fast on trees of 100,000 nodes. */
static int l_tree_json(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  arbor_node *top = e->tree.root;
  if (!lua_isnoneornil(L, 2)) {
    size_t len;
    const char *dn = luaL_checklstring(L, 2, &len);
    top = arbor_tree_find(&e->tree, dn, len);
    if (!top)
      return luaL_error(L, "no node %s", arbor_push_cut(L, dn, len));
  }
  double now = arbor_engine_now(e);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  arbor_node *n = top;
  for (;;) {
    json_node(&b, (pnode *)n, now);
    if (n->first) {
      n = n->first;
      continue;
    }
    luaL_addstring(&b, "]}");
    while (n != top && !n->next) {
      n = n->parent;
      luaL_addstring(&b, "]}");
    }
    if (n == top) break;
    n = n->next;
    luaL_addchar(&b, ',');
  }
  luaL_pushresult(&b);
  return 1;
}

/* core.getpid() */
static int l_getpid(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)getpid());
  return 1;
}

/* ---- registration --------------------------------------------------- */

static const luaL_Reg server_methods[] = {
    {"send", l_send},
    {"drop", l_drop},
    {"busy", l_busy},
    {"info", l_info},
    {"close", l_close},
    {NULL, NULL},
};

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

/* [-0, +0, m] adds the control functions to the module table on top. */
void arbor_open_control(lua_State *L) {
  arbor_new_type(L, SERVER_MT, server_methods, l_close);
  static const luaL_Reg funcs[] = {
      {"control_listen", l_listen},
      {"runnable", l_runnable},
      {"tree_json", l_tree_json},
      {"json_quote", l_json_quote},
      {"getpid", l_getpid},
      {NULL, NULL},
  };
  luaL_setfuncs(L, funcs, 0);
  arbor_open_slice(L);
  arbor_open_conn(L);
}

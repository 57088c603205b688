/* server.c: the control socket's server (C1, C4), C only (server.h).
 *
 * The server listens on a Unix stream socket on a libuv loop, refuses peers
 * whose uid is neither arbor's nor root, cuts the byte stream into frames
 * (core/frame.c) and hands each to its owner's frame hook (lua/l_control.c
 * hands them to the Lua control server), which answers with
 * arbor_server_send. Each client's unsent output is bounded: a client that
 * stops reading is dropped, the engine never waits for it; one that reads a
 * large reply, however slowly, is not.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "control/peercred.h"
#include "control/server.h"
#include "core/frame.h"

#define READ_CHUNK 65536
/* Unsent output past which a client that takes no bytes for STALL_MS is
   dropped (C4); past OUT_LIMIT + ARBOR_FRAME_MAX_REPLY it is dropped at
   once. The largest reply thus reaches a client that reads it. */
#define OUT_LIMIT (64u << 20)
#define STALL_MS 5000
#define SUN_PATH_SIZE sizeof ((struct sockaddr_un *)0)->sun_path

typedef struct client {
  uv_pipe_t pipe; /* first: handle->data is not needed */
  arbor_server *srv;
  int64_t id;
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

struct arbor_server {
  uv_pipe_t pipe;
  uv_idle_t idle;
  uv_timer_t stall; /* checks the clients over the limit while any is */
  const arbor_server_hooks *hooks;
  void *ud;
  client *clients;
  int64_t next_id;
  size_t nclients;
  size_t out_limit;
  int open_handles; /* freed when the last close callback ran */
  int closed;
  char *path;
};

/* ---- helpers -------------------------------------------------------- */

/* Formats a line for the operator and hands it to the log hook. */
static void server_log(arbor_server *s, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  s->hooks->log(s->ud, buf);
}

static void server_release(arbor_server *s) {
  if (--s->open_handles > 0) return;
  free(s->path);
  free(s);
}

static void on_server_handle_closed(uv_handle_t *h) { server_release(h->data); }

static void close_handles(arbor_server *s) {
  uv_close((uv_handle_t *)&s->pipe, on_server_handle_closed);
  uv_close((uv_handle_t *)&s->idle, on_server_handle_closed);
  uv_close((uv_handle_t *)&s->stall, on_server_handle_closed);
}

/* ---- clients -------------------------------------------------------- */

static void on_client_closed(uv_handle_t *h) {
  client *c = (client *)h;
  arbor_server *s = c->srv;
  arbor_frame_free(&c->rd);
  free(c);
  server_release(s);
}

/* Closes a client (idempotent); tells the owner why. */
static void client_close(client *c, const char *why) {
  if (c->closing) return;
  c->closing = 1;
  arbor_server *s = c->srv;
  if (c->prev) c->prev->next = c->next;
  else s->clients = c->next;
  if (c->next) c->next->prev = c->prev;
  s->nclients--;
  uv_read_stop((uv_stream_t *)&c->pipe);
  uv_close((uv_handle_t *)&c->pipe, on_client_closed);
  if (!s->closed) s->hooks->closed(s->ud, c->id, why);
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
  arbor_server *s = t->data;
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
      server_log(s, "control: dropped client %d: it stopped reading (no "
                 "byte taken for %d s, %zu bytes unsent, limit %zu)",
                 (int)c->id, STALL_MS / 1000, left, s->out_limit);
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
  arbor_server *s = c->srv;
  if (unsent(c) + rest > s->out_limit + ARBOR_FRAME_MAX_REPLY) {
    server_log(s, "control: dropped client %d: it is not keeping up (%zu "
               "bytes unsent, limit %zu)", (int)c->id, unsent(c) + rest,
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
    c->since = uv_now(c->pipe.loop);
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
  arbor_server *s = c->srv;
  if (nread == 0) return;
  if (nread < 0) {
    size_t pending = arbor_frame_pending(&c->rd);
    if (nread == UV_EOF && pending > 0)
      client_fail(c, "protocol error: truncated frame: the connection ended "
                     "%zu byte(s) into a frame", pending);
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
    s->hooks->frame(s->ud, c->id, p, n);
    if (c->closing || s->closed) return;
  }
  if (st_feed == ARBOR_FRAME_TOO_BIG)
    client_fail(c, "protocol error: frame too large (%u bytes, limit %zu)",
                c->rd.bad_len, c->rd.max);
  else if (st_feed < 0)
    client_fail(c, "protocol error: %s", arbor_frame_strerror(st_feed));
}

static void on_connection(uv_stream_t *st, int status) {
  arbor_server *s = st->data;
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
    server_log(s, "control: refused a connection: no peer credentials");
    client_fail(c, "refused: no peer credentials");
    return;
  }
  if ((uid_t)uid != me && (uid_t)uid != 0) {
    server_log(s, "control: refused a connection from uid %d (pid %d): only "
                  "uid %d and root may connect",
               (int)(uid_t)uid, pid, (int)me);
    client_fail(c, "refused: uid %d may not control this engine (owner uid "
                   "%d)", (int)(uid_t)uid, (int)me);
    return;
  }
  uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
}

static client *find_client(arbor_server *s, int64_t id) {
  for (client *c = s->clients; c; c = c->next)
    if (c->id == id) return c;
  return NULL;
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
   safe (arbor_sock_dir_unsafe). Returns 0, or an error code and a message
   in buf. */
static int prepare_dir(const char *path, char *buf, size_t size) {
  char dir[SUN_PATH_SIZE], why[400];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) return 0;
  *slash = '\0';
  if (mkdir(dir, 0700) == 0) return 0;
  if (errno != EEXIST) {
    int err = -errno;
    snprintf(buf, size, "cannot create the directory %s: %s", dir,
             strerror(-err));
    return err;
  }
  /* another user could swap the socket for theirs */
  if (!arbor_sock_dir_unsafe(dir, why, sizeof why)) return 0;
  snprintf(buf, size, "%s; refusing to serve the control socket there", why);
  return ARBOR_SERVER_EUNTRUSTED;
}

/* Why path cannot be served: 0, or an error code and a message in msg;
   removes a stale socket. */
static int check_path(const char *path, char *msg, size_t size) {
  size_t plen = strlen(path);
  if (plen >= SUN_PATH_SIZE) {
    snprintf(msg, size, "control socket path too long (%d bytes, limit %d): "
             "%s", (int)plen, (int)SUN_PATH_SIZE - 1, path);
    return UV_ENAMETOOLONG;
  }
  int r = prepare_dir(path, msg, size);
  if (r) return r;
  struct stat sb;
  if (lstat(path, &sb) != 0) return 0;
  if (!S_ISSOCK(sb.st_mode)) {
    snprintf(msg, size, "%s exists and is not a socket; not replacing it",
             path);
    return UV_EEXIST;
  }
  if (socket_alive(path)) {
    snprintf(msg, size, "another arbor is serving %s (stop it, or pass "
             "--control with another path)", path);
    return UV_EADDRINUSE;
  }
  unlink(path); /* stale: its engine is gone */
  return 0;
}

static void on_idle(uv_idle_t *h) {
  arbor_server *s = h->data;
  if (!s->hooks->idle(s->ud)) uv_idle_stop(&s->idle);
}

int arbor_server_listen(arbor_server **out, uv_loop_t *loop, const char *path,
                        const arbor_server_hooks *hooks, void *ud, char *msg,
                        size_t size) {
  int r = check_path(path, msg, size);
  if (r) return r;
  arbor_server *s = calloc(1, sizeof *s);
  if (!s || !(s->path = strdup(path))) {
    free(s);
    snprintf(msg, size, "out of memory");
    return UV_ENOMEM;
  }
  s->hooks = hooks;
  s->ud = ud;
  s->out_limit = OUT_LIMIT;
  uv_pipe_init(loop, &s->pipe, 0);
  s->pipe.data = s;
  uv_idle_init(loop, &s->idle);
  s->idle.data = s;
  uv_timer_init(loop, &s->stall);
  uv_unref((uv_handle_t *)&s->stall);
  s->stall.data = s;
  s->open_handles = 3;
  mode_t old = umask(0177);
  r = uv_pipe_bind(&s->pipe, path);
  umask(old);
  if (r == 0) chmod(path, 0600);
  if (r == 0) r = uv_listen((uv_stream_t *)&s->pipe, 128, on_connection);
  if (r < 0) {
    s->closed = 1;
    close_handles(s);
    snprintf(msg, size, "cannot listen on %s: %s", path, uv_strerror(r));
    return r;
  }
  /* a peer that vanishes must not kill the engine with SIGPIPE */
  signal(SIGPIPE, SIG_IGN);
  *out = s;
  return 0;
}

int arbor_server_send(arbor_server *s, int64_t id, const char *payload,
                      size_t len) {
  client *c = find_client(s, id);
  return c ? client_send(c, payload, len) : -1;
}

size_t arbor_server_unsent(arbor_server *s, int64_t id) {
  client *c = find_client(s, id);
  return c ? unsent(c) : 0;
}

void arbor_server_drop(arbor_server *s, int64_t id, const char *why) {
  client *c = find_client(s, id);
  if (c) client_close(c, why);
}

void arbor_server_busy(arbor_server *s) {
  if (!uv_is_active((uv_handle_t *)&s->idle)) uv_idle_start(&s->idle, on_idle);
}

size_t arbor_server_clients(const arbor_server *s) { return s->nclients; }

const char *arbor_server_path(const arbor_server *s) { return s->path; }

size_t arbor_server_out_limit(const arbor_server *s) { return s->out_limit; }

void arbor_server_close(arbor_server *s) {
  s->closed = 1;
  while (s->clients) client_close(s->clients, "engine closing");
  unlink(s->path);
  close_handles(s);
}

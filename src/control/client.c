/* client.c: the blocking client side of the control socket (client.h). A
 * signal (SIGINT at the REPL) interrupts a wait.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "control/client.h"
#include "control/peercred.h"

#define READ_CHUNK 65536

void arbor_client_init(arbor_client *c) {
  c->fd = -1;
  c->err = 0;
  arbor_frame_init(&c->rd, ARBOR_FRAME_MAX_REPLY);
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

int arbor_client_connect(arbor_client *c, const char *path, char *why,
                         size_t size) {
  size_t plen = strlen(path);
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  if (plen >= sizeof sa.sun_path) {
    c->err = ENAMETOOLONG;
    return ARBOR_CLIENT_ERRNO;
  }
  memcpy(sa.sun_path, path, plen);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    c->err = errno;
    if (fd >= 0) close(fd);
    return ARBOR_CLIENT_ERRNO;
  }
  if (untrusted(path, fd, why, size)) {
    close(fd);
    return ARBOR_CLIENT_UNTRUSTED;
  }
  c->fd = fd;
  return ARBOR_CLIENT_OK;
}

/* Writes all n bytes, waiting while the socket is full: 0 or -1 (errno). */
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

int arbor_client_send(arbor_client *c, const char *p, size_t n, int framed) {
  unsigned char h[ARBOR_FRAME_HEADER];
  arbor_frame_header(h, (uint32_t)n);
  if ((framed && write_all(c->fd, (const char *)h, sizeof h) < 0) ||
      write_all(c->fd, p, n) < 0) {
    c->err = errno;
    return ARBOR_CLIENT_ERRNO;
  }
  return ARBOR_CLIENT_OK;
}

int arbor_client_recv(arbor_client *c, int timeout_ms, int wake_fd,
                      const char **payload, size_t *len) {
  static char chunk[READ_CHUNK];
  for (;;) {
    int r = arbor_frame_next(&c->rd, payload, len);
    if (r == ARBOR_FRAME_OK) return ARBOR_CLIENT_OK;
    if (r < 0) {
      c->err = r;
      return ARBOR_CLIENT_BAD;
    }
    struct pollfd pf[2] = {{c->fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    int pr = poll(pf, wake_fd >= 0 ? 2 : 1, timeout_ms);
    if ((pr < 0 && errno == EINTR) ||
        (pr > 0 && wake_fd >= 0 && (pf[1].revents & POLLIN)))
      return ARBOR_CLIENT_INTERRUPTED;
    if (pr == 0) return ARBOR_CLIENT_TIMEOUT;
    ssize_t got = recv(c->fd, chunk, sizeof chunk, 0);
    if (got < 0 && errno == EINTR) return ARBOR_CLIENT_INTERRUPTED;
    if (got == 0) return ARBOR_CLIENT_CLOSED;
    if (got < 0) {
      c->err = errno;
      return ARBOR_CLIENT_ERRNO;
    }
    r = arbor_frame_feed(&c->rd, chunk, (size_t)got);
    if (r < 0) {
      c->err = r;
      return ARBOR_CLIENT_BAD;
    }
  }
}

void arbor_client_shutdown_write(arbor_client *c) { shutdown(c->fd, SHUT_WR); }

void arbor_client_close(arbor_client *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  arbor_frame_free(&c->rd);
}

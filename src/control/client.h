/* client.h: the blocking client side of the control socket, C only: no
 * Lua. Used by core.connect (lua/l_conn.c), behind `arbor ctl`,
 * `arbor repl`, the specs and the benchmarks.
 */
#ifndef ARBOR_CLIENT_H
#define ARBOR_CLIENT_H

#include <stddef.h>

#include "core/frame.h"

typedef struct arbor_client {
  int fd; /* -1 until connected, and once closed */
  arbor_frame_reader rd;
  int err; /* after ARBOR_CLIENT_ERRNO an errno, after ARBOR_CLIENT_BAD a
              frame error (ARBOR_FRAME_*) */
} arbor_client;

enum {
  ARBOR_CLIENT_OK = 0,
  ARBOR_CLIENT_TIMEOUT,
  ARBOR_CLIENT_INTERRUPTED, /* a signal arrived, or the wake fd is readable */
  ARBOR_CLIENT_CLOSED,      /* the engine closed the connection */
  ARBOR_CLIENT_ERRNO,       /* a system call failed: c->err */
  ARBOR_CLIENT_BAD,         /* the engine sent a bad frame: c->err */
  ARBOR_CLIENT_UNTRUSTED,   /* another user could be serving the path */
};

/* Makes c unconnected (fd -1); frees nothing. */
void arbor_client_init(arbor_client *c);
/* Connects to the socket at path and checks whom it is served by (C1):
   ARBOR_CLIENT_OK, ARBOR_CLIENT_ERRNO (ENAMETOOLONG for a path too long
   for a socket), or ARBOR_CLIENT_UNTRUSTED with the reason in why (then
   nothing was sent). */
int arbor_client_connect(arbor_client *c, const char *path, char *why,
                         size_t size);
/* Writes n bytes, as one frame when framed, else as they are (tests of
   the protocol's error handling): ARBOR_CLIENT_OK or ARBOR_CLIENT_ERRNO. */
int arbor_client_send(arbor_client *c, const char *p, size_t n, int framed);
/* Waits up to timeout_ms (-1: no limit) for the next frame, which stays
   valid until the next call: ARBOR_CLIENT_OK with it in *payload and *len,
   or TIMEOUT, INTERRUPTED (also when wake_fd >= 0 is readable), CLOSED,
   ERRNO, BAD. */
int arbor_client_recv(arbor_client *c, int timeout_ms, int wake_fd,
                      const char **payload, size_t *len);
/* Half-closes the connection (tests of truncated frames). */
void arbor_client_shutdown_write(arbor_client *c);
/* Closes the connection and frees the reader; idempotent. */
void arbor_client_close(arbor_client *c);

#endif

/* server.h: the control socket's server (C1, C4), C only: no Lua, no
 * engine.
 *
 * The server listens on a Unix stream socket on a libuv loop, refuses peers
 * whose uid is neither this process's nor root, cuts each client's byte
 * stream into frames (core/frame.h) and hands each to its owner through
 * hooks; the owner answers with arbor_server_send. A client that stops
 * reading is dropped, the loop never waits for it; one that reads a large
 * reply, however slowly, is not. The Lua server object is lua/l_control.c.
 */
#ifndef ARBOR_SERVER_H
#define ARBOR_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct arbor_server arbor_server; /* opaque */

/* What the server tells its owner. Hooks run on the loop; they may call
   any arbor_server_* function, arbor_server_close included. */
typedef struct arbor_server_hooks {
  /* A whole frame from client id. */
  void (*frame)(void *ud, int64_t id, const char *payload, size_t len);
  /* Client id is gone, for the reason why (not called once the server is
     closed). */
  void (*closed)(void *ud, int64_t id, const char *why);
  /* Called each loop turn after arbor_server_busy until it returns 0. */
  int (*idle)(void *ud);
  /* A line for the operator: a dropped or refused client. */
  void (*log)(void *ud, const char *line);
} arbor_server_hooks;

/* arbor_server_listen's one error that is no errno: the socket's directory
   could hold another user's socket. */
enum { ARBOR_SERVER_EUNTRUSTED = -10000 };

/* Listens at path on loop. Returns 0 and the server in *out, or a negative
   error code with the reason in msg: UV_ENAMETOOLONG (path too long),
   ARBOR_SERVER_EUNTRUSTED (its directory unsafe), UV_EADDRINUSE (a live
   server there), UV_EEXIST (another file there), mkdir's or libuv's error
   (listen failed), UV_ENOMEM. A stale socket left by a crashed run is
   replaced. */
int arbor_server_listen(arbor_server **out, uv_loop_t *loop, const char *path,
                        const arbor_server_hooks *hooks, void *ud, char *msg,
                        size_t size);
/* Sends one frame of len bytes (1 to ARBOR_FRAME_MAX_REPLY) to client id:
   0, or -1 when the client is gone or was dropped by this send. */
int arbor_server_send(arbor_server *s, int64_t id, const char *payload,
                      size_t len);
/* The bytes sent to client id not taken by it yet (0 when gone): a
   follower may drop what it cannot keep up with (`logs -f`). */
size_t arbor_server_unsent(arbor_server *s, int64_t id);
/* Closes client id (no-op when gone); the closed hook gets why. */
void arbor_server_drop(arbor_server *s, int64_t id, const char *why);
/* Starts calling the idle hook each loop turn (until it returns 0). */
void arbor_server_busy(arbor_server *s);
size_t arbor_server_clients(const arbor_server *s);
const char *arbor_server_path(const arbor_server *s);
/* Unsent bytes past which a client that takes none is dropped. */
size_t arbor_server_out_limit(const arbor_server *s);
/* Closes every client (no hook is called any more) and the socket, removes
   the socket file; the memory goes with the last close callback. */
void arbor_server_close(arbor_server *s);

#endif

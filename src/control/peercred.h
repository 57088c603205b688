/* peercred.h: whom a control socket may be trusted to (C1), for both sides:
 * the server (server.c) and the blocking client (client.c).
 */
#ifndef ARBOR_PEERCRED_H
#define ARBOR_PEERCRED_H

#include <stddef.h>

/* The uid and pid of the peer of Unix socket fd: 0, or -1 (errno set). */
int arbor_peer_cred(int fd, int *uid, int *pid);
/* Why dir must not hold a control socket, in buf, or NULL when it may. */
const char *arbor_sock_dir_unsafe(const char *dir, char *buf, size_t size);

#endif

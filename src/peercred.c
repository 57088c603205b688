/* peercred.c: the uid and pid of a Unix socket's peer (C1). Apart because
 * struct ucred needs _GNU_SOURCE, which must not meet libuv's headers here
 * (src/sched.h shadows <sched.h> for pthread.h). */
#define _GNU_SOURCE
#include <sys/socket.h>

int arbor_peer_cred(int fd, int *uid, int *pid);

int arbor_peer_cred(int fd, int *uid, int *pid) {
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
  *uid = (int)cred.uid;
  *pid = (int)cred.pid;
  return 0;
}

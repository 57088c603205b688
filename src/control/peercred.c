/* peercred.c: whom a control socket may be trusted to (C1): the uid and pid
 * of a Unix socket's peer, and whether a directory may hold a socket. Used
 * by the server (server.c) and the client (client.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "control/peercred.h"

int arbor_peer_cred(int fd, int *uid, int *pid) {
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
  *uid = (int)cred.uid;
  *pid = (int)cred.pid;
  return 0;
}

/* Why dir must not hold a control socket of this process's effective uid,
   in buf, or NULL when it may: a symbolic link, a directory of another
   user than this one and root, or one that group or others may write to
   without the sticky bit (another user could put their socket there).
   Sticky directories such as /tmp are accepted: nobody else can replace a
   socket there, and clients check who serves it (arbor_peer_cred). */
const char *arbor_sock_dir_unsafe(const char *dir, char *buf, size_t size) {
  struct stat sb;
  uid_t me = geteuid();
  if (lstat(dir, &sb) != 0) {
    snprintf(buf, size, "the directory %s: %s", dir, strerror(errno));
  } else if (S_ISLNK(sb.st_mode)) {
    snprintf(buf, size, "the directory %s is a symbolic link", dir);
  } else if (!S_ISDIR(sb.st_mode)) {
    snprintf(buf, size, "%s is not a directory", dir);
  } else if (sb.st_uid != me && sb.st_uid != 0) {
    snprintf(buf, size, "the directory %s belongs to uid %d, not to you "
             "(uid %d) or root", dir, (int)sb.st_uid, (int)me);
  } else if ((sb.st_mode & (S_IWGRP | S_IWOTH)) && !(sb.st_mode & S_ISVTX)) {
    snprintf(buf, size, "the directory %s is writable by group or others "
             "(mode %04o)", dir, (unsigned)(sb.st_mode & 07777));
  } else {
    return NULL;
  }
  return buf;
}

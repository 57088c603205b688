/* hang_open.c: a hung file system, for the specs (spec/e2e/logfile_security_spec.lua):
 * `hang_open DIR PID` holds every open of a file in DIR by process PID
 * (fanotify permission events, answered never), as a hung NFS or FUSE mount
 * would; opens by other processes are allowed. Prints "holding" once the
 * mark is set, then one line "held" at each open it holds. SIGTERM ends it,
 * which lets the held opens go on. Needs root (CAP_SYS_ADMIN).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <unistd.h>

static volatile sig_atomic_t done;

static void on_term(int sig) {
  (void)sig;
  done = 1;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fputs("usage: hang_open DIR PID\n", stderr);
    return 2;
  }
  pid_t pid = (pid_t)atoi(argv[2]);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_term;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  int fd = fanotify_init(FAN_CLASS_CONTENT | FAN_CLOEXEC, O_RDONLY);
  if (fd < 0) {
    fprintf(stderr, "hang_open: fanotify_init: %s\n", strerror(errno));
    return 1;
  }
  if (fanotify_mark(fd, FAN_MARK_ADD, FAN_OPEN_PERM | FAN_EVENT_ON_CHILD,
                    AT_FDCWD, argv[1]) < 0) {
    fprintf(stderr, "hang_open: fanotify_mark %s: %s\n", argv[1],
            strerror(errno));
    return 1;
  }
  puts("holding");
  fflush(stdout);
  char buf[4096] __attribute__((aligned(8)));
  while (!done) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      fprintf(stderr, "hang_open: read: %s\n", strerror(errno));
      return 1;
    }
    struct fanotify_event_metadata *m = (void *)buf;
    for (; FAN_EVENT_OK(m, n); m = FAN_EVENT_NEXT(m, n)) {
      if (m->pid == pid) { /* held: never answered, its fd kept */
        puts("held");
        fflush(stdout);
        continue;
      }
      struct fanotify_response r = {.fd = m->fd, .response = FAN_ALLOW};
      if (write(fd, &r, sizeof r) < 0) perror("hang_open: write");
      if (m->fd >= 0) close(m->fd);
    }
  }
  return 0; /* closing the group lets what it held go on */
}

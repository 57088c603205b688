/* notify_listen.c: a service manager's end of NOTIFY_SOCKET, for the specs
 * (spec/e2e/sdnotify_spec.lua): `notify_listen ADDRESS` binds a datagram
 * socket at ADDRESS (a path, or @name for an abstract one), prints
 * "listening", then every datagram received as one line, its newlines
 * written as "\n". SIGTERM ends it once the datagrams already queued are
 * printed.
 */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

static volatile sig_atomic_t done;

static void on_term(int sig) {
  (void)sig;
  done = 1;
}

static void print(const char *buf, ssize_t n) {
  for (ssize_t i = 0; i < n; i++) {
    if (buf[i] == '\n')
      fputs("\\n", stdout);
    else
      putchar(buf[i]);
  }
  putchar('\n');
  fflush(stdout);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fputs("usage: notify_listen PATH|@NAME\n", stderr);
    return 2;
  }
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t n = strlen(argv[1]);
  if (n >= sizeof sa.sun_path) {
    fputs("notify_listen: address too long\n", stderr);
    return 2;
  }
  memcpy(sa.sun_path, argv[1], n);
  if (argv[1][0] == '@') sa.sun_path[0] = '\0';
  socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || bind(fd, (struct sockaddr *)&sa, len) < 0) {
    perror("notify_listen");
    return 1;
  }
  struct sigaction act = {.sa_handler = on_term}; /* no SA_RESTART */
  sigaction(SIGTERM, &act, NULL);
  /* wakes up now and then: a SIGTERM just before recv ends it too */
  struct timeval tv = {.tv_usec = 100000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  puts("listening");
  fflush(stdout);
  char buf[4096];
  while (!done) {
    ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r >= 0) print(buf, r);
    else if (errno != EINTR && errno != EAGAIN) break;
  }
  ssize_t r;
  while ((r = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) >= 0) print(buf, r);
  if (argv[1][0] == '/') unlink(argv[1]);
  return 0;
}

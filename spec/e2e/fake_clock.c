/* fake_clock.c: a wall clock that is stepped, for the specs
 * (spec/e2e/logs_spec.lua). Preloaded (LD_PRELOAD), it adds to the wall
 * clock (clock_gettime's CLOCK_REALTIME and CLOCK_REALTIME_COARSE, and
 * time) the seconds written in the file $FAKE_CLOCK_FILE, read again at
 * each call, and leaves the monotonic clock alone: as a step of the clock
 * by NTP, an admin or a resumed VM does.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* The offset in whole seconds (0 without the file). */
static long offset(void) {
  const char *path = getenv("FAKE_CLOCK_FILE");
  if (!path) return 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[32];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  return strtol(buf, NULL, 10);
}

static int is_wall(clockid_t id) {
  return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
  static int (*real)(clockid_t, struct timespec *);
  if (!real) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
  int r = real(id, ts);
  if (r == 0 && is_wall(id)) ts->tv_sec += offset();
  return r;
}

time_t time(time_t *t) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (t) *t = ts.tv_sec;
  return ts.tv_sec;
}

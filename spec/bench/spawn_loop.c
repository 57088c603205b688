/* spawn_loop.c: the baseline of the respawn benchmark (spec/bench/exec.lua):
 * a plain C loop of posix_spawn + waitpid of one program.
 * usage: bench_spawn N PROGRAM [ARGS...]; prints "<rate> spawns/s".
 */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

int main(int argc, char **argv) {
  if (argc < 3) {
    fputs("usage: bench_spawn N PROGRAM [ARGS...]\n", stderr);
    return 2;
  }
  int n = atoi(argv[1]);
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < n; i++) {
    pid_t pid;
    if (posix_spawn(&pid, argv[2], NULL, NULL, argv + 2, environ) != 0) {
      perror("posix_spawn");
      return 1;
    }
    int st;
    if (waitpid(pid, &st, 0) < 0) return 1;
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  double t = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
  printf("%.1f spawns/s\n", n / t);
  return 0;
}

/* spawn.c: posix_spawn with what arbor's processes need. glibc runs it as
 * a vfork-style clone, much cheaper than the fork libuv 1.44 uses: a
 * respawn loop runs close to a plain C posix_spawn loop.
 */
#define _GNU_SOURCE
#include "spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>

int arbor_spawn(const char *file, char *const argv[], char *const env[],
                const char *cwd, int stdin_inherit, const int *child_fds,
                int nfds, int umask_value, pid_t *pid) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  if (!stdin_inherit)
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  for (int i = 0; i < nfds; i++)
    posix_spawn_file_actions_adddup2(&fa, child_fds[i], i + 1);
  if (cwd) posix_spawn_file_actions_addchdir_np(&fa, cwd);
  /* handled signals are reset by exec itself; ignored ones would stay
     ignored: back to their defaults (one sigaction each in the child, so
     only those a supervisor or a shell may have ignored) */
  static const int reset[] = {SIGPIPE, SIGINT, SIGQUIT, SIGTERM, SIGHUP,
                              SIGCHLD, SIGUSR1, SIGUSR2, SIGALRM, SIGTSTP,
                              SIGTTIN, SIGTTOU, SIGXFSZ};
  sigset_t none, some;
  sigemptyset(&none);
  sigemptyset(&some);
  for (size_t i = 0; i < sizeof reset / sizeof *reset; i++)
    sigaddset(&some, reset[i]);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &some);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                    POSIX_SPAWN_SETSIGDEF);
  mode_t old = 0;
  if (umask_value >= 0) old = umask((mode_t)umask_value);
  int rc = posix_spawn(pid, file, &fa, &at, argv, env);
  if (umask_value >= 0) umask(old);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  return rc;
}

/* spawn.c: posix_spawn with what arbor's processes need. glibc runs it as
 * a vfork-style clone, much cheaper than the fork libuv 1.44 uses: a
 * respawn loop runs close to a plain C posix_spawn loop.
 */
#define _GNU_SOURCE
#include "spawn.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* Signals a child gets back at their defaults. exec resets handled ones
   itself but keeps ignored ones ignored: a shell starts background jobs
   with SIGINT and SIGQUIT ignored, nohup ignores SIGHUP, and the control
   socket ignores SIGPIPE (control.c). Resetting the whole list, whatever
   arbor's disposition is now, covers all of them. */
static const int default_sigs[] = {SIGPIPE, SIGINT,  SIGQUIT, SIGTERM, SIGHUP,
                                   SIGCHLD, SIGUSR1, SIGUSR2, SIGALRM, SIGTSTP,
                                   SIGTTIN, SIGTTOU, SIGXFSZ};
static sigset_t defaults;
static int prepared, devnull = -1;

static void prepare(void) {
  sigemptyset(&defaults);
  for (size_t i = 0; i < sizeof default_sigs / sizeof *default_sigs; i++)
    sigaddset(&defaults, default_sigs[i]);
  devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  prepared = 1;
}

int arbor_spawn(const char *file, char *const argv[], char *const env[],
                const char *cwd, int stdin_inherit, const int *child_fds,
                int nfds, int umask_value, pid_t *pid) {
  if (!prepared) prepare();
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  if (!stdin_inherit && devnull >= 0)
    posix_spawn_file_actions_adddup2(&fa, devnull, 0);
  else if (!stdin_inherit)
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  for (int i = 0; i < nfds; i++)
    posix_spawn_file_actions_adddup2(&fa, child_fds[i], i + 1);
  if (cwd) posix_spawn_file_actions_addchdir_np(&fa, cwd);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &defaults);
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

const char *arbor_shim_path(void) {
  static char path[PATH_MAX];
  const char *env = getenv("ARBOR_EXEC_SHIM");
  if (env && *env) return env;
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n > 0) {
    path[n] = '\0';
    const char *base = strrchr(path, '/');
    if (base && strcmp(base + 1, "arbor") == 0) return path;
  }
#if defined(ARBOR_SHIM_BUILD) && defined(ARBOR_SHIM_INSTALL)
  Dl_info info;
  char mod[PATH_MAX], dir[PATH_MAX];
  if (dladdr((void *)arbor_shim_path, &info) && info.dli_fname &&
      realpath(info.dli_fname, mod) && realpath(ARBOR_BUILD_DIR, dir) &&
      strncmp(mod, dir, strlen(dir)) == 0)
    return ARBOR_SHIM_BUILD;
  return ARBOR_SHIM_INSTALL;
#else
  return "arbor";
#endif
}

int arbor_exec_shim(int argc, char **argv) {
  if (argc < 5) {
    fputs("arbor --exec-shim LIMITS FILE ARGV0 [ARGS...]\n", stderr);
    return 127;
  }
  /* like every process arbor starts, it dies with arbor (the guard also
     covers its group) */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  char *spec = argv[2], *save = NULL;
  for (char *item = strtok_r(spec, ",", &save); item;
       item = strtok_r(NULL, ",", &save)) {
    int res;
    long long soft, hard;
    if (sscanf(item, "%d=%lld:%lld", &res, &soft, &hard) != 3) {
      fprintf(stderr, "arbor: --exec-shim: bad limit '%s'\n", item);
      return 127;
    }
    struct rlimit rl = {soft < 0 ? RLIM_INFINITY : (rlim_t)soft,
                        hard < 0 ? RLIM_INFINITY : (rlim_t)hard};
    if (setrlimit(res, &rl) < 0) {
      fprintf(stderr, "arbor: cannot set resource limit %d to %lld:%lld: %s\n",
              res, soft, hard, strerror(errno));
      return 127;
    }
  }
  execv(argv[3], argv + 4);
  fprintf(stderr, "arbor: cannot run %s: %s\n", argv[3], strerror(errno));
  return 127;
}

/* spawn.h: starting a program with posix_spawn (see spawn.c). Compiled
 * without src/ on the include path: src/sched.h would shadow the system's
 * <sched.h> that <spawn.h> needs.
 */
#ifndef ARBOR_SPAWN_H
#define ARBOR_SPAWN_H

#include <sys/types.h>

/* Starts file with argv and env in a new session (its own process group),
   all signals at their defaults and none blocked, stdin on /dev/null unless
   stdin_inherit, the child ends of the nfds pipes in child_fds as fds 1,
   2, 3..., in cwd (if set), under umask_value (if >= 0). Returns 0 and
   *pid, or an errno value (ENOENT, EACCES, ...). */
int arbor_spawn(const char *file, char *const argv[], char *const env[],
                const char *cwd, int stdin_inherit, const int *child_fds,
                int nfds, int umask_value, pid_t *pid);

/* The arbor executable that applies rlimits before exec (arbor_exec_shim):
   this one when the caller is arbor, else the one next to the module. */
const char *arbor_shim_path(void);

/* `arbor --exec-shim LIMITS FILE ARGV0 ARGS...`: sets the resource limits
   LIMITS ("resource=soft:hard,...", RLIMIT_* numbers, -1 for infinity),
   then execs FILE. Returns (127) only when that fails. */
int arbor_exec_shim(int argc, char **argv);

#endif

/* spawn.h: starting a program (see spawn.c). */
#ifndef ARBOR_SPAWN_H
#define ARBOR_SPAWN_H

#include <sys/types.h>

typedef struct {
  const char *file;        /* a path: no PATH search */
  char *const *argv, *const *env;
  const char *cwd;         /* NULL: arbor's */
  const int *child_fds;    /* become the child's fds 1, 2, 3... */
  int nfds;
  int stdin_inherit;       /* else stdin is /dev/null */
  int umask_value;         /* < 0: arbor's */
  int set_uid, set_gid;    /* switch to uid / gid (supplementary groups dropped) */
  uid_t uid;
  gid_t gid;
  char *pid_var;           /* "NAME=" with room for 20 more bytes, or NULL:
                              the child appends its pid (WATCHDOG_PID) */
} arbor_spawn_opts;

/* Starts o->file in a new session (its own process group), all signals at
   their defaults and none blocked, killed if arbor dies (PR_SET_PDEATHSIG),
   with descriptors 0 (/dev/null or arbor's stdin) and 1... (child_fds)
   only. Returns 0 and *pid once the program runs, or the errno value of
   the step that failed (ENOENT, EACCES, ENOEXEC, EPERM...). */
int arbor_spawn(const arbor_spawn_opts *o, pid_t *pid);

/* Marks every descriptor from `from` up close-on-exec (arbor's start-up:
   what it inherited does not reach its children). */
void arbor_fds_cloexec(int from);
/* Closes every descriptor from `from` up (the guard, once forked). */
void arbor_fds_close(int from);

/* The arbor executable that applies rlimits before exec (arbor_exec_shim):
   this one when the caller is arbor, else the one next to the module. */
const char *arbor_shim_path(void);

/* `arbor --exec-shim LIMITS FILE ARGV0 ARGS...`: sets the resource limits
   LIMITS ("resource=soft:hard,...", RLIMIT_* numbers, -1 for infinity),
   then execs FILE. Returns (127) only when that fails. */
int arbor_exec_shim(int argc, char **argv);

#endif

/* proc.h: operating-system processes of runnables (X1-X6), for the
 * bindings (l_exec.c) and the arbor binary: spawning in a process group,
 * stdout/stderr read line by line into the node's log, readiness
 * notifications, the graceful stop of the group, the guard that kills the
 * groups when arbor dies (guard.c), the reaper of --init (reaper.c) and
 * signal names (signames.c). A process is opaque here: proc/internal.h.
 */
#ifndef ARBOR_PROC_H
#define ARBOR_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "engine/engine.h"

enum { PROC_READY_SPAWN = 0, PROC_READY_NOTIFY, PROC_READY_SYSTEMD };

typedef struct arbor_proc_opts {
  const char *file;      /* resolved path of the program */
  char **argv;           /* NULL-terminated */
  char **env;            /* NULL-terminated, or NULL: arbor's environment */
  const char *cwd;
  int set_uid, set_gid;
  uid_t uid;
  gid_t gid;
  int umask;             /* -1: inherited */
  int stdin_inherit;
  int ready;             /* PROC_READY_* */
  int stop_signal;
  double grace;
  size_t line_max;       /* 0: ARBOR_LINE_MAX */
  double watchdog;       /* seconds (WATCHDOG_USEC), 0: none */
} arbor_proc_opts;

typedef struct arbor_proc arbor_proc;

/* ---- proc.c ----------------------------------------------------------- */

/* Starts a process for pn's current incarnation. Returns 0, or a negative
   libuv error with a message in err (size errlen). */
int arbor_proc_spawn(arbor_engine *e, pnode *pn, const arbor_proc_opts *o,
                     arbor_proc **out, char *err, size_t errlen);
/* Stops the process group: stop_signal now, SIGKILL after grace. Nothing
   when it is stopping or gone already. */
void arbor_proc_stop(arbor_proc *p);
/* Sends sig to the main process, or (group) to its whole group. Returns
   0, -ESRCH once that exited, or a negative errno. */
int arbor_proc_kill(arbor_proc *p, int sig, int group);
/* The Lua handle let go of p: it is freed once its handles are closed. */
void arbor_proc_release(arbor_proc *p);
/* Records that its owner parked on p with wait sequence seq (pn->wait_seq
   after arbor_engine_park): the next event wakes it. */
void arbor_proc_wait(arbor_proc *p, uint32_t seq);
/* The owner was resumed (for whatever reason): it no longer waits on p. */
void arbor_proc_woken(arbor_proc *p);
/* Queues stdout lines for arbor_proc_pop_line (on), or drops them (off). */
void arbor_proc_watch(arbor_proc *p, int on);
/* Consumes one readiness notification: 1, or 0 when none came. */
int arbor_proc_take_ready(arbor_proc *p);
/* Consumes one watchdog notification: 1 for WATCHDOG=1, 2 for
   WATCHDOG=trigger, 3 for EXTEND_TIMEOUT_USEC (seconds in *extend), or 0
   when none came. */
int arbor_proc_take_watchdog(arbor_proc *p, double *extend);
/* 1 when a queued line or a notification waits. */
int arbor_proc_pending(const arbor_proc *p);
/* The node whose incarnation started p while that incarnation runs on a
   live engine, else NULL. */
pnode *arbor_proc_owner(const arbor_proc *p);
int arbor_proc_pid(const arbor_proc *p);
/* 1 once the group is gone and its output read: waiting for it is over. */
int arbor_proc_finished(const arbor_proc *p);
/* 1 when its group had to be killed (SIGKILL) after the grace of a stop:
   the grace in *grace. */
int arbor_proc_killed_after_grace(const arbor_proc *p, double *grace);
/* 1 when arbor stopped it (arbor_proc_stop), not its own exit. */
int arbor_proc_stopped(const arbor_proc *p);
/* How it ended: the signal that killed it, or 0 and its exit status in
   *status. */
int arbor_proc_status(const arbor_proc *p, int64_t *status);

/* ---- a reexec (docs/restore.md) -------------------------------------- */

/* What the arbor that execs in this one's place needs to take a process
   over: its pid, its slot with the guard, and descriptors that stay open
   across the exec. */
typedef struct arbor_proc_record {
  int pid, slot;
  int fds[4];          /* stdout and stderr read ends, then write ends */
  int note, sd;        /* the fd 3 pipe's read end, the systemd socket; -1 */
  const char *sd_path; /* the socket's path (p's), or NULL */
  int stop_signal;     /* how it is stopped: its stop signal, then SIGKILL */
  double grace;        /* after grace seconds */
} arbor_proc_record;

/* Fills r for p and clears close-on-exec on its descriptors. -1 when p
   cannot be taken over (it is stopping or exited, or has no pipes). */
int arbor_proc_export(arbor_proc *p, arbor_proc_record *r);
/* Calls fn for each process of e whose main process runs, with its owner. */
void arbor_proc_each(arbor_engine *e,
                     void (*fn)(arbor_proc *p, pnode *pn, void *ud), void *ud);
/* Takes over, for pn's current incarnation, the process r describes,
   which the arbor before this one (same pid: its children are ours)
   started. Refused (a negative errno, a message in err) when r.pid is not
   a child of this process leading its own group, or a descriptor is not
   what it should be. o: its stop signal, grace, line length. */
int arbor_proc_adopt(arbor_engine *e, pnode *pn, const arbor_proc_record *r,
                     const arbor_proc_opts *o, arbor_proc **out, char *err,
                     size_t errlen);
/* The guard's socket and table, and its pid, kept open across an exec: 0,
   or -1 when there is no guard. */
int arbor_proc_guard_export(int fds[2], int *pid);
/* After a reexec: the guard is the one of the arbor before. */
int arbor_proc_guard_adopt(int sock, int table, int pid);

/* ---- common.c --------------------------------------------------------- */

/* Calls fn(pid, pgrp, stat, ud) for every process in /proc that is not a
   zombie, until fn returns nonzero; stat is its /proc/PID/stat after the
   command's ")": " S ppid pgrp session ...". Returns -1 when /proc cannot
   be read, else 0. */
int arbor_proc_scan(int (*fn)(int pid, int pgrp, const char *stat, void *ud),
                    void *ud);
/* The same for the processes of the sessions arbor's processes lead (each
   leads its own, and its process group: the members of these groups and
   what left them for another group of the session), without reading all
   of /proc: they are found below arbor, through the children files
   (/proc/PID/task/TID/children) of arbor and of each process of those
   sessions, so the cost is theirs, not the host's. A member whose parent
   exited was reparented: to arbor when it reaps orphans (--init, PID 1),
   found then; else out of arbor's sight, unless its group's main process
   is gone too: then, and on a kernel without children files, all of /proc
   is read. */
int arbor_proc_scan_own(int (*fn)(int pid, int pgrp, const char *stat,
                                  void *ud),
                        void *ud);

/* ---- outlet.c --------------------------------------------------------- */

/* Pops the next queued stdout line (a reference), or NULL. */
arbor_str *arbor_proc_pop_line(arbor_proc *p);

/* ---- reaper.c --------------------------------------------------------- */

/* --init: become a subreaper (unless PID 1), reap orphaned descendants on
   SIGCHLD and forward SIGHUP, SIGUSR1, SIGUSR2 to the process groups.
   Returns 0 or a negative errno. */
int arbor_reaper_start(uv_loop_t *loop);

/* ---- signames.c ------------------------------------------------------- */

/* Signal number of a name ("TERM", "SIGTERM") or -1. */
int arbor_signal_number(const char *name);
/* Name of a signal number ("SIGTERM"), or NULL. */
const char *arbor_signal_name(int sig);

#endif

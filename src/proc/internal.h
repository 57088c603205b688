/* internal.h: what the files of proc/ share: the process object and the
 * arbor__ functions, sectioned by file. The files call each other in one
 * direction only (no two in a cycle):
 *
 *   proc.c, reaper.c  spawn, exit, stop, teardown / --init
 *   notify.c          readiness: the fd 3 pipe, the systemd socket
 *   guard.c           the process that kills the groups when arbor dies
 *   outlet.c          stdout/stderr pipes, line splitting, the line queue
 *   common.c          the process tables, a process's lifetime, its owner
 *   signames.c        signal names
 *
 * each calling only those below it (reaper.c calls proc.c).
 */
#ifndef ARBOR_PROC_INTERNAL_H
#define ARBOR_PROC_INTERNAL_H

#include "proc/proc.h"

#define ARBOR_PROC_QUEUE 64   /* stdout lines kept for a readiness check */
#define ARBOR_LINE_MAX 4096   /* default longest log line; longer ones split */

typedef struct arbor_outlet arbor_outlet;

/* Which partial line (buf, blen) a read belongs to. */
enum { PROC_STDOUT = 0, PROC_STDERR, PROC_NOTIFY };

struct arbor_proc {
  uv_pipe_t note;           /* s6 notification pipe (fd 3) */
  uv_poll_t sd;             /* systemd notification socket */
  uv_timer_t timer;         /* the stop: polls the group, SIGKILL at grace */
  arbor_proc *prev, *next;  /* all processes of the state */
  arbor_proc *rprev, *rnext; /* those whose main process runs (not reaped) */
  arbor_outlet *outlet;     /* its stdout and stderr, until its group is gone */
  arbor_engine *e;          /* NULL once the engine let its processes go */
  pnode *pn;                /* owner (referenced) */
  uint64_t incarnation;
  int pid;
  int stop_signal;
  double grace;
  double kill_at;           /* time (uv_hrtime, s) of the SIGKILL, while
                               stopping */
  int sd_fd;
  int slot;                 /* its slot in the guard's table, or -1 */
  char *sd_path;            /* the socket's path, in its own directory */
  size_t line_max;
  char *buf[3];             /* partial lines of stdout, stderr, notify */
  size_t blen[3];
  int handles;              /* libuv handles not closed yet */
  unsigned ready;           /* readiness notifications not yet consumed */
  unsigned pings;           /* WATCHDOG=1 not yet consumed */
  uint8_t triggered;        /* WATCHDOG=trigger came, not yet consumed */
  double extend;            /* EXTEND_TIMEOUT_USEC (s) not yet consumed, or
                               0 */
  char pid_var[32];         /* "WATCHDOG_PID=", the child writes its pid */
  int watch;                /* queue stdout lines for the runnable */
  arbor_str *queue[ARBOR_PROC_QUEUE];
  unsigned qstart, qlen;
  int64_t status;           /* exit status, when exited by itself */
  int term_signal;          /* signal that ended it, or 0 */
  uint8_t exited;           /* the main process ended */
  uint8_t gone;             /* ... and its whole group */
  uint8_t stopping;         /* arbor is stopping it (1), or what its main
                               process left behind (2) */
  uint8_t killed;           /* SIGKILL sent */
  uint8_t lua_gone;         /* the Lua handle was collected */
  uint8_t waiting;          /* the owner is parked on this process */
  uint32_t wait_seq;
};

/* ---- proc.c ----------------------------------------------------------- */

/* p's main process was reaped with wait status st (reaper.c reaps too). */
void arbor_proc_reaped(arbor_proc *p, int st);

/* ---- common.c --------------------------------------------------------- */

extern arbor_proc *arbor__procs;   /* every process not yet freed */
extern arbor_proc *arbor__running; /* those not reaped yet (SIGCHLD) */

/* The parent and process group of a live process (not a zombie): 0, or
   -1 when it is gone or /proc cannot tell. */
int arbor__proc_parent_group(int pid, int *ppid, int *pgrp);
/* Lists a new process in arbor__procs. */
void arbor__proc_add(arbor_proc *p);
/* Lists p in arbor__running: its main process started. */
void arbor__proc_running_add(arbor_proc *p);
/* p's main process was reaped (or never started). */
void arbor__proc_running_del(arbor_proc *p);
/* Closes h, one of p's handles (unless closed already); p is freed once
   its last handle closed and the Lua handle let it go. */
void arbor__proc_close_handle(arbor_proc *p, uv_handle_t *h);
/* Frees p if nothing holds it any more. */
void arbor__proc_maybe_free(arbor_proc *p);
/* Something happened: the owner parked on p is resumed to look at it. */
void arbor__proc_wake(arbor_proc *p);
/* Logs "what: text" (n bytes) on pn, from a libuv callback; 0 when nothing
   was logged (e NULL or freed, or out of memory). */
int arbor__proc_log(arbor_engine *e, pnode *pn, const char *what,
                    const char *s, size_t n);
/* Logs line on the root of every tree with processes, or on stderr when
   none has any: what concerns them all (the guard). */
void arbor__proc_log_everywhere(arbor_str *line);

/* ---- notify.c (reexec) ------------------------------------------------ */
/* p's notification descriptors (the fd 3 pipe's read end, the systemd
   socket, -1 when none) and the socket's path, for a reexec. */
void arbor__notify_export(const arbor_proc *p, int *note, int *sd,
                          const char **sd_path);
/* After a reexec: p listens on the descriptors the arbor before exported
   (arbor__notify_start starts reading). */
int arbor__notify_adopt(arbor_proc *p, uv_loop_t *loop, int note, int sd,
                        const char *sd_path);

/* ---- outlet.c --------------------------------------------------------- */

/* libuv's allocation callback for every read of proc/: one static buffer
   (reads are consumed before the next). */
void arbor__outlet_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
/* Splits data read from stream idx (PROC_*) of p into lines: logged, and
   stdout's queued when watched; a line on the notify pipe means ready. */
void arbor__outlet_feed(arbor_proc *p, int idx, const char *data, size_t n);
/* Ends stream idx's partial line, if any. */
void arbor__outlet_flush(arbor_proc *p, int idx);
/* Gives p its node's idle outlet, or new pipes (*made set). NULL when the
   pipes cannot be made (errno). */
arbor_outlet *arbor__outlet_take(arbor_proc *p, int *made);
/* The write end (0: stdout, 1: stderr) a process gets of o. */
int arbor__outlet_fd(const arbor_outlet *o, int i);
/* p could not start: its outlet goes back unused (new pipes, made, are
   closed). */
void arbor__outlet_unused(arbor_proc *p, int made);
/* p lets its outlet go, once its group is gone: what it wrote is read now. */
void arbor__outlet_release(arbor_proc *p);
/* p's outlet's descriptors (read ends of stdout and stderr, then their
   write ends), for a reexec (what it read and did not log yet is logged
   now); -1 when it has none. */
int arbor__outlet_export(arbor_proc *p, int fds[4]);
/* After a reexec: p's outlet is made of the descriptors the arbor before
   exported (arbor__outlet_export); NULL when out of memory. */
arbor_outlet *arbor__outlet_adopt(arbor_proc *p, const int fds[4]);
/* Closes pn's idle outlet, if any. */
void arbor__outlet_close_idle(pnode *pn);
/* Closes the idle outlets of engine e, or (e NULL) of every engine on
   loop. */
void arbor__outlet_close_all(arbor_engine *e, uv_loop_t *loop);

/* ---- guard.c ---------------------------------------------------------- */
/* The guard's socket and table (a memfd) in fds and its pid, for a reexec
   (restore.c); -1 when there is no guard. */
int arbor__guard_export(int fds[2], int *pid);
/* After a reexec: the guard of the arbor before is this one (its socket,
   its table's memfd, its pid). 0 or a negative errno. */
int arbor__guard_adopt(int sock, int table, int pid);
/* An adopted process keeps its slot in the table: 0 when slot holds its
   pid, else -1. */
int arbor__guard_slot(arbor_proc *p, int slot);

/* Lists p's group with the guard (started if need be). */
void arbor__guard_add(arbor_proc *p);
/* p's group is gone: its slot is free. */
void arbor__guard_del(arbor_proc *p);
/* Reaps the guard when pid is it (0: the guard's own pid) and it exited;
   a new one is started and the trees are told. 1 when it was the guard. */
int arbor__guard_reap(int pid);

/* ---- notify.c --------------------------------------------------------- */

/* The variables a child gets for its notifications (NULL-terminated). */
typedef struct arbor_notify_vars {
  char buf[3][200];
  char *v[5];
} arbor_notify_vars;

/* Makes p's readiness channel for o->ready: the fd 3 pipe's handle or the
   systemd socket (also opened for o->watchdog, with WATCHDOG_USEC and
   WATCHDOG_PID in p->pid_var, which the child fills); vars->v lists the
   variables the child gets. Returns 0, or a libuv error with a message in
   err. */
int arbor__notify_open(arbor_proc *p, const arbor_proc_opts *o,
                       uv_loop_t *loop, arbor_notify_vars *vars, char *err,
                       size_t errlen);
/* The child's environment: base (or arbor's) without NOTIFY_SOCKET,
   ARBOR_NOTIFY_FD, WATCHDOG_USEC and WATCHDOG_PID (arbor's own, when it
   runs under a supervisor), plus vars. NULL for arbor's own as it is, or
   out of memory; free() it. */
char **arbor__notify_env(char **base, char *const *vars);
/* Starts listening, once the child runs; at the end of the fd 3 pipe
   ended(p) is called (proc.c, above, advances the process). */
void arbor__notify_start(arbor_proc *p, void (*ended)(arbor_proc *));
/* 1 while the fd 3 pipe is open (a process that left the group may still
   write to it). */
int arbor__notify_listening(const arbor_proc *p);
/* Ends the notifications: the partial line, the pipe, the socket. */
void arbor__notify_close(arbor_proc *p);

#endif

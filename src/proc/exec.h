/* exec.h: operating-system processes of runnables (X1-X6): spawning in a
 * process group, stdout/stderr read line by line into the node's log,
 * readiness notifications, the graceful stop of the group, the guard that
 * kills the groups when arbor dies, and the reaper of --init.
 */
#ifndef ARBOR_EXEC_H
#define ARBOR_EXEC_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "engine/processor.h"

#define ARBOR_PROC_QUEUE 64   /* stdout lines kept for a readiness check */
#define ARBOR_LINE_MAX 4096   /* default longest log line; longer ones split */

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
  size_t line_max;
} arbor_proc_opts;

typedef struct arbor_proc arbor_proc;
typedef struct arbor_outlet arbor_outlet;

struct arbor_proc {
  uv_pipe_t note;           /* s6 notification pipe (fd 3) */
  uv_poll_t sd;             /* systemd notification socket */
  uv_timer_t timer;         /* the stop: polls the group, SIGKILL at grace */
  arbor_proc *prev, *next;  /* all processes of the state */
  arbor_proc *rprev, *rnext; /* those whose main process runs (not reaped) */
  arbor_outlet *outlet;     /* its stdout and stderr, until its group is gone */
  arbor_engine *e;
  pnode *pn;                /* owner (referenced) */
  uint64_t incarnation;
  int pid;
  int stop_signal;
  double grace;
  double kill_at;           /* engine time of the SIGKILL, while stopping */
  int sd_fd;
  int slot;                 /* its slot in the guard's table, or -1 */
  char *sd_path;            /* the socket's path, in its own directory */
  size_t line_max;
  char *buf[3];             /* partial lines of stdout, stderr, notify */
  size_t blen[3];
  int handles;              /* libuv handles not closed yet */
  unsigned ready;           /* readiness notifications not yet consumed */
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

/* Starts a process for pn. Returns 0, or a negative libuv error with a
   message in err (size errlen). */
int arbor_proc_spawn(arbor_engine *e, pnode *pn, const arbor_proc_opts *o,
                     arbor_proc **out, char *err, size_t errlen);
/* Stops the process group: stop_signal now, SIGKILL after grace. */
void arbor_proc_stop(arbor_proc *p);
/* pn's incarnation ended (in state s): its processes still running are
   stopped (in the background). */
void arbor_proc_incarnation_end(pnode *pn, arbor_state s);
/* pn was discarded: its idle output pipes are closed (a process of it
   still stopping closes its own when its group is gone). */
void arbor_proc_node_discarded(pnode *pn);
/* The Lua handle let go of p: it is freed once its handles are closed. */
void arbor_proc_release(arbor_proc *p);
/* Pops the next queued stdout line (a reference), or NULL. */
arbor_str *arbor_proc_pop_line(arbor_proc *p);
/* Records that pn is parked on p: the next event enqueues it. */
void arbor_proc_wait(arbor_proc *p);

/* Kills (SIGKILL) and reaps what is left of e's processes: the engine is
   being freed. */
void arbor_exec_engine_free(arbor_engine *e);
/* The same for every process of the loop (the state closes). */
void arbor_exec_shutdown(uv_loop_t *loop);

/* --init: become a subreaper (unless PID 1), reap orphaned descendants on
   SIGCHLD and forward SIGHUP, SIGUSR1, SIGUSR2 to the process groups. */
int arbor_exec_init_mode(uv_loop_t *loop);

/* Signal number of a name ("TERM", "SIGTERM") or -1. */
int arbor_signal_number(const char *name);
/* Name of a signal number ("SIGTERM"), or NULL. */
const char *arbor_signal_name(int sig);

#endif

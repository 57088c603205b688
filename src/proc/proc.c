/* proc.c: processes of runnables, on arbor's libuv loop: spawn, exit, stop
 * and teardown. See proc.h.
 *
 * Each process is started by spawn.c in a new session (its own session
 * and process group, out of the terminal's foreground group, so a Ctrl-C
 * reaches arbor only and arbor stops the tree in order). Its stdout and
 * stderr are pipes read into the node's log line by line (outlet.c), its
 * group is listed with the guard (guard.c), and its exit is reaped on
 * SIGCHLD.
 *
 * A stop sends stop_signal (and SIGCONT) to the group, then SIGKILL when
 * `grace` seconds passed; it ends as soon as the group is gone: the main
 * process reaped and no other member alive (zombies reparented elsewhere do
 * not count: they are found in /proc). Then the owner is woken.
 *
 * The engine is below: it reaches this file only through the hooks
 * registered at the first process (arbor_engine_set_procs).
 */
#define _GNU_SOURCE /* pipe2, strerrorname_np */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc/internal.h"
#include "proc/spawn.h"

extern char **environ;

static double now_s(void) { return (double)uv_hrtime() / 1e9; }

/* 1 while a member of the process group is alive. kill() also finds
   zombies, which may wait long for a parent that does not reap them: a
   group with members is checked in /proc for one that is not a zombie. */
/* fn of arbor_proc_scan: q[0] is the group; at a member, q[1] = 1, stop. */
static int in_group(int pid, int pgrp, const char *stat, void *ud) {
  (void)pid, (void)stat;
  int *q = ud;
  if (pgrp != q[0]) return 0;
  q[1] = 1;
  return 1;
}

static int group_alive(int pgid) {
  if (kill(-pgid, 0) < 0 && errno == ESRCH) return 0;
  int q[2] = {pgid, 0};
  if (arbor_proc_scan(in_group, q) < 0) return 1; /* cannot tell: alive */
  return q[1];
}

/* ---- exit and stop ---------------------------------------------------- */

static void on_timer(uv_timer_t *t);

static void poll_group(arbor_proc *p) {
  if (!uv_is_active((uv_handle_t *)&p->timer))
    uv_timer_start(&p->timer, on_timer, 10, 10);
}

/* Signals p's group, the main process with it: once. The main process
   leads its own session, so it cannot leave its group (setsid and setpgid
   refuse a session leader). */
static void signal_group(arbor_proc *p, int sig) { kill(-p->pid, sig); }

/* No member of p's group is left: what it wrote is read now; its
   notification pipe gets 0.5 s more (a process that left the group may
   hold it). */
static void group_gone(arbor_proc *p) {
  p->gone = 1;
  p->kill_at = now_s() + 0.5;
  arbor__guard_del(p);
  arbor__outlet_release(p);
}

/* Advances a process towards its end: the group gone, its output read,
   then the owner woken. */
static void check(arbor_proc *p) {
  if (!p->exited || p->handles == 0) return;
  if (!p->gone) {
    if (group_alive(p->pid)) {
      poll_group(p);
      return;
    }
    group_gone(p);
  }
  if (arbor__notify_listening(p) && now_s() < p->kill_at) {
    poll_group(p);
    return;
  }
  arbor__notify_close(p);
  arbor__proc_close_handle(p, (uv_handle_t *)&p->timer);
  arbor__proc_wake(p);
}

static void on_timer(uv_timer_t *t) {
  arbor_proc *p = t->data;
  if (p->stopping && !p->killed && !p->gone && now_s() >= p->kill_at) {
    p->killed = 1;
    signal_group(p, SIGKILL);
    char line[160];
    int n = snprintf(line, sizeof line,
                     p->exited ? "what process %d left in its group was "
                                 "killed after grace %g s (SIGKILL)"
                               : "process %d killed after grace %g s "
                                 "(SIGKILL to its group)",
                     p->pid, p->grace);
    arbor__proc_log(p->e, p->pn, "stop", line, (size_t)n);
    /* during a stop of the tree, not a clean one (T12) */
    if (p->stopping == 1 && p->e) arbor_engine_count_kill(p->e, p->pn, p->pid);
  }
  check(p);
}

/* The main process ended (reaped). */
static void proc_exited(arbor_proc *p, int64_t status, int term_signal) {
  p->exited = 1;
  arbor__proc_running_del(p);
  p->status = status;
  p->term_signal = term_signal;
  if (!group_alive(p->pid)) {
    group_gone(p);
  } else if (!p->stopping) {
    /* what the main process left in its group is stopped too */
    p->stopping = 2; /* not arbor's stop: the exit stands */
    signal_group(p, p->stop_signal);
    signal_group(p, SIGCONT);
    p->kill_at = now_s() + p->grace;
  }
  check(p);
}

void arbor_proc_reaped(arbor_proc *p, int st) {
  if (WIFSIGNALED(st))
    proc_exited(p, 0, WTERMSIG(st));
  else
    proc_exited(p, WEXITSTATUS(st), 0);
}

/* SIGCHLD: reaps arbor's processes (libuv reaps its own, luv's, the same
   way: waitpid on each pid it knows). */
static uv_signal_t chld;
static void on_chld(uv_signal_t *h, int sig) {
  (void)h;
  (void)sig;
  for (arbor_proc *p = arbor__running, *next; p; p = next) {
    next = p->rnext;
    int st;
    if (waitpid(p->pid, &st, WNOHANG) == p->pid) arbor_proc_reaped(p, st);
  }
  arbor__guard_reap(0);
}

/* SIGCHLD is watched (before any child can exit). */
static void watch_children(uv_loop_t *loop) {
  if (uv_is_active((uv_handle_t *)&chld)) return;
  uv_signal_init(loop, &chld);
  uv_signal_start(&chld, on_chld, SIGCHLD);
  uv_unref((uv_handle_t *)&chld);
}

void arbor_proc_stop(arbor_proc *p) {
  if (p->stopping || p->gone) return;
  p->stopping = 1;
  signal_group(p, p->stop_signal);
  signal_group(p, SIGCONT);
  p->kill_at = now_s() + p->grace;
  if (p->timer.data == p && !uv_is_closing((uv_handle_t *)&p->timer))
    poll_group(p);
}

int arbor_proc_kill(arbor_proc *p, int sig, int group) {
  if (p->gone || (!group && p->exited)) return 1;
  return kill(group ? -p->pid : p->pid, sig) < 0 ? -errno : 0;
}

/* ---- spawning --------------------------------------------------------- */

/* Starts the process (spawn.c) with its output on its outlet's pipes; the
   exit is reaped on SIGCHLD (on_chld). Returns 0 or a negative errno. */
static int start(arbor_proc *p, const arbor_proc_opts *o, char **env,
                 uv_loop_t *loop) {
  int made = 0, note[2] = {-1, -1}, rc = 0;
  arbor_outlet *out = arbor__outlet_take(p, &made);
  if (!out) rc = -errno;
  int child[3] = {out ? arbor__outlet_fd(out, 0) : -1,
                  out ? arbor__outlet_fd(out, 1) : -1, -1};
  int n = o->ready == PROC_READY_NOTIFY ? 3 : 2;
  if (rc == 0 && n == 3 && pipe2(note, O_CLOEXEC) < 0) rc = -errno;
  child[2] = note[1];
  watch_children(loop);
  pid_t pid = 0;
  arbor_spawn_opts so = {
      .file = o->file, .argv = o->argv, .env = env ? env : environ,
      .cwd = o->cwd, .child_fds = child, .nfds = n,
      .stdin_inherit = o->stdin_inherit, .umask_value = o->umask,
      .set_uid = o->set_uid, .set_gid = o->set_gid, .uid = o->uid,
      .gid = o->gid, .pid_var = p->pid_var[0] ? p->pid_var : NULL};
  if (rc == 0) rc = -arbor_spawn(&so, &pid);
  if (note[1] >= 0) close(note[1]);
  if (note[0] >= 0 && rc == 0)
    uv_pipe_open(&p->note, note[0]);
  else if (note[0] >= 0)
    close(note[0]);
  if (rc == 0) {
    p->pid = pid;
    arbor__proc_running_add(p);
    arbor_engine_procs_started(p->pn);
  } else {
    arbor__outlet_unused(p, made);
  }
  return rc;
}

/* rc: a negative errno (libuv's errors are those too) */
static void spawn_error(const arbor_proc_opts *o, int rc, char *err,
                        size_t errlen) {
  const char *name = strerrorname_np(-rc);
  if (!name) name = uv_err_name(rc);
  if (rc == UV_ENOENT && o->cwd)
    snprintf(err, errlen, "cannot start %s in %s: %s (%s)", o->file, o->cwd,
             strerror(-rc), name);
  else
    snprintf(err, errlen, "cannot start %s: %s (%s)", o->file, strerror(-rc),
             name);
}

static const arbor_engine_procs hooks;

/* A new process of pn's current incarnation (not started), with its stop
   timer; NULL when out of memory. */
static arbor_proc *proc_new(arbor_engine *e, pnode *pn,
                            const arbor_proc_opts *o) {
  arbor_proc *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  arbor_engine_set_procs(&hooks); /* the engine tells this file from now on */
  p->e = e;
  p->pn = pn;
  arbor_node_ref(&pn->n);
  p->incarnation = pn->n.incarnation;
  p->stop_signal = o->stop_signal;
  p->grace = o->grace;
  p->line_max = o->line_max ? o->line_max : ARBOR_LINE_MAX;
  p->sd_fd = -1;
  p->slot = -1;
  arbor__proc_add(p);
  uv_timer_init(arbor_engine_loop(e), &p->timer);
  p->timer.data = p;
  p->handles = 1;
  return p;
}

int arbor_proc_spawn(arbor_engine *e, pnode *pn, const arbor_proc_opts *o,
                     arbor_proc **out, char *err, size_t errlen) {
  arbor_proc *p = proc_new(e, pn, o);
  if (!p) return UV_ENOMEM;
  uv_loop_t *loop = arbor_engine_loop(e);
  arbor_notify_vars vars;
  int rc = arbor__notify_open(p, o, loop, &vars, err, errlen);
  char **env = rc == 0 ? arbor__notify_env(o->env, vars.v) : NULL;
  if (rc == 0 && !env && (o->env || vars.v[0])) rc = UV_ENOMEM;
  if (rc == 0) {
    rc = start(p, o, env, loop);
    if (rc != 0) spawn_error(o, rc, err, errlen);
  }
  free(env);
  if (rc != 0) {
    p->exited = p->gone = 1;
    p->lua_gone = 1;
    arbor__notify_close(p);
    arbor__proc_close_handle(p, (uv_handle_t *)&p->timer);
    return rc;
  }
  arbor__guard_add(p);
  arbor__notify_start(p, check);
  *out = p;
  return 0;
}

/* ---- what the engine tells (its hooks) -------------------------------- */

/* pn's incarnation ended (in state s): its processes still running are
   stopped (in the background). */
static void incarnation_end(pnode *pn, arbor_state s) {
  for (arbor_proc *p = arbor__running; p; p = p->rnext)
    if (p->pn == pn && p->incarnation == pn->n.incarnation) arbor_proc_stop(p);
  /* a node that ended DONE does not run again unless told to: its idle
     pipes are closed (what its processes still write is lost) */
  if (s == ARBOR_DONE) arbor__outlet_close_idle(pn);
}

/* Kills what is left of p at once and reaps the main process. */
static void kill_now(arbor_proc *p) {
  if (!p->gone) {
    signal_group(p, SIGKILL);
    if (!p->exited) {
      int st;
      while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR) {
      }
      p->exited = 1;
      arbor__proc_running_del(p);
      p->term_signal = SIGKILL;
    }
    p->gone = 1;
    arbor__guard_del(p);
  }
  arbor__outlet_release(p);
  arbor__notify_close(p);
  arbor__proc_close_handle(p, (uv_handle_t *)&p->timer);
}

/* Kills (SIGKILL) and reaps what is left of e's processes: the engine is
   being freed. */
static void engine_free(arbor_engine *e) {
  for (arbor_proc *p = arbor__procs, *next; p; p = next) {
    next = p->next;
    if (p->e != e) continue;
    kill_now(p);
    p->e = NULL;
  }
  arbor__outlet_close_all(e, NULL);
  /* the close callbacks run now, on the loop the engine leaves */
  uv_loop_t *loop = arbor_engine_loop(e);
  if (loop) uv_run(loop, UV_RUN_NOWAIT);
}

/* The same for every process of the loop (the state closes). */
static void loop_close(uv_loop_t *loop) {
  for (arbor_proc *p = arbor__procs; p; p = p->next)
    if (p->timer.loop == loop) {
      kill_now(p);
      p->e = NULL;
    }
  arbor__outlet_close_all(NULL, loop);
}

static const arbor_engine_procs hooks = {
    .incarnation_end = incarnation_end,
    .node_discarded = arbor__outlet_close_idle,
    .engine_free = engine_free,
    .loop_close = loop_close,
};

/* ---- the handle (l_exec.c) -------------------------------------------- */

void arbor_proc_release(arbor_proc *p) {
  p->lua_gone = 1;
  if (!p->gone) arbor_proc_stop(p);
  arbor__proc_maybe_free(p);
}

void arbor_proc_wait(arbor_proc *p, uint32_t seq) {
  p->waiting = 1;
  p->wait_seq = seq;
}

void arbor_proc_woken(arbor_proc *p) { p->waiting = 0; }

void arbor_proc_watch(arbor_proc *p, int on) {
  p->watch = on;
  if (!on)
    while (p->qlen) arbor_str_unref(arbor_proc_pop_line(p));
}

int arbor_proc_take_ready(arbor_proc *p) {
  if (!p->ready) return 0;
  p->ready--;
  return 1;
}

int arbor_proc_take_watchdog(arbor_proc *p, double *extend) {
  if (p->triggered) {
    p->triggered = 0;
    return 2;
  }
  if (p->pings) {
    p->pings = 0; /* several since the last look are one */
    return 1;
  }
  if (p->extend > 0) {
    *extend = p->extend;
    p->extend = 0;
    return 3;
  }
  return 0;
}

int arbor_proc_pending(const arbor_proc *p) {
  return p->qlen || p->ready || p->pings || p->triggered || p->extend > 0;
}

pnode *arbor_proc_owner(const arbor_proc *p) {
  return p->e && p->pn && p->pn->n.incarnation == p->incarnation ? p->pn
                                                                 : NULL;
}

int arbor_proc_pid(const arbor_proc *p) { return p->pid; }

int arbor_proc_finished(const arbor_proc *p) {
  return p->gone && uv_is_closing((const uv_handle_t *)&p->timer);
}

int arbor_proc_stopped(const arbor_proc *p) { return p->stopping == 1; }

int arbor_proc_killed_after_grace(const arbor_proc *p, double *grace) {
  *grace = p->grace;
  return p->killed && p->term_signal == SIGKILL;
}

int arbor_proc_status(const arbor_proc *p, int64_t *status) {
  *status = p->status;
  return p->term_signal;
}

/* ---- a reexec (docs/restore.md) -------------------------------------- */

static void keep_open(int fd) {
  if (fd >= 0) fcntl(fd, F_SETFD, 0);
}

int arbor_proc_export(arbor_proc *p, arbor_proc_record *r) {
  if (p->stopping || p->exited || p->gone || arbor__outlet_export(p, r->fds) < 0)
    return -1;
  r->pid = p->pid;
  r->slot = p->slot;
  r->stop_signal = p->stop_signal;
  r->grace = p->grace;
  arbor__notify_export(p, &r->note, &r->sd, &r->sd_path);
  for (int i = 0; i < 4; i++) keep_open(r->fds[i]);
  keep_open(r->note);
  keep_open(r->sd);
  return 0;
}

void arbor_proc_each(arbor_engine *e,
                     void (*fn)(arbor_proc *p, pnode *pn, void *ud), void *ud) {
  for (arbor_proc *p = arbor__running; p; p = p->rnext)
    if (p->e == e && !p->exited) fn(p, p->pn, ud);
}

/* 1 when pid is a child of this process leading its own group. */
static int our_group_leader(int pid) {
  int ppid, pgrp;
  return arbor__proc_parent_group(pid, &ppid, &pgrp) == 0 && ppid == getpid() &&
         pgrp == pid;
}

static int is_fifo(int fd) {
  struct stat st;
  return fd >= 0 && fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

int arbor_proc_adopt(arbor_engine *e, pnode *pn, const arbor_proc_record *r,
                     const arbor_proc_opts *o, arbor_proc **out, char *err,
                     size_t errlen) {
  if (r->pid <= 1 || !our_group_leader(r->pid)) {
    snprintf(err, errlen, "process %d is not a child of this arbor leading "
             "its own process group: not taken over", r->pid);
    return UV_ESRCH;
  }
  for (int i = 0; i < 4; i++)
    if (!is_fifo(r->fds[i])) {
      snprintf(err, errlen, "process %d: descriptor %d is not its output "
               "pipe: not taken over", r->pid, r->fds[i]);
      return UV_EBADF;
    }
  if (r->note >= 0 && !is_fifo(r->note)) {
    snprintf(err, errlen, "process %d: descriptor %d is not its "
             "notification pipe: not taken over", r->pid, r->note);
    return UV_EBADF;
  }
  arbor_proc *p = proc_new(e, pn, o);
  if (!p) return UV_ENOMEM;
  uv_loop_t *loop = arbor_engine_loop(e);
  p->pid = r->pid;
  if (!arbor__outlet_adopt(p, r->fds)) {
    p->exited = p->gone = p->lua_gone = 1;
    arbor__proc_close_handle(p, (uv_handle_t *)&p->timer);
    return UV_ENOMEM;
  }
  arbor__notify_adopt(p, loop, r->note, r->sd, r->sd_path);
  watch_children(loop);
  arbor__proc_running_add(p);
  arbor_engine_procs_started(pn);
  if (arbor__guard_slot(p, r->slot) < 0) arbor__guard_add(p);
  arbor__notify_start(p, check);
  /* it may have exited between the exec and now: reaped at once */
  int st;
  if (waitpid(p->pid, &st, WNOHANG) == p->pid) arbor_proc_reaped(p, st);
  *out = p;
  return 0;
}

int arbor_proc_guard_export(int fds[2], int *pid) {
  if (arbor__guard_export(fds, pid) < 0) return -1;
  keep_open(fds[0]);
  keep_open(fds[1]);
  return 0;
}

int arbor_proc_guard_adopt(int sock, int table, int pid) {
  return arbor__guard_adopt(sock, table, pid);
}

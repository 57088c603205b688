/* reaper.c: `arbor --init`. arbor becomes a subreaper (or is PID 1 in a
 * container), reaps the orphaned descendants that are reparented to it on
 * SIGCHLD, and forwards SIGHUP, SIGUSR1 and SIGUSR2 to the process groups
 * of its processes.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc/internal.h"

static uv_signal_t sigchld, fwd[3];
static uv_timer_t reap_again;

static void on_reap_again(uv_timer_t *t);

static void collect_pid(uv_handle_t *h, void *arg) {
  int *want = arg;
  if (h->type == UV_PROCESS && ((uv_process_t *)h)->pid == *want) *want = 0;
}

/* Reaps zombies that are not libuv's own children. A libuv child first in
   line stops the pass; it is retried on the next loop turn, once libuv has
   reaped its child. */
static void reap(uv_loop_t *loop) {
  for (;;) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 ||
        si.si_pid == 0)
      return;
    int pid = si.si_pid, st;
    if (arbor__guard_reap(pid)) continue;
    arbor_proc *mine = arbor__running;
    while (mine && mine->pid != pid) mine = mine->rnext;
    if (mine) { /* one of ours */
      if (waitpid(pid, &st, WNOHANG) == pid) arbor_proc_reaped(mine, st);
      continue;
    }
    uv_walk(loop, collect_pid, &pid);
    if (pid == 0) { /* libuv's */
      uv_timer_start(&reap_again, on_reap_again, 1, 0);
      return;
    }
    waitpid(si.si_pid, &st, WNOHANG);
  }
}

static void on_reap_again(uv_timer_t *t) { reap(t->loop); }
static void on_sigchld(uv_signal_t *h, int sig) {
  (void)sig;
  reap(h->loop);
}

static void on_forward(uv_signal_t *h, int sig) {
  (void)h;
  for (arbor_proc *p = arbor__procs; p; p = p->next)
    if (!p->gone) kill(-p->pid, sig);
}

int arbor_reaper_start(uv_loop_t *loop) {
  if (getpid() != 1 && prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) return -errno;
  uv_timer_init(loop, &reap_again);
  uv_unref((uv_handle_t *)&reap_again);
  uv_signal_init(loop, &sigchld);
  uv_signal_start(&sigchld, on_sigchld, SIGCHLD);
  uv_unref((uv_handle_t *)&sigchld);
  int fsig[3] = {SIGHUP, SIGUSR1, SIGUSR2};
  for (int i = 0; i < 3; i++) {
    uv_signal_init(loop, &fwd[i]);
    uv_signal_start(&fwd[i], on_forward, fsig[i]);
    uv_unref((uv_handle_t *)&fwd[i]);
  }
  return 0;
}

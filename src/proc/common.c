/* common.c: what every file of proc/ does to a process: the tables of
 * processes, a process's lifetime (its libuv handles and memory), waking
 * its owner and logging on its node, and reading /proc. The lowest file of
 * proc/: it calls only the engine's public interface and core/. See
 * internal.h.
 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "core/mem.h"
#include "proc/internal.h"

arbor_proc *arbor__procs;
arbor_proc *arbor__running;

void arbor__proc_add(arbor_proc *p) {
  p->next = arbor__procs;
  if (arbor__procs) arbor__procs->prev = p;
  arbor__procs = p;
}

void arbor__proc_running_add(arbor_proc *p) {
  p->rnext = arbor__running;
  if (arbor__running) arbor__running->rprev = p;
  arbor__running = p;
}

void arbor__proc_running_del(arbor_proc *p) {
  if (p->rprev)
    p->rprev->rnext = p->rnext;
  else if (arbor__running == p)
    arbor__running = p->rnext;
  else
    return; /* not listed */
  if (p->rnext) p->rnext->rprev = p->rprev;
  p->rprev = p->rnext = NULL;
}

void arbor__proc_maybe_free(arbor_proc *p) {
  if (p->handles > 0 || !p->lua_gone) return;
  arbor__proc_running_del(p);
  if (p->prev)
    p->prev->next = p->next;
  else
    arbor__procs = p->next;
  if (p->next) p->next->prev = p->prev;
  for (int i = 0; i < 3; i++) free(p->buf[i]);
  for (unsigned i = 0; i < p->qlen; i++)
    arbor_str_unref(p->queue[(p->qstart + i) % ARBOR_PROC_QUEUE]);
  if (p->pn) arbor_node_unref(&p->pn->n);
  free(p);
}

static void on_close(uv_handle_t *h) {
  arbor_proc *p = h->data;
  p->handles--;
  arbor__proc_maybe_free(p);
}

void arbor__proc_close_handle(arbor_proc *p, uv_handle_t *h) {
  if (h->data == p && !uv_is_closing(h)) uv_close(h, on_close);
}

/* 1 while p's owner is the incarnation that started p, on a live engine
   (arbor_engine_wake checks that it runs and waits). */
static int owner_live(const arbor_proc *p) {
  return p->e && p->pn && !(p->pn->n.flags & ARBOR_F_DETACHED) &&
         p->pn->n.incarnation == p->incarnation;
}

void arbor__proc_wake(arbor_proc *p) {
  if (p->waiting && owner_live(p) &&
      arbor_engine_wake(p->e, p->pn, p->wait_seq))
    p->waiting = 0;
}

int arbor__proc_log(arbor_engine *e, pnode *pn, const char *what,
                    const char *s, size_t n) {
  if (!e) return 0;
  arbor_str *line = arbor_str_fmt("%s: %.*s", what, (int)n, s);
  if (!line) return 0;
  int logged = arbor_engine_log_now(e, pn, line);
  arbor_str_unref(line);
  return logged;
}

void arbor__proc_log_everywhere(arbor_str *line) {
  arbor_engine *seen[16]; /* told (past 16, one may hear it more than once) */
  size_t n = 0;
  if (!line) return;
  for (arbor_proc *p = arbor__procs; p; p = p->next) {
    arbor_engine *e = p->e;
    size_t i = 0;
    while (i < n && seen[i] != e) i++;
    if (!e || i < n || !arbor_engine_log_now(e, NULL, line)) continue;
    if (n < sizeof seen / sizeof *seen) seen[n++] = e;
  }
  if (n == 0) fprintf(stderr, "arbor: %s\n", line->s);
}

/* What read_stat takes from /proc/PID/stat. */
typedef struct stat_line {
  char *rest;  /* the fields after the command's ")", in the caller's buf */
  char state;
  int ppid, pgrp, session;
  long threads;
} stat_line;

/* Reads /proc/PID/stat (pid as text) into buf: state, parent, group,
   session and thread count into *st. 0, or -1 when it cannot be read. */
static int read_stat(const char *pid, char *buf, size_t size, stat_line *st) {
  char path[300];
  snprintf(path, sizeof path, "/proc/%s/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char *rp = strrchr(buf, ')'); /* the name may hold anything */
  /* state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
     utime stime cutime cstime priority nice num_threads (fields 3-20) */
  if (!rp || sscanf(rp + 1, " %c %d %d %d %*d %*d %*u %*u %*u %*u %*u %*u "
                            "%*u %*d %*d %*d %*d %ld",
                    &st->state, &st->ppid, &st->pgrp, &st->session,
                    &st->threads) != 5)
    return -1;
  st->rest = rp + 1;
  return 0;
}

int arbor_proc_scan(int (*fn)(int pid, int pgrp, const char *stat, void *ud),
                    void *ud) {
  DIR *d = opendir("/proc");
  if (!d) return -1;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] < '1' || de->d_name[0] > '9') continue;
    char buf[1024];
    stat_line st;
    if (read_stat(de->d_name, buf, sizeof buf, &st) < 0 || st.state == 'Z')
      continue;
    if (fn(atoi(de->d_name), st.pgrp, st.rest, ud)) break;
  }
  closedir(d);
  return 0;
}

/* ---- the processes of arbor's sessions --------------------------------- */

/* A growing array of pids. */
typedef struct pids {
  int *v;
  size_t n, cap;
} pids;

static void pids_push(pids *a, int pid) {
  if (a->n == a->cap) {
    a->cap = a->cap ? 2 * a->cap : 64;
    a->v = arbor_xrealloc(a->v, a->cap * sizeof *a->v);
  }
  a->v[a->n++] = pid;
}

static int cmp_pid(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* 1 when pid is in the sorted a. */
static int pids_has(const pids *a, int pid) {
  size_t lo = 0, hi = a->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (a->v[mid] < pid) lo = mid + 1;
    else hi = mid;
  }
  return lo < a->n && a->v[lo] == pid;
}

/* Adds the pids listed in the children file at path to a: 0, or -1 when
   it cannot be opened. */
static int read_children(const char *path, pids *a) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[4096];
  int pid = 0; /* a number may straddle two reads */
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < n; i++) {
      if (buf[i] >= '0' && buf[i] <= '9') {
        pid = pid * 10 + (buf[i] - '0');
      } else if (pid) {
        pids_push(a, pid);
        pid = 0;
      }
    }
  }
  if (pid) pids_push(a, pid);
  close(fd);
  return 0;
}

/* Adds the children of process pid, those of each of its threads, to a:
   0, or -1 when no children file could be read. With threads == 1 only
   the main thread's file is read (no directory listing). */
static int push_children(int pid, long threads, pids *a) {
  char path[96];
  if (threads == 1) {
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", pid, pid);
    return read_children(path, a);
  }
  snprintf(path, sizeof path, "/proc/%d/task", pid);
  DIR *d = opendir(path);
  if (!d) return -1;
  int found = -1;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] < '1' || de->d_name[0] > '9') continue;
    snprintf(path, sizeof path, "/proc/%d/task/%.16s/children", pid,
             de->d_name);
    if (read_children(path, a) == 0) found = 0;
  }
  closedir(d);
  return found;
}

/* 1 when orphans of arbor's descendants are reparented to arbor: it is a
   subreaper (--init) or the first process of its PID namespace. */
static int reaps_orphans(void) {
  int on = 0;
  return getpid() == 1 || (prctl(PR_GET_CHILD_SUBREAPER, &on) == 0 && on);
}

typedef struct lost_scan {
  const pids *lost, *seen; /* sorted */
  int (*fn)(int pid, int pgrp, const char *stat, void *ud);
  void *ud;
} lost_scan;

/* fn of arbor_proc_scan: passes on a process of a lost session not seen. */
static int scan_lost(int pid, int pgrp, const char *stat, void *ud) {
  lost_scan *l = ud;
  int session;
  if (sscanf(stat, " %*c %*d %*d %d", &session) != 1 ||
      !pids_has(l->lost, session) || pids_has(l->seen, pid))
    return 0;
  return l->fn(pid, pgrp, stat, l->ud);
}

int arbor_proc_scan_own(int (*fn)(int pid, int pgrp, const char *stat,
                                  void *ud),
                        void *ud) {
  pids sessions = {0}, stack = {0}, seen = {0}, lost = {0};
  for (arbor_proc *p = arbor__procs; p; p = p->next)
    if (p->pid > 0 && !p->gone) pids_push(&sessions, p->pid);
  if (sessions.n == 0) return 0;
  qsort(sessions.v, sessions.n, sizeof *sessions.v, cmp_pid);
  int stopped = 0, rc = 0;
  if (push_children(getpid(), 0, &stack) < 0) {
    /* no children files (a kernel without CONFIG_PROC_CHILDREN) */
    rc = arbor_proc_scan(fn, ud);
    goto out;
  }
  while (stack.n && !stopped) {
    int pid = stack.v[--stack.n];
    char name[16], buf[1024];
    stat_line st;
    snprintf(name, sizeof name, "%d", pid);
    if (read_stat(name, buf, sizeof buf, &st) < 0 ||
        !pids_has(&sessions, st.session))
      continue; /* gone, or not in a session of arbor's (nor is any
                   process below it: a session is left only for a new one) */
    if (st.state == 'Z' || st.state == 'X')
      continue; /* it exited: its children were reparented */
    pids_push(&seen, pid);
    stopped = fn(pid, st.pgrp, st.rest, ud);
    push_children(pid, st.threads, &stack);
  }
  if (stopped || reaps_orphans()) goto out;
  /* A session whose leader is gone or a zombie: its members' parents
     exited up to the leader, so they were reparented away from arbor (to
     init, or a subreaper above arbor). Rare (a main process that exited
     while its group is stopped), and only then all of /proc is read. */
  qsort(seen.v, seen.n, sizeof *seen.v, cmp_pid);
  for (size_t i = 0; i < sessions.n; i++)
    if (!pids_has(&seen, sessions.v[i]) && kill(-sessions.v[i], 0) == 0)
      pids_push(&lost, sessions.v[i]);
  if (lost.n) {
    lost_scan l = {&lost, &seen, fn, ud};
    rc = arbor_proc_scan(scan_lost, &l);
  }
out:
  free(sessions.v);
  free(stack.v);
  free(seen.v);
  free(lost.v);
  return rc;
}

int arbor__proc_parent_group(int pid, int *ppid, int *pgrp) {
  char name[16], buf[1024];
  stat_line st;
  snprintf(name, sizeof name, "%d", pid);
  if (read_stat(name, buf, sizeof buf, &st) < 0 || st.state == 'Z') return -1;
  *ppid = st.ppid;
  *pgrp = st.pgrp;
  return 0;
}

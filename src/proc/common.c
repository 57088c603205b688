/* common.c: what every file of proc/ does to a process: the tables of
 * processes, a process's lifetime (its libuv handles and memory), waking
 * its owner and logging on its node, and reading /proc. The lowest file of
 * proc/: it calls only the engine's public interface and core/. See
 * internal.h.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* Reads /proc/PID/stat (pid as text) into buf: the fields after the
   command's ")" in *rest, and the state, parent and group. 0, or -1 when
   it cannot be read. */
static int read_stat(const char *pid, char *buf, size_t size, char **rest,
                     char *state, int *ppid, int *pgrp) {
  char path[300];
  snprintf(path, sizeof path, "/proc/%s/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char *rp = strrchr(buf, ')'); /* the name may hold anything */
  if (!rp || sscanf(rp + 1, " %c %d %d", state, ppid, pgrp) != 3) return -1;
  *rest = rp + 1;
  return 0;
}

int arbor_proc_scan(int (*fn)(int pid, int pgrp, const char *stat, void *ud),
                    void *ud) {
  DIR *d = opendir("/proc");
  if (!d) return -1;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] < '1' || de->d_name[0] > '9') continue;
    char buf[1024], *rest, state;
    int ppid, pgrp;
    if (read_stat(de->d_name, buf, sizeof buf, &rest, &state, &ppid, &pgrp) < 0 ||
        state == 'Z')
      continue;
    if (fn(atoi(de->d_name), pgrp, rest, ud)) break;
  }
  closedir(d);
  return 0;
}

int arbor__proc_parent_group(int pid, int *ppid, int *pgrp) {
  char name[16], buf[1024], *rest, state;
  snprintf(name, sizeof name, "%d", pid);
  if (read_stat(name, buf, sizeof buf, &rest, &state, ppid, pgrp) < 0 ||
      state == 'Z')
    return -1;
  return 0;
}

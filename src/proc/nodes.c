/* nodes.c: the processes of a node (nodes.h). Reads the table of
 * processes of common.c, below it. See internal.h.
 */
#include "proc/nodes.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc/internal.h"

size_t arbor_proc_of_node(const pnode *pn, arbor_proc **out, size_t max) {
  size_t n = 0;
  for (arbor_proc *p = arbor__procs; p; p = p->next) {
    if (p->pn != pn || !p->e || p->gone ||
        p->incarnation != pn->n.incarnation)
      continue;
    if (n < max) out[n] = p;
    n++;
  }
  return n;
}

int arbor_proc_running(const arbor_proc *p) { return !p->exited; }

/* The index of v in the sorted a[0..n), or -1. */
static long find(const int *a, size_t n, int v) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (a[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && a[lo] == v ? (long)lo : -1;
}

typedef struct usage_scan {
  const int *pgid; /* sorted */
  size_t n;
  arbor_group_usage *out;
} usage_scan;

/* fn of arbor_proc_scan_own: adds a member of one of the groups asked. */
static int add_usage(int pid, int pgrp, const char *stat, void *ud) {
  usage_scan *u = ud;
  long i = find(u->pgid, u->n, pgrp);
  if (i < 0) return 0;
  /* state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
     cmajflt utime stime (fields 3 to 15 of proc(5)) */
  unsigned long long utime, stime;
  if (sscanf(stat, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
             &utime, &stime) != 2)
    return 0;
  u->out[i].ticks += utime + stime;
  u->out[i].members++;
  /* resident pages: statm's second field (stat's rss is only an estimate
     on recent kernels, the per-CPU counters not summed) */
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/statm", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t len = read(fd, buf, sizeof buf - 1);
  close(fd);
  unsigned long long size, resident;
  if (len <= 0) return 0;
  buf[len] = '\0';
  if (sscanf(buf, "%llu %llu", &size, &resident) == 2)
    u->out[i].pages += resident;
  return 0;
}

int arbor_proc_groups_usage(const int *pgid, size_t n, arbor_group_usage *out) {
  if (n == 0) return 0;
  usage_scan u = {pgid, n, out};
  return arbor_proc_scan_own(add_usage, &u);
}

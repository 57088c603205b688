/* nodes.c: the processes of a node (nodes.h). Reads the table of
 * processes of common.c, below it. See internal.h.
 */
#include "proc/nodes.h"

#include <dirent.h>
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

int arbor_proc_groups_usage(const int *pgid, size_t n, arbor_group_usage *out) {
  if (n == 0) return 0;
  DIR *d = opendir("/proc");
  if (!d) return -1;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] < '1' || de->d_name[0] > '9') continue;
    char path[300], buf[1024];
    snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (len <= 0) continue;
    buf[len] = '\0';
    /* after the command's ")": state ppid pgrp ... (fields 3 to 5), utime
       and stime (14, 15) */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || p[2] == 'Z') continue;
    p += 2;
    char *end;
    unsigned long long f[13];
    int k = 0;
    for (; k < 13 && *p; k++) {
      while (*p == ' ') p++;
      if (k == 0) { /* the state, one letter */
        f[k] = 0;
        p++;
        continue;
      }
      f[k] = (unsigned long long)strtoll(p, &end, 10);
      if (end == p) break;
      p = end;
    }
    if (k < 13) continue;
    long i = find(pgid, n, (int)f[2]);
    if (i < 0) continue;
    out[i].ticks += f[11] + f[12];
    out[i].members++;
    /* resident pages: statm's second field (stat's rss is only an
       estimate on recent kernels, the per-CPU counters not summed) */
    snprintf(path, sizeof path, "/proc/%s/statm", de->d_name);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    len = read(fd, buf, sizeof buf - 1);
    close(fd);
    unsigned long long size, resident;
    if (len <= 0) continue;
    buf[len] = '\0';
    if (sscanf(buf, "%llu %llu", &size, &resident) == 2) out[i].pages += resident;
  }
  closedir(d);
  return 0;
}

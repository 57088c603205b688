/* nodes.h: a node's processes, as the bindings show them and act on them
 * (node views' pid and pids, `arbor ctl signal`, node:kill). */
#ifndef ARBOR_PROC_NODES_H
#define ARBOR_PROC_NODES_H

#include <stddef.h>

#include "proc/proc.h"

/* The processes of pn's current incarnation whose group is not gone yet,
   newest first: up to max of them in out; returns how many there are. */
size_t arbor_proc_of_node(const pnode *pn, arbor_proc **out, size_t max);
/* 1 while p's main process runs (it was not reaped yet). */
int arbor_proc_running(const arbor_proc *p);

/* What the live members of one process group use, as /proc has it now. */
typedef struct arbor_group_usage {
  unsigned long long ticks; /* utime + stime, in clock ticks */
  unsigned long long pages; /* resident pages */
  unsigned members;         /* processes counted (zombies are not) */
} arbor_group_usage;

/* Reads /proc/PID/stat of the processes of arbor's sessions
   (arbor_proc_scan_own: not of every process on the host) and adds each
   one that is not a zombie to out[i] when its process group is pgid[i];
   pgid is sorted ascending, without duplicates, and out is zeroed by the
   caller. Returns 0, or -1 when /proc cannot be read. For metrics at
   scrape time: nothing is kept. */
int arbor_proc_groups_usage(const int *pgid, size_t n, arbor_group_usage *out);

#endif

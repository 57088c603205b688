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

#endif

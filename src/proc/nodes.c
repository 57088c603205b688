/* nodes.c: the processes of a node (nodes.h). Reads the table of
 * processes of common.c, below it. See internal.h.
 */
#include "proc/nodes.h"
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

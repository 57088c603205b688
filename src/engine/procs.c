/* procs.c: the engine's side of the process layer (proc/), which is above
 * it. proc/ registers its hooks here at its first process, and the engine
 * calls up only through them; the small calls below are what proc/ needs
 * of an engine besides arbor_engine_wake (ready.c) and
 * arbor_engine_log_now (log.c). This file calls no other engine file.
 */
#include <stdlib.h>

#include "engine/internal.h"

/* NULL until a process was started. */
static const arbor_engine_procs *hooks;

void arbor_engine_set_procs(const arbor_engine_procs *procs) {
  hooks = procs;
}

const arbor_engine_procs *arbor_engine_get_procs(void) { return hooks; }

void arbor_engine_procs_started(pnode *pn) { pn->pflags |= PN_PROCS; }

int arbor_engine_closing(const arbor_engine *e) {
  return e->zombie || e->closing;
}

void arbor_engine_count_kill(arbor_engine *e, pnode *pn, int pid) {
  if (e->zombie || !e->stop_requested || e->closing) return;
  if (!e->first_killed) {
    char *dn = arbor_node_dn_dup(&pn->n);
    e->first_killed = arbor_str_fmt("%s, pid %d", dn ? dn : "?", pid);
    free(dn);
  }
  e->killed_in_stop++;
}

uv_loop_t *arbor_engine_loop(const arbor_engine *e) { return e->loop; }

/* metrics.c: the counters behind the Prometheus metrics (issue 16) that the
 * engine keeps as it runs; everything else is read at scrape time
 * (l_metrics.c).
 *
 * A node's transitions are counted from its first change that is not its
 * first start or its first HEALTHY: a tree of a million nodes that came up
 * and stays up keeps no counters (the scrape derives those two from the
 * node's state), and a node that ever exited, restarted or finished gets a
 * small block (pnode_counts) then.
 */
#include "engine/internal.h"

#include <stdlib.h>

void arbor__metrics_first(pnode *pn, arbor_state from, arbor_state to) {
  pn->counts = calloc(1, sizeof *pn->counts);
  if (!pn->counts) return; /* out of memory: this node's counts stay 0 */
  if (pn->healthy_at >= 0) pn->counts->tr[ARBOR_NEW][ARBOR_HEALTHY] = 1;
  pn->counts->tr[from][to]++;
}

uint32_t arbor_metrics_transitions(const pnode *pn, arbor_state from,
                                   arbor_state to) {
  if (pn->counts) return pn->counts->tr[from][to];
  return from == ARBOR_NEW && to == ARBOR_HEALTHY && pn->healthy_at >= 0;
}

/* Upper bounds of the loop turn histogram's buckets, in seconds. */
const double arbor_metrics_turn_bounds[ARBOR_TURN_BUCKETS] = {
    0.00001, 0.0001, 0.001, 0.01, 0.1, 1};

void arbor__metrics_turn(arbor_engine *e, uint64_t ns) {
  double s = (double)ns / 1e9;
  e->turns.count++;
  e->turns.sum += s;
  for (int i = 0; i < ARBOR_TURN_BUCKETS; i++)
    if (s <= arbor_metrics_turn_bounds[i]) {
      e->turns.bucket[i]++;
      break;
    }
}

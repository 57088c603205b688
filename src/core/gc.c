/* gc.c: the incremental restart decision (T8, T9). See gc.h. */
#include "core/gc.h"

int arbor_gc_wants(const arbor_node *n) {
  if (n->flags & (ARBOR_F_RUNNING | ARBOR_F_PENDING | ARBOR_F_HELD |
                  ARBOR_F_DETACHED | ARBOR_F_RETIRED))
    return 0;
  switch (n->state) {
  case ARBOR_DEAD:
  case ARBOR_CANCELED:
    return 1;
  case ARBOR_DONE:
    return (n->flags & ARBOR_F_CANCEL) != 0;
  default:
    return 0;
  }
}

arbor_node *arbor_gc_candidate(arbor_node *n) {
  for (; n && n->live == 0; n = n->parent) {
    if (!arbor_gc_wants(n)) continue;
    if (!n->parent || !(n->parent->flags & ARBOR_F_CANCEL)) return n;
  }
  return NULL;
}

void arbor_gc_reset(arbor_node *n) {
  arbor_tree_discard_children(n);
  n->flags = (uint8_t)((n->flags & (ARBOR_F_HELD | ARBOR_F_FORCED |
                                    ARBOR_F_DECLARED | ARBOR_F_RETIRED)) |
                       ARBOR_F_PENDING);
}

/* gc.h: the restart decision of T8, made incrementally (T9).
 *
 * A node N is restarted when N exited DEAD or CANCELED (or DONE with a
 * canceled context), its whole subtree has exited (live == 0), it is not held
 * or pending, and its parent's context is not canceled (or N is the root).
 *
 * Invariant that makes one walk enough: a node that wants a restart has a
 * canceled context, and cancellation is inherited by the subtree, so at most
 * one node on any root path qualifies, and it is the topmost one: the largest
 * subtree restarts at once.
 */
#ifndef ARBOR_GC_H
#define ARBOR_GC_H

#include "core/tree.h"

/* 1 when n, ignoring its descendants and parent, wants a restart. */
int arbor_gc_wants(const arbor_node *n);

/* Called after something changed at n (n's incarnation exited, n's context
   was canceled while n had exited, a hold on n was lifted). Returns the node
   to restart now, or NULL. Walks from n towards the root while the subtree
   has exited: O(depth). */
arbor_node *arbor_gc_candidate(arbor_node *n);

/* Prepares n for a restart: discards its children and marks it PENDING
   (its state stays what it exited with until arbor_tree_start, T8). */
void arbor_gc_reset(arbor_node *n);

#endif

/* events.h: the bounded ring of events (T14). Pure C.
 *
 * An event holds a reference on its node (so the DN can be formed when the
 * event is read, even after the node was discarded) and on its reason
 * string; pushing costs no allocation and no formatting.
 */
#ifndef ARBOR_EVENTS_H
#define ARBOR_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "str.h"
#include "tree.h"

typedef enum arbor_event_kind {
  ARBOR_EV_STATE = 0,
  ARBOR_EV_POLICY,
  ARBOR_EV_COORDINATOR,
} arbor_event_kind;

typedef struct arbor_event {
  uint64_t seq;         /* 1, 2, ... */
  double time;          /* engine clock */
  arbor_node *node;     /* referenced */
  uint64_t incarnation;
  uint8_t kind;         /* arbor_event_kind */
  uint8_t from, to;     /* states for ARBOR_EV_STATE */
  arbor_str *reason;    /* referenced; may be NULL */
  double delay;         /* policy events: the restart delay, or -1 */
} arbor_event;

typedef struct arbor_ring {
  arbor_event *ev;
  size_t cap, start, len;
  uint64_t next_seq;
} arbor_ring;

/* Returns 0 or -1 when out of memory. cap >= 1. */
int arbor_ring_init(arbor_ring *r, size_t cap);
void arbor_ring_close(arbor_ring *r);
/* Appends an event (taking new references to node and reason), dropping the
   oldest one when full. Returns its seq. */
uint64_t arbor_ring_push(arbor_ring *r, double time, arbor_node *node,
                         arbor_event_kind kind, arbor_state from,
                         arbor_state to, arbor_str *reason);
/* Appends a copy of ev, keeping its seq (and taking references). Drops the
   oldest when full. A ring filled with copies is read by position (ev[],
   start, len): its seqs need not be consecutive, so arbor_ring_get does not
   apply to it. */
void arbor_ring_copy(arbor_ring *r, const arbor_event *ev);
/* Drops every event (releasing references); seqs continue. */
void arbor_ring_clear(arbor_ring *r);
/* The event with sequence number seq, or NULL when it is not (or no longer)
   in the ring. */
const arbor_event *arbor_ring_get(const arbor_ring *r, uint64_t seq);
/* Oldest sequence number still held (next_seq when empty). */
static inline uint64_t arbor_ring_first(const arbor_ring *r) {
  return r->next_seq - r->len;
}

#endif

/* ring.h: the bounded ring of events (T14). Pure C.
 *
 * An event holds a reference on its node (so the DN can be formed when the
 * event is read, even after the node was discarded) and on its reason
 * string; pushing costs no allocation and no formatting, except for a reason
 * longer than ARBOR_REASON_MAX, which is kept as a cut copy. The ring is
 * bounded in events and in the bytes of the reasons it holds.
 */
#ifndef ARBOR_RING_H
#define ARBOR_RING_H

#include <stddef.h>
#include <stdint.h>

#include "core/str.h"
#include "core/tree.h"

typedef enum arbor_event_kind {
  ARBOR_EV_STATE = 0,
  ARBOR_EV_POLICY,
  ARBOR_EV_COORDINATOR,
  ARBOR_EV_RESTORED, /* a reload kept the node running (docs/restore.md) */
  ARBOR_EV_RELOAD,   /* what a reload did to a node it did not keep */
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
  double wall;          /* the wall clock when it happened (set by its
                           emitter; 0 when not) */
} arbor_event;

typedef struct arbor_ring {
  arbor_event *ev;
  size_t cap, start, len;
  uint64_t next_seq;
  size_t bytes;     /* of the reasons held, a string shared by two events
                       counting twice */
  size_t max_bytes; /* the most `bytes` may be (the newest event is kept
                       whatever its reason) */
} arbor_ring;

/* The longest reason an event keeps: a longer one is cut to a copy of this
   many bytes at most, ending in "... (N bytes)" with the original length. */
#define ARBOR_REASON_MAX 4096
/* The engine ring's max_bytes unless its `ring_bytes` option says. */
#define ARBOR_RING_BYTES ((size_t)16 << 20)

/* Returns 0 or -1 when out of memory. cap >= 1; max_bytes also bounds the
   reasons' cut (when below ARBOR_REASON_MAX). */
int arbor_ring_init(arbor_ring *r, size_t cap, size_t max_bytes);
void arbor_ring_close(arbor_ring *r);
/* Appends an event (taking new references to node and reason, or keeping a
   cut copy of a long reason), dropping the oldest events while the ring
   holds more than cap events or max_bytes of reasons. Returns its seq. */
uint64_t arbor_ring_push(arbor_ring *r, double time, arbor_node *node,
                         arbor_event_kind kind, arbor_state from,
                         arbor_state to, arbor_str *reason);
/* The event pushed last (the ring is not empty). */
static inline arbor_event *arbor_ring_newest(arbor_ring *r) {
  size_t i = r->start + r->len - 1;
  return &r->ev[i >= r->cap ? i - r->cap : i];
}
/* Appends a copy of ev, keeping its seq (and taking references); the ring's
   next_seq follows it. Drops the oldest as arbor_ring_push does. A ring
   filled with copies is read by position (ev[], start, len); arbor_ring_get
   and arbor_ring_first apply only when the copies' seqs are consecutive (the
   outbox of subscribers is). */
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

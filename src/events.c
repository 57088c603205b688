/* events.c: the event ring. */
#include "events.h"

#include <stdlib.h>

int arbor_ring_init(arbor_ring *r, size_t cap) {
  r->ev = calloc(cap ? cap : 1, sizeof *r->ev);
  r->cap = cap ? cap : 1;
  r->start = r->len = 0;
  r->next_seq = 1;
  return r->ev ? 0 : -1;
}

static void release(arbor_event *e) {
  arbor_node_unref(e->node);
  arbor_str_unref(e->reason);
  e->node = NULL;
  e->reason = NULL;
}

void arbor_ring_close(arbor_ring *r) {
  for (size_t i = 0; i < r->len; i++) release(&r->ev[(r->start + i) % r->cap]);
  free(r->ev);
  r->ev = NULL;
  r->len = r->cap = 0;
}

uint64_t arbor_ring_push(arbor_ring *r, double time, arbor_node *node,
                         arbor_event_kind kind, arbor_state from,
                         arbor_state to, arbor_str *reason) {
  arbor_event *e;
  if (r->len == r->cap) {
    e = &r->ev[r->start];
    release(e);
    r->start = (r->start + 1) % r->cap;
  } else {
    e = &r->ev[(r->start + r->len) % r->cap];
    r->len++;
  }
  arbor_node_ref(node);
  e->seq = r->next_seq++;
  e->time = time;
  e->node = node;
  e->incarnation = node->incarnation;
  e->kind = (uint8_t)kind;
  e->from = (uint8_t)from;
  e->to = (uint8_t)to;
  e->reason = arbor_str_ref(reason);
  e->delay = -1;
  return e->seq;
}

void arbor_ring_copy(arbor_ring *r, const arbor_event *ev) {
  uint64_t seq = ev->seq;
  double delay = ev->delay;
  arbor_ring_push(r, ev->time, ev->node, (arbor_event_kind)ev->kind,
                  (arbor_state)ev->from, (arbor_state)ev->to, ev->reason);
  arbor_event *e = &r->ev[(r->start + r->len - 1) % r->cap];
  e->seq = seq;
  e->incarnation = ev->incarnation;
  e->delay = delay;
}

void arbor_ring_clear(arbor_ring *r) {
  for (size_t i = 0; i < r->len; i++) release(&r->ev[(r->start + i) % r->cap]);
  r->start = r->len = 0;
}

const arbor_event *arbor_ring_get(const arbor_ring *r, uint64_t seq) {
  uint64_t first = arbor_ring_first(r);
  if (seq < first || seq >= r->next_seq) return NULL;
  return &r->ev[(r->start + (seq - first)) % r->cap];
}

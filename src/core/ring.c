/* ring.c: the event ring. */
#include "core/ring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int arbor_ring_init(arbor_ring *r, size_t cap, size_t max_bytes) {
  r->ev = calloc(cap ? cap : 1, sizeof *r->ev);
  r->cap = cap ? cap : 1;
  r->start = r->len = 0;
  r->next_seq = 1;
  r->bytes = 0;
  r->max_bytes = max_bytes;
  return r->ev ? 0 : -1;
}

static inline void release(arbor_ring *r, arbor_event *e) {
  if (e->reason) r->bytes -= e->reason->len;
  arbor_node_unref(e->node);
  arbor_str_unref(e->reason);
  e->node = NULL;
  e->reason = NULL;
}

static void drop_oldest(arbor_ring *r) {
  release(r, &r->ev[r->start]);
  r->start = (r->start + 1) % r->cap;
  r->len--;
}

void arbor_ring_close(arbor_ring *r) {
  arbor_ring_clear(r);
  free(r->ev);
  r->ev = NULL;
  r->cap = 0;
}

/* A copy of s cut to at most `limit` bytes, the last of them saying how long
   s was; never ends inside a UTF-8 sequence. NULL when out of memory. */
static arbor_str *cut(const arbor_str *s, size_t limit) {
  char mark[48];
  size_t mlen = (size_t)snprintf(mark, sizeof mark, "... (%zu bytes)", s->len);
  size_t keep = limit > mlen ? limit - mlen : 0;
  while (keep > 0 && ((unsigned char)s->s[keep] & 0xC0) == 0x80) keep--;
  arbor_str *c = arbor_str_new(s->s, keep + mlen);
  if (c) memcpy(c->s + keep, mark, mlen);
  return c;
}

uint64_t arbor_ring_push(arbor_ring *r, double time, arbor_node *node,
                         arbor_event_kind kind, arbor_state from,
                         arbor_state to, arbor_str *reason) {
  size_t limit = r->max_bytes < ARBOR_REASON_MAX ? r->max_bytes
                                                 : ARBOR_REASON_MAX;
  if (reason && reason->len > limit)
    reason = cut(reason, limit);
  else
    arbor_str_ref(reason);
  arbor_event *e;
  if (r->len == r->cap) { /* full: the oldest slot is reused */
    e = &r->ev[r->start];
    release(r, e);
    r->start = r->start + 1 == r->cap ? 0 : r->start + 1;
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
  e->reason = reason;
  e->delay = -1;
  if (reason) {
    r->bytes += reason->len;
    while (r->bytes > r->max_bytes && r->len > 1) drop_oldest(r);
  }
  return e->seq;
}

void arbor_ring_copy(arbor_ring *r, const arbor_event *ev) {
  uint64_t seq = ev->seq;
  double delay = ev->delay, wall = ev->wall;
  arbor_ring_push(r, ev->time, ev->node, (arbor_event_kind)ev->kind,
                  (arbor_state)ev->from, (arbor_state)ev->to, ev->reason);
  arbor_event *e = arbor_ring_newest(r);
  e->seq = seq;
  e->incarnation = ev->incarnation;
  e->delay = delay;
  e->wall = wall;
  r->next_seq = seq + 1;
}

void arbor_ring_clear(arbor_ring *r) {
  while (r->len) drop_oldest(r);
  r->start = 0;
}

const arbor_event *arbor_ring_get(const arbor_ring *r, uint64_t seq) {
  uint64_t first = arbor_ring_first(r);
  if (seq < first || seq >= r->next_seq) return NULL;
  return &r->ev[(r->start + (seq - first)) % r->cap];
}

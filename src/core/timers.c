/* timers.c: a binary min-heap of timers keyed by (due, seq). */
#include "core/timers.h"

#include <stdlib.h>

void arbor_timers_init(arbor_timers *s) {
  s->heap = NULL;
  s->len = s->cap = 0;
  s->seq = 0;
}

void arbor_timers_close(arbor_timers *s) {
  for (size_t i = 0; i < s->len; i++) s->heap[i]->idx = 0;
  free(s->heap);
  arbor_timers_init(s);
}

static int before(const arbor_timer *a, const arbor_timer *b) {
  return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

static void place(arbor_timers *s, size_t i, arbor_timer *t) {
  s->heap[i] = t;
  t->idx = (uint32_t)(i + 1);
}

static void sift_up(arbor_timers *s, size_t i) {
  arbor_timer *t = s->heap[i];
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!before(t, s->heap[p])) break;
    place(s, i, s->heap[p]);
    i = p;
  }
  place(s, i, t);
}

static void sift_down(arbor_timers *s, size_t i) {
  arbor_timer *t = s->heap[i];
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= s->len) break;
    if (c + 1 < s->len && before(s->heap[c + 1], s->heap[c])) c++;
    if (!before(s->heap[c], t)) break;
    place(s, i, s->heap[c]);
    i = c;
  }
  place(s, i, t);
}

/* Removes the entry at position i. */
static void remove_at(arbor_timers *s, size_t i) {
  arbor_timer *t = s->heap[i];
  t->idx = 0;
  s->len--;
  if (i == s->len) return;
  place(s, i, s->heap[s->len]);
  if (i > 0 && before(s->heap[i], s->heap[(i - 1) / 2]))
    sift_up(s, i);
  else
    sift_down(s, i);
}

int arbor_timers_arm(arbor_timers *s, arbor_timer *t, double due) {
  if (t->idx) remove_at(s, t->idx - 1);
  if (s->len == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    arbor_timer **h = realloc(s->heap, cap * sizeof *h);
    if (!h) return -1;
    s->heap = h;
    s->cap = cap;
  }
  t->due = due;
  t->seq = ++s->seq;
  place(s, s->len++, t);
  sift_up(s, s->len - 1);
  return 0;
}

void arbor_timers_disarm(arbor_timers *s, arbor_timer *t) {
  if (t->idx) remove_at(s, t->idx - 1);
}

arbor_timer *arbor_timers_pop_due(arbor_timers *s, double now) {
  if (!s->len || s->heap[0]->due > now) return NULL;
  arbor_timer *t = s->heap[0];
  remove_at(s, 0);
  return t;
}

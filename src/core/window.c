/* window.c: the sliding-window failure counter. See window.h. */
#include "core/window.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t slot_of(const arbor_window *w, double t) {
  double x = t * w->per_second;
  int64_t s = (int64_t)x;
  return (double)s > x ? s - 1 : s; /* floor, without a libm call */
}

void arbor_window_init(arbor_window *w, double period, double now) {
  memset(w, 0, sizeof *w);
  w->per_second = (ARBOR_WINDOW_SLOTS - 1) / period;
  w->epoch = slot_of(w, now);
  w->last_id = -1;
}

uint64_t arbor_window_count(arbor_window *w, double t) {
  int64_t slot = slot_of(w, t);
  if (slot <= w->epoch) return w->total;
  if (slot - w->epoch >= ARBOR_WINDOW_SLOTS) {
    memset(w->count, 0, sizeof w->count);
    w->total = 0;
  } else {
    for (int64_t s = w->epoch; s < slot; s++) {
      w->head = w->head + 1 == ARBOR_WINDOW_SLOTS ? 0 : w->head + 1;
      w->total -= w->count[w->head];
      w->count[w->head] = 0;
    }
  }
  w->epoch = slot;
  return w->total;
}

uint64_t arbor_window_add(arbor_window *w, double t, int64_t id) {
  if (id >= 0 && id == w->last_id) return w->total;
  if (id >= 0) w->last_id = id;
  arbor_window_count(w, t);
  int64_t back = w->epoch - slot_of(w, t); /* 0: the newest bucket */
  if (back >= ARBOR_WINDOW_SLOTS) return w->total; /* too old */
  unsigned i = back <= (int64_t)w->head
                   ? w->head - (unsigned)back
                   : w->head + ARBOR_WINDOW_SLOTS - (unsigned)back;
  if (w->count[i] < UINT32_MAX) w->count[i]++;
  else return w->total;
  return ++w->total;
}

arbor_window *arbor_window_of(arbor_window_list **list, double period,
                              double now, int *made) {
  *made = 0;
  for (arbor_window_list *l = *list; l; l = l->next)
    if (l->period == period) return &l->w;
  arbor_window_list *l = malloc(sizeof *l);
  if (!l) return NULL;
  l->period = period;
  arbor_window_init(&l->w, period, now);
  l->next = *list;
  *list = l;
  *made = 1;
  return &l->w;
}

void arbor_window_list_free(arbor_window_list *list) {
  while (list) {
    arbor_window_list *next = list->next;
    free(list);
    list = next;
  }
}

/* window.c: the sliding-window failure counter. See window.h. */
#include "window.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t slot_of(const arbor_window *w, double t) {
  return (int64_t)floor(t / w->width);
}

static unsigned idx(int64_t slot) {
  int64_t i = slot % ARBOR_WINDOW_SLOTS;
  return (unsigned)(i < 0 ? i + ARBOR_WINDOW_SLOTS : i);
}

void arbor_window_init(arbor_window *w, double period, double now) {
  memset(w, 0, sizeof *w);
  w->width = period / (ARBOR_WINDOW_SLOTS - 1);
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
    for (int64_t s = w->epoch + 1; s <= slot; s++) {
      unsigned i = idx(s);
      w->total -= w->count[i];
      w->count[i] = 0;
    }
  }
  w->epoch = slot;
  return w->total;
}

uint64_t arbor_window_add(arbor_window *w, double t, int64_t id) {
  if (id >= 0 && id == w->last_id) return w->total;
  if (id >= 0) w->last_id = id;
  arbor_window_count(w, t);
  int64_t slot = slot_of(w, t);
  if (w->epoch - slot >= ARBOR_WINDOW_SLOTS) return w->total; /* too old */
  w->count[idx(slot)]++;
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

/* window.h: a sliding-window failure counter in O(1) per failure, for the
 * intensity policy (P4). Pure C: no Lua, no libuv.
 *
 * The window is ARBOR_WINDOW_SLOTS - 1 buckets of period/(SLOTS-1) seconds
 * plus the bucket holding the newest time, so it counts every failure of
 * the last `period` seconds and forgets one at most period/(SLOTS-1)
 * seconds later than that: it may count a failure up to 1/16 of the period
 * too long, never too short. OTP keeps every restart time of the period
 * instead (O(restarts in the period) per restart).
 */
#ifndef ARBOR_WINDOW_H
#define ARBOR_WINDOW_H

#include <stdint.h>

#define ARBOR_WINDOW_SLOTS 17

typedef struct arbor_window {
  double per_second; /* buckets per second: 1 / bucket width */
  int64_t epoch;     /* bucket number (time * per_second) of the newest */
  int64_t last_id;   /* id of the last failure added (-1: none) */
  uint64_t total;    /* failures in the window */
  unsigned head;     /* index in count of the newest bucket */
  uint32_t count[ARBOR_WINDOW_SLOTS]; /* saturating */
} arbor_window;

/* An empty window of `period` seconds (> 0) whose newest bucket holds now. */
void arbor_window_init(arbor_window *w, double period, double now);
/* Moves the window so that its newest bucket holds t (t later than the
   newest bucket: older buckets expire), and returns the failures in it. */
uint64_t arbor_window_count(arbor_window *w, double t);
/* Counts a failure at time t and returns the failures in the window. A
   time older than the window is not counted; id >= 0 names the failure:
   adding the same id twice in a row counts it once. */
uint64_t arbor_window_add(arbor_window *w, double t, int64_t id);

/* The windows of one node, one per period (intensity policies of several
   periods may decide the same node). */
typedef struct arbor_window_list {
  double period;
  arbor_window w;
  struct arbor_window_list *next;
} arbor_window_list;

/* The window of `period` in *list, made (empty, at now) when missing;
   *made tells which. NULL when out of memory. */
arbor_window *arbor_window_of(arbor_window_list **list, double period,
                              double now, int *made);
void arbor_window_list_free(arbor_window_list *list);

#endif

/* deadline.c: a node's timing options: min_uptime, ready_timeout and the
 * heartbeat watchdog (docs/policies.md, "Defaults"). The watchdog here is
 * the node's: a HEALTHY node that stops calling ctx:alive() (or whose
 * process stops sending WATCHDOG=1) fails; watchdog.c is another thing, the
 * guard against one resume running away with the engine's thread.
 *
 * One timer per node serves both deadlines, as they never overlap: the
 * ready deadline runs from the start to HEALTHY, the watchdog from HEALTHY
 * on. A heartbeat only writes the time; the timer, when it fires, moves to
 * the last heartbeat + watchdog if one came meanwhile, so a node beating
 * every millisecond costs no heap operation per beat.
 */
#include "engine/internal.h"
#include "engine/clock.h"
#include "engine/deadline.h"
#include "core/mem.h"

#include <stdio.h>
#include <stdlib.h>

pnode_timing *arbor__deadline_of(pnode *pn) {
  if (!pn->timing) {
    pnode_timing *t = arbor_xcalloc(1, sizeof *t);
    t->owner = pn;
    t->min_uptime = -1;
    pn->timing = t;
  }
  return pn->timing;
}

void arbor__deadline_started(arbor_engine *e, pnode *pn) {
  pnode_timing *t = pn->timing;
  if (!t) return;
  if (t->ready_timeout > 0)
    arbor__clock_arm(e, &t->timer, TIMER_READY,
                     pn->started + t->ready_timeout);
  else
    arbor_timers_disarm(&e->timers, &t->timer);
}

void arbor__deadline_healthy(arbor_engine *e, pnode *pn) {
  pnode_timing *t = pn->timing;
  if (!t) return;
  if (t->watchdog > 0) {
    t->last_alive = pn->healthy_at;
    arbor__clock_arm(e, &t->timer, TIMER_ALIVE, t->last_alive + t->watchdog);
  } else {
    arbor_timers_disarm(&e->timers, &t->timer);
  }
}

void arbor_engine_alive(arbor_engine *e, pnode *pn) {
  if (pn->timing) pn->timing->last_alive = arbor__step_time(e);
}

uint32_t arbor_engine_streak(arbor_engine *e, const pnode *pn) {
  if (arbor_node_running(&pn->n) &&
      arbor__deadline_was_up(pn, arbor_engine_now(e)))
    return 0;
  return pn->consecutive;
}

/* The seconds as the user wrote them: 5, 0.5, 90. */
static const char *seconds(char *buf, size_t size, double s) {
  snprintf(buf, size, "%.14g", s);
  return buf;
}

arbor_str *arbor__deadline_fired(arbor_engine *e, arbor_timer *timer,
                                 pnode **owner) {
  pnode_timing *t = (pnode_timing *)((char *)timer - offsetof(pnode_timing, timer));
  pnode *pn = *owner = t->owner;
  arbor_node *n = &pn->n;
  char buf[32];
  if (!arbor_node_running(n) || arbor_node_canceled(n)) return NULL;
  if (timer->kind == TIMER_READY) {
    if (n->state != ARBOR_NEW) return NULL;
    return arbor_str_fmt("not ready after %s s",
                         seconds(buf, sizeof buf, t->ready_timeout));
  }
  if (n->state != ARBOR_HEALTHY || !(t->watchdog > 0)) return NULL;
  double due = t->last_alive + t->watchdog;
  if (due > arbor__step_time(e)) { /* a heartbeat came meanwhile */
    arbor__clock_arm(e, &t->timer, TIMER_ALIVE, due);
    return NULL;
  }
  return arbor_str_fmt("watchdog timeout after %s s",
                       seconds(buf, sizeof buf, t->watchdog));
}

void arbor__deadline_free(arbor_engine *e, pnode *pn) {
  if (!pn->timing) return;
  arbor_timers_disarm(&e->timers, &pn->timing->timer);
  free(pn->timing);
  pn->timing = NULL;
}

double arbor_engine_timing(const pnode *pn, unsigned which) {
  if (which == TM_MIN_UPTIME) return arbor__min_uptime(pn);
  if (!pn->timing) return 0;
  return which == TM_READY ? pn->timing->ready_timeout : pn->timing->watchdog;
}

void arbor_engine_set_timing(arbor_engine *e, pnode *pn, unsigned which,
                             double s, int given) {
  if (!given && pn->timing && (pn->timing->given & which)) return;
  pnode_timing *t = arbor__deadline_of(pn);
  if (given) t->given |= which;
  arbor_node *n = &pn->n;
  int live = arbor_node_running(n) && !arbor_node_canceled(n);
  switch (which) {
  case TM_MIN_UPTIME:
    t->min_uptime = s;
    return;
  case TM_READY:
    if (t->ready_timeout == s) return;
    t->ready_timeout = s;
    if (live && n->state == ARBOR_NEW) arbor__deadline_started(e, pn);
    return;
  case TM_WATCHDOG:
    if (t->watchdog == s) return;
    t->watchdog = s;
    if (live && n->state == ARBOR_HEALTHY) {
      if (!arbor_timer_armed(&t->timer)) t->last_alive = arbor__step_time(e);
      if (s > 0)
        arbor__clock_arm(e, &t->timer, TIMER_ALIVE, t->last_alive + s);
      else
        arbor_timers_disarm(&e->timers, &t->timer);
    }
    return;
  }
}

int arbor_engine_extend_ready(arbor_engine *e, pnode *pn, double s) {
  pnode_timing *t = pn->timing;
  if (!t || !arbor_timer_armed(&t->timer) || t->timer.kind != TIMER_READY)
    return 0;
  double due = arbor__step_time(e) + s;
  if (due > t->timer.due) arbor__clock_arm(e, &t->timer, TIMER_READY, due);
  return 1;
}

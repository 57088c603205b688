/* emit.c: recording events in the engine's ring (T14), and in the outbox
 * of its subscribers. */
#include "engine/internal.h"
#include "engine/clock.h"

/* Records an event; with subscribers, a copy waits in the outbox for them,
   so a step that emits more events than the ring holds loses none (up to
   the outbox's capacity: loop.c counts the rest). */
void arbor__emit_delay(arbor_engine *e, pnode *pn, arbor_event_kind kind,
                       arbor_state from, arbor_state to, arbor_str *reason,
                       double delay) {
  if (kind == ARBOR_EV_STATE && from != to)
    arbor__metrics_transition(pn, from, to);
  arbor_ring_push(&e->ring, arbor__step_time(e), &pn->n, kind, from, to,
                  reason);
  arbor_event *ev = arbor_ring_newest(&e->ring);
  ev->delay = delay;
  ev->wall = arbor__wall(e);
  if (e->nsubs) arbor_ring_copy(&e->outbox, ev);
}

void arbor__emit(arbor_engine *e, pnode *pn, arbor_event_kind kind,
                 arbor_state from, arbor_state to, arbor_str *reason) {
  arbor__emit_delay(e, pn, kind, from, to, reason, -1);
}

void arbor_engine_emit_state(arbor_engine *e, pnode *pn, arbor_state from,
                             arbor_state to, arbor_str *reason) {
  arbor__emit(e, pn, ARBOR_EV_STATE, from, to, reason);
}

void arbor_engine_event(arbor_engine *e, pnode *pn, arbor_event_kind kind,
                        arbor_str *reason) {
  arbor__emit(e, pn, kind, (arbor_state)pn->n.state, (arbor_state)pn->n.state,
       reason);
}


/* drain.c: the single place that resumes coroutines.
 *
 * Everything happens on one thread. libuv callbacks (and the harness) only
 * fire timers and make incarnations ready (ready.c); arbor__drain() resumes
 * them, so resumes never nest. How a resume ended is classified here and
 * handed to the kernel (kernel.c), which ends the incarnation and decides
 * before the next resume; the coordinators reported to meanwhile are
 * answered (lifecycle.c) and events delivered between resumes.
 */
#include "engine/internal.h"
#include "engine/clock.h"
#include "engine/ready.h"

#include "engine/lifecycle.h"
#include "engine/watchdog.h"

static void resume_node(arbor_engine *e, pnode *pn) {
  lua_State *co = pn->co;
  if (!(pn->pflags & PN_RESUMED) && pn->resume != RESUME_VALUES) {
    /* canceled or failed before it ever ran */
    if (pn->resume == RESUME_CANCEL) {
      arbor__kernel_exit(e, pn, ARBOR_CANCELED, NULL, NULL);
    } else {
      lua_rawgeti(e->L, LUA_REGISTRYINDEX, pn->fail_ref);
      lua_xmove(e->L, co, 1);
      arbor__kernel_exit(e, pn, ARBOR_DEAD, arbor__failure_message(e, co, pn),
                         arbor_str_lit("(failed before it ran)"));
    }
    return;
  }
  pn->pflags |= PN_RESUMED;
  int nargs = pn->nargs, nres = 0;
  pn->nargs = 0;
  pnode *prev = e->current;
  e->current = pn;
  e->resumes++;
  arbor_watchdog_enter(co, e->runaway);
  int status = lua_resume(co, e->L, nargs, &nres);
  int runaway = arbor_watchdog_leave(co);
  e->current = prev;
  if (!(pn->pflags & PN_STEPPED)) {
    if (pn->claiming) arbor__kernel_claims_end(e, pn); /* after a reload */
    arbor__tr_stepped(e, pn);
  }
  if (runaway && status == LUA_YIELD) { /* the watchdog's hook yielded */
    lua_pop(co, nres);
    arbor_watchdog_push_error(co);
  } else if (status == LUA_YIELD) {
    lua_pop(co, nres);
    if (pn->wait == WAIT_NONE) /* a plain coroutine.yield() */
      arbor__ready_enqueue(e, pn);
    return;
  }
  if (status == LUA_OK) {
    lua_pop(co, nres);
    if (pn->done)
      arbor__kernel_exit(e, pn, ARBOR_DONE, NULL, NULL);
    else if (pn->pflags & PN_NOTIFIED)
      arbor__kernel_exit(e, pn, ARBOR_CANCELED, NULL, NULL);
    else {
      pn->pflags |= PN_RETURNED;
      arbor__kernel_exit(e, pn, ARBOR_DEAD,
                         arbor_str_fmt("runnable returned without signaling "
                                       "done (state %s)",
                                       arbor_state_name(
                                           (arbor_state)pn->n.state)),
                         NULL);
    }
    return;
  }
  if ((pn->pflags & PN_NOTIFIED) && arbor_is_canceled(co, -1)) {
    arbor__kernel_exit(e, pn, ARBOR_CANCELED, NULL, NULL);
    return;
  }
  /* the coroutine died (or was stopped): its traceback is read before
     the exit resets it */
  arbor_str *msg = arbor__failure_message(e, co, pn);
  if (runaway && status != LUA_YIELD) pn->pflags |= PN_NOPOOL;
  arbor__kernel_exit(e, pn, ARBOR_DEAD, msg, arbor__failure_traceback(co, pn));
}

/* Resumes the incarnations that were ready when it began (one batch, at
   least DRAIN_MIN resumes when more work keeps coming), so timers and I/O
   get their turn between batches even in a restart storm. */
#define DRAIN_MIN 256

void arbor__drain(arbor_engine *e) {
  if (e->draining) return;
  e->draining = 1;
  if (e->ready_head && e->runaway > 0) arbor_watchdog_busy();
  arbor_engine *prev = arbor__current;
  arbor__current = e;
  size_t batch = e->ready_len > DRAIN_MIN ? e->ready_len : DRAIN_MIN;
  arbor__lc_run(e);
  pnode *pn;
  while (batch > 0 && (pn = arbor__ready_next(e))) {
    batch--;
    arbor__step_begin(e);
    resume_node(e, pn);
    arbor__lc_run(e);
    arbor__deliver_events(e);
  }
  arbor__current = prev;
  e->draining = 0;
  arbor__deliver_events(e);
}

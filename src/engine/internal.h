/* internal.h: what the engine's own files share, sectioned by file, with
 * libuv's uv__ convention: arbor__ names are not for the bindings (their
 * interface is engine.h). After arbor__ comes the file, as Lua's luaD_
 * names ldo.c: arbor__tr_ transition.c, arbor__kernel_, arbor__ready_,
 * arbor__drain, arbor__clock_, arbor__emit, arbor__call_, arbor__deliver_,
 * arbor__loop_, arbor__strategy_, arbor__decide, arbor__defer_,
 * arbor__failure_, arbor__event_table_. Files whose names others use
 * inline have their own header: clock.h (arbor__clock_, the step's time)
 * and ready.h (arbor__ready_); lifecycle.h's are arbor__lc_.
 */
#ifndef ARBOR_INTERNAL_H
#define ARBOR_INTERNAL_H

#include "engine/engine.h"

/* emit.c */
void arbor__emit_delay(arbor_engine *e, pnode *pn, arbor_event_kind kind,
                       arbor_state from, arbor_state to, arbor_str *reason,
                       double delay);
void arbor__emit(arbor_engine *e, pnode *pn, arbor_event_kind kind,
                 arbor_state from, arbor_state to, arbor_str *reason);

/* kernel.c: starts, exits, restart decisions and the ordered stop */
/* Ends pn's incarnation in state s: reason (taken) is the error message
   for DEAD, or a note; trace (taken) the traceback. Spreads death, lets
   the next member of its group start, and lets the GC decide. */
void arbor__kernel_exit(arbor_engine *e, pnode *pn, arbor_state s,
                        arbor_str *reason, arbor_str *trace);
/* pn started, became HEALTHY or exited for good: the next member of its
   group starts if it waited for that. */
void arbor__kernel_release(arbor_engine *e, pnode *pn);
/* Fails pn from outside its incarnation (a missed deadline, an escalation):
   it is DEAD with why (borrowed) as its error, its subtree and group
   stop (T6) and its policy decides once they exited. */
void arbor__kernel_fail(arbor_engine *e, pnode *pn, arbor_str *why);
/* A poststop child running for a stopping parent: bounded by its shutdown
   time (L3). */
void arbor__kernel_bound(arbor_engine *e, pnode *pn);
/* Asks p's coordinator what to do and does it, until it has nothing more
   to say; poststop: p stops, and its poststop children start first (L3).
   Performing may end p's incarnation (a retired child was the last to
   exit and p restarts): its coordinator is then gone. */
void arbor__kernel_answer(arbor_engine *e, pnode *p, int poststop);
/* Starts pn's reload (ops.c checked it may): its children are marked to
   be adopted and its incarnation is told to stop, not them. */
void arbor__kernel_reload(arbor_engine *e, pnode *pn);
/* pn's new incarnation, after a reload, ended its first step (or exited
   before): the children it did not adopt are stopped and removed. */
void arbor__kernel_claims_end(arbor_engine *e, pnode *pn);

/* drain.c: resumes what is ready, one batch */
void arbor__drain(arbor_engine *e);

/* transition.c: the only code that changes a node's life. Each updates
   the tree, emits the event (reason borrowed) and reports to the parent's
   lifecycle coordinator. */
void arbor__tr_started(arbor_engine *e, pnode *pn, arbor_state from);
void arbor__tr_set_state(arbor_engine *e, pnode *pn, arbor_state to,
                      arbor_str *reason);
void arbor__tr_exited(arbor_engine *e, pnode *pn, arbor_state s,
                   arbor_str *reason);
void arbor__tr_held(arbor_engine *e, pnode *pn);
void arbor__tr_stepped(arbor_engine *e, pnode *pn);
void arbor__tr_cancel(arbor_engine *e, pnode *pn);
void arbor__tr_discarded(arbor_engine *e, pnode *pn);

/* loop.c */
void arbor__loop_force_close(arbor_engine *e, pnode *pn);
void arbor__loop_kill_all(arbor_engine *e);

/* deliver.c */
void arbor__deliver_events(arbor_engine *e);
uint64_t arbor__deliver_subscribe(arbor_engine *e, int ref);
void arbor__deliver_unsubscribe(arbor_engine *e, uint64_t id);
void arbor__deliver_free(arbor_engine *e);

/* strategy.c: group strategies and significant children. Answers only;
   the kernel starts and stops. */
/* 1 when dead's death cancels member (T6): never for a temporary node. */
int arbor__strategy_spreads(arbor_engine *e, pnode *dead, pnode *member);
/* 1 when pn is to wait for its predecessor (it is left PENDING). */
int arbor__strategy_hold(arbor_engine *e, pnode *pn);
/* The member that waits for pn and may start now, or NULL. */
pnode *arbor__strategy_released(arbor_engine *e, pnode *pn);
/* pn ended by itself in state s (DONE, or DEAD when temporary): the parent
   its auto_shutdown stops now, or NULL. */
pnode *arbor__strategy_shutdown(arbor_engine *e, pnode *pn, arbor_state s);
arbor_state arbor__strategy_auto_exit(pnode *pn, arbor_state s);

/* decide.c: asks the policy of pn, which died, under a time budget (the
   default policy stands in for a faulty one); emits the decision and
   returns it: DECISION_RESTART (after *delay seconds), _STOP or
   _ESCALATE. */
int arbor__decide(arbor_engine *e, pnode *pn, double *delay);
/* 1 when pn's policy is arbor.policy.never: OTP's temporary child. */
int arbor__decide_temporary(arbor_engine *e, const pnode *pn);

/* metrics.c: counts a state change of pn (emit.c), a loop turn (loop.c).
   The count is inline (it runs twice per restart); the block is made at a
   node's first change that is not its first HEALTHY. */
void arbor__metrics_first(pnode *pn, arbor_state from, arbor_state to);
static inline void arbor__metrics_transition(pnode *pn, arbor_state from,
                                             arbor_state to) {
  if (pn->counts)
    pn->counts->tr[from][to]++;
  else if (from != ARBOR_NEW || to != ARBOR_HEALTHY)
    arbor__metrics_first(pn, from, to);
}
void arbor__metrics_turn(arbor_engine *e, uint64_t ns);

/* call.c */
int arbor__call_budget(arbor_engine *e, lua_State *L, int nargs);

/* event_table.c: pn's DN; the last one pushed is kept as a Lua string, since
   a node's events and log lines come in runs (an exit, its policy, the
   restart). [-0, +1, m] */
void arbor__event_table_dn(arbor_engine *e, lua_State *L, pnode *pn);
/* event_table.c: an event as a Lua table. [-0, +1, m] */
void arbor_push_event_table(arbor_engine *e, lua_State *L,
                            const arbor_event *ev);
/* event_table.c: the gap marker of events first..last missed. [-0, +1, m] */
void arbor_push_gap_table(lua_State *L, uint64_t first, uint64_t last,
                          double time);

/* defer.c: runs what ctx:defer recorded for pn's incarnation. */
void arbor__defer_run(arbor_engine *e, pnode *pn);

/* failure.c: the error value on top of co as a message (its __tostring
   runs under the budget of policies); pn, if any, is the node it may
   repeat the last error of. */
arbor_str *arbor__failure_message(arbor_engine *e, lua_State *co, pnode *pn);
/* The traceback of co, which died of an error or was stopped. */
arbor_str *arbor__failure_traceback(lua_State *co, pnode *pn);

#endif

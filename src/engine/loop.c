/* loop.c: the loop: timers firing, the libuv loop of real engines (pump,
 * signals), settle and advance of virtual ones.
 */
#include "engine/internal.h"
#include "engine/clock.h"
#include "engine/deadline.h"
#include "engine/ready.h"

#include <lauxlib.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/lifecycle.h"
#include "engine/watchdog.h"

/* Forced close at the shutdown deadline (T7). */
void arbor__loop_force_close(arbor_engine *e, pnode *pn) {
  pn->n.flags |= ARBOR_F_FORCED;
  if (e->stop_requested && !e->closing) {
    if (!e->first_forced) {
      char *dn = arbor_node_dn_dup(&pn->n);
      e->first_forced = arbor_str_lit(dn ? dn : "?");
      free(dn);
    }
    e->forced_in_stop++;
  }
  arbor__kernel_exit(e, pn, ARBOR_CANCELED, arbor_str_ref(e->r_forced), NULL);
}

static void fire(arbor_engine *e, arbor_timer *t) {
  pnode *pn;
  switch (t->kind) {
  case TIMER_WAKE:
    pn = (pnode *)((char *)t - offsetof(pnode, wake));
    pn->wait = WAIT_NONE;
    arbor__ready_enqueue(e, pn);
    break;
  case TIMER_RESTART:
    pn = (pnode *)((char *)t - offsetof(pnode, wake));
    arbor_engine_start(e, pn);
    break;
  case TIMER_DEADLINE:
    pn = ((pnode_stop *)((char *)t - offsetof(pnode_stop, deadline)))->owner;
    if (arbor_node_running(&pn->n)) arbor__loop_force_close(e, pn);
    break;
  case TIMER_BOUND:
    pn = ((pnode_stop *)((char *)t - offsetof(pnode_stop, deadline)))->owner;
    if (!arbor_node_canceled(&pn->n)) arbor__lc_bound_fired(e, pn);
    break;
  case TIMER_READY:
  case TIMER_ALIVE: { /* ready_timeout, watchdog (deadline.c) */
    arbor_str *why = arbor__deadline_fired(e, t, &pn);
    if (why) arbor__kernel_fail(e, pn, why);
    arbor_str_unref(why);
    break;
  }
  }
}

/* Fires every timer due now. */
static void fire_due(arbor_engine *e) {
  arbor__step_begin(e);
  double now = arbor__step_time(e);
  arbor_timer *t;
  arbor_engine *prev = arbor__current;
  arbor__current = e;
  while ((t = arbor_timers_pop_due(&e->timers, now))) fire(e, t);
  arbor__current = prev;
}

int arbor_engine_finished(arbor_engine *e) {
  return e->tree.root->live == 0 && !e->ready_head && !e->lc_len &&
         !arbor_timers_peek(&e->timers);
}

/* ---- stuck nodes ---------------------------------------------------- */

void arbor_engine_stuck(arbor_engine *e, void (*fn)(pnode *, void *),
                        void *ud) {
  double now = arbor_engine_now(e);
  arbor_node *top = e->tree.root, *n = top;
  while (n) {
    pnode *pn = (pnode *)n;
    if (arbor_node_running(n) && (pn->pflags & PN_NOTIFIED) && pn->stop &&
        now >= pn->stop->deadline.due)
      fn(pn, ud);
    if (n->first) {
      n = n->first;
      continue;
    }
    while (n && n != top && !n->next) n = n->parent;
    n = (n && n != top) ? n->next : NULL;
  }
}

/* ---- the loop ------------------------------------------------------- */

static void pump(arbor_engine *e);
static void on_timer(uv_timer_t *h);

static void rearm_uv_timer(arbor_engine *e) {
  arbor_timer *t = arbor_timers_peek(&e->timers);
  if (!t) {
    uv_timer_stop(&e->timer);
    return;
  }
  double wait = t->due - arbor_engine_now(e);
  if (wait <= 0) {
    /* Due already (a runnable worked past its sleep): on_check fires it
       after the next poll, which does not block. A 0 ms libuv timer armed
       from its own callback runs again in the same pass (libuv 1.44), so a
       runnable working longer than its sleeps would keep the loop from
       ever polling: no control client, signal or exit would be seen. */
    uv_timer_stop(&e->timer);
    arbor__clock_keep_polling(e);
    return;
  }
  uv_timer_start(&e->timer, on_timer, (uint64_t)ceil(wait * 1000.0), 0);
}

static void on_timer(uv_timer_t *h) { pump(h->data); }
static void on_check(uv_check_t *h) { /* once per loop turn */
  uint64_t t0 = uv_hrtime();
  pump(h->data);
  arbor__metrics_turn(h->data, uv_hrtime() - t0);
}

void arbor__loop_kill_all(arbor_engine *e) {
  e->closing = 1;
  arbor_node *top = e->tree.root, *n = top;
  while (n) {
    if (arbor_node_running(n)) arbor__loop_force_close(e, (pnode *)n);
    if (n->first) {
      n = n->first;
      continue;
    }
    while (n && n != top && !n->next) n = n->parent;
    n = (n && n != top) ? n->next : NULL;
  }
}

static void on_signal(uv_signal_t *h, int signum) {
  arbor_engine *e = h->data;
  arbor_watchdog_signal_handled();
  arbor__step_begin(e);
  if (e->stop_requested && signum == SIGINT) {
    e->interrupted = 1;
    arbor__loop_kill_all(e);
  } else {
    arbor_str *line = arbor_str_fmt("%s: stopping the tree",
                                    signum == SIGINT ? "SIGINT" : "SIGTERM");
    arbor_engine_log(e, (pnode *)e->tree.root, line);
    arbor_str_unref(line);
    arbor_engine_stop(e);
  }
  pump(e);
}

/* SIGHUP never ends arbor (a closed terminal sends it): it is logged on
   the root and ignored until reloading the script exists. Under --init the
   process groups get it too (proc/reaper.c forwards it). */
static void on_sighup(uv_signal_t *h, int signum) {
  (void)signum;
  arbor_engine *e = h->data;
  arbor__step_begin(e);
  if (e->hangup_ref != LUA_NOREF) { /* arbor.run's: reloads the script */
    lua_State *L = e->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, e->hangup_ref);
    int ok = lua_pcall(L, 0, 1, 0) == LUA_OK;
    const char *said = lua_tostring(L, -1);
    arbor_str *line = arbor_str_fmt("SIGHUP: %s%s", ok ? "" : "error: ",
                                    said ? said : "(no message)");
    arbor_engine_log(e, (pnode *)e->tree.root, line);
    arbor_str_unref(line);
    lua_pop(L, 1);
  } else {
    arbor_str *line = arbor_str_lit("SIGHUP ignored: no script to reload");
    arbor_engine_log(e, (pnode *)e->tree.root, line);
    arbor_str_unref(line);
  }
  pump(e);
}

static void on_sighup_closed(uv_handle_t *h) { h->data = NULL; }

/* One turn: fire due timers, drain, re-arm; stops the loop when finished. */
static void pump(arbor_engine *e) {
  e->wakeups++;
  fire_due(e);
  arbor__drain(e);
  if (e->ready_head) {
    arbor__clock_keep_polling(e); /* more to do: do not block in poll */
  } else {
    uv_idle_stop(&e->idle);
    arbor_watchdog_idle();
  }
  if (arbor_engine_finished(e) || e->interrupted) {
    uv_timer_stop(&e->timer);
    uv_stop(e->loop);
    return;
  }
  rearm_uv_timer(e);
}

/* The handlers are in: the signals arbor answers are taken from now on. A
   reexec holds them blocked across the exec (lua/l_reexec.c), and a parent
   may have started arbor with them blocked: what came meanwhile, pending,
   is handled now (a SIGTERM stops the tree in order). */
static void take_signals(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGUSR2);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

void arbor_engine_run(arbor_engine *e) {
  if (!e->loop) return;
  uv_check_start(&e->check, on_check);
  uv_signal_t sighup; /* lives as long as this run */
  sighup.data = NULL;
  if (e->signals) {
    uv_signal_start(&e->sigint, on_signal, SIGINT);
    uv_signal_start(&e->sigterm, on_signal, SIGTERM);
    if (uv_signal_init(e->loop, &sighup) == 0) {
      sighup.data = e;
      uv_unref((uv_handle_t *)&sighup);
      uv_signal_start(&sighup, on_sighup, SIGHUP);
    }
    arbor_watchdog_signals_on(); /* a stuck loop still ends (T12) */
    take_signals();
  }
  double loop_limit = arbor_watchdog_loop_limit();
  arbor_watchdog_set_loop_limit(e->runaway); /* luv callbacks */
  pump(e);
  if (!arbor_engine_finished(e) && !e->interrupted)
    uv_run(e->loop, UV_RUN_DEFAULT);
  arbor_watchdog_set_loop_limit(loop_limit);
  uv_check_stop(&e->check);
  if (e->signals) arbor_watchdog_signals_off();
  uv_signal_stop(&e->sigint);
  uv_signal_stop(&e->sigterm);
  if (sighup.data) {
    uv_close((uv_handle_t *)&sighup, on_sighup_closed);
    while (sighup.data) uv_run(e->loop, UV_RUN_NOWAIT);
  }
  uv_timer_stop(&e->timer);
}

int arbor_engine_settle(arbor_engine *e) {
  if (e->draining) return 0;
  uint64_t limit = e->resumes + e->settle_limit;
  do {
    fire_due(e);
    arbor__drain(e);
    if (e->resumes > limit) {
      arbor_watchdog_idle();
      return -1;
    }
  } while (e->ready_head || e->lc_len ||
           (arbor_timers_peek(&e->timers) &&
            arbor_timers_peek(&e->timers)->due <= arbor__step_time(e)));
  arbor_watchdog_idle();
  return 0;
}

int arbor_engine_advance(arbor_engine *e, double dt) {
  double target = e->vnow + dt;
  if (arbor_engine_settle(e) < 0) return -1;
  arbor_timer *t;
  while ((t = arbor_timers_peek(&e->timers)) && t->due <= target) {
    if (t->due > e->vnow) e->vnow = t->due;
    if (arbor_engine_settle(e) < 0) return -1;
  }
  if (target > e->vnow) e->vnow = target;
  return arbor_engine_settle(e);
}

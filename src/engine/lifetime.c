/* lifetime.c: an engine's lifetime: making it, its tree's ownership hooks
 * (a discarded node's records go, the engine outlives its last referenced
 * node), the references nodes share to their runnables and policies, and
 * closing it.
 */
#include "engine/internal.h"
#include "engine/logfile.h"
#include "engine/deadline.h"
#include "engine/ready.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <time.h>

#include "engine/ctx.h"
#include "engine/home.h"
#include "engine/lifecycle.h"
#include "engine/watchdog.h"
#include "core/window.h"

/* ---- tree hooks ----------------------------------------------------- */

/* A discarded node: its incarnation, Lua references and records go now;
   the memory stays while events or ctx objects reference it. */
static void hook_detached(arbor_node *n, void *ud) {
  arbor_engine *e = ud;
  pnode *pn = (pnode *)n;
  lua_State *L = e->L;
  arbor__tr_discarded(e, pn);
  const arbor_engine_procs *procs = arbor_engine_get_procs();
  if (procs) procs->node_discarded(pn);
  arbor_timers_disarm(&e->timers, &pn->wake);
  if (pn->stop) {
    arbor_timers_disarm(&e->timers, &pn->stop->deadline);
    free(pn->stop);
    pn->stop = NULL;
  }
  arbor__deadline_free(e, pn);
  arbor__ready_unlink(e, pn);
  arbor__ready_close_coroutine(e, pn);
  arbor_engine_unref_fn(e, pn->fn_ref);
  arbor_engine_unref_fn(e, pn->policy_ref);
  arbor_engine_unref_fn(e, pn->opts_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, pn->fail_ref);
  pn->fn_ref = pn->policy_ref = pn->fail_ref = pn->opts_ref = LUA_NOREF;
  arbor_str_set(&pn->error, NULL);
  arbor_str_set(&pn->trace, NULL);
  if (pn->failures) {
    luaL_unref(L, LUA_REGISTRYINDEX, pn->failures->memory_ref);
    arbor_window_list_free(pn->failures->windows);
  }
  free(pn->failures);
  pn->failures = NULL;
  free(pn->counts);
  pn->counts = NULL;
  pn->nfail = 0;
  arbor_engine_log_free(e, pn);
}

/* The engine outlives its nodes: once closed, it is freed with the last
   node that something (a ctx kept by Lua code) still referenced. */
static void hook_release(arbor_node *n, void *ud) {
  arbor_engine *e = ud;
  if (e->dn_pn == (pnode *)n) e->dn_pn = NULL; /* its address may come back */
  arbor__tr_free_coord((pnode *)n);
  if (e->zombie && e->tree.allocated == 0) free(e);
}

/* ---- shared references to runnables and policies -------------------- */

/* Nodes often share one function (a million workers running one runnable):
   they share one counted registry reference to it instead of a registry
   slot each. e->shared_ref is a table: shared[fn] = ref, shared[ref] =
   count. */
int arbor_engine_ref_fn(arbor_engine *e, lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  lua_rawgeti(L, LUA_REGISTRYINDEX, e->shared_ref);
  int t = lua_gettop(L);
  lua_pushvalue(L, idx);
  int ref;
  if (lua_rawget(L, t) == LUA_TNUMBER) {
    ref = (int)lua_tointeger(L, -1);
    lua_rawgeti(L, t, ref);
    lua_Integer count = lua_tointeger(L, -1);
    lua_pushinteger(L, count + 1);
    lua_rawseti(L, t, ref);
  } else {
    lua_pushvalue(L, idx);
    ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pushvalue(L, idx);
    lua_pushinteger(L, ref);
    lua_rawset(L, t);
    lua_pushinteger(L, 1);
    lua_rawseti(L, t, ref);
  }
  lua_settop(L, t - 1);
  return ref;
}

void arbor_engine_unref_fn(arbor_engine *e, int ref) {
  if (ref == LUA_NOREF || ref == LUA_REFNIL) return;
  lua_State *L = e->L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, e->shared_ref);
  lua_rawgeti(L, -1, ref);
  lua_Integer count = lua_tointeger(L, -1) - 1;
  lua_pop(L, 1);
  if (count > 0) {
    lua_pushinteger(L, count);
    lua_rawseti(L, -2, ref);
  } else {
    lua_pushnil(L);
    lua_rawseti(L, -2, ref);
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    lua_pushnil(L);
    lua_rawset(L, -3);
    luaL_unref(L, LUA_REGISTRYINDEX, ref);
  }
  lua_pop(L, 1);
}

static void pnode_init(pnode *pn) {
  pn->co_ref = pn->fn_ref = pn->policy_ref = pn->fail_ref = pn->opts_ref =
      LUA_NOREF;
  pn->shutdown = 5.0;
  pn->healthy_at = -1;
  pn->healthy_wall = 0;
}

pnode *arbor_engine_add(arbor_engine *e, pnode *parent, const char *name,
                        size_t len, int *err) {
  pnode *pn = (pnode *)arbor_tree_add(&parent->n, name, len, err);
  if (pn) pnode_init(pn);
  return pn;
}

void arbor_engine_start_root(arbor_engine *e, int fn_ref, int policy_ref,
                             double shutdown) {
  pnode *root = (pnode *)e->tree.root;
  root->fn_ref = fn_ref;
  root->policy_ref = policy_ref;
  root->shutdown = shutdown;
  arbor_engine_start(e, root);
}

/* ---- lifetime ------------------------------------------------------- */

arbor_engine *arbor_engine_new(lua_State *L, int virtual_clock, uint64_t seed,
                               size_t ring_cap) {
  arbor_engine *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  arbor_hooks hooks = {.release = hook_release, .detached = hook_detached,
                       .ud = e};
  if (arbor_tree_init(&e->tree, sizeof(pnode), &hooks) < 0 ||
      arbor_ring_init(&e->ring, ring_cap, ARBOR_RING_BYTES) < 0) {
    arbor_tree_close(&e->tree);
    free(e);
    return NULL;
  }
  pnode_init((pnode *)e->tree.root);
  arbor_timers_init(&e->timers);
  e->L = lua_newthread(L);
  e->L_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  e->default_policy_ref = e->log_ref = e->overrides_ref = LUA_NOREF;
  e->reload_plan_ref = e->node_filter_ref = e->hangup_ref = LUA_NOREF;
  e->outbox_cap = ARBOR_OUTBOX_CAP;
  e->dn_ref = LUA_NOREF;
  lua_newtable(L);
  e->shared_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  e->ctx_mt_ref = arbor__ctx_mt_ref(L, &e->ctx_mt);
  e->policy_ev_ref = LUA_NOREF;
  e->virtual_clock = virtual_clock;
  e->rng = seed ? seed : 0x9E3779B97F4A7C15ull;
  e->budget = 0.1;
  static arbor_str r_start = ARBOR_STR_STATIC("start"),
                   r_restart = ARBOR_STR_STATIC("restart"),
                   r_stop = ARBOR_STR_STATIC("stop"),
                   r_escalate = ARBOR_STR_STATIC("escalate"),
                   r_forced = ARBOR_STR_STATIC("forced"),
                   r_held = ARBOR_STR_STATIC("held"),
                   r_retired = ARBOR_STR_STATIC("retired by the coordinator (L4)"),
                   r_blocked = ARBOR_STR_STATIC("blocked at its lifecycle gate");
  e->r_start = &r_start;
  e->r_restart = &r_restart;
  e->r_stop = &r_stop;
  e->r_escalate = &r_escalate;
  e->r_forced = &r_forced;
  e->r_held = &r_held;
  e->r_retired = &r_retired;
  e->r_blocked = &r_blocked;
  e->settle_limit = 10000000;
  e->runaway = 10.0;
  e->t0 = uv_hrtime();
  if (!virtual_clock) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    e->wall0 = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    e->loop = arbor_home_loop(L); /* shared with luv and other engines */
    uv_timer_init(e->loop, &e->timer);
    uv_check_init(e->loop, &e->check);
    uv_idle_init(e->loop, &e->idle);
    uv_signal_init(e->loop, &e->sigint);
    uv_signal_init(e->loop, &e->sigterm);
    e->timer.data = e->check.data = e->idle.data = e;
    e->sigint.data = e->sigterm.data = e;
    uv_unref((uv_handle_t *)&e->sigint);
    uv_unref((uv_handle_t *)&e->sigterm);
  }
  return e;
}

/* The engine's handles count down in `pending` as they close. */
static void on_close(uv_handle_t *h) { (*(int *)h->data)--; }

void arbor_engine_free(arbor_engine *e) {
  lua_State *L = e->L;
  arbor__loop_kill_all(e);
  arbor__lc_clear(e);
  /* empty the ready queue in one pass, so discarding stays linear */
  for (pnode *pn = e->ready_head, *next; pn; pn = next) {
    next = pn->ready_next;
    pn->ready_next = NULL;
    pn->pflags &= (uint16_t)~(PN_QUEUED | PN_INLIST);
  }
  e->ready_head = e->ready_tail = NULL;
  e->ready_len = 0;
  arbor_tree_close(&e->tree);
  arbor_watchdog_idle(); /* closing ran <close> variables and defers */
  arbor_logfiles_close(e); /* what is buffered is written (logfile.c) */
  arbor_ring_close(&e->ring);
  if (e->outbox.ev) arbor_ring_close(&e->outbox);
  arbor_timers_close(&e->timers);
  arbor_str_unref(e->gave_up_reason);
  arbor_str_unref(e->first_forced);
  arbor_str_unref(e->first_killed);
  if (e->loop) {
    /* the loop is the state's (home.c): close only the engine's handles */
    const arbor_engine_procs *procs = arbor_engine_get_procs();
    if (procs) procs->engine_free(e);
    int pending = 5;
    uv_handle_t *hs[] = {(uv_handle_t *)&e->timer, (uv_handle_t *)&e->check,
                         (uv_handle_t *)&e->idle, (uv_handle_t *)&e->sigint,
                         (uv_handle_t *)&e->sigterm};
    for (int i = 0; i < 5; i++) {
      hs[i]->data = &pending;
      uv_close(hs[i], on_close);
    }
    while (pending > 0) uv_run(e->loop, UV_RUN_NOWAIT);
  }
  for (size_t i = 0; i < e->npool; i++)
    luaL_unref(L, LUA_REGISTRYINDEX, e->pool[i].ref);
  e->npool = 0;
  luaL_unref(L, LUA_REGISTRYINDEX, e->default_policy_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, e->shared_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, e->ctx_mt_ref);
  if (e->policy_ev_ref != LUA_NOREF) { /* its __index points here */
    lua_rawgeti(L, LUA_REGISTRYINDEX, e->policy_ev_ref);
    lua_pushnil(L);
    lua_setmetatable(L, -2);
    lua_pop(L, 1);
  }
  luaL_unref(L, LUA_REGISTRYINDEX, e->policy_ev_ref);
  arbor__deliver_free(e);
  luaL_unref(L, LUA_REGISTRYINDEX, e->dn_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, e->log_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, e->overrides_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, e->reload_plan_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, e->node_filter_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, e->hangup_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, e->L_ref);
  if (e->tree.allocated == 0)
    free(e);
  else
    e->zombie = 1; /* freed by hook_release with the last node */
}

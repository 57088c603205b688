/* l_engine.c: the engine as a Lua object: start, run, settle, advance,
 * node views (T13a), tree snapshots, events (T14) and node operations (T13).
 * The public module (lua/arbor/init.lua) and the harness
 * (lua/arbor/testing.lua) are written on top of it.
 */
#include <lauxlib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/gc.h"
#include "engine/internal.h"
#include "lua/l_arbor.h"
#include "engine/lifecycle.h"

typedef struct lengine {
  arbor_engine *e;
} lengine;

/* Weak table light(e) -> engine userdata, for core.current(). */
static const char engines_key = 'e';

static arbor_engine *check_engine(lua_State *L, int idx) {
  lengine *le = luaL_checkudata(L, idx, ARBOR_ENGINE_MT);
  if (!le->e) luaL_error(L, "engine is closed");
  return le->e;
}

arbor_engine *arbor_check_engine(lua_State *L, int idx) {
  return check_engine(L, idx);
}

static int push_engine_object(lua_State *L, arbor_engine *e) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &engines_key);
  lua_rawgetp(L, -1, e);
  lua_remove(L, -2);
  return 1;
}

/* core.engine{virtual=, seed=, ring=, ring_bytes=, outbox=, signals=,
   runaway=} */
static int l_engine_new(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "virtual");
  int virt = lua_toboolean(L, -1);
  lua_getfield(L, 1, "seed");
  uint64_t seed = (uint64_t)luaL_optinteger(L, -1, 0);
  lua_getfield(L, 1, "ring");
  lua_Integer ring = luaL_optinteger(L, -1, 1024);
  if (ring < 1) return luaL_error(L, "engine: ring must be >= 1");
  lua_getfield(L, 1, "ring_bytes");
  lua_Integer ring_bytes = luaL_optinteger(L, -1, (lua_Integer)ARBOR_RING_BYTES);
  if (ring_bytes < 1024)
    return luaL_error(L, "engine: ring_bytes must be >= 1024");
  lua_getfield(L, 1, "outbox");
  lua_Integer outbox = luaL_optinteger(L, -1, ARBOR_OUTBOX_CAP);
  if (outbox < 1) return luaL_error(L, "engine: outbox must be >= 1");
  lua_getfield(L, 1, "signals");
  int signals = lua_toboolean(L, -1);
  lua_getfield(L, 1, "runaway");
  double runaway = luaL_optnumber(L, -1, 10.0);
  if (!(runaway >= 0) || !isfinite(runaway))
    return luaL_error(L, "engine: runaway must be a finite number >= 0");
  lua_settop(L, 1);
  lengine *le = lua_newuserdatauv(L, sizeof *le, 0);
  le->e = NULL;
  luaL_setmetatable(L, ARBOR_ENGINE_MT);
  le->e = arbor_engine_new(L, virt, seed, (size_t)ring);
  if (!le->e) return luaL_error(L, "engine: out of memory");
  le->e->signals = signals;
  le->e->ring.max_bytes = (size_t)ring_bytes; /* the ring is still empty */
  le->e->outbox_cap = (size_t)outbox;
  le->e->runaway = runaway;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &engines_key);
  lua_pushvalue(L, -2);
  lua_rawsetp(L, -2, le->e);
  lua_pop(L, 1);
  return 1;
}

/* Raises when e is running Lua code now: driving or closing the engine
   from inside its own tree would pull the ground from under that code. */
static void check_outside(lua_State *L, arbor_engine *e, const char *what) {
  if (e->draining || e->delivering || e->policy_depth || arbor_engine_current() == e)
    luaL_error(L, "%s: not from inside the tree's own runnables, policies or "
                  "subscribers", what);
}

static int l_engine_gc(lua_State *L) {
  lengine *le = luaL_checkudata(L, 1, ARBOR_ENGINE_MT);
  if (le->e) check_outside(L, le->e, "close");
  if (le->e) arbor_engine_free(le->e);
  le->e = NULL;
  return 0;
}

/* core.current(): the engine running the calling code, or nil. */
static int l_current(lua_State *L) {
  arbor_engine *e = arbor_engine_current();
  if (!e) return lua_pushnil(L), 1;
  return push_engine_object(L, e);
}

static int set_ref(lua_State *L, int *ref, int idx) {
  luaL_unref(L, LUA_REGISTRYINDEX, *ref);
  *ref = LUA_NOREF;
  if (!lua_isnoneornil(L, idx)) {
    lua_pushvalue(L, idx);
    *ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  return 0;
}

static int l_set_default_policy(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  return set_ref(L, &e->default_policy_ref, 2);
}

static int l_set_log(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TFUNCTION);
  return set_ref(L, &e->log_ref, 2);
}

/* e:start(fn, policy_or_nil, shutdown) */
static int l_start(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  pnode *root = (pnode *)e->tree.root;
  if (root->n.incarnation > 0) return luaL_error(L, "engine already started");
  luaL_checktype(L, 2, LUA_TFUNCTION);
  if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TFUNCTION);
  int fn = arbor_engine_ref_fn(e, L, 2);
  arbor_child_opts o = {0};
  if (!lua_isnoneornil(L, 5)) { /* the root's auto_shutdown */
    lua_pushliteral(L, "auto_shutdown");
    lua_pushvalue(L, 5);
    arbor_strategy_opt(L, "auto_shutdown", &o, root, "start");
    lua_pop(L, 2);
  }
  int policy = lua_isnoneornil(L, 3) ? LUA_NOREF : arbor_engine_ref_fn(e, L, 3);
  root->gflags = (uint8_t)o.gflags;
  arbor_engine_start_root(e, fn, policy, luaL_optnumber(L, 4, 5.0));
  return 0;
}

/* e:run() -> true | false, reason */
static int l_run(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  if (e->virtual_clock) return luaL_error(L, "run: this engine is virtual");
  check_outside(L, e, "run");
  arbor_engine_run(e);
  if (e->interrupted) {
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "interrupted");
    return 2;
  }
  if (e->gave_up) {
    lua_pushboolean(L, 0);
    lua_pushstring(L, e->gave_up_reason ? e->gave_up_reason->s : "gave up");
    return 2;
  }
  if (e->forced_in_stop || e->killed_in_stop) { /* T12: not a clean stop */
    lua_pushboolean(L, 0);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, "the tree stopped, but ");
    if (e->forced_in_stop) {
      lua_pushfstring(L, "%d node(s) were closed at their shutdown deadline "
                      "(the first: %s)", (int)e->forced_in_stop,
                      e->first_forced->s);
      luaL_addvalue(&b);
    }
    if (e->forced_in_stop && e->killed_in_stop) luaL_addstring(&b, "; ");
    if (e->killed_in_stop) {
      lua_pushfstring(L, "%d process(es) had to be killed with SIGKILL (the "
                      "first: %s)", (int)e->killed_in_stop,
                      e->first_killed ? e->first_killed->s : "?");
      luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    return 2;
  }
  lua_pushboolean(L, 1);
  return 1;
}

static const char unsettled[] =
    "the tree does not settle: more than %d resumes without time moving "
    "(a node restarting with no delay forever?)";

/* e:settle(); from inside the tree it does nothing: the tree goes on
   settling when the current step returns. */
static int l_settle(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  if (arbor_engine_settle(e) < 0)
    return luaL_error(L, unsettled, (int)e->settle_limit);
  return 0;
}

static int l_advance(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  double dt = luaL_checknumber(L, 2);
  if (!(dt >= 0) || !isfinite(dt))
    return luaL_error(L, "advance(seconds): want a finite number >= 0");
  if (!e->virtual_clock) return luaL_error(L, "advance: this engine is real");
  check_outside(L, e, "advance");
  if (arbor_engine_advance(e, dt) < 0)
    return luaL_error(L, unsettled, (int)e->settle_limit);
  return 0;
}

/* e:next_timer() -> due time of the earliest timer, or nil */
static int l_next_timer(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  arbor_timer *t = arbor_timers_peek(&e->timers);
  if (!t) return lua_pushnil(L), 1;
  lua_pushnumber(L, t->due);
  return 1;
}

static int l_now(lua_State *L) {
  lua_pushnumber(L, arbor_engine_now(check_engine(L, 1)));
  return 1;
}

static int l_finished(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  lua_pushboolean(L, arbor_engine_finished(e));
  lua_pushboolean(L, e->gave_up);
  if (e->gave_up_reason)
    lua_pushstring(L, e->gave_up_reason->s);
  else
    lua_pushnil(L);
  return 3;
}

static int l_stop(lua_State *L) {
  arbor_engine_stop(check_engine(L, 1));
  return 0;
}

static int l_random(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  lua_pushnumber(L, (double)(arbor_engine_random(e) >> 11) * 0x1.0p-53);
  return 1;
}

/* ---- nodes ---------------------------------------------------------- */

/* The node at DN arg idx, or raises "no node". */
static pnode *check_node(lua_State *L, arbor_engine *e, int idx) {
  size_t len;
  const char *dn = luaL_checklstring(L, idx, &len);
  arbor_node *n = arbor_tree_find(&e->tree, dn, len);
  if (!n) luaL_error(L, "no node %s", arbor_push_cut(L, dn, len));
  return (pnode *)n;
}

static void setstr(lua_State *L, const char *k, arbor_str *s) {
  if (s) {
    lua_pushlstring(L, s->s, s->len);
    lua_setfield(L, -2, k);
  }
}

static void setnum(lua_State *L, const char *k, double v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}

static void setint(lua_State *L, const char *k, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, k);
}

/* The fields of a node view (T13a); tree snapshots have the first
   F_SUMMARY of them. Each is read on its own (push_field), so a view that
   reads one field costs that field only. */
enum {
  F_DN, F_NAME, F_STATE, F_RESTARTS, F_INCARNATION, F_ERROR, F_BLOCKED,
  F_LIFECYCLE, F_SIDECAR, F_COORDINATOR, F_GATED, F_UPTIME,
  F_SUMMARY,
  F_CONSECUTIVE = F_SUMMARY, F_TRACEBACK, F_RETIRED, F_RUNNING, F_CANCELED,
  F_HELD, F_FORCED, F_PENDING, F_RESTART_AT, F_STARTED, F_EXITED, F_SHUTDOWN,
  F_LIVE, F_DECISION, F_WAITING_FOR, F_WAITING_MEMBER, F_STRATEGY, F_ORDERED,
  F_SIGNIFICANT, F_AUTO_SHUTDOWN, F_STOPPING, F_AUTO_DONE, F_PARENT,
  F_CHILDREN,
  F_COUNT
};

static const char *const field_names[F_COUNT] = {
    "dn", "name", "state", "restarts", "incarnation", "error", "blocked",
    "lifecycle", "sidecar", "coordinator", "gated", "uptime", "consecutive",
    "traceback", "retired", "running", "canceled", "held", "forced",
    "pending", "restart_at", "started", "exited", "shutdown", "live",
    "decision", "waiting_for", "waiting_member", "strategy", "ordered",
    "significant", "auto_shutdown", "stopping", "auto_done", "parent",
    "children"};

/* The running descendant an exited (or stopping) node waits for, or NULL
   when none runs. */
static arbor_node *running_descendant(arbor_node *n) {
  if (n->live <= (arbor_node_running(n) ? 1u : 0u)) return NULL;
  arbor_node *d = n;
  do {
    arbor_node *c = d->first;
    while (c && c->live == 0) c = c->next;
    if (!c) break;
    d = c;
  } while (!arbor_node_running(d));
  return d;
}

/* [-0, +1 or +0, m] pushes field f of pn and returns 1, or returns 0 when
   pn has no such field now (no error, not started, no coordinator...). */
static int push_field(lua_State *L, arbor_engine *e, pnode *pn, int f) {
  static const char *const decisions[] = {NULL, "restart", "stop", "escalate"};
  static const char *const strategies[] = {"one_for_all", "rest_for_one",
                                           "one_for_one", "one_for_all"};
  static const char *const autos[] = {NULL, "any_significant",
                                      "all_significant", NULL};
  arbor_node *n = &pn->n;
  int running = arbor_node_running(n);
  const char *s = NULL;
  switch (f) {
  case F_DN: arbor_push_dn(L, n); return 1;
  case F_NAME: lua_pushlstring(L, n->name, n->namelen); return 1;
  case F_STATE: s = arbor_state_name((arbor_state)n->state); break;
  case F_RESTARTS: lua_pushinteger(L, pn->restarts); return 1;
  case F_INCARNATION: lua_pushinteger(L, (lua_Integer)n->incarnation); return 1;
  case F_ERROR:
    if (!pn->error) return 0;
    lua_pushlstring(L, pn->error->s, pn->error->len);
    return 1;
  case F_BLOCKED: lua_pushboolean(L, arbor_lc_blocked(pn)); return 1;
  case F_LIFECYCLE: s = arbor_lc_name(pn->lc); break;
  case F_SIDECAR: lua_pushboolean(L, (pn->lc & ARBOR_LC_SIDECAR) != 0); return 1;
  case F_COORDINATOR: s = arbor_lc_state(pn); break;
  case F_GATED:
    if (!arbor_lc_state(pn)) return 0;
    lua_pushboolean(L, arbor_lc_gated(pn));
    return 1;
  case F_UPTIME:
    if (n->incarnation == 0) return 0;
    lua_pushnumber(L, (running ? arbor_engine_now(e) : pn->exited) - pn->started);
    return 1;
  case F_CONSECUTIVE: lua_pushinteger(L, pn->consecutive); return 1;
  case F_TRACEBACK:
    if (!pn->trace) return 0;
    lua_pushlstring(L, pn->trace->s, pn->trace->len);
    return 1;
  case F_RETIRED: lua_pushboolean(L, (n->flags & ARBOR_F_RETIRED) != 0); return 1;
  case F_RUNNING: lua_pushboolean(L, running); return 1;
  case F_CANCELED: lua_pushboolean(L, arbor_node_canceled(n)); return 1;
  case F_HELD: lua_pushboolean(L, (n->flags & ARBOR_F_HELD) != 0); return 1;
  case F_FORCED: lua_pushboolean(L, (n->flags & ARBOR_F_FORCED) != 0); return 1;
  case F_PENDING: lua_pushboolean(L, (n->flags & ARBOR_F_PENDING) != 0); return 1;
  case F_RESTART_AT:
    if (!arbor_timer_armed(&pn->wake) || pn->wake.kind != TIMER_RESTART)
      return 0;
    lua_pushnumber(L, pn->wake.due);
    return 1;
  case F_STARTED:
    if (n->incarnation == 0) return 0;
    lua_pushnumber(L, pn->started);
    return 1;
  case F_EXITED:
    if (running || n->incarnation == 0) return 0;
    lua_pushnumber(L, pn->exited);
    return 1;
  case F_SHUTDOWN: lua_pushnumber(L, pn->shutdown); return 1;
  case F_LIVE: lua_pushinteger(L, n->live); return 1;
  case F_DECISION: s = decisions[pn->decision]; break;
  case F_WAITING_FOR: { /* what explain needs (issue 4) */
    arbor_node *d = running_descendant(n);
    if (!d) return 0;
    arbor_push_dn(L, d);
    return 1;
  }
  case F_WAITING_MEMBER: {
    pnode *p = (n->flags & ARBOR_F_PENDING) && !arbor_timer_armed(&pn->wake)
                   ? arbor_engine_waits_for(pn)
                   : NULL;
    if (!p) return 0;
    arbor_push_dn(L, &p->n);
    return 1;
  }
  case F_STRATEGY:
    if (pn->gflags & GF_MEMBER) s = strategies[pn->gflags & GF_STRATEGY];
    break;
  case F_ORDERED:
    if (!(pn->gflags & GF_MEMBER)) return 0;
    lua_pushboolean(L, (pn->gflags & GF_ORDERED) != 0);
    return 1;
  case F_SIGNIFICANT:
    lua_pushboolean(L, (pn->gflags & GF_SIGNIFICANT) != 0);
    return 1;
  case F_AUTO_SHUTDOWN: s = autos[(pn->gflags & GF_AUTO) >> 4]; break;
  case F_STOPPING:
    lua_pushboolean(L, running && arbor_node_canceled(n));
    return 1;
  case F_AUTO_DONE:
    if (!(pn->pflags & PN_AUTODONE)) return 0;
    lua_pushboolean(L, 1);
    return 1;
  case F_PARENT:
    if (!n->parent) return 0;
    arbor_push_dn(L, n->parent);
    return 1;
  case F_CHILDREN: {
    lua_createtable(L, (int)n->nchildren, 0);
    lua_Integer i = 1;
    for (arbor_node *c = n->first; c; c = c->next) {
      lua_pushlstring(L, c->name, c->namelen);
      lua_rawseti(L, -2, i++);
    }
    return 1;
  }
  }
  if (!s) return 0;
  lua_pushstring(L, s);
  return 1;
}

/* [-0, +1, m] a table of pn's fields up to (not including) field `upto`.
   The field names are the Lua strings at [1..F_COUNT] of upvalue 1. */
static void push_fields(lua_State *L, arbor_engine *e, pnode *pn, int upto) {
  lua_createtable(L, 0, upto);
  for (int f = 0; f < upto; f++) {
    lua_rawgeti(L, lua_upvalueindex(1), f + 1);
    if (push_field(L, e, pn, f))
      lua_rawset(L, -3);
    else
      lua_pop(L, 1);
  }
}

/* e:node(dn [, field]) -> the fields of T13a, or only that field's value
   (nil when the node has no such field); nil, "no node <dn>" when there is
   no node at dn. Upvalue 1 maps field names to their index + 1. */
static int l_node(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  size_t len;
  const char *dn = luaL_checklstring(L, 2, &len);
  arbor_node *n = arbor_tree_find(&e->tree, dn, len);
  if (!n) {
    lua_pushnil(L);
    lua_pushfstring(L, "no node %s", arbor_push_cut(L, dn, len));
    lua_remove(L, -2);
    return 2;
  }
  if (lua_isnoneornil(L, 3)) {
    push_fields(L, e, (pnode *)n, F_COUNT);
    return 1;
  }
  lua_settop(L, 3);
  if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNUMBER ||
      !push_field(L, e, (pnode *)n, (int)lua_tointeger(L, -1) - 1))
    lua_pushnil(L);
  return 1;
}

/* e:tree([dn]) -> nested {dn, name, state, restarts, error, incarnation,
   children = {...}}; iterative so deep trees do not overflow the C stack.
   Upvalue 1 is l_node's (the field names). */
static int l_tree(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  arbor_node *top = lua_isnoneornil(L, 2) ? e->tree.root
                                          : &check_node(L, e, 2)->n;
  lua_settop(L, 2);
  /* Stack holds the chain of "children" tables of the open ancestors. */
  arbor_node *n = top;
  lua_newtable(L); /* holder: result at [1] */
  for (;;) {
    luaL_checkstack(L, 4, "tree too deep");
    push_fields(L, e, (pnode *)n, F_SUMMARY);
    lua_createtable(L, (int)n->nchildren, 0);
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, "children");
    /* stack: ... parent_children, node, node_children */
    lua_pushvalue(L, -2);
    lua_rawseti(L, -4, luaL_len(L, -4) + 1);
    lua_remove(L, -2);
    /* stack: ... parent_children, node_children */
    if (n->first) {
      n = n->first;
      continue;
    }
    lua_pop(L, 1);
    while (n != top && !n->next) {
      n = n->parent;
      lua_pop(L, 1);
    }
    if (n == top) break;
    n = n->next;
  }
  lua_rawgeti(L, -1, 1);
  return 1;
}

/* [-0, +1, m] one event as a table. */
void arbor__push_dn(arbor_engine *e, lua_State *L, pnode *pn) {
  if (e->dn_pn == pn) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, e->dn_ref);
    return;
  }
  arbor_push_dn(L, &pn->n);
  lua_pushvalue(L, -1);
  if (e->dn_ref == LUA_NOREF)
    e->dn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  else
    lua_rawseti(L, LUA_REGISTRYINDEX, e->dn_ref);
  e->dn_pn = pn;
}

void arbor_push_event_table(arbor_engine *e, lua_State *L,
                            const arbor_event *ev) {
  static const char *const kinds[] = {"state", "policy", "coordinator"};
  lua_createtable(L, 0, 8);
  setint(L, "seq", (lua_Integer)ev->seq);
  setnum(L, "time", ev->time);
  arbor__push_dn(e, L, (pnode *)ev->node);
  lua_setfield(L, -2, "dn");
  setint(L, "incarnation", (lua_Integer)ev->incarnation);
  lua_pushstring(L, kinds[ev->kind]);
  lua_setfield(L, -2, "kind");
  if (ev->kind == ARBOR_EV_STATE) {
    lua_pushstring(L, arbor_state_name((arbor_state)ev->from));
    lua_setfield(L, -2, "from");
    lua_pushstring(L, arbor_state_name((arbor_state)ev->to));
    lua_setfield(L, -2, "to");
  } else if (ev->kind == ARBOR_EV_COORDINATOR) {
    lua_pushstring(L, arbor_gate_state_name((arbor_gate_state)ev->from));
    lua_setfield(L, -2, "from");
    lua_pushstring(L, arbor_gate_state_name((arbor_gate_state)ev->to));
    lua_setfield(L, -2, "to");
  }
  if (ev->reason) {
    setstr(L, "reason", ev->reason);
  } else if (ev->delay == 0) { /* the common case, without snprintf */
    lua_pushliteral(L, "restart in 0s");
    lua_setfield(L, -2, "reason");
    setnum(L, "delay", ev->delay);
  } else if (ev->delay > 0) {
    char r[64];
    snprintf(r, sizeof r, "restart in %.6gs", ev->delay);
    lua_pushstring(L, r);
    lua_setfield(L, -2, "reason");
    setnum(L, "delay", ev->delay);
  }
}

void arbor_push_gap_table(lua_State *L, uint64_t first, uint64_t last,
                          double time) {
  lua_createtable(L, 0, 5);
  lua_pushliteral(L, "gap");
  lua_setfield(L, -2, "kind");
  setint(L, "missed", (lua_Integer)(last - first + 1));
  setint(L, "first", (lua_Integer)first);
  setint(L, "last", (lua_Integer)last);
  setnum(L, "time", time);
}

/* e:events([n [, after_seq]]) -> the last n events (all held by default),
   oldest first, optionally only those with seq > after_seq. */
static int l_events(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  lua_Integer n = luaL_optinteger(L, 2, (lua_Integer)e->ring.len);
  lua_Integer after = luaL_optinteger(L, 3, 0);
  uint64_t last = e->ring.next_seq - 1;
  uint64_t first = arbor_ring_first(&e->ring);
  if (n < 0) n = 0;
  if ((uint64_t)n < e->ring.len) first = last - (uint64_t)n + 1;
  if ((uint64_t)after + 1 > first) first = (uint64_t)after + 1;
  lua_newtable(L);
  lua_Integer i = 1;
  for (uint64_t s = first; s <= last; s++) {
    const arbor_event *ev = arbor_ring_get(&e->ring, s);
    if (!ev) continue;
    arbor_push_event_table(e, L, ev);
    lua_rawseti(L, -2, i++);
  }
  return 1;
}

/* e:subscribe(fn) -> id: fn gets the events from the next one on. */
static int l_subscribe(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_settop(L, 2);
  int ref = luaL_ref(L, LUA_REGISTRYINDEX);
  uint64_t id = arbor__subscribe(e, ref);
  if (!id) {
    luaL_unref(L, LUA_REGISTRYINDEX, ref);
    return luaL_error(L, "subscribe: out of memory");
  }
  lua_pushinteger(L, (lua_Integer)id);
  return 1;
}

/* e:unsubscribe(id): a no-op for an id already removed. */
static int l_unsubscribe(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  lua_Integer id = luaL_checkinteger(L, 2);
  if (id >= 1) arbor__unsubscribe(e, (uint64_t)id);
  return 0;
}

static int l_restart(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  pnode *pn = check_node(L, e, 2);
  const char *err = NULL;
  if (arbor_engine_restart(e, pn, &err) < 0)
    return luaL_error(L, "restart %s: %s", lua_tostring(L, 2), err);
  return 0;
}

static int l_cancel(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  arbor_engine_cancel(e, check_node(L, e, 2));
  return 0;
}

static int l_hold(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  arbor_engine_hold(e, check_node(L, e, 2));
  return 0;
}

/* e:swap(dn, fn, restart) (T13) */
static int l_swap(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  pnode *pn = check_node(L, e, 2);
  if (!lua_isfunction(L, 3))
    return luaL_error(L, "swap %s: the runnable must be a function, got %s",
                      lua_tostring(L, 2), luaL_typename(L, 3));
  int ref = arbor_engine_ref_fn(e, L, 3);
  arbor_engine_unref_fn(e, pn->fn_ref);
  pn->fn_ref = ref;
  arbor_str *r = arbor_str_lit("runnable swapped");
  arbor_engine_event(e, pn, ARBOR_EV_POLICY, r);
  arbor_str_unref(r);
  if (lua_toboolean(L, 4)) {
    const char *err = NULL;
    if (arbor_engine_restart(e, pn, &err) < 0)
      return luaL_error(L, "swap %s: %s", lua_tostring(L, 2), err);
  }
  return 0;
}

/* e:set_policy(dn, p) (T13); nil restores the default. */
static int l_set_policy(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  pnode *pn = check_node(L, e, 2);
  if (!lua_isnoneornil(L, 3) && !lua_isfunction(L, 3))
    return luaL_error(L, "set_policy %s: the policy must be a function, got %s",
                      lua_tostring(L, 2), luaL_typename(L, 3));
  int ref = lua_isnoneornil(L, 3) ? LUA_NOREF : arbor_engine_ref_fn(e, L, 3);
  arbor_engine_unref_fn(e, pn->policy_ref);
  pn->policy_ref = ref;
  arbor_str *r = arbor_str_lit("policy replaced");
  arbor_engine_event(e, pn, ARBOR_EV_POLICY, r);
  arbor_str_unref(r);
  return 0;
}

/* e:fail(dn, err) */
static int l_fail(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  pnode *pn = check_node(L, e, 2);
  luaL_checkany(L, 3);
  lua_pushvalue(L, 3);
  lua_xmove(L, e->L, 1);
  if (arbor_engine_fail(e, pn) < 0)
    return luaL_error(L, "fail %s: the node is not running (state %s)",
                      lua_tostring(L, 2),
                      arbor_state_name((arbor_state)pn->n.state));
  return 0;
}

/* e:logs(dn [, n]) -> { {time=, line=}, ... } oldest first */
static int l_logs(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  pnode *pn = check_node(L, e, 2);
  lua_Integer want = luaL_optinteger(L, 3, ARBOR_LOG_LINES);
  lua_newtable(L);
  arbor_logs *lg = pn->logs;
  if (!lg) return 1;
  unsigned skip = want < (lua_Integer)lg->len ? lg->len - (unsigned)want : 0;
  lua_Integer k = 1;
  for (unsigned i = skip; i < lg->len; i++) {
    unsigned idx = (lg->start + i) % ARBOR_LOG_LINES;
    lua_createtable(L, 0, 2);
    setnum(L, "time", lg->time[idx]);
    setstr(L, "line", lg->line[idx]);
    lua_rawseti(L, -2, k++);
  }
  return 1;
}

static void stuck_one(pnode *pn, void *ud) {
  lua_State *L = ud;
  lua_createtable(L, 0, 3);
  arbor_push_dn(L, &pn->n);
  lua_setfield(L, -2, "dn");
  setnum(L, "deadline", pn->stop->deadline.due);
  setint(L, "incarnation", (lua_Integer)pn->n.incarnation);
  lua_rawseti(L, -2, luaL_len(L, -2) + 1);
}

static int l_stuck(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  lua_newtable(L);
  arbor_engine_stuck(e, stuck_one, L);
  return 1;
}

static int l_stats(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  lua_createtable(L, 0, 13);
  setint(L, "wakeups", (lua_Integer)e->wakeups);
  setint(L, "resumes", (lua_Integer)e->resumes);
  setint(L, "restarts", (lua_Integer)e->restarts);
  setint(L, "policy_calls", (lua_Integer)e->policy_calls);
  setint(L, "lifecycle_evaluations", (lua_Integer)e->lc_evals);
  setint(L, "lifecycle_moves", (lua_Integer)e->lc_moves);
  setint(L, "lifecycle_changes", (lua_Integer)e->lc_changes);
  setint(L, "tree_steps", (lua_Integer)e->tree.steps);
  setint(L, "nodes", (lua_Integer)e->tree.nnodes);
  setint(L, "live", (lua_Integer)e->tree.running);
  setint(L, "events", (lua_Integer)e->ring.len);
  setint(L, "event_bytes", (lua_Integer)e->ring.bytes);
  setint(L, "events_missed", (lua_Integer)e->events_missed);
  setint(L, "subscribers", (lua_Integer)e->nsubs);
  return 1;
}

static const luaL_Reg engine_methods[] = {
    {"start", l_start},
    {"run", l_run},
    {"settle", l_settle},
    {"advance", l_advance},
    {"next_timer", l_next_timer},
    {"now", l_now},
    {"finished", l_finished},
    {"stop", l_stop},
    {"random", l_random},
    {"events", l_events},
    {"subscribe", l_subscribe},
    {"unsubscribe", l_unsubscribe},
    {"restart", l_restart},
    {"cancel", l_cancel},
    {"hold", l_hold},
    {"swap", l_swap},
    {"set_policy", l_set_policy},
    {"fail", l_fail},
    {"logs", l_logs},
    {"stuck", l_stuck},
    {"stats", l_stats},
    {"set_default_policy", l_set_default_policy},
    {"set_log", l_set_log},
    {"close", l_engine_gc},
    {NULL, NULL},
};

/* [-0, +0, m] registers the engine type and core.engine / core.current in
   the table on top. */
void arbor_open_engine(lua_State *L) {
  lua_newtable(L);
  lua_newtable(L);
  lua_pushliteral(L, "v");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &engines_key);
  luaL_newmetatable(L, ARBOR_ENGINE_MT);
  luaL_newlib(L, engine_methods);
  /* the field names of views, both ways: index + 1 <-> name */
  lua_createtable(L, F_COUNT, F_COUNT);
  for (int f = 0; f < F_COUNT; f++) {
    lua_pushstring(L, field_names[f]);
    lua_pushvalue(L, -1);
    lua_rawseti(L, -3, f + 1);
    lua_pushinteger(L, f + 1);
    lua_rawset(L, -3);
  }
  lua_pushvalue(L, -1);
  lua_pushcclosure(L, l_node, 1);
  lua_setfield(L, -3, "node");
  lua_pushcclosure(L, l_tree, 1);
  lua_setfield(L, -2, "tree");
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, l_engine_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  lua_pushcfunction(L, l_engine_new);
  lua_setfield(L, -2, "engine");
  lua_pushcfunction(L, l_current);
  lua_setfield(L, -2, "current");
}

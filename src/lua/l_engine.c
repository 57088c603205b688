/* l_engine.c: the engine as a Lua object: start, run, settle, advance,
 * subscriptions (T14), node operations (T13), logs and statistics. Node
 * views, tree snapshots and the event history are l_view.c's methods. The
 * public module (lua/arbor/init.lua) and the harness
 * (lua/arbor/testing.lua) are written on top of it.
 */
#include <ctype.h>
#include <errno.h>
#include <lauxlib.h>
#include <math.h>
#include <signal.h>
#include <string.h>

#include "engine/internal.h"
#include "lua/l_arbor.h"
#include "proc/nodes.h"

typedef struct lengine {
  arbor_engine *e;
  int checking; /* `arbor check`: builds the tree, starts no process */
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
   runaway=, check=}. check (`arbor check`) needs the virtual clock, whose
   engines start no operating-system process (core.spawn refuses): a
   process node sees core.checking() and only checks what it would run. */
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
  lua_getfield(L, 1, "check");
  int checking = lua_toboolean(L, -1);
  if (checking && !virt)
    return luaL_error(L, "engine: check mode runs on the virtual clock "
                         "(it starts no process)");
  lua_getfield(L, 1, "runaway");
  double runaway = luaL_optnumber(L, -1, 10.0);
  if (!(runaway >= 0) || !isfinite(runaway))
    return luaL_error(L, "engine: runaway must be a finite number >= 0");
  lua_settop(L, 1);
  lengine *le = lua_newuserdatauv(L, sizeof *le, 0);
  le->e = NULL;
  le->checking = checking;
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

/* core.checking(): true when the engine running the calling code is in
   check mode (`arbor check`): a process node checks its program and
   options, starts nothing and signals healthy. */
static int l_checking(lua_State *L) {
  arbor_engine *e = arbor_engine_current();
  int on = 0;
  if (e) {
    push_engine_object(L, e);
    lengine *le = luaL_testudata(L, -1, ARBOR_ENGINE_MT);
    on = le && le->checking;
  }
  lua_pushboolean(L, on);
  return 1;
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

/* e:start(fn, policy_or_nil, shutdown, auto_shutdown, stop) */
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
  if (!lua_isnoneornil(L, 6)) { /* how the root's children stop */
    lua_pushliteral(L, "stop");
    lua_pushvalue(L, 6);
    arbor_strategy_opt(L, "stop", &o, root, "start");
    lua_pop(L, 2);
  }
  int policy = lua_isnoneornil(L, 3) ? LUA_NOREF : arbor_engine_ref_fn(e, L, 3);
  root->gflags = (uint8_t)o.gflags;
  if (o.parallel) root->pflags |= PN_PARALLEL;
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

static void setnum(lua_State *L, const char *k, double v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}

static void setint(lua_State *L, const char *k, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, k);
}

/* core.runnable(engine, dn) -> the function the node's next start runs
   (reload matches it against a module's fields). */
static int l_runnable(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  lua_rawgeti(L, LUA_REGISTRYINDEX, arbor_check_node(L, e, 2)->fn_ref);
  return 1;
}

/* e:subscribe(fn) -> id: fn gets the events from the next one on. */
static int l_subscribe(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_settop(L, 2);
  int ref = luaL_ref(L, LUA_REGISTRYINDEX);
  uint64_t id = arbor__deliver_subscribe(e, ref);
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
  if (id >= 1) arbor__deliver_unsubscribe(e, (uint64_t)id);
  return 0;
}

static int l_restart(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  pnode *pn = arbor_check_node(L, e, 2);
  const char *err = NULL;
  if (arbor_engine_restart(e, pn, &err) < 0)
    return luaL_error(L, "restart %s: %s", lua_tostring(L, 2), err);
  return 0;
}

static int l_cancel(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  arbor_engine_cancel(e, arbor_check_node(L, e, 2));
  return 0;
}

static int l_hold(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  arbor_engine_hold(e, arbor_check_node(L, e, 2));
  return 0;
}

/* The signal given at idx: a name ("HUP", "SIGHUP", "hup") or a number
   (1 to SIGRTMAX, also as a string); raises otherwise, naming what. */
static int check_signal(lua_State *L, int idx, const char *what) {
  if (lua_type(L, idx) == LUA_TNUMBER || lua_type(L, idx) == LUA_TSTRING) {
    int isnum;
    lua_Integer n = lua_tointegerx(L, idx, &isnum);
    if (isnum) {
      if (n >= 1 && n <= SIGRTMAX) return (int)n;
    } else if (lua_type(L, idx) == LUA_TSTRING) {
      size_t len;
      const char *s = lua_tolstring(L, idx, &len);
      char up[16];
      if (len < sizeof up) {
        for (size_t i = 0; i <= len; i++)
          up[i] = (char)toupper((unsigned char)s[i]);
        int sig = arbor_signal_number(up);
        if (sig > 0) return sig;
      }
    }
  }
  size_t len;
  const char *given = luaL_tolstring(L, idx, &len);
  arbor_push_cut(L, given, len); /* a long string is not echoed whole */
  return luaL_error(L,
                    "%s: unknown signal '%s' (want a name like HUP or "
                    "SIGUSR1, or a number)",
                    what, lua_tostring(L, -1));
}

/* e:kill(dn, sig) -> the number of process groups signaled and the
   signal's name ("SIGHUP"), or nil,
   "ESRCH: <dn> runs no process", "ESRCH": sends sig to the process group
   of each process of the node's running incarnation (its main process and
   what it started, as `kill -SIG -PGID`). */
static int l_kill(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  pnode *pn = arbor_check_node(L, e, 2);
  const char *dn = lua_tostring(L, 2);
  int sig = check_signal(L, 3, dn);
  arbor_proc *ps[64];
  size_t n = 0;
  if (pn->pflags & PN_PROCS) n = arbor_proc_of_node(pn, ps, 64);
  if (n > 64) n = 64;
  lua_Integer sent = 0;
  int err = 0;
  for (size_t i = 0; i < n; i++) {
    int rc = arbor_proc_kill(ps[i], sig, 1);
    if (rc == 0)
      sent++;
    else if (rc < 0 && rc != -ESRCH)
      err = rc;
  }
  if (sent > 0) {
    const char *name = arbor_signal_name(sig);
    lua_pushinteger(L, sent);
    if (name)
      lua_pushstring(L, name);
    else
      lua_pushfstring(L, "signal %d", sig);
    return 2;
  }
  if (err) return arbor_push_errno(L, err, "cannot signal %s", dn);
  return arbor_push_fail(L, "ESRCH", "%s runs no process to signal", dn);
}

/* e:fail(dn, err) */
static int l_fail(lua_State *L) {
  arbor_engine *e = check_engine(L, 1);
  pnode *pn = arbor_check_node(L, e, 2);
  luaL_checkany(L, 3);
  lua_pushvalue(L, 3);
  lua_xmove(L, e->L, 1);
  if (arbor_engine_fail(e, pn) < 0)
    return luaL_error(L, "fail %s: the node is not running (state %s)",
                      lua_tostring(L, 2),
                      arbor_state_name((arbor_state)pn->n.state));
  return 0;
}

/* e:logs is l_log.c's. */

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
    {"subscribe", l_subscribe},
    {"unsubscribe", l_unsubscribe},
    {"restart", l_restart},
    {"cancel", l_cancel},
    {"hold", l_hold},
    {"kill", l_kill},
    {"fail", l_fail},
    {"stuck", l_stuck},
    {"stats", l_stats},
    {"set_default_policy", l_set_default_policy},
    {"set_log", l_set_log},
    {"close", l_engine_gc},
    {NULL, NULL},
};

/* [-0, +0, m] registers the engine type and core.engine, core.current and
   core.runnable in the table on top. */
void arbor_open_engine(lua_State *L) {
  lua_newtable(L);
  lua_newtable(L);
  lua_pushliteral(L, "v");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &engines_key);
  luaL_newmetatable(L, ARBOR_ENGINE_MT);
  luaL_newlib(L, engine_methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, l_engine_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  lua_pushcfunction(L, l_engine_new);
  lua_setfield(L, -2, "engine");
  lua_pushcfunction(L, l_current);
  lua_setfield(L, -2, "current");
  lua_pushcfunction(L, l_checking);
  lua_setfield(L, -2, "checking");
  lua_pushcfunction(L, l_runnable);
  lua_setfield(L, -2, "runnable");
}

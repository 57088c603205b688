/* l_reload.c: reload's bindings (docs/restore.md). A reload gives a node
 * its new runnable and starts a new incarnation of it that adopts its
 * children (engine/ops.c); its ctx:run and ctx:group calls then meet the
 * running children by name (l_ctx.c), and what the old and the new script
 * gave is compared here, through arbor.definition.
 */
#define _GNU_SOURCE /* SIGEV_THREAD_ID */
#include <lauxlib.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "engine/internal.h"
#include "engine/watchdog.h"
#include "lua/l_arbor.h"

/* Pushes arbor.definition's function `name`. */
static void push_definition_fn(lua_State *L, const char *name) {
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  if (lua_getfield(L, -1, "arbor.definition") != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "arbor.definition");
    lua_call(L, 1, 1);
  }
  lua_getfield(L, -1, name);
  lua_replace(L, -3);
  lua_pop(L, 1);
}

/* Pushes c's definition as its parent gave it at its creation: the
   script's runnable (not a runtime swap) and the options (nil: none). */
static void push_old(lua_State *L, pnode *c) {
  arbor_override_push_script_fn(L, c);
  if (c->opts_ref == LUA_NOREF)
    lua_pushnil(L);
  else
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->opts_ref);
}

/* What changed in the child arbor_reload_changed found changed last ("its
   argv changed"), for the event of arbor_reload_restart, which follows it
   for the same child. */
static arbor_str *changed_why;

int arbor_reload_changed(lua_State *L, pnode *c, int fn_idx, int opts_idx) {
  fn_idx = lua_absindex(L, fn_idx);
  push_definition_fn(L, "why");
  push_old(L, c);
  lua_pushvalue(L, fn_idx);
  if (opts_idx)
    lua_pushvalue(L, opts_idx);
  else
    lua_pushnil(L);
  lua_call(L, 4, 1);
  int changed = lua_isstring(L, -1);
  arbor_str_unref(changed_why);
  changed_why = NULL;
  if (changed) {
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    changed_why = arbor_str_new(s, len);
  }
  lua_pop(L, 1);
  return changed;
}

void arbor_reload_filter(lua_State *L, pnode *c, int fn_idx, int opts_idx) {
  arbor_engine *e = pn_engine(c);
  if (e->node_filter_ref == LUA_NOREF) return;
  fn_idx = lua_absindex(L, fn_idx);
  lua_rawgeti(L, LUA_REGISTRYINDEX, e->node_filter_ref);
  arbor_push_dn(L, &c->n);
  lua_pushvalue(L, fn_idx);
  if (opts_idx)
    lua_pushvalue(L, opts_idx);
  else
    lua_pushnil(L);
  lua_call(L, 3, 1);
  if (lua_isfunction(L, -1)) arbor_override_swap(L, c, -1);
  lua_pop(L, 1);
}

/* 1 when the reload's plan says c's subtree restarts whole (its new
   children are ordered by lifecycle gates, or a group of them changed). */
static int restarts_whole(lua_State *L, pnode *c) {
  arbor_engine *e = pn_engine(c);
  if (e->reload_plan_ref == LUA_NOREF) return 0;
  lua_rawgeti(L, LUA_REGISTRYINDEX, e->reload_plan_ref);
  arbor_push_dn(L, &c->n);
  lua_rawget(L, -2);
  int whole = lua_isstring(L, -1) && strcmp(lua_tostring(L, -1), "restart") == 0;
  lua_pop(L, 2);
  return whole;
}

void arbor_reload_restart(lua_State *L, pnode *c) {
  arbor_engine *e = pn_engine(c);
  const char *err = NULL;
  c->adopt = 0; /* claimed */
  if (c->n.flags & ARBOR_F_RETIRED) { /* a job its coordinator finished */
    static arbor_str why = ARBOR_STR_STATIC(
        "changed: finished in this incarnation of its parent, not run "
        "again (the new definition runs at the parent's next restart)");
    arbor_engine_event(e, c, ARBOR_EV_RELOAD, &why);
    return;
  }
  int r = restarts_whole(L, c) ? arbor_engine_restart(e, c, &err)
                               : arbor_engine_reload(e, c, &err);
  if (r == 0) {
    arbor_str *why = arbor_str_fmt("restarted: %s",
                                   changed_why ? changed_why->s
                                               : "definition changed");
    arbor_engine_event(e, c, ARBOR_EV_RELOAD, why);
    arbor_str_unref(why);
  } else if (r < 0) {
    arbor_str *why = arbor_str_fmt("not restarted: %s", err);
    arbor_engine_event(e, c, ARBOR_EV_RELOAD, why);
    arbor_str_unref(why);
  }
}

/* e:reload(dn, fn, policy, whole) -> true (its children are adopted) |
   false (restarted) | nil, err: dn's runnable and policy are now fn and
   policy (nil: the default), and a new incarnation of it adopts its
   children; whole: it restarts with its subtree instead. */
static int l_reload(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  pnode *pn = arbor_check_node(L, e, 2);
  luaL_checktype(L, 3, LUA_TFUNCTION);
  if (!lua_isnoneornil(L, 4)) luaL_checktype(L, 4, LUA_TFUNCTION);
  int fn = arbor_engine_ref_fn(e, L, 3);
  int policy = lua_isnoneornil(L, 4) ? LUA_NOREF : arbor_engine_ref_fn(e, L, 4);
  arbor_engine_unref_fn(e, pn->fn_ref);
  arbor_engine_unref_fn(e, pn->policy_ref);
  pn->fn_ref = fn;
  pn->policy_ref = policy;
  arbor_override_spawn(L, pn, 3, lua_isnoneornil(L, 4) ? 0 : 4);
  const char *err = NULL;
  int r = lua_toboolean(L, 5) ? arbor_engine_restart(e, pn, &err)
                              : arbor_engine_reload(e, pn, &err);
  if (r < 0) {
    lua_pushnil(L);
    lua_pushfstring(L, "reload %s: %s", lua_tostring(L, 2), err);
    return 2;
  }
  lua_pushboolean(L, r);
  return 1;
}

/* e:definition(dn) -> {fn, opts, member, finished} | nil: what dn's
   parent gave it at its creation (the script's runnable, not a runtime
   swap), whether it is a member of a group and whether its parent's
   coordinator finished with it (a prestart or poststart job that ran). */
static int l_definition(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  arbor_node *n = arbor_tree_find(&e->tree, luaL_checkstring(L, 2),
                                  lua_rawlen(L, 2));
  if (!n) return 0;
  pnode *pn = (pnode *)n;
  lua_createtable(L, 0, 4);
  push_old(L, pn);
  lua_setfield(L, -3, "opts");
  lua_setfield(L, -2, "fn");
  lua_pushboolean(L, (pn->gflags & GF_MEMBER) != 0);
  lua_setfield(L, -2, "member");
  lua_pushboolean(L, (n->flags & ARBOR_F_RETIRED) != 0);
  lua_setfield(L, -2, "finished");
  return 1;
}

/* Sets *ref to the value at 2 of type want, or to none (nil). */
static void set_ref(lua_State *L, int *ref, int want) {
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, want);
  luaL_unref(L, LUA_REGISTRYINDEX, *ref);
  *ref = LUA_NOREF;
  if (!lua_isnoneornil(L, 2)) {
    lua_settop(L, 2);
    *ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
}

/* e:reload_plan(t | nil): the plan of the reload about to run (DN ->
   "restart" for the nodes it restarts whole), read while children are
   adopted. */
static int l_reload_plan(lua_State *L) {
  set_ref(L, &arbor_check_engine(L, 1)->reload_plan_ref, LUA_TTABLE);
  return 0;
}

/* e:node_filter(fn | nil): fn(dn, runnable, opts) is called for each node
   created from now on, and what it returns, a function, runs instead (a
   swap): a reload's check build, a reexec's restore. */
static int l_node_filter(lua_State *L) {
  set_ref(L, &arbor_check_engine(L, 1)->node_filter_ref, LUA_TFUNCTION);
  return 0;
}

/* e:reloading() -> true while a reload's nodes have not all adopted their
   children. */
static int l_reloading(lua_State *L) {
  lua_pushboolean(L, arbor_check_engine(L, 1)->reloads > 0);
  return 1;
}

/* e:runaway() -> seconds one resume may run (0: no limit): the engine's
   runaway limit, which also bounds a reload's reading of the script. */
static int l_runaway(lua_State *L) {
  lua_pushnumber(L, arbor_check_engine(L, 1)->runaway);
  return 1;
}

/* e:on_hangup(fn | nil): fn is called on SIGHUP (arbor.run: a reload). */
static int l_on_hangup(lua_State *L) {
  set_ref(L, &arbor_check_engine(L, 1)->hangup_ref, LUA_TFUNCTION);
  return 0;
}

/* ---- a bounded call (a reload reading its script) ------------------- */

/* Reading a script runs user code on the loop: it must give the loop back
   within its bound. The runaway watchdog (push/pop) stops Lua code that
   runs on, also inside coroutines it resumes; a call blocked in the
   kernel (an open of a FIFO nobody writes, a read of a pipe) is what the
   bound's own timer is for: past the bound it interrupts the call
   (BOUND_SIGNAL has no SA_RESTART: the call fails with EINTR) and hooks
   the bounded thread, and does so again every quarter second while the
   code goes on (a loop that retries). */
#define BOUND_SIGNAL (SIGRTMIN + 6)
#define BOUND_AGAIN_NS 250000000L

static volatile sig_atomic_t bound_fired;
static lua_State *volatile bound_L; /* the thread a bound runs on */
static int bound_ready;            /* 1: timer made, -1: cannot be */
static timer_t bound_timer;

/* Raises at every instruction of the bounded thread once the bound is
   passed (so no pcall on the way out keeps it); removes itself from a
   thread that inherited it after the bound ended. */
static void bound_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  if (!bound_fired) {
    lua_sethook(L, NULL, 0, 0);
    return;
  }
  lua_pushliteral(L, "the bound of the call was passed");
  lua_error(L);
}

/* BOUND_SIGNAL, on the engine's thread (the timer names it): the bound is
   passed. lua_sethook is async-signal-safe (lua.c's way). */
static void on_bound(int sig) {
  (void)sig;
  bound_fired = 1;
  lua_State *L = bound_L;
  if (L) lua_sethook(L, bound_hook, LUA_MASKCOUNT, 1);
}

/* Makes the timer (signalling this thread only) once. */
static int bound_setup(void) {
  if (bound_ready) return bound_ready > 0;
  bound_ready = -1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_bound;
  sa.sa_flags = 0; /* no SA_RESTART: a blocked call returns EINTR */
  sigemptyset(&sa.sa_mask);
  if (sigaction(BOUND_SIGNAL, &sa, NULL) != 0) return 0;
  struct sigevent sev;
  memset(&sev, 0, sizeof sev);
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = BOUND_SIGNAL;
  sev._sigev_un._tid = (pid_t)syscall(SYS_gettid); /* sigev_notify_thread_id */
  if (timer_create(CLOCK_MONOTONIC, &sev, &bound_timer) != 0) return 0;
  bound_ready = 1;
  return 1;
}

/* Arms the timer: the first signal `limit` seconds from now, then one
   every BOUND_AGAIN_NS; 0 disarms it. */
static void bound_arm(double limit) {
  struct itimerspec its;
  memset(&its, 0, sizeof its);
  if (limit > 0) {
    its.it_value.tv_sec = (time_t)limit;
    its.it_value.tv_nsec = (long)((limit - (double)(time_t)limit) * 1e9);
    if (!its.it_value.tv_sec && !its.it_value.tv_nsec) its.it_value.tv_nsec = 1;
    its.it_interval.tv_nsec = BOUND_AGAIN_NS;
  }
  timer_settime(bound_timer, 0, &its, NULL);
}

/* core.bounded(limit, what, fn, ...) -> true, fn's results | false, err,
   passed: calls fn(...) like pcall, but gives it `limit` seconds (> 0);
   past them it is stopped (a loop, also inside a pcall or a coroutine, a
   call blocked in the kernel) and err is `what` formatted with the
   milliseconds it ran and the limit (two %d), passed true. Not nested,
   and on the thread that first used it. [-0, +(1|n), -] */
static int l_bounded(lua_State *L) {
  double limit = luaL_checknumber(L, 1);
  const char *what = luaL_checkstring(L, 2);
  luaL_checktype(L, 3, LUA_TFUNCTION);
  if (!(limit > 0)) return luaL_argerror(L, 1, "want a number of seconds > 0");
  if (bound_L) return luaL_error(L, "core.bounded: a bounded call is running");
  int nargs = lua_gettop(L) - 3;
  int timed = bound_setup();
  uint64_t t0 = uv_hrtime();
  arbor_watch saved;
  arbor_watchdog_push(&saved, L, limit, what);
  bound_fired = 0;
  bound_L = L;
  if (timed) bound_arm(limit);
  int st = lua_pcall(L, nargs, LUA_MULTRET, 0);
  if (timed) bound_arm(0);
  bound_L = NULL;
  int passed = arbor_watchdog_pop(&saved, L) | bound_fired;
  if (bound_fired) lua_sethook(L, NULL, 0, 0);
  bound_fired = 0;
  if (st == LUA_OK && !passed) { /* [limit, what, results...] */
    lua_pushboolean(L, 1);
    lua_replace(L, 2);
    return lua_gettop(L) - 1;
  }
  lua_pushboolean(L, 0);
  if (passed) {
    int ms = (int)((uv_hrtime() - t0) / 1000000u);
    lua_pushfstring(L, what, ms, (int)(limit * 1000));
  } else {
    lua_pushvalue(L, -2);
  }
  lua_pushboolean(L, passed);
  return 3;
}

void arbor_open_reload(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"reloading", l_reloading},
      {"on_hangup", l_on_hangup},
      {"reload", l_reload},
      {"definition", l_definition},
      {"reload_plan", l_reload_plan},
      {"node_filter", l_node_filter},
      {"runaway", l_runaway},
      {NULL, NULL},
  };
  arbor_engine_methods(L, methods);
  static const luaL_Reg funcs[] = {{"bounded", l_bounded}, {NULL, NULL}};
  luaL_setfuncs(L, funcs, 0);
}

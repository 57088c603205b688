/* l_ctx.c: the runnable's context (ctx), one per incarnation (T3), and the
 * blocking primitives that yield to the loop (T7).
 */
#include <lauxlib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lua/l_arbor.h"
#include "lua/l_options.h"
#include "engine/ctx.h"
#include "engine/lifecycle.h"

/* ---- blocking ------------------------------------------------------- */

static void raise_canceled(lua_State *L) {
  arbor_push_canceled(L);
  lua_error(L);
}

/* Continuation of every blocking call: what the wake delivered. */
static int k_wake(lua_State *L, int status, lua_KContext base) {
  (void)status;
  arbor_ctx *c = lua_touserdata(L, 1);
  pnode *pn = c->pn;
  int r = pn->resume;
  pn->resume = RESUME_VALUES;
  if (r == RESUME_CANCEL) raise_canceled(L);
  if (r == RESUME_FAIL) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, pn->fail_ref);
    luaL_unref(L, LUA_REGISTRYINDEX, pn->fail_ref);
    pn->fail_ref = LUA_NOREF;
    lua_error(L);
  }
  return lua_gettop(L) - (int)base;
}

/* Parks the calling incarnation (whose ctx is at index 1) and yields. */
static int block(lua_State *L, pnode *pn, int wait, double seconds) {
  if (L != pn->co)
    return arbor_dn_error(L, pn,
                          "blocking call from outside the node's own "
                          "coroutine (a nested coroutine, or another node's "
                          "ctx)");
  if (!lua_isyieldable(L))
    return arbor_dn_error(L, pn, "blocking call across a C boundary");
  if ((pn->pflags & PN_NOTIFIED) && pn->shield == 0) raise_canceled(L);
  arbor_engine_park(pn_engine(pn), pn, wait, seconds);
  int base = lua_gettop(L);
  return lua_yieldk(L, 0, (lua_KContext)base, k_wake);
}

static int ctx_sleep(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  double s = luaL_checknumber(L, 2);
  if (!(s >= 0) || !isfinite(s))
    return arbor_dn_error(L, pn,
                          "ctx:sleep(seconds): want a finite number >= 0");
  lua_settop(L, 1);
  return block(L, pn, WAIT_SLEEP, s);
}

static int ctx_wait(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  lua_settop(L, 1);
  return block(L, pn, WAIT_CANCEL, 0);
}

/* core.park_seq(ctx): the sequence number the next park will have. */
static int ctx_park_seq(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  lua_pushinteger(L, (lua_Integer)(uint32_t)(pn->wait_seq + 1));
  return 1;
}

/* core.park(ctx): parks until core.unpark(ctx, seq, ...) delivers values. */
static int ctx_park(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  lua_settop(L, 1);
  return block(L, pn, WAIT_PARK, 0);
}

/* core.unpark(ctx, seq, ...): true when the values reached the parked call. */
static int ctx_unpark(lua_State *L) {
  arbor_ctx *c = arbor_to_ctx(L, 1);
  uint32_t seq = (uint32_t)luaL_checkinteger(L, 2);
  int nvals = lua_gettop(L) - 2;
  int ok = arbor_ctx_live(c) &&
           arbor_engine_unpark(pn_engine(c->pn), c->pn, seq, L, nvals);
  lua_pushboolean(L, ok);
  return 1;
}

static int ctx_canceled(lua_State *L) {
  arbor_ctx *c = arbor_to_ctx(L, 1);
  lua_pushboolean(L, !arbor_ctx_live(c) || (c->pn->pflags & PN_NOTIFIED) != 0);
  return 1;
}

static int ctx_shield_enter(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  pn->shield++;
  return 0;
}

static int ctx_shield_leave(lua_State *L) {
  arbor_ctx *c = arbor_to_ctx(L, 1);
  if (arbor_ctx_live(c) && c->pn->shield > 0) c->pn->shield--;
  return 0;
}

/* ---- signals, logs -------------------------------------------------- */

static int ctx_signal(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  if (lua_type(L, 2) != LUA_TSTRING)
    return arbor_dn_error(L, pn,
                          "ctx:signal(what): want \"healthy\" or \"done\", "
                          "got %s",
                          luaL_typename(L, 2));
  size_t len;
  const char *what = lua_tolstring(L, 2, &len);
  const char *bad = arbor_engine_signal(pn_engine(pn), pn, what);
  if (!bad) return 0;
  const char *state = arbor_state_name((arbor_state)pn->n.state);
  if (strcmp(bad, "healthy") == 0)
    return arbor_dn_error(L, pn,
                          "signal(\"healthy\") is allowed from NEW, the node "
                          "is %s (T4)",
                          state);
  if (strcmp(bad, "done") == 0)
    return arbor_dn_error(L, pn,
                          "signal(\"done\") is allowed from HEALTHY, the "
                          "node is %s (T4)",
                          state);
  return arbor_dn_error(L, pn,
                        "unknown signal \"%s\" (want \"healthy\" or "
                        "\"done\")",
                        arbor_push_cut(L, what, len));
}

/* Logs the arguments from `from` on, joined by spaces, at level on pn's
   sub-logger sub (0: its own); a single table argument is {level = ...,
   text} (text or [1]). [-0, +0, e] */
static int log_args(lua_State *L, pnode *pn, unsigned sub, int level,
                    int from) {
  int n = lua_gettop(L);
  if (n == from && lua_istable(L, from)) {
    lua_getfield(L, from, "level");
    if (!lua_isnil(L, -1)) {
      size_t len;
      const char *lv = lua_type(L, -1) == LUA_TSTRING
                           ? lua_tolstring(L, -1, &len) : NULL;
      level = lv ? arbor_log_level(lv, len) : -1;
      if (level < 0)
        return arbor_dn_error(L, pn, "log{level = ...}: want \"debug\", "
                              "\"info\", \"warn\" or \"error\", got %s",
                              lv ? arbor_push_cut(L, lv, len)
                                 : luaL_typename(L, -1));
    }
    lua_getfield(L, from, "text");
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      lua_rawgeti(L, from, 1);
    }
    lua_replace(L, from);
    lua_settop(L, from);
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = from; i <= n; i++) {
    if (i > from) luaL_addchar(&b, ' ');
    luaL_tolstring(L, i, NULL);
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);
  size_t len;
  const char *s = lua_tolstring(L, -1, &len);
  arbor_str *line = arbor_str_new(s, len);
  if (line) {
    arbor_engine_log_at(pn_engine(pn), pn, sub, level, line);
    arbor_str_unref(line);
  }
  return 0;
}

/* ctx:log(...), ctx:debug(...), ctx:info(...), ctx:warn(...),
   ctx:error(...): a line at the level of the upvalue (ctx:log: info, or
   its table's level). */
static int ctx_log(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  return log_args(L, pn, 0, (int)lua_tointeger(L, lua_upvalueindex(1)), 2);
}

/* core.log_sub(ctx, name) -> index: reserves name as a sub-logger of the
   node (ctx:logger). Raises when a child has that name. */
static int ctx_log_sub(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  size_t len;
  const char *name = luaL_checklstring(L, 2, &len);
  for (size_t i = 0, start = 0; i <= len; i++) {
    if (i < len && name[i] != '.') continue;
    if (!arbor_name_valid(name + start, i - start))
      return arbor_dn_error(L, pn, "ctx:logger('%s'): invalid name (each "
                            "part matches ^[A-Za-z0-9_-]{1,64}$, parts "
                            "joined by dots)", arbor_push_cut(L, name, len));
    start = i + 1;
  }
  int sub = arbor_engine_log_sub(pn, name, len);
  if (sub == 0)
    return arbor_dn_error(L, pn, "ctx:logger('%s'): a child has that name "
                          "(a sub-logger's name is reserved against the "
                          "node's children, and a child's against its "
                          "sub-loggers)", arbor_push_cut(L, name, len));
  if (sub < 0) return luaL_error(L, "out of memory");
  lua_pushinteger(L, sub);
  return 1;
}

/* core.log_write(ctx, sub, level, ...): a line of the sub-logger sub. */
static int ctx_log_write(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  lua_Integer sub = luaL_checkinteger(L, 2);
  lua_Integer level = luaL_checkinteger(L, 3);
  return log_args(L, pn, (unsigned)sub, (int)(level & 3), 4);
}

/* core.log_lines(ctx, n): the size of the node's ring of log lines. */
static int ctx_log_lines(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  lua_Integer n = luaL_checkinteger(L, 2);
  if (n < 0 || n > 1000000)
    return arbor_dn_error(L, pn, "log_lines must be an integer from 0 to "
                          "1000000");
  if (arbor_engine_log_lines(pn, (unsigned)n) < 0)
    return luaL_error(L, "out of memory");
  return 0;
}

/* ---- timing: heartbeats, failing now, arbor.exec's defaults --------- */

/* ctx:alive(): the heartbeat its `watchdog` option waits for. */
static int ctx_alive(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  arbor_engine_alive(pn_engine(pn), pn);
  return 0;
}

/* core.fail_now(ctx, reason) -> true | false: fails the node now with reason
   (a process's WATCHDOG=trigger); false when it is already failing or
   being stopped. Its blocking calls raise the cancellation from then on. */
static int ctx_fail_now(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  size_t len;
  const char *r = luaL_tolstring(L, 2, &len);
  arbor_str *reason = arbor_str_new(r, len);
  if (!reason) return luaL_error(L, "out of memory");
  int ok = arbor_engine_fail_now(pn_engine(pn), pn, reason) == 0;
  arbor_str_unref(reason);
  lua_pushboolean(L, ok);
  return 1;
}

/* core.default_<option>(ctx [, s]) -> seconds in force (arbor.exec's
   defaults, lua/arbor/exec.lua): sets the node's option
   to s unless ctx:run / ctx:group gave it (arbor.exec's defaults: false or
   0 for a deadline is none); returns the value in force (0: none). */
static int default_timing(lua_State *L, unsigned which, const char *name) {
  pnode *pn = arbor_check_ctx(L, 1);
  if (!lua_isnoneornil(L, 2)) {
    double s = lua_isboolean(L, 2) && !lua_toboolean(L, 2) && which != TM_MIN_UPTIME
                   ? 0
                   : luaL_checknumber(L, 2);
    if (!(s >= 0) || !isfinite(s))
      return arbor_dn_error(L, pn, "core.default_%s(ctx, seconds): want a "
                            "finite number >= 0", name);
    arbor_engine_set_timing(pn_engine(pn), pn, which, s, 0);
  }
  lua_pushnumber(L, arbor_engine_timing(pn, which));
  return 1;
}

/* core.extend_ready(ctx, s) -> true | false: the ready deadline moves to
   now + s when later (EXTEND_TIMEOUT_USEC); false when the node has none
   running (no ready_timeout, or HEALTHY already). */
static int ctx_extend_ready(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  double s = luaL_checknumber(L, 2);
  if (!(s >= 0) || !isfinite(s))
    return arbor_dn_error(L, pn, "core.extend_ready(ctx, seconds): want a "
                          "finite number >= 0");
  lua_pushboolean(L, arbor_engine_extend_ready(pn_engine(pn), pn, s));
  return 1;
}

static int ctx_default_min_uptime(lua_State *L) {
  return default_timing(L, TM_MIN_UPTIME, "min_uptime");
}

static int ctx_default_ready_timeout(lua_State *L) {
  return default_timing(L, TM_READY, "ready_timeout");
}

static int ctx_default_watchdog(lua_State *L) {
  return default_timing(L, TM_WATCHDOG, "watchdog");
}

/* ---- children ------------------------------------------------------- */

/* Reads the option `lifecycle` or `sidecar` (value on top) into o. */
static void read_lifecycle_opt(lua_State *L, pnode *parent,
                               arbor_child_opts *o, const char *what,
                               const char *k) {
  static const char *const names[] = {"main", "prestart", "poststart",
                                      "poststop", NULL};
  if (k[0] == 's') {
    if (!lua_isboolean(L, -1))
      arbor_dn_error(L, parent, "%s: option 'sidecar' must be a boolean, "
                     "got %s", what, luaL_typename(L, -1));
    if (lua_toboolean(L, -1)) o->lc |= ARBOR_LC_SIDECAR;
    return;
  }
  const char *v = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
  for (unsigned i = 0; v && names[i]; i++)
    if (strcmp(v, names[i]) == 0) {
      o->lc = (o->lc & ~(unsigned)ARBOR_LC_KIND) | i;
      return;
    }
  if (v)
    arbor_dn_error(L, parent,
                   "%s: option 'lifecycle' must be \"prestart\", "
                   "\"poststart\", \"poststop\" or \"main\", got \"%s\"",
                   what, arbor_push_cut(L, v, lua_rawlen(L, -1)));
  arbor_dn_error(L, parent,
                 "%s: option 'lifecycle' must be \"prestart\", "
                 "\"poststart\", \"poststop\" or \"main\", got %s",
                 what, luaL_typename(L, -1));
}

/* Raises when a child behind o's gate could never start now (L0). */
static void check_gate(lua_State *L, pnode *parent, const arbor_child_opts *o,
                       const char *what, const char *name, size_t len) {
  const char *gate = arbor_lc_check_add(pn_engine(parent), parent, o->lc);
  if (!gate) return;
  arbor_dn_error(L, parent,
                 "%s: cannot add %s child '%s': the coordinator is in state "
                 "%s and the %s gate never opens again in this incarnation "
                 "(L0)",
                 what, gate, arbor_push_cut(L, name, len),
                 arbor_lc_state(parent), gate);
}

/* The options of ctx:run and ctx:group, in the order errors list them. */
static const char *const run_options[] = {
    "policy",   "shutdown",    "min_uptime",    "ready_timeout", "watchdog",
    "strategy", "ordered",     "significant",   "auto_shutdown", "stop",
    "lifecycle", "sidecar",    "log_lines",     NULL};

/* ctx:run / ctx:group options: the engine's (l_arbor.h) and the timing
   ones (deadline.c); a timing option < 0 is not given. */
typedef struct run_opts {
  arbor_child_opts c;
  int opts_idx;      /* the options table's index, 0: none given */
  double timing[3]; /* min_uptime, ready_timeout, watchdog */
  long log_lines;    /* the size of the node's ring of log lines, or -1 */
} run_opts;

static const unsigned timing_bit[3] = {TM_MIN_UPTIME, TM_READY, TM_WATCHDOG};

/* Reads the timing option k (value on top) into o; 0 when k is not one. */
static int read_timing_opt(lua_State *L, pnode *parent, run_opts *o,
                           const char *what, const char *k) {
  int i = strcmp(k, "min_uptime") == 0      ? 0
          : strcmp(k, "ready_timeout") == 0 ? 1
          : strcmp(k, "watchdog") == 0      ? 2
                                            : -1;
  if (i < 0) return 0;
  if (i > 0 && lua_isboolean(L, -1) && !lua_toboolean(L, -1)) {
    o->timing[i] = 0; /* false: none, not even arbor.exec's default */
    return 1;
  }
  double s = lua_tonumber(L, -1);
  int ok = lua_type(L, -1) == LUA_TNUMBER && isfinite(s) &&
           (i == 0 ? s >= 0 : s > 0);
  if (!ok) {
    const char *got = lua_type(L, -1) == LUA_TNUMBER
                          ? luaL_tolstring(L, -1, NULL)
                          : luaL_typename(L, -1);
    arbor_dn_error(L, parent,
                   "%s: option '%s' must be a finite number %s (seconds)%s, "
                   "got %s",
                   what, k, i == 0 ? ">= 0" : "> 0", i == 0 ? "" : " or false",
                   got);
  }
  o->timing[i] = s;
  return 1;
}

/* Reads ctx:run / ctx:group options at idx into o. Raises on bad input:
   every unknown name at once, then the first bad value, naming it. */
static void read_opts(lua_State *L, int idx, pnode *parent, run_opts *ro,
                      const char *what) {
  arbor_child_opts *o = &ro->c;
  o->policy_idx = 0;
  o->shutdown = 5.0;
  o->lc = ARBOR_LC_MAIN;
  o->gflags = o->grouping = o->parallel = 0;
  ro->timing[0] = ro->timing[1] = ro->timing[2] = -1;
  ro->log_lines = -1;
  ro->opts_idx = 0;
  if (lua_isnoneornil(L, idx)) return;
  if (!lua_istable(L, idx))
    arbor_dn_error(L, parent, "%s: options must be a table, got %s", what,
                   luaL_typename(L, idx));
  if (arbor_unknown_options(L, idx, run_options))
    arbor_dn_error(L, parent, "%s: %s", what, lua_tostring(L, -1));
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    const char *k = lua_tostring(L, -2); /* a known name: a string */
    if (strcmp(k, "policy") == 0) {
      if (!lua_isfunction(L, -1))
        arbor_dn_error(L, parent, "%s: option 'policy' must be a function, "
                       "got %s", what, luaL_typename(L, -1));
      o->policy_idx = 1;
    } else if (strcmp(k, "shutdown") == 0) {
      double s = lua_tonumber(L, -1);
      if (lua_type(L, -1) != LUA_TNUMBER || !(s >= 0) || !isfinite(s))
        arbor_dn_error(L, parent,
                       "%s: option 'shutdown' must be a finite number >= 0 "
                       "(seconds), got %s",
                       what, lua_type(L, -1) == LUA_TNUMBER
                                 ? luaL_tolstring(L, -1, NULL)
                                 : luaL_typename(L, -1));
      o->shutdown = s;
    } else if (strcmp(k, "lifecycle") == 0 || strcmp(k, "sidecar") == 0) {
      read_lifecycle_opt(L, parent, o, what, k);
    } else if (strcmp(k, "log_lines") == 0) {
      lua_Integer n = lua_tointeger(L, -1);
      if (!lua_isinteger(L, -1) || n < 0 || n > 1000000)
        arbor_dn_error(L, parent, "%s: option 'log_lines' must be an integer "
                       "from 0 to 1000000 (lines kept in memory), got %s",
                       what, lua_type(L, -1) == LUA_TNUMBER
                                 ? luaL_tolstring(L, -1, NULL)
                                 : luaL_typename(L, -1));
      ro->log_lines = (long)n;
    } else if (read_timing_opt(L, parent, ro, what, k)) {
      /* read */
    } else {
      arbor_strategy_opt(L, k, o, parent, what);
    }
    lua_pop(L, 1);
  }
  if ((o->lc & ARBOR_LC_SIDECAR) &&
      (o->lc & ARBOR_LC_KIND) != ARBOR_LC_PRESTART &&
      (o->lc & ARBOR_LC_KIND) != ARBOR_LC_POSTSTART)
    arbor_dn_error(L, parent,
                   "%s: option 'sidecar' is valid on prestart and poststart "
                   "children only, not on a %s child (L0)",
                   what, arbor_lc_name(o->lc));
  arbor_strategy_check(L, o, parent, what);
  ro->opts_idx = lua_absindex(L, idx);
  if (o->policy_idx) {
    lua_getfield(L, idx, "policy");
    o->policy_idx = lua_gettop(L);
  }
}

/* Raises the T2 error for name under parent. */
static void name_error(lua_State *L, pnode *parent, const char *name,
                       size_t len, int err) {
  if (err == ARBOR_EDUP)
    arbor_dn_error(L, parent,
                   "duplicate child name '%s' (T2: names are unique among "
                   "siblings)",
                   name);
  if (err == ARBOR_EBADNAME)
    arbor_dn_error(L, parent,
                   "invalid child name '%s' (T2: a name matches "
                   "^[A-Za-z0-9_-]{1,64}$)",
                   arbor_push_cut(L, name, len));
  if (err == ARBOR_EGONE) arbor_dn_error(L, parent, "the node was discarded");
  arbor_dn_error(L, parent, "out of memory");
}

/* c's options from ro: a new node's, or those a reload gives a node it
   restarts (after its old incarnation was told to stop, with its grace). */
static void set_options(lua_State *L, pnode *c, const run_opts *ro) {
  const arbor_child_opts *o = &ro->c;
  arbor_engine *e = pn_engine(c);
  c->shutdown = o->shutdown;
  c->gflags = (uint8_t)((c->gflags & (GF_MEMBER | GF_FIRST)) | o->gflags);
  if (o->parallel)
    c->pflags |= PN_PARALLEL;
  else
    c->pflags &= (uint16_t)~PN_PARALLEL;
  pn_lc(c) = (uint8_t)o->lc;
  if (c->timing) { /* what an earlier definition gave goes */
    c->timing->given = 0;
    c->timing->min_uptime = -1;
    c->timing->ready_timeout = c->timing->watchdog = 0;
  }
  for (int i = 0; i < 3; i++)
    if (ro->timing[i] >= 0)
      arbor_engine_set_timing(e, c, timing_bit[i], ro->timing[i], 1);
  if (ro->log_lines >= 0 && arbor_engine_log_lines(c, (unsigned)ro->log_lines) < 0)
    luaL_error(L, "out of memory");
}

/* c's runnable (at fn_idx), policy and options as its parent gave them
   (a runtime override for its DN still wins, l_override.c). */
static void set_definition(lua_State *L, pnode *c, int fn_idx,
                           const run_opts *ro) {
  arbor_engine *e = pn_engine(c);
  int *refs[3] = {&c->fn_ref, &c->policy_ref, &c->opts_ref};
  int idx[3] = {fn_idx, ro->c.policy_idx, ro->opts_idx};
  for (int i = 0; i < 3; i++) { /* the new reference first: it may be the
                                   same value */
    int r = idx[i] ? arbor_engine_ref_fn(e, L, idx[i]) : LUA_NOREF;
    arbor_engine_unref_fn(e, *refs[i]);
    *refs[i] = r;
  }
  arbor_override_spawn(L, c, fn_idx, ro->c.policy_idx);
}

/* Creates and starts a child whose runnable is at fn_idx; or, when its
   parent's new incarnation adopts the running child of that name after a
   reload, returns NULL (l_reload.c decides what becomes of it). */
static pnode *spawn(lua_State *L, pnode *parent, const char *name, size_t len,
                    int fn_idx, const run_opts *ro) {
  const arbor_child_opts *o = &ro->c;
  int err = 0;
  pnode *old = arbor_engine_adoptable(parent, name, len);
  if (old) {
    int changed = arbor_reload_changed(L, old, fn_idx, ro->opts_idx);
    if (changed && pn_lc(old) != (uint8_t)o->lc)
      arbor_dn_error(L, parent, "reload: child '%s' is now a %s child: its "
                     "parent must be restarted whole", name,
                     arbor_lc_name(o->lc));
    set_definition(L, old, fn_idx, ro);
    if (!changed) {
      arbor_engine_adopt(pn_engine(old), old);
    } else {
      arbor_reload_restart(L, old);
      set_options(L, old, ro);
    }
    return NULL;
  }
  if (arbor_engine_log_reserved(parent, name, len))
    arbor_dn_error(L, parent, "child name '%s' is a sub-logger of the node "
                   "(ctx:logger): its name is reserved", name);
  pnode *c = arbor_engine_add(pn_engine(parent), parent, name, len, &err);
  if (!c) name_error(L, parent, name, len, err);
  set_definition(L, c, fn_idx, ro);
  arbor_reload_filter(L, c, fn_idx, ro->opts_idx);
  set_options(L, c, ro);
  arbor_lc_register(pn_engine(parent), c);
  return c;
}

/* Starts c, or records that it was created under a canceled parent. */
static void launch(pnode *c) {
  if (c->n.flags & ARBOR_F_HELD) return; /* held from its creation (reexec) */
  if (c->n.state == ARBOR_CANCELED) {
    arbor_str *r = arbor_str_lit("parent canceled");
    arbor_engine_emit_state(pn_engine(c), c, ARBOR_NEW, ARBOR_CANCELED, r);
    arbor_str_unref(r);
    return;
  }
  if (arbor_lc_admit(c)) arbor_engine_start(pn_engine(c), c);
}

/* Adds and starts a child of pn: its name, runnable and options are the
   arguments at at, at + 1 and at + 2. what names the caller in errors. */
static int add_child(lua_State *L, pnode *pn, int at, const char *what) {
  size_t len;
  if (lua_type(L, at) != LUA_TSTRING)
    return arbor_dn_error(L, pn, "%s(name, fn): name must be a string, "
                          "got %s", what, luaL_typename(L, at));
  const char *name = lua_tolstring(L, at, &len);
  if (!lua_isfunction(L, at + 1))
    return arbor_dn_error(L, pn,
                          "%s('%s', fn): the runnable must be a "
                          "function, got %s",
                          what, arbor_push_cut(L, name, len),
                          luaL_typename(L, at + 1));
  run_opts o;
  read_opts(L, at + 2, pn, &o, what);
  if (!arbor_engine_adoptable(pn, name, len)) /* adopted: past its gate */
    check_gate(L, pn, &o.c, what, name, len);
  pnode *c = spawn(L, pn, name, len, at + 1, &o);
  if (c) launch(c);
  return 0;
}

static int ctx_run(lua_State *L) {
  return add_child(L, arbor_check_ctx(L, 1), 2, "ctx:run");
}

/* e:add_child(dn, name, fn [, opts]): node:run, a child added from outside
   (the REPL, `arbor ctl eval`) to a running node; it lasts until that
   node's next restart, which runs the script again. */
static int l_add_child(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  pnode *pn = arbor_check_node(L, e, 2);
  if (!arbor_node_running(&pn->n) || arbor_node_canceled(&pn->n))
    return luaL_error(L, "run %s: the node is not running (state %s)",
                      lua_tostring(L, 2),
                      arbor_state_name((arbor_state)pn->n.state));
  return add_child(L, pn, 3, "node:run");
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A group adopted after a reload (docs/restore.md) keeps its members'
   ring: the new incarnation must name exactly the members of one running
   group (the table at 2). Raises otherwise. */
static void check_adopted_group(lua_State *L, pnode *pn, size_t count,
                                size_t adopted) {
  arbor_node *first = NULL;
  size_t ring = 0, in_ring = 0;
  lua_pushnil(L);
  while (lua_next(L, 2)) {
    size_t len;
    const char *name = lua_tolstring(L, -2, &len);
    pnode *c = arbor_engine_adoptable(pn, name, len);
    lua_pop(L, 1);
    if (!c || !(c->gflags & GF_MEMBER)) continue;
    if (!first) {
      first = &c->n;
      ring = 1;
      for (arbor_node *g = first->gnext; g != first; g = g->gnext) ring++;
    }
    arbor_node *g = first;
    while (g != &c->n && g->gnext != first) g = g->gnext;
    if (g == &c->n) in_ring++;
  }
  if (adopted != count || ring != count || in_ring != count)
    arbor_dn_error(L, pn, "reload: ctx:group names %d running child(ren) "
                   "among %d member(s), the running group has %d: a group's "
                   "members cannot change in place (restart its parent)",
                   (int)adopted, (int)count, (int)ring);
}

static int ctx_group(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  if (!lua_istable(L, 2))
    return arbor_dn_error(L, pn,
                          "ctx:group(members): want a table of name = "
                          "function, got %s",
                          luaL_typename(L, 2));
  run_opts o;
  read_opts(L, 3, pn, &o, "ctx:group");
  /* Check every member before anything changes. */
  size_t count = 0, adopted = 0;
  lua_pushnil(L);
  while (lua_next(L, 2)) {
    if (lua_type(L, -2) != LUA_TSTRING)
      return arbor_dn_error(L, pn, "ctx:group: member names must be strings, "
                            "got %s", luaL_typename(L, -2));
    size_t len;
    const char *name = lua_tolstring(L, -2, &len);
    if (!lua_isfunction(L, -1))
      return arbor_dn_error(L, pn,
                            "ctx:group: member '%s' must be a function, got %s",
                            arbor_push_cut(L, name, len), luaL_typename(L, -1));
    if (!arbor_name_valid(name, len))
      name_error(L, pn, name, len, ARBOR_EBADNAME);
    if (arbor_engine_adoptable(pn, name, len))
      adopted++;
    else if (arbor_tree_child(&pn->n, name, len))
      name_error(L, pn, name, len, ARBOR_EDUP);
    if (arbor_engine_log_reserved(pn, name, len))
      return arbor_dn_error(L, pn, "child name '%s' is a sub-logger of the "
                            "node (ctx:logger): its name is reserved", name);
    count++;
    lua_pop(L, 1);
  }
  if (count == 0) return 0;
  if (adopted > 0) check_adopted_group(L, pn, count, adopted);
  lua_pushnil(L);
  lua_next(L, 2);
  size_t len;
  const char *name = lua_tolstring(L, -2, &len);
  if (adopted == 0) check_gate(L, pn, &o.c, "ctx:group", name, len);
  lua_pop(L, 2);
  const char **names = lua_newuserdatauv(L, count * sizeof *names, 0);
  size_t i = 0;
  lua_pushnil(L);
  while (lua_next(L, 2)) {
    names[i++] = lua_tostring(L, -2);
    lua_pop(L, 1);
  }
  qsort(names, count, sizeof *names, cmp_names);
  pnode *first = NULL;
  int top = lua_gettop(L);
  for (i = 0; i < count; i++) {
    lua_getfield(L, 2, names[i]);
    pnode *c = spawn(L, pn, names[i], strlen(names[i]), top + 1, &o);
    lua_settop(L, top);
    if (!c) continue; /* adopted after a reload: in its group already */
    c->gflags |= GF_MEMBER;
    if (first)
      arbor_tree_group(&first->n, &c->n);
    else
      first = c, c->gflags |= GF_FIRST;
  }
  if (!first) return 0; /* every member adopted */
  /* Start in name order (T10); a member may have been started by its
     predecessor already (strategy.c). */
  for (arbor_node *n = &first->n;;) {
    if (n->state == ARBOR_CANCELED || (n->flags & ARBOR_F_PENDING))
      launch((pnode *)n);
    n = n->next;
    if (!n) break;
  }
  return 0;
}

/* __index: methods first (upvalue 1), then the fields dn, name,
   incarnation and restored. */
static int ctx_index(lua_State *L) {
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
  arbor_ctx *c = arbor_to_ctx(L, 1);
  const char *k = lua_tostring(L, 2);
  if (!k || !c->pn) return 1;
  if (strcmp(k, "dn") == 0) {
    arbor_push_dn(L, &c->pn->n);
  } else if (strcmp(k, "name") == 0) {
    lua_pushstring(L, c->pn->n.name);
  } else if (strcmp(k, "incarnation") == 0) {
    lua_pushinteger(L, (lua_Integer)c->incarnation);
  } else if (strcmp(k, "restored") == 0) { /* after a reexec (restore.md) */
    lua_pushboolean(L, c->pn->restored && c->incarnation == 1);
  } else {
    return 1;
  }
  return 1;
}

/* core.self(): the ctx of the incarnation running now, or nil. */
static int l_self(lua_State *L) {
  arbor_engine *e = arbor_engine_current();
  if (!e || !e->current || e->current->co != L) {
    lua_pushnil(L);
    return 1;
  }
  arbor_push_ctx(L, e->current);
  return 1;
}

static const luaL_Reg ctx_methods[] = {
    {"run", ctx_run},
    {"group", ctx_group},
    {"signal", ctx_signal},
    {"sleep", ctx_sleep},
    {"wait", ctx_wait},
    {"canceled", ctx_canceled},
    {"alive", ctx_alive},
    {NULL, NULL},
};

/* The primitives under Lua's ctx methods (lua/arbor/ctx.lua, channel.lua):
   functions of arbor.core taking the ctx, not methods of every ctx. */
static const luaL_Reg ctx_private[] = {
    {"shield_enter", ctx_shield_enter},
    {"shield_leave", ctx_shield_leave},
    {"park_seq", ctx_park_seq},
    {"park", ctx_park},
    {"unpark", ctx_unpark},
    {"fail_now", ctx_fail_now},
    {"extend_ready", ctx_extend_ready},
    {"default_min_uptime", ctx_default_min_uptime},
    {"default_ready_timeout", ctx_default_ready_timeout},
    {"default_watchdog", ctx_default_watchdog},
    {"log_sub", ctx_log_sub},
    {"log_write", ctx_log_write},
    {"log_lines", ctx_log_lines},
    {NULL, NULL},
};

/* [-0, +0, m] registers the ctx metatable, and core.self and the private
   primitives in the table on top. */
void arbor_open_ctx(lua_State *L) {
  arbor_ctx_metatable(L);
  luaL_newlib(L, ctx_methods);
  /* ctx:log (info) and one method per level, ctx_log with its level */
  static const char *const log_methods[] = {"debug", "info", "warn", "error"};
  for (int i = 0; i < 4; i++) {
    lua_pushinteger(L, i);
    lua_pushcclosure(L, ctx_log, 1);
    lua_setfield(L, -2, log_methods[i]);
  }
  lua_pushinteger(L, ARBOR_LOG_INFO);
  lua_pushcclosure(L, ctx_log, 1);
  lua_setfield(L, -2, "log");
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "methods");
  lua_pushcclosure(L, ctx_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  lua_pushcfunction(L, l_self);
  lua_setfield(L, -2, "self");
  luaL_setfuncs(L, ctx_private, 0);
  static const luaL_Reg engine_methods[] = {{"add_child", l_add_child},
                                            {NULL, NULL}};
  arbor_engine_methods(L, engine_methods);
}

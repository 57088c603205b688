/* decide.c: restart decisions (T8, P1-P3): asking a node's policy (under
 * a time budget, with the default policy standing in for a faulty one).
 * The kernel (kernel.c) acts on the decision.
 */
#include "engine/internal.h"
#include "engine/clock.h"

#include <lauxlib.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* ---- policies (P1-P3) ----------------------------------------------- */

/* [-0, +1, m] pn's recent failure times, oldest first, as a new table. */
static void push_failures(lua_State *L, pnode *pn) {
  lua_createtable(L, pn->nfail, 0);
  for (unsigned i = 0; i < pn->nfail; i++) {
    lua_pushnumber(L, pn->failures->time[(pn->fail_start + i) % ARBOR_FAILURES]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
}

/* [-0, +1, m] pn's memory (P1): the table its policies keep state in,
   made at first use and kept while the node is in the tree. */
static void push_memory(lua_State *L, pnode *pn) {
  pnode_hist *h = pn->failures;
  if (!h) { /* cannot happen: a node is decided after a failure */
    lua_newtable(L);
    return;
  }
  if (h->memory_ref == LUA_NOREF) {
    lua_newtable(L);
    lua_pushvalue(L, -1);
    h->memory_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    return;
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, h->memory_ref);
}

/* The fields of the P1 event, `failures` last (it allocates). */
static const char *const event_keys[] = {
    "consecutive", "failure", "uptime",   "healthy", "now",     "err",
    "dn",          "restarts", "returned", "memory",  "failures"};
#define EVENT_KEYS (sizeof event_keys / sizeof *event_keys)

/* [-0, +1, m] field k of pn's policy event; returns 0 (pushing nothing)
   for a key the event does not have. */
static int push_event_field(arbor_engine *e, pnode *pn, lua_State *L,
                            const char *k) {
  if (strcmp(k, "consecutive") == 0) {
    lua_pushinteger(L, pn->consecutive);
  } else if (strcmp(k, "failure") == 0) {
    lua_pushinteger(L, pn->failures ? (lua_Integer)pn->failures->count : 0);
  } else if (strcmp(k, "uptime") == 0) {
    lua_pushnumber(L, pn->exited - pn->started);
  } else if (strcmp(k, "healthy") == 0) {
    lua_pushnumber(L, pn->healthy_at >= 0 ? pn->exited - pn->healthy_at : 0);
  } else if (strcmp(k, "now") == 0) {
    lua_pushnumber(L, arbor__step_time(e));
  } else if (strcmp(k, "err") == 0) {
    if (pn->error)
      lua_pushlstring(L, pn->error->s, pn->error->len);
    else
      lua_pushliteral(L, "");
  } else if (strcmp(k, "dn") == 0) {
    arbor_push_dn(L, &pn->n);
  } else if (strcmp(k, "restarts") == 0) {
    lua_pushinteger(L, pn->restarts);
  } else if (strcmp(k, "returned") == 0) {
    lua_pushboolean(L, (pn->pflags & PN_RETURNED) != 0);
  } else if (strcmp(k, "memory") == 0) {
    push_memory(L, pn);
  } else if (strcmp(k, "failures") == 0) {
    push_failures(L, pn);
  } else {
    return 0;
  }
  return 1;
}

/* [-0, +1, m] a new table with every field of pn's event. */
static void push_full_event(arbor_engine *e, pnode *pn, lua_State *L) {
  lua_createtable(L, 0, (int)EVENT_KEYS);
  for (size_t i = 0; i < EVENT_KEYS; i++) {
    push_event_field(e, pn, L, event_keys[i]);
    lua_setfield(L, -2, event_keys[i]);
  }
}

/* __index of the reused event table: every field is read from the node
   being decided when the policy asks for it (most policies read one or two
   fields, and setting all eleven cost more than the rest of the decision).
   `failures` is kept in the table until the next call, so a policy reading
   it twice gets one table. Upvalue 1: the engine. */
static int event_index(lua_State *L) {
  arbor_engine *e = lua_touserdata(L, lua_upvalueindex(1));
  const char *k = lua_tostring(L, 2);
  if (!e->ev_pn || !k || !push_event_field(e, e->ev_pn, L, k)) return 0;
  if (strcmp(k, "failures") == 0) {
    lua_pushvalue(L, -1);
    lua_setfield(L, 1, k);
    e->ev_cached = 1;
  }
  return 1;
}

/* __pairs of the reused event table: iterates over a snapshot with every
   field, so a policy that copies the event gets all of it. Upvalue 1: the
   engine. */
static int event_pairs(lua_State *L) {
  arbor_engine *e = lua_touserdata(L, lua_upvalueindex(1));
  lua_getglobal(L, "next");
  if (e->ev_pn)
    push_full_event(e, e->ev_pn, L);
  else
    lua_newtable(L); /* read after its call: the event has no fields */
  lua_pushnil(L);
  return 3;
}

/* Pushes the policy event of P1 for pn. The engine reuses one table for
   every call that is not nested in another; its fields are read through
   event_index when the policy asks for them. A nested call gets a new
   table with every field. [-0, +1, m] */
static void push_policy_event(arbor_engine *e, pnode *pn, lua_State *L) {
  if (e->policy_depth > 0) {
    push_full_event(e, pn, L);
    return;
  }
  if (e->policy_ev_ref == LUA_NOREF) {
    lua_createtable(L, 0, 1);
    lua_createtable(L, 0, 2);
    lua_pushlightuserdata(L, e);
    lua_pushcclosure(L, event_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushlightuserdata(L, e);
    lua_pushcclosure(L, event_pairs, 1);
    lua_setfield(L, -2, "__pairs");
    lua_setmetatable(L, -2);
    e->policy_ev_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, e->policy_ev_ref);
  if (e->ev_cached) {
    lua_pushnil(L);
    lua_setfield(L, -2, "failures");
    e->ev_cached = 0;
  }
  e->ev_pn = pn;
}

enum { DECIDE_RESTART, DECIDE_STOP, DECIDE_ESCALATE, DECIDE_FAULTY };

/* Interprets the value on top of L (popped) as a decision. */
static int read_decision(lua_State *L, double *delay) {
  int d = DECIDE_FAULTY;
  if (lua_type(L, -1) == LUA_TNUMBER) {
    double v = lua_tonumber(L, -1);
    if (isfinite(v) && v >= 0) {
      *delay = v;
      d = DECIDE_RESTART;
    }
  } else if (lua_type(L, -1) == LUA_TSTRING) {
    const char *s = lua_tostring(L, -1);
    if (strcmp(s, "stop") == 0) d = DECIDE_STOP;
    if (strcmp(s, "escalate") == 0) d = DECIDE_ESCALATE;
  }
  lua_pop(L, 1);
  return d;
}

/* The node's policy decides, or the default one when it is faulty. */
static int consult(arbor_engine *e, pnode *pn, double *delay) {
  lua_State *L = e->L;
  int ref = pn->policy_ref != LUA_NOREF ? pn->policy_ref : e->default_policy_ref;
  for (int attempt = 0; attempt < 2; attempt++) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    push_policy_event(e, pn, L);
    pnode *outer = e->policy_pn;
    const void *outer_ev = e->policy_ev;
    e->policy_pn = pn;
    e->policy_ev = lua_topointer(L, -1);
    e->policy_depth++;
    int st = arbor__call_budget(e, L, 1);
    e->policy_depth--;
    e->policy_pn = outer;
    e->policy_ev = outer_ev;
    if (e->policy_depth == 0) e->ev_pn = NULL; /* the event is read in its call */
    arbor_str *why = NULL;
    if (st == LUA_OK) {
      lua_pushvalue(L, -1);
      int d = read_decision(L, delay);
      if (d != DECIDE_FAULTY) {
        lua_pop(L, 1);
        return d;
      }
      const char *tn = luaL_typename(L, -1);
      char shown[64] = "";
      if (lua_type(L, -1) == LUA_TNUMBER || lua_type(L, -1) == LUA_TSTRING) {
        lua_pushvalue(L, -1); /* lua_tostring converts in place */
        snprintf(shown, sizeof shown, " %.40s", lua_tostring(L, -1));
        lua_pop(L, 1);
      }
      lua_pop(L, 1);
      why = arbor_str_fmt("faulty policy: returned %s%s (want a number >= 0, "
                          "\"stop\" or \"escalate\")%s",
                          tn, shown, attempt ? "" : "; the default decides");
    } else {
      arbor_str *msg = arbor__failure_message(e, L, NULL);
      why = arbor_str_fmt("faulty policy: %s%s", msg ? msg->s : "(error)",
                          attempt ? "" : "; the default decides");
      arbor_str_unref(msg);
      lua_pop(L, 1);
    }
    e->policy_faults++;
    arbor_engine_event(e, pn, ARBOR_EV_POLICY, why);
    arbor_engine_log(e, pn, why);
    arbor_str_unref(why);
    if (ref == e->default_policy_ref) break;
    ref = e->default_policy_ref;
  }
  *delay = 1.0; /* the default itself failed: retry in a second */
  return DECIDE_RESTART;
}

/* Asks pn's policy (or the default) what to do after a death. */
static int ask_policy(arbor_engine *e, pnode *pn, double *delay) {
  e->policy_calls++;
  arbor_engine *prev = arbor__current;
  arbor__current = e;
  int d = consult(e, pn, delay);
  arbor__current = prev;
  return d;
}

/* arbor.policy.never is one function (never() returns it too): a node
   whose policy, or the default it falls back on, is that function is
   temporary. Asked on a group's death and a significant child's end only,
   not per restart. */
int arbor__decide_temporary(arbor_engine *e, const pnode *pn) {
  int ref = pn->policy_ref != LUA_NOREF ? pn->policy_ref : e->default_policy_ref;
  if (ref == LUA_NOREF) return 0;
  lua_State *L = e->L;
  int top = lua_gettop(L), temporary = 0;
  if (lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE) == LUA_TTABLE &&
      lua_getfield(L, -1, "arbor.policy") == LUA_TTABLE &&
      lua_getfield(L, -1, "never") == LUA_TFUNCTION) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    temporary = lua_rawequal(L, -1, -2);
  }
  lua_settop(L, top);
  return temporary;
}

int arbor__decide(arbor_engine *e, pnode *pn, double *delay) {
  *delay = 0;
  int d = ask_policy(e, pn, delay);
  arbor_str *r = d == DECIDE_STOP       ? e->r_stop
                 : d == DECIDE_ESCALATE ? e->r_escalate
                                        : NULL;
  arbor__emit_delay(e, pn, ARBOR_EV_POLICY, (arbor_state)pn->n.state,
                    (arbor_state)pn->n.state, r,
                    d == DECIDE_RESTART ? *delay : -1);
  pn->decision = d == DECIDE_STOP       ? DECISION_STOP
                 : d == DECIDE_ESCALATE ? DECISION_ESCALATE
                                        : DECISION_RESTART;
  return pn->decision;
}

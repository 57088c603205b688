/* l_view.c: what the engine shows of its nodes: node views (e:node, T13a),
 * tree snapshots (e:tree), the event history (e:events, T14), the tree
 * as JSON (core.tree_json, for `arbor ctl tree --json`; core.tree_render,
 * in slices, for /tree) and the nodes not ready (core.not_ready, for
 * /readyz).
 *
 * Every field is read by one function (field) into a typed value, which
 * is then pushed as Lua or written as JSON: e:tree() and tree --json are
 * made from the same table and cannot drift.
 */
#include <lauxlib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/internal.h"
#include "engine/lifecycle.h"
#include "lua/l_arbor.h"
#include "lua/l_render.h"
#include "proc/nodes.h"

/* The fields of a node view (T13a), in one table: their index (F_*), Lua
   name and JSON key all come from it. Tree snapshots and tree --json have
   the summary fields, in this order; dn comes first. */
#define SUMMARY_FIELDS(X)                                                      \
  X(DN, dn) X(NAME, name) X(STATE, state) X(RESTARTS, restarts)                \
  X(INCARNATION, incarnation) X(UPTIME, uptime) X(ERROR, error)                \
  X(BLOCKED, blocked) X(LIFECYCLE, lifecycle) X(SIDECAR, sidecar)              \
  X(COORDINATOR, coordinator) X(GATED, gated) X(PID, pid) X(PIDS, pids)        \
  X(LAST_EXIT, last_exit) X(RESTART_IN, restart_in) X(NOTE, note)            \
  X(OVERRIDDEN, overridden)
#define DETAIL_FIELDS(X)                                                       \
  X(CONSECUTIVE, consecutive) X(TRACEBACK, traceback) X(RETIRED, retired)      \
  X(RUNNING, running) X(CANCELED, canceled) X(HELD, held) X(FORCED, forced)    \
  X(PENDING, pending) X(RESTART_AT, restart_at) X(STARTED, started)            \
  X(EXITED, exited) X(SHUTDOWN, shutdown) X(LIVE, live)                        \
  X(DECISION, decision) X(WAITING_FOR, waiting_for)                            \
  X(WAITING_MEMBER, waiting_member) X(STRATEGY, strategy)                      \
  X(ORDERED, ordered) X(SIGNIFICANT, significant)                              \
  X(AUTO_SHUTDOWN, auto_shutdown) X(STOPPING, stopping)                        \
  X(AUTO_DONE, auto_done) X(PARENT, parent) X(CHILDREN, children)

#define F_ENUM(id, name) F_##id,
#define F_NAME(id, name) #name,
#define F_KEY(id, name) ",\"" #name "\":",
#define F_ONE(id, name) +1
enum { SUMMARY_FIELDS(F_ENUM) DETAIL_FIELDS(F_ENUM) F_COUNT };
enum { F_SUMMARY = 0 SUMMARY_FIELDS(F_ONE) };
static const char *const field_names[F_COUNT] = {
    SUMMARY_FIELDS(F_NAME) DETAIL_FIELDS(F_NAME)};
/* ,"name": of each summary field (the first goes without its comma) */
static const char *const json_keys[F_SUMMARY] = {SUMMARY_FIELDS(F_KEY)};

/* A field's value. V_WORD is a static name (a state...) without its
   length: nothing in it needs escaping in JSON. */
typedef enum {
  V_NONE, V_BOOL, V_INT, V_NUM, V_STR, V_WORD, V_DN, V_CHILDREN, V_PIDS,
  V_EXIT
} vkind;

/* A node's processes' pids (V_PIDS): at most this many are shown. */
#define VIEW_PIDS 64

typedef struct value {
  vkind kind;
  union {
    int b;
    lua_Integer i;
    double d;
    struct {
      const char *s;
      size_t len;
    } str;
    const arbor_node *node; /* V_DN: its DN; V_CHILDREN: its children's names */
    struct {                /* V_PIDS: in the view's scratch */
      const int *pid;
      size_t n;
    } pids;
    struct {                /* V_EXIT: the last exit */
      double at, ago;
      const char *state;    /* the state it ended in, while not running */
      const arbor_str *reason;
    } exit;
  } u;
} value;

/* The processes of arbor's sessions as /proc had them: pid and process
   group of each live one (arbor_proc_scan_own: never every process of the
   host); read once per view, at the first node with processes. */
typedef struct ptab {
  int (*row)[2];
  size_t n, cap;
} ptab;

/* One reading of the engine: its clock is read once, when a field first
   needs it, so every node of a snapshot has the same now. */
typedef struct view {
  arbor_engine *e;
  double now; /* NAN until read */
  int scanned;  /* ptab was read for this view */
  int pids[VIEW_PIDS]; /* scratch of V_PIDS */
} view;

/* Shared by every view (one at a time runs; it is refilled by each). */
static ptab procs_table;

static int add_proc(int pid, int pgrp, const char *stat, void *ud) {
  (void)stat;
  ptab *t = ud;
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 256;
    void *row = realloc(t->row, cap * sizeof *t->row);
    if (!row) return 1;
    t->row = row, t->cap = cap;
  }
  t->row[t->n][0] = pid;
  t->row[t->n][1] = pgrp;
  t->n++;
  return 0;
}

/* Reads /proc into procs_table: the pid and process group of every process
   of arbor's sessions that is not a zombie. Left empty when /proc cannot
   be read. */
static void scan_procs(view *v) {
  if (v->scanned) return;
  v->scanned = 1;
  procs_table.n = 0;
  arbor_proc_scan_own(add_proc, &procs_table);
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* The processes of pn's running incarnation: its main pid (the newest
   process whose main process runs; 0 when none), or (all set) the pids of
   the members of their process groups into v->pids, sorted; returns how
   many. Only a node whose incarnation started processes has any. */
static size_t node_pids(view *v, pnode *pn, int all) {
  if (!(pn->pflags & PN_PROCS)) return 0;
  arbor_proc *ps[16];
  size_t np = arbor_proc_of_node(pn, ps, 16);
  if (np > 16) np = 16;
  if (!all) {
    for (size_t i = 0; i < np; i++)
      if (arbor_proc_running(ps[i])) return (size_t)arbor_proc_pid(ps[i]);
    return 0;
  }
  if (np == 0) return 0;
  scan_procs(v);
  size_t n = 0;
  for (size_t i = 0; i < np; i++) {
    int pg = arbor_proc_pid(ps[i]); /* it leads its own group */
    if (arbor_proc_running(ps[i]) && n < VIEW_PIDS) v->pids[n++] = pg;
    for (size_t r = 0; r < procs_table.n && n < VIEW_PIDS; r++)
      if (procs_table.row[r][1] == pg && procs_table.row[r][0] != pg)
        v->pids[n++] = procs_table.row[r][0];
  }
  qsort(v->pids, n, sizeof *v->pids, cmp_int);
  return n;
}

static double view_now(view *v) {
  if (isnan(v->now)) v->now = arbor_engine_now(v->e);
  return v->now;
}

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

static vkind set_bool(value *out, int b) {
  out->u.b = b != 0;
  return out->kind = V_BOOL;
}

static vkind set_int(value *out, lua_Integer i) {
  out->u.i = i;
  return out->kind = V_INT;
}

static vkind set_num(value *out, double d) {
  out->u.d = d;
  return out->kind = V_NUM;
}

static vkind set_str(value *out, const char *s, size_t len) {
  out->u.str.s = s;
  out->u.str.len = len;
  return out->kind = s ? V_STR : V_NONE;
}

static vkind set_node(value *out, const arbor_node *n, vkind kind) {
  out->u.node = n;
  return out->kind = n ? kind : V_NONE;
}

/* Reads field f of pn into *out; returns its kind, V_NONE when pn has no
   such field now (no error, not started, no coordinator...). Inlined into
   both writers: a call per field made e:tree() 4% dearer. */
static inline __attribute__((always_inline)) vkind
field(view *v, pnode *pn, int f, value *out) {
  static const char *const decisions[] = {NULL, "restart", "stop", "escalate"};
  static const char *const strategies[] = {"one_for_all", "rest_for_one",
                                           "one_for_one", "one_for_all"};
  static const char *const autos[] = {NULL, "any_significant",
                                      "all_significant", NULL};
  arbor_node *n = &pn->n;
  int running = arbor_node_running(n);
  const char *s = NULL;
  switch (f) {
  case F_DN: return set_node(out, n, V_DN);
  case F_NAME: return set_str(out, n->name, n->namelen);
  case F_STATE: s = arbor_state_name((arbor_state)n->state); break;
  case F_RESTARTS: return set_int(out, pn->restarts);
  case F_INCARNATION: return set_int(out, (lua_Integer)n->incarnation);
  case F_UPTIME: /* since it became HEALTHY, while it runs */
    if (!running || pn->healthy_at < 0) break;
    return set_num(out, view_now(v) - pn->healthy_at);
  case F_ERROR:
    if (!pn->error) break;
    return set_str(out, pn->error->s, pn->error->len);
  case F_BLOCKED: return set_bool(out, arbor_lc_blocked(pn));
  case F_LIFECYCLE: s = arbor_lc_name(pn_lc(pn)); break;
  case F_SIDECAR: return set_bool(out, pn_lc(pn) & ARBOR_LC_SIDECAR);
  case F_COORDINATOR: s = arbor_lc_state(pn); break;
  case F_GATED:
    if (!arbor_lc_state(pn)) break;
    return set_bool(out, arbor_lc_gated(pn));
  case F_PID: {
    size_t pid = node_pids(v, pn, 0);
    if (!pid) break;
    return set_int(out, (lua_Integer)pid);
  }
  case F_PIDS: {
    size_t k = node_pids(v, pn, 1);
    if (!k) break;
    out->u.pids.pid = v->pids;
    out->u.pids.n = k;
    return out->kind = V_PIDS;
  }
  case F_LAST_EXIT:
    if (n->incarnation <= (running ? 1u : 0u)) break; /* never exited */
    out->u.exit.at = pn->exited;
    out->u.exit.ago = view_now(v) - pn->exited;
    out->u.exit.state =
        running ? NULL : arbor_state_name((arbor_state)n->state);
    out->u.exit.reason = pn->error;
    return out->kind = V_EXIT;
  case F_RESTART_IN:
    if (!arbor_timer_armed(&pn->wake) || pn->wake.kind != TIMER_RESTART)
      break;
    return set_num(out, pn->wake.due - view_now(v));
  case F_NOTE: /* why a node that does not run is down (arbor ctl status) */
    if (running) break;
    if (arbor_timer_armed(&pn->wake) && pn->wake.kind == TIMER_RESTART) {
      if (n->state == ARBOR_DEAD && pn->consecutive >= 2) s = "crash-looping";
    } else if ((n->flags & ARBOR_F_HELD) && n->state == ARBOR_DEAD &&
               pn->decision == DECISION_STOP) {
      s = "given up (policy stop)";
    } else if ((n->flags & ARBOR_F_HELD) && n->state == ARBOR_DEAD &&
               pn->decision == DECISION_ESCALATE) {
      s = "given up (policy escalate)";
    } else if (n->flags & ARBOR_F_HELD) {
      s = "held";
    }
    break;
  case F_OVERRIDDEN: /* a runtime swap or policy (node.lua details which) */
    if (!(pn->pflags & PN_OVERRIDDEN)) break;
    return set_bool(out, 1);
  case F_CONSECUTIVE: return set_int(out, pn->consecutive);
  case F_TRACEBACK:
    if (!pn->trace) break;
    return set_str(out, pn->trace->s, pn->trace->len);
  case F_RETIRED: return set_bool(out, n->flags & ARBOR_F_RETIRED);
  case F_RUNNING: return set_bool(out, running);
  case F_CANCELED: return set_bool(out, arbor_node_canceled(n));
  case F_HELD: return set_bool(out, n->flags & ARBOR_F_HELD);
  case F_FORCED: return set_bool(out, n->flags & ARBOR_F_FORCED);
  case F_PENDING: return set_bool(out, n->flags & ARBOR_F_PENDING);
  case F_RESTART_AT:
    if (!arbor_timer_armed(&pn->wake) || pn->wake.kind != TIMER_RESTART)
      break;
    return set_num(out, pn->wake.due);
  case F_STARTED:
    if (n->incarnation == 0) break;
    return set_num(out, pn->started);
  case F_EXITED:
    if (running || n->incarnation == 0) break;
    return set_num(out, pn->exited);
  case F_SHUTDOWN: return set_num(out, pn->shutdown);
  case F_LIVE: return set_int(out, n->live);
  case F_DECISION: s = decisions[pn->decision]; break;
  case F_WAITING_FOR: /* what explain needs (issue 4) */
    return set_node(out, running_descendant(n), V_DN);
  case F_WAITING_MEMBER: {
    pnode *p = (n->flags & ARBOR_F_PENDING) && !arbor_timer_armed(&pn->wake)
                   ? arbor_engine_waits_for(pn)
                   : NULL;
    return set_node(out, p ? &p->n : NULL, V_DN);
  }
  case F_STRATEGY:
    if (pn->gflags & GF_MEMBER) s = strategies[pn->gflags & GF_STRATEGY];
    break;
  case F_ORDERED:
    if (!(pn->gflags & GF_MEMBER)) break;
    return set_bool(out, pn->gflags & GF_ORDERED);
  case F_SIGNIFICANT: return set_bool(out, pn->gflags & GF_SIGNIFICANT);
  case F_AUTO_SHUTDOWN: s = autos[(pn->gflags & GF_AUTO) >> 4]; break;
  case F_STOPPING: return set_bool(out, running && arbor_node_canceled(n));
  case F_AUTO_DONE:
    if (!(pn->pflags & PN_AUTODONE)) break;
    return set_bool(out, 1);
  case F_PARENT: return set_node(out, n->parent, V_DN);
  case F_CHILDREN: return set_node(out, n, V_CHILDREN);
  }
  out->u.str.s = s;
  return out->kind = s ? V_WORD : V_NONE;
}

/* ---- as Lua --------------------------------------------------------- */

/* [-0, +1 or +0, m] pushes field f of pn and returns 1, or returns 0 when
   pn has no such field now. */
static int push_field(lua_State *L, view *v, pnode *pn, int f) {
  value x;
  switch (field(v, pn, f, &x)) {
  case V_NONE: return 0;
  case V_BOOL: lua_pushboolean(L, x.u.b); break;
  case V_INT: lua_pushinteger(L, x.u.i); break;
  case V_NUM: lua_pushnumber(L, x.u.d); break;
  case V_STR: lua_pushlstring(L, x.u.str.s, x.u.str.len); break;
  case V_WORD: lua_pushstring(L, x.u.str.s); break; /* cached by address */
  case V_DN: arbor_push_dn(L, x.u.node); break;
  case V_CHILDREN: {
    lua_createtable(L, (int)x.u.node->nchildren, 0);
    lua_Integer i = 1;
    for (arbor_node *c = x.u.node->first; c; c = c->next) {
      lua_pushlstring(L, c->name, c->namelen);
      lua_rawseti(L, -2, i++);
    }
    break;
  }
  case V_PIDS:
    lua_createtable(L, (int)x.u.pids.n, 0);
    for (size_t i = 0; i < x.u.pids.n; i++) {
      lua_pushinteger(L, x.u.pids.pid[i]);
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    break;
  case V_EXIT:
    lua_createtable(L, 0, 4);
    lua_pushnumber(L, x.u.exit.at);
    lua_setfield(L, -2, "at");
    lua_pushnumber(L, x.u.exit.ago);
    lua_setfield(L, -2, "ago");
    if (x.u.exit.state) {
      lua_pushstring(L, x.u.exit.state);
      lua_setfield(L, -2, "state");
    }
    if (x.u.exit.reason) {
      lua_pushlstring(L, x.u.exit.reason->s, x.u.exit.reason->len);
      lua_setfield(L, -2, "reason");
    }
    break;
  }
  return 1;
}

/* [-0, +1, m] a table of pn's fields up to (not including) field `upto`.
   The field names are the Lua strings at [1..F_COUNT] of upvalue 1. */
static void push_fields(lua_State *L, view *v, pnode *pn, int upto) {
  lua_createtable(L, 0, upto);
  for (int f = 0; f < upto; f++) {
    lua_rawgeti(L, lua_upvalueindex(1), f + 1);
    if (push_field(L, v, pn, f))
      lua_rawset(L, -3);
    else
      lua_pop(L, 1);
  }
}

/* e:node(dn [, field]) -> the fields of T13a, or only that field's value
   (nil when the node has no such field); nil, "no node <dn>" when there is
   no node at dn. Upvalue 1 maps field names to their index + 1. */
static int l_node(lua_State *L) {
  view v = {.e = arbor_check_engine(L, 1), .now = NAN};
  size_t len;
  const char *dn = luaL_checklstring(L, 2, &len);
  arbor_node *n = arbor_tree_find(&v.e->tree, dn, len);
  if (!n) {
    lua_pushnil(L);
    lua_pushfstring(L, "no node %s", arbor_push_cut(L, dn, len));
    lua_remove(L, -2);
    return 2;
  }
  if (lua_isnoneornil(L, 3)) {
    push_fields(L, &v, (pnode *)n, F_COUNT);
    return 1;
  }
  lua_settop(L, 3);
  if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNUMBER ||
      !push_field(L, &v, (pnode *)n, (int)lua_tointeger(L, -1) - 1))
    lua_pushnil(L);
  return 1;
}

/* e:tree([dn]) -> nested {dn, name, state, restarts, error, incarnation,
   children = {...}}; iterative so deep trees do not overflow the C stack.
   Upvalue 1 is l_node's (the field names). */
static int l_tree(lua_State *L) {
  view v = {.e = arbor_check_engine(L, 1), .now = NAN};
  arbor_node *top = lua_isnoneornil(L, 2) ? v.e->tree.root
                                          : &arbor_check_node(L, v.e, 2)->n;
  lua_settop(L, 2);
  /* Stack holds the chain of "children" tables of the open ancestors. */
  arbor_node *n = top;
  lua_newtable(L); /* holder: result at [1] */
  for (;;) {
    luaL_checkstack(L, 4, "tree too deep");
    push_fields(L, &v, (pnode *)n, F_SUMMARY);
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

/* e:events([n [, after_seq]]) -> the last n events (all held by default),
   oldest first, optionally only those with seq > after_seq. */
static int l_events(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
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

/* ---- as JSON -------------------------------------------------------- */

/* Adds s as a JSON string: runs of plain bytes are copied whole, so a
   string of many megabytes is quoted in milliseconds. */
static void json_str(arbor_text *t, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  static const char short_esc[32] = {['\b'] = 'b', ['\f'] = 'f',
                                     ['\n'] = 'n', ['\r'] = 'r',
                                     ['\t'] = 't'};
  size_t run = 0; /* the first byte not added yet */
  arbor_text_put(t, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch >= 0x20 && ch != '"' && ch != '\\' && ch != 0x7f) continue;
    arbor_text_put(t, s + run, i - run);
    run = i + 1;
    char esc[6] = {'\\', (char)ch};
    if (ch == '"' || ch == '\\') {
      arbor_text_put(t, esc, 2);
    } else if (ch < 0x20 && short_esc[ch]) {
      esc[1] = short_esc[ch];
      arbor_text_put(t, esc, 2);
    } else {
      esc[1] = 'u', esc[2] = '0', esc[3] = '0';
      esc[4] = hex[ch >> 4], esc[5] = hex[ch & 15];
      arbor_text_put(t, esc, 6);
    }
  }
  arbor_text_put(t, s + run, n - run);
  arbor_text_put(t, "\"", 1);
}

/* Adds i in decimal (snprintf costs more than the rest of a field). */
static void json_int(arbor_text *t, lua_Integer i) {
  char num[24], *p = num + sizeof num;
  lua_Unsigned u = i < 0 ? 0u - (lua_Unsigned)i : (lua_Unsigned)i;
  do *--p = (char)('0' + u % 10); while (u /= 10);
  if (i < 0) *--p = '-';
  arbor_text_put(t, p, (size_t)(num + sizeof num - p));
}

static void json_num(arbor_text *t, double d) {
  char num[64];
  int n = snprintf(num, sizeof num, "%.6f", d);
  arbor_text_put(t, num, n > 0 ? (size_t)n : 0);
}

static void json_lit(arbor_text *t, const char *s) {
  arbor_text_put(t, s, strlen(s));
}

/* Adds a node's summary fields, as e:tree() has them, and the opening of
   its children array. */
static void json_node(arbor_text *t, view *v, pnode *pn) {
  arbor_text_put(t, "{", 1);
  for (int f = 0; f < F_SUMMARY; f++) {
    value x;
    if (field(v, pn, f, &x) == V_NONE) continue;
    json_lit(t, json_keys[f] + (f == F_DN)); /* dn: first, always */
    switch (x.kind) {
    case V_BOOL: json_lit(t, x.u.b ? "true" : "false"); break;
    case V_INT: json_int(t, x.u.i); break;
    case V_NUM: json_num(t, x.u.d); break;
    case V_PIDS:
      arbor_text_put(t, "[", 1);
      for (size_t i = 0; i < x.u.pids.n; i++) {
        if (i) arbor_text_put(t, ",", 1);
        json_int(t, x.u.pids.pid[i]);
      }
      arbor_text_put(t, "]", 1);
      break;
    case V_EXIT:
      json_lit(t, "{\"at\":");
      json_num(t, x.u.exit.at);
      json_lit(t, ",\"ago\":");
      json_num(t, x.u.exit.ago);
      if (x.u.exit.state) {
        json_lit(t, ",\"state\":\"");
        json_lit(t, x.u.exit.state);
        arbor_text_put(t, "\"", 1);
      }
      if (x.u.exit.reason) {
        json_lit(t, ",\"reason\":");
        json_str(t, x.u.exit.reason->s, x.u.exit.reason->len);
      }
      arbor_text_put(t, "}", 1);
      break;
    case V_STR: json_str(t, x.u.str.s, x.u.str.len); break;
    case V_WORD:
      arbor_text_put(t, "\"", 1);
      json_lit(t, x.u.str.s);
      arbor_text_put(t, "\"", 1);
      break;
    case V_DN: { /* a DN is made of [A-Za-z0-9_.-]: nothing to escape */
      size_t len = arbor_node_dn(x.u.node, NULL, 0);
      arbor_text_room(t, len + 3);
      ARBOR_TEXT_LIT(t, "\"");
      arbor_node_dn(x.u.node, t->s + t->len, len + 1);
      t->len += len;
      ARBOR_TEXT_LIT(t, "\"");
      break;
    }
    case V_NONE:
    case V_CHILDREN: break; /* not summary fields */
    }
  }
  json_lit(t, ",\"children\":[");
}

/* Where a render of the tree as JSON is: the depth of the node written
   last (its children array open), and whether that array is still
   empty. */
typedef struct jstate {
  unsigned depth;
  int empty;
} jstate;

/* kind.step of the tree as JSON: the shape's nodes from r->at, each read
   now (one view per step: its clock and its processes read in it); a
   discarded node is left out, its subtree with it. The top is written
   even when discarded, so the text is always one node. */
static int json_step(arbor_render *r, lua_State *L, uint64_t deadline) {
  (void)L;
  jstate *j = r->state;
  arbor_text *t = &r->text;
  view v = {.e = r->e, .now = NAN};
  for (size_t k = 1; r->at < r->shape.n; r->at++, k++) {
    if (k % ARBOR_RENDER_BATCH == 0 && arbor_render_due(deadline)) return 0;
    const arbor_shape_node *sn = &r->shape.v[r->at];
    if (r->at > 0) {
      if (sn->node->flags & ARBOR_F_DETACHED) continue;
      for (; j->depth >= sn->depth; j->depth--, j->empty = 0)
        json_lit(t, "]}");
      if (!j->empty) arbor_text_put(t, ",", 1);
    }
    json_node(t, &v, (pnode *)sn->node);
    j->depth = sn->depth;
    j->empty = 1;
  }
  for (unsigned d = 0; d <= j->depth; d++) json_lit(t, "]}");
  return 1;
}

static const arbor_render_kind json_kind = {json_step, NULL};

/* Pushes a render of the tree (or dn's subtree) as JSON: engine at 1, dn
   at 2. [-0, +1, m] */
static void push_json_render(lua_State *L, int chunked) {
  arbor_engine *e = arbor_check_engine(L, 1);
  arbor_node *top =
      lua_isnoneornil(L, 2) ? e->tree.root : &arbor_check_node(L, e, 2)->n;
  arbor_render_new(L, 1, &json_kind, sizeof(jstate), top, chunked,
                   e->tree.nnodes * 200 + 4096);
}

/* core.tree_json(engine [, dn]) -> the tree (or dn's subtree) as JSON, the
   fields of e:tree(); written in C because `arbor ctl tree --json` must
   stay fast on trees of 100,000 nodes. */
static int l_tree_json(lua_State *L) {
  lua_settop(L, 2);
  push_json_render(L, 0);
  return arbor_render_finish(L, -1);
}

/* core.tree_render(engine [, dn]) -> a render (l_render.h) of the same
   JSON in chunks, made in slices by its step method: what /tree
   serves. */
static int l_tree_render(lua_State *L) {
  lua_settop(L, 2);
  push_json_render(L, 1);
  return 1;
}

/* ---- not ready ------------------------------------------------------ */

/* core.not_ready(engine, max) -> text, n: the nodes that are neither
   HEALTHY nor DONE, in pre-order, as lines "<dn> <STATE>\n" for the first
   max of them, and how many there are in all. /readyz's answer: a walk
   without allocation past the lines, so a probe of a tree of 100,000 nodes
   costs about a millisecond. */
static int l_not_ready(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  lua_Integer max = luaL_checkinteger(L, 2);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  lua_Integer n = 0;
  arbor_node *top = e->tree.root, *c = top;
  while (c) {
    if (c->state != ARBOR_HEALTHY && c->state != ARBOR_DONE && n++ < max) {
      size_t len = arbor_node_dn(c, NULL, 0);
      arbor_node_dn(c, luaL_prepbuffsize(&b, len + 1), len + 1);
      luaL_addsize(&b, len);
      luaL_addchar(&b, ' ');
      luaL_addstring(&b, arbor_state_name((arbor_state)c->state));
      luaL_addchar(&b, '\n');
    }
    if (c->first) {
      c = c->first;
      continue;
    }
    while (c != top && !c->next) c = c->parent;
    c = c == top ? NULL : c->next;
  }
  luaL_pushresult(&b);
  lua_pushinteger(L, n);
  return 2;
}

/* ---- registration --------------------------------------------------- */

/* [-0, +0, m] adds e:node, e:tree and e:events to the engine's methods
   (arbor_open_engine ran), core.tree_json, core.tree_render and
   core.not_ready to the module table on top. */
void arbor_open_view(lua_State *L) {
  luaL_getmetatable(L, ARBOR_ENGINE_MT);
  lua_getfield(L, -1, "__index");
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
  lua_pushcfunction(L, l_events);
  lua_setfield(L, -2, "events");
  lua_pop(L, 2);
  static const luaL_Reg funcs[] = {
      {"tree_json", l_tree_json},
      {"tree_render", l_tree_render},
      {"not_ready", l_not_ready},
      {NULL, NULL},
  };
  luaL_setfuncs(L, funcs, 0);
}

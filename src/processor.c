/* processor.c: the engine's event processing. See processor.h.
 *
 * Everything happens on one thread. libuv callbacks (and the harness) only
 * fire timers and enqueue incarnations; drain() is the single place that
 * resumes coroutines, so resumes never nest. When an incarnation ends, its
 * exit is classified, death is spread, ordered stops advance, and the GC
 * decides a restart in O(depth), all before the next resume.
 */
#include "processor.h"

#include <lauxlib.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gc.h"
#include "watchdog.h"

static arbor_engine *current_engine;

static int runner(lua_State *L);

arbor_engine *arbor_engine_current(void) { return current_engine; }

/* The cancellation error: a unique table with a __tostring. */
static const char canceled_key = 'c';

static int canceled_tostring(lua_State *L) {
  lua_pushliteral(L, "canceled");
  return 1;
}

void arbor_push_canceled(lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &canceled_key) == LUA_TNIL) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_newtable(L);
    lua_pushcfunction(L, canceled_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, "arbor.canceled");
    lua_setfield(L, -2, "__name");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &canceled_key);
  }
}

int arbor_is_canceled(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  arbor_push_canceled(L);
  int r = lua_rawequal(L, idx, -1);
  lua_pop(L, 1);
  return r;
}

/* ---- clock ---------------------------------------------------------- */

double arbor_engine_now(arbor_engine *e) {
  if (e->virtual_clock) return e->vnow;
  return (double)(uv_hrtime() - e->t0) / 1e9;
}

/* The time of the current step: read once per resume or timer pass, so one
   restart does not read the clock a dozen times. */
static double step_time(arbor_engine *e) {
  return e->virtual_clock ? e->vnow : e->step_now;
}

static void step_begin(arbor_engine *e) {
  if (!e->virtual_clock) e->step_now = arbor_engine_now(e);
}

/* xorshift64*: the engine's seedable generator (P5). */
uint64_t arbor_engine_random(arbor_engine *e) {
  uint64_t x = e->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  e->rng = x;
  return x * 2685821657736338717ull;
}

/* ---- events --------------------------------------------------------- */

/* Records an event; with subscribers, a copy waits in the outbox for them,
   so a step that emits more events than the ring holds loses none. */
static void emit_delay(arbor_engine *e, pnode *pn, arbor_event_kind kind,
                       arbor_state from, arbor_state to, arbor_str *reason,
                       double delay) {
  uint64_t seq = arbor_ring_push(&e->ring, step_time(e), &pn->n, kind, from,
                                 to, reason);
  arbor_event *ev = (arbor_event *)arbor_ring_get(&e->ring, seq);
  ev->delay = delay;
  if (e->outbox.ev) arbor_ring_copy(&e->outbox, ev);
}

static void emit(arbor_engine *e, pnode *pn, arbor_event_kind kind,
                 arbor_state from, arbor_state to, arbor_str *reason) {
  emit_delay(e, pn, kind, from, to, reason, -1);
}

void arbor_engine_emit_state(arbor_engine *e, pnode *pn, arbor_state from,
                             arbor_state to, arbor_str *reason) {
  emit(e, pn, ARBOR_EV_STATE, from, to, reason);
}

void arbor_engine_event(arbor_engine *e, pnode *pn, arbor_event_kind kind,
                        arbor_str *reason) {
  emit(e, pn, kind, (arbor_state)pn->n.state, (arbor_state)pn->n.state,
       reason);
}

static arbor_str *reason_lit(const char *s) {
  return arbor_str_new(s, strlen(s));
}

/* Calls the subscribers for every event they have not seen. A subscriber
   that raises is removed and the error logged on the root. */
static void deliver_events(arbor_engine *e);

/* ---- ready queue and timers ----------------------------------------- */

/* An active idle handle keeps the loop from blocking in poll, so work
   enqueued from outside a drain runs in this loop iteration. */
static void on_idle(uv_idle_t *h) { (void)h; }

static void need_drain(arbor_engine *e) {
  if (e->loop && !e->draining && !uv_is_active((uv_handle_t *)&e->idle))
    uv_idle_start(&e->idle, on_idle);
}

static void enqueue(arbor_engine *e, pnode *pn) {
  if (pn->pflags & PN_QUEUED) return;
  pn->pflags |= PN_QUEUED;
  pn->ready_next = NULL;
  if (e->ready_tail)
    e->ready_tail->ready_next = pn;
  else
    e->ready_head = pn;
  e->ready_tail = pn;
  e->ready_len++;
  need_drain(e);
}

static void dequeue(arbor_engine *e, pnode *pn) {
  if (!(pn->pflags & PN_QUEUED)) return;
  pnode **p = &e->ready_head, *prev = NULL;
  while (*p && *p != pn) {
    prev = *p;
    p = &(*p)->ready_next;
  }
  if (*p) {
    *p = pn->ready_next;
    if (e->ready_tail == pn) e->ready_tail = prev;
    e->ready_len--;
  }
  pn->ready_next = NULL;
  pn->pflags &= (uint8_t)~PN_QUEUED;
}

static void arm(arbor_engine *e, arbor_timer *t, int kind, double due) {
  t->kind = kind;
  if (arbor_sched_arm(&e->sched, t, due) < 0) abort(); /* out of memory */
}

/* ---- starting incarnations ------------------------------------------ */

static void set_reason(arbor_engine *e, arbor_str *r) {
  arbor_str_unref(e->reason);
  e->reason = r;
}

void arbor_engine_start(arbor_engine *e, pnode *pn) {
  lua_State *L = e->L;
  arbor_state from = (arbor_state)pn->n.state;
  arbor_sched_disarm(&e->sched, &pn->wake);
  if (pn->n.incarnation > 0) {
    pn->restarts++;
    e->restarts++;
  }
  arbor_tree_start(&pn->n);
  pn->pflags = 0;
  pn->wait = WAIT_NONE;
  pn->resume = RESUME_VALUES;
  pn->shield = 0;
  pn->done = 0;
  pn->started = step_time(e);
  lua_State *co;
  if (e->npool > 0) {
    e->npool--;
    co = e->pool[e->npool].co;
    pn->co_ref = e->pool[e->npool].ref;
  } else {
    co = lua_newthread(L);
    pn->co_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  pn->co = co;
  lua_pushcfunction(co, runner);
  lua_rawgeti(co, LUA_REGISTRYINDEX, pn->fn_ref);
  arbor_push_ctx(co, pn);
  pn->nargs = 2;
  emit(e, pn, ARBOR_EV_STATE, from, ARBOR_NEW,
       pn->n.incarnation > 1 ? e->r_restart : e->r_start);
  enqueue(e, pn);
}

/* ---- exits ---------------------------------------------------------- */

static void stop_advance(arbor_engine *e, pnode *pn);
static void after_exit(arbor_engine *e, pnode *pn);
static void decide(arbor_engine *e, pnode *pn);

/* T6: a node that died has its own context canceled (its subtree stops,
   children first) and so have the other members of its group. */
static void spread_death(arbor_engine *e, pnode *pn) {
  arbor_tree_cancel(&pn->n);
  stop_advance(e, pn);
  for (arbor_node *g = pn->n.gnext; g != &pn->n; g = g->gnext) {
    arbor_tree_cancel(g);
    stop_advance(e, (pnode *)g);
    if (g->live == 0) after_exit(e, (pnode *)g);
  }
}

/* Releases the incarnation's coroutine; pending <close> variables run. A
   thread that reset cleanly is kept for a later incarnation: reset, it is
   as fresh as a new one, and reusing it spares the allocator and the GC. */
static void close_coroutine(arbor_engine *e, pnode *pn) {
  if (!pn->co) return;
  if (lua_status(pn->co) != LUA_OK) /* suspended, or died outside runner */
    lua_resetthread(pn->co); /* returns the error the thread died with */
  lua_settop(pn->co, 0);     /* which it leaves on the stack */
  if (e->npool < ARBOR_THREAD_POOL && !e->closing) {
    e->pool[e->npool].co = pn->co;
    e->pool[e->npool].ref = pn->co_ref;
    e->npool++;
  } else {
    luaL_unref(e->L, LUA_REGISTRYINDEX, pn->co_ref);
  }
  pn->co = NULL;
  pn->co_ref = LUA_NOREF;
}

static void record_failure(arbor_engine *e, pnode *pn) {
  pn->consecutive++;
  if (!pn->failures) {
    pn->failures = calloc(ARBOR_FAILURES, sizeof(double));
    if (!pn->failures) return;
  }
  unsigned idx = (pn->fail_start + pn->nfail) % ARBOR_FAILURES;
  pn->failures[idx] = step_time(e);
  if (pn->nfail < ARBOR_FAILURES)
    pn->nfail++;
  else
    pn->fail_start = (uint8_t)((pn->fail_start + 1) % ARBOR_FAILURES);
}

/* Ends pn's incarnation in state s. reason (taken) is the error message for
   DEAD, or a note; trace (taken) the traceback. */
static void node_exit(arbor_engine *e, pnode *pn, arbor_state s,
                      arbor_str *reason, arbor_str *trace) {
  dequeue(e, pn);
  close_coroutine(e, pn);
  arbor_sched_disarm(&e->sched, &pn->wake);
  arbor_sched_disarm(&e->sched, &pn->deadline);
  pn->wait = WAIT_NONE;
  pn->exited = step_time(e);
  int declared = (pn->n.flags & ARBOR_F_DECLARED) != 0;
  if (s == ARBOR_DEAD && !declared) {
    record_failure(e, pn);
    arbor_str_set(&pn->error, reason);
    arbor_str_set(&pn->trace, trace);
  } else if (s == ARBOR_CANCELED && reason && !declared) {
    arbor_str_set(&pn->error, reason);
  }
  set_reason(e, reason);
  arbor_str_unref(trace);
  arbor_tree_exit(&pn->n, s);
  set_reason(e, NULL);
  if (s == ARBOR_DEAD && !declared) spread_death(e, pn);
  after_exit(e, pn);
}

/* Walks up from a node whose subtree may just have exited: ordered stops
   waiting on it advance, and the GC decides a restart. O(depth). */
static void after_exit(arbor_engine *e, pnode *pn) {
  arbor_node *a = &pn->n;
  while (a->parent && a->live == 0) {
    pnode *p = (pnode *)a->parent;
    if ((p->pflags & PN_STOPPING) && p->stop_cursor == (pnode *)a)
      stop_advance(e, p);
    a = a->parent;
  }
  /* Group siblings canceled while already exited are candidates too. */
  arbor_node *cand = arbor_gc_candidate(&pn->n);
  if (cand) decide(e, (pnode *)cand);
}

/* ---- cancellation and ordered stop (T7, T12) ------------------------ */

/* Tells pn's incarnation it is canceled: its blocking calls raise from now
   on, and it has `shutdown` seconds to exit. */
static void notify(arbor_engine *e, pnode *pn) {
  if (!arbor_node_running(&pn->n) || (pn->pflags & PN_NOTIFIED)) return;
  pn->pflags |= PN_NOTIFIED;
  arm(e, &pn->deadline, TIMER_DEADLINE, step_time(e) + pn->shutdown);
  if (!(pn->pflags & PN_RESUMED)) {
    /* never ran: it ends CANCELED without running (T8) */
    pn->resume = RESUME_CANCEL;
    enqueue(e, pn);
  } else if (pn->wait != WAIT_NONE && pn->shield == 0) {
    arbor_sched_disarm(&e->sched, &pn->wake);
    pn->wait = WAIT_NONE;
    pn->resume = RESUME_CANCEL;
    enqueue(e, pn);
  }
}

/* Advances the ordered stop of pn: its running children are stopped one at
   a time, last started first; when none is left, pn itself is notified.
   Iterative: descends into the child being stopped. */
static void stop_advance(arbor_engine *e, pnode *pn) {
  while (pn && arbor_node_canceled(&pn->n)) {
    arbor_node *c;
    if (!(pn->pflags & PN_STOPPING)) {
      pn->pflags |= PN_STOPPING;
      c = pn->n.last;
    } else {
      c = pn->stop_cursor ? &pn->stop_cursor->n : NULL;
    }
    while (c && c->live == 0) c = c->prev;
    pn->stop_cursor = (pnode *)c;
    if (!c) {
      pn->pflags &= (uint8_t)~PN_STOPPING;
      notify(e, pn);
      return;
    }
    pnode *child = (pnode *)c;
    if (child->pflags & PN_STOPPING) return; /* already under way */
    pn = child;
  }
}

void arbor_engine_cancel(arbor_engine *e, pnode *pn) {
  arbor_tree_cancel(&pn->n);
  stop_advance(e, pn);
  if (pn->n.live == 0) after_exit(e, pn);
}

void arbor_engine_hold(arbor_engine *e, pnode *pn) {
  pn->n.flags |= ARBOR_F_HELD;
  if (pn->n.flags & ARBOR_F_PENDING) {
    /* a delayed restart: it will not happen */
    arbor_sched_disarm(&e->sched, &pn->wake);
    pn->n.flags &= (uint8_t)~ARBOR_F_PENDING;
    set_reason(e, reason_lit("held"));
    arbor_tree_set_state(&pn->n, ARBOR_CANCELED);
    set_reason(e, NULL);
  }
  arbor_engine_cancel(e, pn);
}

void arbor_engine_stop(arbor_engine *e) {
  e->stop_requested = 1;
  arbor_engine_hold(e, (pnode *)e->tree.root);
}

int arbor_engine_restart(arbor_engine *e, pnode *pn, const char **err) {
  arbor_node *n = &pn->n;
  if (n->parent && arbor_node_canceled(n->parent)) {
    *err = "its parent is being stopped";
    return -1;
  }
  n->flags &= (uint8_t)~ARBOR_F_HELD;
  if (!n->parent) e->stop_requested = 0, e->gave_up = 0;
  if (n->flags & ARBOR_F_PENDING) {
    arbor_engine_start(e, pn);
    return 0;
  }
  if (n->live > 0 || n->state == ARBOR_DONE || n->state == ARBOR_NEW ||
      n->state == ARBOR_HEALTHY) {
    arbor_engine_cancel(e, pn); /* restarts once its subtree exited */
    return 0;
  }
  /* exited and held (given up, or stopped by hand): restart now */
  arbor_gc_reset(n);
  arbor_engine_start(e, pn);
  return 0;
}

int arbor_engine_fail(arbor_engine *e, pnode *pn) {
  lua_State *L = e->L;
  if (!arbor_node_running(&pn->n)) {
    lua_pop(L, 1);
    return -1;
  }
  luaL_unref(L, LUA_REGISTRYINDEX, pn->fail_ref);
  pn->fail_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  pn->resume = RESUME_FAIL;
  arbor_sched_disarm(&e->sched, &pn->wake);
  pn->wait = WAIT_NONE;
  enqueue(e, pn);
  return 0;
}

/* ---- tree hooks ----------------------------------------------------- */

static void hook_state(arbor_node *n, arbor_state from, void *ud) {
  arbor_engine *e = ud;
  pnode *pn = (pnode *)n;
  if (from == (arbor_state)n->state) return;
  if (n->state == ARBOR_CANCELED && !arbor_node_running(n))
    arbor_sched_disarm(&e->sched, &pn->wake); /* a pending start canceled */
  emit(e, pn, ARBOR_EV_STATE, from, (arbor_state)n->state, e->reason);
}

/* A discarded node: its incarnation, Lua references and records go now;
   the memory stays while events or ctx objects reference it. */
static void hook_detached(arbor_node *n, void *ud) {
  arbor_engine *e = ud;
  pnode *pn = (pnode *)n;
  lua_State *L = e->L;
  arbor_sched_disarm(&e->sched, &pn->wake);
  arbor_sched_disarm(&e->sched, &pn->deadline);
  dequeue(e, pn);
  close_coroutine(e, pn);
  luaL_unref(L, LUA_REGISTRYINDEX, pn->fn_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, pn->policy_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, pn->fail_ref);
  pn->fn_ref = pn->policy_ref = pn->fail_ref = LUA_NOREF;
  arbor_str_set(&pn->error, NULL);
  arbor_str_set(&pn->trace, NULL);
  free(pn->failures);
  pn->failures = NULL;
  pn->nfail = 0;
  if (pn->logs) {
    for (unsigned i = 0; i < pn->logs->len; i++)
      arbor_str_unref(pn->logs->line[(pn->logs->start + i) % ARBOR_LOG_LINES]);
    free(pn->logs);
    pn->logs = NULL;
  }
}

/* The engine outlives its nodes: once closed, it is freed with the last
   node that something (a ctx kept by Lua code) still referenced. */
static void hook_release(arbor_node *n, void *ud) {
  arbor_engine *e = ud;
  (void)n;
  if (e->zombie && e->tree.allocated == 0) free(e);
}

/* ---- nodes ---------------------------------------------------------- */

static void pnode_init(pnode *pn) {
  pn->co_ref = pn->fn_ref = pn->policy_ref = pn->fail_ref = LUA_NOREF;
  pn->shutdown = 5.0;
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

const char *arbor_engine_signal(arbor_engine *e, pnode *pn, const char *what) {
  arbor_node *n = &pn->n;
  if (strcmp(what, "healthy") == 0) {
    if (n->state != ARBOR_NEW) return "healthy";
    pn->consecutive = 0;
    arbor_tree_set_state(n, ARBOR_HEALTHY);
    return NULL;
  }
  if (strcmp(what, "done") == 0) {
    if (n->state != ARBOR_HEALTHY) return "done";
    pn->consecutive = 0;
    pn->done = 1;
    arbor_tree_set_state(n, ARBOR_DONE);
    return NULL;
  }
  return "unknown";
}

void arbor_engine_park(arbor_engine *e, pnode *pn, int wait, double seconds) {
  pn->wait = (uint8_t)wait;
  pn->wait_seq++;
  if (wait == WAIT_SLEEP)
    arm(e, &pn->wake, TIMER_WAKE, step_time(e) + seconds);
}

int arbor_engine_unpark(arbor_engine *e, pnode *pn, uint32_t seq, lua_State *L,
                        int nvals) {
  if (!arbor_node_running(&pn->n) || pn->wait != WAIT_PARK ||
      pn->wait_seq != seq || pn->resume != RESUME_VALUES)
    return 0;
  lua_xmove(L, pn->co, nvals);
  pn->nargs = (uint8_t)nvals;
  pn->wait = WAIT_NONE;
  enqueue(e, pn);
  return 1;
}

void arbor_engine_log(arbor_engine *e, pnode *pn, arbor_str *line) {
  if (!pn->logs) {
    pn->logs = calloc(1, sizeof *pn->logs);
    if (!pn->logs) return;
  }
  arbor_logs *lg = pn->logs;
  unsigned idx = (lg->start + lg->len) % ARBOR_LOG_LINES;
  if (lg->len == ARBOR_LOG_LINES) {
    arbor_str_unref(lg->line[idx]);
    lg->start = (lg->start + 1) % ARBOR_LOG_LINES;
  } else {
    lg->len++;
  }
  lg->line[idx] = arbor_str_ref(line);
  lg->time[idx] = step_time(e);
  if (e->log_ref != LUA_NOREF) {
    lua_State *L = e->L;
    char buf[1024];
    size_t dl = arbor_node_dn(&pn->n, buf, sizeof buf);
    lua_rawgeti(L, LUA_REGISTRYINDEX, e->log_ref);
    lua_pushlstring(L, buf, dl < sizeof buf ? dl : sizeof buf - 1);
    lua_pushlstring(L, line->s, line->len);
    lua_pushnumber(L, step_time(e));
    if (lua_pcall(L, 3, 0, 0) != LUA_OK) lua_pop(L, 1);
  }
}

/* ---- resuming ------------------------------------------------------- */

/* [-0, +1, -] the error object at idx as a string, never raising. */
static int tostring_k(lua_State *L) {
  luaL_tolstring(L, 1, NULL);
  return 1;
}

/* s as a string, sharing `same` when it holds the same bytes: a crash loop
   repeats its error, and this spares an allocation per restart. */
static arbor_str *str_reuse(arbor_str *same, const char *s, size_t len) {
  if (same && same->len == len && memcmp(same->s, s, len) == 0)
    return arbor_str_ref(same);
  return arbor_str_new(s, len);
}

static arbor_str *error_message(arbor_engine *e, lua_State *co, pnode *pn) {
  size_t len;
  if (lua_type(co, -1) == LUA_TSTRING) {
    const char *s = lua_tolstring(co, -1, &len);
    return str_reuse(pn->error, s, len);
  }
  lua_State *L = e->L;
  if (luaL_getmetafield(co, -1, "__tostring") != LUA_TNIL) {
    lua_pop(co, 1);
    lua_pushcfunction(L, tostring_k);
    lua_pushvalue(co, -1);
    lua_xmove(co, L, 1);
    if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_type(L, -1) == LUA_TSTRING) {
      const char *s = lua_tolstring(L, -1, &len);
      arbor_str *r = arbor_str_new(s, len);
      lua_pop(L, 1);
      return r;
    }
    lua_pop(L, 1);
    return arbor_str_fmt("(error object is a %s value whose __tostring failed)",
                         luaL_typename(co, -1));
  }
  if (lua_type(co, -1) == LUA_TNUMBER) {
    const char *s = lua_tolstring(co, -1, &len);
    return arbor_str_new(s, len);
  }
  return arbor_str_fmt("(error object is a %s value)", luaL_typename(co, -1));
}

/* Appends to a fixed buffer, truncating. */
typedef struct sbuf {
  char b[2048];
  size_t n;
} sbuf;

static void sb_add(sbuf *sb, const char *s, size_t len) {
  if (len > sizeof sb->b - 1 - sb->n) len = sizeof sb->b - 1 - sb->n;
  memcpy(sb->b + sb->n, s, len);
  sb->n += len;
}

static void sb_str(sbuf *sb, const char *s) { sb_add(sb, s, strlen(s)); }

static void sb_int(sbuf *sb, int v) {
  char tmp[16];
  size_t i = sizeof tmp;
  unsigned u = v < 0 ? 0u - (unsigned)v : (unsigned)v;
  do {
    tmp[--i] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0) tmp[--i] = '-';
  sb_add(sb, tmp + i, sizeof tmp - i);
}

/* The traceback of a dead coroutine, in luaL_traceback's format but without
   its search of package.loaded for function names (and without printf),
   which would cost more than the rest of a restart. */
static arbor_str *traceback(lua_State *co, int level, int skip_bottom,
                            pnode *pn) {
  sbuf sb;
  sb.n = 0;
  lua_Debug ar, below;
  sb_str(&sb, "stack traceback:");
  for (int first = level; lua_getstack(co, level, &ar); level++) {
    if (skip_bottom && !lua_getstack(co, level + 1, &below)) break;
    if (level - first >= 22) {
      sb_str(&sb, "\n\t...");
      break;
    }
    lua_getinfo(co, "Sln", &ar);
    sb_str(&sb, "\n\t");
    sb_str(&sb, ar.short_src);
    sb_str(&sb, ":");
    if (ar.currentline > 0) {
      sb_int(&sb, ar.currentline);
      sb_str(&sb, ":");
    }
    sb_str(&sb, " in ");
    if (ar.name) {
      sb_str(&sb, *ar.namewhat ? ar.namewhat : "function");
      sb_str(&sb, " '");
      sb_str(&sb, ar.name);
      sb_str(&sb, "'");
    } else if (*ar.what == 'm') {
      sb_str(&sb, "main chunk");
    } else if (*ar.what != 'C') {
      sb_str(&sb, "function <");
      sb_str(&sb, ar.short_src);
      sb_str(&sb, ":");
      sb_int(&sb, ar.linedefined);
      sb_str(&sb, ">");
    } else {
      sb_str(&sb, "?");
    }
  }
  return str_reuse(pn->trace, sb.b, sb.n);
}

/* ---- the runner -----------------------------------------------------
   Every incarnation's coroutine runs runner(fn, ctx): it calls the runnable
   under lua_pcallk with a message handler, so an error is caught inside the
   coroutine, with the traceback taken where it was raised, and the coroutine
   returns normally (true, or false and the error). Its thread is then
   reusable as it is, without the lua_resetthread that would shrink its stack
   only for the next incarnation to grow it again. */

static int runner_msgh(lua_State *L) {
  arbor_engine *e = current_engine;
  pnode *pn = e ? e->current : NULL;
  /* a canceled node leaving with the cancellation error needs no trace */
  if (pn && !((pn->pflags & PN_NOTIFIED) && arbor_is_canceled(L, 1))) {
    arbor_str_unref(e->trace);
    e->trace = traceback(L, 1, 1, pn); /* skip msgh and runner */
  }
  return 1;
}

static int runner_k(lua_State *L, int status, lua_KContext k) {
  (void)k;
  if (status == LUA_OK || status == LUA_YIELD) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushboolean(L, 0);
  lua_insert(L, -2);
  return 2; /* false, err */
}

static int runner(lua_State *L) {
  lua_pushcfunction(L, runner_msgh);
  lua_insert(L, 1); /* msgh, fn, ctx */
  return runner_k(L, lua_pcallk(L, 1, 0, 1, 0, runner_k), 0);
}

static void resume_node(arbor_engine *e, pnode *pn) {
  lua_State *co = pn->co;
  if (!(pn->pflags & PN_RESUMED) && pn->resume != RESUME_VALUES) {
    /* canceled or failed before it ever ran */
    if (pn->resume == RESUME_CANCEL) {
      node_exit(e, pn, ARBOR_CANCELED, NULL, NULL);
    } else {
      lua_rawgeti(e->L, LUA_REGISTRYINDEX, pn->fail_ref);
      lua_xmove(e->L, co, 1);
      node_exit(e, pn, ARBOR_DEAD, error_message(e, co, pn),
                reason_lit("(failed before it ran)"));
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
  arbor_watchdog_leave(co);
  e->current = prev;
  if (status == LUA_YIELD) {
    lua_pop(co, nres);
    if (pn->wait == WAIT_NONE) enqueue(e, pn); /* a plain coroutine.yield() */
    return;
  }
  if (status == LUA_OK && nres == 2) { /* runner caught an error */
    arbor_str *trace = e->trace;
    e->trace = NULL;
    if ((pn->pflags & PN_NOTIFIED) && arbor_is_canceled(co, -1)) {
      arbor_str_unref(trace);
      node_exit(e, pn, ARBOR_CANCELED, NULL, NULL);
    } else {
      node_exit(e, pn, ARBOR_DEAD, error_message(e, co, pn), trace);
    }
    return;
  }
  if (status == LUA_OK) {
    lua_pop(co, nres);
    if (pn->done)
      node_exit(e, pn, ARBOR_DONE, NULL, NULL);
    else if (pn->pflags & PN_NOTIFIED)
      node_exit(e, pn, ARBOR_CANCELED, NULL, NULL);
    else
      node_exit(e, pn, ARBOR_DEAD,
                arbor_str_fmt("runnable returned without signaling done "
                              "(state %s)",
                              arbor_state_name((arbor_state)pn->n.state)),
                NULL);
    return;
  }
  if ((pn->pflags & PN_NOTIFIED) && arbor_is_canceled(co, -1)) {
    node_exit(e, pn, ARBOR_CANCELED, NULL, NULL);
    return;
  }
  /* an error outside runner's protection (out of memory, say) */
  arbor_str *msg = error_message(e, co, pn);
  node_exit(e, pn, ARBOR_DEAD, msg, traceback(co, 0, 0, pn));
}

/* The single drain point: resumes the incarnations that were ready when it
   began (one batch, at least DRAIN_MIN resumes when more work keeps coming),
   so timers and I/O get their turn between batches even in a restart
   storm. */
#define DRAIN_MIN 256

static void drain(arbor_engine *e) {
  if (e->draining) return;
  e->draining = 1;
  if (e->ready_head && e->runaway > 0) arbor_watchdog_busy();
  arbor_engine *prev = current_engine;
  current_engine = e;
  size_t batch = e->ready_len > DRAIN_MIN ? e->ready_len : DRAIN_MIN;
  for (; batch > 0 && e->ready_head; batch--) {
    pnode *pn = e->ready_head;
    e->ready_head = pn->ready_next;
    if (!e->ready_head) e->ready_tail = NULL;
    e->ready_len--;
    pn->ready_next = NULL;
    pn->pflags &= (uint8_t)~PN_QUEUED;
    step_begin(e);
    resume_node(e, pn);
    deliver_events(e);
  }
  current_engine = prev;
  e->draining = 0;
  deliver_events(e);
}

/* Forced close at the shutdown deadline (T7). */
static void force_close(arbor_engine *e, pnode *pn) {
  pn->n.flags |= ARBOR_F_FORCED;
  node_exit(e, pn, ARBOR_CANCELED, arbor_str_ref(e->r_forced), NULL);
}

static void fire(arbor_engine *e, arbor_timer *t) {
  pnode *pn;
  switch (t->kind) {
  case TIMER_WAKE:
    pn = (pnode *)((char *)t - offsetof(pnode, wake));
    pn->wait = WAIT_NONE;
    enqueue(e, pn);
    break;
  case TIMER_RESTART:
    pn = (pnode *)((char *)t - offsetof(pnode, wake));
    arbor_engine_start(e, pn);
    break;
  case TIMER_DEADLINE:
    pn = (pnode *)((char *)t - offsetof(pnode, deadline));
    if (arbor_node_running(&pn->n)) force_close(e, pn);
    break;
  }
}

/* Fires every timer due now; returns how many fired. */
static int fire_due(arbor_engine *e) {
  int count = 0;
  step_begin(e);
  double now = step_time(e);
  arbor_timer *t;
  arbor_engine *prev = current_engine;
  current_engine = e;
  while ((t = arbor_sched_pop_due(&e->sched, now))) {
    fire(e, t);
    count++;
  }
  current_engine = prev;
  return count;
}

int arbor_engine_finished(arbor_engine *e) {
  return e->tree.root->live == 0 && !e->ready_head &&
         !arbor_sched_peek(&e->sched);
}

/* ---- policies (P1-P3) ----------------------------------------------- */

static void budget_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  luaL_error(L, "instruction budget exceeded");
}

/* Calls the function on top of L with nargs under the instruction budget.
   [-(nargs+1), +1, -]: pushes the result or the error message. */
static int budget_call(arbor_engine *e, lua_State *L, int nargs) {
  lua_sethook(L, budget_hook, LUA_MASKCOUNT, e->instruction_budget);
  int st = lua_pcall(L, nargs, 1, 0);
  lua_sethook(L, NULL, 0, 0);
  return st;
}

/* Pushes the policy event of P1 for pn. The engine reuses one table (and
   its failures array) for every call that is not nested in another: building
   a fresh one cost more than the rest of a restart. [-0, +1, m] */
static void push_policy_event(arbor_engine *e, pnode *pn, lua_State *L) {
  char buf[1024];
  size_t dl = arbor_node_dn(&pn->n, buf, sizeof buf);
  int reuse = e->policy_depth == 0;
  if (reuse && e->policy_ev_ref != LUA_NOREF) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, e->policy_ev_ref);
  } else {
    lua_createtable(L, 0, 7);
    if (reuse) {
      lua_pushvalue(L, -1);
      e->policy_ev_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    }
  }
  lua_pushlstring(L, buf, dl < sizeof buf ? dl : sizeof buf - 1);
  lua_setfield(L, -2, "dn");
  if (pn->error)
    lua_pushlstring(L, pn->error->s, pn->error->len);
  else
    lua_pushliteral(L, "");
  lua_setfield(L, -2, "err");
  lua_pushinteger(L, pn->consecutive);
  lua_setfield(L, -2, "consecutive");
  lua_pushinteger(L, pn->restarts);
  lua_setfield(L, -2, "restarts");
  if (lua_getfield(L, -1, "failures") != LUA_TTABLE || !reuse) {
    lua_pop(L, 1);
    lua_createtable(L, ARBOR_FAILURES, 0);
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, "failures");
  }
  unsigned i = 0;
  for (; i < pn->nfail; i++) {
    lua_pushnumber(L, pn->failures[(pn->fail_start + i) % ARBOR_FAILURES]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  for (; i < ARBOR_FAILURES; i++) { /* clear what a previous call left */
    if (lua_rawgeti(L, -1, (lua_Integer)i + 1) == LUA_TNIL) {
      lua_pop(L, 1);
      break;
    }
    lua_pop(L, 1);
    lua_pushnil(L);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  lua_pop(L, 1);
  lua_pushnumber(L, pn->exited - pn->started);
  lua_setfield(L, -2, "uptime");
  lua_pushnumber(L, step_time(e));
  lua_setfield(L, -2, "now");
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

static int consult(arbor_engine *e, pnode *pn, double *delay);

/* Asks pn's policy (or the default) what to do after a death. */
static int ask_policy(arbor_engine *e, pnode *pn, double *delay) {
  e->policy_calls++;
  arbor_engine *prev = current_engine;
  current_engine = e;
  int d = consult(e, pn, delay);
  current_engine = prev;
  return d;
}

/* ask_policy's body: the node's policy, then the default on a fault. */
static int consult(arbor_engine *e, pnode *pn, double *delay) {
  lua_State *L = e->L;
  int ref = pn->policy_ref != LUA_NOREF ? pn->policy_ref : e->default_policy_ref;
  for (int attempt = 0; attempt < 2; attempt++) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    push_policy_event(e, pn, L);
    e->policy_depth++;
    int st = budget_call(e, L, 1);
    e->policy_depth--;
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
      const char *msg = lua_tostring(L, -1);
      why = arbor_str_fmt("faulty policy: %s%s", msg ? msg : "(error)",
                          attempt ? "" : "; the default decides");
      lua_pop(L, 1);
    }
    arbor_engine_event(e, pn, ARBOR_EV_POLICY, why);
    arbor_engine_log(e, pn, why);
    arbor_str_unref(why);
    if (ref == e->default_policy_ref) break;
    ref = e->default_policy_ref;
  }
  *delay = 1.0; /* the default itself failed: retry in a second */
  return DECIDE_RESTART;
}

static void declare_dead(arbor_engine *e, pnode *pn, arbor_str *why);

/* pn's subtree has exited and it wants a restart (T8): decide and act. */
static void decide(arbor_engine *e, pnode *pn) {
  if (e->closing) return;
  double delay = 0;
  int d = DECIDE_RESTART;
  if (pn->n.state == ARBOR_DEAD) {
    d = ask_policy(e, pn, &delay);
    arbor_str *r = d == DECIDE_STOP       ? e->r_stop
                   : d == DECIDE_ESCALATE ? e->r_escalate
                                          : NULL;
    emit_delay(e, pn, ARBOR_EV_POLICY, (arbor_state)pn->n.state,
               (arbor_state)pn->n.state, r, d == DECIDE_RESTART ? delay : -1);
  }
  if (d == DECIDE_RESTART) {
    arbor_gc_reset(&pn->n);
    if (delay <= 0)
      arbor_engine_start(e, pn);
    else
      arm(e, &pn->wake, TIMER_RESTART, step_time(e) + delay);
    return;
  }
  pn->n.flags |= ARBOR_F_HELD;
  pnode *parent = (pnode *)pn->n.parent;
  if (!parent) {
    e->gave_up = 1;
    arbor_str_unref(e->gave_up_reason);
    e->gave_up_reason = arbor_str_fmt(
        "root gave up (%s): %s", d == DECIDE_STOP ? "stop" : "escalate",
        pn->error ? pn->error->s : "");
    return;
  }
  if (d == DECIDE_ESCALATE) {
    char buf[1024];
    arbor_node_dn(&pn->n, buf, sizeof buf);
    arbor_str *why = arbor_str_fmt("child %s escalated: %s", buf,
                                   pn->error ? pn->error->s : "");
    declare_dead(e, parent, why);
    arbor_str_unref(why);
  }
}

/* Declares pn DEAD from outside (escalation, P2): it is failed as if its
   incarnation had died, and its own policy decides once its subtree has
   exited. */
static void declare_dead(arbor_engine *e, pnode *pn, arbor_str *why) {
  if (pn->n.state == ARBOR_DEAD) return; /* already failing */
  record_failure(e, pn);
  arbor_str_set(&pn->error, why);
  arbor_str_set(&pn->trace, NULL);
  pn->n.flags |= ARBOR_F_DECLARED;
  set_reason(e, arbor_str_ref(why));
  arbor_tree_set_state(&pn->n, ARBOR_DEAD);
  set_reason(e, NULL);
  if (arbor_node_running(&pn->n)) pn->exited = step_time(e);
  spread_death(e, pn);
  if (pn->n.live == 0) after_exit(e, pn);
}

/* ---- subscribers ---------------------------------------------------- */

void arbor_push_event_table(arbor_engine *e, lua_State *L,
                            const arbor_event *ev);

static void deliver_events(arbor_engine *e) {
  if (!e->outbox.len || e->delivering) return;
  lua_State *L = e->L;
  e->delivering = 1;
  arbor_engine *prev = current_engine;
  current_engine = e;
  lua_rawgeti(L, LUA_REGISTRYINDEX, e->subscribers_ref);
  int subs = lua_gettop(L);
  /* events emitted by subscribers themselves are appended and delivered in
     this same pass */
  for (size_t k = 0; k < e->outbox.len; k++) {
    const arbor_event *ev = &e->outbox.ev[(e->outbox.start + k) %
                                          e->outbox.cap];
    lua_Integer n = luaL_len(L, subs);
    for (lua_Integer i = 1; i <= n; i++) {
      if (lua_rawgeti(L, subs, i) != LUA_TFUNCTION) {
        lua_pop(L, 1);
        continue;
      }
      arbor_push_event_table(e, L, ev);
      if (budget_call(e, L, 1) != LUA_OK) {
        arbor_str *why = arbor_str_fmt("on_event subscriber removed: %s",
                                       lua_tostring(L, -1));
        lua_pop(L, 1);
        lua_pushboolean(L, 0); /* keep indices stable */
        lua_rawseti(L, subs, i);
        arbor_engine_log(e, (pnode *)e->tree.root, why);
        arbor_str_unref(why);
      } else {
        lua_pop(L, 1);
      }
    }
  }
  lua_pop(L, 1);
  arbor_ring_clear(&e->outbox);
  current_engine = prev;
  e->delivering = 0;
}

/* ---- stuck nodes ---------------------------------------------------- */

void arbor_engine_stuck(arbor_engine *e, void (*fn)(pnode *, void *),
                        void *ud) {
  double now = arbor_engine_now(e);
  arbor_node *top = e->tree.root, *n = top;
  while (n) {
    pnode *pn = (pnode *)n;
    if (arbor_node_running(n) && (pn->pflags & PN_NOTIFIED) &&
        now >= pn->deadline.due)
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
  arbor_timer *t = arbor_sched_peek(&e->sched);
  if (!t) {
    uv_timer_stop(&e->timer);
    return;
  }
  double wait = t->due - arbor_engine_now(e);
  uint64_t ms = wait <= 0 ? 0 : (uint64_t)ceil(wait * 1000.0);
  uv_timer_start(&e->timer, on_timer, ms, 0);
}

static void on_timer(uv_timer_t *h) { pump(h->data); }
static void on_check(uv_check_t *h) { pump(h->data); }

static void kill_all(arbor_engine *e) {
  e->closing = 1;
  arbor_node *top = e->tree.root, *n = top;
  while (n) {
    if (arbor_node_running(n)) force_close(e, (pnode *)n);
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
  step_begin(e);
  if (e->stop_requested && signum == SIGINT) {
    e->interrupted = 1;
    kill_all(e);
  } else {
    arbor_str *line = arbor_str_fmt("%s: stopping the tree",
                                    signum == SIGINT ? "SIGINT" : "SIGTERM");
    arbor_engine_log(e, (pnode *)e->tree.root, line);
    arbor_str_unref(line);
    arbor_engine_stop(e);
  }
  pump(e);
}

/* One turn: fire due timers, drain, re-arm; stops the loop when finished. */
static void pump(arbor_engine *e) {
  e->wakeups++;
  fire_due(e);
  drain(e);
  if (e->ready_head) {
    uv_idle_start(&e->idle, on_idle); /* more to do: do not block in poll */
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

void arbor_engine_run(arbor_engine *e) {
  if (!e->loop) return;
  uv_check_start(&e->check, on_check);
  if (e->signals) {
    uv_signal_start(&e->sigint, on_signal, SIGINT);
    uv_signal_start(&e->sigterm, on_signal, SIGTERM);
  }
  pump(e);
  if (!arbor_engine_finished(e) && !e->interrupted)
    uv_run(e->loop, UV_RUN_DEFAULT);
  uv_check_stop(&e->check);
  uv_signal_stop(&e->sigint);
  uv_signal_stop(&e->sigterm);
  uv_timer_stop(&e->timer);
}

int arbor_engine_settle(arbor_engine *e) {
  if (e->draining) return 0;
  uint64_t limit = e->resumes + e->settle_limit;
  do {
    fire_due(e);
    drain(e);
    if (e->resumes > limit) {
      arbor_watchdog_idle();
      return -1;
    }
  } while (e->ready_head ||
           (arbor_sched_peek(&e->sched) &&
            arbor_sched_peek(&e->sched)->due <= step_time(e)));
  arbor_watchdog_idle();
  return 0;
}

int arbor_engine_advance(arbor_engine *e, double dt) {
  double target = e->vnow + dt;
  if (arbor_engine_settle(e) < 0) return -1;
  arbor_timer *t;
  while ((t = arbor_sched_peek(&e->sched)) && t->due <= target) {
    if (t->due > e->vnow) e->vnow = t->due;
    if (arbor_engine_settle(e) < 0) return -1;
  }
  if (target > e->vnow) e->vnow = target;
  return arbor_engine_settle(e);
}

/* ---- lifetime ------------------------------------------------------- */

arbor_engine *arbor_engine_new(lua_State *L, int virtual_clock, uint64_t seed,
                               size_t ring_cap) {
  arbor_engine *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  arbor_hooks hooks = {NULL, hook_state, hook_release, e, hook_detached};
  if (arbor_tree_init(&e->tree, sizeof(pnode), &hooks) < 0 ||
      arbor_ring_init(&e->ring, ring_cap) < 0) {
    arbor_tree_close(&e->tree);
    free(e);
    return NULL;
  }
  pnode_init((pnode *)e->tree.root);
  arbor_sched_init(&e->sched);
  e->L = lua_newthread(L);
  e->L_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  e->default_policy_ref = e->subscribers_ref = e->log_ref = LUA_NOREF;
  e->policy_ev_ref = LUA_NOREF;
  e->virtual_clock = virtual_clock;
  e->rng = seed ? seed : 0x9E3779B97F4A7C15ull;
  e->instruction_budget = 10000000;
  e->r_start = reason_lit("start");
  e->r_restart = reason_lit("restart");
  e->r_stop = reason_lit("stop");
  e->r_escalate = reason_lit("escalate");
  e->r_forced = reason_lit("forced");
  e->settle_limit = 10000000;
  e->runaway = 10.0;
  e->t0 = uv_hrtime();
  if (!virtual_clock) {
    e->loop = malloc(sizeof *e->loop);
    if (!e->loop || uv_loop_init(e->loop) != 0) abort();
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

static void on_close(uv_handle_t *h) { (void)h; }

void arbor_engine_free(arbor_engine *e) {
  lua_State *L = e->L;
  kill_all(e);
  arbor_tree_close(&e->tree);
  arbor_ring_close(&e->ring);
  if (e->outbox.ev) arbor_ring_close(&e->outbox);
  arbor_sched_close(&e->sched);
  arbor_str_unref(e->gave_up_reason);
  arbor_str_unref(e->reason);
  arbor_str_unref(e->r_start);
  arbor_str_unref(e->r_restart);
  arbor_str_unref(e->r_stop);
  arbor_str_unref(e->r_escalate);
  arbor_str_unref(e->r_forced);
  arbor_str_unref(e->trace);
  if (e->loop) {
    uv_close((uv_handle_t *)&e->timer, on_close);
    uv_close((uv_handle_t *)&e->check, on_close);
    uv_close((uv_handle_t *)&e->idle, on_close);
    uv_close((uv_handle_t *)&e->sigint, on_close);
    uv_close((uv_handle_t *)&e->sigterm, on_close);
    uv_run(e->loop, UV_RUN_DEFAULT);
    int rc = uv_loop_close(e->loop);
    (void)rc;
    free(e->loop);
  }
  for (size_t i = 0; i < e->npool; i++)
    luaL_unref(L, LUA_REGISTRYINDEX, e->pool[i].ref);
  e->npool = 0;
  luaL_unref(L, LUA_REGISTRYINDEX, e->default_policy_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, e->policy_ev_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, e->subscribers_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, e->log_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, e->L_ref);
  if (e->tree.allocated == 0)
    free(e);
  else
    e->zombie = 1; /* freed by hook_release with the last node */
}

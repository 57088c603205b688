/* l_metrics.c: the engine's metrics in the Prometheus text exposition
 * format 0.0.4, or OpenMetrics 1.0 (issue 16, docs/observability.md).
 *
 * Everything is read at scrape time from what the engine keeps anyway
 * (states, restart counts, exit times, metrics.c's counters): scraping
 * costs the scraper, never the tree. The number of node series is bounded:
 * past `max_series` nodes, the deepest levels are folded, each subtree
 * below the cut into one series whose dn is its top's DN followed by ".*"
 * (its descendants, aggregated), and arbor_node_series_folded counts the
 * nodes folded.
 *
 * An exposition is a render (l_render.h), made in slices for /metrics
 * (issue 25): the nodes' figures are gathered, each node at one moment,
 * into entries; their processes' usage is read from /proc; the entries
 * are written family by family; the engine's own series come last.
 */
#include <dirent.h>
#include <lauxlib.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>

#include "core/mem.h"
#include "engine/internal.h"
#include "lua/l_arbor.h"
#include "lua/l_render.h"
#include "proc/nodes.h"

#define NSTATES 5

/* v >= 0 with three decimals, as "%.3f" writes it: at most 24 bytes. */
static inline void millis(arbor_text *t, double v) {
  uint64_t ms = (uint64_t)(v * 1000 + 0.5);
  arbor_text_uint(t, ms / 1000);
  char b[4] = {'.', (char)('0' + ms / 100 % 10), (char)('0' + ms / 10 % 10),
               (char)('0' + ms % 10)};
  arbor_text_cpy(t, b, 4);
}

/* "# HELP" and "# TYPE" of a family; a counter's family name drops its
   _total under OpenMetrics. */
static void family(arbor_text *t, int om, const char *name, const char *type,
                   const char *help) {
  size_t len = strlen(name);
  if (om && strcmp(type, "counter") == 0 && len > 6 &&
      strcmp(name + len - 6, "_total") == 0)
    len -= 6;
  arbor_text_add(t, "# HELP %.*s %s\n# TYPE %.*s %s\n", (int)len, name, help,
                 (int)len, name, type);
}

/* A number as Prometheus reads it (integers without a fraction). */
static void value(arbor_text *t, double v) {
  if (v == (double)(int64_t)v && v < 9e15 && v > -9e15)
    arbor_text_add(t, "%lld\n", (long long)v);
  else
    arbor_text_add(t, "%.17g\n", v);
}

/* ---- node series ------------------------------------------------------ */

typedef struct entry {
  char *dn;            /* "root.a", or "root.a.*" for a folded subtree */
  size_t dnlen;
  uint32_t state[NSTATES]; /* nodes in each state */
  uint64_t tr[NSTATES][NSTATES];
  uint64_t restarts;
  double last_exit;    /* wall clock of the latest exit, or -1 */
  double up_since;     /* wall clock when it became HEALTHY, or -1 */
  int procs;           /* it has process groups: the two below are read */
  unsigned long long ticks, pages; /* its processes' CPU and memory */
} entry;

/* A process group of a node and the entry its usage goes to. */
typedef struct group {
  int pgid;
  size_t entry;
} group;

typedef struct series {
  entry *v;
  size_t n, cap;
  size_t folded;       /* nodes folded into subtree series */
  group *g;            /* the process groups of the nodes, to read */
  size_t ng, gcap;
} series;

static int exited_once(const pnode *pn) {
  const arbor_node *n = &pn->n;
  return n->incarnation > 1 || (n->incarnation >= 1 && !arbor_node_running(n));
}

/* Notes the process groups of pn's running incarnation (each process
   leads its own), to read their usage for series i. */
static void note_groups(series *s, size_t i, const pnode *pn) {
  if (!(pn->pflags & PN_PROCS)) return;
  arbor_proc *ps[64];
  size_t np = arbor_proc_of_node(pn, ps, 64);
  if (np > 64) np = 64;
  for (size_t k = 0; k < np; k++) {
    if (s->ng == s->gcap) {
      s->gcap = s->gcap ? 2 * s->gcap : 64;
      s->g = arbor_xrealloc(s->g, s->gcap * sizeof *s->g);
    }
    s->g[s->ng++] = (group){arbor_proc_pid(ps[k]), i};
  }
}

/* The wall clock of engine time t (an exit, a HEALTHY): wall, read when
   it happened, or (0: a state a reexec carried over) an estimate from the
   start's wall clock. */
static double wall_of(const arbor_engine *e, double t, double wall) {
  return wall > 0 ? wall : e->wall0 + t;
}

/* Adds pn's figures to en (a node's own series, or its folded subtree). */
static void gather(series *s, entry *en, const pnode *pn) {
  const arbor_engine *e = pn_engine(pn);
  note_groups(s, (size_t)(en - s->v), pn);
  en->state[pn->n.state]++;
  for (int f = 0; f < NSTATES; f++)
    for (int to = 0; to < NSTATES; to++)
      en->tr[f][to] += arbor_metrics_transitions(pn, (arbor_state)f,
                                                 (arbor_state)to);
  en->restarts += pn->restarts;
  if (exited_once(pn) && wall_of(e, pn->exited, pn->exited_wall) > en->last_exit)
    en->last_exit = wall_of(e, pn->exited, pn->exited_wall);
}

static entry *new_entry(series *s, const arbor_node *n, int folded) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->v = arbor_xrealloc(s->v, s->cap * sizeof *s->v);
  }
  entry *en = &s->v[s->n++];
  memset(en, 0, sizeof *en);
  en->last_exit = en->up_since = -1;
  char *dn = arbor_node_dn_dup(n);
  if (!dn) arbor_oom();
  if (folded) {
    size_t len = strlen(dn);
    dn = arbor_xrealloc(dn, len + 3);
    memcpy(dn + len, ".*", 3);
  }
  en->dn = dn;
  en->dnlen = strlen(dn);
  return en;
}

/* The depth of the last level that keeps its own series: every node when
   they fit in max, else the deepest level d such that the nodes at depths
   0..d fit (at least the root). */
static unsigned cut_depth(const arbor_shape *sh, size_t max) {
  if (sh->n <= max) return UINT_MAX;
  size_t *at = NULL, cap = 0;
  for (size_t i = 0; i < sh->n; i++) {
    unsigned d = sh->v[i].depth;
    if (d >= cap) {
      size_t old = cap;
      cap = d + 16;
      at = arbor_xrealloc(at, cap * sizeof *at);
      memset(at + old, 0, (cap - old) * sizeof *at);
    }
    at[d]++;
  }
  size_t sum = 0;
  unsigned cut = 0;
  for (unsigned i = 0; i < cap && at[i]; i++) {
    sum += at[i];
    if (sum > max) break;
    cut = i;
  }
  free(at);
  return cut;
}

static int cmp_group(const void *a, const void *b) {
  int x = ((const group *)a)->pgid, y = ((const group *)b)->pgid;
  return (x > y) - (x < y);
}

/* Reads the usage of the nodes' process groups from /proc (arbor's
   processes only, when some node has any) into their entries. */
static void read_usage(series *s) {
  if (s->ng == 0) return;
  qsort(s->g, s->ng, sizeof *s->g, cmp_group);
  int *pgid = arbor_xalloc(s->ng * sizeof *pgid);
  size_t n = 0;
  for (size_t i = 0; i < s->ng; i++)
    if (n == 0 || pgid[n - 1] != s->g[i].pgid) pgid[n++] = s->g[i].pgid;
  arbor_group_usage *u = arbor_xalloc(n * sizeof *u);
  memset(u, 0, n * sizeof *u);
  if (arbor_proc_groups_usage(pgid, n, u) == 0) {
    size_t k = 0;
    for (size_t i = 0; i < s->ng; i++) {
      while (pgid[k] != s->g[i].pgid) k++;
      if (!u[k].members) continue; /* the group is gone */
      entry *en = &s->v[s->g[i].entry];
      en->procs = 1;
      en->ticks += u[k].ticks;
      en->pages += u[k].pages;
    }
  }
  free(u);
  free(pgid);
}

/* Per state: its name, and `",state="<NAME>"} ` (the end of a state
   sample's labels). */
static struct {
  const char *name;
  size_t len;
  char tail[32];
  size_t tail_len;
} states[NSTATES];

static void init_states(void) {
  if (states[0].name) return;
  for (int st = 0; st < NSTATES; st++) {
    states[st].name = arbor_state_name((arbor_state)st);
    states[st].len = strlen(states[st].name);
    states[st].tail_len = (size_t)snprintf(
        states[st].tail, sizeof states[st].tail, "\",state=\"%s\"} ",
        states[st].name);
  }
}

/* name{dn="<dn>": the start of a node's sample; room for it and len more
   bytes is made. */
static void start(arbor_text *t, const char *name, size_t nlen,
                  const entry *en, size_t len) {
  arbor_text_room(t, nlen + en->dnlen + 8 + len);
  arbor_text_cpy(t, name, nlen);
  ARBOR_TEXT_LIT(t, "{dn=\"");
  arbor_text_cpy(t, en->dn, en->dnlen);
}

#define START(t, lit, en, len) start(t, lit, sizeof lit - 1, en, len)

/* The node families, in the order they are written. */
enum {
  FAM_STATE, FAM_TRANSITIONS, FAM_RESTARTS, FAM_LAST_EXIT, FAM_CPU, FAM_MEMORY,
  FAM_UP_SINCE, NFAMILIES
};

/* The header of node family f; 0 when the scrape has no such family (no
   node with processes). */
static int node_family(arbor_text *t, int om, int f, const series *s) {
  switch (f) {
  case FAM_STATE:
    family(t, om, "arbor_node_state", "gauge",
           "Nodes in each state: 1 for a node's current state, 0 for the "
           "others (a folded subtree, dn ending in .*, counts its nodes)");
    break;
  case FAM_TRANSITIONS:
    family(t, om, "arbor_node_transitions_total", "counter",
           "State changes of the node, by the state it left and the one it "
           "entered");
    break;
  case FAM_RESTARTS:
    family(t, om, "arbor_node_restarts_total", "counter",
           "Restarts of the node (starts after its first)");
    break;
  case FAM_LAST_EXIT:
    family(t, om, "arbor_node_last_exit_timestamp_seconds", "gauge",
           "When the node's latest incarnation ended (Unix time; only nodes "
           "that exited)");
    break;
  case FAM_CPU:
    if (!s->ng) return 0;
    family(t, om, "arbor_node_process_cpu_seconds_total", "counter",
           "CPU time (user and system) of the node's processes: every live "
           "member of their process groups, read from /proc at scrape time");
    break;
  case FAM_MEMORY:
    if (!s->ng) return 0;
    family(t, om, "arbor_node_process_resident_memory_bytes", "gauge",
           "Resident memory of the node's processes (summed over the "
           "members of their process groups), read from /proc at scrape "
           "time");
    break;
  case FAM_UP_SINCE:
    family(t, om, "arbor_node_up_since_timestamp_seconds", "gauge",
           "When the node became HEALTHY (Unix time; only HEALTHY nodes)");
    break;
  }
  return 1;
}

/* The samples of family f for the entry en. */
static void node_samples(arbor_text *t, int f, const entry *en) {
  switch (f) {
  case FAM_STATE:
    arbor_text_room(t, NSTATES * (en->dnlen + 80));
    for (int st = 0; st < NSTATES; st++) {
      ARBOR_TEXT_LIT(t, "arbor_node_state{dn=\"");
      arbor_text_cpy(t, en->dn, en->dnlen);
      arbor_text_cpy(t, states[st].tail, states[st].tail_len);
      arbor_text_uint(t, en->state[st]);
      ARBOR_TEXT_LIT(t, "\n");
    }
    break;
  case FAM_TRANSITIONS:
    for (int from = 0; from < NSTATES; from++)
      for (int to = 0; to < NSTATES; to++) {
        if (!en->tr[from][to]) continue;
        START(t, "arbor_node_transitions_total", en, 64);
        ARBOR_TEXT_LIT(t, "\",from=\"");
        arbor_text_cpy(t, states[from].name, states[from].len);
        ARBOR_TEXT_LIT(t, "\",to=\"");
        arbor_text_cpy(t, states[to].name, states[to].len);
        ARBOR_TEXT_LIT(t, "\"} ");
        arbor_text_uint(t, en->tr[from][to]);
        ARBOR_TEXT_LIT(t, "\n");
      }
    break;
  case FAM_RESTARTS:
    START(t, "arbor_node_restarts_total", en, 32);
    ARBOR_TEXT_LIT(t, "\"} ");
    arbor_text_uint(t, en->restarts);
    ARBOR_TEXT_LIT(t, "\n");
    break;
  case FAM_LAST_EXIT:
    if (en->last_exit < 0) break;
    START(t, "arbor_node_last_exit_timestamp_seconds", en, 32);
    ARBOR_TEXT_LIT(t, "\"} ");
    millis(t, en->last_exit);
    ARBOR_TEXT_LIT(t, "\n");
    break;
  case FAM_CPU:
    if (!en->procs) break;
    START(t, "arbor_node_process_cpu_seconds_total", en, 8);
    ARBOR_TEXT_LIT(t, "\"} ");
    value(t, (double)en->ticks / (double)sysconf(_SC_CLK_TCK));
    break;
  case FAM_MEMORY:
    if (!en->procs) break;
    START(t, "arbor_node_process_resident_memory_bytes", en, 32);
    ARBOR_TEXT_LIT(t, "\"} ");
    arbor_text_uint(t, en->pages * (unsigned long long)sysconf(_SC_PAGESIZE));
    ARBOR_TEXT_LIT(t, "\n");
    break;
  case FAM_UP_SINCE:
    if (en->up_since < 0) break;
    START(t, "arbor_node_up_since_timestamp_seconds", en, 32);
    ARBOR_TEXT_LIT(t, "\"} ");
    millis(t, en->up_since);
    ARBOR_TEXT_LIT(t, "\n");
    break;
  }
}

/* ---- engine series ---------------------------------------------------- */

static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    if (de->d_name[0] != '.') n++;
  closedir(d);
  return n - 1; /* the directory's own descriptor */
}

static void one(arbor_text *t, int om, const char *name, const char *type,
                const char *help, double v) {
  family(t, om, name, type, help);
  arbor_text_add(t, "%s ", name);
  value(t, v);
}

static void engine_series(arbor_text *t, lua_State *L, arbor_engine *e,
                          int om, const series *s) {
  one(t, om, "arbor_nodes", "gauge", "Nodes in the tree", (double)e->tree.nnodes);
  one(t, om, "arbor_nodes_running", "gauge",
      "Nodes whose incarnation is running", (double)e->tree.running);
  one(t, om, "arbor_node_series_folded", "gauge",
      "Nodes past the series bound, counted in their subtree's series "
      "(dn ending in .*)",
      (double)s->folded);
  one(t, om, "arbor_events_total", "counter", "Events emitted",
      (double)(e->ring.next_seq - 1));
  one(t, om, "arbor_events_dropped_total", "counter",
      "Events that subscribers missed (their outbox was full)",
      (double)e->events_missed);
  one(t, om, "arbor_restarts_total", "counter",
      "Restarts of all nodes (rate() of it: restarts per second)",
      (double)e->restarts);
  one(t, om, "arbor_resumes_total", "counter", "Resumes of runnables",
      (double)e->resumes);
  one(t, om, "arbor_policy_calls_total", "counter", "Restart policy calls",
      (double)e->policy_calls);
  one(t, om, "arbor_policy_faults_total", "counter",
      "Policy calls that failed or returned a bad decision (the default "
      "policy decided)",
      (double)e->policy_faults);
  one(t, om, "arbor_log_lines_dropped_total", "counter",
      "Log lines lost: a log file's writer fell behind or could not write, "
      "or an arbor ctl logs -f follower did not keep up",
      (double)e->log_lines_dropped);
  family(t, om, "arbor_loop_turn_seconds", "histogram",
         "Time the engine took per turn of its event loop");
  uint64_t cum = 0;
  for (int i = 0; i < ARBOR_TURN_BUCKETS; i++) {
    cum += e->turns.bucket[i];
    arbor_text_add(t, "arbor_loop_turn_seconds_bucket{le=\"%g\"} ",
                   arbor_metrics_turn_bounds[i]);
    value(t, (double)cum);
  }
  arbor_text_add(t, "arbor_loop_turn_seconds_bucket{le=\"+Inf\"} ");
  value(t, (double)e->turns.count);
  arbor_text_add(t, "arbor_loop_turn_seconds_sum %.9f\n", e->turns.sum);
  arbor_text_add(t, "arbor_loop_turn_seconds_count ");
  value(t, (double)e->turns.count);
  one(t, om, "arbor_lua_memory_bytes", "gauge", "Memory held by Lua",
      (double)lua_gc(L, LUA_GCCOUNT, 0) * 1024 + lua_gc(L, LUA_GCCOUNTB, 0));
  int fds = open_fds();
  if (fds >= 0)
    one(t, om, "arbor_open_fds", "gauge", "Open file descriptors of arbor",
        (double)fds);
}

/* ---- the render -------------------------------------------------------- */

/* Bytes a node's series take, about: one buffer is allocated once. */
#define NODE_BYTES 480
#define NONE ((size_t)-1)

/* Where a render of the exposition is. */
typedef struct mstate {
  series s;
  unsigned cut;        /* the depth of the last level with its own series */
  int om;
  size_t fold;         /* the entry of the subtree being folded, or NONE */
  enum { GATHER, USAGE, NODES, ENGINE } phase;
  int fam, headed;     /* NODES: the family written, its header is */
  size_t i;            /* and its next entry */
  char *tail;          /* users' own metrics (lua/arbor/metrics.lua) */
  size_t tail_len;
} mstate;

/* Gathers the figures of the shape's nodes into entries, from r->at: each
   node read now, one entry per node down to the cut, one per subtree
   below it. A discarded node is left out (its subtree with it). */
static int gather_step(arbor_render *r, uint64_t deadline) {
  mstate *m = r->state;
  series *s = &m->s;
  for (size_t k = 1; r->at < r->shape.n; r->at++, k++) {
    if (k % ARBOR_RENDER_BATCH == 0 && arbor_render_due(deadline)) return 0;
    const arbor_shape_node *sn = &r->shape.v[r->at];
    arbor_node *n = sn->node;
    const pnode *pn = (const pnode *)n;
    if (n->flags & ARBOR_F_DETACHED) continue;
    if (sn->depth > m->cut) { /* below the cut: into its subtree's entry */
      if (m->fold != NONE) {
        gather(s, &s->v[m->fold], pn);
        s->folded++;
      }
      continue;
    }
    entry *en = new_entry(s, n, 0);
    gather(s, en, pn);
    if (n->state == ARBOR_HEALTHY && pn->healthy_at >= 0)
      en->up_since = wall_of(r->e, pn->healthy_at, pn->healthy_wall);
    m->fold = NONE;
    if (sn->depth == m->cut && r->at + 1 < r->shape.n &&
        r->shape.v[r->at + 1].depth > sn->depth) {
      new_entry(s, n, 1); /* the subtree below n, folded */
      m->fold = s->n - 1;
    }
  }
  return 1;
}

/* kind.step of the exposition: gather, usage, node families, engine. */
static int metrics_step(arbor_render *r, lua_State *L, uint64_t deadline) {
  mstate *m = r->state;
  arbor_text *t = &r->text;
  if (m->phase == GATHER) {
    if (!gather_step(r, deadline)) return 0;
    m->phase = USAGE;
  }
  if (m->phase == USAGE) {
    read_usage(&m->s);
    init_states();
    m->phase = NODES;
  }
  if (m->phase == NODES) {
    size_t k = 0;
    for (; m->fam < NFAMILIES; m->fam++, m->i = 0, m->headed = 0) {
      if (!m->headed && !node_family(t, m->om, m->fam, &m->s)) continue;
      m->headed = 1;
      for (; m->i < m->s.n; m->i++) {
        if (++k % ARBOR_RENDER_BATCH == 0 && arbor_render_due(deadline))
          return 0;
        node_samples(t, m->fam, &m->s.v[m->i]);
      }
    }
    m->phase = ENGINE;
  }
  engine_series(t, L, r->e, m->om, &m->s);
  arbor_text_put(t, m->tail, m->tail_len);
  return 1;
}

static void metrics_free(arbor_render *r) {
  mstate *m = r->state;
  for (size_t i = 0; i < m->s.n; i++) free(m->s.v[i].dn);
  free(m->s.v);
  free(m->s.g);
  free(m->tail);
}

static const arbor_render_kind metrics_kind = {metrics_step, metrics_free};

/* Pushes a render of e's exposition (the engine object at 1; its
   arguments at 2, 3, 4 as e:metrics_text's). [-0, +1, m] */
static void push_render(lua_State *L, int chunked) {
  arbor_engine *e = arbor_check_engine(L, 1);
  int om = lua_toboolean(L, 2);
  lua_Integer max = luaL_optinteger(L, 3, 10000);
  size_t tail_len = 0;
  const char *tail = luaL_optlstring(L, 4, "", &tail_len);
  if (max < 1) luaL_error(L, "metrics: max_series must be >= 1");
  size_t cap = e->tree.nnodes * NODE_BYTES + tail_len + 8192;
  arbor_render *r = arbor_render_new(L, 1, &metrics_kind, sizeof(mstate),
                                     e->tree.root, chunked, cap);
  mstate *m = r->state;
  m->om = om;
  m->fold = NONE;
  m->cut = cut_depth(&r->shape, (size_t)max);
  series *s = &m->s;
  s->cap = r->shape.n < (size_t)max ? r->shape.n : 2 * (size_t)max;
  s->v = arbor_xalloc((s->cap ? s->cap : 1) * sizeof *s->v);
  m->tail = arbor_xalloc(tail_len + 1);
  memcpy(m->tail, tail, tail_len);
  m->tail_len = tail_len;
}

/* e:metrics_text([openmetrics [, max_series [, tail [, chunked]]]]) -> the
   exposition, tail (users' own metrics, lua/arbor/metrics.lua) at its end;
   chunked: a table of strings (the exposition in pieces) and its length.
   All at once: what `arbor ctl metrics` and arbor.metrics_text() give. */
static int l_metrics_text(lua_State *L) {
  int chunked = lua_toboolean(L, 5);
  lua_settop(L, 4);
  push_render(L, chunked);
  return arbor_render_finish(L, -1);
}

/* e:metrics_render([openmetrics [, max_series [, tail]]]) -> a render
   (l_render.h) of the exposition in chunks, made in slices by its step
   method: what /metrics serves. */
static int l_metrics_render(lua_State *L) {
  lua_settop(L, 4);
  push_render(L, 1);
  return 1;
}

void arbor_open_metrics(lua_State *L) {
  static const luaL_Reg methods[] = {{"metrics_text", l_metrics_text},
                                     {"metrics_render", l_metrics_render},
                                     {NULL, NULL}};
  arbor_engine_methods(L, methods);
}

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
 */
#include <dirent.h>
#include <lauxlib.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/mem.h"
#include "engine/internal.h"
#include "lua/l_arbor.h"
#include "proc/nodes.h"

#define NSTATES 5

/* ---- the text: one buffer, or chunks -------------------------------- */

/* The exposition is written into one buffer that becomes one Lua string
   (text()), or into a chunk of CHUNK bytes, reused, that is pushed as a Lua
   string into a table each time it fills (chunks(): what /metrics writes
   to the socket as they are). A scrape of 100,000 nodes writes 46 MB: the
   chunks spare the big buffer and its page faults, and a big buffer is
   mapped with huge pages (one fault per 2 MB, not per 4 KB). */
typedef struct text {
  char *s;
  size_t len, cap;
  void *map;            /* s is in this mapping of maplen bytes, or NULL */
  size_t maplen;
  lua_State *L;         /* chunked: full chunks go to the table at tbl */
  int tbl;
  lua_Integer nchunks;
  size_t total;         /* bytes of the chunks pushed */
} text;

#define CHUNK ((size_t)256 << 10)
#define HUGE_PAGE ((size_t)2 << 20)

static void text_free(text *t) {
  if (t->map) munmap(t->map, t->maplen);
  else free(t->s);
  t->s = NULL, t->map = NULL;
}

/* A buffer of cap bytes (the old content kept); past 4 MB, in a mapping
   that asks for transparent huge pages. */
static void text_alloc(text *t, size_t cap) {
  if (cap >= 2 * HUGE_PAGE) {
    cap = (cap + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    size_t maplen = cap + HUGE_PAGE;
    void *m = mmap(NULL, maplen, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) {
      char *s = (char *)(((uintptr_t)m + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
      madvise(s, cap, MADV_HUGEPAGE); /* a hint: no error matters */
      if (t->len) memcpy(s, t->s, t->len);
      text_free(t);
      t->s = s, t->cap = cap, t->map = m, t->maplen = maplen;
      return;
    }
  }
  char *s = arbor_xalloc(cap);
  if (t->len) memcpy(s, t->s, t->len);
  text_free(t);
  t->s = s, t->cap = cap;
}

/* Makes room for n more bytes: pushes the chunk when chunked, else grows
   the buffer. */
static void room(text *t, size_t n) {
  if (t->cap - t->len > n) return;
  if (t->L && t->len) {
    lua_pushlstring(t->L, t->s, t->len);
    lua_rawseti(t->L, t->tbl, ++t->nchunks);
    t->total += t->len;
    t->len = 0;
    if (t->cap - t->len > n) return;
  }
  text_alloc(t, t->cap * 2 + n + 256);
}

static void add(text *t, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    room(t, n > 0 ? (size_t)n + 1 : 256);
  }
}

/* The series writers below append with these, not add: a scrape of
   100,000 nodes writes a million lines. cpy and the CPY, UINT and MILLIS
   after it write without checking: room() was asked first. */
static inline void cpy(text *t, const char *s, size_t len) {
  memcpy(t->s + t->len, s, len);
  t->len += len;
}

#define CPY(t, lit) cpy(t, lit, sizeof lit - 1)

static void put(text *t, const char *s, size_t len) {
  room(t, len);
  cpy(t, s, len);
}


/* v in decimal: at most 20 bytes. */
static inline void uint_(text *t, uint64_t v) {
  char b[24], *p = b + sizeof b;
  do *--p = (char)('0' + v % 10);
  while (v /= 10);
  cpy(t, p, (size_t)(b + sizeof b - p));
}

/* v >= 0 with three decimals, as "%.3f" writes it: at most 24 bytes. */
static inline void millis(text *t, double v) {
  uint64_t ms = (uint64_t)(v * 1000 + 0.5);
  uint_(t, ms / 1000);
  char b[4] = {'.', (char)('0' + ms / 100 % 10), (char)('0' + ms / 10 % 10),
               (char)('0' + ms % 10)};
  cpy(t, b, 4);
}

/* "# HELP" and "# TYPE" of a family; a counter's family name drops its
   _total under OpenMetrics. */
static void family(text *t, int om, const char *name, const char *type,
                   const char *help) {
  size_t len = strlen(name);
  if (om && strcmp(type, "counter") == 0 && len > 6 &&
      strcmp(name + len - 6, "_total") == 0)
    len -= 6;
  add(t, "# HELP %.*s %s\n# TYPE %.*s %s\n", (int)len, name, help, (int)len,
      name, type);
}

/* A number as Prometheus reads it (integers without a fraction). */
static void value(text *t, double v) {
  if (v == (double)(int64_t)v && v < 9e15 && v > -9e15)
    add(t, "%lld\n", (long long)v);
  else
    add(t, "%.17g\n", v);
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
static unsigned cut_depth(arbor_tree *tree, size_t max) {
  if (tree->nnodes <= max) return (unsigned)-1;
  size_t *at = NULL, cap = 0;
  arbor_node *top = tree->root, *n = top;
  unsigned d = 0;
  while (n) {
    if (d >= cap) {
      size_t old = cap;
      cap = cap ? 2 * cap : 16;
      at = arbor_xrealloc(at, cap * sizeof *at);
      memset(at + old, 0, (cap - old) * sizeof *at);
    }
    at[d]++;
    if (n->first) {
      n = n->first;
      d++;
      continue;
    }
    while (n && n != top && !n->next) n = n->parent, d--;
    n = (n && n != top) ? n->next : NULL;
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

/* One entry per node down to the cut, one per subtree below it. */
static void collect(arbor_engine *e, size_t max, series *s) {
  unsigned cut = cut_depth(&e->tree, max), d = 0;
  s->cap = e->tree.nnodes < max ? e->tree.nnodes : 2 * max; /* no copying */
  s->v = arbor_xalloc(s->cap * sizeof *s->v);
  arbor_node *top = e->tree.root, *n = top;
  while (n) {
    const pnode *pn = (const pnode *)n;
    entry *en = new_entry(s, n, 0);
    gather(s, en, pn);
    if (n->state == ARBOR_HEALTHY && pn->healthy_at >= 0)
      en->up_since = wall_of(e, pn->healthy_at, pn->healthy_wall);
    if (n->first && d == cut) { /* fold everything below n */
      entry *fold = new_entry(s, n, 1);
      arbor_node *m = n->first;
      while (m) {
        gather(s, fold, (const pnode *)m);
        s->folded++;
        if (m->first) {
          m = m->first;
          continue;
        }
        while (m && m != n && !m->next) m = m->parent;
        m = (m && m != n) ? m->next : NULL;
      }
    } else if (n->first) {
      n = n->first;
      d++;
      continue;
    }
    while (n && n != top && !n->next) n = n->parent, d--;
    n = (n && n != top) ? n->next : NULL;
  }
}

static int cmp_group(const void *a, const void *b) {
  int x = ((const group *)a)->pgid, y = ((const group *)b)->pgid;
  return (x > y) - (x < y);
}

/* Reads the usage of the nodes' process groups from /proc (one pass over
   it, only when some node has processes) into their entries. */
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
static void start(text *t, const char *name, size_t nlen, const entry *en,
                  size_t len) {
  room(t, nlen + en->dnlen + 8 + len);
  cpy(t, name, nlen);
  CPY(t, "{dn=\"");
  cpy(t, en->dn, en->dnlen);
}

#define START(t, lit, en, len) start(t, lit, sizeof lit - 1, en, len)

static void node_series(text *t, arbor_engine *e, int om, const series *s) {
  init_states();
  family(t, om, "arbor_node_state", "gauge",
         "Nodes in each state: 1 for a node's current state, 0 for the "
         "others (a folded subtree, dn ending in .*, counts its nodes)");
  for (size_t i = 0; i < s->n; i++) {
    const entry *en = &s->v[i];
    room(t, NSTATES * (en->dnlen + 80));
    for (int st = 0; st < NSTATES; st++) {
      CPY(t, "arbor_node_state{dn=\"");
      cpy(t, en->dn, en->dnlen);
      cpy(t, states[st].tail, states[st].tail_len);
      uint_(t, en->state[st]);
      CPY(t, "\n");
    }
  }
  family(t, om, "arbor_node_transitions_total", "counter",
         "State changes of the node, by the state it left and the one it "
         "entered");
  for (size_t i = 0; i < s->n; i++)
    for (int f = 0; f < NSTATES; f++)
      for (int to = 0; to < NSTATES; to++) {
        if (!s->v[i].tr[f][to]) continue;
        START(t, "arbor_node_transitions_total", &s->v[i], 64);
        CPY(t, "\",from=\"");
        cpy(t, states[f].name, states[f].len);
        CPY(t, "\",to=\"");
        cpy(t, states[to].name, states[to].len);
        CPY(t, "\"} ");
        uint_(t, s->v[i].tr[f][to]);
        CPY(t, "\n");
      }
  family(t, om, "arbor_node_restarts_total", "counter",
         "Restarts of the node (starts after its first)");
  for (size_t i = 0; i < s->n; i++) {
    START(t, "arbor_node_restarts_total", &s->v[i], 32);
    CPY(t, "\"} ");
    uint_(t, s->v[i].restarts);
    CPY(t, "\n");
  }
  family(t, om, "arbor_node_last_exit_timestamp_seconds", "gauge",
         "When the node's latest incarnation ended (Unix time; only nodes "
         "that exited)");
  for (size_t i = 0; i < s->n; i++) {
    if (s->v[i].last_exit < 0) continue;
    START(t, "arbor_node_last_exit_timestamp_seconds", &s->v[i], 32);
    CPY(t, "\"} ");
    millis(t, s->v[i].last_exit);
    CPY(t, "\n");
  }
  if (s->ng) {
    double tck = (double)sysconf(_SC_CLK_TCK);
    unsigned long long page = (unsigned long long)sysconf(_SC_PAGESIZE);
    family(t, om, "arbor_node_process_cpu_seconds_total", "counter",
           "CPU time (user and system) of the node's processes: every live "
           "member of their process groups, read from /proc at scrape time");
    for (size_t i = 0; i < s->n; i++) {
      if (!s->v[i].procs) continue;
      START(t, "arbor_node_process_cpu_seconds_total", &s->v[i], 8);
      CPY(t, "\"} ");
      value(t, (double)s->v[i].ticks / tck);
    }
    family(t, om, "arbor_node_process_resident_memory_bytes", "gauge",
           "Resident memory of the node's processes (summed over the "
           "members of their process groups), read from /proc at scrape "
           "time");
    for (size_t i = 0; i < s->n; i++) {
      if (!s->v[i].procs) continue;
      START(t, "arbor_node_process_resident_memory_bytes", &s->v[i], 32);
      CPY(t, "\"} ");
      uint_(t, s->v[i].pages * page);
      CPY(t, "\n");
    }
  }
  family(t, om, "arbor_node_up_since_timestamp_seconds", "gauge",
         "When the node became HEALTHY (Unix time; only HEALTHY nodes)");
  for (size_t i = 0; i < s->n; i++) {
    if (s->v[i].up_since < 0) continue;
    START(t, "arbor_node_up_since_timestamp_seconds", &s->v[i], 32);
    CPY(t, "\"} ");
    millis(t, s->v[i].up_since);
    CPY(t, "\n");
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

static void one(text *t, int om, const char *name, const char *type,
                const char *help, double v) {
  family(t, om, name, type, help);
  add(t, "%s ", name);
  value(t, v);
}

static void engine_series(text *t, lua_State *L, arbor_engine *e, int om,
                          const series *s) {
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
    add(t, "arbor_loop_turn_seconds_bucket{le=\"%g\"} ", arbor_metrics_turn_bounds[i]);
    value(t, (double)cum);
  }
  add(t, "arbor_loop_turn_seconds_bucket{le=\"+Inf\"} ");
  value(t, (double)e->turns.count);
  add(t, "arbor_loop_turn_seconds_sum %.9f\n", e->turns.sum);
  add(t, "arbor_loop_turn_seconds_count ");
  value(t, (double)e->turns.count);
  one(t, om, "arbor_lua_memory_bytes", "gauge", "Memory held by Lua",
      (double)lua_gc(L, LUA_GCCOUNT, 0) * 1024 + lua_gc(L, LUA_GCCOUNTB, 0));
  int fds = open_fds();
  if (fds >= 0)
    one(t, om, "arbor_open_fds", "gauge", "Open file descriptors of arbor",
        (double)fds);
}

/* Bytes a node's series take, about: the text is allocated once. */
#define NODE_BYTES 480

/* e:metrics_text([openmetrics [, max_series [, tail [, chunked]]]]) -> the
   exposition, tail (users' own metrics, lua/arbor/metrics.lua) at its end;
   chunked: a table of strings (the exposition in pieces) and its length. */
static int l_metrics_text(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  int om = lua_toboolean(L, 2);
  lua_Integer max = luaL_optinteger(L, 3, 10000);
  size_t tail_len = 0;
  const char *tail = luaL_optlstring(L, 4, "", &tail_len);
  int chunked = lua_toboolean(L, 5);
  if (max < 1) return luaL_error(L, "metrics: max_series must be >= 1");
  series s = {0};
  collect(e, (size_t)max, &s);
  read_usage(&s);
  text t = {0};
  if (chunked) {
    lua_newtable(L);
    t.L = L, t.tbl = lua_gettop(L);
    text_alloc(&t, CHUNK);
  } else {
    text_alloc(&t, s.n * NODE_BYTES + tail_len + 8192);
  }
  node_series(&t, e, om, &s);
  engine_series(&t, L, e, om, &s);
  for (size_t i = 0; i < s.n; i++) free(s.v[i].dn);
  free(s.v);
  free(s.g);
  if (chunked) {
    if (t.len) {
      lua_pushlstring(L, t.s, t.len);
      lua_rawseti(L, t.tbl, ++t.nchunks);
    }
    text_free(&t);
    if (tail_len) {
      lua_pushvalue(L, 4);
      lua_rawseti(L, -2, ++t.nchunks);
    }
    lua_pushinteger(L, (lua_Integer)(t.total + t.len + tail_len));
    return 2;
  }
  put(&t, tail, tail_len);
  lua_pushlstring(L, t.s, t.len);
  text_free(&t);
  return 1;
}

void arbor_open_metrics(lua_State *L) {
  static const luaL_Reg methods[] = {{"metrics_text", l_metrics_text},
                                     {NULL, NULL}};
  arbor_engine_methods(L, methods);
}

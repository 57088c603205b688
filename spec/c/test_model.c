/* test_model.c: the randomized model test of the GC (T8, T9).
 *
 * Thousands of random trees get random operations (children added and
 * started, groups, signals, exits DONE / CANCELED / DEAD, cancellations,
 * delayed restarts, holds, escalations), driven the way the engine drives
 * the tree. After every operation the restart decisions of the incremental
 * GC (arbor_gc_candidate, called only where something changed, O(depth))
 * are compared with a deliberately simple reference implementation of T8:
 * a whole-tree scan that uses neither the `live` counters nor
 * arbor_gc_wants. Then the candidates are acted upon (restart now, restart
 * after a delay, hold, escalate) and the comparison repeats until nothing
 * is left to restart. The `live` counters are checked against a recount
 * after every operation.
 *
 * Deterministic: a fixed seed. ARBOR_MODEL_TREES, ARBOR_MODEL_OPS and
 * ARBOR_MODEL_SEED override the defaults (5000 trees, 200 operations, 1).
 */
#include "core/gc.h"
#include "test.h"

/* Cancels n with nothing exempt and no visitor. */
static size_t cancel(arbor_node *n) { return arbor_tree_cancel(n, NULL, NULL, NULL); }
/* Cancels the other members of n's group (T6), as the engine does. */
static void cancel_group(arbor_node *n) {
  for (arbor_node *g = n->gnext; g != n; g = g->gnext) cancel(g);
}

#ifndef MAXN
#define MAXN 64 /* no more children are added beyond this many nodes */
#endif
#define MAXALL 4096 /* attached nodes at most (MAXN + a few groups) */

typedef struct mnode {
  arbor_node base;
  uint32_t run;   /* scratch: RUNNING nodes in the subtree, recounted */
  uint32_t mark;  /* scratch */
} mnode;

#define M(n) ((mnode *)(n))

/* ---- PRNG: splitmix64 ---- */
static uint64_t rng;

static uint64_t rnd(void) {
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint32_t below(uint32_t n) { return (uint32_t)(rnd() % n); }

/* ---- statistics ---- */
static struct {
  uint64_t trees, ops, applied, comparisons, nonempty, candidates;
  uint64_t restarts, delayed, holds, escalations, unholds, multi;
  uint64_t subtree_restarts; /* restarts that discarded children */
  uint64_t root_restarts, live_checks, max_nodes, nodes_released;
  uint64_t nodes_created, size_sum, deep_candidates;
  uint32_t max_depth;
  uint64_t exits[5];
} st;

/* ---- node bookkeeping ---- */
static arbor_tree tree;
static arbor_node *all[MAXALL]; /* pre-order */
static size_t nall;
static uint32_t name_counter;
static uint64_t released_in_tree;

static void on_release(arbor_node *n, void *ud) {
  (void)n;
  (void)ud;
  released_in_tree++;
}

/* Pre-order list of the attached nodes, and the recount of RUNNING nodes
   per subtree (independent of the `live` counters). */
static void collect(void) {
  nall = 0;
  arbor_node *n = tree.root;
  while (n) {
    ASSERT(nall < MAXALL);
    all[nall++] = n;
    if (n->first) {
      n = n->first;
    } else {
      while (n && !n->next) n = n->parent;
      if (n) n = n->next;
    }
  }
  for (size_t i = 0; i < nall; i++)
    M(all[i])->run = arbor_node_running(all[i]) ? 1 : 0;
  for (size_t i = nall; i-- > 1;) M(all[i]->parent)->run += M(all[i])->run;
  if (nall > st.max_nodes) st.max_nodes = nall;
}

/* ---- failure report ---- */
#define LOGN 512
static char oplog[LOGN][128];
static size_t nlog;
static uint64_t tree_index, seed;

static void logop(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logop(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(oplog[nlog % LOGN], sizeof oplog[0], fmt, ap);
  va_end(ap);
  nlog++;
}

static const char *dn(const arbor_node *n) {
  static char buf[4][1024];
  static int k;
  k = (k + 1) % 4;
  arbor_node_dn(n, buf[k], sizeof buf[k]);
  return buf[k];
}

static void dump(void) {
  fprintf(stderr, "seed %llu, tree %llu; last operations:\n",
          (unsigned long long)seed, (unsigned long long)tree_index);
  size_t from = nlog > LOGN ? nlog - LOGN : 0;
  for (size_t i = from; i < nlog; i++)
    fprintf(stderr, "  %s\n", oplog[i % LOGN]);
  fprintf(stderr, "tree now:\n");
  collect();
  for (size_t i = 0; i < nall; i++) {
    arbor_node *n = all[i];
    unsigned f = n->flags;
    fprintf(stderr, "  %*s%s %s inc=%llu live=%u run=%u%s%s%s%s%s\n",
            2 * (int)arbor_node_depth(n), "", n->name,
            arbor_state_name((arbor_state)n->state),
            (unsigned long long)n->incarnation, n->live, M(n)->run,
            f & ARBOR_F_RUNNING ? " RUNNING" : "",
            f & ARBOR_F_CANCEL ? " CANCEL" : "",
            f & ARBOR_F_PENDING ? " PENDING" : "",
            f & ARBOR_F_HELD ? " HELD" : "",
            f & ARBOR_F_DECLARED ? " DECLARED" : "");
  }
}

/* ---- the reference implementation of T8 ---- */
static int ref_qualifies(const arbor_node *n) {
  if (n->flags & (ARBOR_F_RUNNING | ARBOR_F_PENDING | ARBOR_F_HELD)) return 0;
  int st_ok = n->state == ARBOR_DEAD || n->state == ARBOR_CANCELED ||
              (n->state == ARBOR_DONE && (n->flags & ARBOR_F_CANCEL));
  if (!st_ok) return 0;
  if (M(n)->run != 0) return 0; /* some node in the subtree is running */
  return n->parent == NULL || !(n->parent->flags & ARBOR_F_CANCEL);
}

/* Topmost qualifying nodes: no descent below a qualifying node. */
static void ref_visit(arbor_node *n, arbor_node **out, size_t *nout) {
  if (ref_qualifies(n)) {
    out[(*nout)++] = n;
    return;
  }
  for (arbor_node *c = n->first; c; c = c->next) ref_visit(c, out, nout);
}

static size_t reference(arbor_node **out) {
  collect();
  size_t nout = 0;
  ref_visit(tree.root, out, &nout);
  return nout;
}

/* ---- the incremental rule ---- */
typedef struct {
  arbor_node *v[MAXALL];
  size_t n;
} nodeset;

static void set_add(nodeset *s, arbor_node *n) {
  for (size_t i = 0; i < s->n; i++)
    if (s->v[i] == n) return;
  ASSERT(s->n < MAXALL);
  s->v[s->n++] = n;
}

static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (arbor_node *const *)a;
  uintptr_t y = (uintptr_t) * (arbor_node *const *)b;
  return x < y ? -1 : x > y;
}

/* Change points of the current operation. */
static nodeset changes;

static void incremental(nodeset *cand) {
  cand->n = 0;
  for (size_t i = 0; i < changes.n; i++) {
    arbor_node *c = arbor_gc_candidate(changes.v[i]);
    if (c) set_add(cand, c);
  }
  changes.n = 0;
}

/* After the tree was changed: the recount and the invariants. */
static void check_invariants(void) {
  collect();
  for (size_t i = 0; i < nall; i++) {
    arbor_node *n = all[i];
    /* live: itself running, plus its children whose subtrees run */
    uint32_t live = arbor_node_running(n) ? 1 : 0;
    for (arbor_node *c = n->first; c; c = c->next) live += M(c)->run > 0;
    ASSERT_MSG(n->live == live, "live of %s is %u, want %u (%u running)",
               dn(n), n->live, live, M(n)->run);
    /* cancellation is inherited by the whole subtree (the GC relies on it) */
    if (n->parent && arbor_node_canceled(n->parent))
      ASSERT_MSG(arbor_node_canceled(n), "%s not canceled under %s", dn(n),
                 dn(n->parent));
    ASSERT(!(n->flags & ARBOR_F_DETACHED));
    ASSERT(!((n->flags & ARBOR_F_RUNNING) && (n->flags & ARBOR_F_PENDING)));
  }
  ASSERT_UINT_EQ(tree.running, M(tree.root)->run);
  /* nothing else holds references: every node in memory is in the tree */
  ASSERT_UINT_EQ(tree.nnodes, nall);
  ASSERT_UINT_EQ(tree.allocated, nall);
  st.live_checks++;
}

/* ---- operations, as the engine performs them ---- */
static size_t pick_list(arbor_node **out, int (*pred)(const arbor_node *)) {
  size_t k = 0;
  for (size_t i = 0; i < nall; i++)
    if (pred(all[i])) out[k++] = all[i];
  return k;
}

static int is_running(const arbor_node *n) { return arbor_node_running(n); }
static int is_running_new(const arbor_node *n) {
  return arbor_node_running(n) && n->state == ARBOR_NEW;
}
static int is_running_healthy(const arbor_node *n) {
  return arbor_node_running(n) && n->state == ARBOR_HEALTHY;
}
static int is_startable(const arbor_node *n) {
  if (!(n->flags & ARBOR_F_PENDING)) return 0;
  /* a first start waits for a running parent; a delayed restart fires */
  return n->incarnation > 0 || n->parent == NULL || arbor_node_running(n->parent);
}
static int is_held(const arbor_node *n) { return (n->flags & ARBOR_F_HELD) != 0; }
static int is_any(const arbor_node *n) {
  (void)n;
  return 1;
}

static arbor_node *pool[MAXALL];

static arbor_node *pick(int (*pred)(const arbor_node *)) {
  size_t k = pick_list(pool, pred);
  return k ? pool[below((uint32_t)k)] : NULL;
}

static arbor_node *add_child(arbor_node *p) {
  char name[16];
  int len = snprintf(name, sizeof name, "n%u", ++name_counter);
  int err = 0;
  arbor_node *c = arbor_tree_add(p, name, (size_t)len, &err);
  ASSERT_MSG(c != NULL, "add failed: %d", err);
  st.nodes_created++;
  if (arbor_node_canceled(p)) {
    ASSERT_EQ(c->state, ARBOR_CANCELED);
    ASSERT_EQ(c->flags, ARBOR_F_CANCEL);
  } else {
    ASSERT_EQ(c->flags, ARBOR_F_PENDING);
  }
  return c;
}

/* The change points for a cancellation of y (and, with its group, of the
   other members): each canceled node that is not running. */
static void changed_if_exited(arbor_node *n) {
  if (!arbor_node_running(n)) set_add(&changes, n);
}

static void spread_death(arbor_node *n) {
  cancel(n);
  cancel_group(n);
  for (arbor_node *g = n->gnext; g != n; g = g->gnext) changed_if_exited(g);
}

static int op_add(void) {
  if (nall >= MAXN) return 0;
  arbor_node *p = pick(is_running);
  if (!p) return 0;
  arbor_node *c = add_child(p);
  int start = (c->flags & ARBOR_F_PENDING) && below(5) != 0;
  if (start) arbor_tree_start(c);
  logop("add %s%s", dn(c), start ? " + start" : c->flags & ARBOR_F_PENDING
                                                    ? " (queued)" : " (born CANCELED)");
  return 1;
}

static int op_group(void) {
  if (nall >= MAXN) return 0;
  arbor_node *p = pick(is_running);
  if (!p) return 0;
  uint32_t k = 2 + below(3);
  arbor_node *first = NULL;
  for (uint32_t i = 0; i < k; i++) {
    arbor_node *c = add_child(p);
    if (first)
      arbor_tree_group(first, c);
    else
      first = c;
    if (c->flags & ARBOR_F_PENDING) arbor_tree_start(c);
    logop("group member %s", dn(c));
  }
  return 1;
}

static int op_healthy(void) {
  arbor_node *n = pick(is_running_new);
  if (!n) return 0;
  arbor_tree_set_state(n, ARBOR_HEALTHY);
  logop("healthy %s", dn(n));
  return 1;
}

static int op_signal_done(void) {
  arbor_node *n = pick(is_running_healthy);
  if (!n) return 0;
  arbor_tree_set_state(n, ARBOR_DONE);
  logop("signal done %s", dn(n));
  return 1;
}

static int is_running_child(const arbor_node *n) {
  return arbor_node_running(n) && n->parent != NULL;
}

static int op_exit(void) {
  /* the root ends rarely: trees grow deeper */
  arbor_node *n = below(8) ? pick(is_running_child) : NULL;
  if (!n) n = pick(is_running);
  if (!n) return 0;
  /* DONE only after healthy (or done signaled), CANCELED only when the
     context was canceled, DEAD always possible (T5) */
  arbor_state choice[2];
  int k = 0;
  if (n->state == ARBOR_HEALTHY || n->state == ARBOR_DONE)
    choice[k++] = ARBOR_DONE;
  if (arbor_node_canceled(n)) choice[k++] = ARBOR_CANCELED;
  arbor_state s = k && below(10) >= 4 ? choice[below((uint32_t)k)] : ARBOR_DEAD;
  arbor_tree_exit(n, s);
  st.exits[s]++;
  logop("exit %s %s -> %s", dn(n), arbor_state_name(s),
        arbor_state_name((arbor_state)n->state));
  if (n->flags & ARBOR_F_DECLARED) ASSERT_EQ(n->state, ARBOR_DEAD);
  if (s == ARBOR_DEAD) spread_death(n);
  set_add(&changes, n);
  return 1;
}

static int op_cancel(void) {
  arbor_node *y = pick(is_any);
  int group = below(2) == 0;
  cancel(y);
  if (group) {
    cancel_group(y);
    for (arbor_node *g = y->gnext; g != y; g = g->gnext) changed_if_exited(g);
  }
  changed_if_exited(y);
  logop("cancel %s%s", dn(y), group ? " + group" : "");
  return 1;
}

static int op_start_pending(void) {
  arbor_node *n = pick(is_startable);
  if (!n) return 0;
  ASSERT_NULL(n->first);
  arbor_tree_start(n);
  logop("start pending %s (incarnation %llu)", dn(n),
        (unsigned long long)n->incarnation);
  return 1;
}

static int op_unhold(void) {
  arbor_node *n = pick(is_held);
  if (!n) return 0;
  n->flags &= (uint8_t)~ARBOR_F_HELD;
  set_add(&changes, n);
  logop("unhold %s", dn(n));
  return 1;
}

/* ---- acting on the GC's decisions ---- */
static void decide(const nodeset *cand) {
  arbor_node *escalate = NULL;
  for (size_t i = 0; i < cand->n; i++) {
    arbor_node *c = cand->v[i];
    uint32_t r = below(100);
    if (c->state == ARBOR_DEAD && r >= 86 && r < 94) {
      c->flags |= ARBOR_F_HELD; /* the policy said "stop" */
      st.holds++;
      logop("  hold %s", dn(c));
      continue;
    }
    if (c->state == ARBOR_DEAD && r >= 94 && c->parent && !escalate) {
      escalate = c; /* after the others */
      continue;
    }
    if (c->first) st.subtree_restarts++;
    if (!c->parent) st.root_restarts++;
    arbor_gc_reset(c);
    ASSERT_NULL(c->first);
    ASSERT(c->flags & ARBOR_F_PENDING);
    if (r < 70) {
      arbor_tree_start(c);
      st.restarts++;
      logop("  restart %s", dn(c));
    } else {
      st.delayed++; /* started later by op_start_pending, unless canceled */
      logop("  reset %s (delayed restart)", dn(c));
    }
  }
  if (escalate) {
    /* the parent is declared DEAD and its own policy decides next (P2) */
    arbor_node *p = escalate->parent;
    st.escalations++;
    logop("  escalate %s to %s", dn(escalate), dn(p));
    p->flags |= ARBOR_F_DECLARED;
    arbor_tree_set_state(p, ARBOR_DEAD);
    spread_death(p);
    changed_if_exited(p);
  }
}

/* The candidates the incremental rule found must be the reference's. */
static void compare(const nodeset *cand) {
  static arbor_node *ref[MAXALL];
  static arbor_node *inc[MAXALL];
  size_t nref = reference(ref);
  size_t ninc = cand->n;
  memcpy(inc, cand->v, ninc * sizeof *inc);
  qsort(ref, nref, sizeof *ref, cmp_ptr);
  qsort(inc, ninc, sizeof *inc, cmp_ptr);
  int same = nref == ninc;
  for (size_t i = 0; same && i < nref; i++) same = ref[i] == inc[i];
  st.comparisons++;
  if (!same) {
    dump();
    fprintf(stderr, "incremental GC:");
    for (size_t i = 0; i < ninc; i++) fprintf(stderr, " %s", dn(inc[i]));
    fprintf(stderr, "\nreference:     ");
    for (size_t i = 0; i < nref; i++) fprintf(stderr, " %s", dn(ref[i]));
    fprintf(stderr, "\n");
  }
  ASSERT(same);
}

static void settle(void) {
  nodeset cand;
  incremental(&cand);
  for (int rounds = 0;; rounds++) {
    ASSERT_LT(rounds, 1000);
    compare(&cand);
    if (cand.n == 0) break;
    st.nonempty++;
    st.candidates += cand.n;
    for (size_t i = 0; i < cand.n; i++) {
      unsigned d = arbor_node_depth(cand.v[i]);
      if (d >= 2) st.deep_candidates++;
      if (d > st.max_depth) st.max_depth = d;
    }
    if (cand.n > 1) st.multi++;
    decide(&cand);
    check_invariants();
    incremental(&cand); /* the change points of escalations, if any */
  }
}

static uint64_t env_u64(const char *name, uint64_t dflt) {
  const char *s = getenv(name);
  return s && *s ? strtoull(s, NULL, 10) : dflt;
}

static void run_tree(uint32_t nops) {
  arbor_hooks h = {.release = on_release};
  ASSERT_EQ(arbor_tree_init(&tree, sizeof(mnode), &h), 0);
  released_in_tree = 0;
  name_counter = 0;
  nlog = 0;
  arbor_tree_start(tree.root);
  logop("start root");
  uint64_t created = 1;
  uint64_t before = st.nodes_created;
  for (uint32_t i = 0; i < nops; i++) {
    collect();
    int done = 0;
    while (!done) {
      uint32_t r = below(100);
      if (r < 25)
        done = op_add();
      else if (r < 31)
        done = op_group();
      else if (r < 45)
        done = op_healthy();
      else if (r < 50)
        done = op_signal_done();
      else if (r < 75)
        done = op_exit();
      else if (r < 83)
        done = op_cancel();
      else if (r < 96)
        done = op_start_pending();
      else
        done = op_unhold();
    }
    st.ops++;
    check_invariants();
    st.size_sum += nall;
    settle();
    /* everything the reference could restart was restarted */
  }
  created += st.nodes_created - before;
  arbor_tree_close(&tree);
  ASSERT_UINT_EQ(released_in_tree, created); /* every node freed */
  ASSERT_UINT_EQ(tree.allocated, 0);
  st.nodes_released += released_in_tree;
}

TEST(model_gc_matches_reference) {
  uint64_t ntrees = env_u64("ARBOR_MODEL_TREES", 5000);
  uint64_t nops = env_u64("ARBOR_MODEL_OPS", 200);
  seed = env_u64("ARBOR_MODEL_SEED", 1);
  rng = seed;
  for (tree_index = 0; tree_index < ntrees; tree_index++) {
    run_tree((uint32_t)nops);
    st.trees++;
  }
  printf("# seed %llu: %llu trees, %llu operations, %llu comparisons "
         "(%llu with candidates, %llu with several)\n",
         (unsigned long long)seed, (unsigned long long)st.trees,
         (unsigned long long)st.ops, (unsigned long long)st.comparisons,
         (unsigned long long)st.nonempty, (unsigned long long)st.multi);
  printf("# %llu candidates: %llu restarted at once, %llu delayed, "
         "%llu held, %llu escalated; %llu restarts discarded a subtree, "
         "%llu root restarts\n",
         (unsigned long long)st.candidates, (unsigned long long)st.restarts,
         (unsigned long long)st.delayed, (unsigned long long)st.holds,
         (unsigned long long)st.escalations,
         (unsigned long long)st.subtree_restarts,
         (unsigned long long)st.root_restarts);
  printf("# %llu candidates at depth >= 2 (deepest %u)\n",
         (unsigned long long)st.deep_candidates, st.max_depth);
  printf("# exits DONE %llu, CANCELED %llu, DEAD %llu; %llu live checks; "
         "%.1f nodes on average, up to %llu; %llu nodes created and freed\n",
         (unsigned long long)st.exits[ARBOR_DONE],
         (unsigned long long)st.exits[ARBOR_CANCELED],
         (unsigned long long)st.exits[ARBOR_DEAD],
         (unsigned long long)st.live_checks,
         st.ops ? (double)st.size_sum / (double)st.ops : 0.0,
         (unsigned long long)st.max_nodes,
         (unsigned long long)st.nodes_released);
  /* the run exercised what it claims to */
  ASSERT_UINT_EQ(st.trees, ntrees);
  if (ntrees * nops >= 100000) {
    ASSERT_UINT_GE(st.restarts, 1000);
    ASSERT_UINT_GE(st.subtree_restarts, 100);
    ASSERT_UINT_GE(st.multi, 10);
    ASSERT_UINT_GE(st.escalations, 100);
    ASSERT_UINT_GE(st.root_restarts, 10);
  }
}

TEST_MAIN()

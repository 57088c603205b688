/* test_gc.c: hand-written scenarios of the restart rule T8 (src/gc.c). */
#include "core/gc.h"
#include "test.h"

/* Cancels n with nothing exempt and no visitor. */
static size_t cancel(arbor_node *n) { return arbor_tree_cancel(n, NULL, NULL, NULL); }
/* Cancels the other members of n's group (T6), as the engine does. */
static void cancel_group(arbor_node *n) {
  for (arbor_node *g = n->gnext; g != n; g = g->gnext) cancel(g);
}

static int g_released;

static void on_release(arbor_node *n, void *ud) {
  (void)n;
  (void)ud;
  g_released++;
}

static void setup(arbor_tree *t) {
  arbor_hooks h = {.release = on_release};
  g_released = 0;
  ASSERT_EQ(arbor_tree_init(t, 0, &h), 0);
  arbor_tree_start(t->root);
}

static arbor_node *add(arbor_node *parent, const char *name) {
  int err = 0;
  arbor_node *n = arbor_tree_add(parent, name, strlen(name), &err);
  ASSERT_MSG(n != NULL, "adding %s failed with %d", name, err);
  return n;
}

static arbor_node *add_start(arbor_node *parent, const char *name) {
  arbor_node *n = add(parent, name);
  ASSERT(n->flags & ARBOR_F_PENDING);
  arbor_tree_start(n);
  return n;
}

/* What the engine does when an incarnation dies (T6). */
static void die(arbor_node *n) {
  arbor_tree_exit(n, ARBOR_DEAD);
  cancel(n);
  cancel_group(n);
}

static void restart(arbor_node *n) {
  arbor_gc_reset(n);
  arbor_tree_start(n);
}

TEST(dead_leaf_restarts) {
  arbor_tree t;
  setup(&t);
  arbor_node *a = add_start(t.root, "a");
  arbor_node *b = add_start(t.root, "b");
  ASSERT_NULL(arbor_gc_candidate(a)); /* running */
  ASSERT(!arbor_gc_wants(a));
  die(a);
  ASSERT(arbor_gc_wants(a));
  ASSERT_PTR_EQ(arbor_gc_candidate(a), a);
  ASSERT_NULL(arbor_gc_candidate(b));
  ASSERT_NULL(arbor_gc_candidate(t.root));
  restart(a);
  ASSERT_UINT_EQ(a->incarnation, 2);
  ASSERT_EQ(a->state, ARBOR_NEW);
  ASSERT(arbor_node_running(a));
  ASSERT_NULL(arbor_gc_candidate(a));
  ASSERT_UINT_EQ(t.root->live, 3);
  /* a CANCELED leaf (its own context canceled) restarts too */
  cancel(b);
  ASSERT_NULL(arbor_gc_candidate(b));
  arbor_tree_exit(b, ARBOR_CANCELED);
  ASSERT_PTR_EQ(arbor_gc_candidate(b), b);
  arbor_tree_close(&t);
}

TEST(dead_parent_waits_for_children) {
  arbor_tree t;
  setup(&t);
  arbor_node *a = add_start(t.root, "a");
  arbor_node *c1 = add_start(a, "c1");
  arbor_node *c2 = add_start(a, "c2");
  arbor_node *g = add_start(c2, "g");
  die(a);
  ASSERT(arbor_gc_wants(a));
  ASSERT_NULL(arbor_gc_candidate(a)); /* children still run */
  arbor_tree_exit(c1, ARBOR_CANCELED);
  ASSERT(arbor_gc_wants(c1));
  ASSERT_NULL(arbor_gc_candidate(c1)); /* parent canceled; c2 runs */
  arbor_tree_exit(g, ARBOR_CANCELED);
  ASSERT_NULL(arbor_gc_candidate(g));
  ASSERT_UINT_EQ(a->live, 1);
  arbor_tree_exit(c2, ARBOR_DEAD); /* the last one, however it ends */
  cancel(c2);
  ASSERT_UINT_EQ(a->live, 0);
  ASSERT_PTR_EQ(arbor_gc_candidate(c2), a);
  /* from anywhere below, the answer is the same topmost node */
  ASSERT_PTR_EQ(arbor_gc_candidate(g), a);
  ASSERT_PTR_EQ(arbor_gc_candidate(c1), a);
  ASSERT_PTR_EQ(arbor_gc_candidate(a), a);
  g_released = 0;
  restart(a);
  ASSERT_EQ(g_released, 3);
  ASSERT_NULL(a->first);
  ASSERT_UINT_EQ(t.nnodes, 2);
  ASSERT_UINT_EQ(a->live, 1);
  ASSERT_UINT_EQ(t.root->live, 2);
  arbor_tree_close(&t);
}

TEST(topmost_restarts) {
  /* root{a{b{c}}}: a is canceled, then everything exits bottom-up */
  arbor_tree t;
  setup(&t);
  arbor_node *a = add_start(t.root, "a");
  arbor_node *b = add_start(a, "b");
  arbor_node *c = add_start(b, "c");
  cancel(a);
  arbor_tree_exit(c, ARBOR_CANCELED);
  ASSERT_NULL(arbor_gc_candidate(c));
  arbor_tree_exit(b, ARBOR_DEAD);
  cancel(b);
  ASSERT_NULL(arbor_gc_candidate(b));
  arbor_tree_exit(a, ARBOR_CANCELED);
  ASSERT_PTR_EQ(arbor_gc_candidate(a), a);
  ASSERT_PTR_EQ(arbor_gc_candidate(b), a);
  ASSERT_PTR_EQ(arbor_gc_candidate(c), a);
  /* every one of them wants a restart; only a may have it */
  ASSERT(arbor_gc_wants(b));
  ASSERT(arbor_gc_wants(c));
  restart(a);
  ASSERT_NULL(a->first);
  arbor_tree_close(&t);
}

TEST(topmost_when_death_is_deep) {
  /* c dies first (restartable on its own), but before the GC looks its
     ancestor a is DEAD too and its subtree exited: a restarts, not c. */
  arbor_tree t;
  setup(&t);
  arbor_node *a = add_start(t.root, "a");
  arbor_node *b = add_start(a, "b");
  arbor_node *c = add_start(b, "c");
  arbor_tree_set_state(b, ARBOR_HEALTHY);
  arbor_tree_set_state(b, ARBOR_DONE);
  arbor_tree_exit(b, ARBOR_DONE);
  ASSERT_NULL(arbor_gc_candidate(b)); /* DONE, not canceled */
  die(c);
  ASSERT_PTR_EQ(arbor_gc_candidate(c), c); /* parent b not canceled */
  die(a);
  ASSERT_PTR_EQ(arbor_gc_candidate(a), a);
  ASSERT_PTR_EQ(arbor_gc_candidate(c), a);
  ASSERT_PTR_EQ(arbor_gc_candidate(b), a);
  arbor_tree_close(&t);
}

TEST(nothing_under_canceled_parent) {
  arbor_tree t;
  setup(&t);
  arbor_node *p = add_start(t.root, "p");
  arbor_node *c = add_start(p, "c");
  arbor_node *d = add_start(p, "d");
  cancel(p); /* p still runs (shutting down) */
  die(c);
  ASSERT(arbor_gc_wants(c));
  ASSERT_NULL(arbor_gc_candidate(c));
  arbor_tree_exit(d, ARBOR_CANCELED);
  ASSERT_NULL(arbor_gc_candidate(d));
  ASSERT_NULL(arbor_gc_candidate(p));
  /* a child born CANCELED under p is no candidate either */
  arbor_node *late = add(p, "late");
  ASSERT(arbor_gc_wants(late));
  ASSERT_NULL(arbor_gc_candidate(late));
  /* p ends: p restarts, with the largest subtree */
  arbor_tree_exit(p, ARBOR_CANCELED);
  ASSERT_PTR_EQ(arbor_gc_candidate(c), p);
  ASSERT_PTR_EQ(arbor_gc_candidate(late), p);
  /* but not if the root is canceled too (and runs) */
  cancel(t.root);
  ASSERT_NULL(arbor_gc_candidate(c));
  ASSERT_NULL(arbor_gc_candidate(p));
  arbor_tree_close(&t);
}

TEST(held_parent_blocks_children) {
  /* p is DEAD but held (its policy said stop): its children exit under a
     canceled parent and nothing restarts, not even p. */
  arbor_tree t;
  setup(&t);
  arbor_node *p = add_start(t.root, "p");
  arbor_node *c = add_start(p, "c");
  die(p);
  p->flags |= ARBOR_F_HELD;
  arbor_tree_exit(c, ARBOR_CANCELED);
  ASSERT(!arbor_gc_wants(p));
  ASSERT_NULL(arbor_gc_candidate(c));
  ASSERT_NULL(arbor_gc_candidate(p));
  /* the hold is lifted: p is a candidate again */
  p->flags &= (uint8_t)~ARBOR_F_HELD;
  ASSERT_PTR_EQ(arbor_gc_candidate(p), p);
  ASSERT_PTR_EQ(arbor_gc_candidate(c), p);
  arbor_tree_close(&t);
}

TEST(done_needs_canceled_context) {
  arbor_tree t;
  setup(&t);
  arbor_node *a = add_start(t.root, "a");
  arbor_node *kid = add_start(a, "kid");
  arbor_tree_set_state(a, ARBOR_HEALTHY);
  arbor_tree_exit(a, ARBOR_DONE);
  ASSERT_EQ(a->state, ARBOR_DONE);
  ASSERT(!arbor_gc_wants(a));
  ASSERT_NULL(arbor_gc_candidate(a));
  /* its child keeps running (T5) and restarts alone under a DONE parent */
  ASSERT(arbor_node_running(kid));
  die(kid);
  ASSERT_PTR_EQ(arbor_gc_candidate(kid), kid);
  restart(kid);
  /* canceling the DONE node makes it a candidate once its subtree exited */
  cancel(a);
  ASSERT(arbor_gc_wants(a));
  ASSERT_NULL(arbor_gc_candidate(a));
  arbor_tree_exit(kid, ARBOR_CANCELED);
  ASSERT_PTR_EQ(arbor_gc_candidate(kid), a);
  ASSERT_PTR_EQ(arbor_gc_candidate(a), a);
  restart(a);
  /* DONE signaled, then canceled while running, returned normally: DONE
     with a canceled context, restarted (T5, T8) */
  arbor_tree_set_state(a, ARBOR_HEALTHY);
  arbor_tree_set_state(a, ARBOR_DONE);
  cancel(a);
  arbor_tree_exit(a, ARBOR_DONE);
  ASSERT_EQ(a->state, ARBOR_DONE);
  ASSERT_PTR_EQ(arbor_gc_candidate(a), a);
  arbor_tree_close(&t);
}

TEST(held_and_pending_never_candidates) {
  arbor_tree t;
  setup(&t);
  arbor_node *a = add_start(t.root, "a");
  die(a);
  a->flags |= ARBOR_F_HELD;
  ASSERT(!arbor_gc_wants(a));
  ASSERT_NULL(arbor_gc_candidate(a));
  a->flags &= (uint8_t)~ARBOR_F_HELD;
  ASSERT_PTR_EQ(arbor_gc_candidate(a), a);
  /* pending its delayed restart */
  arbor_gc_reset(a);
  ASSERT_EQ(a->state, ARBOR_DEAD);
  ASSERT(!arbor_gc_wants(a));
  ASSERT_NULL(arbor_gc_candidate(a));
  /* whatever the state, HELD or PENDING wins */
  static const arbor_state states[] = {ARBOR_DEAD, ARBOR_CANCELED, ARBOR_DONE};
  for (size_t i = 0; i < 3; i++) {
    a->state = (uint8_t)states[i];
    a->flags = ARBOR_F_CANCEL | ARBOR_F_HELD;
    ASSERT(!arbor_gc_wants(a));
    ASSERT_NULL(arbor_gc_candidate(a));
    a->flags = ARBOR_F_CANCEL | ARBOR_F_PENDING;
    ASSERT(!arbor_gc_wants(a));
    a->flags = ARBOR_F_CANCEL | ARBOR_F_RUNNING;
    ASSERT(!arbor_gc_wants(a));
    a->flags = ARBOR_F_CANCEL | ARBOR_F_DETACHED;
    ASSERT(!arbor_gc_wants(a));
    a->flags = ARBOR_F_CANCEL;
    ASSERT(arbor_gc_wants(a));
  }
  /* NEW and HEALTHY never want a restart */
  a->state = ARBOR_NEW;
  ASSERT(!arbor_gc_wants(a));
  a->state = ARBOR_HEALTHY;
  ASSERT(!arbor_gc_wants(a));
  a->state = ARBOR_DEAD;
  /* a first start that is still queued is no candidate */
  arbor_node *q = add(t.root, "queued");
  ASSERT(!arbor_gc_wants(q));
  ASSERT_NULL(arbor_gc_candidate(q));
  arbor_tree_close(&t);
}

TEST(pending_restart_canceled_by_parent) {
  arbor_tree t;
  setup(&t);
  arbor_node *p = add_start(t.root, "p");
  arbor_node *a = add_start(p, "a");
  die(a);
  ASSERT_PTR_EQ(arbor_gc_candidate(a), a);
  arbor_gc_reset(a); /* waits for its delay */
  cancel(p);
  ASSERT_EQ(a->state, ARBOR_CANCELED);
  ASSERT_EQ(a->flags & ARBOR_F_PENDING, 0);
  ASSERT(arbor_gc_wants(a));
  ASSERT_NULL(arbor_gc_candidate(a)); /* parent canceled */
  arbor_tree_exit(p, ARBOR_CANCELED);
  ASSERT_PTR_EQ(arbor_gc_candidate(a), p);
  arbor_tree_close(&t);
}

TEST(reset_discards_keeps_state) {
  arbor_tree t;
  setup(&t);
  arbor_node *a = add_start(t.root, "a");
  arbor_node *b = add_start(a, "b");
  add_start(b, "x");
  add(a, "queued");
  die(a);
  arbor_tree_exit(b->first, ARBOR_CANCELED);
  arbor_tree_exit(b, ARBOR_CANCELED);
  ASSERT_PTR_EQ(arbor_gc_candidate(a), a);
  a->flags |= ARBOR_F_FORCED | ARBOR_F_DECLARED;
  g_released = 0;
  arbor_gc_reset(a);
  ASSERT_EQ(g_released, 3);
  ASSERT_NULL(a->first);
  ASSERT_UINT_EQ(a->nchildren, 0);
  ASSERT_NULL(arbor_tree_find(&t, "root.a.b", 8));
  ASSERT_EQ(a->state, ARBOR_DEAD); /* kept during the delay (T8) */
  ASSERT(a->flags & ARBOR_F_PENDING);
  ASSERT(!arbor_node_canceled(a));
  ASSERT(a->flags & ARBOR_F_FORCED);
  ASSERT(a->flags & ARBOR_F_DECLARED);
  ASSERT_EQ(a->flags & ARBOR_F_RUNNING, 0);
  ASSERT_UINT_EQ(a->incarnation, 1);
  ASSERT_UINT_EQ(a->live, 0);
  /* a held node keeps its hold through a reset */
  a->flags |= ARBOR_F_HELD;
  arbor_gc_reset(a);
  ASSERT(a->flags & ARBOR_F_HELD);
  a->flags &= (uint8_t)~ARBOR_F_HELD;
  arbor_tree_start(a);
  ASSERT_EQ(a->state, ARBOR_NEW);
  ASSERT_UINT_EQ(a->incarnation, 2);
  ASSERT_EQ(a->flags, ARBOR_F_RUNNING);
  /* the new incarnation adds its children again */
  arbor_node *b2 = add_start(a, "b");
  ASSERT_EQ(b2->state, ARBOR_NEW);
  ASSERT_UINT_EQ(a->live, 2);
  arbor_tree_close(&t);
}

TEST(root_restart) {
  arbor_tree t;
  setup(&t);
  arbor_node *r = t.root;
  arbor_node *a = add_start(r, "a");
  arbor_node *b = add_start(a, "b");
  arbor_node *c = add_start(r, "c");
  /* root DONE: its children keep running, nothing restarts */
  arbor_tree_set_state(r, ARBOR_HEALTHY);
  arbor_tree_exit(r, ARBOR_DONE);
  ASSERT_NULL(arbor_gc_candidate(r));
  die(b);
  ASSERT_PTR_EQ(arbor_gc_candidate(b), b);
  restart(b);
  /* root canceled (stop): once everything exits the root is the one */
  cancel(r);
  arbor_tree_exit(b, ARBOR_CANCELED);
  ASSERT_NULL(arbor_gc_candidate(b));
  arbor_tree_exit(a, ARBOR_CANCELED);
  ASSERT_NULL(arbor_gc_candidate(a));
  arbor_tree_exit(c, ARBOR_CANCELED);
  ASSERT_UINT_EQ(r->live, 0);
  ASSERT_PTR_EQ(arbor_gc_candidate(c), r);
  ASSERT_PTR_EQ(arbor_gc_candidate(b), r);
  g_released = 0;
  restart(r);
  ASSERT_EQ(g_released, 3);
  ASSERT_UINT_EQ(r->incarnation, 2);
  ASSERT_UINT_EQ(r->live, 1);
  ASSERT_UINT_EQ(t.nnodes, 1);
  /* the root dies without children: it restarts itself */
  die(r);
  ASSERT_PTR_EQ(arbor_gc_candidate(r), r);
  restart(r);
  ASSERT_UINT_EQ(r->incarnation, 3);
  arbor_tree_close(&t);
}

TEST(group_death_restarts_siblings) {
  /* T6: g1 dies; g2 (exited DONE) is canceled with it and restarts too once
     its children exited; the third member, still running, waits. */
  arbor_tree t;
  setup(&t);
  arbor_node *p = add_start(t.root, "p");
  arbor_node *g1 = add_start(p, "g1");
  arbor_node *g2 = add_start(p, "g2");
  arbor_node *g3 = add_start(p, "g3");
  arbor_node *k = add_start(g2, "k");
  arbor_tree_group(g1, g2);
  arbor_tree_group(g1, g3);
  arbor_tree_set_state(g2, ARBOR_HEALTHY);
  arbor_tree_exit(g2, ARBOR_DONE);
  ASSERT_NULL(arbor_gc_candidate(g2));
  die(g1);
  ASSERT_PTR_EQ(arbor_gc_candidate(g1), g1);
  ASSERT_NULL(arbor_gc_candidate(g2)); /* k runs */
  ASSERT_NULL(arbor_gc_candidate(g3)); /* runs */
  restart(g1);
  arbor_tree_exit(k, ARBOR_CANCELED);
  ASSERT_PTR_EQ(arbor_gc_candidate(k), g2);
  restart(g2);
  arbor_tree_exit(g3, ARBOR_CANCELED);
  ASSERT_PTR_EQ(arbor_gc_candidate(g3), g3);
  ASSERT_NULL(arbor_gc_candidate(p));
  arbor_tree_close(&t);
}

TEST(candidate_is_o_depth) {
  /* A deep chain: the candidate from the bottom is the topmost dead node,
     and a running ancestor stops the walk. */
  enum { DEPTH = 2000 };
  arbor_tree t;
  setup(&t);
  static arbor_node *chain[DEPTH];
  arbor_node *p = t.root;
  char name[16];
  for (int i = 0; i < DEPTH; i++) {
    snprintf(name, sizeof name, "d%d", i);
    chain[i] = p = add_start(p, name);
  }
  ASSERT_EQ(arbor_node_depth(chain[DEPTH - 1]), DEPTH);
  die(chain[10]);
  for (int i = DEPTH - 1; i > 11; i--) {
    arbor_tree_exit(chain[i], ARBOR_CANCELED);
    ASSERT_NULL(arbor_gc_candidate(chain[i])); /* chain[i-1] runs */
  }
  arbor_tree_exit(chain[11], ARBOR_CANCELED);
  ASSERT_PTR_EQ(arbor_gc_candidate(chain[11]), chain[10]);
  ASSERT_PTR_EQ(arbor_gc_candidate(chain[DEPTH - 1]), chain[10]);
  ASSERT_UINT_EQ(chain[9]->live, 10 - 9);
  g_released = 0;
  restart(chain[10]);
  ASSERT_EQ(g_released, DEPTH - 11);
  arbor_tree_close(&t);
}

TEST_MAIN()

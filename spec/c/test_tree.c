/* test_tree.c: the plain-C supervision tree (src/tree.c): names (T2), DNs
 * (T1), live counts, cancellation (T7, T8), group rings (T6), discarding
 * children and reference counting. */
#include "test.h"
#include "core/tree.h"

/* Nodes carry a few counters the hooks fill in. */
typedef struct tnode {
  arbor_node base; /* first: the tree allocates node_size bytes */
  int canceled_calls;
  int state_calls;
  arbor_state last_from;
  arbor_state last_to;
} tnode;

#define T(n) ((tnode *)(n))

static int g_released;           /* release hook calls */
static char g_release_log[1024]; /* names of released nodes, space-separated */

/* What the engine hears of: state changes (the tree returns the state
   before) and cancellations (the visitor). */
static void on_state(arbor_node *n, arbor_state from) {
  if (from == (arbor_state)n->state) return;
  T(n)->state_calls++;
  T(n)->last_from = from;
  T(n)->last_to = (arbor_state)n->state;
}

static void on_canceled(arbor_node *n, arbor_state from, void *ud) {
  (void)ud;
  on_state(n, from);
  T(n)->canceled_calls++;
}

static void exit_state(arbor_node *n, arbor_state s) {
  on_state(n, arbor_tree_exit(n, s));
}

static void set_state(arbor_node *n, arbor_state s) {
  on_state(n, arbor_tree_set_state(n, s));
}

static size_t cancel(arbor_node *n) {
  return arbor_tree_cancel(n, NULL, on_canceled, NULL);
}

static void cancel_group(arbor_node *n) {
  for (arbor_node *g = n->gnext; g != n; g = g->gnext) cancel(g);
}

static void on_release(arbor_node *n, void *ud) {
  int *count = ud;
  (*count)++;
  g_released++;
  size_t len = strlen(g_release_log);
  if (len + n->namelen + 2 < sizeof g_release_log) {
    if (len) g_release_log[len++] = ' ';
    memcpy(g_release_log + len, n->name, n->namelen);
    g_release_log[len + n->namelen] = '\0';
  }
}

static int g_tree_released; /* the ud of the hooks */
static int g_detached;      /* detached hook calls */

static void on_detached(arbor_node *n, void *ud) {
  ASSERT_PTR_EQ(ud, &g_tree_released);
  ASSERT(n->flags & ARBOR_F_DETACHED);
  ASSERT_PTR_EQ(n->gnext, n); /* out of its ring already */
  g_detached++;
}

static void setup(arbor_tree *t) {
  arbor_hooks h = {.release = on_release,
                   .detached = on_detached,
                   .ud = &g_tree_released};
  g_released = 0;
  g_tree_released = 0;
  g_detached = 0;
  g_release_log[0] = '\0';
  ASSERT_EQ(arbor_tree_init(t, sizeof(tnode), &h), 0);
  ASSERT_NOT_NULL(t->root);
  ASSERT_UINT_EQ(t->node_size, sizeof(tnode));
}

static arbor_node *add(arbor_node *parent, const char *name) {
  int err = 12345;
  arbor_node *n = arbor_tree_add(parent, name, strlen(name), &err);
  ASSERT_MSG(n != NULL, "adding %s failed with %d", name, err);
  ASSERT_EQ(err, 12345); /* untouched on success */
  return n;
}

static arbor_node *add_start(arbor_node *parent, const char *name) {
  arbor_node *n = add(parent, name);
  arbor_tree_start(n);
  return n;
}

static int add_err(arbor_node *parent, const char *name, size_t len) {
  int err = 0;
  arbor_node *n = arbor_tree_add(parent, name, len, &err);
  ASSERT_NULL(n);
  return err;
}

static const char *dn(const arbor_node *n) {
  static char buf[512];
  size_t len = arbor_node_dn(n, buf, sizeof buf);
  ASSERT_UINT_EQ(len, strlen(buf));
  return buf;
}

static arbor_node *find(arbor_tree *t, const char *s) {
  return arbor_tree_find(t, s, strlen(s));
}

TEST(init_root) {
  arbor_tree t;
  setup(&t);
  arbor_node *r = t.root;
  ASSERT_STR_EQ(r->name, "root");
  ASSERT_EQ(r->namelen, 4);
  ASSERT_NULL(r->parent);
  ASSERT_EQ(r->state, ARBOR_NEW);
  ASSERT_EQ(r->flags, ARBOR_F_PENDING);
  ASSERT_UINT_EQ(r->incarnation, 0);
  ASSERT_UINT_EQ(r->live, 0);
  ASSERT_UINT_EQ(t.nnodes, 1);
  ASSERT_PTR_EQ(r->gnext, r);
  ASSERT_PTR_EQ(r->tree, &t);
  ASSERT_STR_EQ(dn(r), "root");
  ASSERT_EQ(arbor_node_depth(r), 0);
  /* node_size smaller than arbor_node is rounded up */
  arbor_tree t2;
  ASSERT_EQ(arbor_tree_init(&t2, 1, NULL), 0);
  ASSERT_UINT_EQ(t2.node_size, sizeof(arbor_node));
  arbor_tree_close(&t2);
  arbor_tree_close(&t);
  ASSERT_EQ(g_tree_released, 1);
  ASSERT_STR_EQ(g_release_log, "root");
}

TEST(names_valid) {
  char name65[66];
  memset(name65, 'x', 65);
  name65[65] = '\0';
  ASSERT_EQ(arbor_name_valid("a", 1), 1);
  ASSERT_EQ(arbor_name_valid("Az09_-", 6), 1);
  ASSERT_EQ(arbor_name_valid("-", 1), 1);
  ASSERT_EQ(arbor_name_valid("_", 1), 1);
  ASSERT_EQ(arbor_name_valid(name65, 64), 1);
  ASSERT_EQ(arbor_name_valid(name65, 65), 0);
  ASSERT_EQ(arbor_name_valid("", 0), 0);
  ASSERT_EQ(arbor_name_valid("a.b", 3), 0);
  ASSERT_EQ(arbor_name_valid(".", 1), 0);
  ASSERT_EQ(arbor_name_valid("a b", 3), 0);
  ASSERT_EQ(arbor_name_valid("a/b", 3), 0);
  ASSERT_EQ(arbor_name_valid("a\0b", 3), 0);
  ASSERT_EQ(arbor_name_valid("caf\xc3\xa9", 5), 0);
  ASSERT_EQ(arbor_name_valid("\xff", 1), 0);
  ASSERT_EQ(arbor_name_valid("a\n", 2), 0);
  ASSERT_EQ(arbor_name_valid("a:b", 3), 0);
  /* only len bytes count: "a.b" cut to "a" is valid */
  ASSERT_EQ(arbor_name_valid("a.b", 1), 1);
  /* every byte value: exactly the 64 allowed characters pass */
  int allowed = 0;
  for (int c = 0; c < 256; c++) {
    char ch = (char)c;
    allowed += arbor_name_valid(&ch, 1);
  }
  ASSERT_EQ(allowed, 26 + 26 + 10 + 2);
}

TEST(add_bad_names) {
  arbor_tree t;
  setup(&t);
  char name65[66], name64[65];
  memset(name65, 'n', 65);
  name65[65] = '\0';
  memset(name64, 'n', 64);
  name64[64] = '\0';
  ASSERT_EQ(add_err(t.root, "", 0), ARBOR_EBADNAME);
  ASSERT_EQ(add_err(t.root, "a.b", 3), ARBOR_EBADNAME);
  ASSERT_EQ(add_err(t.root, ".", 1), ARBOR_EBADNAME);
  ASSERT_EQ(add_err(t.root, name65, 65), ARBOR_EBADNAME);
  ASSERT_EQ(add_err(t.root, "sp ace", 6), ARBOR_EBADNAME);
  /* nothing changed */
  ASSERT_UINT_EQ(t.root->nchildren, 0);
  ASSERT_NULL(t.root->first);
  ASSERT_UINT_EQ(t.nnodes, 1);
  ASSERT_UINT_EQ(t.root->refs, 1);
  /* 64 characters is fine, and the name is stored whole */
  arbor_node *n = add(t.root, name64);
  ASSERT_EQ(n->namelen, 64);
  ASSERT_STR_EQ(n->name, name64);
  ASSERT_UINT_EQ(strlen(dn(n)), 4 + 1 + 64);
  ASSERT_PTR_EQ(find(&t, dn(n)), n);
  ASSERT_UINT_EQ(t.nnodes, 2);
  ASSERT_EQ(n->state, ARBOR_NEW);
  ASSERT_EQ(n->flags, ARBOR_F_PENDING);
  ASSERT_EQ(arbor_node_depth(n), 1);
  arbor_tree_close(&t);
  ASSERT_EQ(g_tree_released, 2);
}

TEST(duplicate_names) {
  arbor_tree t;
  setup(&t);
  arbor_node *a = add(t.root, "a");
  arbor_node *b = add(t.root, "b");
  ASSERT_EQ(add_err(t.root, "a", 1), ARBOR_EDUP);
  ASSERT_EQ(add_err(t.root, "b", 1), ARBOR_EDUP);
  /* a bad name is reported as such even if it is also a duplicate prefix */
  ASSERT_EQ(add_err(t.root, "a.", 2), ARBOR_EBADNAME);
  ASSERT_UINT_EQ(t.root->nchildren, 2);
  ASSERT_UINT_EQ(t.nnodes, 3);
  /* names are case-sensitive; the same name under another parent is fine */
  arbor_node *A = add(t.root, "A");
  arbor_node *aa = add(a, "a");
  arbor_node *ba = add(b, "a");
  ASSERT_PTR_NE(aa, ba);
  ASSERT_EQ(add_err(a, "a", 1), ARBOR_EDUP);
  ASSERT_PTR_EQ(arbor_tree_child(t.root, "a", 1), a);
  ASSERT_PTR_EQ(arbor_tree_child(t.root, "A", 1), A);
  ASSERT_PTR_EQ(arbor_tree_child(a, "a", 1), aa);
  ASSERT_PTR_EQ(arbor_tree_child(b, "a", 1), ba);
  ASSERT_NULL(arbor_tree_child(A, "a", 1));
  /* children in creation order */
  ASSERT_PTR_EQ(t.root->first, a);
  ASSERT_PTR_EQ(a->next, b);
  ASSERT_PTR_EQ(b->next, A);
  ASSERT_PTR_EQ(t.root->last, A);
  ASSERT_PTR_EQ(A->prev, b);
  ASSERT_NULL(a->prev);
  ASSERT_NULL(A->next);
  arbor_tree_close(&t);
  ASSERT_EQ(g_tree_released, 6);
}

TEST(find_and_dn) {
  arbor_tree t;
  setup(&t);
  arbor_node *api = add(t.root, "api");
  arbor_node *http = add(api, "http");
  arbor_node *grpc = add(api, "grpc");
  arbor_node *db = add(t.root, "db");
  arbor_node *deep = add(http, "x-1_Y");

  ASSERT_PTR_EQ(find(&t, "root"), t.root);
  ASSERT_PTR_EQ(find(&t, "root.api"), api);
  ASSERT_PTR_EQ(find(&t, "root.api.http"), http);
  ASSERT_PTR_EQ(find(&t, "root.api.grpc"), grpc);
  ASSERT_PTR_EQ(find(&t, "root.db"), db);
  ASSERT_PTR_EQ(find(&t, "root.api.http.x-1_Y"), deep);
  /* the length given counts, not the NUL */
  ASSERT_PTR_EQ(arbor_tree_find(&t, "root.api.http", 8), api);
  ASSERT_PTR_EQ(arbor_tree_find(&t, "root.api.http", 4), t.root);
  ASSERT_NULL(arbor_tree_find(&t, "root.api.http", 7)); /* "root.ap" */
  ASSERT_NULL(arbor_tree_find(&t, "root.api.http", 3));
  /* malformed or absent */
  const char *bad[] = {"", "r", "roo", "rootx", "Root", "root.", "root..api",
                       ".root", "root.api.", "root.nope", "root.api.http.x",
                       "root.http", "api.http", "root.api..http",
                       "root.api.http.x-1_y", "root.db.", "root/api",
                       "root.api.http.x-1_Y.z"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    ASSERT_MSG(find(&t, bad[i]) == NULL, "found \"%s\"", bad[i]);

  ASSERT_STR_EQ(dn(t.root), "root");
  ASSERT_STR_EQ(dn(api), "root.api");
  ASSERT_STR_EQ(dn(http), "root.api.http");
  ASSERT_STR_EQ(dn(deep), "root.api.http.x-1_Y");
  ASSERT_EQ(arbor_node_depth(deep), 3);
  ASSERT_EQ(arbor_node_depth(grpc), 2);

  /* truncation: the full length is returned, buf holds size-1 bytes + NUL */
  const char *full = "root.api.http.x-1_Y";
  size_t flen = strlen(full);
  char buf[64];
  for (size_t size = 0; size <= flen + 2; size++) {
    memset(buf, '#', sizeof buf);
    size_t got = arbor_node_dn(deep, buf, size);
    ASSERT_UINT_EQ(got, flen);
    if (size == 0) {
      ASSERT_EQ(buf[0], '#'); /* nothing written */
      continue;
    }
    size_t keep = size - 1 < flen ? size - 1 : flen;
    ASSERT_UINT_EQ(strlen(buf), keep);
    ASSERT_MEM_EQ(buf, full, keep);
    ASSERT_EQ(buf[keep + 1], '#'); /* nothing written past the NUL */
  }
  arbor_node_dn(deep, buf, 1);
  ASSERT_STR_EQ(buf, "");
  arbor_node_dn(deep, buf, 6);
  ASSERT_STR_EQ(buf, "root.");
  arbor_node_dn(deep, buf, 9);
  ASSERT_STR_EQ(buf, "root.api");
  arbor_node_dn(t.root, buf, 3);
  ASSERT_STR_EQ(buf, "ro");
  ASSERT_UINT_EQ(arbor_node_dn(t.root, NULL, 0), 4);
  arbor_tree_close(&t);
  ASSERT_EQ(g_tree_released, 6);
}

TEST(dn_of_any_length) {
  /* 2,000 levels of 64-byte names: a DN of 130,004 bytes, found and
     formed whole */
  arbor_tree t;
  setup(&t);
  enum { D = 2000 };
  char name[65], *expect = malloc(4 + (size_t)D * 65 + 1);
  ASSERT_NOT_NULL(expect);
  size_t len = 4;
  memcpy(expect, "root", 4);
  arbor_node *n = t.root;
  for (int d = 1; d <= D; d++) {
    snprintf(name, sizeof name, "%064d", d);
    n = add(n, name);
    expect[len++] = '.';
    memcpy(expect + len, name, 64);
    len += 64;
  }
  expect[len] = '\0';
  ASSERT_UINT_EQ(len, 4 + (size_t)D * 65);
  ASSERT_UINT_EQ(arbor_node_dn(n, NULL, 0), len);
  char *got = arbor_node_dn_dup(n);
  ASSERT_NOT_NULL(got);
  ASSERT_STR_EQ(got, expect);
  ASSERT_PTR_EQ(arbor_tree_find(&t, expect, len), n);
  ASSERT_PTR_EQ(arbor_tree_find(&t, expect, len - 65), n->parent);
  ASSERT_NULL(arbor_tree_find(&t, expect, len - 66));
  free(got);
  got = arbor_node_dn_dup(n->parent);
  ASSERT_UINT_EQ(strlen(got), len - 65);
  ASSERT_MEM_EQ(got, expect, len - 65);
  free(got);
  free(expect);
  arbor_tree_close(&t);
}

TEST(start_exit_live_counts) {
  arbor_tree t;
  setup(&t);
  arbor_tree_start(t.root);
  ASSERT_UINT_EQ(t.root->incarnation, 1);
  ASSERT_EQ(t.root->flags, ARBOR_F_RUNNING);
  arbor_node *a = add_start(t.root, "a");
  arbor_node *b = add_start(a, "b");
  arbor_node *c = add_start(b, "c");
  arbor_node *d = add_start(t.root, "d");
  /* itself running, plus its children whose subtrees run */
  ASSERT_UINT_EQ(t.root->live, 3);
  ASSERT_UINT_EQ(a->live, 2);
  ASSERT_UINT_EQ(b->live, 2);
  ASSERT_UINT_EQ(c->live, 1);
  ASSERT_UINT_EQ(d->live, 1);
  ASSERT_UINT_EQ(t.running, 5);
  ASSERT(arbor_node_running(c));
  ASSERT_EQ(c->state, ARBOR_NEW);
  ASSERT_EQ(c->flags & ARBOR_F_PENDING, 0);

  set_state(c, ARBOR_HEALTHY);
  ASSERT_EQ(T(c)->state_calls, 1);
  ASSERT_EQ(T(c)->last_from, ARBOR_NEW);
  ASSERT_EQ(T(c)->last_to, ARBOR_HEALTHY);
  set_state(c, ARBOR_HEALTHY); /* no change, no report */
  ASSERT_EQ(T(c)->state_calls, 1);
  ASSERT(!arbor_node_canceled(c));

  exit_state(c, ARBOR_DONE);
  ASSERT(!arbor_node_running(c));
  ASSERT_EQ(c->state, ARBOR_DONE);
  ASSERT_EQ(T(c)->state_calls, 2);
  ASSERT_EQ(T(c)->last_from, ARBOR_HEALTHY);
  ASSERT(!arbor_node_canceled(c)); /* DONE spreads nothing */
  ASSERT_UINT_EQ(c->live, 0);
  ASSERT_UINT_EQ(b->live, 1);
  ASSERT_UINT_EQ(a->live, 2);
  ASSERT_UINT_EQ(t.root->live, 3);
  ASSERT_UINT_EQ(t.running, 4);

  /* a exits while its children run: its subtree is still live */
  exit_state(a, ARBOR_DEAD);
  ASSERT_EQ(a->state, ARBOR_DEAD);
  ASSERT(arbor_node_canceled(a)); /* death cancels its own context */
  ASSERT(!arbor_node_canceled(b)); /* the caller cancels the subtree */
  ASSERT_EQ(T(a)->last_from, ARBOR_NEW);
  ASSERT_EQ(T(a)->canceled_calls, 0);
  ASSERT_UINT_EQ(a->live, 1);
  ASSERT_UINT_EQ(b->live, 1);
  ASSERT_UINT_EQ(t.root->live, 3);
  ASSERT_UINT_EQ(d->live, 1);

  /* the last running node of a's subtree: a's subtree is no longer live */
  exit_state(b, ARBOR_DEAD);
  ASSERT_UINT_EQ(a->live, 0);
  ASSERT_UINT_EQ(t.root->live, 2);

  /* a new incarnation of c: a fresh NEW, flags cleared */
  arbor_tree_start(c);
  ASSERT_UINT_EQ(c->incarnation, 2);
  ASSERT_EQ(c->state, ARBOR_NEW);
  ASSERT_UINT_EQ(b->live, 1);
  ASSERT_UINT_EQ(a->live, 1);
  ASSERT_UINT_EQ(t.root->live, 3);
  exit_state(c, ARBOR_DEAD);
  ASSERT(arbor_node_canceled(c));
  arbor_tree_start(c);
  ASSERT_UINT_EQ(c->incarnation, 3);
  ASSERT_EQ(c->flags, ARBOR_F_RUNNING); /* CANCEL cleared */

  /* set_state(DEAD) cancels the node's own context */
  set_state(d, ARBOR_DEAD);
  ASSERT(arbor_node_canceled(d));
  ASSERT(arbor_node_running(d));
  ASSERT_EQ(T(d)->last_from, ARBOR_NEW);
  ASSERT_EQ(T(d)->last_to, ARBOR_DEAD);

  exit_state(c, ARBOR_CANCELED);
  exit_state(d, ARBOR_CANCELED);
  exit_state(t.root, ARBOR_DONE);
  ASSERT_EQ(d->state, ARBOR_CANCELED);
  ASSERT_UINT_EQ(t.root->live, 0);
  ASSERT_UINT_EQ(a->live, 0);
  ASSERT_UINT_EQ(t.running, 0);
  ASSERT_EQ(t.root->state, ARBOR_DONE);
  ASSERT_STR_EQ(arbor_state_name(t.root->state), "DONE");
  arbor_tree_close(&t);
  ASSERT_EQ(g_tree_released, 5);
}

TEST(deep_chain_live_walks) {
  /* a start or an exit walks up only while subtrees become (or stop being)
     live: O(1) per node in a chain, at any depth */
  arbor_tree t;
  setup(&t);
  enum { D = 10000 };
  arbor_node **chain = malloc(D * sizeof *chain);
  ASSERT_NOT_NULL(chain);
  arbor_tree_start(t.root);
  arbor_node *n = t.root;
  char name[16];
  uint64_t before = t.steps;
  for (int d = 0; d < D; d++) {
    snprintf(name, sizeof name, "n%d", d);
    chain[d] = n = add_start(n, name);
  }
  ASSERT_UINT_EQ(t.steps - before, 2 * D);
  ASSERT_UINT_EQ(t.root->live, 2);
  ASSERT_UINT_EQ(t.running, D + 1);
  before = t.steps;
  for (int d = D; d-- > 0;) exit_state(chain[d], ARBOR_CANCELED);
  ASSERT_UINT_EQ(t.steps - before, 2 * D);
  ASSERT_UINT_EQ(t.root->live, 1);
  ASSERT_UINT_EQ(chain[0]->live, 0);
  /* the leaf alone running again: the whole path becomes live */
  before = t.steps;
  arbor_tree_start(chain[D - 1]);
  ASSERT_UINT_EQ(t.steps - before, D + 1);
  ASSERT_UINT_EQ(chain[0]->live, 1);
  ASSERT_UINT_EQ(t.root->live, 2);
  free(chain);
  arbor_tree_close(&t);
}

TEST(state_names) {
  ASSERT_STR_EQ(arbor_state_name(ARBOR_NEW), "NEW");
  ASSERT_STR_EQ(arbor_state_name(ARBOR_HEALTHY), "HEALTHY");
  ASSERT_STR_EQ(arbor_state_name(ARBOR_DONE), "DONE");
  ASSERT_STR_EQ(arbor_state_name(ARBOR_DEAD), "DEAD");
  ASSERT_STR_EQ(arbor_state_name(ARBOR_CANCELED), "CANCELED");
  ASSERT_STR_EQ(arbor_state_name((arbor_state)5), "?");
  ASSERT_STR_EQ(arbor_state_name((arbor_state)-1), "?");
}

TEST(add_under_canceled_parent) {
  arbor_tree t;
  setup(&t);
  arbor_tree_start(t.root);
  arbor_node *p = add_start(t.root, "p");
  arbor_node *q = add(p, "queued"); /* created, not started yet */
  ASSERT_EQ(q->flags, ARBOR_F_PENDING);
  ASSERT_UINT_EQ(cancel(p), 2);
  /* the pending child became CANCELED (T8), reported once */
  ASSERT_EQ(q->state, ARBOR_CANCELED);
  ASSERT_EQ(q->flags, ARBOR_F_CANCEL);
  ASSERT_EQ(T(q)->state_calls, 1);
  ASSERT_EQ(T(q)->last_from, ARBOR_NEW);
  ASSERT_EQ(T(q)->canceled_calls, 1);
  ASSERT_UINT_EQ(q->incarnation, 0);
  /* p is still running: it may add children, which are born CANCELED */
  arbor_node *late = add(p, "late");
  ASSERT_EQ(late->state, ARBOR_CANCELED);
  ASSERT(arbor_node_canceled(late));
  ASSERT_EQ(late->flags & (ARBOR_F_PENDING | ARBOR_F_RUNNING), 0);
  ASSERT_UINT_EQ(late->incarnation, 0);
  ASSERT_UINT_EQ(p->live, 1);
  ASSERT_UINT_EQ(p->nchildren, 2);
  /* and their children too */
  arbor_node *late2 = add(late, "x");
  ASSERT_EQ(late2->state, ARBOR_CANCELED);
  ASSERT(arbor_node_canceled(late2));
  /* a sibling of p is not affected */
  arbor_node *s = add(t.root, "s");
  ASSERT_EQ(s->state, ARBOR_NEW);
  ASSERT_EQ(s->flags, ARBOR_F_PENDING);
  /* canceling p again: nothing new */
  ASSERT_UINT_EQ(cancel(p), 0);
  ASSERT_EQ(T(q)->canceled_calls, 1);
  ASSERT_EQ(T(q)->state_calls, 1);
  arbor_tree_close(&t);
  ASSERT_EQ(g_tree_released, 6);
}

TEST(cancel_subtree) {
  /* root{a{a1, a2{x, y}, a3}, b} */
  arbor_tree t;
  setup(&t);
  arbor_tree_start(t.root);
  arbor_node *a = add_start(t.root, "a");
  arbor_node *a1 = add_start(a, "a1");
  arbor_node *a2 = add_start(a, "a2");
  arbor_node *x = add_start(a2, "x");
  arbor_node *y = add(a2, "y"); /* pending */
  arbor_node *a3 = add(a, "a3"); /* pending */
  arbor_node *b = add_start(t.root, "b");
  set_state(a2, ARBOR_HEALTHY);
  set_state(a2, ARBOR_DONE);
  exit_state(a2, ARBOR_DONE); /* exited DONE, its children run on */
  set_state(x, ARBOR_HEALTHY);
  int before_a2 = T(a2)->state_calls, before_x = T(x)->state_calls;

  ASSERT_UINT_EQ(cancel(a), 6);
  arbor_node *sub[] = {a, a1, a2, x, y, a3};
  for (size_t i = 0; i < 6; i++) {
    ASSERT(arbor_node_canceled(sub[i]));
    ASSERT_EQ(T(sub[i])->canceled_calls, 1);
  }
  ASSERT(!arbor_node_canceled(t.root));
  ASSERT(!arbor_node_canceled(b));
  ASSERT_EQ(T(b)->canceled_calls, 0);
  ASSERT_EQ(T(t.root)->canceled_calls, 0);
  /* states of started nodes do not change: cancellation is a request */
  ASSERT_EQ(a->state, ARBOR_NEW);
  ASSERT_EQ(a2->state, ARBOR_DONE);
  ASSERT_EQ(x->state, ARBOR_HEALTHY);
  ASSERT_EQ(T(a2)->state_calls, before_a2);
  ASSERT_EQ(T(x)->state_calls, before_x);
  ASSERT(arbor_node_running(a));
  ASSERT(arbor_node_running(x));
  /* pending ones became CANCELED, state hook once each */
  ASSERT_EQ(y->state, ARBOR_CANCELED);
  ASSERT_EQ(a3->state, ARBOR_CANCELED);
  ASSERT_EQ(y->flags & ARBOR_F_PENDING, 0);
  ASSERT_EQ(a3->flags & ARBOR_F_PENDING, 0);
  ASSERT_EQ(T(y)->state_calls, 1);
  ASSERT_EQ(T(y)->last_from, ARBOR_NEW);
  ASSERT_EQ(T(y)->last_to, ARBOR_CANCELED);
  ASSERT_EQ(T(a3)->state_calls, 1);
  /* canceling inside an already canceled subtree: nothing new */
  ASSERT_UINT_EQ(cancel(a2), 0);
  ASSERT_UINT_EQ(cancel(a), 0);
  /* canceling the root counts only root and b */
  ASSERT_UINT_EQ(cancel(t.root), 2);
  for (size_t i = 0; i < 6; i++) ASSERT_EQ(T(sub[i])->canceled_calls, 1);
  ASSERT_EQ(T(b)->canceled_calls, 1);
  ASSERT_EQ(T(t.root)->canceled_calls, 1);
  arbor_tree_close(&t);
  ASSERT_EQ(g_tree_released, 8);
}

TEST(cancel_after_death_reaches_children) {
  /* A DEAD node's own flag is set at its death, before the engine cancels
     its subtree: arbor_tree_cancel must still visit the descendants. */
  arbor_tree t;
  setup(&t);
  arbor_tree_start(t.root);
  arbor_node *a = add_start(t.root, "a");
  arbor_node *c1 = add_start(a, "c1");
  arbor_node *c2 = add(a, "c2"); /* pending */
  arbor_node *g = add_start(c1, "g");
  exit_state(a, ARBOR_DEAD);
  ASSERT(arbor_node_canceled(a));
  ASSERT(!arbor_node_canceled(c1));
  ASSERT_UINT_EQ(cancel(a), 3); /* c1, c2, g: a was already */
  ASSERT(arbor_node_canceled(c1));
  ASSERT(arbor_node_canceled(g));
  ASSERT_EQ(c2->state, ARBOR_CANCELED);
  /* the canceled hook reported a (it is called for newly canceled only) */
  ASSERT_EQ(T(a)->canceled_calls, 0);
  ASSERT_EQ(T(c1)->canceled_calls, 1);
  ASSERT_EQ(T(g)->canceled_calls, 1);
  ASSERT_EQ(T(c2)->canceled_calls, 1);
  /* the same after set_state(DEAD) (a declaration) */
  arbor_node *b = add_start(t.root, "b");
  arbor_node *b1 = add_start(b, "b1");
  set_state(b, ARBOR_DEAD);
  ASSERT_UINT_EQ(cancel(b), 1);
  ASSERT(arbor_node_canceled(b1));
  arbor_tree_close(&t);
  ASSERT_EQ(g_tree_released, 7);
}

TEST(cancel_pending_restart) {
  /* A node pending a delayed restart (PENDING set again after it ran) keeps
     its exit state until canceled, then becomes CANCELED (T8). */
  arbor_tree t;
  setup(&t);
  arbor_tree_start(t.root);
  arbor_node *a = add_start(t.root, "a");
  exit_state(a, ARBOR_DEAD);
  a->flags = (uint8_t)((a->flags & ~ARBOR_F_CANCEL) | ARBOR_F_PENDING);
  int calls = T(a)->state_calls;
  /* c exited CANCELED and waits for its restart, still CANCELED */
  arbor_node *c = add_start(t.root, "c");
  cancel(c);
  exit_state(c, ARBOR_CANCELED);
  c->flags = ARBOR_F_PENDING;
  int ccalls = T(c)->state_calls, ccanceled = T(c)->canceled_calls;
  ASSERT_UINT_EQ(cancel(t.root), 3);
  ASSERT_EQ(c->state, ARBOR_CANCELED);
  ASSERT_EQ(c->flags, ARBOR_F_CANCEL);
  ASSERT_EQ(T(c)->state_calls, ccalls); /* no change, no report */
  ASSERT_EQ(T(c)->canceled_calls, ccanceled + 1);
  ASSERT_EQ(a->state, ARBOR_CANCELED);
  ASSERT_EQ(a->flags, ARBOR_F_CANCEL);
  ASSERT_EQ(T(a)->state_calls, calls + 1);
  ASSERT_EQ(T(a)->last_from, ARBOR_DEAD);
  /* a node born CANCELED is canceled already: nothing to report */
  arbor_node *b = add(t.root, "b"); /* born CANCELED under root */
  ASSERT_EQ(b->state, ARBOR_CANCELED);
  ASSERT_EQ(T(b)->state_calls, 0);
  ASSERT_UINT_EQ(cancel(b), 0);
  arbor_tree_close(&t);
  ASSERT_EQ(g_tree_released, 4);
}

TEST(cancel_leaves_own_delayed_restart) {
  /* A node waiting for its delayed restart has no incarnation to cancel:
     canceling it directly (a group sibling's death) leaves the restart as
     scheduled; only a canceled parent drops it (T8). */
  arbor_tree t;
  setup(&t);
  arbor_tree_start(t.root);
  arbor_node *p = add_start(t.root, "p");
  arbor_node *g1 = add_start(p, "g1");
  arbor_node *g2 = add_start(p, "g2");
  arbor_tree_group(g1, g2);
  exit_state(g1, ARBOR_DEAD);
  cancel(g1);
  /* what arbor_gc_reset does: PENDING, CANCEL cleared, state kept */
  g1->flags = ARBOR_F_PENDING;
  int calls = T(g1)->state_calls, canceled = T(g1)->canceled_calls;
  ASSERT_UINT_EQ(cancel(g1), 0);
  exit_state(g2, ARBOR_DEAD);
  cancel(g2);
  cancel_group(g2); /* g1 is g2's group sibling */
  ASSERT_EQ(g1->flags, ARBOR_F_PENDING);
  ASSERT_EQ(g1->state, ARBOR_DEAD);
  ASSERT_EQ(T(g1)->state_calls, calls);
  ASSERT_EQ(T(g1)->canceled_calls, canceled);
  /* the parent's cancellation drops it */
  ASSERT_UINT_EQ(cancel(p), 2); /* p and g1; g2 was already */
  ASSERT_EQ(g1->state, ARBOR_CANCELED);
  ASSERT_EQ(g1->flags, ARBOR_F_CANCEL);
  ASSERT_EQ(T(g1)->last_from, ARBOR_DEAD);
  arbor_tree_close(&t);
}

TEST(group_rings) {
  arbor_tree t;
  setup(&t);
  arbor_tree_start(t.root);
  arbor_node *p = add_start(t.root, "p");
  arbor_node *g1 = add_start(p, "g1");
  arbor_node *g2 = add_start(p, "g2");
  arbor_node *g3 = add(p, "g3"); /* not started yet */
  arbor_node *o = add_start(p, "o");
  arbor_node *h1 = add_start(p, "h1");
  arbor_node *h2 = add_start(p, "h2");
  arbor_node *g1c = add_start(g1, "child");
  arbor_tree_group(g1, g2);
  arbor_tree_group(g1, g3);
  arbor_tree_group(h1, h2);
  /* g1, g2, g3 form one ring of three */
  int len = 1;
  for (arbor_node *g = g1->gnext; g != g1; g = g->gnext) {
    ASSERT(g == g2 || g == g3);
    ASSERT_LE(++len, 3);
  }
  ASSERT_EQ(len, 3);
  ASSERT_PTR_EQ(o->gnext, o);
  ASSERT_PTR_EQ(h1->gnext, h2);
  ASSERT_PTR_EQ(h2->gnext, h1);

  /* g2 died: its group siblings (and their subtrees) are canceled */
  exit_state(g2, ARBOR_DEAD);
  cancel(g2);
  cancel_group(g2);
  ASSERT(arbor_node_canceled(g1));
  ASSERT(arbor_node_canceled(g1c));
  ASSERT(arbor_node_canceled(g3));
  ASSERT_EQ(g3->state, ARBOR_CANCELED);
  ASSERT_EQ(T(g1)->canceled_calls, 1);
  ASSERT_EQ(T(g3)->canceled_calls, 1);
  ASSERT_EQ(T(g2)->canceled_calls, 0); /* set at death, not by the group */
  ASSERT(!arbor_node_canceled(o));
  ASSERT(!arbor_node_canceled(h1));
  ASSERT(!arbor_node_canceled(h2));
  ASSERT(!arbor_node_canceled(p));
  /* again: nothing new */
  cancel_group(g2);
  ASSERT_EQ(T(g1)->canceled_calls, 1);
  /* a node alone in its ring cancels nobody */
  cancel_group(o);
  ASSERT(!arbor_node_canceled(o));
  ASSERT(!arbor_node_canceled(h1));
  /* the other group */
  cancel_group(h2);
  ASSERT(arbor_node_canceled(h1));
  ASSERT(!arbor_node_canceled(h2));

  /* discarding a referenced group member unlinks it from its ring */
  arbor_node_ref(g1);
  exit_state(g1c, ARBOR_CANCELED);
  exit_state(g1, ARBOR_CANCELED);
  exit_state(o, ARBOR_DEAD);
  exit_state(h1, ARBOR_CANCELED);
  exit_state(h2, ARBOR_DONE);
  exit_state(p, ARBOR_DONE);
  g_tree_released = 0;
  arbor_tree_discard_children(p);
  ASSERT_EQ(g_tree_released, 6); /* all but g1 */
  ASSERT_PTR_EQ(g1->gnext, g1);
  ASSERT(g1->flags & ARBOR_F_DETACHED);
  cancel_group(g1); /* walks an empty ring */
  arbor_node_unref(g1);
  ASSERT_EQ(g_tree_released, 7);
  arbor_tree_close(&t);
  ASSERT_EQ(g_tree_released, 9);
}

TEST(group_ring_partial_discard) {
  /* A ring may span parents (the API allows it); detaching one member
     leaves the others linked. */
  arbor_tree t;
  setup(&t);
  arbor_node *a = add(t.root, "a");
  arbor_node *b = add(t.root, "b");
  arbor_node *ax = add(a, "x");
  arbor_node *by = add(b, "y");
  arbor_node *bz = add(b, "z");
  arbor_tree_group(ax, by);
  arbor_tree_group(by, bz);
  arbor_tree_discard_children(a);
  ASSERT_PTR_EQ(by->gnext, bz);
  ASSERT_PTR_EQ(bz->gnext, by);
  cancel_group(by);
  ASSERT(arbor_node_canceled(bz));
  ASSERT(!arbor_node_canceled(by));
  ASSERT(!arbor_node_canceled(a));
  arbor_tree_close(&t);
}

TEST(discard_children_frees) {
  arbor_tree t;
  setup(&t);
  arbor_node *a = add(t.root, "a");
  arbor_node *keep = add(t.root, "keep");
  /* a has 3 children with 3 children each: 12 nodes under and with a... */
  char name[16];
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof name, "c%d", i);
    arbor_node *c = add(a, name);
    for (int j = 0; j < 3; j++) {
      snprintf(name, sizeof name, "g%d", j);
      add(c, name);
    }
  }
  ASSERT_UINT_EQ(t.nnodes, 15);
  ASSERT_UINT_EQ(a->nchildren, 3);
  ASSERT_UINT_EQ(a->refs, 4); /* the tree + 3 children */
  ASSERT_NOT_NULL(find(&t, "root.a.c2.g1"));
  g_release_log[0] = '\0';
  arbor_tree_discard_children(a);
  ASSERT_EQ(g_tree_released, 12);
  ASSERT_UINT_EQ(t.nnodes, 3);
  ASSERT_NULL(a->first);
  ASSERT_NULL(a->last);
  ASSERT_UINT_EQ(a->nchildren, 0);
  ASSERT_UINT_EQ(a->refs, 1);
  ASSERT_NULL(find(&t, "root.a.c2.g1"));
  ASSERT_NULL(find(&t, "root.a.c0"));
  ASSERT_NULL(arbor_tree_child(a, "c1", 2));
  /* children before their parent, siblings in order */
  ASSERT_STR_EQ(g_release_log,
                "g0 g1 g2 c0 g0 g1 g2 c1 g0 g1 g2 c2");
  /* a and its sibling are untouched */
  ASSERT_PTR_EQ(find(&t, "root.a"), a);
  ASSERT_PTR_EQ(find(&t, "root.keep"), keep);
  ASSERT_PTR_EQ(t.root->first, a);
  ASSERT_PTR_EQ(a->next, keep);
  /* the names can be used again */
  arbor_node *c0 = add(a, "c0");
  ASSERT_PTR_EQ(find(&t, "root.a.c0"), c0);
  ASSERT_EQ(c0->flags, ARBOR_F_PENDING);
  /* discarding a node without children does nothing */
  arbor_tree_discard_children(c0);
  ASSERT_EQ(g_tree_released, 12);
  arbor_tree_close(&t);
  ASSERT_EQ(g_tree_released, 16);
  ASSERT_UINT_EQ(t.nnodes, 0);
  ASSERT_NULL(t.root);
}

TEST(refcount_outlives_detach) {
  arbor_tree t;
  setup(&t);
  arbor_node *b = add(t.root, "b");
  arbor_node *c = add(b, "c");
  arbor_node *sib = add(b, "sib");
  (void)sib;
  ASSERT_UINT_EQ(c->refs, 1);
  ASSERT_UINT_EQ(b->refs, 3);
  arbor_node_ref(c);
  ASSERT_UINT_EQ(c->refs, 2);
  g_release_log[0] = '\0';
  arbor_tree_discard_children(t.root);
  /* sib went; c is held, and so is b (c's parent, for c's DN) */
  ASSERT_EQ(g_tree_released, 1);
  ASSERT_STR_EQ(g_release_log, "sib");
  ASSERT(c->flags & ARBOR_F_DETACHED);
  ASSERT(b->flags & ARBOR_F_DETACHED);
  ASSERT_UINT_EQ(c->refs, 1);
  ASSERT_UINT_EQ(b->refs, 1);
  ASSERT_STR_EQ(dn(c), "root.b.c");
  ASSERT_STR_EQ(c->name, "c");
  ASSERT_NULL(find(&t, "root.b.c"));
  ASSERT_NULL(find(&t, "root.b"));
  ASSERT_UINT_EQ(t.nnodes, 1);
  ASSERT_UINT_EQ(t.root->nchildren, 0);
  ASSERT_UINT_EQ(t.root->refs, 2); /* the tree + the detached b */
  /* a new b does not collide with the detached one */
  arbor_node *b2 = add(t.root, "b");
  ASSERT_PTR_EQ(find(&t, "root.b"), b2);
  ASSERT_NULL(arbor_tree_child(b2, "c", 1));
  arbor_node_ref(c);
  arbor_node_unref(c);
  ASSERT_EQ(g_tree_released, 1);
  arbor_node_unref(c); /* last: c then b go */
  ASSERT_EQ(g_tree_released, 3);
  ASSERT_STR_EQ(g_release_log, "sib c b");
  ASSERT_UINT_EQ(t.root->refs, 2); /* the tree + b2 */
  arbor_tree_close(&t);
  ASSERT_EQ(g_tree_released, 5);
}

TEST(refcount_outlives_close) {
  arbor_tree t;
  setup(&t);
  arbor_node *root = t.root;
  arbor_node *a = add(t.root, "a");
  arbor_node *x = add(a, "x");
  add(a, "y");
  arbor_node_ref(x);
  arbor_node_ref(root);
  arbor_tree_close(&t);
  ASSERT_NULL(t.root);
  ASSERT_UINT_EQ(t.nnodes, 0);
  ASSERT_EQ(g_tree_released, 1); /* y only */
  ASSERT(root->flags & ARBOR_F_DETACHED);
  ASSERT_STR_EQ(dn(x), "root.a.x"); /* still readable */
  arbor_node_unref(x);
  ASSERT_EQ(g_tree_released, 3); /* x, then a */
  ASSERT_STR_EQ(g_release_log, "y x a");
  ASSERT_UINT_EQ(root->refs, 1); /* ours */
  ASSERT_STR_EQ(dn(root), "root");
  arbor_node_unref(root);
  ASSERT_EQ(g_tree_released, 4);
  ASSERT_STR_EQ(g_release_log, "y x a root");
}

TEST(allocated_and_detached_counts) {
  arbor_tree t;
  setup(&t);
  ASSERT_UINT_EQ(t.allocated, 1);
  arbor_node *a = add(t.root, "a");
  arbor_node *b = add(a, "b");
  add(a, "c");
  ASSERT_UINT_EQ(t.allocated, 4);
  ASSERT_UINT_EQ(t.nnodes, 4);
  int err = 0;
  ASSERT_NULL(arbor_tree_add(a, "b", 1, &err)); /* failures allocate nothing */
  ASSERT_NULL(arbor_tree_add(a, "b.", 2, &err));
  ASSERT_UINT_EQ(t.allocated, 4);
  arbor_node_ref(b);
  arbor_tree_discard_children(t.root);
  ASSERT_EQ(g_detached, 3); /* a, b, c: once each */
  ASSERT_UINT_EQ(t.nnodes, 1);
  ASSERT_UINT_EQ(t.allocated, 3); /* root, and b held, which holds a */
  arbor_node_unref(b);
  ASSERT_UINT_EQ(t.allocated, 1);
  ASSERT_EQ(g_detached, 3); /* freeing is not detaching again */
  arbor_tree_close(&t);
  ASSERT_EQ(g_detached, 4); /* the root */
  ASSERT_UINT_EQ(t.allocated, 0);
  ASSERT_EQ(g_tree_released, 4);
}

/* The engine outlives its tree's nodes: the release hook frees the owner of
   the tree once nothing is allocated (ASan / valgrind check the rest). */
typedef struct owner {
  int before;
  arbor_tree tree;
  int after;
} owner;

static int g_owner_freed;

static void owner_release(arbor_node *n, void *ud) {
  owner *o = ud;
  ASSERT_PTR_EQ(n->tree, &o->tree);
  if (o->tree.allocated == 0) {
    ASSERT_NULL(n->parent); /* the last one is the root */
    free(o);
    g_owner_freed++;
  }
}

TEST(release_hook_may_free_owner) {
  owner *o = calloc(1, sizeof *o);
  ASSERT_NOT_NULL(o);
  arbor_hooks h = {.release = owner_release, .ud = o};
  g_owner_freed = 0;
  ASSERT_EQ(arbor_tree_init(&o->tree, 0, &h), 0);
  arbor_node *a = add(o->tree.root, "a");
  arbor_node *b = add(a, "b");
  arbor_node_ref(b);
  arbor_tree_close(&o->tree);
  ASSERT_EQ(g_owner_freed, 0);
  ASSERT_UINT_EQ(o->tree.allocated, 3); /* b, a (b's parent), the root */
  arbor_node_unref(b);                  /* b, a, root, then the owner */
  ASSERT_EQ(g_owner_freed, 1);
}

TEST(declared_keeps_dead) {
  arbor_tree t;
  setup(&t);
  arbor_tree_start(t.root);
  arbor_node *p = add_start(t.root, "p");
  arbor_node *c = add_start(p, "c");
  /* escalation: p is declared DEAD from outside while it runs */
  p->flags |= ARBOR_F_DECLARED;
  set_state(p, ARBOR_DEAD);
  ASSERT_EQ(T(p)->last_to, ARBOR_DEAD);
  ASSERT(arbor_node_canceled(p));
  cancel(p);
  exit_state(c, ARBOR_CANCELED);
  int calls = T(p)->state_calls;
  exit_state(p, ARBOR_CANCELED); /* its own exit does not change it */
  ASSERT_EQ(p->state, ARBOR_DEAD);
  ASSERT_EQ(T(p)->state_calls, calls);
  ASSERT(!arbor_node_running(p));
  ASSERT_UINT_EQ(p->live, 0);
  ASSERT_UINT_EQ(t.root->live, 1);
  /* the same for a DONE exit */
  arbor_node *d = add_start(t.root, "d");
  set_state(d, ARBOR_HEALTHY);
  d->flags |= ARBOR_F_DECLARED;
  set_state(d, ARBOR_DEAD);
  exit_state(d, ARBOR_DONE);
  ASSERT_EQ(d->state, ARBOR_DEAD);
  /* the next start clears the declaration */
  arbor_tree_discard_children(p);
  arbor_tree_start(p);
  ASSERT_EQ(p->flags & ARBOR_F_DECLARED, 0);
  ASSERT_EQ(p->state, ARBOR_NEW);
  exit_state(p, ARBOR_CANCELED);
  ASSERT_EQ(p->state, ARBOR_CANCELED);
  arbor_tree_close(&t);
}

TEST(start_keeps_held) {
  arbor_tree t;
  setup(&t);
  arbor_node *a = add(t.root, "a");
  a->flags |= ARBOR_F_HELD | ARBOR_F_FORCED | ARBOR_F_CANCEL;
  arbor_tree_start(a);
  ASSERT_EQ(a->flags, ARBOR_F_HELD | ARBOR_F_RUNNING);
  exit_state(a, ARBOR_DONE);
  ASSERT_EQ(a->flags, ARBOR_F_HELD);
  arbor_tree_close(&t);
}

TEST(add_under_discarded_parent) {
  arbor_tree t;
  setup(&t);
  arbor_node *a = add(t.root, "a");
  arbor_node_ref(a); /* kept alive by someone else (a ctx, an event) */
  arbor_tree_discard_children(t.root);
  ASSERT(a->flags & ARBOR_F_DETACHED);
  int err = 0;
  ASSERT_PTR_EQ(arbor_tree_add(a, "late", 4, &err), NULL);
  ASSERT_EQ(err, ARBOR_EGONE);
  arbor_node_unref(a);
  arbor_tree_close(&t);
  ASSERT_UINT_EQ(t.allocated, 0);
  ASSERT_UINT_EQ(t.nnodes, 0);
}

TEST(hash_growth_100k_children) {
  enum { N = 100000 };
  arbor_tree t;
  setup(&t);
  arbor_tree_start(t.root);
  arbor_node *p = add_start(t.root, "p");
  static arbor_node *nodes[N];
  char name[32];
  for (int i = 0; i < N; i++) {
    int len = snprintf(name, sizeof name, "n%d", i);
    int err = 0;
    nodes[i] = arbor_tree_add(p, name, (size_t)len, &err);
    ASSERT_NOT_NULL(nodes[i]);
  }
  ASSERT_UINT_EQ(p->nchildren, N);
  ASSERT_UINT_EQ(t.nnodes, N + 2);
  ASSERT_UINT_GE(2 * t.nbuckets, t.nnodes); /* load factor <= 2 */
  ASSERT_EQ(t.nbuckets & (t.nbuckets - 1), 0); /* a power of two */
  for (int i = 0; i < N; i++) {
    int len = snprintf(name, sizeof name, "n%d", i);
    ASSERT_PTR_EQ(arbor_tree_child(p, name, (size_t)len), nodes[i]);
    len = snprintf(name, sizeof name, "root.p.n%d", i);
    ASSERT_PTR_EQ(arbor_tree_find(&t, name, (size_t)len), nodes[i]);
  }
  ASSERT_NULL(arbor_tree_child(p, "n100000", 7));
  ASSERT_NULL(arbor_tree_child(t.root, "n5", 2));
  ASSERT_NULL(arbor_tree_child(nodes[5], "n5", 2));
  int err = 0;
  ASSERT_NULL(arbor_tree_add(p, "n99999", 6, &err));
  ASSERT_EQ(err, ARBOR_EDUP);
  /* a sample of DNs, the order of the sibling list */
  ASSERT_PTR_EQ(p->first, nodes[0]);
  ASSERT_PTR_EQ(p->last, nodes[N - 1]);
  ASSERT_PTR_EQ(nodes[777]->next, nodes[778]);
  ASSERT_STR_EQ(dn(nodes[4242]), "root.p.n4242");
  /* starting all of them: counts */
  for (int i = 0; i < N; i++) arbor_tree_start(nodes[i]);
  ASSERT_UINT_EQ(p->live, N + 1);
  ASSERT_UINT_EQ(t.root->live, 2);
  ASSERT_UINT_EQ(t.running, N + 2);
  ASSERT_UINT_EQ(cancel(p), N + 1);
  for (int i = 0; i < N; i++) exit_state(nodes[i], ARBOR_CANCELED);
  ASSERT_UINT_EQ(p->live, 1);
  arbor_tree_discard_children(p);
  ASSERT_EQ(g_tree_released, N);
  ASSERT_UINT_EQ(t.nnodes, 2);
  ASSERT_NULL(arbor_tree_child(p, "n0", 2));
  /* the table still works after removals */
  arbor_node *again = add(p, "n0");
  ASSERT_PTR_EQ(find(&t, "root.p.n0"), again);
  arbor_tree_close(&t);
  ASSERT_EQ(g_tree_released, N + 3);
}

TEST(many_parents_same_names) {
  /* the hash key is (parent, name): the same names under many parents */
  arbor_tree t;
  setup(&t);
  enum { P = 300, C = 20 };
  arbor_node *parents[P];
  char name[32];
  for (int i = 0; i < P; i++) {
    snprintf(name, sizeof name, "p%d", i);
    parents[i] = add(t.root, name);
    for (int j = 0; j < C; j++) {
      snprintf(name, sizeof name, "c%d", j);
      add(parents[i], name);
    }
  }
  for (int i = 0; i < P; i++)
    for (int j = 0; j < C; j++) {
      int len = snprintf(name, sizeof name, "root.p%d.c%d", i, j);
      arbor_node *n = arbor_tree_find(&t, name, (size_t)len);
      ASSERT_NOT_NULL(n);
      ASSERT_PTR_EQ(n->parent, parents[i]);
      ASSERT_STR_EQ(dn(n), name);
    }
  ASSERT_UINT_EQ(t.nnodes, 1 + P + P * C);
  arbor_tree_close(&t);
  ASSERT_EQ(g_tree_released, 1 + P + P * C);
}

TEST_MAIN()

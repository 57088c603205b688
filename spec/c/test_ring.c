/* test_ring.c: the bounded event ring (src/core/ring.c, T14) and the
 * reference-counted strings it holds (src/str.c). */
#include "core/ring.h"
#include "test.h"

/* Cancels n with nothing exempt and no visitor. */
static size_t cancel(arbor_node *n) { return arbor_tree_cancel(n, NULL, NULL, NULL); }

static int g_released;
static char g_log[256];

static void on_release(arbor_node *n, void *ud) {
  (void)ud;
  g_released++;
  size_t len = strlen(g_log);
  if (len + n->namelen + 2 < sizeof g_log) {
    if (len) g_log[len++] = ' ';
    memcpy(g_log + len, n->name, n->namelen);
    g_log[len + n->namelen] = '\0';
  }
}

static void setup(arbor_tree *t) {
  arbor_hooks h = {.release = on_release};
  g_released = 0;
  g_log[0] = '\0';
  ASSERT_EQ(arbor_tree_init(t, 0, &h), 0);
}

static arbor_node *add(arbor_node *parent, const char *name) {
  int err = 0;
  arbor_node *n = arbor_tree_add(parent, name, strlen(name), &err);
  ASSERT_NOT_NULL(n);
  return n;
}

TEST(str_basics) {
  arbor_str *s = arbor_str_new("hello", 5);
  ASSERT_NOT_NULL(s);
  ASSERT_UINT_EQ(s->refs, 1);
  ASSERT_UINT_EQ(s->len, 5);
  ASSERT_STR_EQ(s->s, "hello");
  /* len counts, not the NUL: a prefix, or embedded NULs */
  arbor_str *p = arbor_str_new("hello", 3);
  ASSERT_STR_EQ(p->s, "hel");
  arbor_str *z = arbor_str_new("a\0b", 3);
  ASSERT_UINT_EQ(z->len, 3);
  ASSERT_EQ(z->s[1], '\0');
  ASSERT_EQ(z->s[2], 'b');
  ASSERT_EQ(z->s[3], '\0');
  arbor_str *e = arbor_str_new("", 0);
  ASSERT_STR_EQ(e->s, "");
  ASSERT_PTR_EQ(arbor_str_ref(s), s);
  ASSERT_UINT_EQ(s->refs, 2);
  arbor_str_unref(s);
  ASSERT_UINT_EQ(s->refs, 1);
  ASSERT_NULL(arbor_str_ref(NULL));
  arbor_str_unref(NULL);
  /* set: takes a reference to the new value, drops the old one */
  arbor_str *slot = NULL;
  arbor_str_set(&slot, s);
  ASSERT_PTR_EQ(slot, s);
  ASSERT_UINT_EQ(s->refs, 2);
  arbor_str_set(&slot, p);
  ASSERT_UINT_EQ(s->refs, 1);
  ASSERT_UINT_EQ(p->refs, 2);
  arbor_str_set(&slot, slot); /* the same string: still alive */
  ASSERT_UINT_EQ(p->refs, 2);
  ASSERT_STR_EQ(slot->s, "hel");
  arbor_str_set(&slot, NULL);
  ASSERT_NULL(slot);
  ASSERT_UINT_EQ(p->refs, 1);
  arbor_str_unref(s);
  arbor_str_unref(p);
  arbor_str_unref(z);
  arbor_str_unref(e);
}

TEST(str_fmt) {
  arbor_str *s = arbor_str_fmt("child %s escalated: %d", "root.a", 42);
  ASSERT_STR_EQ(s->s, "child root.a escalated: 42");
  ASSERT_UINT_EQ(s->len, strlen(s->s));
  ASSERT_UINT_EQ(s->refs, 1);
  arbor_str_unref(s);
  /* longer than the stack buffer of arbor_str_fmt */
  char big[2000];
  memset(big, 'q', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  s = arbor_str_fmt("<%s|%s>", big, "end");
  ASSERT_UINT_EQ(s->len, 1 + 1999 + 1 + 3 + 1);
  ASSERT_EQ(s->s[0], '<');
  ASSERT_EQ(s->s[1999], 'q');
  ASSERT_STR_EQ(s->s + 2001, "end>");
  ASSERT_UINT_EQ(strlen(s->s), s->len);
  arbor_str_unref(s);
  /* exactly at the boundary: 511 and 512 characters */
  for (int n = 510; n <= 513; n++) {
    s = arbor_str_fmt("%.*s", n, big);
    ASSERT_UINT_EQ(s->len, (size_t)n);
    ASSERT_UINT_EQ(strlen(s->s), (size_t)n);
    arbor_str_unref(s);
  }
  s = arbor_str_fmt("%s", "");
  ASSERT_UINT_EQ(s->len, 0);
  arbor_str_unref(s);
}

TEST(ring_empty) {
  arbor_ring r;
  ASSERT_EQ(arbor_ring_init(&r, 4, SIZE_MAX), 0);
  ASSERT_UINT_EQ(r.cap, 4);
  ASSERT_UINT_EQ(r.len, 0);
  ASSERT_UINT_EQ(r.next_seq, 1);
  ASSERT_UINT_EQ(arbor_ring_first(&r), 1);
  ASSERT_NULL(arbor_ring_get(&r, 0));
  ASSERT_NULL(arbor_ring_get(&r, 1));
  arbor_ring_close(&r);
  /* a capacity of 0 means 1 */
  ASSERT_EQ(arbor_ring_init(&r, 0, SIZE_MAX), 0);
  ASSERT_UINT_EQ(r.cap, 1);
  arbor_ring_close(&r);
}

TEST(ring_wraps_keeping_newest) {
  arbor_tree t;
  setup(&t);
  arbor_node *a = add(t.root, "a");
  arbor_tree_start(a);
  arbor_ring r;
  enum { CAP = 8, PUSH = 29 };
  ASSERT_EQ(arbor_ring_init(&r, CAP, SIZE_MAX), 0);
  for (int i = 1; i <= PUSH; i++) {
    uint64_t seq = arbor_ring_push(&r, 100.0 + i, i % 2 ? a : t.root,
                                   (arbor_event_kind)(i % 3),
                                   (arbor_state)(i % 5),
                                   (arbor_state)((i + 1) % 5), NULL);
    ASSERT_UINT_EQ(seq, (uint64_t)i);
    ASSERT_UINT_EQ(r.len, i < CAP ? (size_t)i : (size_t)CAP);
    ASSERT_UINT_EQ(arbor_ring_first(&r), i <= CAP ? 1u : (uint64_t)(i - CAP + 1));
    /* after every push: the newest min(i, CAP) events, consecutive seqs */
    for (uint64_t s = arbor_ring_first(&r); s <= (uint64_t)i; s++) {
      const arbor_event *e = arbor_ring_get(&r, s);
      ASSERT_NOT_NULL(e);
      ASSERT_UINT_EQ(e->seq, s);
    }
  }
  ASSERT_UINT_EQ(r.next_seq, PUSH + 1);
  ASSERT_UINT_EQ(r.len, CAP);
  uint64_t first = arbor_ring_first(&r);
  ASSERT_UINT_EQ(first, PUSH - CAP + 1);
  for (uint64_t s = first; s <= PUSH; s++) {
    const arbor_event *e = arbor_ring_get(&r, s);
    ASSERT_NOT_NULL(e);
    ASSERT_UINT_EQ(e->seq, s);
    ASSERT_DBL_EQ(e->time, 100.0 + (double)s);
    ASSERT_PTR_EQ(e->node, s % 2 ? a : t.root);
    ASSERT_EQ(e->kind, (int)(s % 3));
    ASSERT_EQ(e->from, (int)(s % 5));
    ASSERT_EQ(e->to, (int)((s + 1) % 5));
    ASSERT_NULL(e->reason);
    ASSERT_UINT_EQ(e->incarnation, s % 2 ? 1u : 0u);
  }
  /* bounds */
  ASSERT_NULL(arbor_ring_get(&r, 0));
  ASSERT_NULL(arbor_ring_get(&r, first - 1));
  ASSERT_NULL(arbor_ring_get(&r, 1));
  ASSERT_NULL(arbor_ring_get(&r, PUSH + 1));
  ASSERT_NULL(arbor_ring_get(&r, UINT64_MAX));
  ASSERT_NOT_NULL(arbor_ring_get(&r, first));
  ASSERT_NOT_NULL(arbor_ring_get(&r, PUSH));
  /* the ring's references on the nodes: CAP events, half on each */
  ASSERT_UINT_EQ(a->refs, 1 + CAP / 2);
  ASSERT_UINT_EQ(t.root->refs, 1 + 1 + CAP / 2); /* tree, child a, events */
  arbor_ring_close(&r);
  ASSERT_UINT_EQ(a->refs, 1);
  ASSERT_UINT_EQ(t.root->refs, 2);
  ASSERT_EQ(g_released, 0);
  arbor_tree_close(&t);
  ASSERT_EQ(g_released, 2);
}

TEST(ring_capacity_one) {
  arbor_tree t;
  setup(&t);
  arbor_ring r;
  ASSERT_EQ(arbor_ring_init(&r, 1, SIZE_MAX), 0);
  for (int i = 1; i <= 5; i++) {
    ASSERT_UINT_EQ(arbor_ring_push(&r, i, t.root, ARBOR_EV_STATE, ARBOR_NEW,
                                   ARBOR_HEALTHY, NULL),
                   (uint64_t)i);
    ASSERT_UINT_EQ(r.len, 1);
    ASSERT_UINT_EQ(arbor_ring_get(&r, (uint64_t)i)->seq, (uint64_t)i);
    ASSERT_NULL(arbor_ring_get(&r, (uint64_t)i - 1));
    ASSERT_UINT_EQ(t.root->refs, 2);
  }
  arbor_ring_close(&r);
  ASSERT_UINT_EQ(t.root->refs, 1);
  arbor_tree_close(&t);
  ASSERT_EQ(g_released, 1);
}

TEST(event_keeps_discarded_node) {
  arbor_tree t;
  setup(&t);
  arbor_tree_start(t.root);
  arbor_node *svc = add(t.root, "svc");
  arbor_tree_start(svc);
  arbor_node *w = add(svc, "worker");
  arbor_tree_start(w);
  arbor_ring r;
  ASSERT_EQ(arbor_ring_init(&r, 3, SIZE_MAX), 0);
  uint64_t seq = arbor_ring_push(&r, 1.5, w, ARBOR_EV_STATE, ARBOR_NEW,
                                 ARBOR_DEAD, NULL);
  ASSERT_UINT_EQ(w->refs, 2);
  /* svc restarts: its children are discarded, the event still holds w */
  arbor_tree_exit(w, ARBOR_DEAD);
  cancel(svc);
  arbor_tree_exit(svc, ARBOR_CANCELED);
  arbor_tree_discard_children(svc);
  arbor_tree_start(svc);
  ASSERT_EQ(g_released, 0);
  ASSERT_NULL(arbor_tree_find(&t, "root.svc.worker", 15));
  const arbor_event *e = arbor_ring_get(&r, seq);
  ASSERT_PTR_EQ(e->node, w);
  ASSERT(e->node->flags & ARBOR_F_DETACHED);
  char buf[64];
  ASSERT_UINT_EQ(arbor_node_dn(e->node, buf, sizeof buf), 15);
  ASSERT_STR_EQ(buf, "root.svc.worker");
  ASSERT_UINT_EQ(e->incarnation, 1);
  ASSERT_EQ(e->node->state, ARBOR_DEAD);
  /* a new worker of the same name is a different node */
  arbor_node *w2 = add(svc, "worker");
  ASSERT_PTR_NE(w2, w);
  /* the event stays readable until it is overwritten: 2 more fit */
  arbor_ring_push(&r, 2, w2, ARBOR_EV_STATE, ARBOR_NEW, ARBOR_NEW, NULL);
  arbor_ring_push(&r, 3, svc, ARBOR_EV_STATE, ARBOR_CANCELED, ARBOR_NEW, NULL);
  ASSERT_EQ(g_released, 0);
  ASSERT_STR_EQ(arbor_ring_get(&r, seq)->node->name, "worker");
  arbor_ring_push(&r, 4, svc, ARBOR_EV_POLICY, ARBOR_NEW, ARBOR_NEW, NULL);
  ASSERT_EQ(g_released, 1); /* overwritten: the old worker is freed now */
  ASSERT_STR_EQ(g_log, "worker");
  ASSERT_NULL(arbor_ring_get(&r, seq));
  arbor_ring_close(&r);
  arbor_tree_close(&t);
  ASSERT_EQ(g_released, 4);
}

TEST(event_snapshot_of_incarnation) {
  arbor_tree t;
  setup(&t);
  arbor_ring r;
  ASSERT_EQ(arbor_ring_init(&r, 16, SIZE_MAX), 0);
  arbor_node *a = add(t.root, "a");
  for (int i = 0; i < 5; i++) {
    arbor_tree_start(a);
    arbor_ring_push(&r, i, a, ARBOR_EV_STATE, ARBOR_DEAD, ARBOR_NEW, NULL);
    arbor_tree_exit(a, ARBOR_DEAD);
  }
  for (uint64_t s = 1; s <= 5; s++)
    ASSERT_UINT_EQ(arbor_ring_get(&r, s)->incarnation, s);
  arbor_ring_close(&r);
  arbor_tree_close(&t);
}

TEST(ring_closed_after_tree) {
  /* the engine may close the tree first: the ring's nodes go on close */
  arbor_tree t;
  setup(&t);
  arbor_node *a = add(t.root, "a");
  arbor_node *b = add(a, "b");
  arbor_ring r;
  ASSERT_EQ(arbor_ring_init(&r, 4, SIZE_MAX), 0);
  arbor_ring_push(&r, 0, b, ARBOR_EV_STATE, ARBOR_NEW, ARBOR_NEW, NULL);
  arbor_ring_push(&r, 0, t.root, ARBOR_EV_STATE, ARBOR_NEW, ARBOR_NEW, NULL);
  arbor_tree_close(&t);
  ASSERT_EQ(g_released, 0); /* b holds a, a holds root; root is held too */
  char buf[32];
  arbor_node_dn(arbor_ring_get(&r, 1)->node, buf, sizeof buf);
  ASSERT_STR_EQ(buf, "root.a.b");
  arbor_ring_close(&r);
  ASSERT_EQ(g_released, 3);
  ASSERT_STR_EQ(g_log, "b a root");
}

TEST(reason_strings_referenced) {
  arbor_tree t;
  setup(&t);
  arbor_ring r;
  ASSERT_EQ(arbor_ring_init(&r, 2, SIZE_MAX), 0);
  arbor_str *boom = arbor_str_fmt("error: %s", "boom");
  arbor_str *keep = arbor_str_new("kept", 4);
  arbor_ring_push(&r, 0, t.root, ARBOR_EV_STATE, ARBOR_NEW, ARBOR_DEAD, boom);
  ASSERT_UINT_EQ(boom->refs, 2);
  arbor_str_unref(boom); /* the ring's reference keeps it */
  ASSERT_UINT_EQ(boom->refs, 1);
  const arbor_event *e = arbor_ring_get(&r, 1);
  ASSERT_PTR_EQ(e->reason, boom);
  ASSERT_STR_EQ(e->reason->s, "error: boom");
  /* the same string in two events */
  arbor_ring_push(&r, 1, t.root, ARBOR_EV_STATE, ARBOR_DEAD, ARBOR_NEW, keep);
  arbor_ring_push(&r, 2, t.root, ARBOR_EV_POLICY, ARBOR_NEW, ARBOR_NEW, keep);
  ASSERT_UINT_EQ(keep->refs, 3);
  /* event 1 was overwritten: boom is gone (valgrind/ASan check the free) */
  ASSERT_NULL(arbor_ring_get(&r, 1));
  ASSERT_STR_EQ(arbor_ring_get(&r, 2)->reason->s, "kept");
  arbor_ring_push(&r, 3, t.root, ARBOR_EV_COORDINATOR, ARBOR_NEW, ARBOR_NEW,
                  NULL);
  ASSERT_UINT_EQ(keep->refs, 2);
  ASSERT_NULL(arbor_ring_get(&r, 4)->reason);
  ASSERT_EQ(arbor_ring_get(&r, 4)->kind, ARBOR_EV_COORDINATOR);
  arbor_ring_close(&r);
  ASSERT_UINT_EQ(keep->refs, 1);
  ASSERT_STR_EQ(keep->s, "kept");
  arbor_str_unref(keep);
  arbor_tree_close(&t);
}

TEST(push_sets_no_delay) {
  arbor_tree t;
  setup(&t);
  arbor_ring r;
  ASSERT_EQ(arbor_ring_init(&r, 2, SIZE_MAX), 0);
  for (int i = 0; i < 3; i++) {
    uint64_t seq = arbor_ring_push(&r, 0, t.root, ARBOR_EV_POLICY, ARBOR_NEW,
                                   ARBOR_NEW, NULL);
    ASSERT_DBL_EQ(arbor_ring_get(&r, seq)->delay, -1);
    /* the engine fills the delay in afterwards; a reused slot resets it */
    ((arbor_event *)arbor_ring_get(&r, seq))->delay = 2.5;
  }
  arbor_ring_close(&r);
  arbor_tree_close(&t);
}

TEST(copy_keeps_seq_and_references) {
  arbor_tree t;
  setup(&t);
  arbor_node *a = add(t.root, "a");
  arbor_tree_start(a);
  arbor_ring r, out;
  ASSERT_EQ(arbor_ring_init(&r, 4, SIZE_MAX), 0);
  ASSERT_EQ(arbor_ring_init(&out, 3, SIZE_MAX), 0);
  arbor_str *why = arbor_str_new("restart in 1.5s", 15);
  for (int i = 0; i < 6; i++)
    arbor_ring_push(&r, i, t.root, ARBOR_EV_STATE, ARBOR_NEW, ARBOR_HEALTHY,
                    NULL);
  uint64_t seq = arbor_ring_push(&r, 7.5, a, ARBOR_EV_POLICY, ARBOR_DEAD,
                                 ARBOR_DEAD, why);
  ASSERT_UINT_EQ(seq, 7);
  arbor_event *ev = (arbor_event *)arbor_ring_get(&r, seq);
  ev->delay = 1.5;
  arbor_tree_exit(a, ARBOR_DEAD);
  arbor_tree_start(a); /* incarnation 2: the copy keeps the event's 1 */
  arbor_ring_copy(&out, ev);
  ASSERT_UINT_EQ(out.len, 1);
  const arbor_event *c = &out.ev[out.start];
  ASSERT_UINT_EQ(c->seq, 7);
  ASSERT_DBL_EQ(c->time, 7.5);
  ASSERT_PTR_EQ(c->node, a);
  ASSERT_UINT_EQ(c->incarnation, 1);
  ASSERT_EQ(c->kind, ARBOR_EV_POLICY);
  ASSERT_EQ(c->from, ARBOR_DEAD);
  ASSERT_EQ(c->to, ARBOR_DEAD);
  ASSERT_PTR_EQ(c->reason, why);
  ASSERT_DBL_EQ(c->delay, 1.5);
  ASSERT_UINT_EQ(why->refs, 3); /* ours, the ring's, the copy's */
  ASSERT_UINT_EQ(a->refs, 3);   /* the tree, the ring, the copy */
  /* the copy outlives the original */
  arbor_ring_close(&r);
  ASSERT_UINT_EQ(why->refs, 2);
  ASSERT_UINT_EQ(a->refs, 2);
  ASSERT_STR_EQ(c->reason->s, "restart in 1.5s");
  /* full: the oldest copy goes, with its references */
  for (int i = 0; i < 3; i++) {
    arbor_event e2 = *c;
    e2.seq = 100 + (uint64_t)i;
    e2.reason = NULL;
    arbor_ring_copy(&out, &e2);
  }
  ASSERT_UINT_EQ(out.len, 3);
  ASSERT_UINT_EQ(why->refs, 1);
  for (size_t k = 0; k < out.len; k++)
    ASSERT_UINT_EQ(out.ev[(out.start + k) % out.cap].seq, 100 + k);
  ASSERT_UINT_EQ(a->refs, 4);
  arbor_ring_close(&out);
  ASSERT_UINT_EQ(a->refs, 1);
  arbor_str_unref(why);
  arbor_tree_close(&t);
  ASSERT_EQ(g_released, 2);
}

TEST(clear_releases_and_seqs_continue) {
  arbor_tree t;
  setup(&t);
  arbor_node *a = add(t.root, "a");
  arbor_str *why = arbor_str_new("x", 1);
  arbor_ring r;
  ASSERT_EQ(arbor_ring_init(&r, 4, SIZE_MAX), 0);
  for (int i = 0; i < 6; i++)
    arbor_ring_push(&r, i, a, ARBOR_EV_STATE, ARBOR_NEW, ARBOR_NEW, why);
  ASSERT_UINT_EQ(a->refs, 5);
  ASSERT_UINT_EQ(why->refs, 5);
  arbor_ring_clear(&r);
  ASSERT_UINT_EQ(r.len, 0);
  ASSERT_UINT_EQ(a->refs, 1);
  ASSERT_UINT_EQ(why->refs, 1);
  ASSERT_UINT_EQ(arbor_ring_first(&r), 7);
  for (uint64_t s = 0; s <= 8; s++) ASSERT_NULL(arbor_ring_get(&r, s));
  /* a discarded node held only by cleared events is freed by the clear */
  arbor_ring_push(&r, 9, a, ARBOR_EV_STATE, ARBOR_NEW, ARBOR_NEW, NULL);
  arbor_tree_discard_children(t.root);
  ASSERT_EQ(g_released, 0);
  ASSERT_UINT_EQ(arbor_ring_push(&r, 10, t.root, ARBOR_EV_STATE, ARBOR_NEW,
                                 ARBOR_NEW, NULL),
                 8);
  ASSERT_PTR_EQ(arbor_ring_get(&r, 7)->node, a);
  arbor_ring_clear(&r);
  ASSERT_EQ(g_released, 1);
  arbor_ring_clear(&r); /* empty: nothing */
  ASSERT_UINT_EQ(r.next_seq, 9);
  arbor_ring_close(&r);
  arbor_str_unref(why);
  arbor_tree_close(&t);
  ASSERT_EQ(g_released, 2);
}

TEST(many_events) {
  /* a long run: references balance out whatever the wrap position */
  arbor_tree t;
  setup(&t);
  arbor_node *n[10];
  char name[8];
  for (int i = 0; i < 10; i++) {
    snprintf(name, sizeof name, "n%d", i);
    n[i] = add(t.root, name);
  }
  arbor_str *why = arbor_str_new("why", 3);
  arbor_ring r;
  ASSERT_EQ(arbor_ring_init(&r, 37, SIZE_MAX), 0);
  for (int i = 0; i < 100000; i++)
    arbor_ring_push(&r, i, n[i % 10], ARBOR_EV_STATE, ARBOR_NEW, ARBOR_NEW,
                    i % 3 ? why : NULL);
  ASSERT_UINT_EQ(arbor_ring_first(&r), 100000 - 37 + 1);
  unsigned with_reason = 0, node_refs = 0;
  for (uint64_t s = arbor_ring_first(&r); s < r.next_seq; s++) {
    const arbor_event *e = arbor_ring_get(&r, s);
    ASSERT_DBL_EQ(e->time, (double)(s - 1));
    ASSERT_PTR_EQ(e->node, n[(s - 1) % 10]);
    with_reason += e->reason != NULL;
  }
  ASSERT_UINT_EQ(why->refs, 1 + with_reason);
  for (int i = 0; i < 10; i++) node_refs += n[i]->refs - 1;
  ASSERT_UINT_EQ(node_refs, 37);
  arbor_ring_close(&r);
  ASSERT_UINT_EQ(why->refs, 1);
  arbor_str_unref(why);
  arbor_tree_close(&t);
  ASSERT_EQ(g_released, 11);
}

/* A string of n bytes: 'x' repeated, then the decimal tag at its start. */
static arbor_str *long_str(size_t n, int tag) {
  char *buf = malloc(n);
  ASSERT_NOT_NULL(buf);
  memset(buf, 'x', n);
  char head[16];
  int hl = snprintf(head, sizeof head, "%d:", tag);
  memcpy(buf, head, (size_t)hl < n ? (size_t)hl : n);
  arbor_str *s = arbor_str_new(buf, n);
  free(buf);
  ASSERT_NOT_NULL(s);
  return s;
}

TEST(ring_counts_reason_bytes) {
  arbor_tree t;
  setup(&t);
  arbor_ring r;
  ASSERT_EQ(arbor_ring_init(&r, 3, SIZE_MAX), 0);
  arbor_str *a = arbor_str_new("abc", 3), *b = arbor_str_new("hello", 5);
  arbor_ring_push(&r, 0, t.root, ARBOR_EV_STATE, ARBOR_NEW, ARBOR_DEAD, a);
  arbor_ring_push(&r, 0, t.root, ARBOR_EV_STATE, ARBOR_NEW, ARBOR_DEAD, NULL);
  ASSERT_UINT_EQ(r.bytes, 3);
  arbor_ring_push(&r, 0, t.root, ARBOR_EV_STATE, ARBOR_NEW, ARBOR_DEAD, b);
  arbor_ring_push(&r, 0, t.root, ARBOR_EV_STATE, ARBOR_NEW, ARBOR_DEAD, b);
  ASSERT_UINT_EQ(r.bytes, 10); /* a left; b counts once per event */
  arbor_ring_clear(&r);
  ASSERT_UINT_EQ(r.bytes, 0);
  arbor_ring_push(&r, 0, t.root, ARBOR_EV_STATE, ARBOR_NEW, ARBOR_DEAD, a);
  arbor_ring_close(&r);
  ASSERT_UINT_EQ(a->refs, 1);
  ASSERT_UINT_EQ(b->refs, 1);
  arbor_str_unref(a);
  arbor_str_unref(b);
  arbor_tree_close(&t);
}

TEST(ring_cuts_long_reasons) {
  arbor_tree t;
  setup(&t);
  arbor_ring r;
  ASSERT_EQ(arbor_ring_init(&r, 8, SIZE_MAX), 0);
  /* at the limit: shared, not copied */
  arbor_str *at = long_str(ARBOR_REASON_MAX, 1);
  arbor_ring_push(&r, 0, t.root, ARBOR_EV_STATE, ARBOR_NEW, ARBOR_DEAD, at);
  ASSERT_PTR_EQ(arbor_ring_get(&r, 1)->reason, at);
  ASSERT_UINT_EQ(at->refs, 2);
  /* one byte over, and 1 MiB: a copy of ARBOR_REASON_MAX bytes at most */
  size_t lens[] = {ARBOR_REASON_MAX + 1, 1u << 20};
  for (int i = 0; i < 2; i++) {
    arbor_str *big = long_str(lens[i], 2 + i);
    uint64_t seq = arbor_ring_push(&r, 0, t.root, ARBOR_EV_STATE, ARBOR_NEW,
                                   ARBOR_DEAD, big);
    ASSERT_UINT_EQ(big->refs, 1); /* the ring does not hold the original */
    const arbor_str *c = arbor_ring_get(&r, seq)->reason;
    ASSERT_PTR_NE(c, big);
    ASSERT(c->len <= ARBOR_REASON_MAX);
    ASSERT(c->len > ARBOR_REASON_MAX - 32);
    ASSERT_UINT_EQ(strlen(c->s), c->len);
    char mark[48], head[16];
    snprintf(mark, sizeof mark, "x... (%zu bytes)", lens[i]);
    ASSERT_STR_EQ(c->s + c->len - strlen(mark), mark);
    snprintf(head, sizeof head, "%d:xx", 2 + i);
    ASSERT(memcmp(c->s, head, strlen(head)) == 0);
    arbor_str_unref(big);
  }
  size_t held = r.bytes;
  ASSERT_UINT_EQ(held, ARBOR_REASON_MAX + arbor_ring_get(&r, 2)->reason->len +
                           arbor_ring_get(&r, 3)->reason->len);
  arbor_ring_close(&r);
  ASSERT_UINT_EQ(at->refs, 1);
  arbor_str_unref(at);
  arbor_tree_close(&t);
}

TEST(ring_cut_keeps_utf8_whole) {
  arbor_tree t;
  setup(&t);
  arbor_ring r;
  ASSERT_EQ(arbor_ring_init(&r, 2, SIZE_MAX), 0);
  /* "é" (2 bytes) repeated: whatever the marker's length, the cut must not
     split one */
  size_t n = 3 * ARBOR_REASON_MAX;
  char *buf = malloc(n);
  for (size_t i = 0; i < n; i += 2) memcpy(buf + i, "\xc3\xa9", 2);
  arbor_str *s = arbor_str_new(buf, n);
  free(buf);
  arbor_ring_push(&r, 0, t.root, ARBOR_EV_STATE, ARBOR_NEW, ARBOR_DEAD, s);
  const arbor_str *c = arbor_ring_get(&r, 1)->reason;
  const char *dots = strstr(c->s, "... (");
  ASSERT_NOT_NULL(dots);
  ASSERT_UINT_EQ((size_t)(dots - c->s) % 2, 0);
  ASSERT_EQ((unsigned char)dots[-1], 0xa9);
  arbor_ring_close(&r);
  arbor_str_unref(s);
  arbor_tree_close(&t);
}

TEST(ring_bounded_in_bytes) {
  /* a crash loop of unique long reasons: the ring drops its oldest events to
     stay within max_bytes, and keeps the newest whatever it holds */
  arbor_tree t;
  setup(&t);
  arbor_ring r;
  enum { MAX = 3 * ARBOR_REASON_MAX };
  ASSERT_EQ(arbor_ring_init(&r, 1000, MAX), 0);
  for (int i = 1; i <= 100; i++) {
    arbor_str *s = long_str(1u << 20, i);
    arbor_ring_push(&r, i, t.root, ARBOR_EV_STATE, ARBOR_NEW, ARBOR_DEAD, s);
    arbor_ring_push(&r, i, t.root, ARBOR_EV_POLICY, ARBOR_DEAD, ARBOR_DEAD,
                    NULL);
    arbor_str_unref(s);
    ASSERT(r.bytes <= MAX);
    ASSERT_UINT_EQ(r.next_seq, (uint64_t)(2 * i + 1));
    /* the newest events are still there, consecutive */
    for (uint64_t q = arbor_ring_first(&r); q < r.next_seq; q++)
      ASSERT_UINT_EQ(arbor_ring_get(&r, q)->seq, q);
  }
  ASSERT(r.len >= 5 && r.len <= 7); /* 3 long reasons, the rest none */
  char head[16];
  snprintf(head, sizeof head, "100:");
  const arbor_event *last = arbor_ring_get(&r, r.next_seq - 2);
  ASSERT(memcmp(last->reason->s, head, 4) == 0);
  arbor_ring_close(&r);
  /* a cap below ARBOR_REASON_MAX also cuts: the newest always fits */
  ASSERT_EQ(arbor_ring_init(&r, 10, 100), 0);
  arbor_str *s = long_str(5000, 7);
  for (int i = 0; i < 3; i++) {
    arbor_ring_push(&r, 0, t.root, ARBOR_EV_STATE, ARBOR_NEW, ARBOR_DEAD, s);
    ASSERT_UINT_EQ(r.len, 1);
    ASSERT(r.bytes <= 100);
  }
  const char *tail = "x... (5000 bytes)";
  ASSERT_UINT_EQ(r.bytes, 100);
  ASSERT_STR_EQ(arbor_ring_get(&r, 3)->reason->s + 100 - strlen(tail), tail);
  arbor_ring_close(&r);
  arbor_str_unref(s);
  arbor_tree_close(&t);
}

TEST(copies_with_consecutive_seqs_are_read_by_seq) {
  /* the outbox: copies of a ring's events, dropping the oldest when full;
     its first seq tells what was dropped */
  arbor_tree t;
  setup(&t);
  arbor_ring r, out;
  ASSERT_EQ(arbor_ring_init(&r, 100, SIZE_MAX), 0);
  ASSERT_EQ(arbor_ring_init(&out, 4, SIZE_MAX), 0);
  for (int i = 0; i < 10; i++)
    arbor_ring_push(&r, i, t.root, ARBOR_EV_STATE, ARBOR_NEW, ARBOR_NEW, NULL);
  for (uint64_t s = 4; s <= 10; s++) arbor_ring_copy(&out, arbor_ring_get(&r, s));
  ASSERT_UINT_EQ(out.next_seq, 11);
  ASSERT_UINT_EQ(arbor_ring_first(&out), 7);
  ASSERT_NULL(arbor_ring_get(&out, 6));
  for (uint64_t s = 7; s <= 10; s++)
    ASSERT_UINT_EQ(arbor_ring_get(&out, s)->seq, s);
  arbor_ring_clear(&out);
  ASSERT_UINT_EQ(arbor_ring_first(&out), 11);
  arbor_ring_close(&out);
  arbor_ring_close(&r);
  arbor_tree_close(&t);
}

TEST_MAIN()

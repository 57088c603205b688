/* test_sched.c: the timer heap (src/sched.c). */
#include "core/timers.h"
#include "test.h"

/* Checks the heap's own bookkeeping: every entry knows its position and no
   parent comes after its children. */
static void check_heap(const arbor_timers *s) {
  ASSERT_UINT_LE(s->len, s->cap);
  for (size_t i = 0; i < s->len; i++) {
    ASSERT_UINT_EQ(s->heap[i]->idx, i + 1);
    if (i > 0) {
      const arbor_timer *p = s->heap[(i - 1) / 2], *c = s->heap[i];
      ASSERT(p->due < c->due || (p->due == c->due && p->seq < c->seq));
    }
  }
}

static void arm(arbor_timers *s, arbor_timer *t, double due) {
  ASSERT_EQ(arbor_timers_arm(s, t, due), 0);
  ASSERT(arbor_timer_armed(t));
  ASSERT_DBL_EQ(t->due, due);
  check_heap(s);
}

TEST(empty) {
  arbor_timers s;
  arbor_timers_init(&s);
  ASSERT_NULL(arbor_timers_peek(&s));
  ASSERT_NULL(arbor_timers_pop_due(&s, 1e300));
  arbor_timer t = {0};
  ASSERT(!arbor_timer_armed(&t));
  arbor_timers_disarm(&s, &t); /* not armed: nothing happens */
  ASSERT_UINT_EQ(s.len, 0);
  arbor_timers_close(&s);
  arbor_timers_close(&s); /* closing twice is harmless */
}

TEST(order_by_due) {
  arbor_timers s;
  arbor_timers_init(&s);
  static const double dues[] = {5, 1, 3, 2, 4, 0.5, 10, 7.25, 6, -1};
  enum { N = sizeof dues / sizeof *dues };
  arbor_timer t[N];
  memset(t, 0, sizeof t);
  for (int i = 0; i < N; i++) {
    t[i].kind = i;
    arm(&s, &t[i], dues[i]);
  }
  ASSERT_UINT_EQ(s.len, N);
  ASSERT_PTR_EQ(arbor_timers_peek(&s), &t[9]);
  static const int order[] = {9, 5, 1, 3, 2, 4, 0, 8, 7, 6};
  for (int i = 0; i < N; i++) {
    arbor_timer *x = arbor_timers_pop_due(&s, 100);
    ASSERT_NOT_NULL(x);
    ASSERT_EQ(x->kind, order[i]);
    ASSERT(!arbor_timer_armed(x));
    check_heap(&s);
  }
  ASSERT_NULL(arbor_timers_pop_due(&s, 100));
  ASSERT_NULL(arbor_timers_peek(&s));
  arbor_timers_close(&s);
}

TEST(fifo_ties) {
  arbor_timers s;
  arbor_timers_init(&s);
  enum { N = 100 };
  arbor_timer t[N];
  memset(t, 0, sizeof t);
  /* half at 1.0, half at 2.0, interleaved; ties fire in arming order */
  for (int i = 0; i < N; i++) {
    t[i].kind = i;
    arm(&s, &t[i], i % 2 ? 2.0 : 1.0);
  }
  for (int i = 0; i < N; i += 2) {
    arbor_timer *x = arbor_timers_pop_due(&s, 1.0);
    ASSERT_NOT_NULL(x);
    ASSERT_EQ(x->kind, i);
  }
  ASSERT_NULL(arbor_timers_pop_due(&s, 1.5));
  /* re-arming moves a timer behind the others of its due time */
  arm(&s, &t[1], 2.0);
  for (int i = 3; i < N; i += 2) {
    arbor_timer *x = arbor_timers_pop_due(&s, 2.0);
    ASSERT_EQ(x->kind, i);
  }
  ASSERT_PTR_EQ(arbor_timers_pop_due(&s, 2.0), &t[1]);
  ASSERT_UINT_EQ(s.len, 0);
  arbor_timers_close(&s);
}

TEST(disarm_from_the_middle) {
  arbor_timers s;
  arbor_timers_init(&s);
  enum { N = 31 };
  arbor_timer t[N];
  memset(t, 0, sizeof t);
  for (int i = 0; i < N; i++) {
    t[i].kind = i;
    arm(&s, &t[i], (double)((i * 7) % N)); /* a permutation of 0..30 */
  }
  /* disarm an inner node, a leaf, the root, and the last entry */
  int gone[N] = {0};
  arbor_timer *victims[4] = {s.heap[1], s.heap[N - 5], s.heap[0],
                             s.heap[N - 1]};
  for (int v = 0; v < 4; v++) {
    arbor_timers_disarm(&s, victims[v]);
    ASSERT(!arbor_timer_armed(victims[v]));
    gone[victims[v]->kind] = 1;
    check_heap(&s);
  }
  ASSERT_UINT_EQ(s.len, N - 4);
  arbor_timers_disarm(&s, victims[0]); /* again: nothing happens */
  ASSERT_UINT_EQ(s.len, N - 4);
  /* the others come out in due order */
  double last = -1;
  int count = 0;
  arbor_timer *x;
  while ((x = arbor_timers_pop_due(&s, 1000))) {
    ASSERT(!gone[x->kind]);
    ASSERT(x->due > last);
    last = x->due;
    count++;
    check_heap(&s);
  }
  ASSERT_EQ(count, N - 4);
  arbor_timers_close(&s);
}

TEST(disarm_sifts_up) {
  /* Removing an entry whose replacement (the last leaf) is smaller than the
     removed entry's parent needs a sift up, not down. */
  arbor_timers s;
  arbor_timers_init(&s);
  arbor_timer t[7];
  memset(t, 0, sizeof t);
  /* heap layout by due: [1, 10, 2, 11, 12, 3, 4] */
  static const double dues[] = {1, 10, 2, 11, 12, 3, 4};
  for (int i = 0; i < 7; i++) {
    t[i].kind = i;
    arm(&s, &t[i], dues[i]);
  }
  ASSERT_PTR_EQ(s.heap[4], &t[4]); /* due 12, a child of 10 */
  arbor_timers_disarm(&s, &t[4]);    /* replaced by the last leaf (4) */
  check_heap(&s);
  ASSERT_PTR_EQ(s.heap[1], &t[6]); /* 4 moved up above 10 */
  arbor_timers_disarm(&s, &t[3]);
  check_heap(&s);
  static const int order[] = {0, 2, 5, 6, 1};
  for (int i = 0; i < 5; i++) ASSERT_EQ(arbor_timers_pop_due(&s, 99)->kind, order[i]);
  arbor_timers_close(&s);
}

TEST(rearm) {
  arbor_timers s;
  arbor_timers_init(&s);
  arbor_timer a = {0}, b = {0}, c = {0};
  arm(&s, &a, 10);
  arm(&s, &b, 5);
  arm(&s, &c, 7);
  ASSERT_PTR_EQ(arbor_timers_peek(&s), &b);
  arm(&s, &a, 1); /* earlier */
  ASSERT_UINT_EQ(s.len, 3); /* not armed twice */
  ASSERT_PTR_EQ(arbor_timers_peek(&s), &a);
  arm(&s, &a, 20); /* later */
  ASSERT_UINT_EQ(s.len, 3);
  ASSERT_PTR_EQ(arbor_timers_pop_due(&s, 100), &b);
  ASSERT_PTR_EQ(arbor_timers_pop_due(&s, 100), &c);
  ASSERT_PTR_EQ(arbor_timers_pop_due(&s, 100), &a);
  /* a fired timer can be armed again */
  arm(&s, &b, 3);
  ASSERT_PTR_EQ(arbor_timers_pop_due(&s, 3), &b);
  arbor_timers_close(&s);
}

TEST(pop_due_respects_now) {
  arbor_timers s;
  arbor_timers_init(&s);
  arbor_timer t[3];
  memset(t, 0, sizeof t);
  arm(&s, &t[0], 1.0);
  arm(&s, &t[1], 2.0);
  arm(&s, &t[2], 3.0);
  ASSERT_NULL(arbor_timers_pop_due(&s, 0.5));
  ASSERT_NULL(arbor_timers_pop_due(&s, 0.999999));
  ASSERT_UINT_EQ(s.len, 3);
  ASSERT_PTR_EQ(arbor_timers_pop_due(&s, 2.0), &t[0]);
  ASSERT_PTR_EQ(arbor_timers_pop_due(&s, 2.0), &t[1]); /* due == now fires */
  ASSERT_NULL(arbor_timers_pop_due(&s, 2.0));
  ASSERT(arbor_timer_armed(&t[2]));
  ASSERT_PTR_EQ(arbor_timers_peek(&s), &t[2]);
  ASSERT_PTR_EQ(arbor_timers_pop_due(&s, 1e9), &t[2]);
  ASSERT_NULL(arbor_timers_pop_due(&s, 1e9));
  arbor_timers_close(&s);
}

TEST(close_disarms) {
  arbor_timers s;
  arbor_timers_init(&s);
  enum { N = 200 }; /* more than the initial capacity */
  arbor_timer t[N];
  memset(t, 0, sizeof t);
  for (int i = 0; i < N; i++) arm(&s, &t[i], (double)(N - i));
  ASSERT_UINT_GE(s.cap, N);
  arbor_timers_close(&s);
  for (int i = 0; i < N; i++) ASSERT(!arbor_timer_armed(&t[i]));
  ASSERT_NULL(s.heap);
  ASSERT_UINT_EQ(s.len, 0);
  /* usable again after close */
  arm(&s, &t[0], 1);
  ASSERT_PTR_EQ(arbor_timers_pop_due(&s, 1), &t[0]);
  arbor_timers_close(&s);
}

/* ---- randomized comparison against a sorted array ---- */

static uint64_t rng = 42;
static uint64_t rnd(void) {
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

typedef struct {
  double due;
  uint64_t order; /* the model's own arming counter */
  arbor_timer *t;
} entry;

/* Kept sorted by (due, order). */
static entry model[1024];
static size_t nmodel;

static void model_remove(arbor_timer *t) {
  for (size_t i = 0; i < nmodel; i++)
    if (model[i].t == t) {
      memmove(&model[i], &model[i + 1], (nmodel - i - 1) * sizeof *model);
      nmodel--;
      return;
    }
}

static void model_insert(arbor_timer *t, double due, uint64_t order) {
  size_t i = nmodel;
  while (i > 0 && (model[i - 1].due > due ||
                   (model[i - 1].due == due && model[i - 1].order > order))) {
    model[i] = model[i - 1];
    i--;
  }
  model[i].due = due;
  model[i].order = order;
  model[i].t = t;
  nmodel++;
}

TEST(random_vs_sorted_array) {
  enum { NT = 300, OPS = 10000 };
  static arbor_timer t[NT];
  memset(t, 0, sizeof t);
  arbor_timers s;
  arbor_timers_init(&s);
  nmodel = 0;
  uint64_t order = 0;
  double now = 0;
  size_t pops = 0, arms = 0, disarms = 0, rearms = 0;
  for (int op = 0; op < OPS; op++) {
    unsigned r = (unsigned)(rnd() % 100);
    if (r < 50) {
      arbor_timer *x = &t[rnd() % NT];
      /* coarse due times: many ties */
      double due = now + (double)(rnd() % 40) * 0.25;
      if (arbor_timer_armed(x)) rearms++;
      model_remove(x);
      ASSERT_EQ(arbor_timers_arm(&s, x, due), 0);
      model_insert(x, due, ++order);
      arms++;
    } else if (r < 70) {
      /* mostly an armed timer, anywhere in the heap */
      arbor_timer *x = nmodel && rnd() % 5 ? model[rnd() % nmodel].t
                                           : &t[rnd() % NT];
      if (arbor_timer_armed(x)) disarms++;
      arbor_timers_disarm(&s, x);
      model_remove(x);
    } else if (r < 97) {
      if (rnd() % 3 == 0) now += (double)(rnd() % 8) * 0.25;
      arbor_timer *x = arbor_timers_pop_due(&s, now);
      if (nmodel && model[0].due <= now) {
        ASSERT_PTR_EQ(x, model[0].t);
        ASSERT(!arbor_timer_armed(x));
        memmove(&model[0], &model[1], (nmodel - 1) * sizeof *model);
        nmodel--;
        pops++;
      } else {
        ASSERT_NULL(x);
      }
    } else {
      /* everything due now, in order */
      now += 2;
      arbor_timer *x;
      while ((x = arbor_timers_pop_due(&s, now))) {
        ASSERT(nmodel > 0);
        ASSERT_PTR_EQ(x, model[0].t);
        memmove(&model[0], &model[1], (nmodel - 1) * sizeof *model);
        nmodel--;
        pops++;
      }
      ASSERT(nmodel == 0 || model[0].due > now);
    }
    ASSERT_UINT_EQ(s.len, nmodel);
    ASSERT_PTR_EQ(arbor_timers_peek(&s), nmodel ? model[0].t : NULL);
    /* armed exactly when the model holds it, with the model's due time */
    static int in_model[NT];
    memset(in_model, 0, sizeof in_model);
    for (size_t i = 0; i < nmodel; i++) {
      in_model[model[i].t - t] = 1;
      ASSERT_DBL_EQ(model[i].t->due, model[i].due);
    }
    for (size_t i = 0; i < NT; i++)
      ASSERT_EQ(arbor_timer_armed(&t[i]), in_model[i]);
    if (op % 50 == 0) check_heap(&s);
  }
  printf("# %d operations: %zu arms (%zu re-arms), %zu disarms, %zu pops\n",
         OPS, arms, rearms, disarms, pops);
  ASSERT_UINT_GE(pops, 1000);
  ASSERT_UINT_GE(rearms, 100);
  ASSERT_UINT_GE(disarms, 100);
  arbor_timers_close(&s);
  for (size_t i = 0; i < NT; i++) ASSERT(!arbor_timer_armed(&t[i]));
}

TEST_MAIN()

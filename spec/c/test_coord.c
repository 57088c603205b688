/* test_coord.c: the pure lifecycle coordinator (src/core/coord.c), driven
 * directly: what it answers to reports of children and parent, and a
 * randomized model in which a plain engine performs its answers and random
 * children start, become ready, finish, fail and are retried. */
#include "core/coord.h"
#include "test.h"

#define PRE ARBOR_GATE_PRESTART
#define PRE_SC ARBOR_GATE_PRESTART_SIDECAR
#define MAIN ARBOR_GATE_MAIN
#define POST ARBOR_GATE_POSTSTART
#define POST_SC ARBOR_GATE_POSTSTART_SIDECAR
#define STOP ARBOR_GATE_POSTSTOP

typedef struct kid {
  arbor_gate g;
  uint32_t slot;
  int running, finished, retired, starts;
} kid;

static arbor_co_action acts[64];

/* Steps c (the poststop way when poststop) and returns how many actions it
   gave, all of them in acts. */
static int step(arbor_coord *c, int poststop) {
  int k = 0, got;
  do {
    got = poststop ? arbor_coord_poststop(c, acts + k, 4)
                   : arbor_coord_step(c, acts + k, 4);
    k += got;
  } while (got == 4 && k < 60);
  return k;
}

static int count_verb(int k, arbor_co_verb v) {
  int n = 0;
  for (int i = 0; i < k; i++) n += acts[i].verb == v;
  return n;
}

static int has(int k, arbor_co_verb v, kid *child) {
  for (int i = 0; i < k; i++)
    if (acts[i].verb == v && acts[i].child == child) return 1;
  return 0;
}

static void add(arbor_coord *c, kid *k, arbor_gate g, int expect) {
  k->g = g;
  ASSERT_EQ(arbor_coord_add(c, k, g, ARBOR_PH_WAITING, &k->slot), expect);
}

TEST(children_wait_for_the_first_step_then_start_by_gate) {
  arbor_coord *c = arbor_coord_new(0);
  kid pre, app, warm, flush;
  add(c, &pre, PRE, ARBOR_CO_WAIT);
  add(c, &app, MAIN, ARBOR_CO_WAIT);
  add(c, &warm, POST, ARBOR_CO_WAIT);
  add(c, &flush, STOP, ARBOR_CO_WAIT);
  ASSERT(arbor_coord_blocked(c, app.slot));
  ASSERT_EQ(step(c, 0), 0); /* nothing reported: nothing to do */
  arbor_coord_parent(c, ARBOR_CO_PARENT_STEPPED);
  ASSERT(arbor_coord_dirty(c));
  int k = step(c, 0);
  ASSERT_EQ(count_verb(k, ARBOR_CO_MOVED), 1); /* init -> prestart */
  ASSERT_EQ(acts[0].from, ARBOR_CO_INIT);
  ASSERT_EQ(acts[0].to, ARBOR_CO_PRESTART);
  ASSERT_STR_EQ(acts[0].why, "the parent's first step ended");
  ASSERT(has(k, ARBOR_CO_START, &pre) && !has(k, ARBOR_CO_START, &app));
  ASSERT(!arbor_coord_blocked(c, pre.slot));
  ASSERT_EQ(step(c, 0), 0); /* answered once */
  arbor_coord_child(c, pre.slot, ARBOR_CO_STARTED);
  /* L5: a prestart job that signaled done is finished with */
  ASSERT_UINT_EQ(arbor_coord_child(c, pre.slot, ARBOR_CO_SIGNALED_DONE),
                 ARBOR_CO_FINISHED);
  ASSERT(arbor_coord_retired(c, pre.slot));
  k = step(c, 0);
  ASSERT_EQ(arbor_coord_state(c), ARBOR_CO_MAIN);
  ASSERT(has(k, ARBOR_CO_START, &app) && !has(k, ARBOR_CO_START, &warm));
  ASSERT(arbor_coord_may_start(c, app.slot));
  ASSERT(!arbor_coord_may_start(c, warm.slot)); /* L7 */
  arbor_coord_child(c, app.slot, ARBOR_CO_STARTED);
  arbor_coord_child(c, app.slot, ARBOR_CO_READY);
  k = step(c, 0);
  ASSERT_EQ(arbor_coord_state(c), ARBOR_CO_POSTSTART);
  ASSERT(has(k, ARBOR_CO_START, &warm));
  ASSERT(!has(k, ARBOR_CO_START, &flush));
  ASSERT(arbor_coord_gated(c));
  arbor_coord_free(c);
}

TEST(a_gate_that_never_opens_again_refuses_children) {
  arbor_coord *c = arbor_coord_new(1);
  kid app, late;
  add(c, &app, MAIN, ARBOR_CO_GO); /* started: main opens at once */
  ASSERT_EQ(arbor_coord_state(c), ARBOR_CO_MAIN);
  ASSERT(!arbor_coord_may_add(c, PRE)); /* L0 */
  ASSERT(arbor_coord_may_add(c, POST));
  add(c, &late, POST, ARBOR_CO_WAIT);
  ASSERT_EQ(count_verb(step(c, 0), ARBOR_CO_MOVED), 2); /* init, prestart */
  arbor_coord_free(c);
}

TEST(winding_down_retires_sidecars_and_closed_gates_once) {
  arbor_coord *c = arbor_coord_new(1);
  kid app, side, warm, flush;
  add(c, &app, MAIN, ARBOR_CO_GO);
  add(c, &side, POST_SC, ARBOR_CO_WAIT);
  add(c, &warm, POST, ARBOR_CO_WAIT);
  add(c, &flush, STOP, ARBOR_CO_WAIT);
  step(c, 0);
  arbor_coord_child(c, app.slot, ARBOR_CO_STARTED);
  arbor_coord_child(c, app.slot, ARBOR_CO_READY);
  int k = step(c, 0);
  ASSERT(has(k, ARBOR_CO_START, &side) && has(k, ARBOR_CO_START, &warm));
  arbor_coord_child(c, side.slot, ARBOR_CO_STARTED);
  arbor_coord_child(c, warm.slot, ARBOR_CO_STARTED);
  arbor_coord_child(c, warm.slot, ARBOR_CO_EXIT_DONE);
  step(c, 0);
  ASSERT_EQ(arbor_coord_state(c), ARBOR_CO_RUNNING);
  /* L4: every main child finished: the sidecar is retired, once */
  arbor_coord_child(c, app.slot, ARBOR_CO_EXIT_DONE);
  k = step(c, 0);
  ASSERT_EQ(k, 1);
  ASSERT(has(k, ARBOR_CO_RETIRE, &side));
  ASSERT_EQ(step(c, 0), 0);
  ASSERT(!arbor_coord_exempt(c, side.slot));
  arbor_coord_child(c, side.slot, ARBOR_CO_EXIT_RETRY); /* retired: final */
  k = step(c, 0);
  ASSERT_EQ(arbor_coord_state(c), ARBOR_CO_POSTSTOP);
  ASSERT_STR_EQ(acts[0].why, "every main child finished; the others exited (L4)");
  ASSERT(has(k, ARBOR_CO_START, &flush));
  arbor_coord_free(c);
}

TEST(a_stopping_parent_runs_poststop_last_and_bounded) {
  arbor_coord *c = arbor_coord_new(1);
  kid app, flush;
  add(c, &app, MAIN, ARBOR_CO_GO);
  add(c, &flush, STOP, ARBOR_CO_WAIT);
  ASSERT(arbor_coord_exempt(c, flush.slot)); /* L3: it waits for the stop */
  arbor_coord_child(c, app.slot, ARBOR_CO_STARTED);
  arbor_coord_child(c, app.slot, ARBOR_CO_EXIT_RETRY);
  arbor_coord_parent(c, ARBOR_CO_PARENT_STOPPING);
  arbor_coord_parent(c, ARBOR_CO_PARENT_STOPPING); /* idempotent */
  /* the retry will not come (T8): main finished, so poststop is next */
  int k = step(c, 0);
  ASSERT_EQ(arbor_coord_state(c), ARBOR_CO_POSTSTOP);
  ASSERT_STR_EQ(acts[k - 1].why, "the parent is stopping; the others exited (L3)");
  ASSERT(!has(k, ARBOR_CO_START, &flush)); /* not before the stop asks */
  ASSERT_UINT_EQ(arbor_coord_poststop_waiting(c), 1);
  k = step(c, 1);
  ASSERT_EQ(k, 1);
  ASSERT(has(k, ARBOR_CO_START_BOUNDED, &flush));
  arbor_coord_child(c, flush.slot, ARBOR_CO_STARTED);
  ASSERT(arbor_coord_exempt(c, flush.slot));
  arbor_coord_child(c, flush.slot, ARBOR_CO_DISCARDED);
  ASSERT_UINT_EQ(arbor_coord_poststop_waiting(c), 0);
  ASSERT(!arbor_coord_exempt(c, flush.slot));
  arbor_coord_free(c);
}

TEST(a_prestart_that_gives_up_keeps_main_from_starting) {
  arbor_coord *c = arbor_coord_new(0);
  kid pre, side, app;
  add(c, &pre, PRE, ARBOR_CO_WAIT);
  add(c, &side, PRE_SC, ARBOR_CO_WAIT);
  add(c, &app, MAIN, ARBOR_CO_WAIT);
  arbor_coord_parent(c, ARBOR_CO_PARENT_STEPPED);
  step(c, 0);
  arbor_coord_child(c, pre.slot, ARBOR_CO_STARTED);
  arbor_coord_child(c, side.slot, ARBOR_CO_STARTED);
  arbor_coord_child(c, pre.slot, ARBOR_CO_EXIT_FAILED); /* L8 */
  int k = step(c, 0);
  ASSERT(has(k, ARBOR_CO_RETIRE, &side) && has(k, ARBOR_CO_RETIRE, &app));
  ASSERT(!has(k, ARBOR_CO_START, &app));
  arbor_coord_child(c, side.slot, ARBOR_CO_EXIT_FAILED);
  arbor_coord_child(c, app.slot, ARBOR_CO_EXIT_FAILED);
  k = step(c, 0);
  ASSERT_EQ(arbor_coord_state(c), ARBOR_CO_POSTSTOP);
  ASSERT_STR_EQ(acts[0].why, "a prestart child gave up: main will not start (L8)");
  arbor_coord_free(c);
}

/* ---- randomized model ----------------------------------------------- */

#define MAXK 10

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static unsigned rnd(unsigned n) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (unsigned)(rng % n);
}

/* The engine's side: performs every answer, checking it. */
static void perform(arbor_coord *c, kid *ks, int n, int poststop) {
  int k = step(c, poststop);
  arbor_gate_state prev = arbor_coord_state(c);
  for (int i = 0; i < k; i++) {
    kid *x = acts[i].child;
    switch (acts[i].verb) {
    case ARBOR_CO_MOVED:
      ASSERT(acts[i].to > acts[i].from); /* forward only (L0) */
      ASSERT(acts[i].why && acts[i].why[0]);
      break;
    case ARBOR_CO_START:
    case ARBOR_CO_START_BOUNDED:
      ASSERT(x >= ks && x < ks + n);
      ASSERT(!x->running && !x->finished && !x->retired);
      /* a gate controls starting (L7) */
      ASSERT(arbor_gate_open(arbor_coord_state(c), x->g));
      ASSERT(arbor_coord_may_start(c, x->slot));
      x->running = 1;
      x->starts++;
      arbor_coord_child(c, x->slot, ARBOR_CO_STARTED);
      break;
    case ARBOR_CO_RETIRE:
      ASSERT(!x->retired && x->g != STOP);
      x->retired = 1;
      if (!x->running) {
        x->finished = 1;
        arbor_coord_child(c, x->slot, ARBOR_CO_EXIT_FAILED);
      }
      break;
    }
  }
  ASSERT(arbor_coord_state(c) >= prev);
}

static void random_event(arbor_coord *c, kid *ks, int n, int *stopping) {
  if (!*stopping && rnd(50) == 0) {
    *stopping = 1;
    arbor_coord_parent(c, ARBOR_CO_PARENT_STOPPING);
    return;
  }
  kid *x = &ks[rnd((unsigned)n)];
  if (x->finished) return;
  if (!x->running) { /* waiting: a pending retry comes through its gate */
    if (x->starts > 0 && !x->retired && !*stopping &&
        arbor_coord_may_start(c, x->slot)) {
      x->running = 1;
      x->starts++;
      arbor_coord_child(c, x->slot, ARBOR_CO_STARTED);
    }
    return;
  }
  switch (rnd(4)) {
  case 0:
    arbor_coord_child(c, x->slot, ARBOR_CO_READY);
    break;
  case 1:
    if (arbor_coord_child(c, x->slot, ARBOR_CO_SIGNALED_DONE))
      x->retired = 1; /* L5 */
    break;
  case 2:
    x->running = 0;
    x->finished = 1;
    arbor_coord_child(c, x->slot, ARBOR_CO_EXIT_DONE);
    break;
  default: /* dies: retried, unless it is over */
    x->running = 0;
    if (x->retired || *stopping || rnd(3) == 0) {
      x->finished = 1;
      arbor_coord_child(c, x->slot, ARBOR_CO_EXIT_FAILED);
    } else {
      arbor_coord_child(c, x->slot, ARBOR_CO_EXIT_RETRY);
    }
  }
}

TEST(random_runs_answer_consistently_and_end_in_poststop) {
  int ended = 0;
  for (int run = 0; run < 5000; run++) {
    arbor_coord *c = arbor_coord_new(0);
    kid ks[MAXK] = {0};
    int n = 1 + (int)rnd(MAXK), stopping = 0;
    for (int i = 0; i < n; i++) {
      ks[i].g = i == 0 ? MAIN : (arbor_gate)rnd(ARBOR_GATES);
      ASSERT_EQ(arbor_coord_add(c, &ks[i], ks[i].g, ARBOR_PH_WAITING,
                                &ks[i].slot),
                ARBOR_CO_WAIT);
    }
    arbor_coord_parent(c, ARBOR_CO_PARENT_STEPPED);
    perform(c, ks, n, 0);
    for (int s = 0; s < 80; s++) {
      random_event(c, ks, n, &stopping);
      if (arbor_coord_dirty(c)) perform(c, ks, n, 0);
      for (int i = 0; i < n; i++) /* a running child is not blocked */
        if (ks[i].running) ASSERT(!arbor_coord_blocked(c, ks[i].slot));
    }
    /* stop: every child but poststop ones ends, then poststop runs */
    if (!stopping) arbor_coord_parent(c, ARBOR_CO_PARENT_STOPPING);
    stopping = 1;
    for (int i = 0; i < n; i++)
      if (ks[i].g != STOP && !ks[i].finished) {
        ks[i].running = 0;
        ks[i].finished = 1;
        arbor_coord_child(c, ks[i].slot, ARBOR_CO_EXIT_FAILED);
      }
    perform(c, ks, n, 1);
    ASSERT_EQ(arbor_coord_state(c), ARBOR_CO_POSTSTOP);
    for (int i = 0; i < n; i++) /* every poststop child got its turn */
      if (ks[i].g == STOP) ASSERT(ks[i].starts > 0 || ks[i].retired);
    ASSERT_UINT_EQ(arbor_coord_poststop_waiting(c), 0);
    ended++;
    arbor_coord_free(c);
  }
  ASSERT_EQ(ended, 5000);
}

TEST_MAIN()

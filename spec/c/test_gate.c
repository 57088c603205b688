/* test_gate.c: the lifecycle coordinator (src/gate.c) against the table of
 * SEMANTICS.md, state by state, and a randomized model: random children,
 * random state changes, and the engine's actions modelled plainly. */
#include <string.h>

#include "core/gate.h"
#include "test.h"
#include "core/tree.h"

#define PRE ARBOR_GATE_PRESTART
#define PRE_SC ARBOR_GATE_PRESTART_SIDECAR
#define MAIN ARBOR_GATE_MAIN
#define POST ARBOR_GATE_POSTSTART
#define POST_SC ARBOR_GATE_POSTSTART_SIDECAR
#define STOP ARBOR_GATE_POSTSTOP

/* The table, written out as in SEMANTICS.md: 1 open, 0 closed. */
static const int table[ARBOR_CO_STATES][ARBOR_GATES] = {
    /*             pre pre_sc main post post_sc stop */
    [ARBOR_CO_INIT] = {0, 0, 0, 0, 0, 0},
    [ARBOR_CO_PRESTART] = {1, 1, 0, 0, 0, 0},
    [ARBOR_CO_MAIN] = {0, 1, 1, 0, 0, 0},
    [ARBOR_CO_POSTSTART] = {0, 1, 1, 1, 1, 0},
    [ARBOR_CO_RUNNING] = {0, 1, 1, 0, 1, 0},
    [ARBOR_CO_POSTSTOP] = {0, 0, 0, 0, 0, 1},
};

static unsigned table_vector(int s) {
  unsigned v = 0;
  for (int g = 0; g < ARBOR_GATES; g++)
    if (table[s][g]) v |= 1u << g;
  return v;
}

static arbor_gate_fsm coord_in(arbor_gate_state s) {
  arbor_gate_fsm c;
  arbor_gate_init(&c);
  c.state = (uint8_t)s;
  c.started = 1;
  return c;
}

TEST(vector_is_the_table_in_every_state) {
  for (int s = 0; s < ARBOR_CO_STATES; s++) {
    ASSERT_UINT_EQ(arbor_gate_vector((arbor_gate_state)s), table_vector(s));
    for (int g = 0; g < ARBOR_GATES; g++) {
      ASSERT_EQ(arbor_gate_open((arbor_gate_state)s, (arbor_gate)g),
                table[s][g]);
      int later = 0;
      for (int t = s; t < ARBOR_CO_STATES; t++) later |= table[t][g];
      ASSERT_EQ(arbor_gate_can_open((arbor_gate_state)s, (arbor_gate)g), later);
    }
  }
  ASSERT_STR_EQ(arbor_gate_state_name(ARBOR_CO_POSTSTART), "poststart");
  ASSERT_EQ(arbor_gate_of(ARBOR_LC_PRESTART, 1), PRE_SC);
  ASSERT_EQ(arbor_gate_of(ARBOR_LC_POSTSTOP, 0), STOP);
  ASSERT_EQ(arbor_gate_of(ARBOR_LC_MAIN, 0), MAIN);
}

TEST(init_waits_for_the_first_step) {
  arbor_gate_fsm c;
  arbor_gate_init(&c);
  arbor_gate_add(&c, MAIN, ARBOR_PH_WAITING);
  ASSERT_EQ(arbor_gate_next(&c), ARBOR_CO_INIT);
  ASSERT_EQ(arbor_gate_eval(&c), 0);
  c.started = 1;
  ASSERT_EQ(arbor_gate_next(&c), ARBOR_CO_PRESTART);
  /* no prestart children: straight on to main, which waits for main */
  ASSERT_EQ(arbor_gate_eval(&c), 2);
  ASSERT_EQ(c.state, ARBOR_CO_MAIN);
}

TEST(prestart_waits_for_jobs_done_and_sidecars_healthy) {
  arbor_gate_fsm c = coord_in(ARBOR_CO_PRESTART);
  arbor_gate_add(&c, PRE, ARBOR_PH_STARTING);
  arbor_gate_add(&c, PRE_SC, ARBOR_PH_STARTING);
  arbor_gate_add(&c, MAIN, ARBOR_PH_WAITING);
  ASSERT_EQ(arbor_gate_next(&c), ARBOR_CO_PRESTART);
  arbor_gate_move(&c, PRE, ARBOR_PH_STARTING, ARBOR_PH_READY);
  ASSERT_EQ(arbor_gate_next(&c), ARBOR_CO_PRESTART); /* healthy is not done */
  arbor_gate_move(&c, PRE, ARBOR_PH_READY, ARBOR_PH_RETRYING);
  ASSERT_EQ(arbor_gate_next(&c), ARBOR_CO_PRESTART); /* died, restarting */
  arbor_gate_move(&c, PRE, ARBOR_PH_RETRYING, ARBOR_PH_SIGNALED);
  ASSERT_EQ(arbor_gate_next(&c), ARBOR_CO_PRESTART); /* sidecar not ready */
  arbor_gate_move(&c, PRE_SC, ARBOR_PH_STARTING, ARBOR_PH_READY);
  ASSERT_EQ(arbor_gate_next(&c), ARBOR_CO_MAIN); /* L1 */
}

TEST(prestart_gave_up_winds_down_to_poststop) {
  arbor_gate_fsm c = coord_in(ARBOR_CO_PRESTART);
  arbor_gate_add(&c, PRE, ARBOR_PH_FAILED);
  arbor_gate_add(&c, PRE_SC, ARBOR_PH_READY);
  arbor_gate_add(&c, MAIN, ARBOR_PH_WAITING);
  arbor_gate_add(&c, STOP, ARBOR_PH_WAITING);
  ASSERT(arbor_gate_wind_wanted(&c)); /* L8 */
  ASSERT_EQ(arbor_gate_eval(&c), 0);  /* the sidecar and main must go */
  ASSERT(c.winding);
  arbor_gate_move(&c, PRE_SC, ARBOR_PH_READY, ARBOR_PH_FAILED);
  arbor_gate_move(&c, MAIN, ARBOR_PH_WAITING, ARBOR_PH_FAILED);
  ASSERT_EQ(arbor_gate_eval(&c), 1);
  ASSERT_EQ(c.state, ARBOR_CO_POSTSTOP);
}

TEST(main_moves_on_when_every_main_is_healthy_or_exited) {
  arbor_gate_fsm c = coord_in(ARBOR_CO_MAIN);
  arbor_gate_add(&c, MAIN, ARBOR_PH_STARTING);
  arbor_gate_add(&c, MAIN, ARBOR_PH_READY);
  arbor_gate_add(&c, POST, ARBOR_PH_WAITING);
  ASSERT_EQ(arbor_gate_next(&c), ARBOR_CO_MAIN);
  arbor_gate_move(&c, MAIN, ARBOR_PH_STARTING, ARBOR_PH_RETRYING);
  ASSERT_EQ(arbor_gate_next(&c), ARBOR_CO_POSTSTART); /* L2 */
}

TEST(poststart_moves_on_when_its_jobs_finished) {
  arbor_gate_fsm c = coord_in(ARBOR_CO_POSTSTART);
  arbor_gate_add(&c, MAIN, ARBOR_PH_READY);
  arbor_gate_add(&c, POST, ARBOR_PH_READY);
  arbor_gate_add(&c, POST_SC, ARBOR_PH_STARTING);
  ASSERT_EQ(arbor_gate_next(&c), ARBOR_CO_POSTSTART);
  arbor_gate_move(&c, POST, ARBOR_PH_READY, ARBOR_PH_DONE);
  ASSERT_EQ(arbor_gate_next(&c), ARBOR_CO_RUNNING);
}

TEST(running_winds_down_when_main_finished) {
  arbor_gate_fsm c = coord_in(ARBOR_CO_RUNNING);
  arbor_gate_add(&c, MAIN, ARBOR_PH_READY);
  arbor_gate_add(&c, POST_SC, ARBOR_PH_READY);
  arbor_gate_add(&c, STOP, ARBOR_PH_WAITING);
  ASSERT_EQ(arbor_gate_next(&c), ARBOR_CO_RUNNING);
  arbor_gate_move(&c, MAIN, ARBOR_PH_READY, ARBOR_PH_DONE);
  ASSERT(arbor_gate_wind_wanted(&c)); /* L4 */
  ASSERT_EQ(arbor_gate_eval(&c), 0);  /* the sidecar still runs */
  arbor_gate_move(&c, POST_SC, ARBOR_PH_READY, ARBOR_PH_FAILED);
  ASSERT_EQ(arbor_gate_eval(&c), 1);
  ASSERT_EQ(c.state, ARBOR_CO_POSTSTOP);
  ASSERT_EQ(arbor_gate_eval(&c), 0); /* poststop is the end */
}

TEST(plain_parent_does_not_wind_down_when_its_children_finish) {
  arbor_gate_fsm c = coord_in(ARBOR_CO_RUNNING);
  arbor_gate_add(&c, MAIN, ARBOR_PH_DONE);
  ASSERT(!arbor_gate_wind_wanted(&c));
  ASSERT_EQ(arbor_gate_eval(&c), 0);
  ASSERT_EQ(c.state, ARBOR_CO_RUNNING);
}

TEST(stopping_goes_to_poststop_from_every_state) {
  for (int s = ARBOR_CO_PRESTART; s < ARBOR_CO_POSTSTOP; s++) {
    arbor_gate_fsm c = coord_in((arbor_gate_state)s);
    arbor_gate_add(&c, MAIN, ARBOR_PH_READY);
    arbor_gate_add(&c, STOP, ARBOR_PH_WAITING);
    c.stopping = 1;
    ASSERT_EQ(arbor_gate_next(&c), (arbor_gate_state)s); /* main runs */
    arbor_gate_move(&c, MAIN, ARBOR_PH_READY, ARBOR_PH_FAILED);
    ASSERT_EQ(arbor_gate_next(&c), ARBOR_CO_POSTSTOP);
  }
}

/* ---- randomized model ----------------------------------------------- */

#define MAXK 8

typedef struct child {
  arbor_gate g;
  arbor_phase ph;
  int canceled; /* retired or stopping: exits for good */
} child;

static uint64_t rng = 88172645463325252ull;
static unsigned rnd(unsigned n) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (unsigned)(rng % n);
}

static int is_running(arbor_phase p) {
  return p == ARBOR_PH_STARTING || p == ARBOR_PH_READY ||
         p == ARBOR_PH_SIGNALED;
}
static int is_finished(arbor_phase p) {
  return p == ARBOR_PH_DONE || p == ARBOR_PH_FAILED;
}

static void set_phase(arbor_gate_fsm *c, child *k, arbor_phase p) {
  arbor_gate_move(c, k->g, k->ph, p);
  k->ph = p;
}

/* What the engine does after an evaluation: wind down, start children
   behind open gates; then evaluate again, until nothing changes. Checks
   the invariants after every evaluation. */
static void settle(arbor_gate_fsm *c, child *ks, int n) {
  for (int round = 0; round < 100; round++) {
    int running_before[MAXK];
    for (int i = 0; i < n; i++) running_before[i] = is_running(ks[i].ph);
    uint8_t before = c->state;
    arbor_gate_fsm counts = *c;
    arbor_gate_eval(c);
    ASSERT(c->state >= before); /* only forward (L0) */
    ASSERT(memcmp(counts.count, c->count, sizeof c->count) == 0);
    ASSERT_UINT_EQ(arbor_gate_vector((arbor_gate_state)c->state),
                   table_vector(c->state));
    /* a gate never stops a running child (L7) */
    for (int i = 0; i < n; i++)
      if (running_before[i]) ASSERT(is_running(ks[i].ph));
    int changed = 0;
    unsigned open = arbor_gate_vector((arbor_gate_state)c->state);
    for (int i = 0; i < n; i++) {
      child *k = &ks[i];
      if (c->stopping && k->g != STOP) {
        if (k->ph == ARBOR_PH_WAITING || k->ph == ARBOR_PH_RETRYING)
          set_phase(c, k, ARBOR_PH_FAILED), changed = 1;
        k->canceled = 1;
      } else if (c->winding && k->g != STOP && !is_finished(k->ph) &&
                 (arbor_gate_is_sidecar(k->g) ||
                  (k->ph == ARBOR_PH_WAITING && !((open >> k->g) & 1u)))) {
        if (!is_running(k->ph)) set_phase(c, k, ARBOR_PH_FAILED), changed = 1;
        k->canceled = 1;
      }
      if (k->ph == ARBOR_PH_WAITING && ((open >> k->g) & 1u)) {
        set_phase(c, k, ARBOR_PH_STARTING);
        changed = 1;
      }
    }
    /* L3: once every other child finished, a winding coordinator is in
       poststop */
    int others = 1;
    for (int i = 0; i < n; i++)
      if (ks[i].g != STOP && !is_finished(ks[i].ph)) others = 0;
    if (!changed) {
      if (others && c->winding) ASSERT_EQ(c->state, ARBOR_CO_POSTSTOP);
      return;
    }
  }
  ASSERT_MSG(0, "the model did not settle");
}

/* One random state change of one child, or the parent stopping. */
static void random_event(arbor_gate_fsm *c, child *ks, int n) {
  if (rnd(40) == 0 && !c->stopping) {
    c->stopping = 1;
    return;
  }
  child *k = &ks[rnd((unsigned)n)];
  unsigned open = arbor_gate_vector((arbor_gate_state)c->state);
  switch (k->ph) {
  case ARBOR_PH_STARTING:
    if (rnd(2)) {
      set_phase(c, k, ARBOR_PH_READY);
      break;
    }
    /* fall through */ /* it exits */
    __attribute__((fallthrough));
  case ARBOR_PH_SIGNALED:
    /* fall through */ /* it exits */
    __attribute__((fallthrough));
  case ARBOR_PH_READY: {
    if (k->ph == ARBOR_PH_READY && !k->canceled && rnd(4) == 0) {
      set_phase(c, k, ARBOR_PH_SIGNALED); /* done, still running */
      if (k->g == PRE || k->g == POST) k->canceled = 1; /* retired (L5) */
      break;
    }
    unsigned r = rnd(3);
    if (k->canceled)
      set_phase(c, k, ARBOR_PH_FAILED);
    else
      set_phase(c, k, r == 0   ? ARBOR_PH_DONE
                      : r == 1 ? ARBOR_PH_RETRYING
                               : ARBOR_PH_FAILED);
    break;
  }
  case ARBOR_PH_RETRYING:
    /* its policy restarts it through its gate, which is open (L6) */
    ASSERT(k->canceled || ((open >> k->g) & 1u) || c->stopping);
    set_phase(c, k, ARBOR_PH_STARTING);
    break;
  default:
    break;
  }
}

TEST(random_sequences_keep_the_invariants) {
  int reached_poststop = 0;
  for (int run = 0; run < 20000; run++) {
    arbor_gate_fsm c;
    arbor_gate_init(&c);
    child ks[MAXK];
    int n = 1 + (int)rnd(MAXK);
    for (int i = 0; i < n; i++) {
      ks[i].g = i == 0 ? MAIN : (arbor_gate)rnd(ARBOR_GATES);
      ks[i].ph = ARBOR_PH_WAITING;
      ks[i].canceled = 0;
      arbor_gate_add(&c, ks[i].g, ARBOR_PH_WAITING);
    }
    c.started = 1;
    settle(&c, ks, n);
    for (int step = 0; step < 60; step++) {
      random_event(&c, ks, n);
      settle(&c, ks, n);
    }
    /* stop, and let everything exit */
    c.stopping = 1;
    for (int step = 0; step < 200; step++) {
      settle(&c, ks, n);
      int left = 0;
      for (int i = 0; i < n; i++)
        if (ks[i].g != STOP && !is_finished(ks[i].ph)) left = 1;
      if (!left) break;
      random_event(&c, ks, n);
    }
    settle(&c, ks, n);
    ASSERT_EQ(c.state, ARBOR_CO_POSTSTOP);
    reached_poststop++;
  }
  ASSERT_EQ(reached_poststop, 20000);
}

TEST_MAIN()

/* test_window.c: the sliding-window failure counter (src/window.c). */
#include "test.h"
#include "core/window.h"

/* Failures among times[0..n) within [t - span, t]. */
static uint64_t exact(const double *times, int n, double t, double span) {
  uint64_t c = 0;
  for (int i = 0; i < n; i++)
    if (times[i] <= t && t - times[i] <= span) c++;
  return c;
}

TEST(counts_within_the_period) {
  arbor_window w;
  arbor_window_init(&w, 16, 0);
  for (int i = 0; i < 10; i++) ASSERT_UINT_EQ(arbor_window_add(&w, i, -1), (uint64_t)i + 1);
  /* at 16 nothing has expired; at 27 the failures of 0..9 are gone */
  ASSERT_UINT_EQ(arbor_window_count(&w, 16), 10);
  ASSERT_UINT_EQ(arbor_window_count(&w, 27), 0);
}

TEST(same_id_counts_once) {
  arbor_window w;
  arbor_window_init(&w, 1, 0);
  ASSERT_UINT_EQ(arbor_window_add(&w, 0.5, 7), 1);
  ASSERT_UINT_EQ(arbor_window_add(&w, 0.5, 7), 1);
  ASSERT_UINT_EQ(arbor_window_add(&w, 0.6, 8), 2);
}

TEST(older_than_the_window_is_not_counted) {
  arbor_window w;
  arbor_window_init(&w, 1, 100);
  ASSERT_UINT_EQ(arbor_window_add(&w, 10, -1), 0);
  ASSERT_UINT_EQ(arbor_window_add(&w, 99.5, -1), 1);
  ASSERT_UINT_EQ(arbor_window_add(&w, 100, -1), 2);
}

TEST(long_gap_clears) {
  arbor_window w;
  arbor_window_init(&w, 2, 0);
  for (int i = 0; i < 1000; i++) arbor_window_add(&w, 0.001 * i, -1);
  ASSERT_UINT_EQ(arbor_window_count(&w, 0.999), 1000);
  ASSERT_UINT_EQ(arbor_window_add(&w, 1e6, -1), 1);
}

/* Against an exact count on random traces: never fewer than the failures
   of the last period, never more than those of period * (1 + 1/16). */
TEST(model) {
  uint64_t x = 42;
  static double times[4000];
  for (int round = 0; round < 200; round++) {
    double period = 0.01 + (double)(round % 13) * 0.37;
    arbor_window w;
    arbor_window_init(&w, period, 0);
    double t = 0;
    int n = 0;
    for (int i = 0; i < 4000; i++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      double gap = (double)(x >> 11) * 0x1.0p-53 * period / (1 + round % 7);
      if ((x >> 60) == 0) gap *= 20;
      t += gap;
      times[n++] = t;
      uint64_t got = arbor_window_add(&w, t, i);
      ASSERT_UINT_LE(exact(times, n, t, period), got);
      ASSERT_UINT_LE(got, exact(times, n, t, period * (1 + 1.0 / 16) + 1e-9));
    }
  }
}

TEST_MAIN()

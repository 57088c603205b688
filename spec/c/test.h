/* test.h: a tiny libuv-style unit test helper for arbor's C cores.
 *
 *   #include "test.h"
 *   TEST(something) { ASSERT_EQ(1 + 1, 2); }
 *   TEST_MAIN()
 *
 * Each TEST registers itself (a constructor function, GCC/Clang); TEST_MAIN
 * defines main(), which runs every registered test in definition order, or
 * only those named on the command line, and prints one line per test:
 * "ok <name>". A failing assertion prints "not ok <name>", file:line and the
 * failing expression (with the values compared) to stderr, then abort()s, so
 * the process exits 0 only when every test passed.
 */
#ifndef ARBOR_TEST_H
#define ARBOR_TEST_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_MAX 256

typedef void (*test_fn)(void);

static struct {
  const char *name;
  test_fn fn;
} test_list_[TEST_MAX];
static int test_count_;
static const char *test_current_ = "(none)";

static void test_register_(const char *name, test_fn fn) {
  if (test_count_ == TEST_MAX) {
    fprintf(stderr, "test.h: more than %d tests\n", TEST_MAX);
    abort();
  }
  test_list_[test_count_].name = name;
  test_list_[test_count_].fn = fn;
  test_count_++;
}

static void test_fail_(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));

static void test_fail_(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "not ok %s\n%s:%d: assertion failed: ", test_current_, file,
          line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stderr);
  abort();
}

#define TEST(name)                                                      \
  static void test_##name(void);                                        \
  static void test_reg_##name(void) __attribute__((constructor));       \
  static void test_reg_##name(void) { test_register_(#name, test_##name); } \
  static void test_##name(void)

#define TEST_MAIN()                                                      \
  int main(int argc, char **argv) {                                      \
    int ran = 0;                                                         \
    for (int i_ = 0; i_ < test_count_; i_++) {                           \
      if (argc > 1) {                                                    \
        int want_ = 0;                                                   \
        for (int a_ = 1; a_ < argc; a_++)                                \
          if (strcmp(argv[a_], test_list_[i_].name) == 0) want_ = 1;     \
        if (!want_) continue;                                            \
      }                                                                  \
      test_current_ = test_list_[i_].name;                               \
      test_list_[i_].fn();                                               \
      printf("ok %s\n", test_list_[i_].name);                            \
      fflush(stdout);                                                    \
      ran++;                                                             \
    }                                                                    \
    if (ran == 0) {                                                      \
      fprintf(stderr, "no test ran\n");                                  \
      return 1;                                                          \
    }                                                                    \
    return 0;                                                            \
  }

#define ASSERT(cond)                                                     \
  do {                                                                   \
    if (!(cond)) test_fail_(__FILE__, __LINE__, "%s", #cond);            \
  } while (0)

#define ASSERT_MSG(cond, ...)                                            \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, __VA_ARGS__);                                      \
      fputc('\n', stderr);                                               \
      test_fail_(__FILE__, __LINE__, "%s", #cond);                       \
    }                                                                    \
  } while (0)

/* Signed integer comparisons: each operand is evaluated once. */
#define ASSERT_CMP_(a, op, b)                                            \
  do {                                                                   \
    intmax_t a_ = (intmax_t)(a), b_ = (intmax_t)(b);                     \
    if (!(a_ op b_))                                                     \
      test_fail_(__FILE__, __LINE__, "%s %s %s (%" PRIdMAX " vs %" PRIdMAX ")", \
                 #a, #op, #b, a_, b_);                                   \
  } while (0)

#define ASSERT_EQ(a, b) ASSERT_CMP_(a, ==, b)
#define ASSERT_NE(a, b) ASSERT_CMP_(a, !=, b)
#define ASSERT_LT(a, b) ASSERT_CMP_(a, <, b)
#define ASSERT_LE(a, b) ASSERT_CMP_(a, <=, b)
#define ASSERT_GT(a, b) ASSERT_CMP_(a, >, b)
#define ASSERT_GE(a, b) ASSERT_CMP_(a, >=, b)

/* Unsigned comparisons (sizes, 64-bit counters). */
#define ASSERT_UCMP_(a, op, b)                                           \
  do {                                                                   \
    uintmax_t a_ = (uintmax_t)(a), b_ = (uintmax_t)(b);                  \
    if (!(a_ op b_))                                                     \
      test_fail_(__FILE__, __LINE__, "%s %s %s (%" PRIuMAX " vs %" PRIuMAX ")", \
                 #a, #op, #b, a_, b_);                                   \
  } while (0)

#define ASSERT_UINT_EQ(a, b) ASSERT_UCMP_(a, ==, b)
#define ASSERT_UINT_NE(a, b) ASSERT_UCMP_(a, !=, b)
#define ASSERT_UINT_LE(a, b) ASSERT_UCMP_(a, <=, b)
#define ASSERT_UINT_GE(a, b) ASSERT_UCMP_(a, >=, b)

#define ASSERT_DBL_EQ(a, b)                                              \
  do {                                                                   \
    double a_ = (double)(a), b_ = (double)(b);                           \
    if (!(a_ == b_))                                                     \
      test_fail_(__FILE__, __LINE__, "%s == %s (%.17g vs %.17g)", #a, #b, \
                 a_, b_);                                                \
  } while (0)

#define ASSERT_PTR_EQ(a, b)                                              \
  do {                                                                   \
    const void *a_ = (const void *)(a), *b_ = (const void *)(b);         \
    if (a_ != b_)                                                        \
      test_fail_(__FILE__, __LINE__, "%s == %s (%p vs %p)", #a, #b, a_, b_); \
  } while (0)

#define ASSERT_PTR_NE(a, b)                                              \
  do {                                                                   \
    const void *a_ = (const void *)(a), *b_ = (const void *)(b);         \
    if (a_ == b_)                                                        \
      test_fail_(__FILE__, __LINE__, "%s != %s (both %p)", #a, #b, a_);  \
  } while (0)

#define ASSERT_NULL(a) ASSERT_PTR_EQ(a, NULL)
#define ASSERT_NOT_NULL(a) ASSERT_PTR_NE(a, NULL)

#define ASSERT_STR_EQ(a, b)                                              \
  do {                                                                   \
    const char *a_ = (a), *b_ = (b);                                     \
    if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0)                 \
      test_fail_(__FILE__, __LINE__, "%s == %s (\"%s\" vs \"%s\")", #a, #b, \
                 a_ ? a_ : "(null)", b_ ? b_ : "(null)");                \
  } while (0)

#define ASSERT_STR_NE(a, b)                                              \
  do {                                                                   \
    const char *a_ = (a), *b_ = (b);                                     \
    if (a_ == NULL || b_ == NULL || strcmp(a_, b_) == 0)                 \
      test_fail_(__FILE__, __LINE__, "%s != %s (\"%s\" vs \"%s\")", #a, #b, \
                 a_ ? a_ : "(null)", b_ ? b_ : "(null)");                \
  } while (0)

/* Compares len bytes; for names that are not NUL-terminated. */
#define ASSERT_MEM_EQ(a, b, len)                                         \
  do {                                                                   \
    if (memcmp((a), (b), (len)) != 0)                                    \
      test_fail_(__FILE__, __LINE__, "memcmp(%s, %s, %s) == 0", #a, #b, #len); \
  } while (0)

#endif

/* test_frame.c: the control protocol's frame parser (C4). */
#include "core/frame.h"
#include "test.h"

static void put(arbor_frame_reader *r, const char *payload) {
  unsigned char h[ARBOR_FRAME_HEADER];
  arbor_frame_header(h, (uint32_t)strlen(payload));
  ASSERT_EQ(arbor_frame_feed(r, (const char *)h, sizeof h), ARBOR_FRAME_OK);
  ASSERT_EQ(arbor_frame_feed(r, payload, strlen(payload)), ARBOR_FRAME_OK);
}

static void expect(arbor_frame_reader *r, const char *want) {
  const char *p;
  size_t n;
  ASSERT_EQ(arbor_frame_next(r, &p, &n), ARBOR_FRAME_OK);
  ASSERT_EQ(n, strlen(want));
  ASSERT(memcmp(p, want, n) == 0);
}

TEST(frames_in_order) {
  arbor_frame_reader r;
  arbor_frame_init(&r, 100);
  put(&r, "{\"id\":1}");
  put(&r, "b");
  expect(&r, "{\"id\":1}");
  expect(&r, "b");
  const char *p;
  size_t n;
  ASSERT_EQ(arbor_frame_next(&r, &p, &n), ARBOR_FRAME_MORE);
  ASSERT_EQ(arbor_frame_pending(&r), 0);
  arbor_frame_free(&r);
}

TEST(byte_at_a_time) {
  arbor_frame_reader r;
  arbor_frame_init(&r, 100);
  const char stream[] = "\0\0\0\3abc\0\0\0\1z";
  const char *p;
  size_t n;
  int got = 0;
  for (size_t i = 0; i < sizeof stream - 1; i++) {
    ASSERT_EQ(arbor_frame_feed(&r, stream + i, 1), ARBOR_FRAME_OK);
    while (arbor_frame_next(&r, &p, &n) == ARBOR_FRAME_OK) {
      if (got == 0) ASSERT(n == 3 && memcmp(p, "abc", 3) == 0);
      if (got == 1) ASSERT(n == 1 && p[0] == 'z');
      got++;
    }
  }
  ASSERT_EQ(got, 2);
  arbor_frame_free(&r);
}

TEST(truncated_is_pending) {
  arbor_frame_reader r;
  arbor_frame_init(&r, 100);
  ASSERT_EQ(arbor_frame_feed(&r, "\0\0\0\10abc", 7), ARBOR_FRAME_OK);
  const char *p;
  size_t n;
  ASSERT_EQ(arbor_frame_next(&r, &p, &n), ARBOR_FRAME_MORE);
  ASSERT_EQ(arbor_frame_pending(&r), 7);
  arbor_frame_free(&r);
}

TEST(oversized_refused_at_header) {
  arbor_frame_reader r;
  arbor_frame_init(&r, 100);
  ASSERT_EQ(arbor_frame_feed(&r, "\0\0\0\145", 4), ARBOR_FRAME_TOO_BIG);
  ASSERT_EQ(r.bad_len, 101);
  /* the stream stays refused */
  ASSERT_EQ(arbor_frame_feed(&r, "x", 1), ARBOR_FRAME_TOO_BIG);
  const char *p;
  size_t n;
  ASSERT_EQ(arbor_frame_next(&r, &p, &n), ARBOR_FRAME_TOO_BIG);
  arbor_frame_free(&r);
  arbor_frame_init(&r, 100);
  ASSERT_EQ(arbor_frame_feed(&r, "\377\377\377\377", 4), ARBOR_FRAME_TOO_BIG);
  arbor_frame_free(&r);
}

TEST(limit_is_inclusive) {
  arbor_frame_reader r;
  arbor_frame_init(&r, 3);
  put(&r, "abc");
  expect(&r, "abc");
  arbor_frame_free(&r);
}

TEST(empty_frame_is_an_error) {
  arbor_frame_reader r;
  arbor_frame_init(&r, 100);
  put(&r, "ok");
  ASSERT_EQ(arbor_frame_feed(&r, "\0\0\0\0", 4), ARBOR_FRAME_OK);
  expect(&r, "ok"); /* frames before the bad one are still delivered */
  const char *p;
  size_t n;
  ASSERT_EQ(arbor_frame_next(&r, &p, &n), ARBOR_FRAME_EMPTY);
  ASSERT(strcmp(arbor_frame_strerror(ARBOR_FRAME_EMPTY),
                "empty frame (length 0)") == 0);
  arbor_frame_free(&r);
}

TEST(many_frames_reuse_the_buffer) {
  arbor_frame_reader r;
  arbor_frame_init(&r, 1000);
  const char *p;
  size_t n;
  for (int i = 0; i < 10000; i++) {
    put(&r, "{\"op\":\"status\"}");
    expect(&r, "{\"op\":\"status\"}");
    ASSERT_EQ(arbor_frame_next(&r, &p, &n), ARBOR_FRAME_MORE);
  }
  ASSERT(r.cap <= 256);
  arbor_frame_free(&r);
}

TEST_MAIN()

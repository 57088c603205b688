/* fuzz_frame.c: libFuzzer target for the frame parser (scripts/fuzz).
 * The input is split into chunks (the first byte of each chunk gives its
 * size) and fed as a stream; every frame handed out must lie inside the
 * buffer and respect the limit, errors must be sticky, and the bytes handed
 * out plus the pending bytes must add up to what was fed. */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  arbor_frame_reader r;
  arbor_frame_init(&r, 4096);
  size_t fed = 0, taken = 0;
  int err = 0;
  while (size > 0 && !err) {
    size_t chunk = 1 + data[0] % 64;
    data++;
    size--;
    if (chunk > size) chunk = size;
    int st = arbor_frame_feed(&r, (const char *)data, chunk);
    data += chunk;
    size -= chunk;
    fed += chunk;
    const char *p;
    size_t n;
    for (;;) {
      int nx = arbor_frame_next(&r, &p, &n);
      if (nx == ARBOR_FRAME_MORE) break;
      if (nx < 0) {
        err = nx;
        break;
      }
      assert(n > 0 && n <= 4096);
      assert(p >= r.buf && p + n <= r.buf + r.len);
      volatile char sink = 0;
      for (size_t i = 0; i < n; i++) sink ^= p[i]; /* ASan checks the reads */
      (void)sink;
      taken += ARBOR_FRAME_HEADER + n;
    }
    if (st < 0) {
      assert(err == st || err == 0);
      err = st;
    }
  }
  if (err) {
    const char *p;
    size_t n;
    assert(arbor_frame_next(&r, &p, &n) == err);
  } else {
    assert(taken + arbor_frame_pending(&r) == fed);
  }
  arbor_frame_free(&r);
  return 0;
}

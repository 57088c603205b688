/* frame.c: see frame.h. */
#include "core/frame.h"

#include <stdlib.h>
#include <string.h>

void arbor_frame_init(arbor_frame_reader *r, size_t max) {
  memset(r, 0, sizeof *r);
  r->max = max;
}

void arbor_frame_free(arbor_frame_reader *r) {
  free(r->buf);
  r->buf = NULL;
  r->off = r->len = r->cap = 0;
}

static uint32_t read_len(const char *p) {
  const unsigned char *u = (const unsigned char *)p;
  return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 |
         (uint32_t)u[3];
}

/* Checks the length of the frame at the read offset, once it is in. */
static int check_header(arbor_frame_reader *r) {
  if (r->len - r->off < ARBOR_FRAME_HEADER) return ARBOR_FRAME_OK;
  uint32_t n = read_len(r->buf + r->off);
  if (n == 0) return r->bad_len = 0, ARBOR_FRAME_EMPTY;
  if (n > r->max) return r->bad_len = n, ARBOR_FRAME_TOO_BIG;
  return ARBOR_FRAME_OK;
}

int arbor_frame_feed(arbor_frame_reader *r, const char *data, size_t n) {
  int st = check_header(r);
  if (st != ARBOR_FRAME_OK) return st;
  if (r->off == r->len) r->off = r->len = 0;
  if (r->len + n > r->cap) {
    if (r->off > 0) { /* compact first */
      memmove(r->buf, r->buf + r->off, r->len - r->off);
      r->len -= r->off;
      r->off = 0;
    }
    size_t cap = r->cap ? r->cap : 256;
    while (cap < r->len + n) cap *= 2;
    if (cap != r->cap) {
      char *b = realloc(r->buf, cap);
      if (!b) return ARBOR_FRAME_NOMEM;
      r->buf = b;
      r->cap = cap;
    }
  }
  if (n) memcpy(r->buf + r->len, data, n);
  r->len += n;
  return check_header(r);
}

int arbor_frame_next(arbor_frame_reader *r, const char **payload,
                     size_t *len) {
  int st = check_header(r);
  if (st != ARBOR_FRAME_OK) return st;
  size_t have = r->len - r->off;
  if (have < ARBOR_FRAME_HEADER) return ARBOR_FRAME_MORE;
  uint32_t n = read_len(r->buf + r->off);
  if (have - ARBOR_FRAME_HEADER < n) return ARBOR_FRAME_MORE;
  *payload = r->buf + r->off + ARBOR_FRAME_HEADER;
  *len = n;
  r->off += ARBOR_FRAME_HEADER + n;
  return ARBOR_FRAME_OK;
}

size_t arbor_frame_pending(const arbor_frame_reader *r) {
  return r->len - r->off;
}

void arbor_frame_header(unsigned char out[ARBOR_FRAME_HEADER], uint32_t len) {
  out[0] = (unsigned char)(len >> 24);
  out[1] = (unsigned char)(len >> 16);
  out[2] = (unsigned char)(len >> 8);
  out[3] = (unsigned char)len;
}

const char *arbor_frame_strerror(int code) {
  switch (code) {
  case ARBOR_FRAME_OK: return "ok";
  case ARBOR_FRAME_MORE: return "incomplete frame";
  case ARBOR_FRAME_EMPTY: return "empty frame (length 0)";
  case ARBOR_FRAME_TOO_BIG: return "frame too large";
  case ARBOR_FRAME_NOMEM: return "out of memory";
  }
  return "unknown frame error";
}

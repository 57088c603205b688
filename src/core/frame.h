/* frame.h: the control protocol's framing (C4), a pure parser with no I/O.
 *
 * A frame is a 4-byte big-endian payload length followed by that many bytes
 * (a JSON object, see docs/control-protocol.md). A reader is fed the bytes
 * of a stream as they arrive and hands out whole frames; a length of zero or
 * above the reader's limit is an error found as soon as the 4 length bytes
 * are in. Callers take every whole frame (next until MORE) after each
 * feed, so at most one frame and one read chunk are ever buffered: an
 * oversized frame is refused before its payload is read.
 */
#ifndef ARBOR_FRAME_H
#define ARBOR_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define ARBOR_FRAME_HEADER 4
/* What the engine accepts from a client, and what a client accepts from the
   engine (a tree --json of many nodes is one reply). */
#define ARBOR_FRAME_MAX_REQUEST (1u << 20)
#define ARBOR_FRAME_MAX_REPLY (256u << 20)

enum {
  ARBOR_FRAME_OK = 0,       /* a frame was returned */
  ARBOR_FRAME_MORE = 1,     /* no whole frame buffered yet */
  ARBOR_FRAME_EMPTY = -1,   /* a frame of length 0 */
  ARBOR_FRAME_TOO_BIG = -2, /* a length above the limit */
  ARBOR_FRAME_NOMEM = -3,
};

typedef struct arbor_frame_reader {
  char *buf;
  size_t off, len, cap; /* unread bytes are buf[off, len) */
  size_t max;           /* largest payload accepted */
  uint32_t bad_len;     /* the offending length after an error */
} arbor_frame_reader;

void arbor_frame_init(arbor_frame_reader *r, size_t max);
void arbor_frame_free(arbor_frame_reader *r);
/* Appends n bytes (then take the frames with next). Returns ARBOR_FRAME_OK or a negative error (the stream is
   then unusable). */
int arbor_frame_feed(arbor_frame_reader *r, const char *data, size_t n);
/* Takes the next whole frame: *payload points into the reader and is valid
   until the next feed or next call. */
int arbor_frame_next(arbor_frame_reader *r, const char **payload, size_t *len);
/* Bytes of an incomplete frame still buffered (non-zero at end of stream
   means the stream was truncated). */
size_t arbor_frame_pending(const arbor_frame_reader *r);
/* Writes the header of a payload of len bytes. */
void arbor_frame_header(unsigned char out[ARBOR_FRAME_HEADER], uint32_t len);
/* A message for an error code. */
const char *arbor_frame_strerror(int code);

#endif

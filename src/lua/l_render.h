/* l_render.h: renders in slices (l_render.c), what /metrics and /tree
 * write (issue 25): the text of a render, the shape of the tree it walks,
 * and the render object that the HTTP listener steps a little at a time
 * between loop turns, so that a big tree never holds the loop.
 *
 * A render takes the tree's shape in one go (the nodes in pre-order, each
 * referenced, so that none is freed under it), then reads each node when
 * its slice comes: a node discarded meanwhile is skipped (its subtree
 * with it), one added meanwhile is not in this render. Each node is read
 * at one moment; different nodes at moments up to the render's length
 * apart.
 */
#ifndef ARBOR_L_RENDER_H
#define ARBOR_L_RENDER_H

#include <lua.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/internal.h"

/* ---- text ------------------------------------------------------------ */

/* The text is written into one buffer that becomes one Lua string, or
   (chunked) into a chunk of ARBOR_CHUNK bytes, reused, that is pushed as a
   Lua string into a table each time it fills: what the HTTP listener
   writes to its socket as they are (one writev), so a 46 MB exposition is
   never copied whole. A big buffer is mapped with huge pages (one fault
   per 2 MB, not per 4 KB). */
typedef struct arbor_text {
  char *s;
  size_t len, cap;
  void *map;            /* s is in this mapping of maplen bytes, or NULL */
  size_t maplen;
  lua_State *L;         /* chunked: full chunks go to the table at tbl */
  int tbl;
  lua_Integer nchunks;
  size_t total;         /* bytes of the chunks pushed */
} arbor_text;

#define ARBOR_CHUNK ((size_t)256 << 10)

/* A buffer of cap bytes, the old content kept. */
void arbor_text_alloc(arbor_text *t, size_t cap);
void arbor_text_free(arbor_text *t);
/* Makes room for n more bytes: pushes the chunk when chunked (t->L set),
   else grows the buffer. [-0, +0, m] */
void arbor_text_room(arbor_text *t, size_t n);
/* Appends printf-style. */
void arbor_text_add(arbor_text *t, const char *fmt, ...);

/* The writers below write without checking: arbor_text_room was asked
   first (a scrape of 100,000 nodes writes a million lines). */
static inline void arbor_text_cpy(arbor_text *t, const char *s, size_t len) {
  memcpy(t->s + t->len, s, len);
  t->len += len;
}

#define ARBOR_TEXT_LIT(t, lit) arbor_text_cpy(t, lit, sizeof lit - 1)

/* v in decimal: at most 20 bytes. */
static inline void arbor_text_uint(arbor_text *t, uint64_t v) {
  char b[24], *p = b + sizeof b;
  do *--p = (char)('0' + v % 10);
  while (v /= 10);
  arbor_text_cpy(t, p, (size_t)(b + sizeof b - p));
}

/* Appends len bytes, making room first. */
static inline void arbor_text_put(arbor_text *t, const char *s, size_t len) {
  arbor_text_room(t, len);
  arbor_text_cpy(t, s, len);
}

/* ---- the tree's shape --------------------------------------------------- */

typedef struct arbor_shape_node {
  arbor_node *node; /* referenced */
  unsigned depth;   /* below the top: 0 for it */
} arbor_shape_node;

typedef struct arbor_shape {
  arbor_shape_node *v;
  size_t n;
} arbor_shape;

/* Takes the shape of top's subtree: its nodes in pre-order, each
   referenced until arbor_shape_drop. One pass over pointers: a tree of
   100,000 nodes in about a millisecond. */
void arbor_shape_take(arbor_shape *s, arbor_node *top);
void arbor_shape_drop(arbor_shape *s);

/* ---- the render object -------------------------------------------------- */

typedef struct arbor_render arbor_render;

typedef struct arbor_render_kind {
  /* Renders on from where r is, until it is done (returns 1) or
     arbor_render_due(deadline) (returns 0). [-0, +0, m] */
  int (*step)(arbor_render *r, lua_State *L, uint64_t deadline);
  /* Frees what r->state holds (the state itself, the shape and the text
     are freed by the caller), or NULL. */
  void (*free)(arbor_render *r);
} arbor_render_kind;

struct arbor_render {
  const arbor_render_kind *kind;
  arbor_engine *e;
  arbor_shape shape;
  size_t at;        /* the next node of the shape to read */
  arbor_text text;
  void *state;      /* the kind's, zeroed at first */
  int done;
};

/* Nodes (or entries) a step handles between two looks at the clock. */
#define ARBOR_RENDER_BATCH 64

/* 1 once the clock (uv_hrtime) passed deadline. */
int arbor_render_due(uint64_t deadline);

/* Pushes a new render object (userdata arbor.Render) of the engine object
   at index engine_idx, of kind k with a zeroed state of state_size bytes,
   the shape of top's subtree taken; its text is chunked, or one buffer of
   cap bytes. Its methods: r:step([ns]) runs it for about ns nanoseconds
   (at least one batch; to its end without ns), true once done;
   r:result() -> the table of chunks and their length, or the one string;
   r:close(). [-0, +1, m] */
arbor_render *arbor_render_new(lua_State *L, int engine_idx,
                               const arbor_render_kind *k, size_t state_size,
                               arbor_node *top, int chunked, size_t cap);
/* Runs the render at idx to its end and replaces it by its result (one
   value: the string, or the chunks table with the length after it when
   chunked: two). Returns how many values. [-1, +1|+2, e] */
int arbor_render_finish(lua_State *L, int idx);

#endif

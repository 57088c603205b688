/* l_render.c: renders in slices (see l_render.h): the text buffer, the
 * tree's shape, and the render object arbor.Render that l_metrics.c
 * (/metrics) and l_view.c (/tree) make and lua/arbor/http.lua steps, about
 * 2 ms per loop turn, as the control server runs evaluations.
 */
#include "lua/l_render.h"

#include <lauxlib.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <uv.h>

#include "core/mem.h"
#include "lua/l_arbor.h"

#define RENDER_MT "arbor.Render"
#define HUGE_PAGE ((size_t)2 << 20)

/* ---- text ------------------------------------------------------------ */

void arbor_text_free(arbor_text *t) {
  if (t->map) munmap(t->map, t->maplen);
  else free(t->s);
  t->s = NULL, t->map = NULL;
  t->len = t->cap = 0;
}

/* Past 4 MB, in a mapping that asks for transparent huge pages. */
void arbor_text_alloc(arbor_text *t, size_t cap) {
  size_t len = t->len;
  if (cap >= 2 * HUGE_PAGE) {
    cap = (cap + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    size_t maplen = cap + HUGE_PAGE;
    void *m = mmap(NULL, maplen, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) {
      char *s = (char *)(((uintptr_t)m + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
      madvise(s, cap, MADV_HUGEPAGE); /* a hint: no error matters */
      if (len) memcpy(s, t->s, len);
      arbor_text_free(t);
      t->s = s, t->cap = cap, t->map = m, t->maplen = maplen, t->len = len;
      return;
    }
  }
  char *s = arbor_xalloc(cap);
  if (len) memcpy(s, t->s, len);
  arbor_text_free(t);
  t->s = s, t->cap = cap, t->len = len;
}

void arbor_text_room(arbor_text *t, size_t n) {
  if (t->cap - t->len > n) return;
  if (t->L && t->len) {
    lua_pushlstring(t->L, t->s, t->len);
    lua_rawseti(t->L, t->tbl, ++t->nchunks);
    t->total += t->len;
    t->len = 0;
    if (t->cap - t->len > n) return;
  }
  arbor_text_alloc(t, t->cap * 2 + n + 256);
}

void arbor_text_add(arbor_text *t, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    arbor_text_room(t, n > 0 ? (size_t)n + 1 : 256);
  }
}

/* ---- the tree's shape --------------------------------------------------- */

void arbor_shape_take(arbor_shape *s, arbor_node *top) {
  size_t cap = top->tree && top->tree->nnodes ? top->tree->nnodes : 16;
  s->v = arbor_xalloc(cap * sizeof *s->v);
  s->n = 0;
  arbor_node *n = top;
  unsigned d = 0;
  while (n) {
    if (s->n == cap) {
      cap *= 2;
      s->v = arbor_xrealloc(s->v, cap * sizeof *s->v);
    }
    arbor_node_ref(n);
    s->v[s->n++] = (arbor_shape_node){n, d};
    if (n->first) {
      n = n->first;
      d++;
      continue;
    }
    while (n != top && !n->next) n = n->parent, d--;
    n = n == top ? NULL : n->next;
  }
}

/* The last unref may free the engine's memory (the tree's owner), once it
   was closed: nothing of it is read after. */
void arbor_shape_drop(arbor_shape *s) {
  for (size_t i = 0; i < s->n; i++) arbor_node_unref(s->v[i].node);
  free(s->v);
  s->v = NULL;
  s->n = 0;
}

/* ---- the render object -------------------------------------------------- */

int arbor_render_due(uint64_t deadline) { return uv_hrtime() >= deadline; }

/* The render at idx; raises once closed. */
static arbor_render *check_render(lua_State *L, int idx) {
  arbor_render **r = luaL_checkudata(L, idx, RENDER_MT);
  if (!*r) luaL_error(L, "render is closed");
  return *r;
}

/* r:close(): frees the render (its nodes unreferenced); idempotent.
   Also __gc and __close. */
static int render_close(lua_State *L) {
  arbor_render **rp = luaL_checkudata(L, 1, RENDER_MT);
  arbor_render *r = *rp;
  if (!r) return 0;
  *rp = NULL;
  if (r->kind->free) r->kind->free(r);
  free(r->state);
  arbor_text_free(&r->text);
  arbor_shape_drop(&r->shape);
  free(r);
  return 0;
}

/* r:step([ns]) -> done: renders on for about ns nanoseconds (at least one
   batch), or to the end without ns; raises once the engine is closed. */
static int render_step(lua_State *L) {
  arbor_render *r = check_render(L, 1);
  uint64_t deadline = UINT64_MAX;
  if (!lua_isnoneornil(L, 2)) {
    lua_Integer ns = luaL_checkinteger(L, 2);
    deadline = uv_hrtime() + (uint64_t)(ns > 0 ? ns : 0);
  }
  lua_settop(L, 1);
  if (!r->done) {
    lua_getiuservalue(L, 1, 1);
    arbor_check_engine(L, 2); /* "engine is closed" */
    if (lua_getiuservalue(L, 1, 2) == LUA_TTABLE) { /* chunked */
      r->text.L = L;
      r->text.tbl = 3;
    }
    r->done = r->kind->step(r, L, deadline);
    r->text.L = NULL;
  }
  lua_pushboolean(L, r->done);
  return 1;
}

/* r:result() -> chunks, length | string: the text of a render that is
   done. */
static int render_result(lua_State *L) {
  arbor_render *r = check_render(L, 1);
  if (!r->done) return luaL_error(L, "render: not done yet");
  if (lua_getiuservalue(L, 1, 2) != LUA_TTABLE) {
    lua_pushlstring(L, r->text.s, r->text.len);
    return 1;
  }
  if (r->text.len) { /* the last chunk */
    lua_pushlstring(L, r->text.s, r->text.len);
    lua_rawseti(L, -2, ++r->text.nchunks);
    r->text.total += r->text.len;
    r->text.len = 0;
  }
  lua_pushinteger(L, (lua_Integer)r->text.total);
  return 2;
}

arbor_render *arbor_render_new(lua_State *L, int engine_idx,
                               const arbor_render_kind *k, size_t state_size,
                               arbor_node *top, int chunked, size_t cap) {
  engine_idx = lua_absindex(L, engine_idx);
  arbor_engine *e = arbor_check_engine(L, engine_idx);
  if (luaL_getmetatable(L, RENDER_MT) == LUA_TNIL) {
    static const luaL_Reg methods[] = {{"step", render_step},
                                       {"result", render_result},
                                       {"close", render_close},
                                       {NULL, NULL}};
    arbor_new_type(L, RENDER_MT, methods, render_close);
  }
  lua_pop(L, 1);
  arbor_render **rp = lua_newuserdatauv(L, sizeof *rp, 2);
  *rp = NULL;
  luaL_setmetatable(L, RENDER_MT);
  lua_pushvalue(L, engine_idx);
  lua_setiuservalue(L, -2, 1);
  if (chunked) {
    lua_newtable(L);
    lua_setiuservalue(L, -2, 2);
  }
  arbor_render *r = arbor_xcalloc(1, sizeof *r);
  r->kind = k;
  r->e = e;
  *rp = r; /* from here on, __gc frees it all */
  r->state = arbor_xcalloc(1, state_size);
  arbor_shape_take(&r->shape, top);
  arbor_text_alloc(&r->text, chunked ? ARBOR_CHUNK : cap);
  return r;
}

int arbor_render_finish(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  lua_pushcfunction(L, render_step);
  lua_pushvalue(L, idx);
  lua_call(L, 1, 0);
  lua_pushcfunction(L, render_result);
  lua_pushvalue(L, idx);
  lua_call(L, 1, LUA_MULTRET);
  int n = lua_gettop(L) - idx;
  lua_pushcfunction(L, render_close);
  lua_pushvalue(L, idx);
  lua_call(L, 1, 0);
  lua_remove(L, idx);
  return n;
}

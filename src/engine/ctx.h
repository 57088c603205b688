/* ctx.h: the runnable's context (ctx) as a Lua value (see ctx.c). */
#ifndef ARBOR_CTX_H
#define ARBOR_CTX_H

#include <lua.h>

#include "engine/engine.h"

#define ARBOR_CTX_MT "arbor.Context"

typedef struct arbor_ctx {
  pnode *pn;            /* NULL once finalized */
  uint64_t incarnation; /* the incarnation it was made for */
} arbor_ctx;

/* Pushes a new ctx of pn's current incarnation. [-0, +1, m] */
void arbor_push_ctx(lua_State *L, pnode *pn);
/* The ctx at idx, or raises (not a ctx). */
arbor_ctx *arbor_to_ctx(lua_State *L, int idx);
/* 1 while c's incarnation runs. */
int arbor_ctx_live(const arbor_ctx *c);
/* The node of a live ctx at idx, or raises "stale context" (T3). */
pnode *arbor_check_ctx(lua_State *L, int idx);
/* Pushes the ctx metatable (made at the first call, with __gc and
   __tostring; the bindings add the methods). [-0, +1, m] */
void arbor_ctx_metatable(lua_State *L);
/* The engine's registry reference to the metatable, and its address. */
int arbor__ctx_mt_ref(lua_State *L, const void **mt);

#endif

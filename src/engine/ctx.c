/* ctx.c: the runnable's context (ctx) as a Lua value, one per incarnation
 * (T3). The engine makes them (each incarnation's first argument); the
 * bindings (lua/l_ctx.c) give the type its methods. A ctx holds a reference
 * on its node, so a ctx kept by Lua code never points to freed memory; it
 * is stale once its incarnation ended.
 */
#include "engine/ctx.h"

#include <lauxlib.h>

#include "engine/internal.h"

/* The ctx metatable, also registered under a pointer key. */
static const char ctx_mt_key = 'm';

/* An engine keeps the ctx metatable of its Lua state as a registry ref, to
   make ctxs, and as an address, to recognize them: both much cheaper than
   a lookup by name or key, and every ctx call does one. */
int arbor__ctx_mt_ref(lua_State *L, const void **mt) {
  arbor_ctx_metatable(L);
  *mt = lua_topointer(L, -1);
  return luaL_ref(L, LUA_REGISTRYINDEX);
}

void arbor_push_ctx(lua_State *L, pnode *pn) {
  arbor_ctx *c = lua_newuserdatauv(L, sizeof *c, 0);
  c->pn = pn;
  c->incarnation = pn->n.incarnation;
  arbor_node_ref(&pn->n);
  lua_rawgeti(L, LUA_REGISTRYINDEX, pn_engine(pn)->ctx_mt_ref);
  lua_setmetatable(L, -2);
}

/* Pushes n's DN. [-0, +1, m] */
void arbor_push_dn(lua_State *L, const arbor_node *n) {
  char buf[256]; /* most DNs fit: formed once, no Lua buffer */
  size_t len = arbor_node_dn(n, buf, sizeof buf);
  if (len < sizeof buf) {
    lua_pushlstring(L, buf, len);
    return;
  }
  luaL_Buffer b;
  arbor_node_dn(n, luaL_buffinitsize(L, &b, len + 1), len + 1);
  luaL_pushresultsize(&b, len);
}

/* Pushes the DN of a ctx's node, or "(finalized)" when it has none.
   [-0, +1, m] */
static const char *push_ctx_dn(lua_State *L, const arbor_ctx *c) {
  if (c->pn)
    arbor_push_dn(L, &c->pn->n);
  else
    lua_pushliteral(L, "(finalized)");
  return lua_tostring(L, -1);
}

/* The ctx at idx, or raises. Inside an engine's step (every runnable's
   call) the metatable's address is compared; elsewhere it is looked up. */
arbor_ctx *arbor_to_ctx(lua_State *L, int idx) {
  arbor_engine *e = arbor_engine_current();
  if (e && lua_getmetatable(L, idx)) {
    int same = lua_topointer(L, -1) == e->ctx_mt;
    lua_pop(L, 1);
    if (same) return lua_touserdata(L, idx);
  }
  return luaL_checkudata(L, idx, ARBOR_CTX_MT); /* raises the usual error */
}

/* A ctx finalized (by lua_close) has no node: it is stale like any other. */
int arbor_ctx_live(const arbor_ctx *c) {
  if (!c->pn) return 0;
  const arbor_node *n = &c->pn->n;
  return !(n->flags & ARBOR_F_DETACHED) && n->incarnation == c->incarnation &&
         arbor_node_running(n);
}

/* The node of a live ctx at idx, or raises "stale context" (T3). */
pnode *arbor_check_ctx(lua_State *L, int idx) {
  arbor_ctx *c = arbor_to_ctx(L, idx);
  if (!arbor_ctx_live(c))
    return luaL_error(L, "stale context: %s incarnation %d has ended",
                      push_ctx_dn(L, c), (int)c->incarnation),
           NULL;
  return c->pn;
}

static int ctx_gc(lua_State *L) {
  arbor_ctx *c = arbor_to_ctx(L, 1);
  if (c->pn) arbor_node_unref(&c->pn->n);
  c->pn = NULL;
  return 0;
}

static int ctx_tostring(lua_State *L) {
  arbor_ctx *c = arbor_to_ctx(L, 1);
  lua_pushfstring(L, "ctx(%s#%d%s)", push_ctx_dn(L, c),
                  (int)c->incarnation, arbor_ctx_live(c) ? "" : ", stale");
  return 1;
}

void arbor_ctx_metatable(lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &ctx_mt_key) == LUA_TTABLE) return;
  lua_pop(L, 1);
  luaL_newmetatable(L, ARBOR_CTX_MT);
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &ctx_mt_key);
  lua_pushcfunction(L, ctx_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, ctx_tostring);
  lua_setfield(L, -2, "__tostring");
}

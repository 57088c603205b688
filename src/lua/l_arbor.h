/* l_arbor.h: shared declarations of the Lua bindings (l_*.c). */
#ifndef ARBOR_L_ARBOR_H
#define ARBOR_L_ARBOR_H

#include <lua.h>

#include "engine/ctx.h"
#include "engine/processor.h"

#define ARBOR_ENGINE_MT "arbor.Engine"

typedef struct arbor_child_opts {
  int policy_idx; /* stack index of the policy function, or 0 */
  double shutdown;
  unsigned lc; /* lifecycle and sidecar (ARBOR_LC_*) */
  int gflags;     /* GF_SIGNIFICANT, GF_AUTO, GF_STRATEGY, GF_ORDERED */
  int grouping;   /* strategy or ordered given (ctx:group only) */
} arbor_child_opts;

/* Reads the strategy options of ctx:run / ctx:group / the root (key at -2,
   value at -1 of L) into o. Returns 0 when the key is not one of them;
   raises on a bad value. strategy.c's options, in l_strategy.c. */
int arbor_strategy_opt(lua_State *L, const char *key, arbor_child_opts *o,
                       const pnode *where, const char *what);
/* Raises when the options read make no sense together (what: "ctx:run",
   "ctx:group" or "start"). */
void arbor_strategy_check(lua_State *L, const arbor_child_opts *o,
                          const pnode *where, const char *what);

/* Error messages echo what a caller gave cut to its first ARBOR_CUT bytes:
   a 10,000-character name is not worth 10,000 characters of message. */
#define ARBOR_CUT 64
/* Pushes s, or when longer than ARBOR_CUT bytes its first ones (not
   splitting a UTF-8 sequence), "..." and its length; returns the pushed
   string. [-0, +1, m] */
const char *arbor_push_cut(lua_State *L, const char *s, size_t len);

/* Raises "<pn's DN>: <message>" at the caller's position, as luaL_error
   does (fmt as lua_pushfstring's); the DN is formed only on this path. */
int arbor_dn_error(lua_State *L, const pnode *pn, const char *fmt, ...);
void arbor_push_event_table(arbor_engine *e, lua_State *L,
                            const arbor_event *ev);

void arbor_open_ctx(lua_State *L);
void arbor_open_defer(lua_State *L);
void arbor_open_exec(lua_State *L);
void arbor_open_engine(lua_State *L);
void arbor_open_control(lua_State *L);

/* The engine of the engine object at idx; raises when closed. */
arbor_engine *arbor_check_engine(lua_State *L, int idx);
void arbor_open_window(lua_State *L);
void arbor_open_coroutine(lua_State *L);

int luaopen_arbor_core(lua_State *L);

#endif

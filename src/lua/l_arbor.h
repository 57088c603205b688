/* l_arbor.h: shared declarations of the Lua bindings (l_*.c). */
#ifndef ARBOR_L_ARBOR_H
#define ARBOR_L_ARBOR_H

#include <lauxlib.h>
#include <lua.h>

#include "engine/ctx.h"
#include "engine/engine.h"

#define ARBOR_ENGINE_MT "arbor.Engine"

typedef struct arbor_child_opts {
  int policy_idx; /* stack index of the policy function, or 0 */
  double shutdown;
  unsigned lc; /* lifecycle and sidecar (ARBOR_LC_*) */
  int gflags;     /* GF_SIGNIFICANT, GF_AUTO, GF_STRATEGY, GF_ORDERED */
  int grouping;   /* strategy or ordered given (ctx:group only) */
  int parallel;   /* stop = "parallel": PN_PARALLEL */
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

/* l_override.c: runtime swaps and policies kept by DN (T13). c was just
   created with the runnable at fn_idx and the policy at policy_idx (0:
   none): an override for its DN replaces them. */
void arbor_override_spawn(lua_State *L, pnode *c, int fn_idx, int policy_idx);
/* pn is removed: its overrides go too. */
void arbor_override_drop(lua_State *L, pnode *pn);
/* Swaps the runnable at idx in for pn's (runtime, by DN: it lasts). */
void arbor_override_swap(lua_State *L, pnode *pn, int idx);
/* Pushes pn's runnable as the script gave it (not a runtime swap). */
void arbor_override_push_script_fn(lua_State *L, pnode *pn);

/* l_reload.c: 1 when the child c, adopted after a reload, is defined
   otherwise now: its runnable at fn_idx, its options at opts_idx (0:
   none), against what its parent gave at its creation. */
int arbor_reload_changed(lua_State *L, pnode *c, int fn_idx, int opts_idx);
/* c was just created on an engine with a node filter (e:node_filter: a
   reload's check build, a reexec's restore): the filter sees it and may
   swap a stand-in runnable in. */
void arbor_reload_filter(lua_State *L, pnode *c, int fn_idx, int opts_idx);
/* c, adopted, changed: it is reloaded (its children adopted in turn) or
   restarted, as the reload's plan says; an event tells which. */
void arbor_reload_restart(lua_State *L, pnode *c);

/* l_util.c: helpers shared by the bindings. */

/* Registers the userdata type name (the metatable arbor.Type): methods m as
   __index, close as both __gc and __close. [-0, +0, m] */
void arbor_new_type(lua_State *L, const char *name, const luaL_Reg *m,
                    lua_CFunction close);
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
/* The node of e at the DN given as argument idx, or raises "no node". */
pnode *arbor_check_node(lua_State *L, arbor_engine *e, int idx);

/* Runtime failures (docs/lua-api.md, "Runtime failures"): what a caller
   can meet in a correct program is returned, as luv returns it, never
   raised: nil, "ENAME: message", "ENAME". Misuse raises. */

/* Pushes nil, "<ename>: <message>", ename (fmt as lua_pushfstring's; NULL:
   the name alone) and returns 3. [-0, +3, m] */
int arbor_push_fail(lua_State *L, const char *ename, const char *fmt, ...);
/* The same for err, a negative errno value or libuv error code: its name
   and text as luv says them, then fmt saying what or where (NULL: nothing):
   "ENOENT: no such file or directory: /usr/bin/nope". [-0, +3, m] */
int arbor_push_errno(lua_State *L, int err, const char *fmt, ...);
/* Room for an error name. */
#define ARBOR_ERRNAME 32
/* The name of err ("ENOENT"), as arbor_push_errno names it, in buf (of
   ARBOR_ERRNAME bytes); returns buf. */
const char *arbor_errname(int err, char *buf);

/* Adds methods m to engine objects (after arbor_open_engine; l_util.c).
   [-0, +0, m] */
void arbor_engine_methods(lua_State *L, const luaL_Reg *m);

/* The engine of the engine object at idx; raises when closed (l_engine.c). */
arbor_engine *arbor_check_engine(lua_State *L, int idx);

/* Each adds its functions to the module table on top, called in this order
   by luaopen_arbor_core (l_core.c); [-0, +0, m]. */
void arbor_open_engine(lua_State *L);
void arbor_open_ctx(lua_State *L); /* after arbor_open_engine */
void arbor_open_view(lua_State *L); /* after arbor_open_engine */
void arbor_open_metrics(lua_State *L); /* after arbor_open_engine */
void arbor_open_log(lua_State *L); /* after arbor_open_engine */
void arbor_open_override(lua_State *L); /* after arbor_open_engine */
void arbor_open_reload(lua_State *L); /* after arbor_open_engine */
/* The format of the state a reexec hands over (lua/arbor/restore.lua):
   this arbor reads states of this format and older ones. */
#define ARBOR_STATE_FORMAT 1
void arbor_open_reexec(lua_State *L); /* after arbor_open_engine; and
                                         functions in the table on top */
void arbor_open_control(lua_State *L);
void arbor_open_conn(lua_State *L);
void arbor_open_slice(lua_State *L);
void arbor_open_exec(lua_State *L);
void arbor_open_window(lua_State *L);
void arbor_open_coroutine(lua_State *L);
void arbor_open_sdnotify(lua_State *L);
void arbor_open_defer(lua_State *L); /* on the ctx methods table on top */

int luaopen_arbor_core(lua_State *L);

#endif

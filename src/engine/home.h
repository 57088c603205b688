/* home.h: the libuv loop shared by the engines of a Lua state and by luv. */
#ifndef ARBOR_HOME_H
#define ARBOR_HOME_H

#include <lua.h>
#include <uv.h>

/* The loop of L's state, made (and handed to luv) on first use. */
uv_loop_t *arbor_home_loop(lua_State *L);
/* Sets package.preload.luv to luv on that loop, unless luv is loaded. */
void arbor_preload_luv(lua_State *L);

#endif

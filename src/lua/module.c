/* module.c: the Lua C module arbor.core (build/lua/arbor/core.so) is the
 * engine library linked whole, so luaopen_arbor_core (l_core.c) and what
 * it opens are in it; this file only gives the module target a source. */
#include "lua/l_arbor.h"

/* l_options.h: checking the names in an options table (l_options.c). */
#ifndef ARBOR_L_OPTIONS_H
#define ARBOR_L_OPTIONS_H

#include <lua.h>

/* When the table at idx has keys that are not in known (NULL-terminated,
   in the order to list them), pushes the message naming every one of
   them, sorted, each with the closest known name when one is close ("did
   you mean"), then the known names, and returns 1:
     unknown options 'grce', 'polcy' (did you mean 'policy'?); known: ...
   Returns 0 (pushing nothing) when every key is known. [-0, +(0|1), m] */
int arbor_unknown_options(lua_State *L, int idx, const char *const known[]);

#endif

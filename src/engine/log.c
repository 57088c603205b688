/* log.c: a node's log: the last ARBOR_LOG_LINES lines (ctx:log, its
 * processes' output, the engine's notes), and the engine's log sink, called
 * under the time budget of user code. */
#include "engine/internal.h"
#include "engine/clock.h"

#include <lauxlib.h>
#include <stdlib.h>

void arbor_engine_log(arbor_engine *e, pnode *pn, arbor_str *line) {
  if (!pn->logs) {
    pn->logs = calloc(1, sizeof *pn->logs);
    if (!pn->logs) return;
  }
  arbor_logs *lg = pn->logs;
  unsigned idx = (lg->start + lg->len) % ARBOR_LOG_LINES;
  if (lg->len == ARBOR_LOG_LINES) {
    arbor_str_unref(lg->line[idx]);
    lg->start = (lg->start + 1) % ARBOR_LOG_LINES;
  } else {
    lg->len++;
  }
  lg->line[idx] = arbor_str_ref(line);
  lg->time[idx] = arbor__step_time(e);
  if (e->log_ref != LUA_NOREF) {
    lua_State *L = e->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, e->log_ref);
    arbor__event_table_dn(e, L, pn);
    lua_pushlstring(L, line->s, line->len);
    lua_pushnumber(L, arbor__step_time(e));
    arbor__call_budget(e, L, 3); /* user code: bounded like a policy */
    lua_pop(L, 1);
  }
}

int arbor_engine_log_now(arbor_engine *e, pnode *pn, arbor_str *line) {
  if (e->zombie) return 0;
  arbor__step_begin(e);
  arbor_engine_log(e, pn ? pn : (pnode *)e->tree.root, line);
  return 1;
}

/* l_sdnotify.c: the notify protocol of service managers for Lua
 * (engine/sdnotify.c): core.notifier(e) for arbor.run, core.sd_notify(text) behind
 * arbor.notify, core.stop_bound(e) for `arbor ctl status`.
 */
#include <lauxlib.h>

#include "engine/sdnotify.h"
#include "lua/l_arbor.h"

#define NOTIFIER_MT "arbor.Notifier"

typedef struct notifier {
  arbor_sd *sd; /* NULL once closed */
} notifier;

/* core.notifier(e): a notifier telling the service manager about engine e,
   or nil when arbor has no NOTIFY_SOCKET. The engine must outlive it:
   arbor.run closes it before the engine. [-0, +1, m] */
static int l_notifier(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  notifier *n = lua_newuserdatauv(L, sizeof *n, 1);
  n->sd = NULL;
  luaL_setmetatable(L, NOTIFIER_MT);
  lua_pushvalue(L, 1); /* keeps the engine object alive as long */
  lua_setiuservalue(L, -2, 1);
  n->sd = arbor_sd_attach(e);
  if (!n->sd) lua_pushnil(L);
  return 1;
}

/* notifier:close([end]): STOPPING=1 with STATUS=end unless the stop was
   announced; idempotent (also __gc and __close). [-0, +0, -] */
static int l_notifier_close(lua_State *L) {
  notifier *n = luaL_checkudata(L, 1, NOTIFIER_MT);
  const char *end =
      lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "arbor exited";
  if (n->sd) arbor_sd_detach(n->sd, end);
  n->sd = NULL;
  return 0;
}

/* core.sd_notify(text): sends text (KEY=VALUE lines) to the service
   manager; true when sent, false when arbor has no NOTIFY_SOCKET, nil,
   "ENAME: message", "ENAME" when sending failed. [-0, +1|3, m] */
static int l_sd_notify(lua_State *L) {
  size_t len;
  const char *text = luaL_checklstring(L, 1, &len);
  int r = arbor_sd_send(text, len);
  if (r >= 0) return lua_pushboolean(L, r), 1;
  return arbor_push_errno(L, r, "NOTIFY_SOCKET");
}

/* core.stop_bound(e): the seconds the ordered stop of e's tree may take
   at most (sdnotify.h). [-0, +1, -] */
static int l_stop_bound(lua_State *L) {
  lua_pushnumber(L, arbor_sd_stop_bound(arbor_check_engine(L, 1)));
  return 1;
}

static const luaL_Reg notifier_methods[] = {
    {"close", l_notifier_close},
    {NULL, NULL},
};

static const luaL_Reg funcs[] = {
    {"notifier", l_notifier},
    {"sd_notify", l_sd_notify},
    {"stop_bound", l_stop_bound},
    {NULL, NULL},
};

/* [-0, +0, m] registers the notifier type and the functions in the table
   on top. */
void arbor_open_sdnotify(lua_State *L) {
  arbor_new_type(L, NOTIFIER_MT, notifier_methods, l_notifier_close);
  luaL_setfuncs(L, funcs, 0);
}

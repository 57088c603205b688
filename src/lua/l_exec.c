/* l_exec.c: processes as Lua objects (arbor.Process) and the helpers the
 * Lua side of ctx:exec needs (lua/arbor/exec.lua validates the options and
 * calls core.spawn with a checked spec).
 */
#include <errno.h>
#include <grp.h>
#include <lauxlib.h>
#include <math.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lua/l_arbor.h"
#include "proc/proc.h"
#include "proc/spawn.h"

#define PROC_MT "arbor.Process"

typedef struct lproc {
  arbor_proc *p;
} lproc;

static arbor_proc *check_proc(lua_State *L, int idx) {
  lproc *lp = luaL_checkudata(L, idx, PROC_MT);
  if (!lp->p) luaL_error(L, "process handle is closed");
  return lp->p;
}

/* ---- spawning ------------------------------------------------------- */

/* A NULL-terminated array of the strings in the list at idx: in buf when
   it has room for them (size entries), else in a userdata pushed on the
   stack (so Lua frees it). The strings are anchored by the list. */
static char **string_array(lua_State *L, int idx, char **buf, size_t size) {
  lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
  char **a = (size_t)n < size
                 ? buf
                 : lua_newuserdatauv(L, (size_t)(n + 1) * sizeof *a, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, idx, i);
    a[i - 1] = (char *)lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  a[n] = NULL;
  return a;
}

static int opt_int(lua_State *L, int idx, int *set) {
  *set = !lua_isnil(L, idx);
  return (int)lua_tointeger(L, idx);
}

/* core.spawn(ctx, file, argv, env, cwd, uid, gid, umask, stdin_inherit,
   ready, stop_signal, grace, line_max, watchdog) -> proc | nil, "ENAME:
   message", "ENAME". Checked by exec.lua: env is a list of "K=V" or nil,
   ready 0 (spawn), 1 (notify) or 2 (systemd), watchdog seconds; nil for
   what is not set. */
static int l_spawn(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  arbor_engine *e = pn_engine(pn);
  if (!arbor_engine_loop(e))
    return luaL_error(L,
                      "ctx:exec: processes need a real-clock engine "
                      "(arbor.run); the virtual harness has no process I/O");
  lua_settop(L, 14);
  char *argv_buf[32], *env_buf[128];
  arbor_proc_opts o;
  memset(&o, 0, sizeof o);
  int set;
  o.file = lua_tostring(L, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  o.argv = string_array(L, 3, argv_buf, sizeof argv_buf / sizeof *argv_buf);
  if (lua_istable(L, 4))
    o.env = string_array(L, 4, env_buf, sizeof env_buf / sizeof *env_buf);
  o.cwd = lua_tostring(L, 5);
  o.uid = (uid_t)opt_int(L, 6, &o.set_uid);
  o.gid = (gid_t)opt_int(L, 7, &o.set_gid);
  o.umask = opt_int(L, 8, &set);
  if (!set) o.umask = -1;
  o.stdin_inherit = lua_toboolean(L, 9);
  o.ready = opt_int(L, 10, &set);
  o.stop_signal = opt_int(L, 11, &set);
  if (!set) o.stop_signal = SIGTERM;
  o.grace = luaL_optnumber(L, 12, 10.0);
  o.line_max = (size_t)opt_int(L, 13, &set);
  o.watchdog = luaL_optnumber(L, 14, 0);
  if (!o.file || !o.argv[0]) return luaL_error(L, "core.spawn: bad spec");

  lproc *lp = lua_newuserdatauv(L, sizeof *lp, 0);
  lp->p = NULL;
  luaL_setmetatable(L, PROC_MT);
  char err[512] = "";
  arbor_proc *p;
  int rc = arbor_proc_spawn(e, pn, &o, &p, err, sizeof err);
  /* proc/ says "cannot start FILE: text (NAME)" for a failed start, said
     here as every failure is; the notification socket's failure (EIO) in
     its own words */
  if (rc == UV_EIO && err[0]) return arbor_push_fail(L, "EIO", "%s", err);
  if (rc != 0)
    return o.cwd ? arbor_push_errno(L, rc, "%s (cwd %s)", o.file, o.cwd)
                 : arbor_push_errno(L, rc, "%s", o.file);
  lp->p = p;
  /* the node must outlive the stop: its shutdown covers the grace period */
  if (pn->shutdown < o.grace + 1) pn->shutdown = o.grace + 1;
  return 1;
}

/* ---- a reexec (docs/restore.md) -------------------------------------- */

static int field_int(lua_State *L, int t, const char *k, int dflt) {
  lua_getfield(L, t, k);
  int v = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : dflt;
  lua_pop(L, 1);
  return v;
}

/* core.adopt(ctx, record, stop_signal, grace, line_max) -> proc | nil,
   "ENAME: message", "ENAME": takes over the process a record of
   core.proc_export describes, for ctx's incarnation (the arbor before a
   reexec started it). */
static int l_adopt(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  arbor_engine *e = pn_engine(pn);
  luaL_checktype(L, 2, LUA_TTABLE);
  if (!arbor_engine_loop(e)) return luaL_error(L, "core.adopt: a real-clock engine only");
  arbor_proc_record r;
  r.pid = field_int(L, 2, "pid", -1);
  r.slot = field_int(L, 2, "slot", -1);
  r.note = field_int(L, 2, "note", -1);
  r.sd = field_int(L, 2, "sd", -1);
  lua_getfield(L, 2, "sd_path");
  r.sd_path = lua_tostring(L, -1);
  lua_getfield(L, 2, "fds");
  for (int i = 0; i < 4; i++) {
    lua_rawgeti(L, -1, i + 1);
    r.fds[i] = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : -1;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  arbor_proc_opts o;
  memset(&o, 0, sizeof o);
  int set;
  o.stop_signal = opt_int(L, 3, &set);
  if (!set) o.stop_signal = SIGTERM;
  o.grace = luaL_optnumber(L, 4, 10.0);
  o.line_max = (size_t)opt_int(L, 5, &set);
  lproc *lp = lua_newuserdatauv(L, sizeof *lp, 0);
  lp->p = NULL;
  luaL_setmetatable(L, PROC_MT);
  char err[256] = "";
  arbor_proc *p;
  int rc = arbor_proc_adopt(e, pn, &r, &o, &p, err, sizeof err);
  if (rc != 0) return arbor_push_fail(L, uv_err_name(rc), "%s", err);
  lp->p = p;
  if (pn->shutdown < o.grace + 1) pn->shutdown = o.grace + 1;
  return 1;
}

static void export_one(arbor_proc *p, pnode *pn, void *ud) {
  lua_State *L = ud;
  arbor_proc_record r;
  if (arbor_proc_export(p, &r) < 0) return;
  lua_createtable(L, 0, 10);
  arbor_push_dn(L, &pn->n);
  lua_setfield(L, -2, "dn");
  lua_pushinteger(L, r.pid);
  lua_setfield(L, -2, "pid");
  lua_pushinteger(L, r.slot);
  lua_setfield(L, -2, "slot");
  lua_createtable(L, 4, 0);
  for (int i = 0; i < 4; i++) {
    lua_pushinteger(L, r.fds[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "fds");
  lua_pushinteger(L, r.note);
  lua_setfield(L, -2, "note");
  lua_pushinteger(L, r.sd);
  lua_setfield(L, -2, "sd");
  if (r.sd_path) {
    lua_pushstring(L, r.sd_path);
    lua_setfield(L, -2, "sd_path");
  }
  lua_pushinteger(L, r.stop_signal);
  lua_setfield(L, -2, "stop_signal");
  lua_pushstring(L, arbor_signal_name(r.stop_signal));
  lua_setfield(L, -2, "signal");
  lua_pushnumber(L, r.grace);
  lua_setfield(L, -2, "grace");
  lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
}

/* core.proc_export(e) -> {record...}: every running process of e that can
   be taken over after a reexec ({dn, pid, slot, fds, note, sd, sd_path,
   stop_signal, signal (its name), grace}),
   its descriptors kept open across the exec from now on. */
static int l_proc_export(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  lua_newtable(L);
  arbor_proc_each(e, export_one, L);
  return 1;
}

/* core.guard_export() -> {sock, table, pid} | nil; core.guard_adopt(sock,
   table, pid) -> true | nil, err. */
static int l_guard_export(lua_State *L) {
  int fds[2], pid;
  if (arbor_proc_guard_export(fds, &pid) < 0) return 0;
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, fds[0]);
  lua_setfield(L, -2, "sock");
  lua_pushinteger(L, fds[1]);
  lua_setfield(L, -2, "table");
  lua_pushinteger(L, pid);
  lua_setfield(L, -2, "pid");
  return 1;
}

static int l_guard_adopt(lua_State *L) {
  int rc = arbor_proc_guard_adopt((int)luaL_checkinteger(L, 1),
                                  (int)luaL_checkinteger(L, 2),
                                  (int)luaL_checkinteger(L, 3));
  if (rc < 0) return arbor_push_errno(L, rc, "the process guard");
  lua_pushboolean(L, 1);
  return 1;
}

/* core.access(path [, "dir" [, what]]) -> true | nil, "ENAME: message",
   "ENAME": path is a file we may run (or a directory we may enter). The
   message names it as what (default: path). */
static int l_access(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  int dir = lua_isstring(L, 2) && strcmp(lua_tostring(L, 2), "dir") == 0;
  const char *what = luaL_optstring(L, 3, path);
  struct stat st;
  if (stat(path, &st) < 0) return arbor_push_errno(L, -errno, "%s", what);
  if (dir && !S_ISDIR(st.st_mode))
    return arbor_push_errno(L, UV_ENOTDIR, "%s", what);
  if (!dir && S_ISDIR(st.st_mode))
    return arbor_push_errno(L, UV_EISDIR, "%s", what);
  if (access(path, X_OK) < 0)
    return arbor_push_errno(L, -errno, "%s (not %s)", what,
                            dir ? "searchable" : "executable");
  lua_pushboolean(L, 1);
  return 1;
}

/* core.user(name) -> uid, gid | nil */
static int l_user(lua_State *L) {
  struct passwd *pw = getpwnam(luaL_checkstring(L, 1));
  if (!pw) return lua_pushnil(L), 1;
  lua_pushinteger(L, pw->pw_uid);
  lua_pushinteger(L, pw->pw_gid);
  return 2;
}

/* core.group(name) -> gid | nil */
static int l_group(lua_State *L) {
  struct group *gr = getgrnam(luaL_checkstring(L, 1));
  if (!gr) return lua_pushnil(L), 1;
  lua_pushinteger(L, gr->gr_gid);
  return 1;
}

static const struct {
  const char *name;
  int res;
} rlimits[] = {
    {"as", RLIMIT_AS},           {"core", RLIMIT_CORE},
    {"cpu", RLIMIT_CPU},         {"data", RLIMIT_DATA},
    {"fsize", RLIMIT_FSIZE},     {"locks", RLIMIT_LOCKS},
    {"memlock", RLIMIT_MEMLOCK}, {"msgqueue", RLIMIT_MSGQUEUE},
    {"nice", RLIMIT_NICE},       {"nofile", RLIMIT_NOFILE},
    {"nproc", RLIMIT_NPROC},     {"rss", RLIMIT_RSS},
    {"rtprio", RLIMIT_RTPRIO},   {"rttime", RLIMIT_RTTIME},
    {"sigpending", RLIMIT_SIGPENDING}, {"stack", RLIMIT_STACK},
};

/* core.rlimit(name) -> RLIMIT_* number | nil */
static int l_rlimit(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  for (size_t i = 0; i < sizeof rlimits / sizeof *rlimits; i++)
    if (strcmp(rlimits[i].name, name) == 0)
      return lua_pushinteger(L, rlimits[i].res), 1;
  return lua_pushnil(L), 1;
}

/* core.shim_path() -> the arbor executable that applies rlimits */
static int l_shim_path(lua_State *L) {
  lua_pushstring(L, arbor_shim_path());
  return 1;
}

extern char **environ;

/* core.environ() -> {"K=V", ...}: arbor's environment. */
static int l_environ(lua_State *L) {
  lua_newtable(L);
  for (int i = 0; environ[i]; i++) {
    lua_pushstring(L, environ[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* core.signum(name) -> number | nil */
static int l_signum(lua_State *L) {
  int sig = arbor_signal_number(luaL_checkstring(L, 1));
  if (sig < 0) return lua_pushnil(L), 1;
  lua_pushinteger(L, sig);
  return 1;
}

/* ---- blocking on a process ------------------------------------------ */

enum { PW_EXIT, PW_EVENT, PW_STOP };

/* The owner's coroutine, or raises. */
static pnode *check_owner(lua_State *L, arbor_proc *p, const char *what) {
  pnode *pn = arbor_proc_owner(p);
  if (!pn || pn->co != L)
    luaL_error(L, "proc:%s(): only from the incarnation that started the "
                  "process, in its own coroutine", what);
  if (!lua_isyieldable(L))
    luaL_error(L, "proc:%s(): blocking call across a C boundary", what);
  return pn;
}

/* Pushes how p ended: code, signal name, description ("killed after
   grace 2 s" when a stop had to SIGKILL it). [-0, +3, m] */
static int push_status(lua_State *L, arbor_proc *p) {
  int64_t status;
  double grace;
  int sig = arbor_proc_status(p, &status);
  if (arbor_proc_killed_after_grace(p, &grace)) {
    char how[64];
    snprintf(how, sizeof how, "killed after grace %g s", grace);
    lua_pushnil(L);
    lua_pushstring(L, arbor_signal_name(sig));
    lua_pushstring(L, how);
  } else if (sig) {
    const char *name = arbor_signal_name(sig);
    lua_pushnil(L);
    if (name)
      lua_pushstring(L, name);
    else
      lua_pushinteger(L, sig);
    lua_pushfstring(L, "killed by signal %d%s%s%s", sig, name ? " (" : "",
                    name ? name : "", name ? ")" : "");
  } else {
    lua_pushinteger(L, (lua_Integer)status);
    lua_pushnil(L);
    lua_pushfstring(L, "exited with status %d", (int)status);
  }
  return 3;
}

static int park(lua_State *L, arbor_proc *p, int mode, double timeout);

/* Continuation: what woke the owner. Cancellation stops the process and
   waits for its group before raising (a stop is over once nothing runs). */
static int k_proc(lua_State *L, int status, lua_KContext ctx) {
  (void)status;
  int mode = (int)(ctx & 3), canceled = (int)(ctx >> 2);
  arbor_proc *p = check_proc(L, 1);
  pnode *pn = arbor_proc_owner(p);
  arbor_proc_woken(p);
  int r = pn->resume;
  pn->resume = RESUME_VALUES;
  if (r == RESUME_FAIL) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, pn->fail_ref);
    luaL_unref(L, LUA_REGISTRYINDEX, pn->fail_ref);
    pn->fail_ref = LUA_NOREF;
    return lua_error(L);
  }
  if (r == RESUME_CANCEL) {
    arbor_proc_stop(p);
    canceled = 1;
  }
  if (canceled || mode == PW_STOP) {
    if (!arbor_proc_finished(p)) return park(L, p, mode | (canceled << 2), -1);
    if (canceled && mode != PW_STOP) {
      arbor_push_canceled(L);
      return lua_error(L);
    }
    return push_status(L, p);
  }
  if (mode == PW_EXIT) {
    if (!arbor_proc_finished(p)) return park(L, p, mode, -1);
    return push_status(L, p);
  }
  /* PW_EVENT: a line, a readiness notification, the end, or a timeout */
  arbor_str *line = arbor_proc_pop_line(p);
  if (line) {
    lua_pushliteral(L, "line");
    lua_pushlstring(L, line->s, line->len);
    arbor_str_unref(line);
    return 2;
  }
  if (arbor_proc_take_ready(p)) {
    lua_pushliteral(L, "ready");
    return 1;
  }
  double extend = 0;
  switch (arbor_proc_take_watchdog(p, &extend)) {
  case 1: lua_pushliteral(L, "watchdog"); return 1;
  case 2: lua_pushliteral(L, "trigger"); return 1;
  case 3:
    lua_pushliteral(L, "extend");
    lua_pushnumber(L, extend);
    return 2;
  }
  if (arbor_proc_finished(p)) {
    lua_pushliteral(L, "exit");
    return 1;
  }
  return 0; /* timeout */
}

/* Parks the owner on p (timeout < 0: none) and yields to k_proc. */
static int park(lua_State *L, arbor_proc *p, int mode, double timeout) {
  pnode *pn = arbor_proc_owner(p);
  lua_settop(L, 1);
  arbor_engine_park(pn_engine(pn), pn, timeout >= 0 ? WAIT_SLEEP : WAIT_PARK,
                    timeout >= 0 ? timeout : 0);
  arbor_proc_wait(p, pn->wait_seq);
  return lua_yieldk(L, 0, (lua_KContext)mode, k_proc);
}

/* Blocks unless k_proc can answer at once. */
static int block(lua_State *L, arbor_proc *p, int mode, double timeout,
                 const char *what) {
  pnode *pn = check_owner(L, p, what);
  lua_settop(L, 1);
  if ((pn->pflags & PN_NOTIFIED) && pn->shield == 0 && mode != PW_STOP) {
    /* already canceled: stop first, then raise */
    arbor_proc_stop(p);
    if (!arbor_proc_finished(p)) return park(L, p, mode | (1 << 2), -1);
    arbor_push_canceled(L);
    return lua_error(L);
  }
  int ready = arbor_proc_finished(p) ||
              (mode == PW_EVENT && (arbor_proc_pending(p) || timeout == 0));
  if (ready) return k_proc(L, LUA_OK, (lua_KContext)mode);
  return park(L, p, mode, timeout);
}

/* proc:wait() -> code, signal, description */
static int proc_wait(lua_State *L) {
  return block(L, check_proc(L, 1), PW_EXIT, -1, "wait");
}

/* proc:stop() -> code, signal, description: stop_signal to the group,
   SIGKILL after grace; returns once the group is gone (also while the node
   is being canceled). */
static int proc_stop(lua_State *L) {
  arbor_proc *p = check_proc(L, 1);
  check_owner(L, p, "stop");
  arbor_proc_stop(p);
  return block(L, p, PW_STOP, -1, "stop");
}

/* proc:_next([timeout]) -> "line", text | "ready" | "watchdog" |
   "trigger" | "extend", seconds | "exit" | nothing (timeout) */
static int proc_next(lua_State *L) {
  arbor_proc *p = check_proc(L, 1);
  double t = luaL_optnumber(L, 2, -1);
  return block(L, p, PW_EVENT, t, "_next");
}

/* proc:_watch(on): queue stdout lines for _next (readiness by output). */
static int proc_watch(lua_State *L) {
  arbor_proc_watch(check_proc(L, 1), lua_toboolean(L, 2));
  return 0;
}

/* proc:status() -> code, signal, description, or nil while it runs */
static int proc_status(lua_State *L) {
  arbor_proc *p = check_proc(L, 1);
  if (!arbor_proc_finished(p)) return lua_pushnil(L), 1;
  return push_status(L, p);
}

/* proc:kill(sig [, "group"]) -> true | nil, "ENAME: message", "ENAME"
   (ESRCH once the process has exited) */
static int proc_kill(lua_State *L) {
  arbor_proc *p = check_proc(L, 1);
  int sig;
  if (lua_type(L, 2) == LUA_TNUMBER) {
    sig = (int)lua_tointeger(L, 2);
  } else {
    const char *name = luaL_optstring(L, 2, "TERM");
    sig = arbor_signal_number(name);
    if (sig < 0) return luaL_error(L, "proc:kill: unknown signal '%s'", name);
  }
  const char *who = luaL_optstring(L, 3, "main");
  int group = strcmp(who, "group") == 0;
  if (!group && strcmp(who, "main") != 0)
    return luaL_error(L, "proc:kill: want \"main\" or \"group\", got '%s'", who);
  int rc = arbor_proc_kill(p, sig, group);
  if (rc == 1)
    return arbor_push_fail(L, "ESRCH", "process %d has exited",
                           (int)arbor_proc_pid(p));
  if (rc < 0)
    return arbor_push_errno(L, rc, "signal %d to process %s%d", sig,
                            group ? "group " : "", (int)arbor_proc_pid(p));
  lua_pushboolean(L, 1);
  return 1;
}

static int proc_gc(lua_State *L) {
  lproc *lp = luaL_checkudata(L, 1, PROC_MT);
  if (lp->p) arbor_proc_release(lp->p);
  lp->p = NULL;
  return 0;
}

/* __close (a handle in a <close> variable or given to ctx:defer): a
   process still running is stopped (in the background). */
static int proc_close(lua_State *L) {
  lproc *lp = luaL_checkudata(L, 1, PROC_MT);
  if (lp->p) arbor_proc_stop(lp->p); /* nothing once it is gone */
  return 0;
}

static int proc_index(lua_State *L) {
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
  arbor_proc *p = check_proc(L, 1);
  const char *k = lua_tostring(L, 2);
  if (k && strcmp(k, "pid") == 0) {
    lua_pushinteger(L, arbor_proc_pid(p));
  } else if (k && strcmp(k, "stopped") == 0) {
    lua_pushboolean(L, arbor_proc_stopped(p));
  } else {
    lua_pushnil(L);
  }
  return 1;
}

static int proc_tostring(lua_State *L) {
  lproc *lp = luaL_checkudata(L, 1, PROC_MT);
  if (!lp->p) return lua_pushliteral(L, "process (closed)"), 1;
  lua_pushfstring(L, "process %d (%s)", arbor_proc_pid(lp->p),
                  arbor_proc_finished(lp->p) ? "exited" : "running");
  return 1;
}

static const luaL_Reg proc_methods[] = {
    {"wait", proc_wait},     {"stop", proc_stop},     {"kill", proc_kill},
    {"status", proc_status}, {"_next", proc_next},    {"_watch", proc_watch},
    {NULL, NULL},
};

static const luaL_Reg funcs[] = {
    {"spawn", l_spawn},   {"access", l_access}, {"user", l_user},
    {"group", l_group},   {"signum", l_signum},
    {"environ", l_environ},   {"rlimit", l_rlimit},
    {"shim_path", l_shim_path},
    {"adopt", l_adopt},   {"proc_export", l_proc_export},
    {"guard_export", l_guard_export}, {"guard_adopt", l_guard_adopt},
    {NULL, NULL},
};

/* [-0, +0, m] registers arbor.Process and the exec functions in the table
   on top. */
void arbor_open_exec(lua_State *L) {
  luaL_setfuncs(L, funcs, 0);
  luaL_newmetatable(L, PROC_MT);
  luaL_newlib(L, proc_methods);
  lua_pushcclosure(L, proc_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, proc_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, proc_close);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, proc_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
}

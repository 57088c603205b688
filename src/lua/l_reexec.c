/* l_reexec.c: what `arbor ctl reexec` needs of C (docs/restore.md): the
 * counters of a node, read before the exec and set again after it, the
 * state in a memfd, the signals held across the exec, the exec itself,
 * and stopping a process the new script did not take over.
 */
#define _GNU_SOURCE /* memfd_create */
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include "core/mem.h"
#include "engine/internal.h"
#include "lua/l_arbor.h"

/* e:node_record(dn) -> {restarts, consecutive, failures = {ago...},
   finished, held, healthy_for} | nil: what a reexec carries of a node
   (held: down, stopped by hand or given up; healthy_for: seconds it has
   been HEALTHY, when it is). */
static int l_node_record(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  pnode *pn = arbor_check_node(L, e, 2);
  double now = arbor_engine_now(e);
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, pn->restarts);
  lua_setfield(L, -2, "restarts");
  lua_pushinteger(L, pn->consecutive);
  lua_setfield(L, -2, "consecutive");
  lua_createtable(L, pn->nfail, 0);
  for (unsigned i = 0; pn->failures && i < pn->nfail; i++) {
    lua_pushnumber(L, now - pn->failures->time[(pn->fail_start + i) % ARBOR_FAILURES]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "failures");
  lua_pushboolean(L, (pn->n.flags & ARBOR_F_RETIRED) != 0);
  lua_setfield(L, -2, "finished");
  lua_pushboolean(L, (pn->n.flags & ARBOR_F_HELD) && !arbor_node_running(&pn->n));
  lua_setfield(L, -2, "held");
  if (arbor_node_running(&pn->n) && pn->n.state == ARBOR_HEALTHY &&
      pn->healthy_at >= 0) {
    lua_pushnumber(L, now - pn->healthy_at);
    lua_setfield(L, -2, "healthy_for");
  }
  return 1;
}

/* e:restore_node(dn, record): sets what node_record read (before the
   node's first start) and marks the node restored (ctx.restored). */
static int l_restore_node(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  pnode *pn = arbor_check_node(L, e, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  double now = arbor_engine_now(e);
  lua_getfield(L, 3, "restarts");
  pn->restarts = (uint32_t)lua_tointeger(L, -1);
  lua_getfield(L, 3, "consecutive");
  pn->consecutive = (uint32_t)lua_tointeger(L, -1);
  lua_pop(L, 2);
  if (lua_getfield(L, 3, "failures") == LUA_TTABLE) {
    lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
    if (n > ARBOR_FAILURES) n = ARBOR_FAILURES;
    if (n > 0 && !pn->failures) {
      pn->failures = arbor_xcalloc(1, sizeof *pn->failures);
      pn->failures->memory_ref = LUA_NOREF;
    }
    for (lua_Integer i = 1; i <= n; i++) {
      lua_rawgeti(L, -1, i);
      pn->failures->time[i - 1] = now - lua_tonumber(L, -1);
      lua_pop(L, 1);
    }
    if (n > 0) {
      pn->fail_start = 0;
      pn->nfail = (uint8_t)n;
      pn->failures->count = (uint64_t)n;
    }
  }
  lua_pop(L, 1);
  lua_getfield(L, 3, "finished");
  pn->standin = lua_toboolean(L, -1); /* not run again (docs/restore.md) */
  lua_getfield(L, 3, "held");
  int held = lua_toboolean(L, -1);
  lua_pop(L, 2);
  pn->restored = 1;
  /* stopped by hand or given up before: still down (not started) */
  if (held && !arbor_node_running(&pn->n)) arbor_engine_hold(e, pn);
  return 0;
}

/* The stand-in runnable of a finished job (arbor_standin_key): healthy,
   then done. */
static int standin(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  arbor_engine *e = pn_engine(pn);
  arbor_engine_signal(e, pn, "healthy");
  arbor_engine_signal(e, pn, "done");
  return 0;
}

/* e:set_clock(now): the engine's clock reads now at this moment (before
   the tree starts): after a reexec it goes on from the arbor before's, so
   the times of the state (failures, HEALTHY since) keep their meaning. */
static int l_set_clock(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  double now = luaL_checknumber(L, 2);
  if (e->loop && now > 0 && now < 1e9) {
    double was = arbor_engine_now(e);
    e->t0 -= (uint64_t)((now - was) * 1e9);
    e->wall0 -= now - was;
  }
  return 0;
}

/* e:restored(dn, reason): the event `restored` on dn (a process taken
   over after a reexec). */
static int l_restored(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  pnode *pn = arbor_check_node(L, e, 2);
  size_t len;
  const char *s = luaL_checklstring(L, 3, &len);
  arbor_str *why = arbor_str_new(s, len);
  arbor_engine_event(e, pn, ARBOR_EV_RESTORED, why);
  arbor_str_unref(why);
  return 0;
}

/* e:log_root(line): logs line on the root (what the restore did). */
static int l_log_root(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  size_t len;
  const char *s = luaL_checklstring(L, 2, &len);
  arbor_str *line = arbor_str_new(s, len);
  arbor_engine_log_now(e, NULL, line);
  arbor_str_unref(line);
  return 0;
}

/* e:set_healthy_for(dn, s): the node's running incarnation has been
   HEALTHY for s seconds (an adopted process's uptime goes on). */
static int l_set_healthy_for(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  pnode *pn = arbor_check_node(L, e, 2);
  double s = luaL_checknumber(L, 3);
  if (pn->n.state == ARBOR_HEALTHY && pn->healthy_at >= 0)
    pn->healthy_at = arbor_engine_now(e) - s;
  return 0;
}

/* core.memfd(name, data) -> fd | nil, err: data in a memory file whose
   descriptor stays open across an exec. */
static int l_memfd(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  size_t len;
  const char *data = luaL_checklstring(L, 2, &len);
  int fd = memfd_create(name, 0);
  if (fd < 0) return arbor_push_errno(L, -errno, "memfd_create");
  size_t off = 0;
  while (off < len) {
    ssize_t w = write(fd, data + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int err = errno;
      close(fd);
      return arbor_push_errno(L, -err, "writing the state");
    }
    off += (size_t)w;
  }
  lua_pushinteger(L, fd);
  return 1;
}

/* core.read_fd(fd) -> data | nil, err: all of a memory file (from its
   start); the descriptor is closed. */
static int l_read_fd(lua_State *L) {
  int fd = (int)luaL_checkinteger(L, 1);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  char buf[65536];
  off_t off = 0;
  for (;;) {
    ssize_t r = pread(fd, buf, sizeof buf, off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      close(fd);
      return arbor_push_errno(L, -err, "reading the state (fd %d)", fd);
    }
    if (r == 0) break;
    luaL_addlstring(&b, buf, (size_t)r);
    off += r;
  }
  close(fd);
  luaL_pushresult(&b);
  return 1;
}

/* ---- the exec window -------------------------------------------------- */

/* The signals arbor answers (a stop, a reload, forwarding under --init).
   Across the exec they are held: blocked in this thread, and sent back to
   the process as pending by any other thread that takes one (below); the
   blocked mask and the pending signals cross execve, and the new arbor
   takes them once its handlers are in (engine/loop.c unblocks them). */
static const int held_signals[] = {SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
#define NHELD (sizeof held_signals / sizeof *held_signals)
static struct sigaction held_actions[NHELD]; /* the handlers before */
static sigset_t held_mask;                   /* this thread's mask before */
static int holding;

/* A held signal that reached a thread that does not block it (the log
   writer's, libuv's pool): that thread blocks it from now on (the mask its
   handler returns to) and sends it to the process again, where it stays
   pending until a thread takes it: none before the exec. */
static void defer_signal(int sig, siginfo_t *info, void *uctx) {
  (void)info;
  int saved = errno;
  sigaddset(&((ucontext_t *)uctx)->uc_sigmask, sig);
  kill(getpid(), sig);
  errno = saved;
}

/* core.hold_signals(): the signals above wait from now on (pending) until
   core.release_signals, or are the new arbor's after an exec. */
static int l_hold_signals(lua_State *L) {
  (void)L;
  if (holding) return 0;
  sigset_t set;
  sigemptyset(&set);
  for (size_t i = 0; i < NHELD; i++) sigaddset(&set, held_signals[i]);
  pthread_sigmask(SIG_BLOCK, &set, &held_mask);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = defer_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigfillset(&sa.sa_mask);
  for (size_t i = 0; i < NHELD; i++)
    sigaction(held_signals[i], &sa, &held_actions[i]);
  holding = 1;
  return 0;
}

/* core.release_signals(): a reexec that could not be done: the handlers
   and the mask are as before, and what came meanwhile is handled now. */
static int l_release_signals(lua_State *L) {
  (void)L;
  if (!holding) return 0;
  for (size_t i = 0; i < NHELD; i++)
    sigaction(held_signals[i], &held_actions[i], NULL);
  pthread_sigmask(SIG_SETMASK, &held_mask, NULL);
  holding = 0;
  return 0;
}

/* e:stopping() -> true once the tree was asked to stop. */
static int l_stopping(lua_State *L) {
  lua_pushboolean(L, arbor_check_engine(L, 1)->stop_requested != 0);
  return 1;
}

/* core.exec(path, argv, env_name, env_value) -> nil, err: replaces this
   process with path (same pid), env_name set; returns only on failure
   (then env_name is unset again). */
static int l_exec(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  const char *k = luaL_checkstring(L, 3), *v = luaL_checkstring(L, 4);
  lua_Integer n = (lua_Integer)lua_rawlen(L, 2);
  char **argv = lua_newuserdatauv(L, (size_t)(n + 1) * sizeof *argv, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, 2, i);
    argv[i - 1] = (char *)lua_tostring(L, -1);
    lua_pop(L, 1); /* anchored by the table */
  }
  argv[n] = NULL;
  setenv(k, v, 1);
  execv(path, argv);
  int err = errno;
  unsetenv(k);
  return arbor_push_errno(L, -err, "exec %s", path);
}

/* core.drain_fd(fd) -> data | "" | nil: what the pipe fd holds now,
   without waiting ("" when nothing, nil at its end or on an error): the
   output of a process being stopped after a reexec, read so that its
   writes never meet a closed pipe (SIGPIPE) while it shuts down. */
static int l_drain_fd(lua_State *L) {
  int fd = (int)luaL_checkinteger(L, 1);
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0) return 0;
  if (!(fl & O_NONBLOCK)) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  char buf[16384];
  ssize_t r;
  while ((r = read(fd, buf, sizeof buf)) < 0 && errno == EINTR) {
  }
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) r = 0;
  else if (r <= 0) return 0;
  lua_pushlstring(L, buf, (size_t)r);
  return 1;
}

/* core.self_argv() -> {arg...}: this process's command line. */
static int l_self_argv(lua_State *L) {
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return arbor_push_errno(L, -errno, "/proc/self/cmdline");
  char buf[65536];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n < 0) return arbor_push_errno(L, -errno, "/proc/self/cmdline");
  buf[n] = '\0';
  lua_newtable(L);
  lua_Integer i = 0;
  for (ssize_t at = 0; at < n; at += (ssize_t)strlen(buf + at) + 1) {
    lua_pushstring(L, buf + at);
    lua_rawseti(L, -2, ++i);
  }
  return 1;
}

/* core.self_exe() -> path: the file this process runs (the path it was
   run from, also when that file was replaced since). */
static int l_self_exe(lua_State *L) {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n < 0) return arbor_push_errno(L, -errno, "/proc/self/exe");
  buf[n] = '\0';
  static const char deleted[] = " (deleted)";
  size_t dl = sizeof deleted - 1;
  if ((size_t)n > dl && strcmp(buf + n - dl, deleted) == 0) buf[n - dl] = '\0';
  lua_pushstring(L, buf);
  return 1;
}

/* core.signal_group(pid, sig) -> true | nil, err: sig to pid's group (a
   process the new script did not take over); core.reap(pid) -> true when
   pid exited and was reaped now; core.close_fd(fd); core.cloexec(fd). */
static int l_signal_group(lua_State *L) {
  int pid = (int)luaL_checkinteger(L, 1), sig = (int)luaL_checkinteger(L, 2);
  if (pid <= 1 || kill(-pid, sig) < 0)
    return arbor_push_errno(L, pid <= 1 ? -EINVAL : -errno, "process group %d", pid);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_reap(lua_State *L) {
  int st;
  pid_t pid = (pid_t)luaL_checkinteger(L, 1);
  lua_pushboolean(L, pid > 1 && waitpid(pid, &st, WNOHANG) == pid);
  return 1;
}

static int l_close_fd(lua_State *L) {
  int fd = (int)luaL_checkinteger(L, 1);
  if (fd > 2) close(fd);
  return 0;
}

/* core.cloexec(fd): fd is closed on exec again (a reexec that failed). */
static int l_cloexec(lua_State *L) {
  int fd = (int)luaL_checkinteger(L, 1);
  if (fd > 2) fcntl(fd, F_SETFD, FD_CLOEXEC);
  return 0;
}

void arbor_open_reexec(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"node_record", l_node_record},
      {"restore_node", l_restore_node},
      {"set_healthy_for", l_set_healthy_for},
      {"log_root", l_log_root},
      {"restored", l_restored},
      {"set_clock", l_set_clock},
      {"stopping", l_stopping},
      {NULL, NULL},
  };
  arbor_engine_methods(L, methods);
  lua_pushcfunction(L, standin);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &arbor_standin_key);
  static const luaL_Reg funcs[] = {
      {"memfd", l_memfd},         {"read_fd", l_read_fd},
      {"exec", l_exec},           {"self_argv", l_self_argv},
      {"drain_fd", l_drain_fd},   {"hold_signals", l_hold_signals},
      {"release_signals", l_release_signals},
      {"self_exe", l_self_exe},   {"signal_group", l_signal_group},
      {"reap", l_reap},           {"close_fd", l_close_fd},
      {"cloexec", l_cloexec},
      {NULL, NULL},
  };
  luaL_setfuncs(L, funcs, 0);
  lua_pushinteger(L, ARBOR_STATE_FORMAT);
  lua_setfield(L, -2, "state_format");
}

/* main.c: the arbor executable. Embeds Lua 5.4 with arbor.core preloaded
 * and runs a supervisor script: `arbor run SCRIPT [args]`; `arbor repl` and
 * `arbor ctl` talk to a running one over its control socket
 * (lua/arbor/client.lua).
 *
 * Exit codes: 0 the tree stopped cleanly, 1 the tree gave up, 2 a script or
 * usage error, 130 interrupted by a second SIGINT, 143 a second SIGTERM
 * while the engine was stuck in one step (watchdog.c).
 */
#include <lauxlib.h>
#include <lualib.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc/proc.h"
#include "engine/home.h"
#include "lua/l_arbor.h"
#include "proc/spawn.h"

int luaopen_arbor_readline(lua_State *L);

static const char usage[] =
    "usage: arbor run [--quiet] [--init] [--control PATH | --no-control]\n"
    "                 [--http ADDR:PORT] [--log-dir DIR [--log-max-bytes N]\n"
    "                 [--log-keep N] [--log-mode MODE]] [--log-format text|json]\n"
    "                 SCRIPT [ARGS...]\n"
    "       arbor check SCRIPT [ARGS...]\n"
    "       arbor repl [--echo] [SOCKET]\n"
    "       arbor ctl [SOCKET] COMMAND [ARGS...] [--json]\n"
    "       arbor --version | --help\n"
    "\n"
    "Runs the supervisor SCRIPT: it calls arbor.run(root) or returns a root\n"
    "runnable. SIGINT or SIGTERM stops the tree in order; a second SIGINT\n"
    "kills it at once, and so does a second SIGINT or SIGTERM while the\n"
    "engine is stuck in one step. The running tree serves a control socket\n"
    "(by default $XDG_RUNTIME_DIR/arbor/SCRIPT.sock, /run/arbor/SCRIPT.sock\n"
    "as root) for `arbor repl` and `arbor ctl` (`arbor ctl --help` lists the\n"
    "commands).\n"
    "\n"
    "`arbor check SCRIPT` builds the tree on a virtual clock without\n"
    "starting any process, runs it for 5 virtual seconds and prints the\n"
    "tree and the errors its nodes met: exit 0 none, 2 some (or a script\n"
    "error).\n"
    "\n"
    "  --quiet        do not print events and logs on stderr\n"
    "  --control PATH serve the control socket at PATH (default: $ARBOR_CONTROL\n"
    "                 if set)\n"
    "  --no-control   serve no control socket (also ARBOR_CONTROL=none)\n"
    "  --http ADDR:PORT  serve /metrics, /healthz, /readyz and /tree over HTTP\n"
    "                 (bind a loopback address: there is no authentication)\n"
    "  --log-dir DIR  write each node's log lines to DIR/<dn>.log (RFC 3339\n"
    "                 times, level, DN), flushed every second and at stop; DIR\n"
    "                 is made 0750 (as root: root's, not group or other\n"
    "                 writable)\n"
    "  --log-max-bytes N  rotate a log file before it passes N bytes (K, M, G\n"
    "                 suffixes; default 10M)\n"
    "  --log-keep N   rotated files kept, <dn>.log.1 .. .N (default 5, at\n"
    "                 most 1000)\n"
    "  --log-mode MODE  the mode of the log files made, octal (default 0640)\n"
    "  --log-format F how logs and events are printed on stderr: text\n"
    "                 (default) or json, one object per line\n"
    "  --init         reap orphaned processes (as a subreaper; automatic as\n"
    "                 PID 1) and forward SIGHUP, SIGUSR1, SIGUSR2 to the\n"
    "                 process groups\n"
    "\n"
    "exit status: 0 stopped cleanly, 1 the tree gave up, 2 script or usage\n"
    "error (also: the root failed in its first start, before it was\n"
    "HEALTHY), 130 interrupted (second SIGINT), 143 second SIGTERM while\n"
    "stuck.\n";

/* Set by msghandler when the error was an object with __tostring: a
   message for the user (arbor.run raises one when another arbor serves its
   socket), printed as it is. */
static int error_is_message;

/* Message handler: the error with a traceback, or an error object's text. */
static int msghandler(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  error_is_message = 0;
  if (msg == NULL) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
      return error_is_message = 1;
    msg = lua_pushfstring(L, "(error object is a %s value)",
                          luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* require(name) under the message handler at h: 1 with the module on the
   stack, or 0 once the reason is printed. */
static int require_module(lua_State *L, const char *name, int h) {
  lua_getglobal(L, "require");
  lua_pushstring(L, name);
  if (lua_pcall(L, 1, 1, h) == LUA_OK) return 1;
  fprintf(stderr, "arbor: cannot load %s: %s\n", name, lua_tostring(L, -1));
  return 0;
}

/* Puts arbor's Lua files first on package.path: $ARBOR_LUA_DIR if set; the
   source tree's when this binary runs from its build directory, so a build
   works without installing; the installed ones next to the binary (a
   `cmake --install --prefix P` anywhere: P/bin/arbor reads
   P/share/lua/5.4); else the install directory configured at build time. */
static void set_paths(lua_State *L) {
  const char *dir = getenv("ARBOR_LUA_DIR");
  char exe[PATH_MAX], near[PATH_MAX + sizeof ARBOR_RELATIVE_LUA_DIR + 16],
      near_dir[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (!dir && n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    char want[PATH_MAX];
    if (realpath(ARBOR_BINARY_DIR, want) && strcmp(want, exe) == 0) {
      dir = ARBOR_SOURCE_LUA_DIR;
    } else {
      snprintf(near, sizeof near, "%s/%s/arbor/init.lua", exe,
               ARBOR_RELATIVE_LUA_DIR);
      if (access(near, R_OK) == 0) {
        snprintf(near, sizeof near, "%s/%s", exe, ARBOR_RELATIVE_LUA_DIR);
        if (realpath(near, near_dir)) dir = near_dir;
      }
    }
  }
  if (!dir) dir = ARBOR_INSTALL_LUA_DIR;
  lua_getglobal(L, "package");
  lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", dir, dir);
  lua_getfield(L, -2, "path");
  lua_concat(L, 2);
  lua_setfield(L, -2, "path");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, luaopen_arbor_core);
  lua_setfield(L, -2, "arbor.core");
  lua_pop(L, 2);
}

/* What `arbor run`'s options say (check: under `arbor check`). control:
   the socket path, "" for none, NULL for the default; http: ADDR:PORT or
   NULL. */
typedef struct run_options {
  int quiet, check, init;
  int restore_fd; /* the state of a reexec (ARBOR_RESTORE_FD), or -1 */
  const char *control, *http;
  const char *log_dir, *log_format; /* NULL: not given */
  long long log_max_bytes, log_keep, log_mode; /* -1: not given */
} run_options;

/* A count of --log-max-bytes or --log-keep: digits, with a K, M or G
   suffix when suffix is set; -1 when it is not one. */
static long long parse_count(const char *s, int suffix) {
  char *end;
  if (*s < '0' || *s > '9') return -1;
  unsigned long long v = strtoull(s, &end, 10);
  if (suffix && *end) {
    int shift = *end == 'K' || *end == 'k'   ? 10
                : *end == 'M' || *end == 'm' ? 20
                : *end == 'G' || *end == 'g' ? 30
                                             : -1;
    if (shift < 0 || end[1]) return -1;
    if (v > (1ull << 40)) return -1;
    v <<= shift;
    end++;
  }
  if (*end || v > (1ull << 50)) return -1;
  return (long long)v;
}

/* Runs the script; returns the exit status. [-0, +0, -] */
static int run_script(lua_State *L, const char *script, const run_options *o,
                      int argc, char **argv) {
  lua_createtable(L, argc, 1);
  lua_pushstring(L, script);
  lua_rawseti(L, -2, 0);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setglobal(L, "arg");

  lua_pushcfunction(L, msghandler);
  int h = lua_gettop(L);
  /* require "arbor", and tell arbor.cli it runs under the CLI */
  if (!require_module(L, "arbor", h)) return 2;
  int mod = lua_gettop(L);
  if (!require_module(L, "arbor.cli", h)) return 2;
  int cli = lua_gettop(L);
  lua_getfield(L, cli, "setup");
  lua_pushboolean(L, o->quiet);
  if (!o->control)
    lua_pushnil(L);
  else if (!*o->control)
    lua_pushboolean(L, 0);
  else
    lua_pushstring(L, o->control);
  lua_pushstring(L, script);
  lua_createtable(L, 0, 6);
  if (o->http) {
    lua_pushstring(L, o->http);
    lua_setfield(L, -2, "http");
  }
  if (o->log_dir) {
    lua_pushstring(L, o->log_dir);
    lua_setfield(L, -2, "log_dir");
  }
  if (o->log_format) {
    lua_pushstring(L, o->log_format);
    lua_setfield(L, -2, "log_format");
  }
  if (o->log_max_bytes >= 0) {
    lua_pushinteger(L, o->log_max_bytes);
    lua_setfield(L, -2, "log_max_bytes");
  }
  if (o->log_keep >= 0) {
    lua_pushinteger(L, o->log_keep);
    lua_setfield(L, -2, "log_keep");
  }
  if (o->log_mode >= 0) {
    lua_pushinteger(L, o->log_mode);
    lua_setfield(L, -2, "log_mode");
  }
  lua_pushboolean(L, o->check);
  lua_setfield(L, -2, "check");
  lua_pushboolean(L, o->init);
  lua_setfield(L, -2, "init");
  if (o->restore_fd >= 0) {
    lua_pushinteger(L, o->restore_fd);
    lua_setfield(L, -2, "restore_fd");
  }
  if (lua_pcall(L, 4, 0, h) != LUA_OK) {
    fprintf(stderr, "arbor: %s\n", lua_tostring(L, -1));
    return 2;
  }

  if (luaL_loadfile(L, script) != LUA_OK) {
    fprintf(stderr, "arbor: %s\n", lua_tostring(L, -1));
    return 2;
  }
  for (int i = 0; i < argc; i++) lua_pushstring(L, argv[i]);
  if (lua_pcall(L, argc, 1, h) != LUA_OK) {
    fprintf(stderr, "arbor: %s%s\n", error_is_message ? "" : "script error: ",
            lua_tostring(L, -1));
    return 2;
  }
  /* A returned runnable is run as the root. */
  if (lua_isfunction(L, -1)) {
    lua_getfield(L, mod, "run");
    lua_insert(L, -2);
    if (lua_pcall(L, 1, 0, h) != LUA_OK) {
      fprintf(stderr, "arbor: %s\n", lua_tostring(L, -1));
      return 2;
    }
  } else {
    lua_pop(L, 1);
  }
  lua_getfield(L, cli, "exit_status");
  lua_call(L, 0, 2);
  int status = (int)lua_tointeger(L, -2);
  if (lua_isstring(L, -1)) fprintf(stderr, "arbor: %s\n", lua_tostring(L, -1));
  return status;
}

/* `arbor repl` and `arbor ctl`: lua/arbor/client.lua does the work;
   returns its exit status. */
static int run_client(lua_State *L, const char *which, int argc, char **argv) {
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, luaopen_arbor_readline);
  lua_setfield(L, -2, "arbor.readline");
  lua_pop(L, 2);
  lua_pushcfunction(L, msghandler);
  int h = lua_gettop(L);
  if (!require_module(L, "arbor.client", h)) return 2;
  lua_getfield(L, -1, which);
  lua_createtable(L, argc, 0);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i + 1);
  }
  if (lua_pcall(L, 1, 1, h) != LUA_OK) {
    fprintf(stderr, "arbor %s: %s\n", which, lua_tostring(L, -1));
    return 2;
  }
  return (int)lua_tointeger(L, -1);
}

static void ignore_signal(int sig) { (void)sig; }

/* arbor dies only in order: a closed terminal's SIGHUP, SIGPIPE from a
   stderr whose reader went away (the write fails and the printer stops,
   lib arbor.cli), and SIGUSR1 and SIGUSR2 (forwarded under --init,
   proc/reaper.c; otherwise nobody's: one that came while a reexec held
   them must not end the new arbor) do not end it. A handler that does
   nothing rather than SIG_IGN: a program the script starts (io.popen) gets
   them back at their default, as exec resets handlers but keeps ignored
   signals ignored. While the tree runs the engine reloads on SIGHUP
   (engine/loop.c). */
static void survive_hangups(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = ignore_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGHUP, &sa, NULL);
  sigaction(SIGPIPE, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(SIGUSR2, &sa, NULL);
}

/* A Lua state with the standard libraries and arbor's paths, or NULL
   (said on stderr). */
static lua_State *new_state(void) {
  lua_State *L = luaL_newstate();
  if (!L) {
    fputs("arbor: cannot create the Lua state\n", stderr);
    return NULL;
  }
  luaL_openlibs(L);
  set_paths(L);
  return L;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fputs(usage, stderr);
    return 2;
  }
  if (strcmp(argv[1], "--exec-shim") == 0) /* internal: ctx:exec rlimits */
    return arbor_exec_shim(argc, argv); /* its fds are the program's */
  /* what arbor inherited beyond stdio does not reach the children the tree
     starts itself (io.popen, os.execute, luv's uv.spawn) */
  arbor_fds_cloexec(3);
  if (strcmp(argv[1], "--version") == 0) {
    printf("arbor %s (%s, libuv %s)\nreexec state format %d\n", ARBOR_VERSION,
           LUA_RELEASE, uv_version_string(), ARBOR_STATE_FORMAT);
    return 0;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    fputs(usage, stdout);
    return 0;
  }
  if (strcmp(argv[1], "repl") == 0 || strcmp(argv[1], "ctl") == 0) {
    lua_State *L = new_state();
    if (!L) return 2;
    int status = run_client(L, argv[1], argc - 2, argv + 2);
    lua_close(L);
    return status;
  }
  int check = strcmp(argv[1], "check") == 0;
  if (strcmp(argv[1], "run") != 0 && !check) {
    fprintf(stderr, "arbor: unknown command '%s'\n%s", argv[1], usage);
    return 2;
  }
  int i = 2, init = getpid() == 1;
  run_options o = {.check = check, .log_max_bytes = -1, .log_keep = -1,
                   .log_mode = -1,
                   .restore_fd = -1};
  /* after `arbor ctl reexec`: the state the arbor before handed over */
  const char *restore = getenv("ARBOR_RESTORE_FD");
  if (restore) {
    o.restore_fd = atoi(restore);
    unsetenv("ARBOR_RESTORE_FD"); /* not for the tree's programs */
  }
  for (; !check && i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
    if (strcmp(argv[i], "--quiet") == 0 || strcmp(argv[i], "-q") == 0) {
      o.quiet = 1;
    } else if (strcmp(argv[i], "--no-control") == 0) {
      o.control = "";
    } else if (strcmp(argv[i], "--control") == 0 ||
               strcmp(argv[i], "--http") == 0) {
      int http = argv[i][2] == 'h';
      if (i + 1 >= argc || !argv[i + 1][0]) {
        fprintf(stderr, "arbor: %s needs %s\n%s", argv[i],
                http ? "ADDR:PORT" : "a PATH", usage);
        return 2;
      }
      *(http ? &o.http : &o.control) = argv[++i];
    } else if (strncmp(argv[i], "--log-", 6) == 0) {
      const char *opt = argv[i];
      int which = strcmp(opt, "--log-dir") == 0          ? 0
                  : strcmp(opt, "--log-format") == 0     ? 1
                  : strcmp(opt, "--log-max-bytes") == 0  ? 2
                  : strcmp(opt, "--log-keep") == 0       ? 3
                  : strcmp(opt, "--log-mode") == 0       ? 4
                                                         : -1;
      if (which < 0) {
        fprintf(stderr, "arbor: unknown option '%s'\n%s", opt, usage);
        return 2;
      }
      const char *v = i + 1 < argc ? argv[++i] : NULL;
      long long n = 0;
      int bad = !v || !*v;
      if (!bad && which == 1)
        bad = strcmp(v, "text") != 0 && strcmp(v, "json") != 0;
      if (!bad && (which == 2 || which == 3)) {
        n = parse_count(v, which == 2);
        bad = n < 0 || (which == 2 && n < 1024) || (which == 3 && n > 1000);
      }
      if (!bad && which == 4) {
        char *end;
        n = strtoll(v, &end, 8);
        bad = *end || *v == '-' || *v == '+' || n < 0 || n > 0777;
      }
      if (bad) {
        static const char *const want[] = {
            "a DIR", "text or json",
            "a size in bytes >= 1024 (K, M, G suffixes: 10M)",
            "a count in 0-1000", "an octal file mode (0600, 0640)"};
        fprintf(stderr, "arbor: %s needs %s%s%s\n%s", opt, want[which],
                v ? ", got " : "", v ? v : "", usage);
        return 2;
      }
      if (which == 0) o.log_dir = v;
      else if (which == 1) o.log_format = v;
      else if (which == 2) o.log_max_bytes = n;
      else if (which == 3) o.log_keep = n;
      else o.log_mode = n;
    } else if (strcmp(argv[i], "--init") == 0) {
      init = 1;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(usage, stdout);
      return 0;
    } else if (strcmp(argv[i], "--") == 0) {
      i++;
      break;
    } else {
      fprintf(stderr, "arbor: unknown option '%s'\n%s", argv[i], usage);
      return 2;
    }
  }
  if (check && i < argc &&
      (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)) {
    fputs(usage, stdout);
    return 0;
  }
  if (i >= argc) {
    fprintf(stderr, "arbor: %s: missing SCRIPT\n%s", argv[1], usage);
    return 2;
  }
  survive_hangups();
  lua_State *L = new_state();
  if (!L) return 2;
  if (!check && init && arbor_reaper_start(arbor_home_loop(L)) < 0)
    fputs("arbor: --init: cannot become a subreaper\n", stderr);
  o.init = !check && init;
  int status = run_script(L, argv[i], &o, argc - i - 1, argv + i + 1);
  lua_close(L);
  return status;
}

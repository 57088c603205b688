/* repl.c: the arbor.readline module of the arbor executable (C2): GNU
 * readline line editing, history and completion for `arbor repl`, and the
 * SIGINT flag that turns Ctrl-C into an interrupt request. Lines are read
 * with readline's callback interface so Ctrl-C at the prompt abandons the
 * line instead of killing the REPL. Only the executable links readline; the
 * Lua module used by busted does not.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

int luaopen_arbor_readline(lua_State *L);

static volatile sig_atomic_t sigint_seen;
static int sig_pipe[2] = {-1, -1}; /* the handler writes a byte: no lost
                                      wakeup between a check and a wait */
static char *line_got;
static int line_done;
static lua_State *comp_L; /* the state the completer lives in */
static int comp_ref = LUA_NOREF;

static void on_sigint(int sig) {
  (void)sig;
  int saved = errno;
  sigint_seen = 1;
  if (sig_pipe[1] >= 0) {
    ssize_t w = write(sig_pipe[1], "i", 1);
    (void)w;
  }
  errno = saved;
}

/* Takes the bytes the handler wrote; returns whether SIGINT came. */
static int take_sigint(void) {
  char buf[64];
  if (sig_pipe[0] >= 0)
    while (read(sig_pipe[0], buf, sizeof buf) > 0) {
    }
  int seen = sigint_seen;
  sigint_seen = 0;
  return seen;
}

/* rl.catch_sigint() -> fd: SIGINT sets a flag (see rl.sigint), interrupts
   blocking calls (no SA_RESTART) and makes fd readable (conn:recv watches
   it). */
static int l_catch_sigint(lua_State *L) {
  if (sig_pipe[0] < 0) {
    if (pipe(sig_pipe) != 0) return luaL_error(L, "pipe: %s", strerror(errno));
    for (int i = 0; i < 2; i++) {
      fcntl(sig_pipe[i], F_SETFL, fcntl(sig_pipe[i], F_GETFL) | O_NONBLOCK);
      fcntl(sig_pipe[i], F_SETFD, FD_CLOEXEC);
    }
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  lua_pushinteger(L, sig_pipe[0]);
  return 1;
}

/* rl.sigint() -> true once after each SIGINT */
static int l_sigint(lua_State *L) {
  lua_pushboolean(L, take_sigint());
  return 1;
}

static void on_line(char *line) {
  line_got = line;
  line_done = 1;
  rl_callback_handler_remove();
}

/* rl.readline(prompt) -> line | nil (end of input) | false (Ctrl-C) */
static int l_readline(lua_State *L) {
  const char *prompt = luaL_optstring(L, 1, "> ");
  line_done = 0;
  line_got = NULL;
  take_sigint();
  rl_callback_handler_install(prompt, on_line);
  while (!line_done) {
    fd_set fds;
    int fd = fileno(rl_instream ? rl_instream : stdin);
    FD_ZERO(&fds);
    FD_SET(fd, &fds);
    int nfds = fd + 1;
    if (sig_pipe[0] >= 0) {
      FD_SET(sig_pipe[0], &fds);
      if (sig_pipe[0] >= nfds) nfds = sig_pipe[0] + 1;
    }
    int r = select(nfds, &fds, NULL, NULL, NULL);
    if ((r < 0 && errno == EINTR) ||
        (r > 0 && sig_pipe[0] >= 0 && FD_ISSET(sig_pipe[0], &fds))) {
      if (take_sigint()) {
        rl_free_line_state();
        rl_callback_sigcleanup();
        rl_callback_handler_remove();
        fputs("^C\n", rl_outstream ? rl_outstream : stdout);
        lua_pushboolean(L, 0);
        return 1;
      }
      continue;
    }
    if (r < 0) break;
    rl_callback_read_char();
  }
  if (!line_done) rl_callback_handler_remove();
  if (!line_got) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushstring(L, line_got);
  free(line_got);
  return 1;
}

static int l_add_history(lua_State *L) {
  add_history(luaL_checkstring(L, 1));
  return 0;
}

/* rl.read_history(path), rl.append_history(path): errors are ignored (a
   first run has no history file). */
static int l_read_history(lua_State *L) {
  read_history(luaL_checkstring(L, 1));
  return 0;
}

static int l_append_history(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  if (append_history(1, path) != 0) write_history(path);
  history_truncate_file(path, 1000);
  return 0;
}

/* Completion: the Lua completer returns the list of matches. */
static char **matches_of(const char *text) {
  lua_State *L = comp_L;
  if (!L || comp_ref == LUA_NOREF) return NULL;
  int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, comp_ref);
  lua_pushstring(L, text);
  lua_pushboolean(L, rl_completion_quote_character != 0);
  char **out = NULL;
  if (lua_pcall(L, 2, 1, 0) == LUA_OK && lua_istable(L, -1)) {
    lua_Integer n = luaL_len(L, -1);
    if (n > 0) {
      out = calloc((size_t)n + 2, sizeof *out);
      /* out[0] is the longest common prefix, as readline wants */
      size_t common = 0;
      const char *first = NULL;
      for (lua_Integer i = 1; out && i <= n; i++) {
        lua_rawgeti(L, -1, i);
        const char *m = lua_tostring(L, -1);
        out[i] = strdup(m ? m : "");
        if (!first) {
          first = out[i];
          common = strlen(first);
        } else {
          size_t k = 0;
          while (k < common && out[i][k] == first[k]) k++;
          common = k;
        }
        lua_pop(L, 1);
      }
      if (out) out[0] = strndup(first, common);
    }
  }
  lua_settop(L, top);
  return out;
}

static char **attempt(const char *text, int start, int end) {
  (void)start;
  (void)end;
  rl_attempted_completion_over = 1; /* no file names */
  rl_completion_append_character = '\0'; /* `arbor` then `.run` */
  return matches_of(text);
}

/* rl.set_completer(fn): fn(text, in_string) -> {matches} */
static int l_set_completer(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  if (comp_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, comp_ref);
  lua_pushvalue(L, 1);
  comp_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  comp_L = L;
  rl_attempted_completion_function = attempt;
  rl_completer_quote_characters = "\"'";
  rl_basic_word_break_characters = " \t\n\"'`@$><=;|&{(,+-*/%^~#[]";
  return 0;
}

static int l_isatty(lua_State *L) {
  lua_pushboolean(L, isatty((int)luaL_checkinteger(L, 1)));
  return 1;
}

static const luaL_Reg funcs[] = {
    {"readline", l_readline},
    {"add_history", l_add_history},
    {"read_history", l_read_history},
    {"append_history", l_append_history},
    {"set_completer", l_set_completer},
    {"catch_sigint", l_catch_sigint},
    {"sigint", l_sigint},
    {"isatty", l_isatty},
    {NULL, NULL},
};

int luaopen_arbor_readline(lua_State *L) {
  rl_catch_signals = 0; /* SIGINT is ours (see l_readline) */
  rl_readline_name = "arbor";
  using_history();
  stifle_history(1000);
  luaL_newlib(L, funcs);
  return 1;
}

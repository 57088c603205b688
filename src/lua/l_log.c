/* l_log.c: the bindings of logs (engine/log.c, engine/logfile.c): reading
 * a node's or a subtree's lines (e:logs), a node's process output parser
 * (core.log_parse), the log files of --log-dir (core.log_files) and the
 * count of dropped lines (core.log_dropped).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/logfile.h"
#include "lua/l_arbor.h"

/* A line found for e:logs: its node and its entry. */
typedef struct found {
  pnode *pn;
  const arbor_log_line *l;
} found;

typedef struct gather {
  found *v;
  size_t n, cap;
  unsigned sub;   /* 0: every line of the node; else only that sub-logger's */
  int subs_only;  /* sub given: the sub-logger DN (and its inner ones) */
  const arbor_str *prefix; /* with subs_only: the sub-logger's name */
  double since;
} gather;

static int want_sub(const gather *g, const arbor_logs *lg, unsigned sub) {
  if (!g->subs_only) return 1;
  if (!sub) return 0;
  const arbor_str *s = lg->subs[sub - 1].name, *p = g->prefix;
  return s->len >= p->len && memcmp(s->s, p->s, p->len) == 0 &&
         (s->len == p->len || s->s[p->len] == '.');
}

static int collect_node(gather *g, pnode *pn) {
  const arbor_logs *lg = pn->logs;
  if (!lg || !lg->ring) return 0;
  for (unsigned i = 0; i < lg->len; i++) {
    const arbor_log_line *l = &lg->ring[(lg->start + i) % lg->cap];
    if (l->time < g->since || !want_sub(g, lg, l->sub)) continue;
    if (g->n == g->cap) {
      size_t cap = g->cap ? g->cap * 2 : 256;
      found *v = realloc(g->v, cap * sizeof *v);
      if (!v) return -1;
      g->v = v;
      g->cap = cap;
    }
    g->v[g->n].pn = pn;
    g->v[g->n++].l = l;
  }
  return 0;
}

static int by_seq(const void *a, const void *b) {
  uint64_t x = ((const found *)a)->l->seq, y = ((const found *)b)->l->seq;
  return x < y ? -1 : x > y;
}

/* The node of dn, or of the sub-logger dn names (*sub its name). */
static pnode *resolve(arbor_engine *e, const char *dn, size_t len,
                      const arbor_str **sub) {
  *sub = NULL;
  arbor_node *n = arbor_tree_find(&e->tree, dn, len);
  if (n) return (pnode *)n;
  for (size_t i = len; i-- > 0;) {
    if (dn[i] != '.') continue;
    n = arbor_tree_find(&e->tree, dn, i);
    if (!n) continue;
    const arbor_logs *lg = ((pnode *)n)->logs;
    if (!lg) return NULL;
    const char *rest = dn + i + 1;
    size_t rl = len - i - 1;
    for (unsigned k = 0; k < lg->nsubs; k++) {
      const arbor_str *s = lg->subs[k].name;
      if (s->len >= rl && memcmp(s->s, rest, rl) == 0 &&
          (s->len == rl || s->s[rl] == '.')) {
        *sub = s;
        return (pnode *)n;
      }
    }
    return NULL;
  }
  return NULL;
}

/* e:logs(dn [, n [, opts]]) -> { {time=, wall=, line=, level=, dn=,
   seq=}, ... } oldest first: the last n lines (all kept when nil) of the
   node at dn (or of the sub-logger dn names); opts.subtree: of dn and
   every node under it, interleaved in the order they were logged;
   opts.since: only lines from that engine time on. */
static int l_logs(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  size_t len;
  const char *dn = luaL_checklstring(L, 2, &len);
  lua_Integer want = luaL_optinteger(L, 3, -1);
  int subtree = 0;
  gather g = {0};
  g.since = -1e300;
  if (!lua_isnoneornil(L, 4)) {
    luaL_checktype(L, 4, LUA_TTABLE);
    lua_getfield(L, 4, "subtree");
    subtree = lua_toboolean(L, -1);
    lua_getfield(L, 4, "since");
    if (!lua_isnil(L, -1)) g.since = luaL_checknumber(L, -1);
    lua_pop(L, 2);
  }
  const arbor_str *sub;
  pnode *pn = resolve(e, dn, len, &sub);
  if (!pn) return luaL_error(L, "no node %s", arbor_push_cut(L, dn, len));
  g.subs_only = sub != NULL;
  g.prefix = sub;
  int bad = collect_node(&g, pn);
  if (subtree && !sub) { /* depth first, without recursion */
    arbor_node *top = &pn->n, *n = top->first;
    while (n && !bad) {
      bad = collect_node(&g, (pnode *)n);
      if (n->first) {
        n = n->first;
        continue;
      }
      while (n != top && !n->next) n = n->parent;
      n = n == top ? NULL : n->next;
    }
  }
  if (bad) {
    free(g.v);
    return luaL_error(L, "out of memory");
  }
  if (subtree && g.n > 1) qsort(g.v, g.n, sizeof *g.v, by_seq);
  size_t from = want >= 0 && (size_t)want < g.n ? g.n - (size_t)want : 0;
  lua_createtable(L, (int)(g.n - from), 0);
  lua_Integer k = 1;
  for (size_t i = from; i < g.n; i++) {
    const arbor_log_line *l = g.v[i].l;
    lua_createtable(L, 0, 6);
    lua_pushnumber(L, l->time);
    lua_setfield(L, -2, "time");
    lua_pushnumber(L, l->wall);
    lua_setfield(L, -2, "wall");
    lua_pushlstring(L, l->line->s, l->line->len);
    lua_setfield(L, -2, "line");
    lua_pushstring(L, arbor_log_level_name(l->level));
    lua_setfield(L, -2, "level");
    lua_pushinteger(L, (lua_Integer)l->seq);
    lua_setfield(L, -2, "seq");
    arbor_push_dn(L, &g.v[i].pn->n);
    if (l->sub) {
      const arbor_str *s = g.v[i].pn->logs->subs[l->sub - 1].name;
      lua_pushliteral(L, ".");
      lua_pushlstring(L, s->s, s->len);
      lua_concat(L, 3);
    }
    lua_setfield(L, -2, "dn");
    lua_rawseti(L, -2, k++);
  }
  free(g.v);
  return 1;
}

/* core.log_parse(ctx, how): how the node's process output is read into
   levels: nil or false (stdout info, stderr warn), "klog", or a
   function(line) -> level, text. */
static int l_log_parse(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  arbor_engine *e = pn_engine(pn);
  arbor_logs *lg = arbor_engine_logs(pn);
  if (!lg) return luaL_error(L, "out of memory");
  int parse = ARBOR_PARSE_NONE;
  if (lua_isfunction(L, 2)) {
    parse = ARBOR_PARSE_FN;
  } else if (lua_type(L, 2) == LUA_TSTRING &&
             strcmp(lua_tostring(L, 2), "klog") == 0) {
    parse = ARBOR_PARSE_KLOG;
  } else if (!lua_isnoneornil(L, 2) &&
             !(lua_isboolean(L, 2) && !lua_toboolean(L, 2))) {
    return arbor_dn_error(L, pn, "option 'parse' must be \"klog\" or a "
                          "function(line) -> level, text, got %s",
                          lua_type(L, 2) == LUA_TSTRING
                              ? lua_tostring(L, 2) : luaL_typename(L, 2));
  }
  luaL_unref(e->L, LUA_REGISTRYINDEX, lg->parse_ref);
  lg->parse_ref = LUA_NOREF;
  if (parse == ARBOR_PARSE_FN) {
    lua_pushvalue(L, 2);
    lua_xmove(L, e->L, 1);
    lg->parse_ref = luaL_ref(e->L, LUA_REGISTRYINDEX);
  }
  lg->parse = (uint8_t)parse;
  return 0;
}

/* core.log_overflow(ctx, how): what the node's process output does when
   its log file under --log-dir is full: "block" (or nil: its pipes are
   not read, its processes wait) or "drop" (lines dropped and counted). */
static int l_log_overflow(lua_State *L) {
  pnode *pn = arbor_check_ctx(L, 1);
  const char *how = luaL_optstring(L, 2, "block");
  int drop = strcmp(how, "drop") == 0;
  if (!drop && strcmp(how, "block") != 0)
    return arbor_dn_error(L, pn, "option 'log_overflow' must be \"block\" or "
                          "\"drop\", got %s", how);
  arbor_logs *lg = arbor_engine_logs(pn);
  if (!lg) return luaL_error(L, "out of memory");
  lg->drop = (uint8_t)drop;
  return 0;
}

/* Reports a log file's error (once) and its end: on stderr, and as a line
   of the root's log. */
static void report(arbor_engine *e, int level, const char *text) {
  fprintf(stderr, "arbor: %s\n", text);
  arbor_str *line = arbor_str_new(text, strlen(text));
  if (!line) return;
  arbor_engine_log_at(e, (pnode *)e->tree.root, 0, level, line);
  arbor_str_unref(line);
}

/* core.log_files(e, {dir=, max_bytes=, keep=, interval=, max_pending=,
   mode=}) -> true | nil, "ENAME: message", "ENAME": writes the tree's log
   lines under dir (engine/logfile.h); an insecure directory (a root arbor)
   is "DIR is insecure: why". */
static int l_log_files(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  arbor_logfile_opts o = {0};
  lua_getfield(L, 2, "dir");
  o.dir = luaL_checkstring(L, -1);
  lua_getfield(L, 2, "max_bytes");
  o.max_bytes = (uint64_t)luaL_optinteger(L, -1, 10 << 20);
  lua_getfield(L, 2, "keep");
  o.keep = (unsigned)luaL_optinteger(L, -1, 5);
  lua_getfield(L, 2, "interval");
  o.interval = luaL_optnumber(L, -1, 1.0);
  lua_getfield(L, 2, "max_pending");
  o.max_pending = (size_t)luaL_optinteger(L, -1, 8 << 20);
  lua_getfield(L, 2, "mode");
  o.mode = (unsigned)luaL_optinteger(L, -1, 0640) & 0777;
  o.report = report;
  if (!arbor_engine_loop(e))
    return luaL_error(L, "log files need the real clock (arbor.run)");
  char why[512];
  int r = arbor_logfiles_open(e, &o, why, sizeof why);
  if (r < 0 && why[0]) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s is insecure: %s", o.dir, why);
    lua_pushliteral(L, "EPERM");
    return 3;
  }
  if (r < 0) return arbor_push_errno(L, r, "log directory %s", o.dir);
  lua_pushboolean(L, 1);
  return 1;
}

/* core.log_sync(e): writes every line logged so far, waiting for the
   writer (a reexec). */
static int l_log_sync(lua_State *L) {
  arbor_logfiles_sync(arbor_check_engine(L, 1));
  return 0;
}

/* core.log_flush(e): hands the buffered lines to the writer now. */
static int l_log_flush(lua_State *L) {
  arbor_logfiles_flush(arbor_check_engine(L, 1));
  return 0;
}

/* core.log_close(e): writes what is buffered and stops writing files. */
static int l_log_close(lua_State *L) {
  arbor_logfiles_close(arbor_check_engine(L, 1));
  return 0;
}

/* core.log_dropped(e [, n]) -> the log lines dropped so far; n adds to
   the count (a slow `logs -f` follower's lines, control/server.lua). */
static int l_log_dropped(lua_State *L) {
  arbor_engine *e = arbor_check_engine(L, 1);
  e->log_lines_dropped += (uint64_t)luaL_optinteger(L, 2, 0);
  lua_pushinteger(L, (lua_Integer)e->log_lines_dropped);
  return 1;
}

/* core.wall0(e) -> wall-clock seconds at engine time 0 (0 under the
   virtual clock). */
static int l_wall0(lua_State *L) {
  lua_pushnumber(L, arbor_check_engine(L, 1)->wall0);
  return 1;
}

static const luaL_Reg funcs[] = {
    {"wall0", l_wall0},
    {"log_parse", l_log_parse},   {"log_files", l_log_files},
    {"log_overflow", l_log_overflow},
    {"log_flush", l_log_flush},   {"log_close", l_log_close},
    {"log_sync", l_log_sync},
    {"log_dropped", l_log_dropped}, {NULL, NULL},
};

/* [-0, +0, m] adds the functions to the module table on top, and e:logs. */
void arbor_open_log(lua_State *L) {
  luaL_setfuncs(L, funcs, 0);
  static const luaL_Reg methods[] = {{"logs", l_logs}, {NULL, NULL}};
  arbor_engine_methods(L, methods);
}

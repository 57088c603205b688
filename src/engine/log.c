/* log.c: a node's log: its last lines in a ring (ctx:log and its levels,
 * its sub-loggers', its processes' output, the engine's notes), each with
 * its level and time; the engine's log sink, called under the time budget
 * of user code; and its file under --log-dir (logfile.c).
 */
#include "engine/internal.h"
#include "engine/clock.h"
#include "engine/logfile.h"
#include "engine/watchdog.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

static const char *const level_names[] = {"debug", "info", "warn", "error"};

const char *arbor_log_level_name(int level) {
  return level_names[level & 3];
}

int arbor_log_level(const char *name, size_t len) {
  for (int i = 0; i < 4; i++)
    if (strlen(level_names[i]) == len && memcmp(name, level_names[i], len) == 0)
      return i;
  return -1;
}

arbor_logs *arbor_engine_logs(pnode *pn) {
  if (!pn->logs) {
    pn->logs = calloc(1, sizeof *pn->logs);
    if (!pn->logs) return NULL;
    pn->logs->cap = ARBOR_LOG_LINES;
    pn->logs->parse_ref = LUA_NOREF;
  }
  return pn->logs;
}

int arbor_engine_log_lines(pnode *pn, unsigned cap) {
  arbor_logs *lg = arbor_engine_logs(pn);
  if (!lg) return -1;
  if (cap == lg->cap) return 0;
  if (!lg->ring) {
    lg->cap = cap;
    return 0;
  }
  arbor_log_line *ring = cap ? calloc(cap, sizeof *ring) : NULL;
  if (cap && !ring) return -1;
  unsigned keep = lg->len < cap ? lg->len : cap;
  for (unsigned i = 0; i < lg->len; i++) {
    arbor_log_line *l = &lg->ring[(lg->start + i) % lg->cap];
    if (i < lg->len - keep)
      arbor_str_unref(l->line);
    else
      ring[i - (lg->len - keep)] = *l;
  }
  free(lg->ring);
  lg->ring = ring;
  lg->cap = cap;
  lg->start = 0;
  lg->len = keep;
  return 0;
}

int arbor_engine_log_reserved(const pnode *pn, const char *name, size_t len) {
  const arbor_logs *lg = pn->logs;
  if (!lg) return 0;
  for (unsigned i = 0; i < lg->nsubs; i++) {
    const arbor_str *s = lg->subs[i].name;
    /* the first component of a sub-logger's name is the reserved one */
    if (s->len >= len && memcmp(s->s, name, len) == 0 &&
        (s->len == len || s->s[len] == '.'))
      return 1;
  }
  return 0;
}

int arbor_engine_log_sub(pnode *pn, const char *name, size_t len) {
  arbor_logs *lg = arbor_engine_logs(pn);
  if (!lg) return -1;
  for (unsigned i = 0; i < lg->nsubs; i++)
    if (lg->subs[i].name->len == len &&
        memcmp(lg->subs[i].name->s, name, len) == 0)
      return (int)i + 1;
  const char *dot = memchr(name, '.', len);
  size_t first = dot ? (size_t)(dot - name) : len;
  if (arbor_tree_child(&pn->n, name, first)) return 0;
  if (lg->nsubs == UINT16_MAX) return -1;
  arbor_log_sub *subs = realloc(lg->subs, (lg->nsubs + 1) * sizeof *subs);
  if (!subs) return -1;
  lg->subs = subs;
  arbor_str *s = arbor_str_new(name, len);
  if (!s) return -1;
  subs[lg->nsubs].name = s;
  subs[lg->nsubs].file = NULL;
  return (int)++lg->nsubs;
}

void arbor_engine_log_free(arbor_engine *e, pnode *pn) {
  arbor_logs *lg = pn->logs;
  if (!lg) return;
  for (unsigned i = 0; lg->ring && i < lg->len; i++)
    arbor_str_unref(lg->ring[(lg->start + i) % lg->cap].line);
  for (unsigned i = 0; i < lg->nsubs; i++) {
    arbor_str_unref(lg->subs[i].name);
    if (e->logfiles && lg->subs[i].file)
      arbor_logfile_release(e->logfiles, lg->subs[i].file);
  }
  if (e->logfiles && lg->file) arbor_logfile_release(e->logfiles, lg->file);
  if (e->L) luaL_unref(e->L, LUA_REGISTRYINDEX, lg->parse_ref);
  free(lg->subs);
  free(lg->ring);
  free(lg);
  pn->logs = NULL;
}

/* The file of pn's sub-logger sub (0: pn's own), made at its first line. */
static arbor_logfile *file_of(arbor_engine *e, pnode *pn, arbor_logs *lg,
                              unsigned sub) {
  arbor_logfile **slot = sub ? &lg->subs[sub - 1].file : &lg->file;
  if (*slot) return *slot;
  char small[512], *buf = small;
  const arbor_str *s = sub ? lg->subs[sub - 1].name : NULL;
  size_t dn = arbor_node_dn(&pn->n, NULL, 0);
  size_t len = dn + (s ? 1 + s->len : 0);
  if (len >= sizeof small && !(buf = malloc(len + 1))) return NULL;
  arbor_node_dn(&pn->n, buf, dn + 1);
  if (s) {
    buf[dn] = '.';
    memcpy(buf + dn + 1, s->s, s->len);
  }
  *slot = arbor_logfile_new(e->logfiles, buf, len);
  if (buf != small) free(buf);
  return *slot;
}

void arbor_engine_log_at(arbor_engine *e, pnode *pn, unsigned sub, int level,
                         arbor_str *line) {
  arbor_logs *lg = arbor_engine_logs(pn);
  if (!lg) return;
  if (sub > lg->nsubs) sub = 0;
  double now = arbor__step_time(e), wall = arbor__wall(e);
  if (lg->cap) {
    if (!lg->ring) {
      lg->ring = calloc(lg->cap, sizeof *lg->ring);
      if (!lg->ring) return;
    }
    unsigned idx = (lg->start + lg->len) % lg->cap;
    if (lg->len == lg->cap) {
      arbor_str_unref(lg->ring[idx].line);
      lg->start = (lg->start + 1) % lg->cap;
    } else {
      lg->len++;
    }
    arbor_log_line *l = &lg->ring[idx];
    l->line = arbor_str_ref(line);
    l->time = now;
    l->wall = wall;
    l->seq = ++e->log_seq;
    l->sub = (uint16_t)sub;
    l->level = (uint8_t)level;
  } else {
    e->log_seq++;
  }
  if (e->logfiles) {
    arbor_logfile *f = file_of(e, pn, lg, sub);
    if (f) arbor_logfile_append(e, f, wall, level, line->s, line->len);
  }
  if (e->log_ref != LUA_NOREF) {
    lua_State *L = e->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, e->log_ref);
    arbor__event_table_dn(e, L, pn);
    if (sub) {
      lua_pushliteral(L, ".");
      lua_pushlstring(L, lg->subs[sub - 1].name->s, lg->subs[sub - 1].name->len);
      lua_concat(L, 3);
    }
    lua_pushlstring(L, line->s, line->len);
    lua_pushnumber(L, now);
    lua_pushstring(L, level_names[level & 3]);
    lua_pushnumber(L, wall);
    arbor__call_budget(e, L, 5); /* user code: bounded like a policy */
    lua_pop(L, 1);
  }
}

void arbor_engine_log(arbor_engine *e, pnode *pn, arbor_str *line) {
  arbor_engine_log_at(e, pn, 0, ARBOR_LOG_INFO, line);
}

int arbor_engine_log_now(arbor_engine *e, pnode *pn, arbor_str *line) {
  if (e->zombie) return 0;
  arbor__step_begin(e);
  arbor_engine_log(e, pn ? pn : (pnode *)e->tree.root, line);
  return 1;
}

int arbor_engine_log_full(arbor_engine *e, pnode *pn) {
  if (!e || !e->logfiles || e->zombie) return 0;
  const arbor_logs *lg = pn->logs;
  if (!lg || !lg->file || lg->drop) return 0;
  return arbor_logfile_full(lg->file);
}

int arbor_engine_log_wait(arbor_engine *e, arbor_logfile_waiter *w) {
  if (!e || !e->logfiles || e->zombie) return -1;
  arbor_logfile_wait(e->logfiles, w);
  return 0;
}

void arbor_engine_log_unwait(arbor_logfile_waiter *w) {
  arbor_logfile_unwait(w);
}

/* ---- process output ------------------------------------------------------ */

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* klog's header "Lmmdd hh:mm:ss.uuuuuu threadid file:line] msg": its level
   and where "file:line] msg" starts, or -1. */
static int klog(const char *s, size_t n, size_t *text) {
  if (n < 6 || !is_digit(s[1]) || !is_digit(s[4]) || s[5] != ' ') return -1;
  int level = s[0] == 'I'   ? ARBOR_LOG_INFO
              : s[0] == 'W' ? ARBOR_LOG_WARN
              : s[0] == 'E' || s[0] == 'F' ? ARBOR_LOG_ERROR
                                           : -1;
  if (level < 0) return -1;
  size_t i = 6;
  while (i < n && s[i] != ' ') i++; /* the time */
  while (i < n && s[i] == ' ') i++;
  while (i < n && is_digit(s[i])) i++; /* the thread id */
  while (i < n && s[i] == ' ') i++;
  *text = i;
  return level;
}

/* Calls pn's parser on the line: its level and text on L's top (2 values;
   the text nil to keep the line). -1 when it failed (logged once? no: the
   line is kept at its stream's level). [-0, +0] */
static int parse_fn(arbor_engine *e, arbor_logs *lg, const char *s, size_t n,
                    arbor_str **text) {
  lua_State *L = e->L;
  int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, lg->parse_ref);
  lua_pushlstring(L, s, n);
  arbor_watch saved;
  arbor_watchdog_push(&saved, L, e->budget,
                      "time budget exceeded: ran %d ms (limit %d ms)");
  int st = lua_pcall(L, 1, 2, 0);
  arbor_watchdog_pop(&saved, L);
  int level = -1;
  if (st == LUA_OK) {
    size_t ln;
    const char *lv = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &ln)
                                                   : NULL;
    if (lv) level = arbor_log_level(lv, ln);
    if (level >= 0 && lua_type(L, -1) == LUA_TSTRING) {
      size_t tl;
      const char *t = lua_tolstring(L, -1, &tl);
      *text = arbor_str_new(t, tl);
    }
  }
  lua_settop(L, top);
  return level;
}

int arbor_engine_log_output(arbor_engine *e, pnode *pn, int stream,
                            const char *s, size_t n) {
  if (!e || e->zombie) return 0;
  arbor__step_begin(e);
  if (!pn) pn = (pnode *)e->tree.root;
  int level = stream ? ARBOR_LOG_WARN : ARBOR_LOG_INFO;
  arbor_logs *lg = pn->logs;
  arbor_str *parsed = NULL;
  if (lg && lg->parse == ARBOR_PARSE_KLOG) {
    size_t at;
    int l = klog(s, n, &at);
    if (l >= 0) {
      level = l;
      s += at;
      n -= at;
    }
  } else if (lg && lg->parse == ARBOR_PARSE_FN && e->L) {
    int l = parse_fn(e, lg, s, n, &parsed);
    if (l >= 0) level = l;
    if (parsed) {
      s = parsed->s;
      n = parsed->len;
    }
  }
  arbor_str *line =
      arbor_str_fmt("%s: %.*s", stream ? "stderr" : "stdout", (int)n, s);
  arbor_str_unref(parsed);
  if (!line) return 0;
  arbor_engine_log_at(e, pn, 0, level, line);
  arbor_str_unref(line);
  return 1;
}

/* ready.c: the ready queue and the incarnations' threads.
 *
 * An incarnation is resumed only by the drain (drain.c), in the order it
 * was made ready here: by its start, by a wake (a timer, a process, a
 * message) or by its cancellation. Its coroutine's thread comes from a
 * small pool and goes back to it when the incarnation ends. Nothing here
 * starts, ends or decides anything: the rest of the engine calls down.
 */
#include "engine/internal.h"
#include "engine/clock.h"
#include "engine/ready.h"

#include <lauxlib.h>

#include "engine/watchdog.h"

/* ---- the ready queue ------------------------------------------------ */

void arbor__ready_enqueue(arbor_engine *e, pnode *pn) {
  if (pn->pflags & PN_QUEUED) return;
  pn->pflags |= PN_QUEUED;
  arbor__clock_need_drain(e);
  if (pn->pflags & PN_INLIST) return; /* still linked: wanted again */
  pn->pflags |= PN_INLIST;
  pn->ready_next = NULL;
  if (e->ready_tail)
    e->ready_tail->ready_next = pn;
  else
    e->ready_head = pn;
  e->ready_tail = pn;
  e->ready_len++;
}

void arbor__ready_unlink(arbor_engine *e, pnode *pn) {
  if (!(pn->pflags & PN_INLIST)) return;
  pnode **p = &e->ready_head, *prev = NULL;
  while (*p && *p != pn) {
    prev = *p;
    p = &(*p)->ready_next;
  }
  if (*p) {
    *p = pn->ready_next;
    if (e->ready_tail == pn) e->ready_tail = prev;
    e->ready_len--;
  }
  pn->ready_next = NULL;
  pn->pflags &= (uint16_t)~(PN_INLIST | PN_QUEUED);
}

/* ---- waiting -------------------------------------------------------- */

void arbor_engine_park(arbor_engine *e, pnode *pn, int wait, double seconds) {
  pn->wait = (uint8_t)wait;
  pn->wait_seq++;
  if (wait == WAIT_SLEEP)
    arbor__clock_arm(e, &pn->wake, TIMER_WAKE, arbor__step_time(e) + seconds);
}

int arbor_engine_unpark(arbor_engine *e, pnode *pn, uint32_t seq, lua_State *L,
                        int nvals) {
  if (!arbor_node_running(&pn->n) || pn->wait != WAIT_PARK ||
      pn->wait_seq != seq || pn->resume != RESUME_VALUES)
    return 0;
  lua_xmove(L, pn->co, nvals);
  pn->nargs = (uint8_t)nvals;
  pn->wait = WAIT_NONE;
  arbor__ready_enqueue(e, pn);
  return 1;
}

int arbor_engine_wake(arbor_engine *e, pnode *pn, uint32_t seq) {
  if (!arbor_node_running(&pn->n) || pn->wait == WAIT_NONE ||
      pn->wait_seq != seq)
    return 0;
  arbor_timers_disarm(&e->timers, &pn->wake);
  pn->wait = WAIT_NONE;
  arbor__ready_enqueue(e, pn);
  return 1;
}

int arbor_engine_fail(arbor_engine *e, pnode *pn) {
  lua_State *L = e->L;
  if (!arbor_node_running(&pn->n)) {
    lua_pop(L, 1);
    return -1;
  }
  luaL_unref(L, LUA_REGISTRYINDEX, pn->fail_ref);
  pn->fail_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  pn->resume = RESUME_FAIL;
  arbor_timers_disarm(&e->timers, &pn->wake);
  pn->wait = WAIT_NONE;
  arbor__ready_enqueue(e, pn);
  return 0;
}

/* ---- threads -------------------------------------------------------- */

lua_State *arbor__ready_new_thread(arbor_engine *e, pnode *pn) {
  lua_State *co = lua_newthread(e->L);
  pn->co_ref = luaL_ref(e->L, LUA_REGISTRYINDEX);
  return pn->co = co;
}

/* Resets co, which runs its pending <close> variables: user code, on the
   engine's thread, so under the runnable's own limit. One that had to be
   stopped is logged on pn. */
static void reset_thread(arbor_engine *e, pnode *pn, lua_State *co) {
  arbor_watch saved;
  arbor_watchdog_push(&saved, co, e->runaway,
                      "a <close> variable was stopped: ran %d ms "
                      "(limit %d ms)");
  lua_resetthread(co); /* leaves the last error (the hook's) on the stack */
  if (arbor_watchdog_pop(&saved, co) && lua_type(co, -1) == LUA_TSTRING) {
    size_t len;
    const char *msg = lua_tolstring(co, -1, &len);
    arbor_str *line = arbor_str_new(msg, len);
    if (line) arbor_engine_log(e, pn, line);
    arbor_str_unref(line);
  }
}

/* Keeps a finished coroutine's thread for a later incarnation (up to
   ARBOR_THREAD_POOL), which spares the allocator and the GC, or lets Lua
   collect it. A thread that returned is as good as new once emptied; one
   that is suspended (a forced close) or died of an error is reset first,
   which runs its pending <close> variables. A thread that may have hooks
   disabled (Lua 5.4 leaves them off in a coroutine killed by an error
   raised in a hook) or that has a hook of its own is not reused: the next
   incarnation could tell, and the watchdog could not stop it. */
static void release_thread(arbor_engine *e, pnode *pn, lua_State *co,
                           int ref, int poolable) {
  if (lua_status(co) != LUA_OK) /* suspended, or dead of an error */
    reset_thread(e, pn, co);
  lua_settop(co, 0);
  if (poolable && !lua_gethook(co) && e->npool < ARBOR_THREAD_POOL &&
      !e->closing) {
    e->pool[e->npool].co = co;
    e->pool[e->npool].ref = ref;
    e->npool++;
  } else {
    luaL_unref(e->L, LUA_REGISTRYINDEX, ref);
  }
}

void arbor__ready_close_coroutine(arbor_engine *e, pnode *pn) {
  if (!pn->co) return;
  release_thread(e, pn, pn->co, pn->co_ref, !(pn->pflags & PN_NOPOOL));
  pn->pflags &= (uint16_t)~PN_NOPOOL;
  pn->co = NULL;
  pn->co_ref = LUA_NOREF;
}

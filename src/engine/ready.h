/* ready.h: the ready queue and the incarnations' threads (ready.c). What
 * runs at every restart is inline. */
#ifndef ARBOR_READY_H
#define ARBOR_READY_H

#include "engine/engine.h"

void arbor__ready_enqueue(arbor_engine *e, pnode *pn);
/* Takes pn out of the ready queue: lazily, the drain skips it. */
static inline void arbor__ready_dequeue(pnode *pn) {
  pn->pflags &= (uint16_t)~PN_QUEUED;
}
/* The next incarnation to resume, or NULL. Inline, with the thread below:
   they run at every restart. */
static inline pnode *arbor__ready_next(arbor_engine *e) {
  while (e->ready_head) {
    pnode *pn = e->ready_head;
    e->ready_head = pn->ready_next;
    if (!e->ready_head) e->ready_tail = NULL;
    e->ready_len--;
    pn->ready_next = NULL;
    int wanted = (pn->pflags & PN_QUEUED) != 0;
    pn->pflags &= (uint16_t)~(PN_QUEUED | PN_INLIST);
    if (wanted) return pn;
  }
  return NULL;
}
/* Takes pn out of the ready queue for good (it is discarded): O(queue). */
void arbor__ready_unlink(arbor_engine *e, pnode *pn);
lua_State *arbor__ready_new_thread(arbor_engine *e, pnode *pn);
/* A thread for pn's new incarnation (pn->co, pn->co_ref), from the pool. */
static inline lua_State *arbor__ready_thread(arbor_engine *e, pnode *pn) {
  if (e->npool == 0) return arbor__ready_new_thread(e, pn);
  e->npool--;
  pn->co_ref = e->pool[e->npool].ref;
  return pn->co = e->pool[e->npool].co;
}
/* Ends pn's coroutine: its pending <close> variables run now, before the
   node's defers, its policy and its next incarnation. */
void arbor__ready_close_coroutine(arbor_engine *e, pnode *pn);

#endif

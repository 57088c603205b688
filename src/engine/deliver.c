/* deliver.c: on_event subscribers (T14): each event once, in order, as a
 * table, to each subscriber under the time budget of user code; events
 * that left the outbox before they could be delivered are counted and
 * delivered as one gap marker. */
#include "engine/internal.h"
#include "engine/clock.h"

#include <lauxlib.h>
#include <stdlib.h>

/* Subscribers live in an array in subscription order; a removed one is
   marked (LUA_NOREF) and swept out when no delivery walks the array, so a
   delivery walks only the subscribers there are, however many came and
   went before. */

uint64_t arbor__deliver_subscribe(arbor_engine *e, int ref) {
  if (!e->outbox.ev &&
      arbor_ring_init(&e->outbox, e->outbox_cap, e->ring.max_bytes) < 0)
    return 0;
  if (e->nsubs == e->subs_cap) {
    size_t cap = e->subs_cap ? 2 * e->subs_cap : 4;
    arbor_sub *subs = realloc(e->subs, cap * sizeof *subs);
    if (!subs) return 0;
    e->subs = subs;
    e->subs_cap = cap;
  }
  if (e->nsubs == 0) { /* nothing is owed: the outbox starts at the next */
    arbor_ring_clear(&e->outbox);
    e->outbox.next_seq = e->ring.next_seq;
    e->delivered = e->ring.next_seq - 1;
  }
  e->subs[e->nsubs++] = (arbor_sub){ref, ++e->sub_ids, e->ring.next_seq};
  return e->sub_ids;
}

/* Drops the removed subscribers from the array, keeping the order; with
   none left, the outbox lets its events go. */
static void sweep(arbor_engine *e) {
  size_t k = 0;
  for (size_t i = 0; i < e->nsubs; i++)
    if (e->subs[i].ref != LUA_NOREF) e->subs[k++] = e->subs[i];
  e->nsubs = k;
  if (k == 0) arbor_ring_clear(&e->outbox);
}

static void remove_sub(arbor_engine *e, arbor_sub *sub) {
  luaL_unref(e->L, LUA_REGISTRYINDEX, sub->ref);
  sub->ref = LUA_NOREF;
  if (!e->delivering) sweep(e);
}

void arbor__deliver_unsubscribe(arbor_engine *e, uint64_t id) {
  size_t lo = 0, hi = e->nsubs; /* ids increase along the array */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (e->subs[mid].id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < e->nsubs && e->subs[lo].id == id && e->subs[lo].ref != LUA_NOREF)
    remove_sub(e, &e->subs[lo]);
}

void arbor__deliver_free(arbor_engine *e) {
  for (size_t i = 0; i < e->nsubs; i++)
    luaL_unref(e->L, LUA_REGISTRYINDEX, e->subs[i].ref);
  free(e->subs);
  e->subs = NULL;
  e->nsubs = e->subs_cap = 0;
}

/* Calls subscriber i with the table on top of e->L [-1, +0, -]; one that
   raises (or runs past its budget) is removed and the removal logged. */
static void call_sub(arbor_engine *e, size_t i) {
  lua_State *L = e->L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, e->subs[i].ref);
  lua_insert(L, -2);
  if (arbor__call_budget(e, L, 1) == LUA_OK) {
    lua_pop(L, 1);
    return;
  }
  arbor_str *msg = arbor__failure_message(e, L, NULL);
  arbor_str *why = arbor_str_fmt("on_event subscriber removed: %s",
                                 msg ? msg->s : "(error)");
  arbor_str_unref(msg);
  lua_pop(L, 1);
  remove_sub(e, &e->subs[i]); /* the call may have moved the array */
  arbor_engine_log(e, (pnode *)e->tree.root, why);
  arbor_str_unref(why);
}

/* Tells each subscriber owed some of the events first..last that they left
   the outbox before their turn. */
static void deliver_gap(arbor_engine *e, uint64_t first, uint64_t last) {
  e->events_missed += last - first + 1;
  for (size_t i = 0; i < e->nsubs; i++) {
    if (e->subs[i].ref == LUA_NOREF || e->subs[i].from > last) continue;
    uint64_t from = e->subs[i].from > first ? e->subs[i].from : first;
    arbor_push_gap_table(e->L, from, last, arbor__step_time(e));
    call_sub(e, i);
  }
}

/* Delivers the events emitted since the last delivery, in order, each to the
   subscribers owed it; events the subscribers emit meanwhile are delivered
   in this same pass. Those that left the outbox (more than it holds in one
   pass) become one gap marker per run of them. */
void arbor__deliver_events(arbor_engine *e) {
  if (!e->nsubs || e->delivering || e->delivered + 1 >= e->ring.next_seq)
    return;
  e->delivering = 1;
  arbor_engine *prev = arbor__current;
  arbor__current = e;
  while (e->delivered + 1 < e->ring.next_seq) {
    uint64_t s = e->delivered + 1, first = arbor_ring_first(&e->outbox);
    if (s < first) {
      e->delivered = first - 1;
      deliver_gap(e, s, first - 1);
      continue;
    }
    /* a copy: the calls may push the event out of the outbox */
    arbor_event ev = *arbor_ring_get(&e->outbox, s);
    arbor_node_ref(ev.node);
    arbor_str_ref(ev.reason);
    e->delivered = s;
    for (size_t i = 0; i < e->nsubs; i++) {
      if (e->subs[i].ref == LUA_NOREF || e->subs[i].from > s) continue;
      arbor_push_event_table(e, e->L, &ev);
      call_sub(e, i);
    }
    arbor_node_unref(ev.node);
    arbor_str_unref(ev.reason);
  }
  arbor_ring_clear(&e->outbox);
  e->delivering = 0;
  sweep(e);
  arbor__current = prev;
}


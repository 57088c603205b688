/* coord.c: the lifecycle coordinator of one parent, pure. See coord.h. */
#include "core/coord.h"

#include <stdlib.h>
#include <string.h>

/* Marks of a child, besides its phase. */
enum {
  M_BLOCKED = 1u << 0, /* waiting behind its closed gate */
  M_RETIRED = 1u << 1, /* never starts again in this parent incarnation */
  M_GONE = 1u << 2,    /* discarded */
};

typedef struct {
  void *child;
  uint8_t gate, phase, marks;
} entry;

/* Why the coordinator winds down (move reasons). */
enum { WIND_STOPPING = 1, WIND_MAIN_FINISHED, WIND_PRESTART_GAVE_UP };

/* States only move forward, so an incarnation makes at most this many
   moves: they wait here until a step hands them out. */
#define MAX_MOVES (ARBOR_CO_STATES - 1)

struct arbor_coord {
  arbor_gate_fsm fsm;
  entry *e;
  uint32_t n, cap;
  uint8_t dirty;     /* reported to since the last step */
  uint8_t wind_scan; /* the retirements of winding down are to be answered */
  uint8_t cause;     /* WIND_* */
  uint8_t nmoves, moves_out;
  uint8_t move_from[MAX_MOVES], move_to[MAX_MOVES];
};

arbor_coord *arbor_coord_new(int started) {
  arbor_coord *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  arbor_gate_init(&c->fsm);
  c->fsm.started = started != 0;
  return c;
}

void arbor_coord_free(arbor_coord *c) {
  if (!c) return;
  free(c->e);
  free(c);
}

/* ---- the machine ---------------------------------------------------- */

/* Steps the machine until it stops, keeping each move for the next step's
   answer. */
static void advance(arbor_coord *c) {
  arbor_gate_fsm *f = &c->fsm;
  for (;;) {
    if (!f->winding && arbor_gate_wind_wanted(f)) {
      f->winding = 1;
      c->wind_scan = 1;
      c->cause = f->stopping                      ? WIND_STOPPING
                 : f->state <= ARBOR_CO_PRESTART ? WIND_PRESTART_GAVE_UP
                                                  : WIND_MAIN_FINISHED;
    }
    arbor_gate_state from = (arbor_gate_state)f->state;
    arbor_gate_state to = arbor_gate_next(f);
    if (to == from || c->nmoves == MAX_MOVES) return;
    f->state = (uint8_t)to;
    c->move_from[c->nmoves] = (uint8_t)from;
    c->move_to[c->nmoves] = (uint8_t)to;
    c->nmoves++;
  }
}

static const char *move_reason(const arbor_coord *c, arbor_gate_state to) {
  switch (to) {
  case ARBOR_CO_PRESTART: return "the parent's first step ended";
  case ARBOR_CO_MAIN: return "prestart jobs done, prestart sidecars healthy (L1)";
  case ARBOR_CO_POSTSTART: return "every main child healthy or exited (L2)";
  case ARBOR_CO_RUNNING: return "poststart jobs finished";
  case ARBOR_CO_POSTSTOP:
    if (c->cause == WIND_PRESTART_GAVE_UP)
      return "a prestart child gave up: main will not start (L8)";
    if (c->cause == WIND_MAIN_FINISHED)
      return "every main child finished; the others exited (L4)";
    return "the parent is stopping; the others exited (L3)";
  default: return "";
  }
}

/* ---- children ------------------------------------------------------- */

static void set_phase(arbor_coord *c, entry *en, arbor_phase to) {
  if (en->phase == to) return;
  arbor_gate_move(&c->fsm, (arbor_gate)en->gate, (arbor_phase)en->phase, to);
  en->phase = (uint8_t)to;
  c->dirty = 1;
}

int arbor_coord_may_add(arbor_coord *c, arbor_gate g) {
  advance(c);
  if (c->nmoves > c->moves_out) c->dirty = 1;
  return !c->fsm.started ||
         arbor_gate_can_open((arbor_gate_state)c->fsm.state, g);
}

int arbor_coord_add(arbor_coord *c, void *child, arbor_gate g, arbor_phase p,
                    uint32_t *slot) {
  if (c->n == c->cap) {
    uint32_t cap = c->cap ? 2 * c->cap : 8;
    entry *e = realloc(c->e, cap * sizeof *e);
    if (!e) return -1;
    c->e = e;
    c->cap = cap;
  }
  entry *en = &c->e[c->n];
  *slot = c->n++;
  en->child = child;
  en->gate = (uint8_t)g;
  en->phase = (uint8_t)p;
  en->marks = 0;
  arbor_gate_add(&c->fsm, g, p);
  if (c->fsm.started) advance(c);
  if (c->nmoves > c->moves_out || c->fsm.winding) {
    c->dirty = 1;
    c->wind_scan |= c->fsm.winding;
  }
  if (p != ARBOR_PH_WAITING) return ARBOR_CO_GO; /* counted as it is */
  if (c->fsm.started && !c->fsm.winding &&
      arbor_gate_open((arbor_gate_state)c->fsm.state, g))
    return ARBOR_CO_GO;
  en->marks |= M_BLOCKED;
  return ARBOR_CO_WAIT;
}

/* L5: a finished prestart or poststart job does not run again (done counts,
   even when it fails after signaling it). */
static unsigned finished_job(entry *en) {
  if (en->gate != ARBOR_GATE_PRESTART && en->gate != ARBOR_GATE_POSTSTART)
    return 0;
  en->marks |= M_RETIRED;
  return ARBOR_CO_FINISHED;
}

unsigned arbor_coord_child(arbor_coord *c, uint32_t slot,
                           arbor_co_child_event ev) {
  entry *en = &c->e[slot];
  if (en->marks & M_GONE) return 0;
  switch (ev) {
  case ARBOR_CO_STARTED:
    en->marks &= (uint8_t)~M_BLOCKED;
    set_phase(c, en, ARBOR_PH_STARTING);
    return 0;
  case ARBOR_CO_READY:
    set_phase(c, en, ARBOR_PH_READY);
    return 0;
  case ARBOR_CO_SIGNALED_DONE:
    set_phase(c, en, ARBOR_PH_SIGNALED);
    return finished_job(en);
  case ARBOR_CO_WAITING:
    en->marks |= M_BLOCKED;
    set_phase(c, en, ARBOR_PH_WAITING);
    return 0;
  case ARBOR_CO_EXIT_RETRY: /* nothing restarts under a stopping parent */
    set_phase(c, en,
              c->fsm.stopping || (en->marks & M_RETIRED) ? ARBOR_PH_FAILED
                                                          : ARBOR_PH_RETRYING);
    return 0;
  case ARBOR_CO_EXIT_DONE:
    set_phase(c, en, ARBOR_PH_DONE);
    return finished_job(en);
  case ARBOR_CO_EXIT_FAILED:
    en->marks &= (uint8_t)~M_BLOCKED;
    set_phase(c, en, ARBOR_PH_FAILED);
    return 0;
  case ARBOR_CO_DISCARDED:
    arbor_gate_remove(&c->fsm, (arbor_gate)en->gate, (arbor_phase)en->phase);
    en->marks = M_GONE;
    en->child = NULL;
    c->dirty = 1;
    return 0;
  }
  return 0;
}

void arbor_coord_parent(arbor_coord *c, arbor_co_parent_event ev) {
  arbor_gate_fsm *f = &c->fsm;
  switch (ev) {
  case ARBOR_CO_PARENT_STEPPED:
    if (f->started) return;
    f->started = 1;
    break;
  case ARBOR_CO_PARENT_STOPPING:
    if (f->stopping) return;
    f->stopping = 1;
    /* the children that exited will not be restarted (T8) */
    for (uint32_t i = 0; i < c->n; i++)
      if (!(c->e[i].marks & M_GONE) && c->e[i].phase == ARBOR_PH_RETRYING)
        set_phase(c, &c->e[i], ARBOR_PH_FAILED);
    break;
  }
  c->dirty = 1;
}

int arbor_coord_may_start(arbor_coord *c, uint32_t slot) {
  entry *en = &c->e[slot];
  if (!c->fsm.started ||
      !arbor_gate_open((arbor_gate_state)c->fsm.state, (arbor_gate)en->gate))
    return 0;
  en->marks &= (uint8_t)~M_BLOCKED;
  return 1;
}

int arbor_coord_exempt(const arbor_coord *c, uint32_t slot) {
  const entry *en = &c->e[slot];
  if (en->gate != ARBOR_GATE_POSTSTOP || (en->marks & M_GONE)) return 0;
  switch (en->phase) {
  case ARBOR_PH_STARTING:
  case ARBOR_PH_READY:
  case ARBOR_PH_SIGNALED:
    return 1;
  case ARBOR_PH_WAITING:
    return (en->marks & M_BLOCKED) != 0;
  default:
    return 0;
  }
}

/* ---- answers -------------------------------------------------------- */

static int over(const entry *en) {
  return (en->marks & (M_GONE | M_RETIRED)) || en->phase == ARBOR_PH_DONE ||
         en->phase == ARBOR_PH_FAILED;
}

static int answer(arbor_coord *c, arbor_co_action *out, int max, int poststop) {
  arbor_gate_fsm *f = &c->fsm;
  c->dirty = 0;
  advance(c);
  int k = 0;
  for (; k < max && c->moves_out < c->nmoves; k++, c->moves_out++) {
    arbor_gate_state to = (arbor_gate_state)c->move_to[c->moves_out];
    out[k] = (arbor_co_action){ARBOR_CO_MOVED, NULL, c->move_from[c->moves_out],
                               (uint8_t)to, move_reason(c, to)};
  }
  if (k == max) return k;
  arbor_gate_state s = (arbor_gate_state)f->state;
  /* Winding down (L4, L8): sidecars are retired, and children whose gate is
     closed now never start. A stopping parent needs none of this: its
     cancellation reached them all. */
  if (f->winding && !f->stopping && c->wind_scan) {
    for (uint32_t i = 0; i < c->n; i++) {
      entry *en = &c->e[i];
      arbor_gate g = (arbor_gate)en->gate;
      if (over(en) || g == ARBOR_GATE_POSTSTOP ||
          !(arbor_gate_is_sidecar(g) ||
            (en->phase == ARBOR_PH_WAITING && !arbor_gate_open(s, g))))
        continue;
      if (k == max) return k;
      en->marks = (uint8_t)((en->marks | M_RETIRED) & ~M_BLOCKED);
      out[k++] = (arbor_co_action){ARBOR_CO_RETIRE, en->child, 0, 0, NULL};
    }
    c->wind_scan = 0;
  }
  /* The children waiting behind gates open now start, in creation order.
     Under a stopping parent, poststop children start only once no other
     child's subtree runs (the caller says so: poststop). */
  unsigned open = arbor_gate_vector(s);
  if (f->stopping && !poststop) open &= ~(1u << ARBOR_GATE_POSTSTOP);
  int any = 0;
  for (int g = 0; g < ARBOR_GATES; g++)
    if (((open >> g) & 1u) && f->count[g][ARBOR_PH_WAITING] > 0) any = 1;
  if (!any) return k;
  for (uint32_t i = 0; i < c->n; i++) {
    entry *en = &c->e[i];
    if ((en->marks & (M_BLOCKED | M_RETIRED | M_GONE)) != M_BLOCKED ||
        en->phase != ARBOR_PH_WAITING || !((open >> en->gate) & 1u))
      continue;
    if (k == max) return k;
    en->marks &= (uint8_t)~M_BLOCKED;
    out[k++] = (arbor_co_action){f->stopping ? ARBOR_CO_START_BOUNDED
                                             : ARBOR_CO_START,
                                 en->child, 0, 0, NULL};
  }
  return k;
}

int arbor_coord_dirty(const arbor_coord *c) { return c->dirty; }

int arbor_coord_step(arbor_coord *c, arbor_co_action *out, int max) {
  return answer(c, out, max, 0);
}

int arbor_coord_poststop(arbor_coord *c, arbor_co_action *out, int max) {
  return answer(c, out, max, 1);
}

/* ---- views ---------------------------------------------------------- */

arbor_gate_state arbor_coord_state(const arbor_coord *c) {
  return (arbor_gate_state)c->fsm.state;
}

int arbor_coord_gated(const arbor_coord *c) {
  for (int g = 0; g < ARBOR_GATES; g++)
    if (g != ARBOR_GATE_MAIN && c->fsm.total[g] > 0) return 1;
  return 0;
}

int arbor_coord_blocked(const arbor_coord *c, uint32_t slot) {
  const entry *en = &c->e[slot];
  return (en->marks & M_BLOCKED) && en->phase == ARBOR_PH_WAITING;
}

int arbor_coord_retired(const arbor_coord *c, uint32_t slot) {
  return (c->e[slot].marks & M_RETIRED) != 0;
}

uint32_t arbor_coord_poststop_waiting(const arbor_coord *c) {
  return c->fsm.count[ARBOR_GATE_POSTSTOP][ARBOR_PH_WAITING];
}

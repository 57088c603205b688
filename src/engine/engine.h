/* engine.h: the engine. One event loop (libuv, or the harness's virtual
 * clock) drives the tree: it resumes runnable coroutines from one drain
 * point, classifies how incarnations end (T5), spreads death (T6), stops
 * subtrees in order (T7, T12), asks the GC and the policies for restarts
 * (T8, P1-P3) and records events (T14).
 */
#ifndef ARBOR_ENGINE_H
#define ARBOR_ENGINE_H

#include <lua.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "core/ring.h"
#include "core/timers.h"
#include "core/str.h"
#include "core/tree.h"

typedef struct arbor_engine arbor_engine;

/* What the next resume of a parked incarnation delivers. */
enum { RESUME_VALUES = 0, RESUME_CANCEL, RESUME_FAIL };

/* What an incarnation is parked on. */
enum { WAIT_NONE = 0, WAIT_SLEEP, WAIT_CANCEL, WAIT_PARK };

/* Timer kinds. */
enum { TIMER_WAKE = 1, TIMER_RESTART, TIMER_DEADLINE, TIMER_BOUND,
       TIMER_READY, TIMER_ALIVE };

/* Per-node processor flags. */
enum {
  PN_RESUMED = 1u << 0,  /* the incarnation has run at least once */
  PN_NOTIFIED = 1u << 1, /* told of its cancellation: blocking calls raise */
  PN_STOPPING = 1u << 2, /* ordered stop in progress below this node */
  PN_QUEUED = 1u << 3,   /* to be resumed: wanted in the ready queue */
  PN_INLIST = 1u << 4,   /* linked in the ready queue (maybe no longer
                            wanted: removal is lazy, O(1)) */
  PN_DEFER = 1u << 5,    /* ctx:defer was called (defer.c) */
  PN_STEPPED = 1u << 6,  /* the incarnation's first step ended */
  PN_RETURNED = 1u << 7, /* the last incarnation returned without done */
  PN_AUTODONE = 1u << 8, /* ending DONE by auto_shutdown (strategy.c) */
  PN_PROCS = 1u << 9,    /* the incarnation started processes (proc/) */
  PN_NOPOOL = 1u << 10,  /* its thread may have hooks disabled (it died of
                            the watchdog's error): not reused */
  PN_LC_QUEUED = 1u << 11, /* its coordinator waits to be answered
                              (lifecycle.c; holds a node reference) */
  PN_LC_BUSY = 1u << 12,   /* its coordinator's answer is being performed */
  PN_PARALLEL = 1u << 13,  /* option stop = "parallel": its children are
                              told to stop all at once (kept across
                              incarnations) */
  PN_REMOVE = 1u << 14,    /* node:remove: discarded once its subtree exited */
  PN_OVERRIDDEN = 1u << 15, /* a runtime swap or policy is in force
                               (l_override.c; kept across incarnations) */
};

/* Per-node strategy flags (pnode.gflags), set when the node is created:
   see strategy.c. */
enum {
  GF_STRATEGY = 3u,          /* mask: GS_* of the node's ctx:group */
  GF_ORDERED = 1u << 2,      /* waits for the previous member's HEALTHY */
  GF_SIGNIFICANT = 1u << 3,  /* its DONE counts for the parent's auto_shutdown */
  GF_AUTO = 3u << 4,         /* mask: GA_* << 4, the node's own auto_shutdown */
  GF_MEMBER = 1u << 6,       /* created by ctx:group */
  GF_FIRST = 1u << 7,        /* the first member of its group */
};
enum { GS_ONE_FOR_ALL = 0, GS_REST_FOR_ONE = 1, GS_ONE_FOR_ONE = 2 };
enum { GA_NEVER = 0, GA_ANY = 1, GA_ALL = 2 };

/* The last restart decision (pnode.decision), for explain. */
enum { DECISION_NONE = 0, DECISION_RESTART, DECISION_STOP, DECISION_ESCALATE };

#define ARBOR_LOG_LINES 64
#define ARBOR_THREAD_POOL 256
#define ARBOR_FAILURES 16
#define ARBOR_TURN_BUCKETS 6

/* Log levels (log.c): a line's severity, "debug" to "error". */
enum { ARBOR_LOG_DEBUG = 0, ARBOR_LOG_INFO, ARBOR_LOG_WARN, ARBOR_LOG_ERROR };

/* How a node's process output is read into levels (log.c). */
enum { ARBOR_PARSE_NONE = 0, ARBOR_PARSE_KLOG, ARBOR_PARSE_FN };

/* One line of a node's in-memory log. */
typedef struct arbor_log_line {
  arbor_str *line;
  double time;     /* engine time */
  double wall;     /* the wall clock when it was logged (CLOCK_REALTIME) */
  uint64_t seq;    /* the engine's line count: orders lines across nodes */
  uint16_t sub;    /* 0: the node's own; else its sub-logger subs[sub - 1] */
  uint8_t level;   /* ARBOR_LOG_* */
} arbor_log_line;

struct arbor_logfile;

/* A sub-logger of a node (ctx:logger): its lines go to <dn>.<name>. */
typedef struct arbor_log_sub {
  arbor_str *name;             /* "name" or "name.inner" */
  struct arbor_logfile *file;  /* under --log-dir, made at its first line */
} arbor_log_sub;

/* A node's log (log.c): the last cap lines (its ring, the log_lines
   option, ARBOR_LOG_LINES by default), its sub-loggers (their names are
   reserved against children's for the node's life), its file under
   --log-dir and how its process output is parsed. */
typedef struct arbor_logs {
  arbor_log_line *ring; /* cap entries, made at the first line */
  unsigned cap, start, len;
  unsigned nsubs;
  arbor_log_sub *subs;
  struct arbor_logfile *file;
  uint8_t parse;        /* ARBOR_PARSE_* */
  uint8_t drop;         /* log_overflow "drop": its process output never
                           waits for its file (lines past the bound are
                           dropped and counted) */
  int parse_ref;        /* the parser function (ARBOR_PARSE_FN) */
} arbor_logs;

struct pnode;

/* A node's failure history, made at its first failure: the times of its
   recent failures (a ring), how many it had, and the table its policies
   keep their own state in (P1 `memory`). Kept across restarts and policy
   swaps (T13), dropped when the node is discarded. */
typedef struct pnode_hist {
  double time[ARBOR_FAILURES];
  uint64_t count;  /* failures recorded so far */
  int memory_ref;  /* LUA_NOREF until a policy reads ev.memory */
  struct arbor_window_list *windows; /* intensity windows, by period */
} pnode_hist;

/* A node's state changes, by from and to state (metrics.c), made at its
   first change that is not its first start or first HEALTHY. */
typedef struct pnode_counts {
  uint32_t tr[5][5];
} pnode_counts;

/* What a node needs while it is being stopped, made at its first stop:
   most nodes never stop, and this keeps them smaller. */
typedef struct pnode_stop {
  arbor_timer deadline;       /* its shutdown deadline */
  struct pnode *owner;
  struct pnode *cursor;       /* child being stopped (PN_STOPPING) */
} pnode_stop;

/* The seconds a node must stay HEALTHY to count as up (its failure streak,
   `consecutive`, then starts again) when its min_uptime is not set:
   supervisord's startsecs. */
#define ARBOR_MIN_UPTIME 1.0

/* Which of a node's timing options were given on ctx:run / ctx:group
   (pnode_timing.given): a default (arbor.exec's) does not override them. */
enum { TM_MIN_UPTIME = 1u << 0, TM_READY = 1u << 1, TM_WATCHDOG = 1u << 2 };

/* A node's timing options (deadline.c), made when one is set: most nodes
   have none. Kept across restarts, dropped when the node is discarded. One
   timer serves both deadlines: ready_timeout before HEALTHY, the watchdog
   after. */
typedef struct pnode_timing {
  arbor_timer timer;    /* TIMER_READY or TIMER_ALIVE */
  struct pnode *owner;
  double last_alive;    /* engine time of the last heartbeat (ctx:alive) */
  double min_uptime;    /* seconds HEALTHY to count as up; < 0: unset */
  double ready_timeout; /* seconds from the start to HEALTHY; 0: none */
  double watchdog;      /* seconds between heartbeats once HEALTHY; 0: none */
  unsigned given;       /* TM_*: set by the node's own options */
} pnode_timing;

/* A node's lifecycle (ARBOR_LC_* of core/gate.h) and its slot in its
   parent's coordinator live in the tree node's owner fields. */
#define pn_lc(pn) ((pn)->n.tag)
#define pn_slot(pn) ((pn)->n.slot)

typedef struct pnode {
  arbor_node n; /* first: the tree allocates pnodes */
  lua_State *co;       /* the incarnation's coroutine, NULL when exited */
  double shutdown;     /* seconds a canceled incarnation has to exit */
  double started;      /* engine time the incarnation started */
  double exited;       /* engine time it exited */
  double exited_wall;  /* and the wall clock then (metrics), or 0 */
  arbor_timer wake;    /* sleep, or a delayed restart */
  struct pnode *ready_next;
  pnode_stop *stop;    /* NULL until first stopped */
  pnode_timing *timing; /* NULL unless a timing option was set */
  struct arbor_coord *coord; /* lifecycle coordinator of its children, made
                                at the first child that needs one */
  arbor_str *error, *trace;
  double healthy_at;   /* engine time the incarnation became HEALTHY, or -1 */
  double healthy_wall; /* and the wall clock then (metrics), or 0 */
  pnode_hist *failures; /* failure history, lazily allocated */
  pnode_counts *counts; /* state changes, lazily allocated (metrics.c) */
  arbor_logs *logs;    /* lazily allocated */
  int co_ref;          /* anchors co */
  int fn_ref;          /* the runnable */
  int policy_ref;      /* LUA_NOREF: the engine's default policy */
  int fail_ref;        /* error value injected by the harness */
  int opts_ref;        /* the options its parent gave (reload compares
                          them), LUA_NOREF: none */
  uint32_t wait_seq;
  uint32_t restarts;   /* restarts performed */
  uint32_t consecutive; /* failures since the last incarnation that was up
                          (HEALTHY for min_uptime) or DONE */
  uint16_t shield;
  uint16_t pflags;     /* PN_* */
  uint8_t wait;        /* WAIT_* */
  uint8_t resume;      /* RESUME_* */
  uint8_t nargs;       /* values pushed on co for the next resume */
  uint8_t done;        /* signaled done */
  uint8_t nfail, fail_start;
  uint8_t gflags;      /* GF_*: group strategy, significant, auto_shutdown */
  uint8_t decision : 2; /* DECISION_* of the last policy decision */
  /* reload (kernel.c, docs/restore.md) */
  uint8_t adopt : 1;     /* its parent's next incarnation may take it over:
                            kept running while the parent is reloading */
  uint8_t reloading : 1; /* its incarnation ends for a new one that adopts
                            its children */
  uint8_t claiming : 1;  /* its new incarnation's first step adopts the
                            children ctx:run names again */
  uint8_t restored : 1;  /* made after a reexec from the state of the arbor
                            before: its first incarnation has ctx.restored */
  uint8_t standin : 1;   /* its next start runs the stand-in (the registry's
                            arbor_standin_key): a job a reexec's state says
                            its parent's coordinator had finished with */
} pnode;

/* The registry key of the stand-in runnable (set by the bindings): it
   signals healthy and done. */
extern const char arbor_standin_key;

/* The outbox's capacity unless the engine's `outbox` option says. */
#define ARBOR_OUTBOX_CAP 65536

/* An on_event subscriber (loop.c). */
typedef struct arbor_sub {
  int ref;       /* the function; LUA_NOREF once removed */
  uint64_t id;   /* what subscribe returned: increasing along the array */
  uint64_t from; /* the first seq it is owed */
} arbor_sub;

struct arbor_engine {
  arbor_tree tree;
  arbor_timers timers;
  arbor_ring ring;
  lua_State *L;          /* the engine's own thread */
  int L_ref;
  int default_policy_ref;
  arbor_sub *subs;       /* on_event subscribers, oldest first */
  size_t nsubs, subs_cap;
  uint64_t sub_ids;      /* the last subscriber id given */
  pnode *dn_pn;          /* the node whose DN string is at dn_ref (a node */
  int dn_ref;            /* has several events in a row: l_engine.c) */
  int log_ref;           /* log sink or LUA_NOREF */
  int overrides_ref;     /* runtime swaps by DN (l_override.c), LUA_NOREF */
  size_t noverrides;     /* entries in it */
  int reload_plan_ref;   /* the reload in progress: DN -> "restart" for
                            changed parents restarted whole (l_reload.c) */
  int node_filter_ref;   /* called for each node created, or LUA_NOREF: a
                            reload's check build, a reexec's restore */
  unsigned reloads;      /* nodes reloading now, or adopting children in
                            their new incarnation's first step (kernel.c) */
  int hangup_ref;        /* called on SIGHUP (a reload), or LUA_NOREF */
  int virtual_clock;
  double vnow;
  double step_now;       /* real clock: time of the current step */
  uint64_t t0;           /* hrtime at creation (real clock) */
  uv_loop_t *loop;       /* NULL under the virtual clock */
  uv_timer_t timer;
  uv_check_t check;
  uv_idle_t idle;
  uv_signal_t sigint, sigterm;
  int signals;
  pnode *ready_head, *ready_tail;
  size_t ready_len;
  struct {
    lua_State *co;
    int ref;
  } pool[ARBOR_THREAD_POOL]; /* reset threads kept for reuse */
  size_t npool;
  uint64_t settle_limit;  /* resumes one settle may take (virtual clock) */
  double runaway;         /* seconds one resume may run; 0: no limit */
  pnode *current;        /* node being resumed */
  int draining;
  int stop_requested;
  int interrupted;       /* second SIGINT */
  int closing;           /* tearing down: no more restarts */
  int zombie;            /* freed; memory kept for referenced nodes */
  int gave_up;
  unsigned forced_in_stop; /* forced closes while the tree stopped */
  arbor_str *first_forced;  /* the DN of the first of them */
  unsigned killed_in_stop;  /* processes SIGKILLed while the tree stopped */
  arbor_str *first_killed;  /* "DN, pid N" of the first of them */
  arbor_str *gave_up_reason;
  /* reasons of fixed text (static strings) */
  arbor_str *r_start, *r_restart, *r_stop, *r_escalate, *r_forced, *r_held,
      *r_retired, *r_blocked;
  arbor_ring outbox;     /* events not yet delivered to subscribers */
  size_t outbox_cap;     /* its capacity, allocated at the first subscribe */
  uint64_t delivered;    /* events up to this seq were delivered or missed */
  uint64_t events_missed; /* events that left the outbox undelivered */
  int delivering;
  uint64_t rng;
  /* counters */
  uint64_t wakeups, resumes, restarts, policy_calls;
  uint64_t policy_faults; /* calls of a faulty policy (the default decided) */
  struct {                /* how long each loop turn took (metrics.c) */
    uint64_t count, bucket[ARBOR_TURN_BUCKETS];
    double sum;
  } turns;
  uint64_t log_seq;       /* log lines logged (log.c) */
  uint64_t log_lines_dropped; /* log lines lost: a log file's writer could
                                 not keep up or failed (logfile.c), a slow
                                 `logs -f` follower */
  struct arbor_logfiles *logfiles; /* --log-dir, or NULL (logfile.c) */
  double wall0;           /* wall-clock seconds at engine time 0 (0 under the
                             virtual clock); times for people are read from
                             the wall clock when they happen (clock.c's
                             arbor__wall), this only estimates older ones */
  double budget;          /* seconds a policy or subscriber may run */
  int policy_ev_ref;      /* the reused policy event table */
  struct pnode *ev_pn;   /* the node it describes, during its call */
  int ev_cached;         /* its `failures` was read (kept until the next call) */
  int policy_depth;       /* policy calls in progress */
  pnode *policy_pn;       /* the node its policy is deciding now */
  const void *policy_ev;  /* and the event table it was given */
  int shared_ref;         /* counted references to functions */
  int ctx_mt_ref;         /* the ctx metatable (engine/ctx.c) */
  const void *ctx_mt;     /* and its address */
  /* lifecycle coordinators to evaluate (lifecycle.c), and counters */
  struct pnode **lc_queue; /* parents whose coordinator (or first step)
                              waits for the drain; each referenced */
  size_t lc_len, lc_cap;
  uint64_t lc_evals, lc_moves, lc_changes;
};

/* The engine of a node: its tree is the engine's. */
#define pn_engine(pn) \
  ((arbor_engine *)((char *)(pn)->n.tree - offsetof(arbor_engine, tree)))

/* Creates an engine; virtual selects the harness's virtual clock. The
   engine's thread is created on L and anchored. Returns NULL on OOM. */
arbor_engine *arbor_engine_new(lua_State *L, int virtual_clock, uint64_t seed,
                               size_t ring_cap);
/* Frees everything (closing coroutines and libuv handles). */
void arbor_engine_free(arbor_engine *e);

double arbor_engine_now(arbor_engine *e);
uint64_t arbor_engine_random(arbor_engine *e);

/* A counted registry reference to the function at idx of L, shared by
   every node that uses the same function; released by unref_fn. */
int arbor_engine_ref_fn(arbor_engine *e, lua_State *L, int idx);
void arbor_engine_unref_fn(arbor_engine *e, int ref);

/* Starts the root with the runnable on top of e->L's stack (popped). */
void arbor_engine_start_root(arbor_engine *e, int fn_ref, int policy_ref,
                             double shutdown);
/* Real clock: runs the loop until the tree is finished. */
void arbor_engine_run(arbor_engine *e);
/* Virtual clock: runs until nothing can progress without time moving.
   Returns -1 when that takes more than settle_limit resumes (a restart loop
   with no delay never settles). */
int arbor_engine_settle(arbor_engine *e);
/* Virtual clock: moves time forward by dt seconds, firing timers in order.
   Returns -1 as settle does. */
int arbor_engine_advance(arbor_engine *e, double dt);
/* 1 when nothing runs, nothing is queued and no timer is armed. */
int arbor_engine_finished(arbor_engine *e);

/* metrics.c: pn's count of changes from one state to another. */
uint32_t arbor_metrics_transitions(const pnode *pn, arbor_state from,
                                   arbor_state to);
/* The loop turn histogram's bucket bounds (seconds, increasing). */
extern const double arbor_metrics_turn_bounds[ARBOR_TURN_BUCKETS];

/* Stops the whole tree in order (T12). */
void arbor_engine_stop(arbor_engine *e);
/* Stops a node: cancels it (T7), children first (T12). */
void arbor_engine_cancel(arbor_engine *e, pnode *pn);
/* Restarts a node now: cancels it if running, starts it if pending or held. */
int arbor_engine_restart(arbor_engine *e, pnode *pn, const char **err);
/* Reloads pn (docs/restore.md), whose fn_ref is already its new runnable:
   its incarnation ends while its children run on, and its new one adopts
   the children it names again (arbor_engine_adoptable); those it does not
   name are stopped and removed after its first step; its lifecycle
   coordinator, if any, is kept with its gates where they were. A node with
   no child or not running is restarted instead (arbor_engine_restart). Returns 1 when reloaded, 0
   when restarted, -1 with *err when refused. */
int arbor_engine_reload(arbor_engine *e, pnode *pn, const char **err);
/* The child named name of parent that parent's new incarnation may adopt
   (parent is reloading and has not finished its first step), or NULL. */
pnode *arbor_engine_adoptable(pnode *parent, const char *name, size_t len);
/* c is adopted unchanged: it runs on (started again if it had exited and
   waits for nothing, unless its coordinator finished with it) and the
   event `restored` says so. */
void arbor_engine_adopt(arbor_engine *e, pnode *c);
/* Holds a node down: canceled and not restarted until restarted by hand. */
void arbor_engine_hold(arbor_engine *e, pnode *pn);
/* Why pn cannot be removed, or NULL. */
const char *arbor_engine_remove_check(const pnode *pn);
/* Holds pn down and removes it from the tree once its subtree has exited
   (at once when it has). arbor_engine_remove_check(pn) said NULL. */
void arbor_engine_remove(arbor_engine *e, pnode *pn);
/* Makes the running incarnation of pn raise the error value on top of e->L
   (popped) at its current yield point. */
int arbor_engine_fail(arbor_engine *e, pnode *pn);

/* Creates a child of parent (not started). Returns NULL with *err set. */
pnode *arbor_engine_add(arbor_engine *e, pnode *parent, const char *name,
                        size_t len, int *err);
/* Starts pn's next incarnation now. */
void arbor_engine_start(arbor_engine *e, pnode *pn);
/* Records a signal from the runnable ("healthy", "done"). Returns NULL or
   the misuse message. */
const char *arbor_engine_signal(arbor_engine *e, pnode *pn, const char *what);
/* Parks the current incarnation; `wait` is WAIT_*; for WAIT_SLEEP the wake
   timer is armed at now + seconds. */
void arbor_engine_park(arbor_engine *e, pnode *pn, int wait, double seconds);
/* Wakes pn from WAIT_PARK with the nvals values on top of L. Returns 1 when
   delivered, 0 when pn no longer waits on seq. */
int arbor_engine_unpark(arbor_engine *e, pnode *pn, uint32_t seq, lua_State *L,
                        int nvals);
/* pn's timing options (deadline.c): TM_MIN_UPTIME, TM_READY or
   TM_WATCHDOG. Sets it to s seconds (>= 0; 0 for a deadline: none) as the
   node's own option when given, else as a default: only when the node's
   own options did not set it. A deadline set while it applies (ready_timeout
   before HEALTHY, the watchdog once HEALTHY) is armed at once. */
void arbor_engine_set_timing(arbor_engine *e, pnode *pn, unsigned which,
                             double s, int given);
/* The value in force: min_uptime (its default when unset), or a
   deadline's seconds (0: none). */
double arbor_engine_timing(const pnode *pn, unsigned which);
/* Moves pn's ready deadline to now + s when that is later (a process's
   EXTEND_TIMEOUT_USEC, systemd's rule). Returns 1 when pn waits for its
   HEALTHY under a deadline, else 0 (nothing to extend). */
int arbor_engine_extend_ready(arbor_engine *e, pnode *pn, double s);
/* The heartbeat of pn's incarnation (ctx:alive, a process's WATCHDOG=1):
   its watchdog deadline moves to now + watchdog (deadline.c). Cheap: it
   writes the time, the timer is moved when it fires. */
void arbor_engine_alive(arbor_engine *e, pnode *pn);
/* Fails pn's running incarnation now with reason (borrowed) as its error:
   it is DEAD, its context is canceled (its coroutine ends as a canceled
   one does) and its policy decides once its subtree exited, as for an
   escalation. Returns -1 (nothing done) when pn does not run, is DEAD
   already or is being stopped. */
int arbor_engine_fail_now(arbor_engine *e, pnode *pn, arbor_str *reason);
/* pn's failure streak as its policy would see it now: 0 once the running
   incarnation has been HEALTHY for min_uptime (the reset happens at its
   exit; views may show this instead of the stored count). */
uint32_t arbor_engine_streak(arbor_engine *e, const pnode *pn);

/* Appends a log line to pn at level info (and calls the sink). Takes a
   reference. */
void arbor_engine_log(arbor_engine *e, pnode *pn, arbor_str *line);
/* The same at a level (ARBOR_LOG_*), for pn's sub-logger sub (0: pn's
   own; arbor_log_sub's index + 1). */
void arbor_engine_log_at(arbor_engine *e, pnode *pn, unsigned sub, int level,
                         arbor_str *line);
/* A line of a process's output on pn (stream 0 stdout, 1 stderr), from a
   libuv callback: level info for stdout, warn for stderr, unless pn's
   parser says; written "stdout: text". 0 (not logged) once e is freed. */
int arbor_engine_log_output(arbor_engine *e, pnode *pn, int stream,
                            const char *s, size_t n);
struct arbor_logfile_waiter;
/* 1 when pn's process output should wait (its pipes not read): its log
   file under --log-dir holds as much as it may, and its processes' output
   waits rather than drops (log_overflow "block", the default). */
int arbor_engine_log_full(arbor_engine *e, pnode *pn);
/* w->resume is called once, on the loop, when log lines moved on; -1 when
   there are no log files (nothing to wait for). */
int arbor_engine_log_wait(arbor_engine *e, struct arbor_logfile_waiter *w);
/* w waits no more. */
void arbor_engine_log_unwait(struct arbor_logfile_waiter *w);
/* pn's log, made if needed with cap lines (ARBOR_LOG_LINES when 0 is
   given and it is new); NULL on OOM. */
arbor_logs *arbor_engine_logs(pnode *pn);
/* Sets the size of pn's ring (the log_lines option; 0 keeps none),
   keeping its newest lines. -1 on OOM. */
int arbor_engine_log_lines(pnode *pn, unsigned cap);
/* Reserves name (len bytes) as a sub-logger of pn: returns its index + 1,
   0 when a child has that name (first component), -1 on OOM. A name
   already reserved returns its index. */
int arbor_engine_log_sub(pnode *pn, const char *name, size_t len);
/* 1 when name is one of pn's sub-loggers (a child may not take it). */
int arbor_engine_log_reserved(const pnode *pn, const char *name, size_t len);
/* Frees pn's log (its node is discarded). */
void arbor_engine_log_free(arbor_engine *e, pnode *pn);
/* The name of a level ("debug", "info", "warn", "error"); its level from
   a name, or -1. */
const char *arbor_log_level_name(int level);
int arbor_log_level(const char *name, size_t len);
/* Emits a state event (for changes made outside the tree's hooks). */
void arbor_engine_emit_state(arbor_engine *e, pnode *pn, arbor_state from,
                             arbor_state to, arbor_str *reason);
/* Emits a non-state event. */
void arbor_engine_event(arbor_engine *e, pnode *pn, arbor_event_kind kind,
                        arbor_str *reason);

/* Nodes past their shutdown deadline still running: calls fn for each. */
void arbor_engine_stuck(arbor_engine *e, void (*fn)(pnode *, void *), void *ud);

/* Records v (at idx of L) to run when pn's incarnation ends (ctx:defer,
   engine/defer.c). */
void arbor_defer_push(lua_State *L, pnode *pn, int idx);

/* The engine running the calling code, if any (set while draining). */
arbor_engine *arbor_engine_current(void);
/* The time of the current step (the clock is read once per step). */
double arbor_engine_step_time(arbor_engine *e);
/* The group member pn waits for before it starts (strategy.c), or NULL. */
pnode *arbor_engine_waits_for(pnode *pn);


/* Pushes n's whole DN onto L (DNs have no length limit). [-0, +1, m] */
void arbor_push_dn(lua_State *L, const arbor_node *n);

/* Pushes the unique cancellation error value onto L. [-0, +1, -] */
void arbor_push_canceled(lua_State *L);
/* 1 when the value at idx is the cancellation error. */
int arbor_is_canceled(lua_State *L, int idx);

/* ---- the process layer (proc/) --------------------------------------
   proc/ is above the engine: it calls what follows, and the engine reaches
   it only through the hooks proc/ registers (it never names proc/). */

/* What the engine tells the process layer. */
typedef struct arbor_engine_procs {
  /* pn's incarnation ended in state s; it had started processes */
  void (*incarnation_end)(pnode *pn, arbor_state s);
  /* pn was discarded */
  void (*node_discarded)(pnode *pn);
  /* e is being freed: what is left of its processes goes (its loop runs) */
  void (*engine_free)(arbor_engine *e);
  /* the state's libuv loop closes (home.c) */
  void (*loop_close)(uv_loop_t *loop);
} arbor_engine_procs;

/* Registers the hooks (in static storage) for every engine: proc/ does at
   its first process. */
void arbor_engine_set_procs(const arbor_engine_procs *procs);
/* The registered hooks, or NULL while no process was ever started. */
const arbor_engine_procs *arbor_engine_get_procs(void);
/* pn's incarnation started a process: its end goes to incarnation_end. */
void arbor_engine_procs_started(pnode *pn);
/* Wakes pn (its next resume looks at what happened) when it still waits
   on seq, its wait_seq when it parked (arbor_engine_park); 1 when woken. */
int arbor_engine_wake(arbor_engine *e, pnode *pn, uint32_t seq);
/* Logs line on pn (NULL: the root) from a libuv callback, outside the
   engine's steps: the step's clock is read first. 0 (not logged) once e
   is freed. */
int arbor_engine_log_now(arbor_engine *e, pnode *pn, arbor_str *line);
/* 1 once e is tearing down (no more restarts) or freed. */
int arbor_engine_closing(const arbor_engine *e);
/* A process of pn (pid) needed SIGKILL: while the tree is being stopped
   (T12) e counts it and names the first (not a clean stop). */
void arbor_engine_count_kill(arbor_engine *e, pnode *pn, int pid);
/* The engine's libuv loop, or NULL under the virtual clock. */
uv_loop_t *arbor_engine_loop(const arbor_engine *e);

#endif

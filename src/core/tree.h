/* tree.h: the supervision tree (rules T1-T8 of SEMANTICS.md) as plain C.
 *
 * Nodes, their five states, which subtrees have running incarnations,
 * logical cancellation and DN lookup. No libuv, no Lua: the engine owns
 * coroutines and timers, makes every change of a node's life itself and
 * reports it; the tree only tells it of discarded and freed nodes.
 */
#ifndef ARBOR_TREE_H
#define ARBOR_TREE_H

#include <stddef.h>
#include <stdint.h>

typedef enum arbor_state {
  ARBOR_NEW = 0,
  ARBOR_HEALTHY,
  ARBOR_DONE,
  ARBOR_DEAD,
  ARBOR_CANCELED
} arbor_state;

enum arbor_flags {
  ARBOR_F_RUNNING = 1u << 0,  /* the incarnation's coroutine is alive */
  ARBOR_F_CANCEL = 1u << 1,   /* context canceled (T7); inherited by the subtree */
  ARBOR_F_PENDING = 1u << 2,  /* a start is pending: first start or delayed restart */
  ARBOR_F_HELD = 1u << 3,     /* the GC leaves it alone: policy said stop, or held */
  ARBOR_F_DETACHED = 1u << 4, /* discarded; memory lives while refs > 0 */
  ARBOR_F_DECLARED = 1u << 5, /* declared DEAD from outside (escalation): the
                                 incarnation's own exit no longer sets the state */
  ARBOR_F_FORCED = 1u << 6,   /* ended by a forced close at its deadline */
  ARBOR_F_RETIRED = 1u << 7,  /* finished with for the rest of its parent's
                                 incarnation: the GC does not restart it
                                 (the lifecycle coordinator's L4, L5) */
};

#define ARBOR_NAME_MAX 64

typedef struct arbor_node arbor_node;
typedef struct arbor_tree arbor_tree;

struct arbor_node {
  arbor_tree *tree;
  arbor_node *parent;
  arbor_node *first, *last;  /* children, in creation (= start) order */
  arbor_node *prev, *next;   /* siblings */
  arbor_node *gnext;         /* circular ring of the members of one ctx:group */
  arbor_node *hnext;         /* hash chain of (parent, name) */
  uint64_t incarnation;      /* 0 until first started */
  uint32_t live;             /* live subtrees: 1 while running, plus 1 per
                                child with a running incarnation in its
                                subtree; 0 once the whole subtree exited */
  uint32_t nchildren;
  uint32_t refs;             /* tree membership + events + handles */
  uint32_t hash;
  uint8_t state;             /* arbor_state */
  uint8_t flags;             /* arbor_flags */
  uint8_t namelen;
  /* the owner's, never read by the tree (they fill what would be padding):
     a tag for what kind of node it is (the engine: its lifecycle) and its
     slot in a table the owner keeps per parent (the engine: its entry in
     the parent's lifecycle coordinator) */
  uint8_t tag;
  uint32_t slot;
  char *name;                /* NUL-terminated, stored after the node */
};

/* Ownership callbacks from the tree to its owner. Either may be NULL. */
typedef struct arbor_hooks {
  /* n is about to be freed (detached and no references left); the tree's
     `allocated` count already excludes it. */
  void (*release)(arbor_node *n, void *ud);
  void *ud;
  /* n was just detached from the tree (discarded); it may live on while
     referenced, but is no longer part of the tree. */
  void (*detached)(arbor_node *n, void *ud);
} arbor_hooks;

struct arbor_tree {
  arbor_node *root;
  arbor_node **buckets;
  size_t nbuckets;
  size_t nnodes;       /* attached nodes */
  size_t allocated;    /* nodes in memory, attached or only referenced */
  size_t running;      /* running incarnations */
  size_t node_size;    /* bytes per node: >= sizeof(arbor_node) */
  arbor_hooks hooks;
  uint64_t steps;      /* nodes visited by walks towards the root (live
                          counts, DNs): what depth costs, for the specs */
};

/* Error codes, negative like libuv. */
enum {
  ARBOR_EBADNAME = -1,
  ARBOR_EDUP = -2,
  ARBOR_ENOMEM = -3,
  ARBOR_EGONE = -4, /* the parent was discarded */
};

/* Initializes a tree whose nodes are node_size bytes (callers embed
   arbor_node first in a larger struct) and creates the root, state NEW,
   not started. Returns 0 or ARBOR_ENOMEM. */
int arbor_tree_init(arbor_tree *t, size_t node_size, const arbor_hooks *hooks);
/* Detaches and frees every node (references held elsewhere keep nodes alive
   until released). */
void arbor_tree_close(arbor_tree *t);

/* 1 when name is a valid node name (T2). */
int arbor_name_valid(const char *name, size_t len);
/* Adds a child named `name` to parent, state NEW, pending its first start.
   On error returns NULL and stores ARBOR_EBADNAME, ARBOR_EDUP, ARBOR_EGONE
   or ARBOR_ENOMEM in *err. A child of a canceled parent is created CANCELED
   (never started, T8). */
arbor_node *arbor_tree_add(arbor_node *parent, const char *name, size_t len,
                           int *err);
/* Child of parent by name, or NULL. */
arbor_node *arbor_tree_child(arbor_node *parent, const char *name, size_t len);
/* Node by DN ("root", "root.a.b"), or NULL. */
arbor_node *arbor_tree_find(arbor_tree *t, const char *dn, size_t len);
/* Writes n's DN into buf (NUL-terminated, truncated to size) and returns its
   full length; buf may be NULL when size is 0. DNs have no length limit:
   callers size the buffer by a first call. */
size_t arbor_node_dn(const arbor_node *n, char *buf, size_t size);
/* n's whole DN in a new malloc'd string, or NULL when out of memory. */
char *arbor_node_dn_dup(const arbor_node *n);
/* Depth: 0 for the root. */
unsigned arbor_node_depth(const arbor_node *n);

/* Puts b into a's group ring (ctx:group members, T6). */
void arbor_tree_group(arbor_node *a, arbor_node *b);

/* Starts a new incarnation of n: incarnation+1, state NEW, RUNNING, n's
   live count +1 (and its ancestors' up to the first that was live already);
   clears CANCEL, PENDING, FORCED and DECLARED. n must not be running and its
   children must be discarded. */
void arbor_tree_start(arbor_node *n);
/* Records that n's incarnation ended in state s (ignored when n was declared
   DEAD: it stays DEAD) and returns the state it had. Decrements n's live count, and its ancestors' up to
   the first that stays live. Ending DEAD marks n's own context canceled
   only: the caller cancels the subtree (arbor_tree_cancel(n)) at once,
   before anything else is canceled, since arbor_tree_cancel skips subtrees
   whose root is already canceled. */
arbor_state arbor_tree_exit(arbor_node *n, arbor_state s);
/* Sets n's state (the engine's signals and declarations) and returns the
   state it had. Setting DEAD also cancels n's own context. */
arbor_state arbor_tree_set_state(arbor_node *n, arbor_state s);
/* Says whether a node below the one canceled is left out (with its
   subtree): the engine's poststop children (L3). */
typedef int (*arbor_exempt_fn)(const arbor_node *n, void *ud);
/* Told of each node whose context was just canceled, in pre-order; `from`
   is its state before: a node pending its start became CANCELED. */
typedef void (*arbor_canceled_fn)(arbor_node *n, arbor_state from, void *ud);
/* Cancels the context of n and every descendant (T7), except those exempt
   says to leave out, and their subtrees (NULL: none). Nodes pending their
   first start become CANCELED, and so do descendants waiting for a delayed
   restart; n itself, when it waits for a delayed restart (pending with
   incarnation > 0), is left as it is. Calls visit (if not NULL) for each
   node newly canceled and returns how many there were. */
size_t arbor_tree_cancel(arbor_node *n, arbor_exempt_fn exempt,
                         arbor_canceled_fn visit, void *ud);
/* Discards n's children (detaching the subtree); n's subtree must have
   exited. */
void arbor_tree_discard_children(arbor_node *n);
/* Detaches n (not the root) and its subtree from the tree. */
void arbor_tree_discard(arbor_node *n);

/* References: a node is freed once detached and unreferenced. */
void arbor_node_ref(arbor_node *n);
void arbor_node_unref(arbor_node *n);

static inline int arbor_node_running(const arbor_node *n) {
  return (n->flags & ARBOR_F_RUNNING) != 0;
}
static inline int arbor_node_canceled(const arbor_node *n) {
  return (n->flags & ARBOR_F_CANCEL) != 0;
}

const char *arbor_state_name(arbor_state s);

#endif

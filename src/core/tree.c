/* tree.c: nodes, live counts, cancellation and DN lookup (T1-T8). */
#include "core/tree.h"

#include <stdlib.h>
#include <string.h>

static const char *const state_names[] = {"NEW", "HEALTHY", "DONE", "DEAD",
                                          "CANCELED"};

const char *arbor_state_name(arbor_state s) {
  return (unsigned)s < 5 ? state_names[s] : "?";
}

/* FNV-1a over the parent's address and the name. */
static uint32_t key_hash(const arbor_node *parent, const char *name,
                         size_t len) {
  uint32_t h = 2166136261u;
  uintptr_t p = (uintptr_t)parent;
  for (size_t i = 0; i < sizeof p; i++) {
    h ^= (uint8_t)(p >> (8 * i));
    h *= 16777619u;
  }
  for (size_t i = 0; i < len; i++) {
    h ^= (uint8_t)name[i];
    h *= 16777619u;
  }
  return h;
}

/* Doubles the bucket array once the load factor passes 2 (chains of two
   on average: 8 bytes of buckets per node instead of 16). */
static int hash_grow(arbor_tree *t) {
  size_t nb = t->nbuckets ? t->nbuckets * 2 : 64;
  arbor_node **b = calloc(nb, sizeof *b);
  if (!b) return ARBOR_ENOMEM;
  for (size_t i = 0; i < t->nbuckets; i++) {
    arbor_node *n = t->buckets[i];
    while (n) {
      arbor_node *next = n->hnext;
      size_t j = n->hash & (nb - 1);
      n->hnext = b[j];
      b[j] = n;
      n = next;
    }
  }
  free(t->buckets);
  t->buckets = b;
  t->nbuckets = nb;
  return 0;
}

static void hash_remove(arbor_tree *t, arbor_node *n) {
  arbor_node **p = &t->buckets[n->hash & (t->nbuckets - 1)];
  while (*p && *p != n) p = &(*p)->hnext;
  if (*p) *p = n->hnext;
  n->hnext = NULL;
}

int arbor_name_valid(const char *name, size_t len) {
  if (len < 1 || len > ARBOR_NAME_MAX) return 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return 0;
  }
  return 1;
}

static arbor_node *node_alloc(arbor_tree *t, arbor_node *parent,
                              const char *name, size_t len) {
  arbor_node *n = calloc(1, t->node_size + len + 1);
  if (!n) return NULL;
  t->allocated++;
  n->name = (char *)n + t->node_size;
  n->tree = t;
  n->parent = parent;
  n->gnext = n;
  n->refs = 1; /* the tree's own reference */
  n->state = ARBOR_NEW;
  n->flags = ARBOR_F_PENDING;
  n->namelen = (uint8_t)len;
  memcpy(n->name, name, len);
  n->name[len] = '\0';
  return n;
}

int arbor_tree_init(arbor_tree *t, size_t node_size, const arbor_hooks *hooks) {
  memset(t, 0, sizeof *t);
  t->node_size = node_size < sizeof(arbor_node) ? sizeof(arbor_node)
                                                 : node_size;
  t->node_size = (t->node_size + 7) & ~(size_t)7; /* the name follows */
  if (hooks) t->hooks = *hooks;
  t->root = node_alloc(t, NULL, "root", 4);
  if (!t->root) return ARBOR_ENOMEM;
  t->nnodes = 1;
  return 0;
}

arbor_node *arbor_tree_child(arbor_node *parent, const char *name,
                             size_t len) {
  arbor_tree *t = parent->tree;
  if (!t->nbuckets) return NULL;
  uint32_t h = key_hash(parent, name, len);
  for (arbor_node *n = t->buckets[h & (t->nbuckets - 1)]; n; n = n->hnext)
    if (n->hash == h && n->parent == parent && n->namelen == len &&
        memcmp(n->name, name, len) == 0)
      return n;
  return NULL;
}

arbor_node *arbor_tree_add(arbor_node *parent, const char *name, size_t len,
                           int *err) {
  arbor_tree *t = parent->tree;
  if (parent->flags & ARBOR_F_DETACHED) {
    *err = ARBOR_EGONE;
    return NULL;
  }
  if (!arbor_name_valid(name, len)) {
    *err = ARBOR_EBADNAME;
    return NULL;
  }
  if (arbor_tree_child(parent, name, len)) {
    *err = ARBOR_EDUP;
    return NULL;
  }
  if (t->nnodes >= 2 * t->nbuckets && hash_grow(t) < 0) {
    *err = ARBOR_ENOMEM;
    return NULL;
  }
  arbor_node *n = node_alloc(t, parent, name, len);
  if (!n) {
    *err = ARBOR_ENOMEM;
    return NULL;
  }
  n->hash = key_hash(parent, name, len);
  size_t b = n->hash & (t->nbuckets - 1);
  n->hnext = t->buckets[b];
  t->buckets[b] = n;
  n->prev = parent->last;
  if (parent->last)
    parent->last->next = n;
  else
    parent->first = n;
  parent->last = n;
  parent->nchildren++;
  parent->refs++; /* a child keeps its parent's memory (for its DN) */
  t->nnodes++;
  if (parent->flags & ARBOR_F_CANCEL) {
    n->flags = ARBOR_F_CANCEL;
    n->state = ARBOR_CANCELED;
  }
  return n;
}

arbor_node *arbor_tree_find(arbor_tree *t, const char *dn, size_t len) {
  if (len < 4 || memcmp(dn, "root", 4) != 0 || (len > 4 && dn[4] != '.'))
    return NULL;
  arbor_node *n = t->root;
  size_t i = 4;
  while (n && i < len) {
    size_t start = ++i; /* skip the dot */
    while (i < len && dn[i] != '.') i++;
    n = arbor_tree_child(n, dn + start, i - start);
  }
  return n;
}

size_t arbor_node_dn(const arbor_node *n, char *buf, size_t size) {
  size_t total = 0;
  for (const arbor_node *p = n; p; p = p->parent) {
    total += p->namelen + (p->parent ? 1 : 0);
    n->tree->steps++;
  }
  if (size == 0) return total;
  size_t end = total < size - 1 ? total : size - 1;
  buf[end] = '\0';
  /* from the last name backwards; what lies past `end` is left out */
  size_t pos = total;
  for (const arbor_node *p = n; p; p = p->parent) {
    pos -= p->namelen;
    if (pos < end)
      memcpy(buf + pos, p->name,
             end - pos < p->namelen ? end - pos : p->namelen);
    if (p->parent && --pos < end) buf[pos] = '.';
  }
  return total;
}

char *arbor_node_dn_dup(const arbor_node *n) {
  size_t len = arbor_node_dn(n, NULL, 0);
  char *s = malloc(len + 1);
  if (s) arbor_node_dn(n, s, len + 1);
  return s;
}

unsigned arbor_node_depth(const arbor_node *n) {
  unsigned d = 0;
  while (n->parent) {
    d++;
    n = n->parent;
  }
  return d;
}

void arbor_tree_group(arbor_node *a, arbor_node *b) {
  arbor_node *an = a->gnext;
  a->gnext = b->gnext;
  b->gnext = an;
}

void arbor_tree_start(arbor_node *n) {
  n->incarnation++;
  n->state = ARBOR_NEW;
  n->flags = (uint8_t)((n->flags & (ARBOR_F_HELD | ARBOR_F_RETIRED)) |
                       ARBOR_F_RUNNING);
  n->tree->running++;
  /* n's subtree was not live (its children are discarded): it now counts
     in its parent, and so on up while a parent was not live either */
  for (arbor_node *p = n; p; p = p->parent) {
    n->tree->steps++;
    if (p->live++ > 0) break;
  }
}

arbor_state arbor_tree_exit(arbor_node *n, arbor_state s) {
  arbor_state from = (arbor_state)n->state;
  n->flags &= (uint8_t)~ARBOR_F_RUNNING;
  if (!(n->flags & ARBOR_F_DECLARED) && n->state != s) {
    n->state = (uint8_t)s;
    if (s == ARBOR_DEAD) n->flags |= ARBOR_F_CANCEL;
  }
  n->tree->running--;
  for (arbor_node *p = n; p; p = p->parent) {
    n->tree->steps++;
    if (--p->live > 0) break;
  }
  return from;
}

arbor_state arbor_tree_set_state(arbor_node *n, arbor_state s) {
  arbor_state from = (arbor_state)n->state;
  n->state = (uint8_t)s;
  if (s == ARBOR_DEAD) n->flags |= ARBOR_F_CANCEL;
  return from;
}

/* Next node of a pre-order walk of the subtree of top, after n. When
   skip_children is set, n's subtree is skipped. */
static arbor_node *preorder_next(arbor_node *n, const arbor_node *top,
                                 int skip_children) {
  if (!skip_children && n->first) return n->first;
  while (n != top) {
    if (n->next) return n->next;
    n = n->parent;
  }
  return NULL;
}

/* Cancels one node's context (not its descendants). */
static int cancel_one(arbor_node *n, arbor_canceled_fn visit, void *ud) {
  if (n->flags & ARBOR_F_CANCEL) return 0;
  arbor_state from = (arbor_state)n->state;
  n->flags |= ARBOR_F_CANCEL;
  if (n->flags & ARBOR_F_PENDING) {
    n->flags &= (uint8_t)~ARBOR_F_PENDING;
    n->state = ARBOR_CANCELED;
  }
  if (visit) visit(n, from, ud);
  return 1;
}

size_t arbor_tree_cancel(arbor_node *n, arbor_exempt_fn exempt,
                         arbor_canceled_fn visit, void *ud) {
  /* A node waiting for its own delayed restart has no incarnation to
     cancel: canceling it directly (a group sibling's death) leaves the
     restart as its policy scheduled it. Only a canceled parent drops it. */
  if ((n->flags & ARBOR_F_PENDING) && n->incarnation > 0) return 0;
  /* n itself may carry the flag already (a DEAD node's is set at death,
     before its children are canceled), so its descendants are always
     visited; below n, a canceled node's subtree is canceled already. */
  size_t count = (size_t)cancel_one(n, visit, ud);
  for (arbor_node *p = preorder_next(n, n, 0); p;) {
    int fresh = exempt && exempt(p, ud) ? 0 : cancel_one(p, visit, ud);
    count += (size_t)fresh;
    p = preorder_next(p, n, !fresh);
  }
  return count;
}

void arbor_node_ref(arbor_node *n) { n->refs++; }

void arbor_node_unref(arbor_node *n) {
  while (n && --n->refs == 0) {
    arbor_node *parent = n->parent;
    arbor_tree *t = n->tree;
    t->allocated--;
    /* the hook may free the tree's owner once nothing is allocated */
    if (t->hooks.release) t->hooks.release(n, t->hooks.ud);
    free(n);
    n = parent; /* a child held a reference on its parent */
  }
}

/* Unlinks n from its parent, the hash and its group ring; the subtree below
   has been detached already. Drops the tree's reference. */
static void detach_one(arbor_node *n) {
  arbor_tree *t = n->tree;
  arbor_node *parent = n->parent;
  if (parent) {
    hash_remove(t, n);
    if (n->prev)
      n->prev->next = n->next;
    else
      parent->first = n->next;
    if (n->next)
      n->next->prev = n->prev;
    else
      parent->last = n->prev;
    parent->nchildren--;
    n->prev = n->next = NULL;
  }
  arbor_node *g = n;
  while (g->gnext != n) g = g->gnext;
  g->gnext = n->gnext;
  n->gnext = n;
  n->flags |= ARBOR_F_DETACHED;
  t->nnodes--;
  if (t->hooks.detached) t->hooks.detached(n, t->hooks.ud);
  arbor_node_unref(n);
}

/* Detaches the subtree of top, children first, without recursion. */
static void detach_subtree(arbor_node *top) {
  arbor_node *n = top;
  for (;;) {
    while (n->first) n = n->first;
    if (n == top) break;
    arbor_node *parent = n->parent;
    detach_one(n);
    n = parent;
  }
}

void arbor_tree_discard_children(arbor_node *n) {
  while (n->first) {
    arbor_node *c = n->first;
    detach_subtree(c);
    detach_one(c);
  }
}

void arbor_tree_discard(arbor_node *n) {
  detach_subtree(n);
  detach_one(n);
}

void arbor_tree_close(arbor_tree *t) {
  if (t->root) {
    arbor_tree_discard_children(t->root);
    arbor_node *r = t->root;
    t->root = NULL;
    r->flags |= ARBOR_F_DETACHED;
    t->nnodes--;
    if (t->hooks.detached) t->hooks.detached(r, t->hooks.ud);
    arbor_node_unref(r);
  }
  free(t->buckets);
  t->buckets = NULL;
  t->nbuckets = 0;
}

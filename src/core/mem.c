/* mem.c: the out-of-memory path and failed invariants. See mem.h. */
#include "core/mem.h"

#include <stdio.h>
#include <stdlib.h>

_Noreturn void arbor_oom(void) {
  fputs("arbor: out of memory\n", stderr);
  abort();
}

void *arbor_xalloc(size_t size) {
  void *p = malloc(size);
  if (!p && size) arbor_oom();
  return p;
}

void *arbor_xcalloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (!p && n && size) arbor_oom();
  return p;
}

void *arbor_xrealloc(void *p, size_t size) {
  void *q = realloc(p, size);
  if (!q && size) arbor_oom();
  return q;
}

_Noreturn void arbor_assert_fail_(const char *cond, const char *file, int line) {
  fprintf(stderr, "arbor: %s:%d: invariant failed: %s\n", file, line, cond);
  abort();
}

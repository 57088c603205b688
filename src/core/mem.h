/* mem.h: arbor's one out-of-memory path and its invariant checks.
 *
 * The pure cores report ENOMEM to their callers; the engine, which has no
 * way to go on without the memory (a node's stop record, a timer slot),
 * allocates through arbor_xalloc and friends, which print one line and
 * abort. arbor_assert checks an invariant in Debug and sanitizer builds
 * (without NDEBUG) and costs nothing in release builds.
 */
#ifndef ARBOR_MEM_H
#define ARBOR_MEM_H

#include <stddef.h>

/* Prints "arbor: out of memory" to stderr and aborts. */
_Noreturn void arbor_oom(void);
/* malloc, calloc and realloc that never return NULL. */
void *arbor_xalloc(size_t size);
void *arbor_xcalloc(size_t n, size_t size);
void *arbor_xrealloc(void *p, size_t size);

#ifdef NDEBUG
#define arbor_assert(cond) ((void)0)
#else
_Noreturn void arbor_assert_fail_(const char *cond, const char *file, int line);
#define arbor_assert(cond) \
  ((cond) ? (void)0 : arbor_assert_fail_(#cond, __FILE__, __LINE__))
#endif

#endif

/* str.h: reference-counted immutable strings shared by nodes and events. */
#ifndef ARBOR_STR_H
#define ARBOR_STR_H

#include <stddef.h>

typedef struct arbor_str {
  unsigned refs;
  size_t len;
  char s[]; /* NUL-terminated */
} arbor_str;

/* The initializer of a string of static storage, for fixed texts (reasons
   of events): `static arbor_str r = ARBOR_STR_STATIC("stop");` costs no
   allocation. Its count starts so high that the references taken and
   dropped never bring it to 0, so it is never freed. */
#define ARBOR_STR_STATIC(text) {.refs = 1u << 30, .len = sizeof(text) - 1, .s = text}

/* A new string with one reference, or NULL when out of memory. */
arbor_str *arbor_str_new(const char *s, size_t len);
/* A new string holding the C string s. */
arbor_str *arbor_str_lit(const char *s);
/* printf-style constructor. */
arbor_str *arbor_str_fmt(const char *fmt, ...);

static inline arbor_str *arbor_str_ref(arbor_str *s) {
  if (s) s->refs++;
  return s;
}

static inline void arbor_str_unref(arbor_str *s) {
  extern void arbor_str_free_(arbor_str *);
  if (s && --s->refs == 0) arbor_str_free_(s);
}

/* Replaces *slot by s (taking a new reference to s). */
static inline void arbor_str_set(arbor_str **slot, arbor_str *s) {
  arbor_str_ref(s);
  arbor_str_unref(*slot);
  *slot = s;
}

#endif

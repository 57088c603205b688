/* str.c: reference-counted strings. */
#include "core/str.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

arbor_str *arbor_str_new(const char *s, size_t len) {
  arbor_str *r = malloc(sizeof *r + len + 1);
  if (!r) return NULL;
  r->refs = 1;
  r->len = len;
  memcpy(r->s, s, len);
  r->s[len] = '\0';
  return r;
}

arbor_str *arbor_str_lit(const char *s) { return arbor_str_new(s, strlen(s)); }

arbor_str *arbor_str_fmt(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) return NULL;
  if ((size_t)n < sizeof buf) return arbor_str_new(buf, (size_t)n);
  arbor_str *r = malloc(sizeof *r + (size_t)n + 1);
  if (!r) return NULL;
  r->refs = 1;
  r->len = (size_t)n;
  va_start(ap, fmt);
  vsnprintf(r->s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return r;
}

void arbor_str_free_(arbor_str *s) { free(s); }

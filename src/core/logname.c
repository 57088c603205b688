/* logname.c: the file name of a DN's log (logname.h). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/logname.h"

size_t arbor_logname(const char *dn, size_t len,
                     char out[ARBOR_LOGNAME_MAX + 1]) {
  if (len <= ARBOR_LOGNAME_MAX) {
    memcpy(out, dn, len);
    out[len] = '\0';
    return len;
  }
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, 64 bits */
  for (size_t i = 0; i < len; i++) {
    h ^= (unsigned char)dn[i];
    h *= 0x100000001b3ull;
  }
  memcpy(out, dn, ARBOR_LOGNAME_CUT);
  snprintf(out + ARBOR_LOGNAME_CUT, 18, "~%016llx", (unsigned long long)h);
  return ARBOR_LOGNAME_MAX;
}

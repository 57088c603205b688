/* logname.h: the file name of a DN's log under --log-dir (logname.c). Pure
 * C.
 *
 * A DN has no length limit; a file name has (NAME_MAX, 255 bytes). A DN of
 * at most ARBOR_LOGNAME_MAX bytes is its own name; a longer one is its first
 * ARBOR_LOGNAME_CUT bytes, '~' and the 16 hex digits of the FNV-1a 64-bit
 * hash of the whole DN ('~' is in no DN, so a cut name is never a DN's).
 * With ".log" and a rotation's ".log.N" (N up to 4 digits) the name stays
 * within NAME_MAX.
 */
#ifndef ARBOR_LOGNAME_H
#define ARBOR_LOGNAME_H

#include <stddef.h>

#define ARBOR_LOGNAME_MAX 240
#define ARBOR_LOGNAME_CUT (ARBOR_LOGNAME_MAX - 17)

/* Writes the name of dn (len bytes) into out (NUL-terminated, at most
   ARBOR_LOGNAME_MAX bytes before the NUL) and returns its length. */
size_t arbor_logname(const char *dn, size_t len,
                     char out[ARBOR_LOGNAME_MAX + 1]);

#endif

/* test_logname.c: the file name of a DN's log under --log-dir
 * (src/core/logname.c): a DN that fits is its own name; a longer one is
 * cut and followed by a hash of the whole DN, so that the name and its
 * rotated ones (".log.N") stay within NAME_MAX. */
#include <limits.h>

#include "core/logname.h"
#include "test.h"

/* FNV-1a, 64 bits, of s: what the mapping's hash is documented to be. */
static uint64_t fnv1a(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

TEST(short_dn_is_its_own_name) {
  char out[ARBOR_LOGNAME_MAX + 1];
  ASSERT_EQ(arbor_logname("root.web", 8, out), 8);
  ASSERT_STR_EQ(out, "root.web");
}

TEST(dn_of_the_longest_length_is_kept) {
  char dn[ARBOR_LOGNAME_MAX + 1], out[ARBOR_LOGNAME_MAX + 1];
  memset(dn, 'a', ARBOR_LOGNAME_MAX);
  dn[ARBOR_LOGNAME_MAX] = '\0';
  ASSERT_EQ(arbor_logname(dn, ARBOR_LOGNAME_MAX, out), ARBOR_LOGNAME_MAX);
  ASSERT_STR_EQ(out, dn);
}

TEST(long_dn_is_cut_and_hashed) {
  char dn[1000], out[ARBOR_LOGNAME_MAX + 1], want[ARBOR_LOGNAME_MAX + 1];
  memset(dn, 'x', sizeof dn - 1);
  memcpy(dn, "root.", 5);
  dn[sizeof dn - 1] = '\0';
  size_t n = sizeof dn - 1;
  size_t len = arbor_logname(dn, n, out);
  ASSERT_EQ(len, ARBOR_LOGNAME_MAX);
  ASSERT_EQ(strlen(out), len);
  snprintf(want, sizeof want, "%.*s~%016llx", ARBOR_LOGNAME_CUT, dn,
           (unsigned long long)fnv1a(dn, n));
  ASSERT_STR_EQ(out, want);
  /* with its suffix and the longest rotated one, within NAME_MAX */
  ASSERT_LE(len + strlen(".log.") + 4, (size_t)NAME_MAX);
}

TEST(long_dns_that_share_the_cut_differ) {
  char a[300], b[300], oa[ARBOR_LOGNAME_MAX + 1], ob[ARBOR_LOGNAME_MAX + 1];
  memset(a, 'q', sizeof a);
  memset(b, 'q', sizeof b);
  b[sizeof b - 1] = 'r';
  arbor_logname(a, sizeof a, oa);
  arbor_logname(b, sizeof b, ob);
  ASSERT_EQ(memcmp(oa, ob, ARBOR_LOGNAME_CUT), 0);
  ASSERT_NE(strcmp(oa, ob), 0);
}

TEST(one_byte_over_is_mapped) {
  char dn[ARBOR_LOGNAME_MAX + 2], out[ARBOR_LOGNAME_MAX + 1];
  memset(dn, 'z', ARBOR_LOGNAME_MAX + 1);
  dn[ARBOR_LOGNAME_MAX + 1] = '\0';
  ASSERT_EQ(arbor_logname(dn, ARBOR_LOGNAME_MAX + 1, out), ARBOR_LOGNAME_MAX);
  ASSERT_EQ(out[ARBOR_LOGNAME_CUT], '~');
}

TEST_MAIN()

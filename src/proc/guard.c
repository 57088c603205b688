#define _GNU_SOURCE /* memfd_create */
/* guard.c: no orphans when arbor dies.
 *
 * Each process gets PR_SET_PDEATHSIG (spawn.c), which covers only the main
 * process, not its group. So a guard process, forked once, holds one end
 * of a socket whose other end only arbor has (close-on-exec), and shares a
 * table of live process groups with arbor; when arbor dies, even by
 * SIGKILL, the guard reads EOF and SIGKILLs every group in the table. A
 * guard that dies first is replaced.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc/internal.h"
#include "proc/spawn.h"

/* The table of live process groups is a shared mapping made before the
   guard is forked: arbor writes a slot per group (no syscall, no wakeup of
   the guard), the guard reads the table only once arbor is gone. */
#define GUARD_SLOTS 16384

static int guard_fd = -1;
static pid_t guard_pid;
static volatile int32_t *guard_table;
static int guard_table_fd = -1; /* a memfd: the table crosses a reexec */
static unsigned guard_hint;

/* The guard's life: wait for EOF on fd (arbor gone), then kill every group
   in the table. */
static void guard_main(int fd) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_IGN;
  int ignored[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1,
                   SIGUSR2};
  for (size_t i = 0; i < sizeof ignored / sizeof *ignored; i++)
    sigaction(ignored[i], &sa, NULL);
  sa.sa_handler = SIG_DFL;
  sigaction(SIGCHLD, &sa, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  setpgid(0, 0);
  prctl(PR_SET_NAME, "arbor-guard");
  if (fd != 3) {
    dup2(fd, 3);
    close(fd);
  }
  int nul = open("/dev/null", O_RDWR);
  if (nul >= 0) {
    dup2(nul, 0);
    dup2(nul, 1);
    dup2(nul, 2);
  }
  arbor_fds_close(4);
  for (;;) { /* nothing is ever written: returns at EOF */
    char c;
    ssize_t r = read(3, &c, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
  }
  for (unsigned i = 0; i < GUARD_SLOTS; i++)
    if (guard_table[i] > 0) kill(-guard_table[i], SIGKILL);
  _exit(0); /* no exit handlers: they are arbor's */
}

/* Forks a guard; the table is made at the first call, so a guard that
   replaces a dead one takes over every group listed already. Returns its
   pid, or a negative errno. */
static int guard_start(void) {
  if (!guard_table) {
    int fd = memfd_create("arbor-guard", MFD_CLOEXEC);
    if (fd < 0) return -errno;
    void *t = ftruncate(fd, GUARD_SLOTS * sizeof(int32_t)) < 0
                  ? MAP_FAILED
                  : mmap(NULL, GUARD_SLOTS * sizeof(int32_t),
                         PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (t == MAP_FAILED) {
      int err = errno;
      close(fd);
      return -err;
    }
    guard_table = t;
    guard_table_fd = fd;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return -errno;
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[1]);
    guard_main(sv[0]);
  }
  int err = errno;
  close(sv[0]);
  if (pid < 0) {
    close(sv[1]);
    return -err;
  }
  guard_fd = sv[1];
  guard_pid = pid;
  return pid;
}

/* The guard died while arbor runs (wait status st): without it a kill -9
   of arbor would leave orphans, so a new one is started at once (or at the
   next process) and the roots of the trees are told. */
static void guard_died(int st) {
  int old = guard_pid, sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
  close(guard_fd);
  guard_fd = -1;
  guard_pid = 0;
  int rc = guard_start();
  char how[64];
  if (sig)
    snprintf(how, sizeof how, "killed by signal %d (%s)", sig,
             arbor_signal_name(sig) ? arbor_signal_name(sig) : "?");
  else
    snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(st));
  arbor_str *line =
      rc > 0 ? arbor_str_fmt("process guard (pid %d) %s; started a new one "
                             "(pid %d)", old, how, rc)
             : arbor_str_fmt("process guard (pid %d) %s; cannot start a new "
                             "one (%s): tried again at the next process",
                             old, how, strerror(-rc));
  arbor__proc_log_everywhere(line);
  arbor_str_unref(line);
}

int arbor__guard_reap(int pid) {
  int st;
  if (pid == 0) pid = guard_pid;
  if (pid <= 0 || pid != guard_pid || waitpid(pid, &st, WNOHANG) != pid)
    return 0;
  guard_died(st);
  return 1;
}

/* p->slot is -1 when the table is full (or cannot be made). */
void arbor__guard_add(arbor_proc *p) {
  p->slot = -1;
  if (guard_pid <= 0) guard_start();
  if (!guard_table) return;
  for (unsigned k = 0; k < GUARD_SLOTS; k++) {
    unsigned i = (guard_hint + k) % GUARD_SLOTS;
    if (guard_table[i] == 0) {
      guard_table[i] = p->pid;
      p->slot = (int)i;
      guard_hint = i + 1;
      return;
    }
  }
}

void arbor__guard_del(arbor_proc *p) {
  if (p->slot >= 0 && guard_table) guard_table[p->slot] = 0;
  p->slot = -1;
}

/* ---- reexec (restore.c) ------------------------------------------------ */

int arbor__guard_export(int fds[2], int *pid) {
  if (guard_pid <= 0 || guard_fd < 0 || guard_table_fd < 0) return -1;
  fds[0] = guard_fd;
  fds[1] = guard_table_fd;
  *pid = guard_pid;
  return 0;
}

int arbor__guard_adopt(int sock, int table, int pid) {
  void *t = mmap(NULL, GUARD_SLOTS * sizeof(int32_t), PROT_READ | PROT_WRITE,
                 MAP_SHARED, table, 0);
  if (t == MAP_FAILED) return -errno;
  fcntl(sock, F_SETFD, FD_CLOEXEC);
  fcntl(table, F_SETFD, FD_CLOEXEC);
  guard_table = t;
  guard_table_fd = table;
  guard_fd = sock;
  guard_pid = pid;
  return 0;
}

int arbor__guard_slot(arbor_proc *p, int slot) {
  if (!guard_table || slot < 0 || slot >= GUARD_SLOTS ||
      guard_table[slot] != p->pid)
    return -1;
  p->slot = slot;
  return 0;
}

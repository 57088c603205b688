/* spawn.c: starting a program the way arbor's processes need, with
 * vfork: the child borrows arbor's memory and stack until it execs, so a
 * start costs no page-table copy (libuv 1.44's uv_spawn forks) and no
 * child stack either (glibc's posix_spawn maps and unmaps one per call).
 */
#define _GNU_SOURCE
#include "proc/spawn.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

static int prepared, devnull = -1;

/* arbor's own open-file limit is raised to its hard limit (each node that
   runs processes keeps two pipes: 4 descriptors); children get the limit
   arbor started with, as systemd does for its services. */
static struct rlimit nofile;
static int nofile_raised;

static void prepare(void) {
  devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 &&
      nofile.rlim_cur < nofile.rlim_max) {
    struct rlimit raised = {nofile.rlim_max, nofile.rlim_max};
    nofile_raised = setrlimit(RLIMIT_NOFILE, &raised) == 0;
  }
  prepared = 1;
}

/* The child's errno when it could not exec comes back on a close-on-exec
   pipe, whose end of file says it exec'd: where vfork is a fork (valgrind
   runs it so) the child has memory of its own, and arbor must not go on
   before it has set itself up (a SIGTERM sent earlier would meet arbor's
   handlers in it). Spawns happen on the loop's thread only. */
static int errno_pipe[2] = {-1, -1};

/* fd as the child's target, without close-on-exec. */
static int place_fd(int fd, int target) {
  if (fd == target) return fcntl(fd, F_SETFD, 0);
  return dup2(fd, target);
}

/* Closes (or, cloexec set, marks close-on-exec) every descriptor from
   `from` up but `keep`: close_range(2) where the kernel has it (5.9; 5.11
   for the marking), else each one listed in /proc/self/fd, else each one
   below the open-file limit. Only system calls: a vfork child may call it. */
static void fds_from(int from, int keep, int cloexec) {
  unsigned flags = cloexec ? CLOSE_RANGE_CLOEXEC : 0;
  int ok = 1;
  if (keep > from)
    ok = syscall(SYS_close_range, from, keep - 1, flags) == 0;
  if (ok && keep >= from) from = keep + 1;
  if (ok && syscall(SYS_close_range, from, ~0U, flags) == 0) return;
  int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    struct rlimit rl;
    int max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < INT_MAX
                  ? (int)rl.rlim_cur : 65536;
    for (int fd = from; fd < max; fd++)
      if (fd != keep) cloexec ? fcntl(fd, F_SETFD, FD_CLOEXEC) : close(fd);
    return;
  }
  /* the directory's offsets are descriptor numbers: closing the ones just
     listed does not move the next ones */
  _Alignas(struct dirent64) char buf[4096];
  ssize_t n;
  while ((n = getdents64(dir, buf, sizeof buf)) > 0)
    for (ssize_t off = 0; off < n;) {
      struct dirent64 *d = (struct dirent64 *)(buf + off);
      off += d->d_reclen;
      int fd = 0;
      const char *c = d->d_name;
      for (; *c >= '0' && *c <= '9'; c++) fd = fd * 10 + (*c - '0');
      if (*c || c == d->d_name || fd < from || fd == keep || fd == dir)
        continue;
      cloexec ? fcntl(fd, F_SETFD, FD_CLOEXEC) : close(fd);
    }
  close(dir);
}

void arbor_fds_cloexec(int from) { fds_from(from, -1, 1); }

void arbor_fds_close(int from) { fds_from(from, -1, 0); }

/* The vfork child: runs on arbor's stack while arbor waits, so it only
   makes system calls and never returns. Every signal is blocked on entry. */
static __attribute__((noreturn)) void child(const arbor_spawn_opts *o) {
  /* Every signal back to its default: a handler of arbor's must not run
     here, in arbor's memory, and exec would keep the ignored ones ignored
     (a shell starts background jobs with SIGINT and SIGQUIT ignored, nohup
     ignores SIGHUP, the control socket SIGPIPE; glibc's posix_spawn, behind
     io.popen, leaves its own 32 and 33 ignored). The raw call, as glibc's
     refuses 32 and 33: a kernel sigaction of zeros is SIG_DFL, no flags, an
     empty mask. */
  static const unsigned long dfl[8];
  for (int sig = 1; sig < NSIG; sig++)
    if (sig != SIGKILL && sig != SIGSTOP)
      syscall(SYS_rt_sigaction, sig, dfl, NULL, (NSIG - 1) / 8);
  if (setsid() < 0) goto fail;
  /* dies with arbor even if the guard is gone (the guard covers the group) */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (!o->stdin_inherit) {
    if (devnull >= 0) {
      if (dup2(devnull, 0) < 0) goto fail;
    } else {
      int fd = open("/dev/null", O_RDONLY);
      if (fd < 0 || (fd != 0 && (dup2(fd, 0) < 0 || close(fd) < 0))) goto fail;
    }
  }
  for (int i = 0; i < o->nfds; i++)
    if (place_fd(o->child_fds[i], i + 1) < 0) goto fail;
  /* nothing else: not the files the tree opened, not what arbor inherited
     (the errno pipe is close-on-exec) */
  fds_from(o->nfds + 1, errno_pipe[1], 0);
  if (o->cwd && chdir(o->cwd) < 0) goto fail;
  if (o->umask_value >= 0) umask((mode_t)o->umask_value);
  if (nofile_raised) setrlimit(RLIMIT_NOFILE, &nofile);
  /* raw system calls: glibc's wrappers would also change the credentials
     of arbor's other threads, whose memory this child shares. Dropping the
     supplementary groups fails unless root, which is fine (as in libuv). */
  if (o->set_uid || o->set_gid) syscall(SYS_setgroups, 0, NULL);
  if (o->set_gid && syscall(SYS_setgid, o->gid) < 0) goto fail;
  if (o->set_uid && syscall(SYS_setuid, o->uid) < 0) goto fail;
  if (o->pid_var) { /* its own pid, known only here: digits after '=' */
    char digits[12], *d = o->pid_var;
    long pid = syscall(SYS_getpid);
    int n = 0;
    do digits[n++] = (char)('0' + pid % 10); while ((pid /= 10) && n < 11);
    while (*d) d++;
    while (n) *d++ = digits[--n];
    *d = '\0';
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execve(o->file, o->argv, o->env);
fail:;
  int e = errno ? errno : EINVAL;
  if (write(errno_pipe[1], &e, sizeof e) < 0) {
  }
  _exit(127);
}

int arbor_spawn(const arbor_spawn_opts *o, pid_t *pid) {
  if (!prepared) prepare();
  if (pipe2(errno_pipe, O_CLOEXEC) < 0) return errno;
  if (errno_pipe[1] <= o->nfds) { /* above the fds the child gets */
    int w = fcntl(errno_pipe[1], F_DUPFD_CLOEXEC, o->nfds + 1);
    int err = errno;
    close(errno_pipe[1]);
    errno_pipe[1] = w;
    if (w < 0) {
      close(errno_pipe[0]);
      errno_pipe[0] = -1;
      return err;
    }
  }
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t p = vfork();
  if (p == 0) child(o); /* does not return */
  int rc = p < 0 ? errno : 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  close(errno_pipe[1]);
  int child_errno = 0, e; /* EOF once it execs, else its errno */
  ssize_t n = 0;
  while (!rc && (n = read(errno_pipe[0], &e, sizeof e)) < 0 && errno == EINTR) {
  }
  if (!rc && n == (ssize_t)sizeof e) child_errno = e;
  close(errno_pipe[0]);
  errno_pipe[0] = errno_pipe[1] = -1;
  if (rc) return rc;
  if (child_errno) { /* it could not exec: reap it, report why */
    int st;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR) {
    }
    return child_errno;
  }
  *pid = p;
  return 0;
}

const char *arbor_shim_path(void) {
  static char path[PATH_MAX];
  const char *env = getenv("ARBOR_EXEC_SHIM");
  if (env && *env) return env;
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n > 0) {
    path[n] = '\0';
    const char *base = strrchr(path, '/');
    if (base && strcmp(base + 1, "arbor") == 0) return path;
  }
#if defined(ARBOR_SHIM_BUILD) && defined(ARBOR_SHIM_INSTALL)
  Dl_info info;
  char mod[PATH_MAX], dir[PATH_MAX];
  if (dladdr((void *)arbor_shim_path, &info) && info.dli_fname &&
      realpath(info.dli_fname, mod) && realpath(ARBOR_BUILD_DIR, dir) &&
      strncmp(mod, dir, strlen(dir)) == 0)
    return ARBOR_SHIM_BUILD;
  return ARBOR_SHIM_INSTALL;
#else
  return "arbor";
#endif
}

int arbor_exec_shim(int argc, char **argv) {
  if (argc < 5) {
    fputs("arbor --exec-shim LIMITS FILE ARGV0 [ARGS...]\n", stderr);
    return 127;
  }
  /* like every process arbor starts, it dies with arbor (the guard also
     covers its group) */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  char *spec = argv[2], *save = NULL;
  for (char *item = strtok_r(spec, ",", &save); item;
       item = strtok_r(NULL, ",", &save)) {
    int res;
    long long soft, hard;
    if (sscanf(item, "%d=%lld:%lld", &res, &soft, &hard) != 3) {
      fprintf(stderr, "arbor: --exec-shim: bad limit '%s'\n", item);
      return 127;
    }
    struct rlimit rl = {soft < 0 ? RLIM_INFINITY : (rlim_t)soft,
                        hard < 0 ? RLIM_INFINITY : (rlim_t)hard};
    if (setrlimit(res, &rl) < 0) {
      fprintf(stderr, "arbor: cannot set resource limit %d to %lld:%lld: %s\n",
              res, soft, hard, strerror(errno));
      return 127;
    }
  }
  execv(argv[3], argv + 4);
  fprintf(stderr, "arbor: cannot run %s: %s\n", argv[3], strerror(errno));
  return 127;
}

/* exec.c: processes of runnables, on arbor's libuv loop. See exec.h.
 *
 * Each process is started by spawn.c in a new session (its own session
 * and process group, out of the terminal's foreground group, so a Ctrl-C
 * reaches arbor only and arbor stops the tree in order). Its stdout and
 * stderr are pipes read into the node's log line by line, and its exit is
 * reaped on SIGCHLD.
 *
 * No orphans: each process gets PR_SET_PDEATHSIG (spawn.c), which covers
 * only the main process, not its group. So a guard process, forked once,
 * holds one end of a socket whose other end only
 * arbor has (close-on-exec), and shares a table of live process groups
 * with arbor; when arbor dies, even by SIGKILL, the guard reads EOF and
 * SIGKILLs every group in the table. A guard that dies first is replaced.
 *
 * A stop sends stop_signal (and SIGCONT) to the group, then SIGKILL when
 * `grace` seconds passed; it ends as soon as the group is gone: the main
 * process reaped and no other member alive (zombies reparented elsewhere do
 * not count: they are found in /proc).
 */
#define _GNU_SOURCE /* pipe2, strerrorname_np */
#include "proc/exec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/internal.h"
#include "proc/spawn.h"

extern char **environ;

static arbor_proc *procs;   /* every process not yet freed */
static arbor_proc *running; /* those not reaped yet: what SIGCHLD looks at */

static void running_add(arbor_proc *p) {
  p->rnext = running;
  if (running) running->rprev = p;
  running = p;
}

/* p's main process was reaped (or never started). */
static void running_del(arbor_proc *p) {
  if (p->rprev)
    p->rprev->rnext = p->rnext;
  else if (running == p)
    running = p->rnext;
  else
    return; /* not listed */
  if (p->rnext) p->rnext->rprev = p->rprev;
  p->rprev = p->rnext = NULL;
}

static double now_s(void) { return (double)uv_hrtime() / 1e9; }

/* ---- signals -------------------------------------------------------- */

static const struct {
  const char *name;
  int sig;
} signals[] = {
    {"HUP", SIGHUP},   {"INT", SIGINT},     {"QUIT", SIGQUIT},
    {"ILL", SIGILL},   {"TRAP", SIGTRAP},   {"ABRT", SIGABRT},
    {"BUS", SIGBUS},   {"FPE", SIGFPE},     {"KILL", SIGKILL},
    {"USR1", SIGUSR1}, {"SEGV", SIGSEGV},   {"USR2", SIGUSR2},
    {"PIPE", SIGPIPE}, {"ALRM", SIGALRM},   {"TERM", SIGTERM},
    {"CHLD", SIGCHLD}, {"CONT", SIGCONT},   {"STOP", SIGSTOP},
    {"TSTP", SIGTSTP}, {"TTIN", SIGTTIN},   {"TTOU", SIGTTOU},
    {"URG", SIGURG},   {"XCPU", SIGXCPU},   {"XFSZ", SIGXFSZ},
    {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH},
    {"IO", SIGIO},     {"PWR", SIGPWR},     {"SYS", SIGSYS},
};

int arbor_signal_number(const char *name) {
  if (strncmp(name, "SIG", 3) == 0) name += 3;
  for (size_t i = 0; i < sizeof signals / sizeof *signals; i++)
    if (strcmp(signals[i].name, name) == 0) return signals[i].sig;
  return -1;
}

const char *arbor_signal_name(int sig) {
  static char buf[16];
  for (size_t i = 0; i < sizeof signals / sizeof *signals; i++)
    if (signals[i].sig == sig) {
      snprintf(buf, sizeof buf, "SIG%s", signals[i].name);
      return buf;
    }
  return NULL;
}

/* ---- the guard ------------------------------------------------------ */

/* The table of live process groups is a shared mapping made before the
   guard is forked: arbor writes a slot per group (no syscall, no wakeup of
   the guard), the guard reads the table only once arbor is gone. */
#define GUARD_SLOTS 16384

static int guard_fd = -1;
static pid_t guard_pid;
static volatile int32_t *guard_table;
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
    void *t = mmap(NULL, GUARD_SLOTS * sizeof(int32_t),
                   PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED) return -errno;
    guard_table = t;
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

/* Logs line on the root of every tree with processes, or on stderr when
   none has any: what concerns them all (the guard). */
static void log_everywhere(arbor_str *line) {
  arbor_engine *seen[16]; /* told (past 16, one may hear it more than once) */
  size_t n = 0;
  if (!line) return;
  for (arbor_proc *p = procs; p; p = p->next) {
    arbor_engine *e = p->e;
    size_t i = 0;
    while (i < n && seen[i] != e) i++;
    if (!e || e->zombie || i < n) continue;
    if (n < sizeof seen / sizeof *seen) seen[n++] = e;
    arbor__step_begin(e);
    arbor_engine_log(e, (pnode *)e->tree.root, line);
  }
  if (n == 0) fprintf(stderr, "arbor: %s\n", line->s);
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
  log_everywhere(line);
  arbor_str_unref(line);
}

/* Reaps the guard when it is pid (a child that exited); 1 when it was. */
static int guard_reap(int pid) {
  int st;
  if (pid <= 0 || pid != guard_pid || waitpid(pid, &st, WNOHANG) != pid)
    return 0;
  guard_died(st);
  return 1;
}

/* Lists p's group with the guard (p->slot, or -1 when the table is full). */
static void guard_add(arbor_proc *p) {
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

static void guard_del(arbor_proc *p) {
  if (p->slot >= 0 && guard_table) guard_table[p->slot] = 0;
  p->slot = -1;
}

/* ---- groups --------------------------------------------------------- */

/* 1 while a member of the process group is alive. kill() also finds
   zombies, which may wait long for a parent that does not reap them: a
   group with members is checked in /proc for one that is not a zombie. */
static int group_alive(int pgid) {
  if (kill(-pgid, 0) < 0 && errno == ESRCH) return 0;
  DIR *d = opendir("/proc");
  if (!d) return 1;
  struct dirent *de;
  int alive = 0;
  while (!alive && (de = readdir(d))) {
    if (de->d_name[0] < '1' || de->d_name[0] > '9') continue;
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) continue;
    buf[n] = '\0';
    char *rp = strrchr(buf, ')');
    char state;
    int ppid, pgrp;
    if (rp && sscanf(rp + 1, " %c %d %d", &state, &ppid, &pgrp) == 3 &&
        pgrp == pgid && state != 'Z')
      alive = 1;
  }
  closedir(d);
  return alive;
}

/* ---- lifetime ------------------------------------------------------- */

static void maybe_free(arbor_proc *p) {
  if (p->handles > 0 || !p->lua_gone) return;
  running_del(p);
  if (p->prev)
    p->prev->next = p->next;
  else
    procs = p->next;
  if (p->next) p->next->prev = p->prev;
  for (int i = 0; i < 3; i++) free(p->buf[i]);
  while (p->qlen) arbor_str_unref(arbor_proc_pop_line(p));
  if (p->pn) arbor_node_unref(&p->pn->n);
  free(p);
}

static void on_close(uv_handle_t *h) {
  arbor_proc *p = h->data;
  p->handles--;
  maybe_free(p);
}

static void close_handle(arbor_proc *p, uv_handle_t *h) {
  if (h->data == p && !uv_is_closing(h)) uv_close(h, on_close);
}

void arbor_proc_release(arbor_proc *p) {
  p->lua_gone = 1;
  if (!p->gone) arbor_proc_stop(p);
  maybe_free(p);
}

/* ---- waking the owner ----------------------------------------------- */

static int owner_live(arbor_proc *p) {
  return p->e && p->pn && !(p->pn->n.flags & ARBOR_F_DETACHED) &&
         p->pn->n.incarnation == p->incarnation &&
         arbor_node_running(&p->pn->n);
}

void arbor_proc_wait(arbor_proc *p) {
  p->waiting = 1;
  p->wait_seq = p->pn->wait_seq;
}

/* Something happened: the parked owner is resumed to look at it. */
static void wake(arbor_proc *p) {
  if (!p->waiting || !owner_live(p)) return;
  pnode *pn = p->pn;
  if (pn->wait == WAIT_NONE || pn->wait_seq != p->wait_seq) return;
  p->waiting = 0;
  arbor_timers_disarm(&p->e->timers, &pn->wake);
  pn->wait = WAIT_NONE;
  arbor__enqueue(p->e, pn);
}

/* ---- output --------------------------------------------------------- */

static const char *stream_name[] = {"stdout", "stderr", "notify"};

static void log_line(arbor_proc *p, int idx, const char *s, size_t n) {
  if (idx == 2) { /* s6 style: a line on the notification fd means ready */
    p->ready++;
    wake(p);
    return;
  }
  if (!p->e || p->e->zombie) return;
  arbor__step_begin(p->e); /* log times are read at the step */
  arbor_str *line = arbor_str_fmt("%s: %.*s", stream_name[idx], (int)n, s);
  if (!line) return;
  arbor_engine_log(p->e, p->pn, line);
  arbor_str_unref(line);
  if (idx == 0 && p->watch) {
    if (p->qlen == ARBOR_PROC_QUEUE)
      arbor_str_unref(arbor_proc_pop_line(p));
    p->queue[(p->qstart + p->qlen++) % ARBOR_PROC_QUEUE] = arbor_str_new(s, n);
    wake(p);
  }
}

arbor_str *arbor_proc_pop_line(arbor_proc *p) {
  if (!p->qlen) return NULL;
  arbor_str *s = p->queue[p->qstart];
  p->qstart = (p->qstart + 1) % ARBOR_PROC_QUEUE;
  p->qlen--;
  return s;
}

/* Splits data into lines; a line longer than line_max is cut into pieces of
   line_max bytes. Memory stays at one partial line per stream. */
static void feed(arbor_proc *p, int idx, const char *data, size_t n) {
  if (!p->buf[idx]) {
    p->buf[idx] = malloc(p->line_max);
    if (!p->buf[idx]) return;
  }
  char *buf = p->buf[idx];
  size_t i = 0;
  while (i < n) {
    const char *nl = memchr(data + i, '\n', n - i);
    size_t take = nl ? (size_t)(nl - (data + i)) : n - i;
    while (take > 0) {
      size_t room = p->line_max - p->blen[idx];
      size_t c = take < room ? take : room;
      memcpy(buf + p->blen[idx], data + i, c);
      p->blen[idx] += c;
      i += c;
      take -= c;
      if (p->blen[idx] == p->line_max) {
        log_line(p, idx, buf, p->blen[idx]);
        p->blen[idx] = 0;
      }
    }
    if (nl) {
      log_line(p, idx, buf, p->blen[idx]);
      p->blen[idx] = 0;
      i++;
    }
  }
}

static void flush(arbor_proc *p, int idx) {
  if (p->blen[idx] > 0) log_line(p, idx, p->buf[idx], p->blen[idx]);
  p->blen[idx] = 0;
}

/* ---- output pipes ------------------------------------------------- */

/* A process's stdout and stderr are an outlet: two pipes whose write ends
   arbor keeps too, so a process's exit gives no end of file; what it wrote
   is drained once its group is gone. A node keeps one idle outlet for its
   next process (as s6 keeps a service's log pipe): a restart makes no
   pipes, and what a process that left its group writes later still goes
   to the node's log. A second process running at the same time in the
   same node gets an outlet of its own, closed when it ends. */
struct arbor_outlet {
  uv_pipe_t r[2];          /* read ends: stdout, stderr */
  int w[2];                /* write ends, given to each process */
  arbor_proc *user;        /* the process writing to them now, or NULL */
  pnode *pn;               /* not referenced: closed before the node goes */
  arbor_engine *e;
  int handles;             /* r[] not closed yet */
};

/* the idle outlets, by node: open addressing, linear probing */
static arbor_outlet **omap;
static size_t ocap, ocount;

static size_t o_slot(const pnode *pn) {
  uintptr_t h = (uintptr_t)pn;
  h ^= h >> 17;
  h *= 0x9E3779B97F4A7C15u;
  return (size_t)(h >> 7) & (ocap - 1);
}

static arbor_outlet *o_find(const pnode *pn) {
  if (!ocount) return NULL;
  for (size_t i = o_slot(pn);; i = (i + 1) & (ocap - 1)) {
    if (!omap[i]) return NULL;
    if (omap[i]->pn == pn) return omap[i];
  }
}

static int o_insert(arbor_outlet *o) {
  if ((ocount + 1) * 2 > ocap) {
    size_t ncap = ocap ? ocap * 2 : 16;
    arbor_outlet **old = omap, **nmap = calloc(ncap, sizeof *nmap);
    if (!nmap) return -1;
    size_t oldcap = ocap;
    omap = nmap;
    ocap = ncap;
    for (size_t i = 0; i < oldcap; i++)
      if (old[i]) {
        size_t j = o_slot(old[i]->pn);
        while (omap[j]) j = (j + 1) & (ocap - 1);
        omap[j] = old[i];
      }
    free(old);
  }
  size_t j = o_slot(o->pn);
  while (omap[j]) j = (j + 1) & (ocap - 1);
  omap[j] = o;
  ocount++;
  return 0;
}

static void o_remove(const arbor_outlet *o) {
  size_t i = o_slot(o->pn);
  while (omap[i] != o) i = (i + 1) & (ocap - 1);
  omap[i] = NULL;
  ocount--;
  /* re-seat the rest of the run (backward-shift deletion) */
  for (size_t j = (i + 1) & (ocap - 1); omap[j]; j = (j + 1) & (ocap - 1)) {
    arbor_outlet *x = omap[j];
    omap[j] = NULL;
    size_t k = o_slot(x->pn);
    while (omap[k]) k = (k + 1) & (ocap - 1);
    omap[k] = x;
  }
}

/* Output with no user: logged line by line as it comes. */
static void log_loose(arbor_outlet *o, int idx, const char *s, size_t n) {
  if (o->e->zombie) return;
  arbor__step_begin(o->e);
  while (n > 0) {
    const char *nl = memchr(s, '\n', n);
    size_t len = nl ? (size_t)(nl - s) : n;
    arbor_str *line = arbor_str_fmt("%s: %.*s", stream_name[idx], (int)len, s);
    if (line) arbor_engine_log(o->e, o->pn, line);
    arbor_str_unref(line);
    if (!nl) break;
    s = nl + 1;
    n -= len + 1;
  }
}

static void o_on_close(uv_handle_t *h) {
  arbor_outlet *o = h->data;
  if (--o->handles == 0) free(o);
}

/* Closes an outlet's pipes; it is freed once libuv let them go. */
static void o_shut(arbor_outlet *o) {
  for (int i = 0; i < 2; i++) {
    close(o->w[i]);
    uv_close((uv_handle_t *)&o->r[i], o_on_close);
  }
}

/* Closes an idle outlet. */
static void o_close(arbor_outlet *o) {
  o_remove(o);
  o_shut(o);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);

static void o_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  arbor_outlet *o = s->data;
  int idx = s == (uv_stream_t *)&o->r[1];
  if (nread > 0) {
    if (o->user)
      feed(o->user, idx, buf->base, (size_t)nread);
    else
      log_loose(o, idx, buf->base, (size_t)nread);
  } else if (nread < 0) { /* cannot happen while arbor holds a write end */
    uv_read_stop(s);
  }
}

/* p's outlet: its node's idle one, or a new one (*made set). NULL when the
   pipes cannot be made. */
static arbor_outlet *o_take(arbor_proc *p, int *made) {
  arbor_outlet *o = o_find(p->pn);
  if (o) {
    o_remove(o);
  } else {
    o = calloc(1, sizeof *o);
    if (!o) return NULL;
    int fds[2][2] = {{-1, -1}, {-1, -1}};
    if (pipe2(fds[0], O_CLOEXEC) < 0 || pipe2(fds[1], O_CLOEXEC) < 0) {
      for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
          if (fds[i][j] >= 0) close(fds[i][j]);
      free(o);
      return NULL;
    }
    o->pn = p->pn;
    o->e = p->e;
    for (int i = 0; i < 2; i++) {
      uv_pipe_init(p->e->loop, &o->r[i], 0);
      o->r[i].data = o;
      uv_pipe_open(&o->r[i], fds[i][0]);
      o->w[i] = fds[i][1];
      uv_read_start((uv_stream_t *)&o->r[i], on_alloc, o_on_read);
    }
    o->handles = 2;
    *made = 1;
  }
  o->user = p;
  p->outlet = o;
  return o;
}

/* p lets its outlet go, once its group is gone: what it wrote is in the
   pipes and read now. The outlet becomes its node's idle one, unless the
   node has one already or is done with processes (DONE, discarded, or its
   engine closing). */
static void o_release(arbor_proc *p) {
  arbor_outlet *o = p->outlet;
  if (!o) return;
  static char rbuf[65536];
  for (int i = 0; i < 2; i++) {
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&o->r[i], &fd) != 0) continue;
    ssize_t n;
    /* what is in the pipe (a few reads); a writer outside the group that
       keeps writing is read as it comes, on the loop */
    for (int k = 0; k < 16 && (n = read(fd, rbuf, sizeof rbuf)) > 0; k++)
      feed(p, i, rbuf, (size_t)n);
    flush(p, i);
  }
  o->user = NULL;
  p->outlet = NULL;
  const arbor_node *n = &p->pn->n;
  int keep = p->e && !p->e->zombie && !p->e->closing &&
             n->state != ARBOR_DONE && !(n->flags & ARBOR_F_DETACHED) &&
             !o_find(p->pn);
  if (!keep || o_insert(o) < 0) o_shut(o);
}

void arbor_proc_node_discarded(pnode *pn) {
  arbor_outlet *o = o_find(pn);
  if (o) o_close(o);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  static char rbuf[65536];
  (void)h;
  (void)suggested;
  *buf = uv_buf_init(rbuf, sizeof rbuf);
}

static void check(arbor_proc *p);

/* The s6-style notification pipe (fd 3): a line means ready. */
static void on_note(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  arbor_proc *p = s->data;
  if (nread > 0) {
    feed(p, 2, buf->base, (size_t)nread);
  } else if (nread < 0) { /* EOF or error: the stream is done */
    flush(p, 2);
    close_handle(p, (uv_handle_t *)s);
    check(p);
  }
}

/* systemd style: datagrams of KEY=VALUE lines on NOTIFY_SOCKET. */
static void on_sd(uv_poll_t *h, int status, int events) {
  arbor_proc *p = h->data;
  (void)status;
  (void)events;
  char buf[4096];
  ssize_t n;
  while ((n = recv(p->sd_fd, buf, sizeof buf - 1, MSG_DONTWAIT)) >= 0) {
    buf[n] = '\0';
    char *save = NULL;
    for (char *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
      if (strcmp(l, "READY=1") == 0) {
        p->ready++;
        wake(p);
      } else if (strncmp(l, "STATUS=", 7) == 0 && p->e && !p->e->zombie) {
        arbor__step_begin(p->e);
        arbor_str *line = arbor_str_fmt("status: %s", l + 7);
        if (line) arbor_engine_log(p->e, p->pn, line);
        arbor_str_unref(line);
      }
    }
  }
}

static void sd_close(arbor_proc *p) {
  if (p->sd_fd < 0) return;
  close_handle(p, (uv_handle_t *)&p->sd);
  close(p->sd_fd);
  p->sd_fd = -1;
  if (p->sd_path) {
    unlink(p->sd_path);
    char *slash = strrchr(p->sd_path, '/');
    if (slash) {
      *slash = '\0';
      rmdir(p->sd_path);
    }
    free(p->sd_path);
    p->sd_path = NULL;
  }
}

/* ---- exit and stop -------------------------------------------------- */

static void on_timer(uv_timer_t *t);

static void poll_group(arbor_proc *p) {
  if (!uv_is_active((uv_handle_t *)&p->timer))
    uv_timer_start(&p->timer, on_timer, 10, 10);
}

/* Signals p's group, the main process with it: once. The main process
   leads its own session, so it cannot leave its group (setsid and setpgid
   refuse a session leader). */
static void signal_group(arbor_proc *p, int sig) { kill(-p->pid, sig); }

/* No member of p's group is left: what it wrote is read now; its
   notification pipe gets 0.5 s more (a process that left the group may
   hold it). */
static void group_gone(arbor_proc *p) {
  p->gone = 1;
  p->kill_at = now_s() + 0.5;
  guard_del(p);
  o_release(p);
}

/* Advances a process towards its end: the group gone, its output read,
   then the owner woken. */
static void check(arbor_proc *p) {
  if (!p->exited || p->handles == 0) return;
  if (!p->gone) {
    if (group_alive(p->pid)) {
      poll_group(p);
      return;
    }
    group_gone(p);
  }
  if (p->note.data == p && !uv_is_closing((uv_handle_t *)&p->note) &&
      now_s() < p->kill_at) {
    poll_group(p);
    return;
  }
  flush(p, 2);
  close_handle(p, (uv_handle_t *)&p->note);
  sd_close(p);
  close_handle(p, (uv_handle_t *)&p->timer);
  wake(p);
}

/* p needed SIGKILL: during a stop of the tree that is not a clean stop
   (T12), so its engine counts it and names the first one. */
static void count_kill(arbor_proc *p) {
  arbor_engine *e = p->e;
  if (!e || e->zombie || !e->stop_requested || e->closing) return;
  if (!e->first_killed) {
    char *dn = arbor_node_dn_dup(&p->pn->n);
    e->first_killed = arbor_str_fmt("%s, pid %d", dn ? dn : "?", p->pid);
    free(dn);
  }
  e->killed_in_stop++;
}

static void on_timer(uv_timer_t *t) {
  arbor_proc *p = t->data;
  if (p->stopping && !p->killed && !p->gone && now_s() >= p->kill_at) {
    p->killed = 1;
    signal_group(p, SIGKILL);
    if (p->stopping == 1) count_kill(p);
  }
  check(p);
}

/* The main process ended (reaped). */
static void proc_exited(arbor_proc *p, int64_t status, int term_signal) {
  p->exited = 1;
  running_del(p);
  p->status = status;
  p->term_signal = term_signal;
  if (!group_alive(p->pid)) {
    group_gone(p);
  } else if (!p->stopping) {
    /* what the main process left in its group is stopped too */
    p->stopping = 2; /* not arbor's stop: the exit stands */
    signal_group(p, p->stop_signal);
    signal_group(p, SIGCONT);
    p->kill_at = now_s() + p->grace;
  }
  check(p);
}

/* A process was reaped with wait status st. */
static void reaped(arbor_proc *p, int st) {
  if (WIFSIGNALED(st))
    proc_exited(p, 0, WTERMSIG(st));
  else
    proc_exited(p, WEXITSTATUS(st), 0);
}

/* SIGCHLD: reaps arbor's processes (libuv reaps its own, luv's, the same
   way: waitpid on each pid it knows). */
static uv_signal_t chld;
static void on_chld(uv_signal_t *h, int sig) {
  (void)h;
  (void)sig;
  for (arbor_proc *p = running, *next; p; p = next) {
    next = p->rnext;
    int st;
    if (waitpid(p->pid, &st, WNOHANG) == p->pid) reaped(p, st);
  }
  guard_reap(guard_pid);
}

void arbor_proc_incarnation_end(pnode *pn, arbor_state s) {
  pn->pflags &= (uint16_t)~PN_PROCS;
  for (arbor_proc *p = running; p; p = p->rnext)
    if (p->pn == pn && p->incarnation == pn->n.incarnation) arbor_proc_stop(p);
  /* a node that ended DONE does not run again unless told to: its idle
     pipes are closed (what its processes still write is lost) */
  arbor_outlet *o = s == ARBOR_DONE ? o_find(pn) : NULL;
  if (o) o_close(o);
}

void arbor_proc_stop(arbor_proc *p) {
  if (p->stopping || p->gone) return;
  p->stopping = 1;
  signal_group(p, p->stop_signal);
  signal_group(p, SIGCONT);
  p->kill_at = now_s() + p->grace;
  if (p->timer.data == p && !uv_is_closing((uv_handle_t *)&p->timer))
    poll_group(p);
}

/* ---- spawning ------------------------------------------------------- */

/* NOTIFY_SOCKET=... or ARBOR_NOTIFY_FD=... */
static int notify_var(const char *kv) {
  return (kv[0] == 'N' && strncmp(kv, "NOTIFY_SOCKET=", 14) == 0) ||
         (kv[0] == 'A' && strncmp(kv, "ARBOR_NOTIFY_FD=", 16) == 0);
}

/* The child's environment: base (or arbor's) without NOTIFY_SOCKET and
   ARBOR_NOTIFY_FD (arbor's own, when it runs under a supervisor), plus
   extra when set. */
static char **child_env(char **base, char *extra) {
  if (!base) base = environ;
  size_t n = 0;
  int clean = !extra;
  for (; base[n]; n++)
    if (notify_var(base[n])) clean = 0;
  if (clean && base == environ) return NULL; /* arbor's own, as it is */
  char **env = malloc((n + 2) * sizeof *env);
  if (!env) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (!notify_var(base[i])) env[k++] = base[i];
  if (extra) env[k++] = extra;
  env[k] = NULL;
  return env;
}

/* Starts the process (spawn.c) with its output on fresh pipes handed to
   libuv; the exit is reaped on SIGCHLD (on_chld). Returns 0 or a negative
   errno. */
static int start(arbor_proc *p, const arbor_proc_opts *o, char **env,
                 uv_loop_t *loop) {
  int made = 0, note[2] = {-1, -1}, rc = 0;
  arbor_outlet *out = o_take(p, &made);
  if (!out) rc = -errno;
  int child[3] = {out ? out->w[0] : -1, out ? out->w[1] : -1, -1};
  int n = o->ready == PROC_READY_NOTIFY ? 3 : 2;
  if (rc == 0 && n == 3 && pipe2(note, O_CLOEXEC) < 0) rc = -errno;
  child[2] = note[1];
  if (!uv_is_active((uv_handle_t *)&chld)) { /* before any child can exit */
    uv_signal_init(loop, &chld);
    uv_signal_start(&chld, on_chld, SIGCHLD);
    uv_unref((uv_handle_t *)&chld);
  }
  pid_t pid = 0;
  arbor_spawn_opts so = {
      .file = o->file, .argv = o->argv, .env = env ? env : environ,
      .cwd = o->cwd, .child_fds = child, .nfds = n,
      .stdin_inherit = o->stdin_inherit, .umask_value = o->umask,
      .set_uid = o->set_uid, .set_gid = o->set_gid, .uid = o->uid,
      .gid = o->gid};
  if (rc == 0) rc = -arbor_spawn(&so, &pid);
  if (note[1] >= 0) close(note[1]);
  if (note[0] >= 0 && rc == 0)
    uv_pipe_open(&p->note, note[0]);
  else if (note[0] >= 0)
    close(note[0]);
  if (rc == 0) {
    p->pid = pid;
    running_add(p);
    p->pn->pflags |= PN_PROCS;
  } else if (out) { /* a node whose program cannot start keeps no new pipes */
    out->user = NULL;
    p->outlet = NULL;
    if (made || o_find(p->pn) || o_insert(out) < 0) o_shut(out);
  }
  return rc;
}

/* A datagram socket in a fresh private directory, for NOTIFY_SOCKET. */
static int sd_open(arbor_proc *p, const arbor_proc_opts *o, char *err,
                   size_t errlen) {
  const char *tmp = getenv("TMPDIR");
  char dir[90];
  snprintf(dir, sizeof dir, "%s/arbor-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    snprintf(err, errlen, "cannot make the notification socket: %s: %s", dir,
             strerror(errno));
    return UV_EIO;
  }
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s/notify", dir);
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
    snprintf(err, errlen, "cannot make the notification socket %s: %s",
             sa.sun_path, strerror(errno));
    if (fd >= 0) close(fd);
    rmdir(dir);
    return UV_EIO;
  }
  if (o->set_uid || o->set_gid) { /* the child must reach it */
    if (chown(dir, o->set_uid ? o->uid : (uid_t)-1,
              o->set_gid ? o->gid : (gid_t)-1) < 0 ||
        chown(sa.sun_path, o->set_uid ? o->uid : (uid_t)-1,
              o->set_gid ? o->gid : (gid_t)-1) < 0) {
      /* not root: the child has our uid anyway */
    }
  }
  p->sd_fd = fd;
  p->sd_path = strdup(sa.sun_path);
  return 0;
}

/* rc: a negative errno (libuv's errors are those too) */
static void spawn_error(const arbor_proc_opts *o, int rc, char *err,
                        size_t errlen) {
  const char *name = strerrorname_np(-rc);
  if (!name) name = uv_err_name(rc);
  if (rc == UV_ENOENT && o->cwd)
    snprintf(err, errlen, "cannot start %s in %s: %s (%s)", o->file, o->cwd,
             strerror(-rc), name);
  else
    snprintf(err, errlen, "cannot start %s: %s (%s)", o->file, strerror(-rc),
             name);
}

int arbor_proc_spawn(arbor_engine *e, pnode *pn, const arbor_proc_opts *o,
                     arbor_proc **out, char *err, size_t errlen) {
  arbor_proc *p = calloc(1, sizeof *p);
  if (!p) return UV_ENOMEM;
  uv_loop_t *loop = e->loop;
  p->e = e;
  p->pn = pn;
  arbor_node_ref(&pn->n);
  p->incarnation = pn->n.incarnation;
  p->stop_signal = o->stop_signal;
  p->grace = o->grace;
  p->line_max = o->line_max ? o->line_max : ARBOR_LINE_MAX;
  p->sd_fd = -1;
  p->slot = -1;
  p->next = procs;
  if (procs) procs->prev = p;
  procs = p;

  uv_timer_init(loop, &p->timer);
  p->timer.data = p;
  p->handles = 1;
  char extra[200];
  char *extra_var = NULL;
  int rc = 0;
  if (o->ready == PROC_READY_NOTIFY) {
    uv_pipe_init(loop, &p->note, 0);
    p->note.data = p;
    p->handles++;
    snprintf(extra, sizeof extra, "ARBOR_NOTIFY_FD=3");
    extra_var = extra;
  } else if (o->ready == PROC_READY_SYSTEMD) {
    rc = sd_open(p, o, err, errlen);
    if (rc == 0) {
      uv_poll_init(loop, &p->sd, p->sd_fd);
      p->sd.data = p;
      p->handles++;
      snprintf(extra, sizeof extra, "NOTIFY_SOCKET=%s", p->sd_path);
      extra_var = extra;
    }
  }
  char **env = rc == 0 ? child_env(o->env, extra_var) : NULL;
  if (rc == 0 && !env && (o->env || extra_var)) rc = UV_ENOMEM;
  if (rc == 0) {
    rc = start(p, o, env, loop);
    if (rc != 0) spawn_error(o, rc, err, errlen);
  }
  free(env);
  if (rc != 0) {
    p->exited = p->gone = 1;
    p->lua_gone = 1;
    close_handle(p, (uv_handle_t *)&p->note);
    close_handle(p, (uv_handle_t *)&p->timer);
    sd_close(p);
    return rc;
  }
  guard_add(p);
  if (p->note.data == p) uv_read_start((uv_stream_t *)&p->note, on_alloc, on_note);
  if (p->sd_fd >= 0) uv_poll_start(&p->sd, UV_READABLE, on_sd);
  *out = p;
  return 0;
}

/* ---- teardown ------------------------------------------------------- */

/* Kills what is left of p at once and reaps the main process. */
static void kill_now(arbor_proc *p) {
  if (!p->gone) {
    signal_group(p, SIGKILL);
    if (!p->exited) {
      int st;
      while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR) {
      }
      p->exited = 1;
      running_del(p);
      p->term_signal = SIGKILL;
    }
    p->gone = 1;
    guard_del(p);
  }
  o_release(p);
  flush(p, 2);
  close_handle(p, (uv_handle_t *)&p->note);
  close_handle(p, (uv_handle_t *)&p->timer);
  sd_close(p);
}

/* Closes the outlets of engine e, or (e NULL) of every engine on loop. */
static void close_outlets(arbor_engine *e, uv_loop_t *loop) {
  for (int again = 1; again;) { /* closing one may move others */
    again = 0;
    for (size_t i = 0; i < ocap; i++) {
      arbor_outlet *o = omap[i];
      if (o && (e ? o->e == e : o->r[0].loop == loop)) {
        o_close(o);
        again = 1;
      }
    }
  }
}

void arbor_exec_engine_free(arbor_engine *e) {
  for (arbor_proc *p = procs, *next; p; p = next) {
    next = p->next;
    if (p->e != e) continue;
    kill_now(p);
    p->e = NULL;
  }
  close_outlets(e, NULL);
  /* the close callbacks run now, on the loop the engine leaves */
  if (e->loop) uv_run(e->loop, UV_RUN_NOWAIT);
}

void arbor_exec_shutdown(uv_loop_t *loop) {
  for (arbor_proc *p = procs; p; p = p->next)
    if (p->timer.loop == loop) {
      kill_now(p);
      p->e = NULL;
    }
  close_outlets(NULL, loop);
}

/* ---- --init ---------------------------------------------------------- */

static uv_signal_t sigchld, fwd[3];
static uv_timer_t reap_again;

static void on_reap_again(uv_timer_t *t);

static void collect_pid(uv_handle_t *h, void *arg) {
  int *want = arg;
  if (h->type == UV_PROCESS && ((uv_process_t *)h)->pid == *want) *want = 0;
}

/* Reaps zombies that are not libuv's own children. A libuv child first in
   line stops the pass; it is retried on the next loop turn, once libuv has
   reaped its child. */
static void reap(uv_loop_t *loop) {
  for (;;) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 ||
        si.si_pid == 0)
      return;
    int pid = si.si_pid, st;
    if (guard_reap(pid)) continue;
    arbor_proc *mine = running;
    while (mine && mine->pid != pid) mine = mine->rnext;
    if (mine) { /* one of ours */
      if (waitpid(pid, &st, WNOHANG) == pid) reaped(mine, st);
      continue;
    }
    uv_walk(loop, collect_pid, &pid);
    if (pid == 0) { /* libuv's */
      uv_timer_start(&reap_again, on_reap_again, 1, 0);
      return;
    }
    waitpid(si.si_pid, &st, WNOHANG);
  }
}

static void on_reap_again(uv_timer_t *t) { reap(t->loop); }
static void on_sigchld(uv_signal_t *h, int sig) {
  (void)sig;
  reap(h->loop);
}

static void on_forward(uv_signal_t *h, int sig) {
  (void)h;
  for (arbor_proc *p = procs; p; p = p->next)
    if (!p->gone) kill(-p->pid, sig);
}

int arbor_exec_init_mode(uv_loop_t *loop) {
  if (getpid() != 1 && prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) return -errno;
  uv_timer_init(loop, &reap_again);
  uv_unref((uv_handle_t *)&reap_again);
  uv_signal_init(loop, &sigchld);
  uv_signal_start(&sigchld, on_sigchld, SIGCHLD);
  uv_unref((uv_handle_t *)&sigchld);
  int fsig[3] = {SIGHUP, SIGUSR1, SIGUSR2};
  for (int i = 0; i < 3; i++) {
    uv_signal_init(loop, &fwd[i]);
    uv_signal_start(&fwd[i], on_forward, fsig[i]);
    uv_unref((uv_handle_t *)&fwd[i]);
  }
  return 0;
}

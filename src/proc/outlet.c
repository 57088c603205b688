/* outlet.c: a process's stdout and stderr, read line by line into its
 * node's log.
 *
 * They are an outlet: two pipes whose write ends arbor keeps too, so a
 * process's exit gives no end of file; what it wrote is drained once its
 * group is gone. A node keeps one idle outlet for its next process (as s6
 * keeps a service's log pipe): a restart makes no pipes, and what a process
 * that left its group writes later still goes to the node's log. A second
 * process running at the same time in the same node gets an outlet of its
 * own, closed when it ends. The idle outlets are found by node in a hash
 * map.
 *
 * Lines longer than line_max are cut; stdout lines are also queued for the
 * runnable while it watches them (readiness by output), and a line on the
 * fd 3 pipe (notify.c) is a readiness notification.
 *
 * Backpressure (under --log-dir): once the node's log file holds as much
 * as it may, the outlet stops reading its pipes, so its processes block on
 * write, as under s6-log; what was read and not logged yet waits in the
 * outlet (its stash, one read at most per stream). It reads again when the
 * writer thread took the lines. A node with log_overflow "drop" never
 * waits (logfile.c drops and counts past the bound).
 */
#define _GNU_SOURCE /* pipe2 */
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/logfile.h"
#include "proc/internal.h"

struct arbor_outlet {
  uv_pipe_t r[2];          /* read ends: stdout, stderr */
  int w[2];                /* write ends, given to each process */
  arbor_proc *user;        /* the process writing to them now, or NULL */
  pnode *pn;               /* not referenced: closed before the node goes */
  arbor_engine *e;
  int handles;             /* r[] not closed yet */
  int waiting;             /* r[] not read: the log file is full */
  arbor_logfile_waiter wait;
  char *stash[2];          /* read from r[i] while the file filled: */
  size_t soff[2], slen[2]; /* logged up to soff, of slen bytes */
};

static void o_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* ---- lines ------------------------------------------------------------ */

static void log_line(arbor_proc *p, int idx, const char *s, size_t n) {
  if (idx == PROC_NOTIFY) { /* s6 style: a line means ready */
    p->ready++;
    arbor__proc_wake(p);
    return;
  }
  /* stdout at level info, stderr warn, or as the node's parser says */
  if (!arbor_engine_log_output(p->e, p->pn, idx, s, n)) return;
  if (idx == PROC_STDOUT && p->watch) {
    if (p->qlen == ARBOR_PROC_QUEUE)
      arbor_str_unref(arbor_proc_pop_line(p));
    p->queue[(p->qstart + p->qlen++) % ARBOR_PROC_QUEUE] = arbor_str_new(s, n);
    arbor__proc_wake(p);
  }
}

arbor_str *arbor_proc_pop_line(arbor_proc *p) {
  if (!p->qlen) return NULL;
  arbor_str *s = p->queue[p->qstart];
  p->qstart = (p->qstart + 1) % ARBOR_PROC_QUEUE;
  p->qlen--;
  return s;
}

/* 1 when the log file of o's node is full and o's pipes should wait. */
static int o_full(const arbor_outlet *o) {
  return arbor_engine_log_full(o->e, o->pn);
}

/* Memory stays at one partial line per stream. With o (its pipes may
   wait), stops after the line that filled the node's log file: returns
   the bytes taken. */
static size_t feed(arbor_proc *p, int idx, const char *data, size_t n,
                   const arbor_outlet *o) {
  if (!p->buf[idx]) {
    p->buf[idx] = malloc(p->line_max);
    if (!p->buf[idx]) return n;
  }
  char *buf = p->buf[idx];
  size_t i = 0;
  while (i < n) {
    const char *nl = memchr(data + i, '\n', n - i);
    size_t take = nl ? (size_t)(nl - (data + i)) : n - i;
    int logged = 0;
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
        logged = 1;
      }
    }
    if (nl) {
      log_line(p, idx, buf, p->blen[idx]);
      p->blen[idx] = 0;
      i++;
      logged = 1;
    }
    if (logged && o && o_full(o)) break;
  }
  return i;
}

void arbor__outlet_feed(arbor_proc *p, int idx, const char *data, size_t n) {
  feed(p, idx, data, n, NULL);
}

void arbor__outlet_flush(arbor_proc *p, int idx) {
  if (p->blen[idx] > 0) log_line(p, idx, p->buf[idx], p->blen[idx]);
  p->blen[idx] = 0;
}

void arbor__outlet_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  static char rbuf[65536];
  (void)h;
  (void)suggested;
  *buf = uv_buf_init(rbuf, sizeof rbuf);
}

/* ---- the idle outlets, by node: open addressing, linear probing ------- */

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

/* ---- outlets ---------------------------------------------------------- */

/* Output with no user: logged line by line as it comes; may_wait: stops
   after the line that filled the log file. Returns the bytes taken. */
static size_t log_loose(arbor_outlet *o, int idx, const char *s, size_t n,
                        int may_wait) {
  size_t took = 0;
  while (took < n) {
    const char *nl = memchr(s + took, '\n', n - took);
    size_t len = nl ? (size_t)(nl - (s + took)) : n - took;
    arbor_engine_log_output(o->e, o->pn, idx, s + took, len);
    took += len + (nl ? 1 : 0);
    if (may_wait && o_full(o)) break;
  }
  return took;
}

/* Logs what was read from stream idx, by its process or loose; may_wait:
   stops once the log file is full. Returns the bytes taken. */
static size_t o_deliver(arbor_outlet *o, int idx, const char *data, size_t n,
                        int may_wait) {
  if (o->user) return feed(o->user, idx, data, n, may_wait ? o : NULL);
  return log_loose(o, idx, data, n, may_wait);
}

/* Logs what o's stashes hold; may_wait: as o_deliver. 1 when all was. */
static int o_unstash(arbor_outlet *o, int may_wait) {
  for (int i = 0; i < 2; i++) {
    if (!o->stash[i]) continue;
    o->soff[i] += o_deliver(o, i, o->stash[i] + o->soff[i],
                            o->slen[i] - o->soff[i], may_wait);
    if (o->soff[i] < o->slen[i]) return 0;
    free(o->stash[i]);
    o->stash[i] = NULL;
  }
  return 1;
}

/* Keeps what read of stream idx was not logged, n bytes at data. */
static void o_keep(arbor_outlet *o, int idx, const char *data, size_t n) {
  char *s = malloc(n);
  if (!s) { /* out of memory: logged now */
    o_deliver(o, idx, data, n, 0);
    return;
  }
  memcpy(s, data, n);
  o->stash[idx] = s;
  o->soff[idx] = 0;
  o->slen[idx] = n;
}

/* The log file took lines: the stashes are logged, then the pipes read,
   unless the file filled again. */
static void o_resume(arbor_logfile_waiter *w) {
  arbor_outlet *o =
      (arbor_outlet *)((char *)w - offsetof(arbor_outlet, wait));
  if (!o_unstash(o, 1) || o_full(o)) {
    if (arbor_engine_log_wait(o->e, &o->wait) == 0) return;
    o_unstash(o, 0); /* no log files any more */
  }
  o->waiting = 0;
  for (int i = 0; i < 2; i++)
    uv_read_start((uv_stream_t *)&o->r[i], arbor__outlet_alloc, o_on_read);
}

/* The log file is full: o's pipes are not read until it took lines (else,
   with no log files to wait for, what o kept is logged now). */
static void o_wait(arbor_outlet *o) {
  if (o->waiting) return;
  o->wait.resume = o_resume;
  if (arbor_engine_log_wait(o->e, &o->wait) < 0) {
    o_unstash(o, 0);
    return;
  }
  o->waiting = 1;
  for (int i = 0; i < 2; i++) uv_read_stop((uv_stream_t *)&o->r[i]);
}

static void o_on_close(uv_handle_t *h) {
  arbor_outlet *o = h->data;
  if (--o->handles == 0) free(o);
}

/* Closes an outlet's pipes; it is freed once libuv let them go. What it
   read and did not log goes with them, as what is still in the pipes does
   (its node is gone, or its engine). */
static void o_shut(arbor_outlet *o) {
  arbor_engine_log_unwait(&o->wait);
  for (int i = 0; i < 2; i++) {
    free(o->stash[i]);
    o->stash[i] = NULL;
    close(o->w[i]);
    uv_close((uv_handle_t *)&o->r[i], o_on_close);
  }
}

/* Closes an idle outlet. */
static void o_close(arbor_outlet *o) {
  o_remove(o);
  o_shut(o);
}

static void o_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  arbor_outlet *o = s->data;
  int idx = s == (uv_stream_t *)&o->r[1] ? PROC_STDERR : PROC_STDOUT;
  if (nread > 0) {
    size_t n = (size_t)nread;
    /* (a read while o waits, or with a stash, would pass what waits: it
       is logged whole, behind it) */
    int may_wait = !o->waiting && !o->stash[idx];
    if (!may_wait) o_unstash(o, 0);
    size_t took = o_deliver(o, idx, buf->base, n, may_wait);
    if (took < n) o_keep(o, idx, buf->base + took, n - took);
    if (may_wait && (took < n || o_full(o))) o_wait(o);
  } else if (nread < 0) { /* cannot happen while arbor holds a write end */
    uv_read_stop(s);
  }
}

arbor_outlet *arbor__outlet_take(arbor_proc *p, int *made) {
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
      uv_pipe_init(arbor_engine_loop(p->e), &o->r[i], 0);
      o->r[i].data = o;
      uv_pipe_open(&o->r[i], fds[i][0]);
      o->w[i] = fds[i][1];
      uv_read_start((uv_stream_t *)&o->r[i], arbor__outlet_alloc, o_on_read);
    }
    o->handles = 2;
    *made = 1;
  }
  o->user = p;
  p->outlet = o;
  return o;
}

int arbor__outlet_fd(const arbor_outlet *o, int i) { return o->w[i]; }

/* A node whose program cannot start keeps no new pipes. */
void arbor__outlet_unused(arbor_proc *p, int made) {
  arbor_outlet *o = p->outlet;
  if (!o) return;
  o->user = NULL;
  p->outlet = NULL;
  if (made || o_find(p->pn) || o_insert(o) < 0) o_shut(o);
}

/* The outlet becomes its node's idle one, unless the node has one already
   or is done with processes (DONE, discarded, or its engine closing). */
void arbor__outlet_release(arbor_proc *p) {
  arbor_outlet *o = p->outlet;
  if (!o) return;
  static char rbuf[65536];
  o_unstash(o, 0); /* p's lines first, then what is in the pipes */
  for (int i = 0; i < 2; i++) {
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&o->r[i], &fd) != 0) continue;
    ssize_t n;
    /* what is in the pipe (a few reads); a writer outside the group that
       keeps writing is read as it comes, on the loop */
    for (int k = 0; k < 16 && (n = read(fd, rbuf, sizeof rbuf)) > 0; k++)
      arbor__outlet_feed(p, i, rbuf, (size_t)n);
    arbor__outlet_flush(p, i);
  }
  o->user = NULL;
  p->outlet = NULL;
  const arbor_node *n = &p->pn->n;
  int keep = p->e && !arbor_engine_closing(p->e) && n->state != ARBOR_DONE &&
             !(n->flags & ARBOR_F_DETACHED) && !o_find(p->pn);
  if (!keep || o_insert(o) < 0) o_shut(o);
}

void arbor__outlet_close_idle(pnode *pn) {
  arbor_outlet *o = o_find(pn);
  if (o) o_close(o);
}

void arbor__outlet_close_all(arbor_engine *e, uv_loop_t *loop) {
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

/* ---- reexec (restore.c) ------------------------------------------------ */

int arbor__outlet_export(arbor_proc *p, int fds[4]) {
  arbor_outlet *o = p->outlet;
  if (!o) return -1;
  o_unstash(o, 0); /* read already: logged before the exec */
  for (int i = 0; i < 2; i++) {
    uv_os_fd_t fd;
    if (uv_fileno((const uv_handle_t *)&o->r[i], &fd) != 0) return -1;
    fds[i] = fd;
    fds[2 + i] = o->w[i];
  }
  return 0;
}

arbor_outlet *arbor__outlet_adopt(arbor_proc *p, const int fds[4]) {
  arbor_outlet *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->pn = p->pn;
  o->e = p->e;
  for (int i = 0; i < 2; i++) {
    fcntl(fds[i], F_SETFD, FD_CLOEXEC);
    fcntl(fds[2 + i], F_SETFD, FD_CLOEXEC);
    uv_pipe_init(arbor_engine_loop(p->e), &o->r[i], 0);
    o->r[i].data = o;
    uv_pipe_open(&o->r[i], fds[i]);
    o->w[i] = fds[2 + i];
    uv_read_start((uv_stream_t *)&o->r[i], arbor__outlet_alloc, o_on_read);
  }
  o->handles = 2;
  o->user = p;
  p->outlet = o;
  return o;
}

/* logfile.c: durable logs (logfile.h): per DN buffers filled on the loop,
 * written by one writer thread.
 *
 * The loop and the writer share only the batch (an array of buffers taken
 * out of the files) and its state, under a mutex: IDLE, QUEUED (handed to
 * the writer), DONE (written; the writer wakes the loop, which collects
 * the results and hands over the next batch at once when lines wait). The
 * loop waits for the writer only at stop and before a reexec, and at most
 * ARBOR_LOG_WAIT seconds: a writer stuck in a hung file system is then
 * abandoned (it owns and frees the files' state once it returns).
 */
#define _GNU_SOURCE /* memrchr */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "core/logname.h"
#include "engine/logfile.h"

enum { B_IDLE = 0, B_QUEUED, B_DONE };

#define MARKS 4 /* marker lines one buffer tells where they stand */

typedef struct mark {
  size_t off;  /* where its line starts in the buffer */
  size_t len;
  uint64_t n;  /* the lines it says were dropped */
} mark;

struct arbor_logfile {
  arbor_logfiles *lf;
  char *name;          /* the DN */
  size_t nlen;
  char *fname;         /* its file's name in the directory (core/logname.h) */
  int refused;         /* its file is no regular file (reported) */
  uint64_t refused_lines; /* lines dropped since */
  char *buf;
  size_t len, cap;
  mark marks[MARKS];
  unsigned nmarks;
  uint64_t dropped;    /* dropped after the lines in buf, not told yet */
  int dirty, busy, released;
  arbor_logfile *next_dirty, *next, *prev;
};

typedef struct item {
  arbor_logfile *f;
  char *buf;
  size_t len;
  mark marks[MARKS];
  unsigned nmarks;
  size_t written; /* out: bytes written */
  int err;        /* out: 0 or an errno */
  unsigned kind;  /* out: the file type found instead of a regular file
                     (S_IFLNK, S_IFIFO, ...), or 0 */
} item;

struct arbor_logfiles {
  arbor_engine *e;
  char *dir;
  int dirfd;                /* the directory, taken once at start */
  unsigned mode;            /* of the files made */
  int closing;              /* the last write, at stop */
  uint64_t max_bytes;
  unsigned keep;
  size_t max_pending;       /* lines are dropped past this many bytes */
  size_t pending;           /* bytes in the files' buffers and the batch */
  size_t buffered;          /* of them, in the files' buffers */
  size_t early;             /* handed over once this much is buffered */
  size_t file_cap;          /* a waiting writer waits once its file has
                               this much buffered, */
  size_t pause_at;          /* or all files this much pending */
  uint64_t interval_ms;
  void (*report)(arbor_engine *e, int level, const char *text);
  uv_timer_t *timer;        /* allocated apart: freed by their close */
  uv_async_t *async;        /* the writer's "done" */
  uv_thread_t thread;
  uv_mutex_t mu;
  uv_cond_t cv;
  int state, quit, kicked;
  int abandoned;            /* the writer owns everything now */
  item *batch;
  size_t nbatch, batch_cap;
  arbor_logfile *dirty, *all;
  arbor_logfile_waiter *waiters; /* pipes that wait for lines to move */
  arbor_logfile_waiter *resuming; /* of them, being resumed */
  int failing;              /* an error was reported: writing fails */
  uint64_t failed_lines;    /* lines lost since it was reported */
  int64_t ts_sec;           /* the second ts holds */
  char ts[24];              /* "YYYY-MM-DDTHH:MM:SS" */
};

static const char *const level_text[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};

/* ---- the writer thread --------------------------------------------------- */

/* Writes n bytes; returns 0 or an errno, *done the bytes written. */
static int write_all(int fd, const char *p, size_t n, size_t *done) {
  *done = 0;
  while (*done < n) {
    ssize_t w = write(fd, p + *done, n - *done);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    *done += (size_t)w;
  }
  return 0;
}

/* Renames <name>.k-1 to .k down to <name> to .1 (keep 0: removes
   <name>), in the directory: a link planted there is renamed, never
   followed. Returns 0 or an errno. */
static int rotate(const arbor_logfiles *lf, const char *name) {
  char from[NAME_MAX + 16], to[NAME_MAX + 16];
  if (lf->keep == 0)
    return unlinkat(lf->dirfd, name, 0) < 0 && errno != ENOENT ? errno : 0;
  for (unsigned k = lf->keep; k >= 2; k--) {
    snprintf(from, sizeof from, "%s.%u", name, k - 1);
    snprintf(to, sizeof to, "%s.%u", name, k);
    if (renameat(lf->dirfd, from, lf->dirfd, to) < 0 && errno != ENOENT)
      return errno;
  }
  snprintf(to, sizeof to, "%s.1", name);
  return renameat(lf->dirfd, name, lf->dirfd, to) < 0 ? errno : 0;
}

/* Opens the file name of the directory for appending, made with the
   files' mode when missing: never through a symbolic link (O_NOFOLLOW),
   never waiting for a FIFO's reader (O_NONBLOCK), and only a regular file
   (fstat). Returns the descriptor, or a negative errno; *kind is the type
   of what is there instead of a regular file (then -EPERM), else 0. */
static int open_log(const arbor_logfiles *lf, const char *name,
                    uint64_t *size, unsigned *kind) {
  int flags = O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY |
              O_CLOEXEC;
  struct stat st;
  *kind = 0;
  int fd = openat(lf->dirfd, name, flags);
  if (fd < 0 && errno == ENOENT) {
    fd = openat(lf->dirfd, name, flags | O_CREAT | O_EXCL, (mode_t)lf->mode);
    if (fd < 0 && errno == EEXIST) fd = openat(lf->dirfd, name, flags);
  }
  if (fd < 0) {
    int err = errno;
    /* a link (ELOOP), a FIFO or socket (ENXIO), a directory (EISDIR) */
    if (fstatat(lf->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        !S_ISREG(st.st_mode)) {
      *kind = st.st_mode & S_IFMT;
      return -EPERM;
    }
    return -err;
  }
  if (fstat(fd, &st) < 0) {
    int err = errno;
    close(fd);
    return -err;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    *kind = st.st_mode & S_IFMT;
    return -EPERM;
  }
  *size = (uint64_t)st.st_size;
  return fd;
}

/* Appends it's buffer to its file, rotating it before it would pass
   max_bytes (at a line's end; a single line longer than that is written
   whole into an empty file). */
static void write_item(const arbor_logfiles *lf, item *it) {
  const char *name = it->f->fname;
  uint64_t size = 0;
  int fd = open_log(lf, name, &size, &it->kind);
  if (fd < 0) {
    it->err = -fd;
    return;
  }
  size_t off = 0;
  while (off < it->len) {
    size_t rest = it->len - off, chunk;
    const char *p = it->buf + off;
    if (size + rest <= lf->max_bytes) {
      chunk = rest;
    } else {
      size_t room = size < lf->max_bytes ? (size_t)(lf->max_bytes - size) : 0;
      const char *nl = room ? memrchr(p, '\n', room) : NULL;
      if (nl) {
        chunk = (size_t)(nl - p) + 1;
      } else if (size == 0) { /* one line longer than the limit */
        nl = memchr(p, '\n', rest);
        chunk = nl ? (size_t)(nl - p) + 1 : rest;
      } else {
        close(fd);
        if ((it->err = rotate(lf, name)) != 0) return;
        if ((fd = open_log(lf, name, &size, &it->kind)) < 0) {
          it->err = -fd;
          return;
        }
        continue;
      }
    }
    size_t done;
    it->err = write_all(fd, p, chunk, &done);
    if (it->err && done > 0) { /* a line cut short goes: the file keeps
                                  whole lines (a marker follows them) */
      const char *nl = memrchr(p, '\n', done);
      size_t whole = nl ? (size_t)(nl - p) + 1 : 0;
      if (ftruncate(fd, (off_t)(size + whole)) == 0) done = whole;
    }
    off += done;
    size += done;
    it->written = off;
    if (it->err) break;
  }
  close(fd);
}

static void free_all(arbor_logfiles *lf);

/* Writes each batch handed over, then wakes the loop; returns at quit, or
   once the batch it was writing when the loop abandoned it is done (then
   it frees what the loop left it). */
static void writer_main(void *arg) {
  arbor_logfiles *lf = arg;
  uv_mutex_lock(&lf->mu);
  for (;;) {
    while (lf->state != B_QUEUED && !lf->quit && !lf->abandoned)
      uv_cond_wait(&lf->cv, &lf->mu);
    if (lf->abandoned || lf->state != B_QUEUED) break; /* quit */
    uv_mutex_unlock(&lf->mu);
    for (size_t i = 0; i < lf->nbatch; i++) write_item(lf, &lf->batch[i]);
    uv_mutex_lock(&lf->mu);
    lf->state = B_DONE;
    uv_cond_broadcast(&lf->cv);
    if (!lf->abandoned) uv_async_send(lf->async);
  }
  int own = lf->abandoned;
  uv_mutex_unlock(&lf->mu);
  if (own) free_all(lf);
}

/* ---- the loop's side ------------------------------------------------------ */

/* The wall clock now (CLOCK_REALTIME), in seconds. */
static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int reserve(arbor_logfile *f, size_t more) {
  if (f->len + more <= f->cap) return 0;
  size_t cap = f->cap ? f->cap : 4096;
  while (cap < f->len + more) cap *= 2;
  char *b = realloc(f->buf, cap);
  if (!b) return -1;
  f->buf = b;
  f->cap = cap;
  return 0;
}

static void mark_dirty(arbor_logfiles *lf, arbor_logfile *f) {
  if (f->dirty) return;
  f->dirty = 1;
  f->next_dirty = lf->dirty;
  lf->dirty = f;
}

/* Writes the timestamp of wall (RFC 3339, UTC, milliseconds) at p; 24
   bytes. */
static void timestamp(arbor_logfiles *lf, double wall, char *p) {
  if (wall < 0) wall = 0;
  int64_t sec = (int64_t)wall;
  int ms = (int)((wall - (double)sec) * 1000.0);
  if (ms > 999) ms = 999;
  if (sec != lf->ts_sec) {
    time_t t = (time_t)sec;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(lf->ts, sizeof lf->ts, "%Y-%m-%dT%H:%M:%S", &tm);
    lf->ts_sec = sec;
  }
  memcpy(p, lf->ts, 19);
  p[19] = '.';
  p[20] = (char)('0' + ms / 100);
  p[21] = (char)('0' + ms / 10 % 10);
  p[22] = (char)('0' + ms % 10);
  p[23] = 'Z';
}

/* Appends a formatted line to f (room reserved by the caller): "<time>
   <LEVEL> <dn>: <text>", a newline in text written as \n. */
static void put_line(arbor_logfile *f, double wall, int level, const char *s,
                     size_t n) {
  char *p = f->buf + f->len;
  timestamp(f->lf, wall, p);
  p += 24;
  *p++ = ' ';
  memcpy(p, level_text[level & 3], 5);
  p += 5;
  *p++ = ' ';
  memcpy(p, f->name, f->nlen);
  p += f->nlen;
  *p++ = ':';
  *p++ = ' ';
  for (;;) {
    const char *nl = memchr(s, '\n', n);
    size_t take = nl ? (size_t)(nl - s) : n;
    memcpy(p, s, take);
    p += take;
    if (!nl) break;
    *p++ = '\\';
    *p++ = 'n';
    s += take + 1;
    n -= take + 1;
  }
  *p++ = '\n';
  f->len = (size_t)(p - f->buf);
}

/* The room put_line needs at most. */
static size_t line_room(const arbor_logfile *f, const char *s, size_t n) {
  size_t extra = 0;
  for (const char *q = s, *end = s + n; (q = memchr(q, '\n', (size_t)(end - q)));
       q++)
    extra++;
  return 24 + 7 + f->nlen + 2 + n + extra + 1;
}

/* Appends the marker of f->dropped lines, if there is room for one more. */
static void put_marker(arbor_logfile *f, double wall) {
  if (!f->dropped || f->nmarks == MARKS) return;
  char text[64];
  int tl = snprintf(text, sizeof text, "... %llu lines dropped",
                    (unsigned long long)f->dropped);
  if (reserve(f, line_room(f, text, (size_t)tl)) < 0) return;
  mark *m = &f->marks[f->nmarks++];
  m->off = f->len;
  put_line(f, wall, ARBOR_LOG_WARN, text, (size_t)tl);
  m->len = f->len - m->off;
  m->n = f->dropped;
  f->lf->pending += m->len;
  f->lf->buffered += m->len;
  f->dropped = 0;
}

static void on_tick(uv_timer_t *t);

/* Hands the buffers over soon: enough of them wait. */
static void kick(arbor_logfiles *lf) {
  if (lf->kicked || lf->closing) return;
  lf->kicked = 1;
  uv_timer_start(lf->timer, on_tick, 0, lf->interval_ms);
}

void arbor_logfile_append(arbor_engine *e, arbor_logfile *f, double wall,
                          int level, const char *s, size_t n) {
  arbor_logfiles *lf = f->lf;
  size_t room = line_room(f, s, n);
  if (lf->pending + room > lf->max_pending || reserve(f, room + 96) < 0) {
    f->dropped++; /* told by a marker, at the next line or flush */
    e->log_lines_dropped++;
    if (lf->failing) lf->failed_lines++;
    mark_dirty(lf, f);
    return;
  }
  put_marker(f, wall);
  put_line(f, wall, level, s, n);
  lf->pending += room;
  lf->buffered += room;
  mark_dirty(lf, f);
  if (lf->buffered >= lf->early) kick(lf);
}

int arbor_logfile_full(const arbor_logfile *f) {
  const arbor_logfiles *lf = f->lf;
  return f->len >= lf->file_cap || lf->pending >= lf->pause_at;
}

/* Puts w on the list at head. */
static void push_waiter(arbor_logfile_waiter **head, arbor_logfile_waiter *w) {
  w->head = head;
  w->prev = NULL;
  w->next = *head;
  if (*head) (*head)->prev = w;
  *head = w;
}

/* (No kick: a file full of buffered lines kicked when it filled, and one
   waiting for the writer is resumed when the writer is done; a kick here
   would spin the loop while the writer hangs.) */
void arbor_logfile_wait(arbor_logfiles *lf, arbor_logfile_waiter *w) {
  if (w->head) return;
  push_waiter(&lf->waiters, w);
}

void arbor_logfile_unwait(arbor_logfile_waiter *w) {
  if (!w->head) return;
  if (w->prev) w->prev->next = w->next;
  else *w->head = w->next;
  if (w->next) w->next->prev = w->prev;
  w->head = NULL;
  w->next = w->prev = NULL;
}

/* Lines moved on: every waiter is resumed, one at a time (one still full
   waits again; one that a resume made stop waiting is not called). */
static void resume_waiters(arbor_logfiles *lf) {
  while (lf->waiters) {
    arbor_logfile_waiter *w = lf->waiters;
    arbor_logfile_unwait(w);
    push_waiter(&lf->resuming, w);
  }
  while (lf->resuming) {
    arbor_logfile_waiter *w = lf->resuming;
    arbor_logfile_unwait(w);
    w->resume(w);
  }
}

static void free_file(arbor_logfiles *lf, arbor_logfile *f) {
  if (f->prev) f->prev->next = f->next;
  else lf->all = f->next;
  if (f->next) f->next->prev = f->prev;
  free(f->buf);
  free(f->name);
  free(f->fname);
  free(f);
}

arbor_logfile *arbor_logfile_new(arbor_logfiles *lf, const char *dn,
                                 size_t len) {
  arbor_logfile *f = calloc(1, sizeof *f);
  char *name = malloc(len + 1), *fname = malloc(ARBOR_LOGNAME_MAX + 5);
  if (!f || !name || !fname) {
    free(f);
    free(name);
    free(fname);
    return NULL;
  }
  memcpy(name, dn, len);
  name[len] = '\0';
  size_t fl = arbor_logname(dn, len, fname);
  memcpy(fname + fl, ".log", 5);
  f->lf = lf;
  f->name = name;
  f->nlen = len;
  f->fname = fname;
  f->next = lf->all;
  if (lf->all) lf->all->prev = f;
  lf->all = f;
  return f;
}

void arbor_logfile_release(arbor_logfiles *lf, arbor_logfile *f) {
  if (f->dirty || f->busy)
    f->released = 1;
  else
    free_file(lf, f);
}

/* Counts the lines of it that did not reach the file: returns those lost
   now, and in *told also those its lost markers told (lost before, and
   counted then), all of which the marker put back on its file tells. */
static uint64_t lost_lines(const item *it, uint64_t *told) {
  uint64_t lost = 0, marker_lines = 0;
  *told = 0;
  for (unsigned i = 0; i < it->nmarks; i++)
    if (it->marks[i].off + it->marks[i].len > it->written) {
      *told += it->marks[i].n;
      marker_lines++;
    }
  size_t from = it->written;
  /* a line cut by the failure is lost whole */
  while (from > 0 && it->buf[from - 1] != '\n') from--;
  for (const char *q = it->buf + from, *end = it->buf + it->len;
       (q = memchr(q, '\n', (size_t)(end - q))); q++)
    lost++;
  return lost - marker_lines;
}

/* Puts a marker of n lines at the start of f's buffer. */
static void prepend_marker(arbor_logfile *f, uint64_t n, double wall) {
  uint64_t later = f->dropped;
  size_t len = f->len;
  unsigned nm = f->nmarks;
  if (nm == MARKS || len == 0) { /* told with the next ones */
    f->dropped += n;
    return;
  }
  mark saved[MARKS];
  memcpy(saved, f->marks, sizeof saved);
  f->dropped = n;
  f->nmarks = 0;
  put_marker(f, wall); /* at the end, moved to the front below */
  if (f->nmarks == 0) {
    f->dropped = later + n;
    f->nmarks = nm;
    memcpy(f->marks, saved, sizeof saved);
    return;
  }
  mark m = f->marks[0];
  char tmp[128];
  memcpy(tmp, f->buf + m.off, m.len);
  memmove(f->buf + m.len, f->buf, len);
  memcpy(f->buf, tmp, m.len);
  m.off = 0;
  f->marks[0] = m;
  for (unsigned i = 0; i < nm; i++) {
    f->marks[i + 1] = saved[i];
    f->marks[i + 1].off += m.len;
  }
  f->nmarks = nm + 1;
  f->dropped = later;
}

/* What is at a log file's place instead of a regular file. */
static const char *kind_name(unsigned kind) {
  switch (kind) {
  case S_IFLNK: return "a symbolic link";
  case S_IFIFO: return "a FIFO";
  case S_IFDIR: return "a directory";
  case S_IFSOCK: return "a socket";
  case S_IFCHR: return "a character device";
  case S_IFBLK: return "a block device";
  default: return "not a file";
  }
}

/* Reports text at level (lf->report; on stderr once the tree is gone). */
static void say(arbor_logfiles *lf, int level, const char *text) {
  if (lf->report) lf->report(lf->e, level, text);
}

/* The writer is done with the batch: frees it, counts what failed and
   reports the first failure (and the end of failures); a file that is no
   regular file is reported once for itself (and when it is one again). At
   stop, each failure is told with the lines it lost. */
static void collect(arbor_logfiles *lf) {
  arbor_engine *e = lf->e;
  char msg[PATH_MAX + NAME_MAX + 256];
  int failed = 0;
  double wall = wall_now();
  for (size_t i = 0; i < lf->nbatch; i++) {
    item *it = &lf->batch[i];
    arbor_logfile *f = it->f;
    f->busy = 0;
    lf->pending -= it->len;
    if (it->err) {
      uint64_t told, lost = lost_lines(it, &told);
      e->log_lines_dropped += lost;
      if (!f->released && !lf->closing) {
        prepend_marker(f, lost + told, wall);
        mark_dirty(lf, f); /* retried at the next flush */
      }
      if (it->kind) { /* refused: told once for this file */
        f->refused_lines += lost;
        if (!f->refused) {
          f->refused = 1;
          snprintf(msg, sizeof msg,
                   "log file %s/%s: refused: not a regular file (%s); its "
                   "lines are dropped (counted) until it is one",
                   lf->dir, f->fname, kind_name(it->kind));
          say(lf, ARBOR_LOG_ERROR, msg);
        }
      } else if (lf->closing) { /* no retry: each is told */
        snprintf(msg, sizeof msg,
                 "log file %s/%s: %s: %llu lines not written (arbor is "
                 "stopping)",
                 lf->dir, f->fname, strerror(it->err),
                 (unsigned long long)(lost + told));
        say(lf, ARBOR_LOG_ERROR, msg);
      } else {
        lf->failed_lines += lost;
        if (!failed && !lf->failing) {
          snprintf(msg, sizeof msg,
                   "log file %s/%s: %s: its lines are dropped (counted, and "
                   "a marker line says how many) and writing is retried at "
                   "each flush",
                   lf->dir, f->fname, strerror(it->err));
          lf->failing = 1;
          say(lf, ARBOR_LOG_ERROR, msg);
        }
        failed = 1;
      }
    } else if (f->refused) {
      f->refused = 0;
      snprintf(msg, sizeof msg,
               "log file %s/%s: a regular file again: written (%llu lines "
               "were dropped)",
               lf->dir, f->fname, (unsigned long long)f->refused_lines);
      f->refused_lines = 0;
      say(lf, ARBOR_LOG_WARN, msg);
    }
    free(it->buf);
    if (f->released && !f->dirty) free_file(lf, f);
  }
  lf->nbatch = 0;
  if (!failed && lf->failing && !lf->closing) {
    lf->failing = 0;
    snprintf(msg, sizeof msg,
             "log files: writing works again (%llu lines were dropped)",
             (unsigned long long)lf->failed_lines);
    lf->failed_lines = 0;
    say(lf, ARBOR_LOG_WARN, msg);
  }
}

/* Takes the dirty files' buffers into the batch, each with the marker of
   the lines dropped after its last one (so a burst's end is told though
   its DN logs no more). 0 when there was none. */
static int take(arbor_logfiles *lf) {
  size_t n = 0;
  for (arbor_logfile *f = lf->dirty; f; f = f->next_dirty) n++;
  if (!n) return 0;
  if (n > lf->batch_cap) {
    item *b = realloc(lf->batch, n * sizeof *b);
    if (!b) return 0;
    lf->batch = b;
    lf->batch_cap = n;
  }
  double wall = wall_now();
  arbor_logfile *f = lf->dirty;
  lf->dirty = NULL;
  lf->nbatch = 0;
  for (arbor_logfile *next; f; f = next) {
    next = f->next_dirty;
    f->dirty = 0;
    if (f->dropped) put_marker(f, wall); /* a DN gone too: at stop */
    if (f->len == 0) {
      if (f->released && !f->busy) free_file(lf, f);
      continue;
    }
    item *it = &lf->batch[lf->nbatch++];
    memset(it, 0, sizeof *it);
    it->f = f;
    it->buf = f->buf;
    it->len = f->len;
    memcpy(it->marks, f->marks, sizeof it->marks);
    it->nmarks = f->nmarks;
    lf->buffered -= f->len;
    f->buf = NULL;
    f->len = f->cap = 0;
    f->nmarks = 0;
    f->busy = 1;
  }
  return lf->nbatch > 0;
}

/* The writer's state (under the lock). */
static int state_of(arbor_logfiles *lf) {
  uv_mutex_lock(&lf->mu);
  int st = lf->state;
  uv_mutex_unlock(&lf->mu);
  return st;
}

/* Sets the writer's state; B_QUEUED wakes it. */
static void set_state(arbor_logfiles *lf, int st) {
  uv_mutex_lock(&lf->mu);
  lf->state = st;
  if (st == B_QUEUED) uv_cond_signal(&lf->cv);
  uv_mutex_unlock(&lf->mu);
}

/* Collects what the writer is done with and hands it the buffers, when it
   is idle; force: even when few lines wait. */
static void move_on(arbor_logfiles *lf, int force) {
  int st = state_of(lf);
  if (st == B_QUEUED) return; /* the writer is busy: it wakes us */
  if (st == B_DONE) {
    collect(lf);
    set_state(lf, B_IDLE);
  }
  if (!force && lf->buffered < lf->early && !lf->waiters) return;
  if (take(lf)) set_state(lf, B_QUEUED);
}

void arbor_logfiles_flush(arbor_engine *e) {
  if (e->logfiles) move_on(e->logfiles, 1);
}

static void on_tick(uv_timer_t *t) {
  arbor_logfiles *lf = t->data;
  if (lf->kicked) {
    lf->kicked = 0;
    uv_timer_start(lf->timer, on_tick, lf->interval_ms, lf->interval_ms);
  }
  move_on(lf, 1);
  resume_waiters(lf);
}

/* The writer is done with a batch: the next one goes at once when lines
   wait (a pipe waits on them, or more than a little is buffered). */
static void on_written(uv_async_t *h) {
  arbor_logfiles *lf = h->data;
  move_on(lf, 0);
  resume_waiters(lf);
}

static void report_stderr(arbor_engine *e, int level, const char *text) {
  (void)e;
  (void)level;
  fprintf(stderr, "arbor: %s\n", text);
}

static void on_handle_closed(uv_handle_t *h) { free(h); }

/* A root arbor writes only in a directory that root owns and that neither
   its group nor others may write (as logrotate refuses insecure parents):
   else whoever may write it plants links and FIFOs there. Returns 0, or
   -EPERM with the reason in why. */
static int check_dir(int dirfd, char *why, size_t len) {
  struct stat st;
  if (fstat(dirfd, &st) < 0) return -errno;
  if (geteuid() != 0) return 0;
  unsigned mode = (unsigned)st.st_mode & 07777;
  if (st.st_uid != 0)
    snprintf(why, len, "it is owned by uid %u, not by root",
             (unsigned)st.st_uid);
  else if (mode & S_IWOTH)
    snprintf(why, len, "it is writable by others (mode %04o)", mode);
  else if (mode & S_IWGRP)
    snprintf(why, len, "it is writable by its group (mode %04o)", mode);
  else
    return 0;
  size_t n = strlen(why);
  snprintf(why + n, len - n,
           " (a root arbor writes logs only in a directory that root owns "
           "and that neither its group nor others may write)");
  return -EPERM;
}

int arbor_logfiles_open(arbor_engine *e, const arbor_logfile_opts *o,
                        char *why, size_t whylen) {
  uv_loop_t *loop = arbor_engine_loop(e);
  if (why && whylen) why[0] = '\0';
  if (!loop || e->logfiles) return -EINVAL;
  if (mkdir(o->dir, 0750) < 0 && errno != EEXIST) return -errno;
  int dirfd = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0) return -errno;
  char tmp[8];
  int r = check_dir(dirfd, why ? why : tmp, why ? whylen : sizeof tmp);
  if (r == 0 && faccessat(dirfd, ".", W_OK | X_OK, AT_EACCESS) < 0) r = -errno;
  if (r < 0) {
    close(dirfd);
    return r;
  }
  arbor_logfiles *lf = calloc(1, sizeof *lf);
  if (!lf) {
    close(dirfd);
    return -ENOMEM;
  }
  lf->dir = strdup(o->dir);
  if (!lf->dir) {
    free(lf);
    close(dirfd);
    return -ENOMEM;
  }
  lf->e = e;
  lf->dirfd = dirfd;
  lf->mode = o->mode ? o->mode & 0777 : 0640;
  lf->max_bytes = o->max_bytes ? o->max_bytes : 10u << 20;
  lf->keep = o->keep;
  lf->max_pending = o->max_pending ? o->max_pending : 8u << 20;
  lf->early = lf->max_pending / 8;
  lf->file_cap = lf->max_pending / 8;
  lf->pause_at = lf->max_pending / 2;
  lf->interval_ms = o->interval > 0 ? (uint64_t)(o->interval * 1000) : 1000;
  if (!lf->interval_ms) lf->interval_ms = 1;
  lf->report = o->report;
  lf->ts_sec = -1;
  lf->timer = malloc(sizeof *lf->timer);
  lf->async = malloc(sizeof *lf->async);
  if (!lf->timer || !lf->async) goto fail;
  if (uv_async_init(loop, lf->async, on_written) != 0) goto fail;
  lf->async->data = lf;
  uv_unref((uv_handle_t *)lf->async);
  if (uv_mutex_init(&lf->mu) != 0) goto fail_async;
  if (uv_cond_init(&lf->cv) != 0) {
    uv_mutex_destroy(&lf->mu);
    goto fail_async;
  }
  if (uv_thread_create(&lf->thread, writer_main, lf) != 0) {
    uv_cond_destroy(&lf->cv);
    uv_mutex_destroy(&lf->mu);
    goto fail_async;
  }
  uv_timer_init(loop, lf->timer);
  lf->timer->data = lf;
  uv_timer_start(lf->timer, on_tick, lf->interval_ms, lf->interval_ms);
  uv_unref((uv_handle_t *)lf->timer);
  e->logfiles = lf;
  return 0;
fail_async:
  uv_close((uv_handle_t *)lf->async, on_handle_closed);
  lf->async = NULL;
fail:
  close(dirfd);
  free(lf->timer);
  free(lf->async);
  free(lf->dir);
  free(lf);
  return -ENOMEM;
}

/* Lines in buf (len bytes) that are not marker lines, plus those its
   markers tell. */
static uint64_t lines_in(const char *buf, size_t len, const mark *marks,
                         unsigned nmarks) {
  uint64_t n = 0;
  for (const char *q = buf, *end = buf + len;
       q < end && (q = memchr(q, '\n', (size_t)(end - q))); q++)
    n++;
  for (unsigned i = 0; i < nmarks; i++) n += marks[i].n - 1; /* its line */
  return n;
}

/* The lines logged that are not written yet: the batch's (the writer may
   be writing them: only read here) and the buffers'. */
static uint64_t unwritten(const arbor_logfiles *lf, int batch) {
  uint64_t n = 0;
  for (size_t i = 0; batch && i < lf->nbatch; i++) {
    const item *it = &lf->batch[i];
    n += lines_in(it->buf, it->len, it->marks, it->nmarks);
  }
  for (const arbor_logfile *f = lf->all; f; f = f->next)
    n += lines_in(f->buf, f->len, f->marks, f->nmarks) + f->dropped;
  return n;
}

/* Waits until the writer is done with its batch, up to deadline
   (uv_hrtime), and collects what it reports. Returns 0, or -1 when it is
   still busy at the deadline: then, when abandon is set, the writer is
   left to itself (the loop touches lf no more). */
static int wait_writer(arbor_logfiles *lf, uint64_t deadline, int abandon) {
  uv_mutex_lock(&lf->mu);
  while (lf->state == B_QUEUED) {
    uint64_t now = uv_hrtime();
    if (now < deadline) {
      uv_cond_timedwait(&lf->cv, &lf->mu, deadline - now);
      continue;
    }
    char msg[160];
    snprintf(msg, sizeof msg,
             "log files: the writer did not finish within %d s (a hung "
             "disk or mount?): %llu lines not written",
             ARBOR_LOG_WAIT, (unsigned long long)unwritten(lf, 1));
    void (*report)(arbor_engine *, int, const char *) = lf->report;
    arbor_engine *e = lf->e;
    if (abandon) lf->abandoned = 1; /* lf is the writer's from now on */
    uv_mutex_unlock(&lf->mu);
    if (report) report(e, ARBOR_LOG_ERROR, msg);
    return -1;
  }
  int done = lf->state == B_DONE;
  if (done) lf->state = B_IDLE;
  uv_mutex_unlock(&lf->mu);
  if (done) collect(lf);
  return 0;
}

void arbor_logfiles_sync(arbor_engine *e) {
  arbor_logfiles *lf = e->logfiles;
  if (!lf) return;
  uint64_t deadline = uv_hrtime() + (uint64_t)ARBOR_LOG_WAIT * 1000000000u;
  for (;;) {
    if (wait_writer(lf, deadline, 0) < 0) return; /* the exec ends it */
    if (!take(lf)) return;
    set_state(lf, B_QUEUED);
  }
}

/* Frees the files and the writer's state (the writer has returned, or it
   frees them itself once abandoned). */
static void free_all(arbor_logfiles *lf) {
  for (size_t i = 0; i < lf->nbatch; i++) free(lf->batch[i].buf);
  while (lf->all) free_file(lf, lf->all);
  uv_cond_destroy(&lf->cv);
  uv_mutex_destroy(&lf->mu);
  free(lf->batch);
  free(lf->dir);
  close(lf->dirfd);
  free(lf);
}

void arbor_logfiles_close(arbor_engine *e) {
  arbor_logfiles *lf = e->logfiles;
  if (!lf) return;
  uv_thread_t writer = lf->thread;
  uint64_t deadline = uv_hrtime() + (uint64_t)ARBOR_LOG_WAIT * 1000000000u;
  /* the tree may be gone: what collect says goes to stderr */
  lf->report = report_stderr;
  lf->closing = 1;
  e->logfiles = NULL;
  while (lf->waiters) arbor_logfile_unwait(lf->waiters);
  while (lf->resuming) arbor_logfile_unwait(lf->resuming);
  uv_close((uv_handle_t *)lf->timer, on_handle_closed);
  uv_close((uv_handle_t *)lf->async, on_handle_closed);
  int ok = wait_writer(lf, deadline, 1) == 0;
  if (ok && take(lf)) {
    set_state(lf, B_QUEUED);
    ok = wait_writer(lf, deadline, 1) == 0;
  }
  if (!ok) { /* the writer frees everything when (if ever) it returns */
    pthread_detach((pthread_t)writer);
    return;
  }
  uv_mutex_lock(&lf->mu);
  lf->quit = 1;
  uv_cond_signal(&lf->cv);
  uv_mutex_unlock(&lf->mu);
  uv_thread_join(&lf->thread);
  lf->nbatch = 0;
  free_all(lf);
}

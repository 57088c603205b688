/* logfile.h: durable logs (`arbor run --log-dir DIR`): each DN's lines in
 * DIR/<dn>.log, rotated by size, written off the engine's loop.
 *
 * The engine appends a formatted line to its file's buffer in memory (a
 * memcpy); a timer hands the buffers to a writer thread every interval,
 * which appends them to the files and rotates them (rename-based: .log
 * becomes .log.1, .1 becomes .2, ... up to keep). What the buffers may hold
 * is bounded: a writer that can wait (a process's pipe, proc/outlet.c)
 * waits once its file is full (arbor_logfile_full, arbor_logfile_wait);
 * past the bound lines are dropped and counted, and the file gets a marker
 * line "... N lines dropped" (at the next line, or flush). A failed write
 * (a full disk) drops its lines the same way, is reported once and retried
 * at the next flush; nothing stops the tree. Only regular files are written: a link,
 * FIFO, directory or device at a file's place is refused (reported once,
 * its lines dropped and counted). A DN too long for a file name gets a cut
 * name and a hash (core/logname.h).
 */
#ifndef ARBOR_LOGFILE_H
#define ARBOR_LOGFILE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

typedef struct arbor_logfiles arbor_logfiles;
typedef struct arbor_logfile arbor_logfile;

/* Seconds the stop and a reexec wait for the writer thread, at most: past
   them the lines not written are told on stderr and arbor goes on. */
#define ARBOR_LOG_WAIT 5

/* A writer of lines that can wait (a process's pipe, stopped from being
   read): resume is called once, on the loop, when lines moved on. */
typedef struct arbor_logfile_waiter {
  void (*resume)(struct arbor_logfile_waiter *w);
  struct arbor_logfile_waiter *next, *prev;
  struct arbor_logfile_waiter **head; /* the list it is on, or NULL */
} arbor_logfile_waiter;

typedef struct arbor_logfile_opts {
  const char *dir;
  uint64_t max_bytes;  /* a file is rotated before it passes this size */
  unsigned keep;       /* rotated files kept: <dn>.log.1 .. .keep */
  double interval;     /* seconds between flushes */
  size_t max_pending;  /* bytes buffered before lines are dropped */
  unsigned mode;       /* of the files made (0: 0640) */
  /* told of a write error (once until writing works again) and of its
     end; text is borrowed. May log (it runs on the loop, not in append). */
  void (*report)(arbor_engine *e, int level, const char *text);
} arbor_logfile_opts;

/* Starts writing e's log files (e's loop; the real clock only): the
   directory is made 0750 when missing and taken once (files are opened
   relative to it). Returns 0 or a negative errno (the directory cannot be
   made or written; -EPERM with the reason in why: a root arbor and a
   directory that someone else may write). */
int arbor_logfiles_open(arbor_engine *e, const arbor_logfile_opts *o,
                        char *why, size_t whylen);
/* The file of a DN (len bytes), or NULL on OOM. */
arbor_logfile *arbor_logfile_new(arbor_logfiles *lf, const char *dn,
                                 size_t len);
/* Buffers one line of f: its wall-clock time, level and text. Cheap: no
   system call. */
void arbor_logfile_append(arbor_engine *e, arbor_logfile *f, double wall,
                          int level, const char *s, size_t n);
/* 1 when a writer that can wait should: f's buffer holds as much as one
   file may (1/8 of max_pending), or all files half of max_pending. Lines
   appended anyway are dropped only past max_pending. */
int arbor_logfile_full(const arbor_logfile *f);
/* w waits (once) until the writer thread took or wrote lines. */
void arbor_logfile_wait(arbor_logfiles *lf, arbor_logfile_waiter *w);
/* w waits no more (it may not be waiting). */
void arbor_logfile_unwait(arbor_logfile_waiter *w);
/* f's owner is gone: f is freed once its lines are written. */
void arbor_logfile_release(arbor_logfiles *lf, arbor_logfile *f);
/* Hands what is buffered to the writer now (unless it is busy). */
void arbor_logfiles_flush(arbor_engine *e);
/* Writes what is buffered (waiting for the writer up to ARBOR_LOG_WAIT
   seconds, then abandoning it), stops the writer and frees everything;
   what fails is told on stderr. e->logfiles becomes NULL. */
void arbor_logfiles_close(arbor_engine *e);
/* Waits until every line logged so far is written, up to ARBOR_LOG_WAIT
   seconds (before a reexec: the writer thread does not cross the exec). */
void arbor_logfiles_sync(arbor_engine *e);

#endif

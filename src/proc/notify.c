/* notify.c: readiness notifications from a process. s6 style, a line on
 * the pipe the child has as fd 3 (ARBOR_NOTIFY_FD=3); systemd style,
 * READY=1 in a datagram on the socket named by NOTIFY_SOCKET (STATUS=
 * lines go to the node's log), and there the watchdog's WATCHDOG=1,
 * WATCHDOG=trigger and EXTEND_TIMEOUT_USEC=. Each notification wakes the
 * owner.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "proc/internal.h"

extern char **environ;

/* What advances a process whose fd 3 pipe ended (proc.c's, given to
   arbor__notify_start: proc.c is above this file). */
static void (*pipe_ended)(arbor_proc *);

/* A variable of the notification protocols: NOTIFY_SOCKET=...,
   ARBOR_NOTIFY_FD=..., WATCHDOG_USEC=..., WATCHDOG_PID=... */
static inline int notify_var(const char *kv) {
  return (kv[0] == 'N' && strncmp(kv, "NOTIFY_SOCKET=", 14) == 0) ||
         (kv[0] == 'A' && strncmp(kv, "ARBOR_NOTIFY_FD=", 16) == 0) ||
         (kv[0] == 'W' && (strncmp(kv, "WATCHDOG_USEC=", 14) == 0 ||
                           strncmp(kv, "WATCHDOG_PID=", 13) == 0));
}

char **arbor__notify_env(char **base, char *const *vars) {
  if (!base) base = environ;
  size_t n = 0, nv = 0;
  while (vars && vars[nv]) nv++;
  int clean = nv == 0;
  for (; base[n]; n++)
    if (notify_var(base[n])) clean = 0;
  if (clean && base == environ) return NULL; /* arbor's own, as it is */
  char **env = malloc((n + nv + 1) * sizeof *env);
  if (!env) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (!notify_var(base[i])) env[k++] = base[i];
  for (size_t i = 0; i < nv; i++) env[k++] = vars[i];
  env[k] = NULL;
  return env;
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

/* One KEY=VALUE line of a datagram: READY=1 and the watchdog's wake the
   owner, STATUS= goes to the log. */
static void sd_line(arbor_proc *p, const char *l) {
  if (strcmp(l, "READY=1") == 0) {
    p->ready++;
  } else if (strcmp(l, "WATCHDOG=1") == 0) {
    p->pings++;
  } else if (strcmp(l, "WATCHDOG=trigger") == 0) {
    p->triggered = 1;
  } else if (strncmp(l, "EXTEND_TIMEOUT_USEC=", 20) == 0) {
    char *end;
    double usec = strtod(l + 20, &end);
    if (end == l + 20 || *end || !(usec >= 0)) return;
    p->extend = usec / 1e6 > 0 ? usec / 1e6 : 1e-6;
  } else {
    if (strncmp(l, "STATUS=", 7) == 0)
      arbor__proc_log(p->e, p->pn, "status", l + 7, strlen(l + 7));
    return;
  }
  arbor__proc_wake(p);
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
    for (char *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
      sd_line(p, l);
  }
}

static void sd_close(arbor_proc *p) {
  if (p->sd_fd < 0) return;
  arbor__proc_close_handle(p, (uv_handle_t *)&p->sd);
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

/* s6 style: a line means ready (outlet.c counts it). */
static void on_note(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  arbor_proc *p = s->data;
  if (nread > 0) {
    arbor__outlet_feed(p, PROC_NOTIFY, buf->base, (size_t)nread);
  } else if (nread < 0) { /* EOF or error: the stream is done */
    arbor__outlet_flush(p, PROC_NOTIFY);
    arbor__proc_close_handle(p, (uv_handle_t *)s);
    pipe_ended(p);
  }
}

int arbor__notify_open(arbor_proc *p, const arbor_proc_opts *o,
                       uv_loop_t *loop, arbor_notify_vars *vars, char *err,
                       size_t errlen) {
  int n = 0;
  vars->v[0] = NULL;
  if (o->ready == PROC_READY_NOTIFY) {
    uv_pipe_init(loop, &p->note, 0);
    p->note.data = p;
    p->handles++;
    snprintf(vars->buf[n], sizeof vars->buf[n], "ARBOR_NOTIFY_FD=3");
    vars->v[n] = vars->buf[n];
    n++;
  }
  if (o->ready == PROC_READY_SYSTEMD || o->watchdog > 0) {
    int rc = sd_open(p, o, err, errlen);
    if (rc != 0) return rc;
    uv_poll_init(loop, &p->sd, p->sd_fd);
    p->sd.data = p;
    p->handles++;
    snprintf(vars->buf[n], sizeof vars->buf[n], "NOTIFY_SOCKET=%s", p->sd_path);
    vars->v[n] = vars->buf[n];
    n++;
  }
  if (o->watchdog > 0) { /* as systemd: the child's pid, written by it */
    snprintf(vars->buf[n], sizeof vars->buf[n], "WATCHDOG_USEC=%.0f",
             o->watchdog * 1e6);
    vars->v[n] = vars->buf[n];
    n++;
    snprintf(p->pid_var, sizeof p->pid_var, "WATCHDOG_PID=");
    vars->v[n++] = p->pid_var;
  }
  vars->v[n] = NULL;
  return 0;
}

void arbor__notify_start(arbor_proc *p, void (*ended)(arbor_proc *)) {
  pipe_ended = ended;
  if (p->note.data == p)
    uv_read_start((uv_stream_t *)&p->note, arbor__outlet_alloc, on_note);
  if (p->sd_fd >= 0) uv_poll_start(&p->sd, UV_READABLE, on_sd);
}

int arbor__notify_listening(const arbor_proc *p) {
  return p->note.data == p && !uv_is_closing((const uv_handle_t *)&p->note);
}

void arbor__notify_close(arbor_proc *p) {
  arbor__outlet_flush(p, PROC_NOTIFY);
  arbor__proc_close_handle(p, (uv_handle_t *)&p->note);
  sd_close(p);
}

/* ---- reexec (proc.c) ---------------------------------------------------- */

void arbor__notify_export(const arbor_proc *p, int *note, int *sd,
                          const char **sd_path) {
  uv_os_fd_t fd;
  *note = p->note.data == p && !uv_is_closing((const uv_handle_t *)&p->note) &&
                  uv_fileno((const uv_handle_t *)&p->note, &fd) == 0
              ? fd
              : -1;
  *sd = p->sd_fd;
  *sd_path = p->sd_path;
}

int arbor__notify_adopt(arbor_proc *p, uv_loop_t *loop, int note, int sd,
                        const char *sd_path) {
  if (note >= 0) {
    fcntl(note, F_SETFD, FD_CLOEXEC);
    uv_pipe_init(loop, &p->note, 0);
    p->note.data = p;
    p->handles++;
    uv_pipe_open(&p->note, note);
  }
  if (sd >= 0) {
    fcntl(sd, F_SETFD, FD_CLOEXEC);
    p->sd_fd = sd;
    p->sd_path = sd_path ? strdup(sd_path) : NULL;
    uv_poll_init(loop, &p->sd, sd);
    p->sd.data = p;
    p->handles++;
  }
  return 0;
}

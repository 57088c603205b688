/* sdnotify.c: systemd's notify protocol (sd_notify(3)) spoken by arbor
 * itself, without libsystemd: datagrams of KEY=VALUE lines to the unix
 * socket named by $NOTIFY_SOCKET (a path, or an abstract name written with
 * a leading '@'). Everything is sent from the engine's loop, so a frozen
 * engine stops sending WATCHDOG=1 and the manager restarts it.
 */
#include "engine/sdnotify.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/mem.h"

/* Restart counts sampled by the status tick, one a second: the restarts
   of the last minute are the newest minus the oldest. */
#define SAMPLES 61
#define STATUS_MAX 256

static struct {
  int read;       /* the environment was read */
  int fd;         /* the datagram socket, or -1 */
  int err;        /* why there is none though NOTIFY_SOCKET is set */
  struct sockaddr_un sa;
  socklen_t len;
  uint64_t watchdog_usec;
  char name[sizeof(struct sockaddr_un)]; /* as given */
} sd_env = {0, -1, 0, {0}, 0, 0, ""};

/* Reads $NOTIFY_SOCKET and the watchdog variables once, and unsets them. */
static void env_read(void) {
  if (sd_env.read) return;
  sd_env.read = 1;
  const char *path = getenv("NOTIFY_SOCKET");
  const char *usec = getenv("WATCHDOG_USEC");
  const char *pid = getenv("WATCHDOG_PID");
  if (usec && (!pid || strtoll(pid, NULL, 10) == (long long)getpid()))
    sd_env.watchdog_usec = strtoull(usec, NULL, 10);
  if (path && *path) {
    size_t n = strlen(path);
    snprintf(sd_env.name, sizeof sd_env.name, "%s", path);
    sd_env.sa.sun_family = AF_UNIX;
    if (path[0] != '/' && path[0] != '@') {
      sd_env.err = EAFNOSUPPORT;
    } else if (n >= sizeof sd_env.sa.sun_path) {
      sd_env.err = ENAMETOOLONG;
    } else {
      memcpy(sd_env.sa.sun_path, path, n);
      if (path[0] == '@') sd_env.sa.sun_path[0] = '\0'; /* abstract */
      sd_env.len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
                               (path[0] == '/'));
      sd_env.fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      if (sd_env.fd < 0) sd_env.err = errno;
    }
    if (sd_env.err) sd_env.watchdog_usec = 0;
  } else {
    sd_env.watchdog_usec = 0; /* nobody to ping */
  }
  unsetenv("NOTIFY_SOCKET");
  unsetenv("WATCHDOG_USEC");
  unsetenv("WATCHDOG_PID");
}

int arbor_sd_send(const char *msg, size_t len) {
  env_read();
  if (sd_env.fd < 0) return -sd_env.err;
  ssize_t r;
  do
    r = sendto(sd_env.fd, msg, len, MSG_NOSIGNAL | MSG_DONTWAIT,
               (struct sockaddr *)&sd_env.sa, sd_env.len);
  while (r < 0 && errno == EINTR);
  return r < 0 ? -errno : 1;
}

uint64_t arbor_sd_watchdog_usec(void) {
  env_read();
  return sd_env.watchdog_usec;
}

/* Calls fn on every node of e's tree, parents before children. */
static void walk(arbor_engine *e, void (*fn)(arbor_node *, void *), void *ud) {
  arbor_node *top = e->tree.root, *n = top;
  while (n) {
    fn(n, ud);
    if (n->first) {
      n = n->first;
      continue;
    }
    while (n && n != top && !n->next) n = n->parent;
    n = (n && n != top) ? n->next : NULL;
  }
}

/* A node's bound is its own shutdown after its children's: their sum when
   they stop one at a time (T12), the largest with stop = "parallel". A
   walk children first; below[d] gathers the bounds of the children, at
   depth d, of the node being left. */
double arbor_sd_stop_bound(arbor_engine *e) {
  size_t cap = 64, d = 0;
  double *below = arbor_xalloc(cap * sizeof *below), b;
  arbor_node *n = e->tree.root;
  for (;;) {
    if (n->first) {
      if (d + 2 > cap) below = arbor_xrealloc(below, (cap *= 2) * sizeof *below);
      below[++d] = 0;
      n = n->first;
      continue;
    }
    b = ((pnode *)n)->shutdown;
    for (;;) { /* leaving n, whose bound is b */
      if (d == 0) {
        free(below);
        return b;
      }
      below[d] = (((pnode *)n->parent)->pflags & PN_PARALLEL)
                     ? (below[d] > b ? below[d] : b)
                     : below[d] + b;
      if (n->next) {
        n = n->next;
        break;
      }
      n = n->parent;
      b = ((pnode *)n)->shutdown + below[d--];
    }
  }
}

struct arbor_sd {
  arbor_engine *e;
  uv_prepare_t prepare;
  uv_timer_t tick, dog;
  int open_handles;
  int ready_sent, stopping_sent, failed;
  uint64_t seq;            /* the event seq the unhealthy count is for */
  size_t unhealthy;
  uint64_t samples[SAMPLES]; /* restart counts, one a second */
  unsigned nsamples, next_sample;
  char status[STATUS_MAX]; /* the last STATUS= sent */
};

/* Sends msg; the first failure is reported on stderr, once (the others
   are alike). */
static void send_text(arbor_sd *sd, const char *msg) {
  int r = arbor_sd_send(msg, strlen(msg));
  if (r < 0 && !sd->failed) {
    sd->failed = 1;
    fprintf(stderr, "arbor: cannot notify the service manager at "
            "NOTIFY_SOCKET=%s: %s\n", sd_env.name, strerror(-r));
  }
}

static void count_unhealthy(arbor_node *n, void *ud) {
  if (n->state != ARBOR_HEALTHY && n->state != ARBOR_DONE) (*(size_t *)ud)++;
}

/* The tree's summary: "<phase>; N node(s), N running, N unhealthy, N
   restart(s) in the last minute". Unhealthy nodes (neither HEALTHY nor
   DONE) are counted again only when events came since the last count. */
static void summary(arbor_sd *sd, char *buf, size_t cap) {
  arbor_engine *e = sd->e;
  if (e->ring.next_seq != sd->seq) {
    sd->seq = e->ring.next_seq;
    sd->unhealthy = 0;
    walk(e, count_unhealthy, &sd->unhealthy);
  }
  uint64_t base = sd->samples[sd->nsamples < SAMPLES ? 0 : sd->next_sample];
  char phase[32];
  if (e->stop_requested)
    snprintf(phase, sizeof phase, "stopping");
  else
    snprintf(phase, sizeof phase, "root %s",
             arbor_state_name((arbor_state)e->tree.root->state));
  snprintf(buf, cap,
           "%s; %zu node(s), %zu running, %zu unhealthy, %" PRIu64
           " restart(s) in the last minute",
           phase, e->tree.nnodes, e->tree.running, sd->unhealthy,
           e->restarts - base);
}

/* Sends "<head>STATUS=<summary>" and remembers the summary. */
static void send_status(arbor_sd *sd, const char *head) {
  char text[STATUS_MAX], msg[STATUS_MAX + 128];
  summary(sd, text, sizeof text);
  snprintf(msg, sizeof msg, "%sSTATUS=%s", head, text);
  memcpy(sd->status, text, sizeof text);
  send_text(sd, msg);
}

/* Every loop iteration, before it waits: READY=1 once the root has been
   HEALTHY (in this incarnation: also when it failed within the same turn
   of the loop), STOPPING=1 (with the stop bound, which extends a shorter
   TimeoutStopSec) when the tree's stop began. */
static void on_prepare(uv_prepare_t *h) {
  arbor_sd *sd = h->data;
  arbor_engine *e = sd->e;
  if (e->stop_requested && !sd->stopping_sent) {
    char head[96];
    double bound = arbor_sd_stop_bound(e) * 1e6; /* finite, maybe huge */
    uint64_t usec = bound < 1.8e19 ? (uint64_t)bound : UINT64_MAX;
    snprintf(head, sizeof head, "STOPPING=1\nEXTEND_TIMEOUT_USEC=%" PRIu64 "\n",
             usec);
    sd->stopping_sent = 1;
    send_status(sd, head);
  } else if (!sd->ready_sent && !sd->stopping_sent &&
             ((pnode *)e->tree.root)->healthy_at >= 0) {
    sd->ready_sent = 1;
    send_status(sd, "READY=1\n");
  }
}

/* Once a second: samples the restart count, sends STATUS= when the
   summary changed (once READY=1 or STOPPING=1 went out with the first). */
static void on_tick(uv_timer_t *h) {
  arbor_sd *sd = h->data;
  sd->samples[sd->next_sample] = sd->e->restarts;
  sd->next_sample = (sd->next_sample + 1) % SAMPLES;
  if (sd->nsamples < SAMPLES) sd->nsamples++;
  if (!sd->ready_sent && !sd->stopping_sent) return;
  char text[STATUS_MAX];
  summary(sd, text, sizeof text);
  if (strcmp(text, sd->status) != 0) send_status(sd, "");
}

static void on_dog(uv_timer_t *h) { send_text(h->data, "WATCHDOG=1"); }

arbor_sd *arbor_sd_attach(arbor_engine *e) {
  env_read();
  if (sd_env.fd < 0 && sd_env.err)
    fprintf(stderr, "arbor: NOTIFY_SOCKET=%s: %s (want a path or @name): "
            "not notifying the service manager\n", sd_env.name,
            strerror(sd_env.err));
  if (!e->loop || sd_env.fd < 0) return NULL;
  arbor_sd *sd = arbor_xcalloc(1, sizeof *sd);
  sd->e = e;
  sd->seq = (uint64_t)-1;
  sd->samples[0] = e->restarts;
  sd->nsamples = sd->next_sample = 1;
  uv_prepare_init(e->loop, &sd->prepare);
  uv_timer_init(e->loop, &sd->tick);
  uv_timer_init(e->loop, &sd->dog);
  sd->prepare.data = sd->tick.data = sd->dog.data = sd;
  sd->open_handles = 3;
  uv_prepare_start(&sd->prepare, on_prepare);
  uv_timer_start(&sd->tick, on_tick, 1000, 1000);
  uint64_t usec = arbor_sd_watchdog_usec();
  if (usec) {
    uint64_t ms = usec / 2000 ? usec / 2000 : 1;
    uv_timer_start(&sd->dog, on_dog, ms, ms);
  }
  /* the tree's own handles decide when its loop ends */
  uv_unref((uv_handle_t *)&sd->prepare);
  uv_unref((uv_handle_t *)&sd->tick);
  uv_unref((uv_handle_t *)&sd->dog);
  return sd;
}

static void on_closed(uv_handle_t *h) {
  arbor_sd *sd = h->data;
  if (--sd->open_handles == 0) free(sd);
}

void arbor_sd_detach(arbor_sd *sd, const char *end) {
  if (!sd->stopping_sent) {
    char msg[STATUS_MAX + 32];
    int n = snprintf(msg, sizeof msg, "STOPPING=1\nSTATUS=");
    snprintf(msg + n, sizeof msg - (size_t)n, "%s", end);
    for (char *c = msg + n; *c; c++)
      if (*c == '\n') *c = ' '; /* one line: the protocol's */
    sd->stopping_sent = 1;
    send_text(sd, msg);
  }
  uv_close((uv_handle_t *)&sd->prepare, on_closed);
  uv_close((uv_handle_t *)&sd->tick, on_closed);
  uv_close((uv_handle_t *)&sd->dog, on_closed);
}

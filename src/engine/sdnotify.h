/* sdnotify.h: arbor under a service manager that speaks systemd's notify
 * protocol (sd_notify(3)): READY=1 once the root is HEALTHY, STATUS= with a
 * summary of the tree, WATCHDOG=1 from the engine's loop, STOPPING=1 when
 * the ordered stop begins (docs/deploy.md).
 */
#ifndef ARBOR_SDNOTIFY_H
#define ARBOR_SDNOTIFY_H

#include <stddef.h>

#include "engine/engine.h"

/* Sends msg (KEY=VALUE lines) as one datagram to $NOTIFY_SOCKET, read at
   the first call and then removed from the environment with WATCHDOG_USEC
   and WATCHDOG_PID, so that what the tree starts does not talk to arbor's
   manager. Returns 1 when sent, 0 when arbor has no NOTIFY_SOCKET, or a
   negative errno (-EAFNOSUPPORT for an address that is neither a path nor
   an abstract name starting with '@', -ENAMETOOLONG). */
int arbor_sd_send(const char *msg, size_t len);

/* The manager's watchdog interval in microseconds ($WATCHDOG_USEC, when
   $WATCHDOG_PID is unset or arbor's pid), or 0. */
uint64_t arbor_sd_watchdog_usec(void);

typedef struct arbor_sd arbor_sd;

/* Starts telling the manager about e's tree (a real engine, before it
   runs): a libuv prepare handle sends READY=1 when the root first is
   HEALTHY and STOPPING=1 when the tree's stop begins, a one-second timer
   sends STATUS= when the summary changed, a timer at half the watchdog
   interval sends WATCHDOG=1. NULL when there is no NOTIFY_SOCKET (said
   on stderr when it names no address arbor can use). */
arbor_sd *arbor_sd_attach(arbor_engine *e);

/* Once e's run ended: sends STOPPING=1 (with STATUS=end) unless the stop
   was announced already, then closes the handles; sd is freed by their
   close callbacks. */
void arbor_sd_detach(arbor_sd *sd, const char *end);

/* Seconds the ordered stop of e's tree may take at most as it is now: the
   sum of every node's `shutdown`, since the stop tells one node at a time
   (T12) and each has its shutdown seconds from then. */
double arbor_sd_stop_bound(arbor_engine *e);

#endif

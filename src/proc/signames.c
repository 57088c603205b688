/* signames.c: signal names, both ways ("TERM" or "SIGTERM" <-> SIGTERM),
 * for ctx:exec's stop_signal, proc:kill and how a process ended.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "proc/proc.h"

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

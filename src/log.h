/* SPDX-License-Identifier: GPL-2.0 */
#ifndef RRFUSE_LOG_H
#define RRFUSE_LOG_H

#include <syslog.h>

/* Log to stderr in the foreground, to syslog once daemonized. */
void rr_log_to_syslog(int on);
void rr_log(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

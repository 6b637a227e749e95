/* SPDX-License-Identifier: GPL-2.0 */
#ifndef RRFUSE_LOG_H
#define RRFUSE_LOG_H

#include <stdarg.h>
#include <stdint.h>
#include <syslog.h>
#include <time.h>

/* Log to stderr in the foreground, to syslog once daemonized. */
void rr_log_to_syslog(int on);
void rr_log(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rr_vlog(int prio, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/*
 * Progress of a long operation rrfuse performs itself (orphan cleanup at
 * mount, FITRIM over a big device): a line on stderr at most once a second,
 * none for an operation that ends within the first second, nothing once
 * daemonized.  total 0 = not known in advance.
 */
struct rr_progress {
	const char *what;
	uint64_t total, interval, start, last;
	int shown;
};
void rr_progress_begin(struct rr_progress *p, const char *what, uint64_t total);
void rr_progress_step(struct rr_progress *p, uint64_t done, const char *detail);
void rr_progress_end(struct rr_progress *p, uint64_t done);

#endif

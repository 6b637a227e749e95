/* SPDX-License-Identifier: GPL-2.0 */
#ifndef RRFUSE_LOG_H
#define RRFUSE_LOG_H

#include <stdarg.h>
#include <stdint.h>
#include <syslog.h>
#include <time.h>

/*
 * Where messages go.  In the foreground (-f, -d) everything goes to stderr.
 * In the background a successful mount prints nothing: messages go to
 * syslog (facility daemon), or to FILE with -o log=FILE, and until the
 * daemon detaches those at LOG_WARNING or worse are also written to stderr,
 * so that a mount that fails says why.  0, or a negative errno when FILE
 * cannot be opened.
 */
int rr_log_setup(int foreground, const char *file);
/* The daemon has detached: stderr is no longer the user's terminal. */
void rr_log_detached(void);
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

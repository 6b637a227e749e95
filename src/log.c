// SPDX-License-Identifier: GPL-2.0
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int use_syslog;

void rr_log_to_syslog(int on)
{
	use_syslog = on;
	if (on)
		openlog("rrfuse", LOG_PID, LOG_DAEMON);
}

void rr_vlog(int prio, const char *fmt, va_list ap)
{
	if (use_syslog) {
		vsyslog(prio, fmt, ap);
	} else {
		fputs("rrfuse: ", stderr);
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
	}
}

void rr_log(int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	rr_vlog(prio, fmt, ap);
	va_end(ap);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void rr_progress_begin(struct rr_progress *p, const char *what, uint64_t total)
{
	/* RRFUSE_PROGRESS_MS: the interval, for the tests (0 = every step). */
	const char *env = getenv("RRFUSE_PROGRESS_MS");

	p->what = what;
	p->total = total;
	p->interval = env ? strtoull(env, NULL, 10) : 1000;
	p->start = p->last = now_ms();
	p->shown = 0;
}

void rr_progress_step(struct rr_progress *p, uint64_t done, const char *detail)
{
	uint64_t t;

	/* Only where someone watches: stderr in the foreground (or before daemonizing). */
	if (use_syslog)
		return;
	t = now_ms();
	if (t - p->last < p->interval)
		return;
	p->last = t;
	p->shown = 1;
	if (p->total)
		fprintf(stderr, "rrfuse: %s: %llu of %llu (%llu%%)%s%s, %.1f s\n", p->what,
			(unsigned long long)done, (unsigned long long)p->total,
			(unsigned long long)(done * 100 / p->total), detail ? ", " : "", detail ? detail : "",
			(double)(t - p->start) / 1000);
	else
		fprintf(stderr, "rrfuse: %s: %llu so far%s%s, %.1f s\n", p->what, (unsigned long long)done,
			detail ? ", " : "", detail ? detail : "", (double)(t - p->start) / 1000);
}

void rr_progress_end(struct rr_progress *p, uint64_t done)
{
	if (p->shown && !use_syslog)
		fprintf(stderr, "rrfuse: %s: %llu done in %.1f s\n", p->what, (unsigned long long)done,
			(double)(now_ms() - p->start) / 1000);
}

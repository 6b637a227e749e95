// SPDX-License-Identifier: GPL-2.0
#include "log.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/*
 * Set before the daemon starts threads (rr_log_setup) or by its one thread
 * before it starts them (rr_log_detached); read by every thread after.
 */
static struct {
	int foreground;	/* everything to stderr */
	_Atomic int detached;	/* stderr is gone */
	FILE *file;	/* -o log=FILE, line-buffered; else syslog */
} lg = { .foreground = 1 };

int rr_log_setup(int foreground, const char *file)
{
	lg.foreground = foreground;
	if (foreground)
		return 0;
	if (file) {
		lg.file = fopen(file, "ae");
		if (!lg.file)
			return -errno;
		setvbuf(lg.file, NULL, _IOLBF, 0);
	} else {
		openlog("rrfuse", LOG_PID, LOG_DAEMON);
	}
	return 0;
}

void rr_log_detached(void)
{
	lg.detached = 1;
}

static void log_to_file(const char *fmt, va_list ap)
{
	char stamp[32];
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
	/* One call per line: lines of different threads do not interleave. */
	flockfile(lg.file);
	fprintf(lg.file, "%s.%03ld rrfuse[%ld]: ", stamp, ts.tv_nsec / 1000000, (long)getpid());
	vfprintf(lg.file, fmt, ap);
	fputc('\n', lg.file);
	funlockfile(lg.file);
}

static void log_to_stderr(const char *fmt, va_list ap)
{
	flockfile(stderr);
	fputs("rrfuse: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	funlockfile(stderr);
}

void rr_vlog(int prio, const char *fmt, va_list ap)
{
	va_list again;

	if (lg.foreground) {
		log_to_stderr(fmt, ap);
		return;
	}
	if (!lg.detached && prio <= LOG_WARNING) {
		va_copy(again, ap);
		log_to_stderr(fmt, again);
		va_end(again);
	}
	if (lg.file)
		log_to_file(fmt, ap);
	else
		vsyslog(prio, fmt, ap);
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

	/* Only where someone watches: stderr in the foreground. */
	if (!lg.foreground)
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
	if (p->shown && lg.foreground)
		fprintf(stderr, "rrfuse: %s: %llu done in %.1f s\n", p->what, (unsigned long long)done,
			(double)(now_ms() - p->start) / 1000);
}

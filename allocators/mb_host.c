// SPDX-License-Identifier: GPL-2.0
/*
 * What the host sets for the whole process (mb_host.h): the log function
 * and the CPU a replay's requests were made on.
 */
#include "mb_host.h"
#include "rrfuse/alloc.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>

static void log_stderr(int prio, const char *fmt, va_list ap)
{
	(void)prio;
	fputs("rrfuse: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

static rr_alloc_log_fn log_fn = log_stderr;

rr_alloc_log_fn rr_alloc_set_log(rr_alloc_log_fn fn)
{
	rr_alloc_log_fn old = log_fn;

	log_fn = fn ? fn : log_stderr;
	return old;
}

void mb_log(int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_fn(prio, fmt, ap);
	va_end(ap);
}

/* rr_alloc_use_cpu: the CPU a replay's requests were made on, -1 = this thread's own. */
static _Thread_local int tl_cpu = -1;

void rr_alloc_use_cpu(int cpu)
{
	tl_cpu = cpu;
}

int mb_cpu(void)
{
	return tl_cpu >= 0 ? tl_cpu : sched_getcpu();
}

// SPDX-License-Identifier: GPL-2.0
#include "log.h"

#include <stdarg.h>
#include <stdio.h>

static int use_syslog;

void rr_log_to_syslog(int on)
{
	use_syslog = on;
	if (on)
		openlog("rrfuse", LOG_PID, LOG_DAEMON);
}

void rr_log(int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (use_syslog) {
		vsyslog(prio, fmt, ap);
	} else {
		fputs("rrfuse: ", stderr);
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
	}
	va_end(ap);
}

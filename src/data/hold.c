// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel's writeback thresholds, read from /proc as mm/page-writeback.c
 * uses them: dirty data expires after dirty_expire_centisecs, and the
 * flusher starts at dirty_background_bytes or, when that is 0,
 * dirty_background_ratio percent of the dirtyable memory (MemAvailable is
 * the nearest figure userspace has).
 */
#include "hold.h"

#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static struct rr_hold_limits limits = { .expire_secs = 30, .background_bytes = 256ULL << 20, .free_watermark = 256 };
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The number of the first line of a file that fmt matches, or -1. */
static long long read_number(const char *path, const char *fmt)
{
	char line[256];
	long long v = -1;
	FILE *f = fopen(path, "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f) && sscanf(line, fmt, &v) != 1)
		;
	fclose(f);
	return v;
}

static void read_limits(void)
{
	long long expire = read_number("/proc/sys/vm/dirty_expire_centisecs", "%lld");
	long long bytes = read_number("/proc/sys/vm/dirty_background_bytes", "%lld");
	long long ratio = read_number("/proc/sys/vm/dirty_background_ratio", "%lld");
	long long avail = read_number("/proc/meminfo", "MemAvailable: %lld kB");

	limits.free_watermark = 4 * 32 * (uint64_t)sysconf(_SC_NPROCESSORS_CONF);
	if (expire >= 0)
		limits.expire_secs = (unsigned int)((expire + 99) / 100);
	if (bytes > 0)
		limits.background_bytes = (uint64_t)bytes;
	else if (ratio >= 0 && avail > 0)
		limits.background_bytes = (uint64_t)avail * 1024 / 100 * (uint64_t)ratio;
}

const struct rr_hold_limits *rr_hold_limits(void)
{
	pthread_once(&once, read_limits);
	return &limits;
}

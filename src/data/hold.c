// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel's writeback thresholds, read from /proc as mm/page-writeback.c
 * uses them: dirty data expires after dirty_expire_centisecs, and the
 * flusher starts at dirty_background_bytes or, when that is 0,
 * dirty_background_ratio percent of the dirtyable memory (MemAvailable is
 * the nearest figure userspace has), counting every dirty page of the
 * machine: what the daemon holds is what the kernel's page cache would,
 * and the rest is in /proc/meminfo.
 */
#include "hold.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <stdio.h>
#include <unistd.h>

/*
 * The machine's thresholds, not a mount's: the kernel's flusher applies
 * them to every filesystem alike, so one process-wide copy, read once.
 */
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

/*
 * The machine's dirty page cache (Dirty in /proc/meminfo, the kernel's
 * NR_FILE_DIRTY), read at most every 50 ms: the kernel's background
 * writeback goes on while all of it, not one filesystem's, is past the
 * threshold (wb_over_bg_thresh).
 */
uint64_t rr_hold_machine_dirty(void)
{
	static _Atomic int64_t read_at = -1;
	static _Atomic uint64_t bytes;
	struct timespec ts;
	int64_t now, was;
	long long kb;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	was = atomic_load_explicit(&read_at, memory_order_relaxed);
	if (was >= 0 && now - was < 50)
		return atomic_load_explicit(&bytes, memory_order_relaxed);
	if (!atomic_compare_exchange_strong(&read_at, &was, now))
		return atomic_load_explicit(&bytes, memory_order_relaxed);
	kb = read_number("/proc/meminfo", "Dirty: %lld kB");
	atomic_store_explicit(&bytes, kb > 0 ? (uint64_t)kb * 1024 : 0, memory_order_relaxed);
	return kb > 0 ? (uint64_t)kb * 1024 : 0;
}

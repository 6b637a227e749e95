/* SPDX-License-Identifier: GPL-2.0 */
/*
 * -o delalloc=hold: how long and how much written data the kernel's page
 * cache would keep dirty on this machine, so that the daemon keeps its
 * delayed data as long (src/data/data.c).
 */
#ifndef RRFUSE_HOLD_H
#define RRFUSE_HOLD_H

#include <stdint.h>

struct rr_hold_limits {
	/* vm.dirty_expire_centisecs, in seconds: older data is written at the next tick. */
	unsigned int expire_secs;
	/* vm.dirty_background_bytes, or _ratio of the memory available: past it the oldest files go out. */
	uint64_t background_bytes;
	/* EXT4_FREECLUSTERS_WATERMARK: blocks kept above those promised before writes allocate at once. */
	uint64_t free_watermark;
};

/* Read once, the first time; the kernel's defaults where /proc does not say. */
const struct rr_hold_limits *rr_hold_limits(void);

/* The machine's dirty page cache in bytes, as the kernel's flusher counts it (read every 50 ms at most). */
uint64_t rr_hold_machine_dirty(void);

#endif

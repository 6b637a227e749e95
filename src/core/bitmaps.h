/* SPDX-License-Identifier: GPL-2.0 */
/* The bitmaps between the image and libext2fs's maps (bitmaps.c). */
#ifndef RRFUSE_BITMAPS_H
#define RRFUSE_BITMAPS_H

#include <stdint.h>
#include <ext2fs/ext2fs.h>

/*
 * What each group's bitmap blocks held when last read or written: sums by
 * key 2g (block bitmap) and 2g+1 (inode bitmap), in a table with open
 * addressing, as only initialised groups have one (on a fresh 16 TiB image
 * 8193 of 262144 bitmaps: an array for all was 2 MiB).
 */
struct rr_bitmaps {
	struct rr_bitmap_sum {
		uint64_t key1;	/* the key + 1; 0: an empty slot */
		uint64_t sum;
	} *slot;		/* NULL: no sums kept */
	size_t nslots, n;	/* a power of two; slots used */
	dgrp_t ngroups;
};

/* At mount: libext2fs's maps from the image; bm (may be NULL) learns the sums. */
errcode_t rr_bitmaps_read(ext2_filsys fs, struct rr_bitmaps *bm);
/* At each commit, before ext2fs_flush: the bitmaps that changed (caller holds the fs lock). */
errcode_t rr_bitmaps_write(ext2_filsys fs, struct rr_bitmaps *bm);
void rr_bitmaps_free(struct rr_bitmaps *bm);

#endif

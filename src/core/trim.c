// SPDX-License-Identifier: GPL-2.0
/*
 * FITRIM: discard the free space of a range, a block group at a time.
 *
 * A group's free runs are discarded with the fs lock held, because every
 * allocation marks its blocks in the bitmap under that lock before any data
 * is written to them: a run found free here cannot be handed out and written
 * while it is being discarded.  The lock is dropped between groups, so other
 * requests wait for one group's discards at most.
 */
#include "trim.h"
#include "rrfs.h"

#include <errno.h>

#include "log.h"

int rr_trim(struct rr_fs *rfs, uint64_t start, uint64_t len, uint64_t minlen, uint64_t *trimmed)
{
	ext2_filsys fs = rfs->fs;
	uint64_t first = start >> rfs->bbits, last, minblk = minlen >> rfs->bbits, end;
	struct rr_progress progress;
	dgrp_t g;
	int ret = 0;

	*trimmed = 0;
	end = ext2fs_blocks_count(fs->super);
	/* As ext4_trim_fs(). */
	if (len < rfs->bsize || first >= end || minblk > EXT2_BLOCKS_PER_GROUP(fs->super))
		return -EINVAL;
	last = (start + len - 1) >> rfs->bbits;
	if (last >= end || start + len < start)
		last = end - 1;
	if (first < fs->super->s_first_data_block)
		first = fs->super->s_first_data_block;
	if (!minblk)
		minblk = 1;
	rr_progress_begin(&progress, "fstrim: block groups", ext2fs_group_of_blk2(fs, last) -
			  ext2fs_group_of_blk2(fs, first) + 1);
	for (g = ext2fs_group_of_blk2(fs, first); !ret && g <= ext2fs_group_of_blk2(fs, last); g++) {
		blk64_t b = ext2fs_group_first_block2(fs, g), e = ext2fs_group_last_block2(fs, g);

		if (b < first)
			b = first;
		if (e > last)
			e = last;
		rr_fs_lock(rfs);
		while (!ret && b <= e) {
			blk64_t zero, used;
			errcode_t err;

			if (ext2fs_find_first_zero_block_bitmap2(fs->block_map, b, e, &zero))
				break;
			if (ext2fs_find_first_set_block_bitmap2(fs->block_map, zero, e, &used))
				used = e + 1;
			if (used - zero >= minblk) {
				err = io_channel_discard(fs->io, zero, used - zero);
				if (err)
					ret = err == EOPNOTSUPP ? -EOPNOTSUPP : rr_err(rfs, err);
				else
					*trimmed += (used - zero) << rfs->bbits;
			}
			b = used;
		}
		rr_fs_end_op(rfs);
		rr_progress_step(&progress, g - ext2fs_group_of_blk2(fs, first) + 1, NULL);
	}
	rr_progress_end(&progress, g - ext2fs_group_of_blk2(fs, first));
	return ret;
}

// SPDX-License-Identifier: GPL-2.0
/*
 * The superblock and the group descriptors on their way to the image: the
 * commit's flush, and the primary superblock on its own where the orphan
 * list or an error record must be on disk first.
 */
#include "rrfs.h"

#include <string.h>

/*
 * The superblock's primary copy, written now: the orphan list's updates are
 * ordered against inode writes (the commit writes it with everything else
 * otherwise).  Caller holds the fs lock.  libext2fs's flush writes only what
 * differs from orig_super, so orig_super learns what is on disk.
 */
int rr_fs_write_super(struct rr_fs *rfs)
{
	ext2_filsys fs = rfs->fs;
	struct ext2_super_block sb = *fs->super;
	errcode_t err;
	int ret;

#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	ext2fs_swap_super(&sb);
#endif
	err = ext2fs_superblock_csum_set(fs, &sb);
	if (err)
		return rr_err(rfs, err);
	ret = rr_err(rfs, io_channel_write_byte(fs->io, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE, &sb));
	if (!ret && fs->orig_super)
		memcpy(fs->orig_super, &sb, SUPERBLOCK_SIZE);
	return ret;
}

errcode_t rr_fs_flush(struct rr_fs *rfs, int flags)
{
	errcode_t err = rr_bitmaps_write(rfs->fs, &rfs->bitmaps);

	return err ? err : ext2fs_flush2(rfs->fs, flags);
}

// SPDX-License-Identifier: GPL-2.0
/*
 * A symlink's target: in i_block when it fits (a fast symlink), else in a
 * data block of its own, as ext4 keeps them.
 */
#include "symlink.h"
#include "data.h"
#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int symlink_set_target(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in,
		       const char *target, size_t len)
{
	int ret = 0;

	if (len < sizeof(in->i_block)) {
		memset(in->i_block, 0, sizeof(in->i_block));
		memcpy(in->i_block, target, len);
		in->i_size = (__u32)len;
		return inode_write(rfs, ino, in);
	}
	if (ext2fs_has_feature_extents(rfs->fs->super)) {
		ext2_extent_handle_t h;

		ret = rr_err_ino(rfs, ext2fs_extent_open2(rfs->fs, ino, (struct ext2_inode *)in, &h), ino);
		if (!ret)
			ext2fs_extent_free(h);
	}
	if (!ret)
		ret = data_write_new_file(rfs, ino, in, target, len);
	return ret;
}

static int read_slow(struct rr_fs *rfs, ext2_ino_t ino, char *buf, size_t len)
{
	struct rr_inode *ri = rr_ipin(rfs, ino);
	ssize_t n;

	if (!ri) {
		rr_log(LOG_ERR, "request for inode %u that the kernel never looked up", ino);
		return -EIO;
	}
	n = data_read(rfs, ri, buf, len, 0);
	rr_iunpin(rfs, ri);
	return n < 0 ? (int)n : 0;
}

int symlink_read(struct rr_fs *rfs, ext2_ino_t ino, char **target)
{
	struct ext2_inode_large in;
	char *buf;
	int ret = inode_read(rfs, ino, &in);

	*target = NULL;
	if (ret)
		return ret;
	if (!LINUX_S_ISLNK(in.i_mode))
		return -EINVAL;
	if (in.i_size >= rfs->bsize || in.i_size_high)
		return -EIO;	/* longer than a symlink can be: corruption */
	buf = calloc(1, in.i_size + 1);
	if (!buf)
		return -ENOMEM;
	if (ext2fs_is_fast_symlink((struct ext2_inode *)&in))
		memcpy(buf, in.i_block, in.i_size < sizeof(in.i_block) ? in.i_size : sizeof(in.i_block));
	else
		ret = read_slow(rfs, ino, buf, in.i_size);
	if (ret)
		free(buf);
	else
		*target = buf;
	return ret;
}

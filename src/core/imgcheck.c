// SPDX-License-Identifier: GPL-2.0
/*
 * What an image must pass before rrfuse mounts it, as the kernel checks it:
 * features rrfuse cannot handle (refused) or cannot write (read-only), the
 * geometry against the device and the group descriptors.
 */
#include "rrfs.h"
#include "dev.h"
#include "log.h"
#include "imgcheck.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct {
	__u32 mask;
	const char *name;
} bad_incompat[] = {
	{ EXT2_FEATURE_INCOMPAT_COMPRESSION, "compression" },
	{ EXT3_FEATURE_INCOMPAT_JOURNAL_DEV, "journal_dev" },
	{ EXT4_FEATURE_INCOMPAT_DIRDATA, "dirdata" },
	{ EXT4_FEATURE_INCOMPAT_INLINE_DATA, "inline_data" },
	{ EXT4_FEATURE_INCOMPAT_ENCRYPT, "encrypt" },
	{ EXT4_FEATURE_INCOMPAT_CASEFOLD, "casefold" },
}, ro_compat_ro[] = {
	{ EXT4_FEATURE_RO_COMPAT_QUOTA, "quota" },
	{ EXT4_FEATURE_RO_COMPAT_BIGALLOC, "bigalloc" },
	{ EXT4_FEATURE_RO_COMPAT_REPLICA, "replica" },
	{ EXT4_FEATURE_RO_COMPAT_READONLY, "read-only" },
	{ EXT4_FEATURE_RO_COMPAT_VERITY, "verity" },
	{ EXT4_FEATURE_RO_COMPAT_SHARED_BLOCKS, "shared_blocks" },
};

int check_features(ext2_filsys fs, char *msg, size_t msglen)
{
	struct ext2_super_block *sb = fs->super;
	size_t i;

	if (sb->s_rev_level > EXT2_DYNAMIC_REV) {
		snprintf(msg, msglen, "unsupported revision level %u", sb->s_rev_level);
		return -EINVAL;
	}
	for (i = 0; i < sizeof(bad_incompat) / sizeof(bad_incompat[0]); i++)
		if (sb->s_feature_incompat & bad_incompat[i].mask) {
			snprintf(msg, msglen, "unsupported incompat feature '%s'", bad_incompat[i].name);
			return -EOPNOTSUPP;
		}
	if (sb->s_feature_incompat & ~(EXT2_LIB_FEATURE_INCOMPAT_SUPP | EXT4_FEATURE_INCOMPAT_MMP)) {
		snprintf(msg, msglen, "unknown incompat features 0x%x",
			 sb->s_feature_incompat & ~(EXT2_LIB_FEATURE_INCOMPAT_SUPP | EXT4_FEATURE_INCOMPAT_MMP));
		return -EOPNOTSUPP;
	}
	return 0;
}

/* Names the ro_compat feature that keeps rrfuse from writing the image in buf, or NULL. */
const char *check_unwritable(ext2_filsys fs, char *buf, size_t len)
{
	__u32 ro_compat = fs->super->s_feature_ro_compat;
	size_t i;

	if (ro_compat & ~EXT2_LIB_FEATURE_RO_COMPAT_SUPP) {
		snprintf(buf, len, "unknown ro_compat features 0x%x",
			 ro_compat & ~EXT2_LIB_FEATURE_RO_COMPAT_SUPP);
		return buf;
	}
	for (i = 0; i < sizeof(ro_compat_ro) / sizeof(ro_compat_ro[0]); i++)
		if (ro_compat & ro_compat_ro[i].mask) {
			snprintf(buf, len, "feature '%s'", ro_compat_ro[i].name);
			return buf;
		}
	return NULL;
}

/* One run of static metadata for rr_check_desc: what a clash with it is called. */
struct meta_run {
	uint64_t start, len;
	errcode_t err;		/* 0: superblock or descriptors (their clashes are not checked) */
};

/*
 * Add a run to r[0..*n).  flex_bg puts a flex group's bitmaps and inode
 * tables next to each other: a run of the same kind that continues the last
 * one of its kind is merged into it (they cannot overlap), so there is
 * little left to sort.  last[k]: index of the last run of kind k, or -1.
 */
static void meta_add(struct meta_run *r, size_t *n, ssize_t last[3], int k, uint64_t start,
		     uint64_t len, errcode_t err)
{
	if (last[k] >= 0 && r[last[k]].start + r[last[k]].len == start) {
		r[last[k]].len += len;
		return;
	}
	r[*n] = (struct meta_run){ start, len, err };
	last[k] = (ssize_t)(*n)++;
}

static int meta_run_cmp(const void *a, const void *b)
{
	const struct meta_run *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/*
 * The checks of ext2fs_check_desc, in O(groups log groups) time and no
 * bitmap: every group's block bitmap, inode bitmap and inode table lie in
 * the filesystem (in their group without flex_bg) and overlap neither each
 * other nor any group's superblock and descriptor blocks.  ext2fs_check_desc
 * marks every inode table block in a bitmap of the whole filesystem: on a
 * 16 TiB image that was 512 MiB of bit array, or a second of red-black tree
 * updates, on every mount.  Here the runs are sorted and neighbours compared.
 */
errcode_t rr_check_desc(ext2_filsys fs)
{
	uint64_t blocks = ext2fs_blocks_count(fs->super), first = fs->super->s_first_data_block;
	uint64_t last = blocks - 1, end = 0, old_desc_blocks;
	int flex = ext2fs_has_feature_flex_bg(fs->super);
	size_t n = 0, i, end_run = 0;
	ssize_t last_of[3] = { -1, -1, -1 };
	errcode_t err = 0;
	struct meta_run *r;
	dgrp_t g;

	if (ext2fs_has_feature_meta_bg(fs->super))
		old_desc_blocks = fs->super->s_first_meta_bg;
	else
		old_desc_blocks = fs->desc_blocks + fs->super->s_reserved_gdt_blocks;
	r = malloc(sizeof(*r) * 6 * (size_t)fs->group_desc_count);
	if (!r)
		return EXT2_ET_NO_MEMORY;
	for (g = 0; g < fs->group_desc_count; g++) {
		blk64_t super_blk, old_desc, new_desc, b;
		blk_t used;

		ext2fs_super_and_bgd_loc2(fs, g, &super_blk, &old_desc, &new_desc, &used);
		/* As ext2fs_reserve_super_and_bgd reserves them. */
		if (super_blk || g == 0)
			r[n++] = (struct meta_run){ super_blk, 1, 0 };
		if (old_desc && old_desc < blocks)
			r[n++] = (struct meta_run){ old_desc, old_desc + old_desc_blocks > blocks ?
						    blocks - old_desc : old_desc_blocks, 0 };
		if (new_desc)
			r[n++] = (struct meta_run){ new_desc, 1, 0 };
		if (!flex) {
			first = ext2fs_group_first_block2(fs, g);
			last = ext2fs_group_last_block2(fs, g);
		}
		b = ext2fs_block_bitmap_loc(fs, g);
		if (b < first || b > last) {
			err = EXT2_ET_GDESC_BAD_BLOCK_MAP;
			goto out;
		}
		meta_add(r, &n, last_of, 0, b, 1, EXT2_ET_GDESC_BAD_BLOCK_MAP);
		b = ext2fs_inode_bitmap_loc(fs, g);
		if (b < first || b > last) {
			err = EXT2_ET_GDESC_BAD_INODE_MAP;
			goto out;
		}
		meta_add(r, &n, last_of, 1, b, 1, EXT2_ET_GDESC_BAD_INODE_MAP);
		b = ext2fs_inode_table_loc(fs, g);
		if (b < first || b + fs->inode_blocks_per_group - 1 > last) {
			err = EXT2_ET_GDESC_BAD_INODE_TABLE;
			goto out;
		}
		meta_add(r, &n, last_of, 2, b, fs->inode_blocks_per_group, EXT2_ET_GDESC_BAD_INODE_TABLE);
	}
	qsort(r, n, sizeof(*r), meta_run_cmp);
	for (i = 0; i < n; i++) {
		/* Overlaps the run reaching furthest so far: a clash unless both are descriptors. */
		if (i && r[i].start < end && (r[i].err || r[end_run].err)) {
			err = r[i].err ? r[i].err : r[end_run].err;
			goto out;
		}
		if (!i || r[i].start + r[i].len > end) {
			end = r[i].start + r[i].len;
			end_run = i;
		}
	}
out:
	free(r);
	return err;
}

/*
 * What the kernel checks before it trusts an image: that it fits on the
 * device, and that the group descriptors are sane and their checksums right.
 */
int check_geometry(ext2_filsys fs, const char *device, char *msg, size_t msglen)
{
	blk64_t dev_blocks = 0;
	errcode_t err;
	dgrp_t g;

	err = ext2fs_get_device_size2(device, (int)fs->blocksize, &dev_blocks);
	if (!err && dev_blocks && ext2fs_blocks_count(fs->super) > dev_blocks) {
		snprintf(msg, msglen, "%s: the filesystem has %llu blocks but the image or device holds only %llu: truncated?",
			 device, (unsigned long long)ext2fs_blocks_count(fs->super),
			 (unsigned long long)dev_blocks);
		return -EINVAL;
	}
	for (g = 0; g < fs->group_desc_count; g++)
		if (!ext2fs_group_desc_csum_verify(fs, g)) {
			snprintf(msg, msglen, "%s: group descriptor %u checksum is wrong: run e2fsck", device, g);
			return -EUCLEAN;
		}
	err = rr_check_desc(fs);
	if (err) {
		snprintf(msg, msglen, "%s: corrupt group descriptors (%s): run e2fsck", device, error_message(err));
		return -EUCLEAN;
	}
	return 0;
}

/* Blocks that hold static metadata, as the kernel leaves them out of f_blocks. */
uint64_t check_overhead_blocks(ext2_filsys fs)
{
	struct ext2_super_block *sb = fs->super;
	uint64_t total = sb->s_first_data_block;
	dgrp_t g;

	if (sb->s_overhead_clusters)
		return sb->s_overhead_clusters;
	for (g = 0; g < fs->group_desc_count; g++) {
		blk64_t super_blk, old_desc, new_desc;
		blk_t used = 0;

		ext2fs_super_and_bgd_loc2(fs, g, &super_blk, &old_desc, &new_desc, &used);
		total += used + 2 + fs->inode_blocks_per_group;
	}
	if (sb->s_journal_inum) {
		struct ext2_inode in;

		if (!ext2fs_read_inode(fs, sb->s_journal_inum, &in))
			total += ext2fs_get_stat_i_blocks(fs, &in) / (fs->blocksize / 512);
	}
	return total;
}

// SPDX-License-Identifier: GPL-2.0
/*
 * rrmap's view of the filesystem: opening it read-only, the groups, and the
 * free space found in the block bitmap.
 *
 * The image is opened without EXT2_FLAG_RW, so libext2fs never writes
 * (nothing is replayed, no MMP block is taken, no superblock is updated),
 * and with EXT2_FLAG_64BITS, so the bitmaps are libext2fs's rbtrees: a
 * 16 TiB image costs memory for what it holds, not for its size.  Groups
 * marked BLOCK_UNINIT are not read (libext2fs fills in their metadata), and
 * free space is walked run by run (find first zero, find first set), never
 * block by block.
 */
#include "rrmap.h"

#include <et/com_err.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mfs_error(const struct map_image *m, errcode_t err, const char *what)
{
	fprintf(stderr, "rrmap: %s: %s: %s\n", m->path, what, err ? error_message(err) : "corrupt");
}

int mfs_open(struct map_image *m, const char *path)
{
	blk64_t size;
	errcode_t err;

	m->path = path;
	err = ext2fs_open2(path, NULL, EXT2_FLAG_64BITS, 0, 0, unix_io_manager, &m->fs);
	if (err) {
		mfs_error(m, err, "cannot open the filesystem");
		m->fs = NULL;
		return -1;
	}
	if (ext2fs_has_feature_bigalloc(m->fs->super)) {
		fprintf(stderr, "rrmap: %s: bigalloc (clusters) is not supported\n", path);
		return -1;
	}
	/* as e2fsck: a truncated image is corrupt even where nothing we read is missing */
	err = ext2fs_get_device_size2(path, m->fs->blocksize, &size);
	if (!err && size < ext2fs_blocks_count(m->fs->super)) {
		fprintf(stderr, "rrmap: %s: the filesystem has %llu blocks but the device only %llu (truncated?)\n",
			path, (unsigned long long)ext2fs_blocks_count(m->fs->super), (unsigned long long)size);
		return -1;
	}
	/*
	 * The open leaves the bit-array default: 512 MiB for a 16 TiB image,
	 * here and in ext2fs_check_desc's own map.
	 */
	m->fs->default_bitmap_type = EXT2FS_BMAP64_RBTREE;
	/* descriptors pointing outside their place would have us read anywhere */
	err = ext2fs_check_desc(m->fs);
	if (err) {
		mfs_error(m, err, "bad group descriptors");
		return -1;
	}
	err = ext2fs_read_bitmaps(m->fs);
	if (err) {
		mfs_error(m, err, "cannot read the bitmaps");
		return -1;
	}
	return mfs_init(m, m->fs);
}

int mfs_init(struct map_image *m, ext2_filsys fs)
{
	dgrp_t g;

	m->fs = fs;
	m->blocks = ext2fs_blocks_count(m->fs->super);
	m->blocksize = m->fs->blocksize;
	m->ngroups = m->fs->group_desc_count;
	m->flex = ext2fs_has_feature_flex_bg(m->fs->super) && m->fs->super->s_log_groups_per_flex < 31 ?
		1U << m->fs->super->s_log_groups_per_flex : 1;
	m->groups = calloc(m->ngroups, sizeof(*m->groups));
	if (!m->groups) {
		fprintf(stderr, "rrmap: out of memory\n");
		return -1;
	}
	for (g = 0; g < m->ngroups; g++) {
		struct map_group *x = &m->groups[g];

		x->first = ext2fs_group_first_block2(m->fs, g);
		x->nblocks = ext2fs_group_last_block2(m->fs, g) - x->first + 1;
		x->has_super = ext2fs_bg_has_super(m->fs, g);
		x->flex_leader = m->flex > 1 && g % m->flex == 0;
	}
	return 0;
}

void mfs_close(struct map_image *m)
{
	if (m->fs)
		ext2fs_close_free(&m->fs);
	free(m->groups);
	free(m->extents);
	free(m->frags);
}

static unsigned int mfs_log2(uint64_t n)
{
	unsigned int l = 0;

	while (n >>= 1)
		l++;
	return l;
}

/* A free run [a, b): the e2freefrag figures, then its pieces per group. */
static void mfs_free_run(struct map_image *m, uint64_t a, uint64_t b)
{
	uint64_t len = b - a, first = m->fs->super->s_first_data_block;
	unsigned int i = mfs_log2(len);
	dgrp_t g;

	m->free_extents++;
	m->free_blocks += len;
	m->hist_count[i]++;
	m->hist_blocks[i] += len;
	if (len > m->max_free)
		m->max_free = len;
	if (!m->min_free || len < m->min_free)
		m->min_free = len;
	for (g = (a - first) / EXT2_BLOCKS_PER_GROUP(m->fs->super); g < m->ngroups; g++) {
		struct map_group *x = &m->groups[g];
		uint64_t lo = a > x->first ? a : x->first;
		uint64_t hi = b < x->first + x->nblocks ? b : x->first + x->nblocks;

		if (lo >= hi)
			break;
		x->free_extents++;
		x->used -= hi - lo;
		if (hi - lo > x->largest_free)
			x->largest_free = hi - lo;
	}
}

int mfs_scan_free(struct map_image *m)
{
	ext2fs_block_bitmap map = m->fs->block_map;
	uint64_t start = m->fs->super->s_first_data_block, end = m->blocks - 1, a, b;
	double sum = 0, sq = 0, dsum = 0, dsq = 0, dmean;
	errcode_t err;
	dgrp_t g;

	for (g = 0; g < m->ngroups; g++)
		m->groups[g].used = m->groups[g].nblocks;
	while (start <= end) {
		blk64_t x;

		err = ext2fs_find_first_zero_block_bitmap2(map, start, end, &x);
		if (err == ENOENT)
			break;
		if (err) {
			mfs_error(m, err, "while scanning the block bitmap");
			return -1;
		}
		a = x;
		err = ext2fs_find_first_set_block_bitmap2(map, a, end, &x);
		if (err && err != ENOENT) {
			mfs_error(m, err, "while scanning the block bitmap");
			return -1;
		}
		b = err == ENOENT ? end + 1 : x;
		mfs_free_run(m, a, b);
		start = b;
	}
	for (g = 0; g < m->ngroups; g++) {
		sum += m->groups[g].used;
		dsum += m->groups[g].data;
		m->touched += m->groups[g].data > 0;
	}
	m->used_mean = sum / m->ngroups;
	dmean = dsum / m->ngroups;
	for (g = 0; g < m->ngroups; g++) {
		sq += (m->groups[g].used - m->used_mean) * (m->groups[g].used - m->used_mean);
		dsq += (m->groups[g].data - dmean) * (m->groups[g].data - dmean);
	}
	m->used_cv = m->used_mean > 0 ? sqrt(sq / m->ngroups) / m->used_mean : 0;
	m->data_cv = dmean > 0 ? sqrt(dsq / m->ngroups) / dmean : 0;
	return 0;
}

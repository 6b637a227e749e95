// SPDX-License-Identifier: GPL-2.0
/*
 * The block and inode bitmaps between the image and libext2fs's in-memory
 * maps: read at mount without touching groups that were never initialised,
 * and written at each commit for the groups whose bitmap changed only.
 *
 * libext2fs's writer (ext2fs_write_bitmaps, run by ext2fs_flush) writes the
 * bitmaps of every initialised group whenever any changed: 8192 blocks per
 * commit on a 16 TiB image, too many for the metadata cache to hold and
 * compare.  Which groups changed is not tracked anywhere (libext2fs, the
 * allocator and the orphan code all mark bits), so each group keeps a
 * 64-bit sum of the block last read or written (io/sum.h), and a commit
 * writes a bitmap whose sum differs.
 */
#include "bitmaps.h"
#include "cache.h"
#include "sum.h"

#include <stdlib.h>
#include <string.h>

/* Slots of a new table (a power of two); it doubles when half full. */
#define SUMS_SLOTS_MIN 1024

static errcode_t sums_init(ext2_filsys fs, struct rr_bitmaps *bm)
{
	if (!bm)
		return 0;
	bm->ngroups = fs->group_desc_count;
	bm->n = 0;
	bm->nslots = SUMS_SLOTS_MIN;
	bm->slot = calloc(bm->nslots, sizeof(*bm->slot));
	return bm->slot ? 0 : EXT2_ET_NO_MEMORY;
}

void rr_bitmaps_free(struct rr_bitmaps *bm)
{
	if (!bm)
		return;
	free(bm->slot);
	bm->slot = NULL;
	bm->nslots = bm->n = 0;
	bm->ngroups = 0;
}

static struct rr_bitmap_sum *sum_slot(struct rr_bitmap_sum *slot, size_t nslots, uint64_t key)
{
	size_t i = (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 17) & (nslots - 1);

	while (slot[i].key1 && slot[i].key1 != key + 1)
		i = (i + 1) & (nslots - 1);
	return &slot[i];
}

/* Group g's bitmap's sum, or 0 for not known (a write then follows). */
static uint64_t sum_get(const struct rr_bitmaps *bm, dgrp_t g, int inode)
{
	struct rr_bitmap_sum *e = sum_slot(bm->slot, bm->nslots, 2 * (uint64_t)g + (unsigned int)inode);

	return e->key1 ? e->sum : 0;
}

/* Out of memory to grow, it is not kept: the next commit writes the bitmap again. */
static void sum_put(struct rr_bitmaps *bm, dgrp_t g, int inode, uint64_t sum)
{
	uint64_t key = 2 * (uint64_t)g + (unsigned int)inode;
	struct rr_bitmap_sum *e;

	if (!bm || !bm->slot || g >= bm->ngroups)
		return;
	e = sum_slot(bm->slot, bm->nslots, key);
	if (!e->key1 && 2 * (bm->n + 1) > bm->nslots) {
		size_t i, n = bm->nslots * 2;
		struct rr_bitmap_sum *t = calloc(n, sizeof(*t));

		if (!t)
			return;
		for (i = 0; i < bm->nslots; i++)
			if (bm->slot[i].key1)
				*sum_slot(t, n, bm->slot[i].key1 - 1) = bm->slot[i];
		free(bm->slot);
		bm->slot = t;
		bm->nslots = n;
		e = sum_slot(t, n, key);
	}
	if (!e->key1) {
		e->key1 = key + 1;
		bm->n++;
	}
	e->sum = sum;
}

/* The group's block (or inode) bitmap block rr_bitmaps_read reads, or 0 for none. */
static blk64_t bitmap_to_read(ext2_filsys fs, dgrp_t g, int inode)
{
	blk64_t b = inode ? ext2fs_inode_bitmap_loc(fs, g) : ext2fs_block_bitmap_loc(fs, g);

	if (b >= ext2fs_blocks_count(fs->super))
		return 0;
	if (ext2fs_has_group_desc_csum(fs) &&
	    ext2fs_bg_flags_test(fs, g, inode ? EXT2_BG_INODE_UNINIT : EXT2_BG_BLOCK_UNINIT) &&
	    ext2fs_group_desc_csum_verify(fs, g))
		return 0;
	return b;
}

/*
 * Ask the kernel for every bitmap block rr_bitmaps_read will read, before
 * it reads them one by one: with flex_bg a 16 TiB image has 8192 of them,
 * 2 GiB apart, and waiting for each in turn was most of its mount time on
 * a cold cache.  Only through our io manager (the unit tests use unix_io).
 */
static void bitmaps_readahead(ext2_filsys fs)
{
	int inode;
	dgrp_t g;

	for (g = 0; g < fs->group_desc_count; g++)
		for (inode = 0; inode < 2; inode++) {
			blk64_t b = bitmap_to_read(fs, g, inode);

			if (b)
				io_channel_cache_readahead(fs->io, b, 1);
		}
}

/* Group g's block (inode 0) or inode bitmap from dev into its in-memory map, and its sum into bm. */
static errcode_t load_bitmap(ext2_filsys fs, io_channel dev, struct rr_bitmaps *bm, dgrp_t g, int inode,
			     int nocsum, char *buf)
{
	uint32_t nbytes = (inode ? EXT2_INODES_PER_GROUP(fs->super) : EXT2_CLUSTERS_PER_GROUP(fs->super)) / 8;
	blk64_t b = bitmap_to_read(fs, g, inode);
	errcode_t err;

	if (!b)
		return 0;
	if (io_channel_read_blk64(dev, b, 1, buf))
		return inode ? EXT2_ET_INODE_BITMAP_READ : EXT2_ET_BLOCK_BITMAP_READ;
	if (!nocsum && !(inode ? ext2fs_inode_bitmap_csum_verify(fs, g, buf, (int)nbytes) :
			 ext2fs_block_bitmap_csum_verify(fs, g, buf, (int)nbytes)))
		return inode ? EXT2_ET_INODE_BITMAP_CSUM_INVALID : EXT2_ET_BLOCK_BITMAP_CSUM_INVALID;
	if (inode)
		err = ext2fs_set_inode_bitmap_range2(fs->inode_map,
						     (uint64_t)g * EXT2_INODES_PER_GROUP(fs->super) + 1,
						     nbytes * 8, buf);
	else
		err = ext2fs_set_block_bitmap_range2(fs->block_map, ext2fs_group_first_block2(fs, g),
						     nbytes * 8, buf);
	if (!err)
		sum_put(bm, g, inode, io_block_sum(buf, fs->blocksize));
	return err;
}

/*
 * ext2fs_read_bitmaps, without the work for groups that were never
 * initialised.  libext2fs's reader hands every group's bitmap to the
 * in-memory map, a zeroed buffer for BLOCK_UNINIT and INODE_UNINIT ones:
 * 131072 of them on a 16 TiB image, a second of mount time.  Here those
 * groups cost only what ext2fs_read_bitmaps adds for them afterwards (their
 * superblock, descriptors, bitmaps and inode table marked in use), and
 * nothing is read for them.  The maps come from fs->default_bitmap_type.
 * bm learns what each block held (NULL: not kept).
 */
errcode_t rr_bitmaps_read(ext2_filsys fs, struct rr_bitmaps *bm)
{
	int nocsum = !!(fs->flags & EXT2_FLAG_IGNORE_CSUM_ERRORS);
	int flags = fs->flags;
	char *buf = NULL;
	errcode_t err;
	dgrp_t g;

	/*
	 * Past the metadata cache: each bitmap block is read once, into
	 * libext2fs's bitmaps (on 16 TiB, 64 MiB of them would fill the cache
	 * at every mount and stay in memory).
	 */
	io_channel dev = io_cache_lower(fs->io);

	if (fs->block_map || fs->inode_map)
		return ext2fs_read_bitmaps(fs);
	bitmaps_readahead(fs);
	err = sums_init(fs, bm);
	if (!err)
		err = ext2fs_get_mem(fs->blocksize, &buf);
	if (!err)
		err = ext2fs_allocate_block_bitmap(fs, "block bitmap", &fs->block_map);
	if (!err)
		err = ext2fs_allocate_inode_bitmap(fs, "inode bitmap", &fs->inode_map);
	for (g = 0; !err && g < fs->group_desc_count; g++) {
		err = load_bitmap(fs, dev, bm, g, 0, nocsum, buf);
		if (!err)
			err = load_bitmap(fs, dev, bm, g, 1, nocsum, buf);
	}
	/* As ext2fs_read_bitmaps: an uninitialised group's own metadata is in use. */
	for (g = 0; !err && g < fs->group_desc_count; g++) {
		blk64_t b;

		if (!ext2fs_bg_flags_test(fs, g, EXT2_BG_BLOCK_UNINIT))
			continue;
		ext2fs_reserve_super_and_bgd(fs, g, fs->block_map);
		if ((b = ext2fs_inode_table_loc(fs, g)))
			ext2fs_mark_block_bitmap_range2(fs->block_map, b, fs->inode_blocks_per_group);
		if ((b = ext2fs_block_bitmap_loc(fs, g)))
			ext2fs_mark_block_bitmap2(fs->block_map, b);
		if ((b = ext2fs_inode_bitmap_loc(fs, g)))
			ext2fs_mark_block_bitmap2(fs->block_map, b);
	}
	ext2fs_free_mem(&buf);
	if (err) {
		if (fs->block_map)
			ext2fs_free_block_bitmap(fs->block_map);
		if (fs->inode_map)
			ext2fs_free_inode_bitmap(fs->inode_map);
		fs->block_map = NULL;
		fs->inode_map = NULL;
		rr_bitmaps_free(bm);
	}
	/* Reading is not a change: nothing to write back. */
	fs->flags = (fs->flags & ~(EXT2_FLAG_BB_DIRTY | EXT2_FLAG_IB_DIRTY)) |
		    (flags & (EXT2_FLAG_BB_DIRTY | EXT2_FLAG_IB_DIRTY));
	return err;
}


/*
 * Group g's block (inode: 1) bitmap to buf as ext2fs_write_bitmaps lays it
 * out: the map's bits, the rest of the block all ones (for the last group's
 * blocks past the end, too).
 */
static errcode_t bitmap_block(ext2_filsys fs, dgrp_t g, int inode, unsigned char *buf, int *nbytes)
{
	memset(buf, 0xff, fs->blocksize);
	if (inode) {
		*nbytes = (int)((EXT2_INODES_PER_GROUP(fs->super) + 7) / 8);
		return ext2fs_get_inode_bitmap_range2(fs->inode_map,
						      (uint64_t)g * EXT2_INODES_PER_GROUP(fs->super) + 1,
						      (unsigned int)*nbytes * 8, buf);
	}
	*nbytes = (int)(EXT2_CLUSTERS_PER_GROUP(fs->super) / 8);
	{
		errcode_t err = ext2fs_get_block_bitmap_range2(fs->block_map, ext2fs_group_first_block2(fs, g),
							       (unsigned int)*nbytes * 8, buf);
		uint64_t used = (ext2fs_blocks_count(fs->super) - fs->super->s_first_data_block) %
				EXT2_BLOCKS_PER_GROUP(fs->super);
		unsigned int j;

		if (!err && g == fs->group_desc_count - 1 && used)
			for (j = (unsigned int)used; j < fs->blocksize * 8; j++)
				ext2fs_set_bit(j, buf);
		return err;
	}
}

/*
 * Write the bitmaps that changed since they were read or last written,
 * with their checksums in the group descriptors, and tell libext2fs the
 * maps are clean (its writer in ext2fs_flush then writes nothing).  Before
 * ext2fs_flush, which writes the descriptors.  Without sums (bm NULL or
 * empty) it leaves everything to libext2fs.
 */
errcode_t rr_bitmaps_write(ext2_filsys fs, struct rr_bitmaps *bm)
{
	int csum = ext2fs_has_group_desc_csum(fs), dirty[2], nbytes, inode;
	unsigned char *buf;
	errcode_t err = 0;
	dgrp_t g;

	if (!bm || !bm->slot || bm->ngroups != fs->group_desc_count || !(fs->flags & EXT2_FLAG_RW))
		return 0;
	dirty[0] = fs->block_map && ext2fs_test_bb_dirty(fs);
	dirty[1] = fs->inode_map && ext2fs_test_ib_dirty(fs);
	if (!dirty[0] && !dirty[1])
		return 0;
	err = ext2fs_get_mem(fs->blocksize, &buf);
	if (err)
		return err;
	for (g = 0; !err && g < fs->group_desc_count; g++)
		for (inode = 0; !err && inode < 2; inode++) {
			blk64_t blk = inode ? ext2fs_inode_bitmap_loc(fs, g) : ext2fs_block_bitmap_loc(fs, g);
			uint64_t now;

			if (!dirty[inode] ||
			    (csum && ext2fs_bg_flags_test(fs, g, inode ? EXT2_BG_INODE_UNINIT
									: EXT2_BG_BLOCK_UNINIT)))
				continue;
			err = bitmap_block(fs, g, inode, buf, &nbytes);
			if (err)
				break;
			/* As libext2fs's writer: the descriptor's own checksum, changed bitmap or not. */
			ext2fs_group_desc_csum_set(fs, g);
			fs->flags |= EXT2_FLAG_DIRTY;
			now = io_block_sum(buf, fs->blocksize);
			if (now == sum_get(bm, g, inode))
				continue;
			err = inode ? ext2fs_inode_bitmap_csum_set(fs, g, (char *)buf, nbytes)
				    : ext2fs_block_bitmap_csum_set(fs, g, (char *)buf, nbytes);
			if (err)
				break;
			ext2fs_group_desc_csum_set(fs, g);
			if (blk && blk < ext2fs_blocks_count(fs->super))
				err = io_channel_write_blk64(fs->io, blk, 1, buf);
			if (!err)
				sum_put(bm, g, inode, now);
		}
	ext2fs_free_mem(&buf);
	/* A failure leaves the maps dirty: libext2fs's writer tries every group. */
	if (!err)
		fs->flags &= ~(EXT2_FLAG_BB_DIRTY | EXT2_FLAG_IB_DIRTY);
	return err;
}

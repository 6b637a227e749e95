// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests: what rrfuse does at open instead of libext2fs, so that a huge
 * sparse image mounts without a bitmap of every block: rr_bitmaps_read must
 * give the same block and inode bitmaps as ext2fs_read_bitmaps,
 * rr_bitmaps_write must leave the same bitmaps and descriptors on disk as
 * ext2fs_write_bitmaps while writing only the groups that changed, and
 * rr_check_desc must accept and refuse the same descriptors as
 * ext2fs_check_desc, on every geometry mke2fs makes (1 KiB blocks, no
 * flex_bg, meta_bg, no checksums, a used image, 1 TiB sparse).
 */
#include "unit.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rrfs.h"
#include "imgcheck.h"

static ext2_filsys open_plain(const char *path, int rw)
{
	ext2_filsys fs;

	ck_assert_int_eq(ext2fs_open(path, (rw ? EXT2_FLAG_RW : 0) | EXT2_FLAG_64BITS, 0, 0,
				     unix_io_manager, &fs), 0);
	return fs;
}

/* Both readers on path; the maps must agree on every block and inode. */
static void compare_readers(const char *path)
{
	ext2_filsys ref = open_plain(path, 0), fs = open_plain(path, 0);
	size_t bn = EXT2_BLOCKS_PER_GROUP(ref->super) / 8, in = EXT2_INODES_PER_GROUP(ref->super) / 8;
	char *x = malloc(bn), *y = malloc(bn);
	dgrp_t g;

	ck_assert_int_eq(ext2fs_read_bitmaps(ref), 0);
	fs->default_bitmap_type = EXT2FS_BMAP64_RBTREE;
	ck_assert_int_eq(rr_bitmaps_read(fs, NULL), 0);
	ck_assert(!(fs->flags & (EXT2_FLAG_BB_DIRTY | EXT2_FLAG_IB_DIRTY)));
	for (g = 0; g < ref->group_desc_count; g++) {
		blk64_t first = ext2fs_group_first_block2(ref, g);
		blk64_t n = ext2fs_group_last_block2(ref, g) - first + 1;

		ck_assert_int_eq(ext2fs_get_block_bitmap_range2(ref->block_map, first, n, x), 0);
		ck_assert_int_eq(ext2fs_get_block_bitmap_range2(fs->block_map, first, n, y), 0);
		for (blk64_t i = 0; i < n; i++)
			if (!(x[i / 8] & (1 << (i % 8))) != !(y[i / 8] & (1 << (i % 8))))
				ck_abort_msg("%s: block %llu: %s by libext2fs, %s by rr_bitmaps_read", path,
					     (unsigned long long)(first + i),
					     x[i / 8] & (1 << (i % 8)) ? "used" : "free",
					     y[i / 8] & (1 << (i % 8)) ? "used" : "free");
		ck_assert_int_eq(ext2fs_get_inode_bitmap_range2(ref->inode_map,
				 (uint64_t)g * in * 8 + 1, in * 8, x), 0);
		ck_assert_int_eq(ext2fs_get_inode_bitmap_range2(fs->inode_map,
				 (uint64_t)g * in * 8 + 1, in * 8, y), 0);
		if (memcmp(x, y, in))
			ck_abort_msg("%s: inode bitmaps differ in group %u", path, g);
	}
	ck_assert_int_eq(rr_check_desc(fs), 0);
	ck_assert_int_eq(ext2fs_check_desc(ref), 0);
	free(x);
	free(y);
	ext2fs_close_free(&ref);
	ext2fs_close_free(&fs);
}

static void one_geometry(const char *size, const char *mkfs_args)
{
	char path[64];
	ext2_filsys fs = unit_image(path, size, mkfs_args);

	ext2fs_close_free(&fs);
	compare_readers(path);
	unlink(path);
}

START_TEST(readers_agree_fresh)
{
	static const char *const geo[][2] = {
		{ "1G", "-b 4096" },
		{ "256M", "-b 1024" },
		{ "512M", "-b 4096 -O ^flex_bg" },
		{ "512M", "-b 4096 -O meta_bg,^resize_inode" },
		{ "512M", "-b 4096 -O ^metadata_csum,^uninit_bg" },
		{ "300M", "-b 2048 -G 4" },
		{ "1T", "-b 4096" },
	};

	one_geometry(geo[_i][0], geo[_i][1]);
}
END_TEST

/* An image with used and freed blocks and inodes scattered over many groups. */
START_TEST(readers_agree_used)
{
	char path[64];
	ext2_filsys fs = unit_image(path, "512M", "-b 4096 -N 20000");
	blk64_t b, goal = 0;
	ext2_ino_t ino;
	int i;

	for (i = 0; i < 3000; i++) {
		ck_assert_int_eq(ext2fs_new_block2(fs, goal, fs->block_map, &b), 0);
		ext2fs_block_alloc_stats2(fs, b, +1);
		if (i % 3 == 1)
			ext2fs_block_alloc_stats2(fs, b, -1);
		goal = (b * 7919 + 12345) % ext2fs_blocks_count(fs->super);
		ck_assert_int_eq(ext2fs_new_inode(fs, (ext2_ino_t)(i * 37 % 20000) + 1, 0100644, 0, &ino), 0);
		ext2fs_inode_alloc_stats2(fs, ino, +1, 0);
	}
	ck_assert_int_eq(ext2fs_close_free(&fs), 0);
	compare_readers(path);
	unlink(path);
}
END_TEST

/* Allocate and free blocks and inodes scattered over the groups, from seed. */
static void scatter(ext2_filsys fs, unsigned int seed, int n)
{
	blk64_t b, goal = seed;
	ext2_ino_t ino;
	int i;

	for (i = 0; i < n; i++) {
		ck_assert_int_eq(ext2fs_new_block2(fs, goal, fs->block_map, &b), 0);
		ext2fs_block_alloc_stats2(fs, b, +1);
		if (i % 3 == 1)
			ext2fs_block_alloc_stats2(fs, b, -1);
		goal = (b * 7919 + 12345 + seed) % ext2fs_blocks_count(fs->super);
		ck_assert_int_eq(ext2fs_new_inode(fs, (ext2_ino_t)((i + seed) * 37 % fs->super->s_inodes_count) + 1,
						  0100644, 0, &ino), 0);
		ext2fs_inode_alloc_stats2(fs, ino, +1, 0);
	}
}

static uint64_t bytes_written(ext2_filsys fs)
{
	io_stats st = NULL;

	/* unix_io holds writes in a small cache of its own: count what reached the file. */
	ck_assert_int_eq(io_channel_flush(fs->io), 0);
	ck_assert_ptr_nonnull(fs->io->manager->get_stats);
	fs->io->manager->get_stats(fs->io, &st);
	return st->bytes_written;
}

/* Both images' bitmaps and descriptors, read back by libext2fs, must be the same. */
static void compare_images(const char *a, const char *b)
{
	ext2_filsys x = open_plain(a, 0), y = open_plain(b, 0);
	dgrp_t g;

	ck_assert_int_eq(ext2fs_read_bitmaps(x), 0);
	ck_assert_int_eq(ext2fs_read_bitmaps(y), 0);
	ck_assert_int_eq(ext2fs_compare_block_bitmap(x->block_map, y->block_map), 0);
	ck_assert_int_eq(ext2fs_compare_inode_bitmap(x->inode_map, y->inode_map), 0);
	for (g = 0; g < x->group_desc_count; g++) {
		ck_assert_msg(!memcmp(ext2fs_group_desc(x, x->group_desc, g), ext2fs_group_desc(y, y->group_desc, g),
				      EXT2_DESC_SIZE(x->super)), "descriptors of group %u differ", g);
		ck_assert(ext2fs_group_desc_csum_verify(y, g));
	}
	ext2fs_close_free(&x);
	ext2fs_close_free(&y);
}

/*
 * The same changes to two copies of an image, one written by libext2fs,
 * one by rr_bitmaps_write: the same bitmaps and descriptors.  Then a change
 * in one group writes that group's bitmap alone, and no change nothing.
 */
START_TEST(writer_agrees_and_writes_what_changed)
{
	static const char *const geo[] = { "-b 4096", "-b 1024", "-b 4096 -O ^flex_bg",
					   "-b 4096 -O ^metadata_csum,^uninit_bg" };
	char ref[64], path[80], cmd[200];
	ext2_filsys fs = unit_image(ref, "512M", geo[_i]);
	struct rr_bitmaps bm = { 0 };
	uint64_t before;
	blk64_t b;

	ext2fs_close_free(&fs);
	snprintf(path, sizeof(path), "%s.rr", ref);
	snprintf(cmd, sizeof(cmd), "cp --sparse=always %s %s", ref, path);
	ck_assert_int_eq(system(cmd), 0);

	fs = open_plain(ref, 1);
	ck_assert_int_eq(ext2fs_read_bitmaps(fs), 0);
	scatter(fs, 1, 2000);
	ck_assert_int_eq(ext2fs_close_free(&fs), 0);

	fs = open_plain(path, 1);
	ck_assert_int_eq(rr_bitmaps_read(fs, &bm), 0);
	scatter(fs, 1, 2000);
	ck_assert_int_eq(rr_bitmaps_write(fs, &bm), 0);
	ck_assert(!(fs->flags & (EXT2_FLAG_BB_DIRTY | EXT2_FLAG_IB_DIRTY)));
	ck_assert_int_eq(ext2fs_flush(fs), 0);

	/* One block taken in the last group: its block bitmap, and nothing else. */
	before = bytes_written(fs);
	ck_assert_int_eq(ext2fs_find_first_zero_block_bitmap2(fs->block_map,
			 ext2fs_group_first_block2(fs, fs->group_desc_count - 1),
			 ext2fs_group_last_block2(fs, fs->group_desc_count - 1), &b), 0);
	ext2fs_block_alloc_stats2(fs, b, +1);
	ck_assert_int_eq(rr_bitmaps_write(fs, &bm), 0);
	ck_assert_int_eq(bytes_written(fs) - before, fs->blocksize);
	ext2fs_block_alloc_stats2(fs, b, -1);
	ck_assert_int_eq(rr_bitmaps_write(fs, &bm), 0);
	/* Marked dirty, nothing different from the disk: nothing written. */
	before = bytes_written(fs);
	ext2fs_mark_bb_dirty(fs);
	ext2fs_mark_ib_dirty(fs);
	ck_assert_int_eq(rr_bitmaps_write(fs, &bm), 0);
	ck_assert_int_eq(bytes_written(fs) - before, 0);
	ck_assert_int_eq(ext2fs_close_free(&fs), 0);
	rr_bitmaps_free(&bm);

	/* (Not e2fsck: the scattered blocks and inodes belong to no file in either.) */
	compare_images(ref, path);
	unlink(ref);
	unlink(path);
}
END_TEST

/* Break the descriptors of one group as fuzzers do; both checks must refuse. */
START_TEST(check_desc_refuses_the_same)
{
	char path[64];
	ext2_filsys fs = unit_image(path, "256M", _i < 4 ? "-b 4096" : "-b 4096 -O ^flex_bg");
	dgrp_t g = 1, other = 0;
	errcode_t ours, theirs;

	switch (_i % 4) {
	case 0:		/* block bitmap shared with another group */
		ext2fs_block_bitmap_loc_set(fs, g, ext2fs_block_bitmap_loc(fs, other));
		break;
	case 1:		/* inode bitmap inside another group's inode table */
		ext2fs_inode_bitmap_loc_set(fs, g, ext2fs_inode_table_loc(fs, other) + 3);
		break;
	case 2:		/* inode table over the descriptors */
		ext2fs_inode_table_loc_set(fs, g, fs->super->s_first_data_block + 1);
		break;
	case 3:		/* block bitmap past the end */
		ext2fs_block_bitmap_loc_set(fs, g, ext2fs_blocks_count(fs->super) + 5);
		break;
	}
	ours = rr_check_desc(fs);
	theirs = ext2fs_check_desc(fs);
	ck_assert_msg(theirs != 0, "case %d: libext2fs accepted it", _i);
	ck_assert_msg(ours != 0, "case %d: rr_check_desc accepted what libext2fs refuses (%s)", _i,
		      error_message(theirs));
	fs->flags &= ~(EXT2_FLAG_DIRTY | EXT2_FLAG_CHANGED);
	ext2fs_close_free(&fs);
	unlink(path);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("open");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, readers_agree_fresh, 0, 7);
	tcase_add_test(tc, readers_agree_used);
	tcase_add_loop_test(tc, writer_agrees_and_writes_what_changed, 0, 4);
	tcase_add_loop_test(tc, check_desc_refuses_the_same, 0, 8);
	suite_add_tcase(s, tc);
	return unit_run(s);
}

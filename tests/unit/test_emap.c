// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests: the cached block map (emap_cache_set, emap_lookup), and the
 * on-disk tree helpers on a real image made by mke2fs, checked by e2fsck.
 */
#include "unit.h"
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rrfs.h"

static struct rr_emap m;

static void setup(void)
{
	memset(&m, 0, sizeof(m));
}

static void teardown(void)
{
	free(m.v);
}

static void expect(uint64_t lblk, uint64_t pblk, uint32_t len, uint32_t uninit)
{
	struct rr_ext r;

	emap_lookup(&m, lblk, &r);
	ck_assert_uint_eq(r.pblk, pblk);
	ck_assert_uint_eq(r.len, len);
	ck_assert_uint_eq(r.uninit, uninit);
}

START_TEST(empty_is_hole)
{
	expect(0, 0, UINT32_MAX, 0);
	expect(12345, 0, UINT32_MAX, 0);
}
END_TEST

START_TEST(insert_and_merge)
{
	emap_cache_set(&m, 0, 10, 100, 0);
	emap_cache_set(&m, 10, 5, 110, 0);	/* contiguous: merges */
	ck_assert_uint_eq(m.n, 1);
	expect(3, 103, 12, 0);
	emap_cache_set(&m, 20, 5, 500, 0);
	ck_assert_uint_eq(m.n, 2);
	expect(15, 0, 5, 0);			/* hole up to the next extent */
	expect(24, 504, 1, 0);
	expect(25, 0, UINT32_MAX, 0);
}
END_TEST

START_TEST(split_inside)
{
	emap_cache_set(&m, 0, 100, 1000, 1);	/* unwritten */
	emap_cache_set(&m, 40, 10, 1040, 0);	/* written in the middle */
	ck_assert_uint_eq(m.n, 3);
	expect(0, 1000, 40, 1);
	expect(40, 1040, 10, 0);
	expect(50, 1050, 50, 1);
	/* Writing the rest makes one written extent again. */
	emap_cache_set(&m, 0, 40, 1000, 0);
	emap_cache_set(&m, 50, 50, 1050, 0);
	ck_assert_uint_eq(m.n, 1);
	expect(0, 1000, 100, 0);
}
END_TEST

START_TEST(overwrite_spanning)
{
	emap_cache_set(&m, 0, 10, 100, 0);
	emap_cache_set(&m, 20, 10, 200, 0);
	emap_cache_set(&m, 40, 10, 300, 0);
	emap_cache_set(&m, 5, 40, 900, 0);	/* covers the middle one entirely */
	ck_assert_uint_eq(m.n, 3);
	expect(0, 100, 5, 0);
	expect(5, 900, 40, 0);
	expect(45, 305, 5, 0);
}
END_TEST

START_TEST(many_random)
{
	/* Against a flat array model of 4096 blocks. */
	static uint64_t model[4096];
	unsigned int seed = 42, i;

	memset(model, 0, sizeof(model));
	for (i = 0; i < 2000; i++) {
		uint32_t l = (uint32_t)(rand_r(&seed) % 4000), n = 1 + (uint32_t)(rand_r(&seed) % 96);
		uint64_t p = 10000 + (uint64_t)(rand_r(&seed) % 100000);
		uint32_t k;

		if (l + n > 4096)
			n = 4096 - l;
		emap_cache_set(&m, l, n, p, 0);
		for (k = 0; k < n; k++)
			model[l + k] = p + k;
	}
	for (i = 0; i < 4096; i++) {
		struct rr_ext r;

		emap_lookup(&m, i, &r);
		ck_assert_uint_eq(r.pblk, model[i]);
	}
	for (i = 1; i < m.n; i++)
		ck_assert_uint_ge(m.v[i].lblk, m.v[i - 1].lblk + m.v[i - 1].len);
}
END_TEST

/*
 * A file whose last extent ends on the filesystem's last block: punching
 * its tail, then all of it, frees every block (e2fsprogs 1.47.0's own punch
 * stops there with "Illegal block number").
 */
START_TEST(punch_at_fs_end)
{
	char img[32], cmd[256];
	struct rr_fs rfs = { 0 };
	struct ext2_inode_large in;
	ext2_filsys fs = unit_image(img, "16M", "-b 1024");
	ext2_ino_t ino;
	blk64_t end;

	rfs.fs = fs;
	end = ext2fs_blocks_count(fs->super);
	ck_assert(ext2fs_test_block_bitmap_range2(fs->block_map, end - 40, 40));	/* all free */

	ck_assert_int_eq(ext2fs_new_inode(fs, EXT2_ROOT_INO, LINUX_S_IFREG | 0644, NULL, &ino), 0);
	ext2fs_inode_alloc_stats2(fs, ino, +1, 0);
	memset(&in, 0, sizeof(in));
	in.i_mode = LINUX_S_IFREG | 0644;
	in.i_links_count = 1;
	in.i_extra_isize = sizeof(in) - EXT2_GOOD_OLD_INODE_SIZE;
	in.i_flags = EXT4_EXTENTS_FL;
	ck_assert_int_eq(ext2fs_write_new_inode(fs, ino, (struct ext2_inode *)&in), 0);
	ck_assert_int_eq(ext2fs_read_inode_full(fs, ino, (struct ext2_inode *)&in, sizeof(in)), 0);
	/* Blocks 0-19 at the very end of the filesystem, 20-39 just before them. */
	ext2fs_block_alloc_stats_range(fs, end - 40, 40, +1);
	ck_assert_int_eq(emap_tree_map(&rfs, ino, &in, 0, end - 20, 20, 0), 0);
	ck_assert_int_eq(emap_tree_map(&rfs, ino, &in, 20, end - 40, 20, 0), 0);
	in.i_size = 40 * fs->blocksize;
	ck_assert_int_eq(inode_write(&rfs, ino, &in), 0);
	ck_assert_int_eq(ext2fs_link(fs, EXT2_ROOT_INO, "f", ino, EXT2_FT_REG_FILE), 0);

	/* The tail only: blocks 10-19 map end-10..end-1. */
	ck_assert_int_eq(emap_tree_punch(&rfs, ino, &in, 10, 19), 0);
	ck_assert(ext2fs_test_block_bitmap_range2(fs->block_map, end - 10, 10));
	ck_assert(ext2fs_test_block_bitmap2(fs->block_map, end - 11));
	ck_assert_uint_eq(ext2fs_get_stat_i_blocks(fs, (struct ext2_inode *)&in), 30 * (fs->blocksize / 512));
	/* Map the last block again, alone, then free everything. */
	ext2fs_block_alloc_stats2(fs, end - 1, +1);
	ck_assert_int_eq(emap_tree_map(&rfs, ino, &in, 100, end - 1, 1, 0), 0);
	in.i_size = 101 * fs->blocksize;
	ck_assert_int_eq(inode_write(&rfs, ino, &in), 0);
	ck_assert_int_eq(emap_tree_punch(&rfs, ino, &in, 0, ~0ULL), 0);
	ck_assert(ext2fs_test_block_bitmap_range2(fs->block_map, end - 40, 40));
	ck_assert_uint_eq(ext2fs_get_stat_i_blocks(fs, (struct ext2_inode *)&in), 0);
	ck_assert_int_eq(ext2fs_close_free(&fs), 0);
	snprintf(cmd, sizeof(cmd), "e2fsck -fn %s >/dev/null 2>&1", img);
	ck_assert_int_eq(system(cmd), 0);
	unlink(img);
}
END_TEST

/* A fresh extent-mapped regular file in the root of fs; *in as on disk. */
static ext2_ino_t new_file(ext2_filsys fs, struct ext2_inode_large *in, const char *name)
{
	ext2_ino_t ino;

	ck_assert_int_eq(ext2fs_new_inode(fs, EXT2_ROOT_INO, LINUX_S_IFREG | 0644, NULL, &ino), 0);
	ext2fs_inode_alloc_stats2(fs, ino, +1, 0);
	memset(in, 0, sizeof(*in));
	in->i_mode = LINUX_S_IFREG | 0644;
	in->i_links_count = 1;
	in->i_extra_isize = sizeof(*in) - EXT2_GOOD_OLD_INODE_SIZE;
	in->i_flags = EXT4_EXTENTS_FL;
	ck_assert_int_eq(ext2fs_write_new_inode(fs, ino, (struct ext2_inode *)in), 0);
	ck_assert_int_eq(ext2fs_read_inode_full(fs, ino, (struct ext2_inode *)in, sizeof(*in)), 0);
	ck_assert_int_eq(ext2fs_link(fs, EXT2_ROOT_INO, name, ino, EXT2_FT_REG_FILE), 0);
	return ino;
}

/*
 * Runs mapped in random order, first in the inode's four slots (mapped
 * there directly), then past them (libext2fs's handle splits the root):
 * the tree holds every run, merged wherever lblk and pblk both continue,
 * as the kernel merges, and e2fsck agrees.
 */
START_TEST(root_then_tree_merges)
{
	enum { RUNS = 12, LEN = 3 };
	char img[32], cmd[256], name[16];
	struct rr_fs rfs = { 0 };
	ext2_filsys fs = unit_image(img, "16M", "-b 1024");
	unsigned int seed, t, i, k, order[RUNS];
	blk64_t base = 4000;

	rfs.fs = fs;
	for (t = 0; t < 40; t++) {
		struct ext2_inode_large in;
		struct ext2fs_extent ex;
		ext2_extent_handle_t h;
		uint64_t pblk[RUNS];
		uint32_t want_l[RUNS], want_n[RUNS], got = 0, nw = 0;
		int op = EXT2_EXTENT_ROOT;
		ext2_ino_t ino;

		snprintf(name, sizeof(name), "f%u", t);
		ino = new_file(fs, &in, name);
		seed = t + 1;
		/* Run i at lblk 3i; its pblk continues run i-1's, except where a break is drawn. */
		for (i = 0; i < RUNS; i++) {
			pblk[i] = base + (uint64_t)i * LEN + ((i && rand_r(&seed) % 3 == 0) ? RUNS * LEN : 0);
			if (i && pblk[i] != pblk[i - 1] + LEN)
				pblk[i] = base + RUNS * LEN + (uint64_t)i * LEN;	/* a break, still unique */
			order[i] = i;
		}
		for (i = RUNS - 1; i > 0; i--) {
			k = (unsigned int)rand_r(&seed) % (i + 1);
			unsigned int x = order[i];

			order[i] = order[k];
			order[k] = x;
		}
		for (i = 0; i < RUNS; i++)
			ext2fs_block_alloc_stats_range(fs, pblk[i], LEN, +1);
		for (i = 0; i < RUNS; i++)
			ck_assert_int_eq(emap_tree_map(&rfs, ino, &in, (uint64_t)order[i] * LEN,
						       pblk[order[i]], LEN, 0), 0);
		in.i_size = (uint64_t)RUNS * LEN * fs->blocksize;
		ck_assert_int_eq(inode_write(&rfs, ino, &in), 0);
		for (i = 0; i < RUNS; i++) {
			if (nw && pblk[i] == pblk[i - 1] + LEN) {
				want_n[nw - 1] += LEN;
				continue;
			}
			want_l[nw] = i * LEN;
			want_n[nw++] = LEN;
		}
		ck_assert_int_eq(ext2fs_extent_open2(fs, ino, (struct ext2_inode *)&in, &h), 0);
		while (!ext2fs_extent_get(h, op, &ex)) {
			op = EXT2_EXTENT_NEXT_LEAF;
			if (!(ex.e_flags & EXT2_EXTENT_FLAGS_LEAF))
				continue;
			ck_assert_uint_lt(got, nw);
			ck_assert_uint_eq(ex.e_lblk, want_l[got]);
			ck_assert_uint_eq(ex.e_len, want_n[got]);
			ck_assert_uint_eq(ex.e_pblk, pblk[want_l[got] / LEN]);
			got++;
			/* The rest of this leaf. */
			while (!ext2fs_extent_get(h, EXT2_EXTENT_NEXT_SIB, &ex)) {
				ck_assert_uint_lt(got, nw);
				ck_assert_uint_eq(ex.e_lblk, want_l[got]);
				ck_assert_uint_eq(ex.e_len, want_n[got]);
				got++;
			}
		}
		ext2fs_extent_free(h);
		ck_assert_uint_eq(got, nw);
		/* The next file takes the same blocks: this one lets them go (punch frees them). */
		ck_assert_int_eq(ext2fs_unlink(fs, EXT2_ROOT_INO, name, ino, 0), 0);
		ck_assert_int_eq(emap_tree_punch(&rfs, ino, &in, 0, ~0ULL), 0);
		in.i_links_count = 0;
		in.i_dtime = 0x60000000;	/* a time, not an orphan list's next inode */
		ck_assert_int_eq(inode_write(&rfs, ino, &in), 0);
		ext2fs_inode_alloc_stats2(fs, ino, -1, 0);
	}
	ck_assert_int_eq(ext2fs_close_free(&fs), 0);
	snprintf(cmd, sizeof(cmd), "e2fsck -fn %s >/dev/null 2>&1", img);
	ck_assert_int_eq(system(cmd), 0);
	unlink(img);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("emap");
	TCase *tc = tcase_create("cache");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, empty_is_hole);
	tcase_add_test(tc, insert_and_merge);
	tcase_add_test(tc, split_inside);
	tcase_add_test(tc, overwrite_spanning);
	tcase_add_test(tc, many_random);
	suite_add_tcase(s, tc);
	tc = tcase_create("tree");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, punch_at_fs_end);
	tcase_add_test(tc, root_then_tree_merges);
	suite_add_tcase(s, tc);
	return unit_run(s);
}

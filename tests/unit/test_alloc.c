// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests: the allocator on a real ext4 image made by mke2fs, no mount.
 * Goal first, contiguity, reserves, ENOSPC, and libext2fs's own allocations
 * going through the callbacks with exact accounting.
 */
#include <check.h>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rrfuse/alloc.h"

static char img[64];
static ext2_filsys fs;
static struct rr_alloc *a;

static void setup(void)
{
	char cmd[256];
	int fd;

	snprintf(img, sizeof(img), "/tmp/rralloc-test.XXXXXX");
	fd = mkstemp(img);
	ck_assert_int_ge(fd, 0);
	close(fd);
	snprintf(cmd, sizeof(cmd), "truncate -s 64M %s && mke2fs -q -F -t ext4 -b 4096 -m 5 %s", img, img);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_int_eq(ext2fs_open(img, EXT2_FLAG_RW | EXT2_FLAG_64BITS, 0, 0, unix_io_manager, &fs), 0);
	ck_assert_int_eq(ext2fs_read_bitmaps(fs), 0);
	ck_assert_int_eq(rr_alloc_attach(fs, NULL, &a), 0);
}

static void teardown(void)
{
	rr_alloc_detach(a);
	ext2fs_close_free(&fs);
	unlink(img);
}

START_TEST(goal_first_and_contiguous)
{
	struct rr_alloc_req req = { .len = 256, .goal = 5000, .flags = RR_ALLOC_DATA };
	struct rr_extent ex, ex2;
	uint64_t before = ext2fs_free_blocks_count(fs->super);

	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), 0);
	ck_assert_uint_eq(ex.pblk, 5000);
	ck_assert_uint_eq(ex.len, 256);
	ck_assert(ext2fs_test_block_bitmap_range2(fs->block_map, 5000, 256) == 0);
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), before - 256);
	/* The next request at the same goal lands just after. */
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex2), 0);
	ck_assert_uint_eq(ex2.pblk, 5256);
	rr_free_blocks(a, ex.pblk, ex.len);
	rr_free_blocks(a, ex2.pblk, ex2.len);
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), before);
}
END_TEST

START_TEST(reserves_and_enospc)
{
	uint64_t r = ext2fs_r_blocks_count(fs->super), meta = rr_alloc_meta_reserve(a);
	struct rr_alloc_req req = { .len = 4096, .flags = RR_ALLOC_DATA };
	struct rr_extent ex;
	uint64_t got = 0;

	ck_assert_uint_gt(r, 0);
	ck_assert_uint_gt(meta, 0);
	while (rr_alloc_blocks(a, &req, &ex) == 0)
		got += ex.len;
	/* A normal user stops at the root reserve plus the metadata reserve. */
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), r + meta);
	ck_assert_uint_eq(rr_alloc_avail(a, 0), 0);
	/* Root goes on to the metadata reserve. */
	req.flags |= RR_ALLOC_USE_ROOT_RESV;
	while (rr_alloc_blocks(a, &req, &ex) == 0)
		got += ex.len;
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), meta);
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), -ENOSPC);
	/* libext2fs's metadata allocations may still use the last blocks. */
	{
		blk64_t b;

		ck_assert_int_eq(ext2fs_alloc_block2(fs, 0, NULL, &b), 0);
		ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), meta - 1);
	}
	ck_assert_uint_gt(got, 0);
}
END_TEST

START_TEST(libext2fs_alloc_goes_through_callback)
{
	blk64_t b1, b2;
	uint64_t before = ext2fs_free_blocks_count(fs->super);

	/* Accounted exactly once even though both we and libext2fs are involved. */
	ck_assert_int_eq(ext2fs_alloc_block2(fs, 7000, NULL, &b1), 0);
	ck_assert_uint_eq(b1, 7000);
	ck_assert_int_eq(ext2fs_alloc_block2(fs, 7000, NULL, &b2), 0);
	ck_assert_uint_eq(b2, 7001);
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), before - 2);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("alloc");
	TCase *tc = tcase_create("simple");
	SRunner *sr;
	int failed;

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, goal_first_and_contiguous);
	tcase_add_test(tc, reserves_and_enospc);
	tcase_add_test(tc, libext2fs_alloc_goes_through_callback);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

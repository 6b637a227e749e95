// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests: inode placement (src/core/ialloc.c) on images made by mke2fs with
 * 16 groups in 8 flex groups of 2: top-level directories (in the root or a
 * TOPDIR directory) spread over flex groups, a subdirectory stays in its
 * parent's flex group until that one is crowded, files go to their parent's
 * group and leave a full flex group for another, without a journal an
 * inode freed a moment ago is passed over, and the whole-fs counts move as
 * the kernel's per-CPU counters do.  The through-the-mount
 * comparison with the kernel's own choices is tests/mount/test_ialloc.py.
 */
#include "unit.h"
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ialloc.h"

#define FLEX 2		/* -G 2 */
#define DIR_MODE (LINUX_S_IFDIR | 0755)
#define FILE_MODE (LINUX_S_IFREG | 0644)

static char path[64];

/* 256 MiB in 16 groups of 4096 blocks; -N: 64 inodes a group, so a few dozen crowd one. */
static ext2_filsys image(const char *extra)
{
	char args[256];

	snprintf(args, sizeof(args), "-b 4096 -g 4096 -G %d -N 1024 %s", FLEX, extra);
	return unit_image(path, "256M", args);
}

static void done(ext2_filsys fs)
{
	ext2fs_close_free(&fs);
	unlink(path);
}

static struct ialloc_parent parent(ext2_ino_t ino, __u32 flags)
{
	struct ialloc_parent p = { ino, flags, IALLOC_NO_GROUP };

	return p;
}

/* Allocate as rrfuse's inode_new does: choose, remember the group, mark. */
static ext2_ino_t alloc(ext2_filsys fs, struct ialloc_parent *p, int mode, const char *name)
{
	ext2_ino_t ino;
	dgrp_t g;

	ck_assert_int_eq(ialloc_new(fs, NULL, p, mode, name, &ino, &g), 0);
	ck_assert(!ext2fs_test_inode_bitmap2(fs->inode_map, ino));
	p->last = g;
	ext2fs_inode_alloc_stats2(fs, ino, +1, LINUX_S_ISDIR(mode));
	return ino;
}

static dgrp_t group(ext2_filsys fs, ext2_ino_t ino)
{
	return (ino - 1) / EXT2_INODES_PER_GROUP(fs->super);
}

static dgrp_t flex(ext2_filsys fs, ext2_ino_t ino)
{
	return group(fs, ino) / FLEX;
}

/* n directories made in p land in n different flex groups, none the root's. */
static void check_spread(ext2_filsys fs, struct ialloc_parent *p, int n)
{
	int seen[64] = { 0 };
	char name[16];

	for (int i = 0; i < n; i++) {
		ext2_ino_t d;

		snprintf(name, sizeof(name), "dir%d", i);
		d = alloc(fs, p, DIR_MODE, name);
		ck_assert_msg(!seen[flex(fs, d)], "%s: flex group %u again", name, flex(fs, d));
		ck_assert_uint_ne(flex(fs, d), 0);
		/* Packed at the start of its flex group. */
		ck_assert_uint_eq(group(fs, d) % FLEX, 0);
		seen[flex(fs, d)] = 1;
	}
}

START_TEST(top_level_directories_spread)
{
	ext2_filsys fs = image("");
	struct ialloc_parent root = parent(EXT2_ROOT_INO, 0);

	check_spread(fs, &root, 4);
	done(fs);
}
END_TEST

START_TEST(topdir_flag_spreads_subdirectories)
{
	ext2_filsys fs = image("");
	struct ialloc_parent root = parent(EXT2_ROOT_INO, 0), top;
	ext2_ino_t t = alloc(fs, &root, DIR_MODE, "proj");

	top = parent(t, EXT2_TOPDIR_FL);
	check_spread(fs, &top, 3);
	done(fs);
}
END_TEST

/* The same name on the same image: the same group (the hash, not chance, decides). */
START_TEST(top_level_start_is_the_name_hash)
{
	ext2_filsys a = image("-E hash_seed=6a0c4d1e-93b2-4f47-8d5e-0f1a2b3c4d5e");
	struct ialloc_parent root = parent(EXT2_ROOT_INO, 0);
	dgrp_t g1, g2;

	ck_assert_int_eq(ialloc_find_group(a, NULL, &root, DIR_MODE, "usr", &g1), 0);
	for (int i = 0; i < 8; i++) {
		ck_assert_int_eq(ialloc_find_group(a, NULL, &root, DIR_MODE, "usr", &g2), 0);
		ck_assert_uint_eq(g1, g2);
	}
	done(a);
}
END_TEST

START_TEST(subdirectory_and_files_stay_near_parent)
{
	ext2_filsys fs = image("");
	struct ialloc_parent root = parent(EXT2_ROOT_INO, 0), top, sub;
	ext2_ino_t t = alloc(fs, &root, DIR_MODE, "usr"), s, f;

	ck_assert_uint_ne(flex(fs, t), 0);
	top = parent(t, 0);
	f = alloc(fs, &top, FILE_MODE, "file");
	ck_assert_uint_eq(group(fs, f), group(fs, t));
	s = alloc(fs, &top, DIR_MODE, "lib");
	ck_assert_uint_eq(flex(fs, s), flex(fs, t));
	sub = parent(s, 0);
	f = alloc(fs, &sub, FILE_MODE, "x.so");
	ck_assert_uint_eq(group(fs, f), group(fs, s));
	/* In the root, a file goes to the root's group. */
	f = alloc(fs, &root, FILE_MODE, "README");
	ck_assert_uint_eq(group(fs, f), 0);
	done(fs);
}
END_TEST

/*
 * Past the average directories per flex group plus a sixteenth of a flex
 * group's inodes (here 8), a parent's flex group is crowded: its next
 * subdirectory goes to the next flex group, and later ones start there.
 */
START_TEST(crowded_parent_moves_on)
{
	ext2_filsys fs = image("");
	struct ialloc_parent root = parent(EXT2_ROOT_INO, 0), top;
	ext2_ino_t t = alloc(fs, &root, DIR_MODE, "usr"), first = 0, s;
	dgrp_t home = flex(fs, t), ngroups = fs->group_desc_count;
	int moved = -1;

	top = parent(t, 0);
	for (int i = 0; i < 24 && moved < 0; i++) {
		s = alloc(fs, &top, DIR_MODE, "d");
		if (!first)
			first = s;
		if (flex(fs, s) != home)
			moved = i;
	}
	ck_assert_uint_eq(flex(fs, first), home);
	ck_assert_msg(moved > 0, "subdirectories never left a crowded flex group");
	ck_assert_uint_eq(flex(fs, s), (home + 1) % (ngroups / FLEX));
	done(fs);
}
END_TEST

/* A full flex group: files go elsewhere, and allocation fails only when no inode is left. */
START_TEST(full_flex_group_overflows)
{
	ext2_filsys fs = image("");
	struct ialloc_parent root = parent(EXT2_ROOT_INO, 0), top;
	ext2_ino_t t = alloc(fs, &root, DIR_MODE, "usr"), f = 0, ino;
	unsigned int left = fs->super->s_free_inodes_count;
	dgrp_t g;

	top = parent(t, 0);
	for (unsigned int i = 0; i < left; i++)
		f = alloc(fs, &top, FILE_MODE, "f");
	ck_assert_uint_eq(fs->super->s_free_inodes_count, 0);
	ck_assert_uint_ne(flex(fs, f), flex(fs, t));
	ck_assert_int_eq(ialloc_new(fs, NULL, &top, FILE_MODE, "f", &ino, &g), EXT2_ET_INODE_ALLOC_FAIL);
	for (g = 0; g < fs->group_desc_count; g++)
		ck_assert_uint_eq(ext2fs_bg_free_inodes_count(fs, g), 0);
	done(fs);
}
END_TEST

/* Free ino as rrfuse does, i_dtime at dtime. */
static void free_at(ext2_filsys fs, ext2_ino_t ino, __u32 dtime)
{
	struct ext2_inode in;

	memset(&in, 0, sizeof(in));
	in.i_mode = FILE_MODE;
	in.i_dtime = dtime;
	ck_assert_int_eq(ext2fs_write_new_inode(fs, ino, &in), 0);
	ext2fs_inode_alloc_stats2(fs, ino, -1, 0);
}

START_TEST(no_journal_passes_over_recently_freed)
{
	ext2_filsys fs = image("-O ^has_journal");
	struct ialloc_parent root = parent(EXT2_ROOT_INO, 0);
	ext2_ino_t a = alloc(fs, &root, FILE_MODE, "a"), b;

	free_at(fs, a, (__u32)time(NULL) - 5);
	b = alloc(fs, &root, FILE_MODE, "b");
	ck_assert_uint_eq(b, a + 1);
	/* Freed long enough ago: used again. */
	free_at(fs, a, (__u32)time(NULL) - 120);
	ck_assert_uint_eq(alloc(fs, &root, FILE_MODE, "c"), a);
	done(fs);
}
END_TEST

START_TEST(journal_reuses_at_once)
{
	ext2_filsys fs = image("");
	struct ialloc_parent root = parent(EXT2_ROOT_INO, 0);
	ext2_ino_t a = alloc(fs, &root, FILE_MODE, "a");

	free_at(fs, a, (__u32)time(NULL) - 5);
	ck_assert_uint_eq(alloc(fs, &root, FILE_MODE, "b"), a);
	done(fs);
}
END_TEST

/*
 * The kernel's totals move when one CPU's pending change reaches a batch:
 * a run of inode allocations shows the mount's count until then.
 */
START_TEST(counts_move_by_a_batch)
{
	ext2_filsys fs = image("");
	struct ialloc_counts c;
	int64_t at_mount;

	memset(&c, 0, sizeof(c));
	ialloc_counts_change(fs, &c, 0, 0);
	at_mount = c.free_inodes;
	ck_assert_int_eq(at_mount, fs->super->s_free_inodes_count);
	for (int64_t i = 1; i < c.batch; i++) {
		ialloc_counts_change(fs, &c, -1, 1);
		ck_assert_int_eq(c.free_inodes, at_mount);
	}
	ialloc_counts_change(fs, &c, -1, 1);
	ck_assert_int_eq(c.free_inodes, at_mount - c.batch);
	ck_assert_int_eq(c.inodes_pending, 0);
	/* A free after a fold starts a new pending change: the shared count stays. */
	ialloc_counts_change(fs, &c, +1, -1);
	ck_assert_int_eq(c.free_inodes, at_mount - c.batch);
	done(fs);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("ialloc");
	TCase *tc = tcase_create("placement");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, top_level_directories_spread);
	tcase_add_test(tc, topdir_flag_spreads_subdirectories);
	tcase_add_test(tc, top_level_start_is_the_name_hash);
	tcase_add_test(tc, subdirectory_and_files_stay_near_parent);
	tcase_add_test(tc, crowded_parent_moves_on);
	tcase_add_test(tc, full_flex_group_overflows);
	tcase_add_test(tc, no_journal_passes_over_recently_freed);
	tcase_add_test(tc, journal_reuses_at_once);
	tcase_add_test(tc, counts_move_by_a_batch);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return unit_run(suite());
}

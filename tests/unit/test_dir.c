// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests: a directory's absent name (rr_inode.absent, src/ns/dir.c).
 * A lookup that finds a name absent keeps it, so that the create the
 * kernel sends next need not look again; every way an entry is added to
 * the directory (a create, a link, a rename into it, a symlink) must make
 * the next create of that name see it and refuse with EEXIST.  And an
 * unlink removes the entry from the block its lookup found it in, linear
 * or indexed.  On an image rr_fs_open mounts as rrfuse does, with e2fsck
 * -fn after.
 */
#include "unit.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "rrfs.h"
#include "data.h"
#include "dir.h"
#include "cache.h"

static int caller_gid(const struct rr_cred *cr, gid_t gid)
{
	return cr->gid == gid;
}

static const struct rr_cred root = { .uid = 0, .gid = 0, .umask = 022, .in_group = caller_gid };

static char image[32];

/* A fresh image, open as rrfuse opens it, its root in memory as the kernel's mount holds it. */
static struct rr_fs *open_fs(void)
{
	struct rr_opts opts = { .commit_secs = 0, .writeback = 1, .delalloc = 1, .journal = 1,
				.cache_mb = IO_CACHE_MB_DEFAULT };
	struct rr_fs *rfs = calloc(1, sizeof(*rfs));
	ext2_filsys fs = unit_image(image, "64M", "");
	char msg[256] = "";

	ck_assert_int_eq(ext2fs_close_free(&fs), 0);
	ck_assert_ptr_nonnull(rfs);
	rr_alloc_tunables_default(&opts.alloc);
	ck_assert_msg(!rr_fs_open(rfs, image, &opts, &data_hooks, msg, sizeof(msg)), "%s", msg);
	ck_assert_int_eq(rr_fs_mark_mounted(rfs), 0);
	ck_assert_ptr_nonnull(rr_iget(rfs, EXT2_ROOT_INO));
	return rfs;
}

static void close_fs(struct rr_fs *rfs)
{
	char cmd[128];

	ck_assert_int_eq(rr_fs_close(rfs), 0);
	free(rfs);
	snprintf(cmd, sizeof(cmd), "e2fsck -fn %s >/dev/null 2>&1", image);
	ck_assert_int_eq(system(cmd), 0);
	unlink(image);
}

/* ino of a new file name in dir, or -errno. */
static long make(struct rr_fs *rfs, ext2_ino_t dir, const char *name, mode_t mode)
{
	struct ext2_inode_large in;
	struct rr_inode *ri = NULL;
	ext2_ino_t ino;
	int ret = dir_create(rfs, dir, name, mode, 0, &root, &ino, &ri, &in);

	return ret ? ret : (long)ino;
}

/* The lookup that keeps name as absent. */
static void absent(struct rr_fs *rfs, ext2_ino_t dir, const char *name)
{
	struct ext2_inode_large in;
	struct rr_inode *ri = NULL;
	ext2_ino_t ino;

	ck_assert_int_eq(dir_lookup(rfs, dir, name, &ino, &ri, &in), -ENOENT);
}

START_TEST(a_create_after_its_lookup)
{
	struct rr_fs *rfs = open_fs();
	long d;

	absent(rfs, EXT2_ROOT_INO, "a");
	ck_assert_int_gt(make(rfs, EXT2_ROOT_INO, "a", S_IFREG | 0644), 0);
	/* Kept once: the same name again is there now. */
	ck_assert_int_eq(make(rfs, EXT2_ROOT_INO, "a", S_IFREG | 0644), -EEXIST);
	/* Another directory's absent name is not this one's. */
	d = make(rfs, EXT2_ROOT_INO, "d", S_IFDIR | 0755);
	ck_assert_int_gt(d, 0);
	ck_assert_ptr_nonnull(rr_iget(rfs, (ext2_ino_t)d));
	absent(rfs, (ext2_ino_t)d, "a");
	ck_assert_int_eq(make(rfs, EXT2_ROOT_INO, "a", S_IFREG | 0644), -EEXIST);
	ck_assert_int_gt(make(rfs, (ext2_ino_t)d, "a", S_IFREG | 0644), 0);
	close_fs(rfs);
}
END_TEST

START_TEST(every_new_entry_forgets_it)
{
	struct rr_fs *rfs = open_fs();
	struct ext2_inode_large in;
	struct rr_inode *ri = NULL;
	ext2_ino_t ino;
	long f;

	f = make(rfs, EXT2_ROOT_INO, "f", S_IFREG | 0644);
	ck_assert_int_gt(f, 0);
	/* A link. */
	absent(rfs, EXT2_ROOT_INO, "l");
	ck_assert_int_eq(dir_link(rfs, (ext2_ino_t)f, EXT2_ROOT_INO, "l", &ri, &in), 0);
	ck_assert_int_eq(make(rfs, EXT2_ROOT_INO, "l", S_IFREG | 0644), -EEXIST);
	/* A rename into the name. */
	absent(rfs, EXT2_ROOT_INO, "r");
	ck_assert_int_eq(dir_rename(rfs, EXT2_ROOT_INO, "f", EXT2_ROOT_INO, "r", 0, &root), 0);
	ck_assert_int_eq(make(rfs, EXT2_ROOT_INO, "r", S_IFREG | 0644), -EEXIST);
	/* A symlink, a directory, a device. */
	absent(rfs, EXT2_ROOT_INO, "s");
	ck_assert_int_eq(dir_symlink(rfs, EXT2_ROOT_INO, "s", "f", &root, &ino, &ri, &in), 0);
	ck_assert_int_eq(make(rfs, EXT2_ROOT_INO, "s", S_IFREG | 0644), -EEXIST);
	absent(rfs, EXT2_ROOT_INO, "m");
	ck_assert_int_gt(make(rfs, EXT2_ROOT_INO, "m", S_IFDIR | 0755), 0);
	ck_assert_int_eq(make(rfs, EXT2_ROOT_INO, "m", S_IFREG | 0644), -EEXIST);
	/* Another name added after the lookup: the kept one is forgotten, and still absent. */
	absent(rfs, EXT2_ROOT_INO, "x");
	ck_assert_int_gt(make(rfs, EXT2_ROOT_INO, "y", S_IFREG | 0644), 0);
	ck_assert_int_gt(make(rfs, EXT2_ROOT_INO, "x", S_IFREG | 0644), 0);
	close_fs(rfs);
}
END_TEST

static void name_of(char *name, size_t size, int i)
{
	snprintf(name, size, "%s%04d", i % 2 ? "a-rather-longer-name-than-the-memo-keeps-" : "n", i);
}

START_TEST(past_the_first_block)
{
	struct rr_fs *rfs = open_fs();
	struct ext2_inode_large in;
	struct rr_inode *ri = NULL;
	ext2_ino_t ino;
	char name[64];

	/* Through the indexing of the directory (htree_index_dir) and its growth. */
	for (int i = 0; i < 600; i++) {
		name_of(name, sizeof(name), i);
		absent(rfs, EXT2_ROOT_INO, name);
		ck_assert_int_gt(make(rfs, EXT2_ROOT_INO, name, S_IFREG | 0644), 0);
		ck_assert_int_eq(make(rfs, EXT2_ROOT_INO, name, S_IFREG | 0644), -EEXIST);
		/* The first few while the directory is one linear block, the rest indexed. */
		if (i % 3 == 0 && (i < 30 || i > 300)) {
			ck_assert_int_eq(dir_unlink(rfs, EXT2_ROOT_INO, name, 0), 0);
			absent(rfs, EXT2_ROOT_INO, name);
		}
	}
	for (int i = 0; i < 600; i++) {
		name_of(name, sizeof(name), i);
		ck_assert_int_eq(dir_lookup(rfs, EXT2_ROOT_INO, name, &ino, &ri, &in),
				 i % 3 == 0 && (i < 30 || i > 300) ? -ENOENT : 0);
	}
	close_fs(rfs);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("dir");
	TCase *tc = tcase_create("absent");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, a_create_after_its_lookup);
	tcase_add_test(tc, every_new_entry_forgets_it);
	tcase_add_test(tc, past_the_first_block);
	suite_add_tcase(s, tc);
	return unit_run(s);
}

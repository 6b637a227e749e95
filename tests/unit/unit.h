/* SPDX-License-Identifier: GPL-2.0 */
/* What the Check unit tests share: a scratch image made by mke2fs, and running a suite. */
#ifndef RRFUSE_TESTS_UNIT_H
#define RRFUSE_TESTS_UNIT_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <ext2fs/ext2fs.h>

/*
 * Make an image of size (truncate's syntax) with "mke2fs -t ext4 mkfs_args"
 * at a new path under /tmp (path: at least 32 bytes) and open it read-write
 * with its bitmaps.  The caller unlinks path.
 */
static inline ext2_filsys unit_image(char *path, const char *size, const char *mkfs_args)
{
	char cmd[512];
	ext2_filsys fs;
	int fd;

	snprintf(path, 32, "/tmp/rrfuse-unit.XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	close(fd);
	snprintf(cmd, sizeof(cmd), "truncate -s %s %s && mke2fs -q -F -t ext4 %s %s", size, path,
		 mkfs_args, path);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_int_eq(ext2fs_open(path, EXT2_FLAG_RW | EXT2_FLAG_64BITS, 0, 0, unix_io_manager, &fs), 0);
	ck_assert_int_eq(ext2fs_read_bitmaps(fs), 0);
	return fs;
}

/* Run every test of s; the process's exit status. */
static inline int unit_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif

// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests: rrfuse's ext2fs_crc32c_le (src/io/crc32c.c), which takes the
 * place of libext2fs's for every caller.
 *
 *   - the same sums as a crc32c of the test's own, bit by bit, and as the
 *     library's own definition, for every length up to a few words past a
 *     block's and every alignment of the start, and for chained calls;
 *   - it is the definition the process's symbol lookup finds, which is
 *     what libext2fs's calls through its PLT bind to, and the sums
 *     libext2fs makes with it are the ones e2fsck expects.
 */
#include "unit.h"

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

typedef uint32_t (*crc_fn)(uint32_t crc, unsigned char const *p, size_t len);

/* crc32c (Castagnoli, reflected), no inversion in or out: as ext2fs_crc32c_le. */
static uint32_t crc32c_bits(uint32_t crc, const unsigned char *p, size_t len)
{
	while (len--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = crc & 1 ? (crc >> 1) ^ 0x82F63B78U : crc >> 1;
	}
	return crc;
}

static crc_fn library_crc(void)
{
	crc_fn f;

	*(void **)&f = dlsym(RTLD_NEXT, "ext2fs_crc32c_le");
	ck_assert_ptr_nonnull(f);
	return f;
}

START_TEST(check_value)
{
	ck_assert_uint_eq(~crc32c_bits(~0U, (const unsigned char *)"123456789", 9), 0xE3069283U);
	ck_assert_uint_eq(~ext2fs_crc32c_le(~0U, (const unsigned char *)"123456789", 9), 0xE3069283U);
}
END_TEST

START_TEST(lengths_and_alignments)
{
	enum { MAX = 3 * 4096 + 24 };
	static unsigned char buf[MAX + 8];
	crc_fn lib = library_crc();
	uint32_t seed = 0x12345678;

	srandom(7);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (unsigned char)random();
	for (size_t off = 0; off < 8; off++) {
		for (size_t len = 0; len <= MAX; len += len < 80 ? 1 : 61) {
			uint32_t want = crc32c_bits(seed, buf + off, len);

			ck_assert_uint_eq(ext2fs_crc32c_le(seed, buf + off, len), want);
			ck_assert_uint_eq(lib(seed, buf + off, len), want);
		}
		seed = seed * 2654435761U + 1;
	}
	/* In pieces, as the journal sums a sequence number and then its block. */
	ck_assert_uint_eq(ext2fs_crc32c_le(ext2fs_crc32c_le(~0U, buf, 13), buf + 13, 4096),
			  crc32c_bits(~0U, buf, 4096 + 13));
}
END_TEST

START_TEST(takes_the_library_s_place)
{
	char path[32], cmd[128];
	struct ext2_inode_large in;
	ext2_filsys fs = unit_image(path, "64M", "-O metadata_csum -I 256");
	void *found = dlsym(RTLD_DEFAULT, "ext2fs_crc32c_le");
	ext2_ino_t ino;

	ck_assert_ptr_eq(found, (void *)ext2fs_crc32c_le);
	ck_assert_ptr_ne(found, (void *)library_crc());
	/* libext2fs sums a new inode, its directory entry and the bitmaps with it. */
	ck_assert_int_eq(ext2fs_new_inode(fs, EXT2_ROOT_INO, LINUX_S_IFREG | 0644, NULL, &ino), 0);
	memset(&in, 0, sizeof(in));
	in.i_mode = LINUX_S_IFREG | 0644;
	in.i_links_count = 1;
	in.i_extra_isize = sizeof(in) - EXT2_GOOD_OLD_INODE_SIZE;
	ck_assert_int_eq(ext2fs_write_new_inode(fs, ino, (struct ext2_inode *)&in), 0);
	ck_assert_int_eq(ext2fs_link(fs, EXT2_ROOT_INO, "f", ino, EXT2_FT_REG_FILE), 0);
	ext2fs_inode_alloc_stats2(fs, ino, 1, 0);
	ck_assert_int_eq(ext2fs_close_free(&fs), 0);
	snprintf(cmd, sizeof(cmd), "e2fsck -fn %s >/dev/null 2>&1", path);
	ck_assert_int_eq(system(cmd), 0);
	unlink(path);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("crc32c");
	TCase *tc = tcase_create("crc32c");

	tcase_add_test(tc, check_value);
	tcase_add_test(tc, lengths_and_alignments);
	tcase_add_test(tc, takes_the_library_s_place);
	suite_add_tcase(s, tc);
	return unit_run(s);
}

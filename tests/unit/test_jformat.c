// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests: the jbd2 on-disk format as src/journal/ builds and reads it.
 *
 *   - format.h's structures against the offsets of the kernel's
 *     Documentation/filesystems/ext4/journal.rst, and its tag accessors on
 *     tags laid out byte by byte from that document (not from the structs);
 *   - the checksums (block tails, commit blocks, a commit block's head,
 *     tags under csum v2 and v3, the superblock) against a crc32c of the
 *     test's own, bit by bit, so that a wrong seed or a wrong range shows;
 *   - blocks the writer makes (descriptors and their tags, the escaping of
 *     a block that begins with the journal's magic, revoke blocks, commit
 *     blocks), read back from the journal and parsed by hand, with and
 *     without metadata_csum and 64bit;
 *   - the revoke table recovery keeps (revoke.h).
 */
#include "jtest.h"

#include <time.h>

#include "revoke.h"

/* crc32c (Castagnoli, reflected), no inversion in or out: as ext2fs_crc32c_le. */
static uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	while (len--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = crc & 1 ? (crc >> 1) ^ 0x82F63B78U : crc >> 1;
	}
	return crc;
}

START_TEST(own_crc32c)
{
	/* The check value of CRC-32C, to trust the test's own before using it. */
	ck_assert_uint_eq(~crc32c(~0U, "123456789", 9), 0xE3069283U);
	ck_assert_uint_eq(crc32c(~0U, "rrfuse", 6), ext2fs_crc32c_le(~0U, (const unsigned char *)"rrfuse", 6));
}
END_TEST

START_TEST(struct_offsets)
{
	ck_assert_uint_eq(offsetof(struct jf_header, h_blocktype), 4);
	ck_assert_uint_eq(offsetof(struct jf_header, h_sequence), 8);
	ck_assert_uint_eq(offsetof(struct jf_superblock, s_blocksize), 0x0c);
	ck_assert_uint_eq(offsetof(struct jf_superblock, s_maxlen), 0x10);
	ck_assert_uint_eq(offsetof(struct jf_superblock, s_first), 0x14);
	ck_assert_uint_eq(offsetof(struct jf_superblock, s_sequence), 0x18);
	ck_assert_uint_eq(offsetof(struct jf_superblock, s_start), 0x1c);
	ck_assert_uint_eq(offsetof(struct jf_superblock, s_errno), 0x20);
	ck_assert_uint_eq(offsetof(struct jf_superblock, s_feature_compat), 0x24);
	ck_assert_uint_eq(offsetof(struct jf_superblock, s_feature_incompat), 0x28);
	ck_assert_uint_eq(offsetof(struct jf_superblock, s_feature_ro_compat), 0x2c);
	ck_assert_uint_eq(offsetof(struct jf_superblock, s_uuid), 0x30);
	ck_assert_uint_eq(offsetof(struct jf_superblock, s_nr_users), 0x40);
	ck_assert_uint_eq(offsetof(struct jf_superblock, s_max_transaction), 0x48);
	ck_assert_uint_eq(offsetof(struct jf_superblock, s_checksum_type), 0x50);
	ck_assert_uint_eq(offsetof(struct jf_superblock, s_num_fc_blks), 0x54);
	ck_assert_uint_eq(offsetof(struct jf_superblock, s_head), 0x58);
	ck_assert_uint_eq(offsetof(struct jf_superblock, s_checksum), 0xfc);
	ck_assert_uint_eq(offsetof(struct jf_superblock, s_users), 0x100);
	ck_assert_uint_eq(offsetof(struct jf_commit, h_chksum_type), 0x0c);
	ck_assert_uint_eq(offsetof(struct jf_commit, h_chksum_size), 0x0d);
	ck_assert_uint_eq(offsetof(struct jf_commit, h_chksum), 0x10);
	ck_assert_uint_eq(offsetof(struct jf_commit, h_commit_sec), 0x30);
	ck_assert_uint_eq(offsetof(struct jf_commit, h_commit_nsec), 0x38);
	ck_assert_uint_eq(offsetof(struct jf_revoke, r_count), 0x0c);
	ck_assert_uint_eq(offsetof(struct jf_fc_head, fc_tid), 8);
}
END_TEST

START_TEST(tag_sizes)
{
	ck_assert_uint_eq(jf_tag_size(0), 8);
	ck_assert_uint_eq(jf_tag_size(JF_INCOMPAT_64BIT), 12);
	ck_assert_uint_eq(jf_tag_size(JF_INCOMPAT_CSUM_V2), 10);
	ck_assert_uint_eq(jf_tag_size(JF_INCOMPAT_CSUM_V2 | JF_INCOMPAT_64BIT), 14);
	ck_assert_uint_eq(jf_tag_size(JF_INCOMPAT_CSUM_V3), 16);
	ck_assert_uint_eq(jf_tag_size(JF_INCOMPAT_CSUM_V3 | JF_INCOMPAT_64BIT), 16);
	/* Features that do not touch tags do not change them. */
	ck_assert_uint_eq(jf_tag_size(JF_INCOMPAT_REVOKE | JF_INCOMPAT_ASYNC_COMMIT | JF_INCOMPAT_FAST_COMMIT), 8);
}
END_TEST

static void put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)(v >> 8);
	p[1] = (unsigned char)v;
}

/* tag3 (csum v3), by journal.rst: blocknr, flags, blocknr_high, checksum; 4 bytes each, big-endian. */
START_TEST(tag3_layout)
{
	unsigned char t[16];
	const uint32_t v3_64 = JF_INCOMPAT_CSUM_V3 | JF_INCOMPAT_64BIT;

	jf_put_be32(t + 0, 0x89abcdefU);
	jf_put_be32(t + 4, JF_FLAG_SAME_UUID | JF_FLAG_LAST_TAG);
	jf_put_be32(t + 8, 0x00000012U);
	jf_put_be32(t + 12, 0xdeadbeefU);
	ck_assert_uint_eq(jf_tag_block(t, v3_64), 0x1289abcdefULL);
	/* Without 64bit the high word is not the block's (a filesystem under 2^32 blocks). */
	ck_assert_uint_eq(jf_tag_block(t, JF_INCOMPAT_CSUM_V3), 0x89abcdefULL);
	ck_assert_uint_eq(jf_tag_flags(t, v3_64), JF_FLAG_SAME_UUID | JF_FLAG_LAST_TAG);
	ck_assert_uint_eq(jf_tag_csum(t, v3_64), 0xdeadbeefU);
	ck_assert_uint_eq(offsetof(struct jf_tag3, t_flags), 4);
	ck_assert_uint_eq(offsetof(struct jf_tag3, t_blocknr_high), 8);
	ck_assert_uint_eq(offsetof(struct jf_tag3, t_checksum), 12);
}
END_TEST

/* The older tag: blocknr (4), checksum (2, csum v2 only), flags (2), blocknr_high (4, 64bit only). */
START_TEST(tag_layout)
{
	unsigned char t[14];

	memset(t, 0xee, sizeof(t));
	jf_put_be32(t + 0, 0x01020304U);
	put16(t + 4, 0xbeef);
	put16(t + 6, JF_FLAG_ESCAPE | JF_FLAG_LAST_TAG);
	jf_put_be32(t + 8, 0x7U);
	ck_assert_uint_eq(jf_tag_block(t, 0), 0x01020304ULL);
	ck_assert_uint_eq(jf_tag_block(t, JF_INCOMPAT_64BIT), 0x701020304ULL);
	ck_assert_uint_eq(jf_tag_block(t, JF_INCOMPAT_64BIT | JF_INCOMPAT_CSUM_V2), 0x701020304ULL);
	ck_assert_uint_eq(jf_tag_flags(t, 0), JF_FLAG_ESCAPE | JF_FLAG_LAST_TAG);
	ck_assert_uint_eq(jf_tag_flags(t, JF_INCOMPAT_CSUM_V2 | JF_INCOMPAT_64BIT), JF_FLAG_ESCAPE | JF_FLAG_LAST_TAG);
	ck_assert_uint_eq(jf_tag_csum(t, JF_INCOMPAT_CSUM_V2), 0xbeef);
	ck_assert_uint_eq(offsetof(struct jf_tag, t_checksum), 4);
	ck_assert_uint_eq(offsetof(struct jf_tag, t_flags), 6);
	ck_assert_uint_eq(offsetof(struct jf_tag, t_blocknr_high), 8);
}
END_TEST

/* A struct jnl with just what the checksum helpers read. */
static void fake_jnl(struct jnl *j, struct jf_superblock *sb, unsigned int bsize, uint32_t incompat)
{
	memset(j, 0, sizeof(*j));
	memset(sb, 0, sizeof(*sb));
	for (int i = 0; i < JF_UUID_SIZE; i++)
		sb->s_uuid[i] = (uint8_t)(0x10 + i * 3);
	j->bsize = bsize;
	j->incompat = incompat;
	j->csum = !!(incompat & (JF_INCOMPAT_CSUM_V2 | JF_INCOMPAT_CSUM_V3));
	j->seed = crc32c(~0U, sb->s_uuid, sizeof(sb->s_uuid));
	j->tag_size = jf_tag_size(incompat);
	j->tail_size = j->csum ? sizeof(struct jf_tail) : 0;
	j->sb = sb;
	j->sbbuf = sb;
}

START_TEST(block_checksums)
{
	struct jnl j;
	struct jf_superblock sb;
	unsigned char blk[1024], data[1024], tag[16], seq[4];
	const size_t tail = sizeof(blk) - 4, cs = offsetof(struct jf_commit, h_chksum);
	uint32_t crc;

	fake_jnl(&j, &sb, sizeof(blk), JF_INCOMPAT_CSUM_V3 | JF_INCOMPAT_64BIT);
	/* A descriptor's tail: crc32c(seed) of the block with the tail as 0. */
	for (size_t i = 0; i < sizeof(blk); i++)
		blk[i] = (unsigned char)(i * 13 + 5);
	memset(blk + tail, 0, 4);
	jf_put_be32(blk + tail, crc32c(j.seed, blk, sizeof(blk)));
	ck_assert(jnl_tail_csum_ok(&j, blk));
	blk[100] ^= 1;
	ck_assert(!jnl_tail_csum_ok(&j, blk));
	blk[100] ^= 1;
	/* Seeded with the UUID, not ~0. */
	jf_put_be32(blk + tail, 0);
	jf_put_be32(blk + tail, crc32c(~0U, blk, sizeof(blk)));
	ck_assert(!jnl_tail_csum_ok(&j, blk));

	/* A commit block: its h_chksum[0] over the whole block with it as 0. */
	memset(blk, 0, sizeof(blk));
	jf_put_be32(blk, JF_MAGIC);
	jf_put_be32(blk + 4, JF_COMMIT_BLOCK);
	jf_put_be32(blk + 8, 42);
	jf_put_be32(blk + offsetof(struct jf_commit, h_commit_sec) + 4, 1700000000U);
	jf_put_be32(blk + cs, crc32c(j.seed, blk, sizeof(blk)));
	ck_assert(jnl_commit_csum_ok(&j, blk));
	ck_assert(jnl_commit_head_csum_ok(&j, blk));
	/* Past the 64-byte head: the whole block's sum fails, the head's (the rest taken as 0) holds. */
	blk[700] = 0x5a;
	ck_assert(!jnl_commit_csum_ok(&j, blk));
	ck_assert(jnl_commit_head_csum_ok(&j, blk));
	/* In the head: both fail. */
	blk[700] = 0;
	blk[9] ^= 0x80;
	ck_assert(!jnl_commit_csum_ok(&j, blk));
	ck_assert(!jnl_commit_head_csum_ok(&j, blk));

	/* A tag's: crc32c(seed, be32 sequence, the block as logged); 32 bits in v3, the low 16 in v2. */
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(i ^ 0x3c);
	jf_put_be32(seq, 42);
	crc = crc32c(crc32c(j.seed, seq, 4), data, sizeof(data));
	memset(tag, 0, sizeof(tag));
	jf_put_be32(tag + offsetof(struct jf_tag3, t_checksum), crc);
	ck_assert(jnl_tag_csum_ok(&j, tag, 42, data));
	ck_assert(!jnl_tag_csum_ok(&j, tag, 43, data));
	data[1000] ^= 4;
	ck_assert(!jnl_tag_csum_ok(&j, tag, 42, data));
	data[1000] ^= 4;
	fake_jnl(&j, &sb, sizeof(blk), JF_INCOMPAT_CSUM_V2);
	memset(tag, 0, sizeof(tag));
	put16(tag + offsetof(struct jf_tag, t_checksum), (uint16_t)crc);
	ck_assert(jnl_tag_csum_ok(&j, tag, 42, data));
	put16(tag + offsetof(struct jf_tag, t_checksum), (uint16_t)(crc >> 16));
	ck_assert((uint16_t)crc == (uint16_t)(crc >> 16) || !jnl_tag_csum_ok(&j, tag, 42, data));

	/* Without checksums every check passes: there is nothing to check. */
	fake_jnl(&j, &sb, sizeof(blk), JF_INCOMPAT_64BIT);
	blk[3] ^= 0xff;
	ck_assert(jnl_tail_csum_ok(&j, blk) && jnl_commit_csum_ok(&j, blk) && jnl_tag_csum_ok(&j, tag, 1, data));
}
END_TEST

/* The superblock's: crc32c(~0) of its 1024 bytes with s_checksum as 0, not seeded by the UUID. */
START_TEST(superblock_checksum)
{
	struct jnl j;
	struct jf_superblock sb, copy;

	fake_jnl(&j, &sb, 1024, JF_INCOMPAT_CSUM_V3);
	sb.s_header.h_magic = htobe32(JF_MAGIC);
	sb.s_sequence = htobe32(77);
	sb.s_checksum = htobe32(0x12345678);
	jnl_sb_csum_set(&j);
	copy = sb;
	copy.s_checksum = 0;
	ck_assert_uint_eq(be32toh(sb.s_checksum), crc32c(~0U, &copy, sizeof(copy)));
	/* Without checksums it is left alone. */
	fake_jnl(&j, &sb, 1024, 0);
	sb.s_checksum = htobe32(0x12345678);
	jnl_sb_csum_set(&j);
	ck_assert_uint_eq(be32toh(sb.s_checksum), 0x12345678);
}
END_TEST

/* The writer's blocks, read back from the journal and parsed by hand. */
struct jf_env {
	char path[64];
	ext2_filsys fs;
	struct jw *w;
	struct jnl j;
	unsigned char *blk;
};

static void jf_open(struct jf_env *v, const char *mkfs)
{
	char msg[256];

	v->fs = jt_image(v->path, mkfs);
	ck_assert_msg(!jw_open(v->fs, v->fs->io, &v->w, msg, sizeof(msg)), "jw_open: %s", msg);
	/* After jw_open: the features it set are on disk. */
	ck_assert_msg(!jnl_open(v->fs, &v->j, msg, sizeof(msg)), "jnl_open: %s", msg);
	v->blk = malloc(v->fs->blocksize);
}

static void jf_close(struct jf_env *v)
{
	ck_assert_int_eq(jw_close(v->w), 0);
	jnl_close(&v->j);
	free(v->blk);
	ck_assert_int_eq(ext2fs_close_free(&v->fs), 0);
	ck_assert_msg(jt_fsck(v->path) == 0, "e2fsck -fn %s is not clean", v->path);
	unlink(v->path);
}

/* Journal block l into v->blk; its header checked: type and sequence. */
static const unsigned char *jf_header_at(struct jf_env *v, uint32_t l, uint32_t type, uint32_t seq)
{
	ck_assert_int_eq(jnl_read(&v->j, l, v->blk), 0);
	ck_assert_uint_eq(jf_be32_at(v->blk), JF_MAGIC);
	ck_assert_uint_eq(jf_be32_at(v->blk + 4), type);
	ck_assert_uint_eq(jf_be32_at(v->blk + 8), seq);
	return v->blk;
}

/*
 * n blocks logged as one transaction from log block 1 (the first over the
 * empty log), one of them beginning with the journal's magic; the
 * descriptors, tags, copies and commit block checked field by field.
 */
static void writer_blocks(const char *mkfs, int csum, int wide)
{
	struct jf_env v;
	const unsigned int n = 70, escaped = 65;
	unsigned int bsize, tag_size, per_desc, done = 0;
	blk64_t base, blks[70];
	unsigned char *data[70], *copy;
	uint32_t seq, l = 1, seqbe;
	uint64_t count;
	time_t now = time(NULL);

	jf_open(&v, mkfs);
	bsize = v.fs->blocksize;
	ck_assert_uint_eq(!!(v.j.incompat & JF_INCOMPAT_CSUM_V3), csum);
	ck_assert_uint_eq(!!(v.j.incompat & JF_INCOMPAT_64BIT), wide);
	ck_assert(v.j.incompat & JF_INCOMPAT_REVOKE);
	ck_assert(!(v.j.incompat & (JF_INCOMPAT_CSUM_V2 | JF_INCOMPAT_ASYNC_COMMIT)));
	ck_assert(!(v.j.compat & JF_COMPAT_CHECKSUM));
	tag_size = csum ? 16 : wide ? 12 : 8;
	ck_assert_uint_eq(v.j.tag_size, tag_size);
	per_desc = (bsize - 12 - (csum ? 4 : 0) - 16) / tag_size;
	base = jt_free_run(v.fs, n);
	for (unsigned int i = 0; i < n; i++) {
		blks[i] = base + i;
		data[i] = malloc(bsize);
		jt_fill(data[i], bsize, blks[i], 1);
	}
	jf_put_be32(data[escaped], JF_MAGIC);
	jw_stats(v.w, &count, &seq);
	ck_assert_int_eq(jw_log(v.w, n, blks, (const unsigned char *const *)data), 0);
	/* The superblock names it, from block 1. */
	ck_assert_int_eq(jnl_read(&v.j, 0, v.blk), 0);
	ck_assert_uint_eq(be32toh(((struct jf_superblock *)v.blk)->s_start), 1);
	ck_assert_uint_eq(be32toh(((struct jf_superblock *)v.blk)->s_sequence), seq);
	copy = malloc(bsize);
	jf_put_be32(&seqbe, seq);
	while (done < n) {
		unsigned int g = n - done < per_desc ? n - done : per_desc;
		const unsigned char *d = jf_header_at(&v, l, JF_DESCRIPTOR_BLOCK, seq);
		unsigned char desc[4096];
		size_t off = 12;

		memcpy(desc, d, bsize);
		if (csum) {
			uint32_t want = jf_be32_at(desc + bsize - 4);

			jf_put_be32(desc + bsize - 4, 0);
			ck_assert_uint_eq(crc32c(v.j.seed, desc, bsize), want);
			jf_put_be32(desc + bsize - 4, want);
		}
		for (unsigned int i = 0; i < g; i++) {
			const unsigned char *t = desc + off;
			unsigned int k = done + i, flags = jf_tag_flags(t, v.j.incompat);

			ck_assert_uint_eq(jf_tag_block(t, v.j.incompat), blks[k]);
			/* The UUID after a descriptor's first tag only. */
			ck_assert_uint_eq(!(flags & JF_FLAG_SAME_UUID), i == 0);
			ck_assert_uint_eq(!!(flags & JF_FLAG_LAST_TAG), i == g - 1);
			ck_assert_uint_eq(!!(flags & JF_FLAG_ESCAPE), k == escaped);
			off += tag_size;
			if (!i) {
				ck_assert_mem_eq(desc + off, v.j.sb->s_uuid, JF_UUID_SIZE);
				off += JF_UUID_SIZE;
			}
			ck_assert_int_eq(jnl_read(&v.j, l + 1 + i, copy), 0);
			/* An escaped copy holds 0 where the magic was, the rest as it is. */
			if (k == escaped)
				ck_assert_uint_eq(jf_be32_at(copy), 0);
			else
				ck_assert_mem_eq(copy, data[k], 4);
			ck_assert_mem_eq(copy + 4, data[k] + 4, bsize - 4);
			if (csum)
				ck_assert_uint_eq(jf_tag_csum(t, v.j.incompat),
						  crc32c(crc32c(v.j.seed, &seqbe, 4), copy, bsize));
			else
				ck_assert_uint_eq(jf_tag_csum(t, JF_INCOMPAT_CSUM_V2), 0);
		}
		/* After the last tag the descriptor is zeros (up to its tail). */
		for (; off < bsize - (csum ? 4 : 0); off++)
			ck_assert_uint_eq(desc[off], 0);
		done += g;
		l += g + 1;
	}
	ck_assert_uint_eq(l, 1 + n + (n + per_desc - 1) / per_desc);
	{
		const unsigned char *c = jf_header_at(&v, l, JF_COMMIT_BLOCK, seq);
		uint64_t sec = jf_be64_at(c + offsetof(struct jf_commit, h_commit_sec));

		ck_assert(sec + 60 >= (uint64_t)now && sec <= (uint64_t)now + 60);
		ck_assert_uint_lt(jf_be32_at(c + offsetof(struct jf_commit, h_commit_nsec)), 1000000000U);
		if (csum) {
			unsigned char cb[4096];
			uint32_t want = jf_be32_at(c + offsetof(struct jf_commit, h_chksum));

			memcpy(cb, c, bsize);
			jf_put_be32(cb + offsetof(struct jf_commit, h_chksum), 0);
			ck_assert_uint_eq(crc32c(v.j.seed, cb, bsize), want);
		}
		/* Checksum v1 is off: no type, no size. */
		ck_assert_uint_eq(c[offsetof(struct jf_commit, h_chksum_type)], 0);
		ck_assert_uint_eq(c[offsetof(struct jf_commit, h_chksum_size)], 0);
	}
	/* Home, as the cache would, then a second transaction revoking three of the first's blocks. */
	for (unsigned int i = 0; i < n; i++)
		ck_assert_int_eq(io_channel_write_blk64(v.fs->io, blks[i], 1, data[i]), 0);
	ck_assert_int_eq(jw_checkpointed(v.w), 0);
	jw_revoke(v.w, blks[10], 2);
	jw_revoke(v.w, blks[n - 1], 5);		/* past the logged ones: only the first is revoked */
	ck_assert_int_eq(jw_log(v.w, 1, &blks[0], (const unsigned char *const *)data), 0);
	l += 1;
	jf_header_at(&v, l, JF_DESCRIPTOR_BLOCK, seq + 1);
	{
		const unsigned char *r = jf_header_at(&v, l + 2, JF_REVOKE_BLOCK, seq + 1);
		size_t rec = wide ? 8 : 4;
		uint64_t got[3];

		ck_assert_uint_eq(jf_be32_at(r + 12), 16 + 3 * rec);
		for (int i = 0; i < 3; i++)
			got[i] = wide ? jf_be64_at(r + 16 + i * rec) : jf_be32_at(r + 16 + i * rec);
		ck_assert_uint_eq(got[0], blks[10]);
		ck_assert_uint_eq(got[1], blks[11]);
		ck_assert_uint_eq(got[2], blks[n - 1]);
		for (size_t off = 16 + 3 * rec; off < bsize - (csum ? 4 : 0); off++)
			ck_assert_uint_eq(r[off], 0);
		ck_assert(jnl_tail_csum_ok(&v.j, r));
		jf_header_at(&v, l + 3, JF_COMMIT_BLOCK, seq + 1);
	}
	for (unsigned int i = 0; i < n; i++)
		free(data[i]);
	free(copy);
	jf_close(&v);
}

START_TEST(writer_blocks_csum_v3_64bit)
{
	writer_blocks(JT_MKFS, 1, 1);
}
END_TEST

START_TEST(writer_blocks_plain_32bit)
{
	writer_blocks(JT_MKFS " -O ^metadata_csum,^64bit", 0, 0);
}
END_TEST

START_TEST(writer_blocks_plain_64bit)
{
	writer_blocks(JT_MKFS " -O ^metadata_csum", 0, 1);
}
END_TEST

/* The revoke table: a copy in a transaction up to the latest revoking one is not replayed. */
START_TEST(revoke_table)
{
	struct jrv_table t;

	jrv_init(&t);
	ck_assert(!jrv_revoked(&t, 5, 1));
	ck_assert_int_eq(jrv_add(&t, 100, 10), 0);
	ck_assert(jrv_revoked(&t, 100, 9));
	ck_assert(jrv_revoked(&t, 100, 10));
	ck_assert(!jrv_revoked(&t, 100, 11));
	ck_assert(!jrv_revoked(&t, 101, 1));
	/* A later revoke moves the bound; an earlier one does not take it back. */
	ck_assert_int_eq(jrv_add(&t, 100, 12), 0);
	ck_assert_int_eq(jrv_add(&t, 100, 11), 0);
	ck_assert(jrv_revoked(&t, 100, 12));
	ck_assert(!jrv_revoked(&t, 100, 13));
	/* Ids wrap: 3 comes after 0xfffffff0. */
	ck_assert(jrv_tid_after(3, 0xfffffff0U));
	ck_assert(!jrv_tid_after(0xfffffff0U, 3));
	ck_assert_int_eq(jrv_add(&t, 7, 0xfffffff0U), 0);
	ck_assert(!jrv_revoked(&t, 7, 3));
	ck_assert_int_eq(jrv_add(&t, 7, 3), 0);
	ck_assert(jrv_revoked(&t, 7, 0xfffffff0U));
	ck_assert(jrv_revoked(&t, 7, 2));
	/* Enough to grow it several times, 64-bit blocks among them. */
	for (uint64_t b = 0; b < 5000; b++)
		ck_assert_int_eq(jrv_add(&t, (b << 20) + 1000000 + (b & 1 ? 0x300000000ULL : 0), (uint32_t)b), 0);
	for (uint64_t b = 0; b < 5000; b++) {
		uint64_t blk = (b << 20) + 1000000 + (b & 1 ? 0x300000000ULL : 0);

		ck_assert(jrv_revoked(&t, blk, (uint32_t)b));
		ck_assert(!jrv_revoked(&t, blk, (uint32_t)b + 1));
		ck_assert(!jrv_revoked(&t, blk + 1, 0));
	}
	ck_assert(jrv_revoked(&t, 100, 12));
	/* No block of any filesystem is UINT64_MAX: nothing kept for it. */
	ck_assert_int_eq(jrv_add(&t, UINT64_MAX, 1), 0);
	ck_assert(!jrv_revoked(&t, UINT64_MAX, 1));
	jrv_free(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("jformat");
	TCase *tc = tcase_create("format");

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, NULL, jt_cleanup);
	tcase_add_test(tc, own_crc32c);
	tcase_add_test(tc, struct_offsets);
	tcase_add_test(tc, tag_sizes);
	tcase_add_test(tc, tag3_layout);
	tcase_add_test(tc, tag_layout);
	tcase_add_test(tc, block_checksums);
	tcase_add_test(tc, superblock_checksum);
	tcase_add_test(tc, writer_blocks_csum_v3_64bit);
	tcase_add_test(tc, writer_blocks_plain_32bit);
	tcase_add_test(tc, writer_blocks_plain_64bit);
	tcase_add_test(tc, revoke_table);
	suite_add_tcase(s, tc);
	return unit_run(s);
}

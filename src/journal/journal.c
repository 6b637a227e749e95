// SPDX-License-Identifier: GPL-2.0
/*
 * The internal journal's blocks and superblock, checked before anything is
 * trusted: a journal inode mapping blocks outside the filesystem, a hole
 * in the log or a superblock that contradicts itself is refused, with the
 * reason, before recovery reads a single log block.
 */
#include "journal.h"
#include "layer.h"
#include "rrfuse/grow.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JNL_KNOWN_INCOMPAT (JF_INCOMPAT_REVOKE | JF_INCOMPAT_64BIT | JF_INCOMPAT_ASYNC_COMMIT | \
			    JF_INCOMPAT_CSUM_V2 | JF_INCOMPAT_CSUM_V3 | JF_INCOMPAT_FAST_COMMIT)
#define JNL_KNOWN_RO_COMPAT 0U

struct map_walk {
	struct jnl *j;
	blk64_t nblocks;	/* the journal's blocks, by its size */
	blk64_t bad;		/* a block outside the filesystem, or 0 */
	size_t cap;
	int nomem;
};

/* Runs of the journal's blocks, contiguous on disk: a journal has a handful, so its map is small. */
static int map_one(ext2_filsys fs, blk64_t *blocknr, e2_blkcnt_t blockcnt, blk64_t ref_blk,
		   int ref_offset, void *priv)
{
	struct map_walk *w = priv;
	struct jnl *j = w->j;
	struct jnl_run *last = j->nruns ? &j->runs[j->nruns - 1] : NULL;

	(void)ref_blk, (void)ref_offset;
	if (blockcnt < 0)
		return 0;
	if ((blk64_t)blockcnt >= w->nblocks)
		return BLOCK_ABORT;	/* past i_size: not the journal's */
	if (*blocknr < fs->super->s_first_data_block || *blocknr >= ext2fs_blocks_count(fs->super)) {
		w->bad = *blocknr;
		return BLOCK_ABORT;
	}
	if (last && last->logical + last->len == (blk64_t)blockcnt && last->physical + last->len == *blocknr) {
		last->len++;
		return 0;
	}
	if (rr_grow(&j->runs, sizeof(*j->runs), &w->cap, j->nruns + 1, 16)) {
		w->nomem = 1;
		return BLOCK_ABORT;
	}
	j->runs[j->nruns++] = (struct jnl_run){ (blk64_t)blockcnt, *blocknr, 1 };
	return 0;
}

static int run_by_logical(const void *a, const void *b)
{
	const struct jnl_run *x = a, *y = b;

	return x->logical < y->logical ? -1 : x->logical > y->logical;
}

static int run_by_physical(const void *a, const void *b)
{
	const struct jnl_run *x = a, *y = b;

	return x->physical < y->physical ? -1 : x->physical > y->physical;
}

/* The journal inode, as the kernel accepts one: a regular file with links, and its block map. */
static int map_inode(struct jnl *j, blk64_t *nblocks, char *msg, size_t msglen)
{
	ext2_filsys fs = j->fs;
	ext2_ino_t ino = fs->super->s_journal_inum;
	struct ext2_inode inode;
	struct map_walk w = { .j = j };
	errcode_t err;

	if (ino > fs->super->s_inodes_count) {
		snprintf(msg, msglen, "journal inode %u out of range", ino);
		return -EUCLEAN;
	}
	err = ext2fs_read_inode(fs, ino, &inode);
	if (err) {
		snprintf(msg, msglen, "cannot read journal inode %u: %s", ino, error_message(err));
		return -EIO;
	}
	if (!LINUX_S_ISREG(inode.i_mode) || !inode.i_links_count) {
		snprintf(msg, msglen, "journal inode %u is not a regular file in use", ino);
		return -EUCLEAN;
	}
	w.nblocks = EXT2_I_SIZE(&inode) / j->bsize;
	if (w.nblocks < 2 || w.nblocks > UINT32_MAX || w.nblocks > ext2fs_blocks_count(fs->super)) {
		snprintf(msg, msglen, "journal inode %u has an impossible size (%llu bytes)", ino,
			 (unsigned long long)EXT2_I_SIZE(&inode));
		return -EUCLEAN;
	}
	err = ext2fs_block_iterate3(fs, ino, BLOCK_FLAG_READ_ONLY | BLOCK_FLAG_DATA_ONLY, NULL,
				    map_one, &w);
	if (w.nomem)
		return -ENOMEM;
	if (w.bad) {
		snprintf(msg, msglen, "journal inode %u maps block %llu, outside the filesystem", ino,
			 (unsigned long long)w.bad);
		return -EUCLEAN;
	}
	if (err) {
		snprintf(msg, msglen, "cannot map journal inode %u: %s", ino, error_message(err));
		return -EUCLEAN;
	}
	if (!j->nruns) {
		snprintf(msg, msglen, "journal inode %u maps no blocks", ino);
		return -EUCLEAN;
	}
	qsort(j->runs, j->nruns, sizeof(*j->runs), run_by_logical);
	*nblocks = w.nblocks;
	return 0;
}

/* The run of v (n, sorted by the key: physical or logical start) that holds key, or NULL. */
static const struct jnl_run *find_run(const struct jnl_run *v, size_t n, uint64_t key, int physical)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uint64_t start = physical ? v[mid].physical : v[mid].logical;

		if (key < start)
			hi = mid;
		else if (key >= start + v[mid].len)
			lo = mid + 1;
		else
			return &v[mid];
	}
	return NULL;
}

/* The filesystem block of journal block blk, or 0 (a hole: 0 is never one of the journal's). */
static blk64_t map_block(const struct jnl *j, uint32_t blk)
{
	const struct jnl_run *r = find_run(j->runs, j->nruns, blk, 0);

	return r ? r->physical + (blk - r->logical) : 0;
}

/* crc32c(~0) of the superblock's 1024 bytes, its own checksum counted as 0. */
static uint32_t sb_csum(const struct jf_superblock *sb)
{
	struct jf_superblock copy = *sb;

	copy.s_checksum = 0;
	return ext2fs_crc32c_le(~0U, (const unsigned char *)&copy, sizeof(copy));
}

static int journal_check_features(struct jnl *j, char *msg, size_t msglen)
{
	const struct jf_superblock *sb = j->sb;
	uint32_t unknown = j->incompat & ~JNL_KNOWN_INCOMPAT;
	uint32_t ro_compat = be32toh(sb->s_feature_ro_compat);

	if (unknown || (ro_compat & ~JNL_KNOWN_RO_COMPAT)) {
		snprintf(msg, msglen, "the journal has features rrfuse does not know: incompat 0x%x, ro_compat 0x%x",
			 unknown, ro_compat & ~JNL_KNOWN_RO_COMPAT);
		return -EOPNOTSUPP;
	}
	if ((j->incompat & JF_INCOMPAT_CSUM_V2) && (j->incompat & JF_INCOMPAT_CSUM_V3)) {
		snprintf(msg, msglen, "corrupt journal superblock: both checksum v2 and v3");
		return -EUCLEAN;
	}
	if (j->csum && (j->compat & JF_COMPAT_CHECKSUM)) {
		snprintf(msg, msglen, "corrupt journal superblock: both checksum v1 and v2/v3");
		return -EUCLEAN;
	}
	if (!j->csum)
		return 0;
	if (sb->s_checksum_type != JF_CSUM_CRC32C) {
		snprintf(msg, msglen, "journal superblock: unknown checksum type %u", sb->s_checksum_type);
		return -EUCLEAN;
	}
	if (be32toh(sb->s_checksum) != sb_csum(sb)) {
		snprintf(msg, msglen, "journal superblock checksum is wrong");
		return -EUCLEAN;
	}
	return 0;
}

/* The superblock's geometry against the journal inode, as the kernel checks it at load. */
static int journal_check_geometry(struct jnl *j, blk64_t nblocks, char *msg, size_t msglen)
{
	const struct jf_superblock *sb = j->sb;
	uint32_t start = be32toh(sb->s_start), fc = 0;
	uint64_t b;
	size_t i;

	if (be32toh(sb->s_blocksize) != j->bsize) {
		snprintf(msg, msglen, "corrupt journal superblock: block size %u, the filesystem's is %u",
			 be32toh(sb->s_blocksize), j->bsize);
		return -EUCLEAN;
	}
	j->maxlen = be32toh(sb->s_maxlen);
	j->first = be32toh(sb->s_first);
	if (j->maxlen > nblocks || j->maxlen < 2) {
		snprintf(msg, msglen, "corrupt journal superblock: %u blocks, the journal inode has %llu",
			 j->maxlen, (unsigned long long)nblocks);
		return -EUCLEAN;
	}
	if (j->incompat & JF_INCOMPAT_FAST_COMMIT)
		fc = be32toh(sb->s_num_fc_blks) ? be32toh(sb->s_num_fc_blks) : JF_DEFAULT_FC_BLOCKS;
	if (fc >= j->maxlen) {
		snprintf(msg, msglen, "corrupt journal superblock: %u fast commit blocks in %u", fc, j->maxlen);
		return -EUCLEAN;
	}
	j->last = j->maxlen - fc;
	if (!j->first || j->first >= j->last) {
		snprintf(msg, msglen, "corrupt journal superblock: log starts at block %u of %u", j->first, j->last);
		return -EUCLEAN;
	}
	if (start && (start < j->first || start >= j->last)) {
		snprintf(msg, msglen, "corrupt journal superblock: log head %u outside [%u, %u)", start,
			 j->first, j->last);
		return -EUCLEAN;
	}
	/* The runs are sorted and cannot overlap (one logical block, one physical): no hole below maxlen. */
	for (i = 0, b = 0; i < j->nruns && b < j->maxlen; i++) {
		if (j->runs[i].logical != b)
			break;
		b += j->runs[i].len;
	}
	if (b < j->maxlen) {
		snprintf(msg, msglen, "the journal inode has a hole at block %llu", (unsigned long long)b);
		return -EUCLEAN;
	}
	return 0;
}

int jnl_open(ext2_filsys fs, struct jnl *j, char *msg, size_t msglen)
{
	blk64_t nblocks;
	uint32_t type;
	int ret;

	memset(j, 0, sizeof(*j));
	j->fs = fs;
	j->dev = io_under_faults(fs->io);
	j->bsize = fs->blocksize;
	ret = map_inode(j, &nblocks, msg, msglen);
	if (ret)
		goto fail;
	j->sbbuf = malloc(j->bsize);
	ret = -ENOMEM;
	if (!j->sbbuf)
		goto fail;
	j->sb = j->sbbuf;
	if (!map_block(j, 0) || io_channel_read_blk64(j->dev, map_block(j, 0), 1, j->sbbuf)) {
		snprintf(msg, msglen, "cannot read the journal superblock");
		ret = -EIO;
		goto fail;
	}
	type = be32toh(j->sb->s_header.h_blocktype);
	ret = -EUCLEAN;
	if (be32toh(j->sb->s_header.h_magic) != JF_MAGIC ||
	    (type != JF_SUPERBLOCK_V1 && type != JF_SUPERBLOCK_V2)) {
		snprintf(msg, msglen, "corrupt journal superblock: bad magic or block type");
		goto fail;
	}
	if (type == JF_SUPERBLOCK_V2) {
		j->compat = be32toh(j->sb->s_feature_compat);
		j->incompat = be32toh(j->sb->s_feature_incompat);
	}
	j->csum = !!(j->incompat & (JF_INCOMPAT_CSUM_V2 | JF_INCOMPAT_CSUM_V3));
	ret = journal_check_features(j, msg, msglen);
	if (!ret)
		ret = journal_check_geometry(j, nblocks, msg, msglen);
	if (ret)
		goto fail;
	j->tag_size = jf_tag_size(j->incompat);
	j->tail_size = j->csum ? sizeof(struct jf_tail) : 0;
	if (j->csum)
		j->seed = ext2fs_crc32c_le(~0U, j->sb->s_uuid, sizeof(j->sb->s_uuid));
	j->by_physical = malloc(sizeof(*j->by_physical) * j->nruns);
	ret = -ENOMEM;
	if (!j->by_physical)
		goto fail;
	memcpy(j->by_physical, j->runs, sizeof(*j->by_physical) * j->nruns);
	qsort(j->by_physical, j->nruns, sizeof(*j->by_physical), run_by_physical);
	return 0;
fail:
	if (ret == -ENOMEM)
		snprintf(msg, msglen, "out of memory");
	jnl_close(j);
	return ret;
}

void jnl_close(struct jnl *j)
{
	free(j->runs);
	free(j->by_physical);
	free(j->sbbuf);
	j->runs = j->by_physical = NULL;
	j->nruns = 0;
	j->sbbuf = j->sb = NULL;
}

int jnl_read(struct jnl *j, uint32_t blk, void *buf)
{
	if (blk >= j->maxlen || io_channel_read_blk64(j->dev, map_block(j, blk), 1, buf))
		return -EIO;
	return 0;
}

uint32_t jnl_next(const struct jnl *j, uint32_t blk, uint32_t count)
{
	uint64_t next = (uint64_t)blk + count;

	/* count may span the ring more than once only in a corrupt descriptor. */
	while (next >= j->last)
		next -= j->last - j->first;
	return (uint32_t)next;
}

int jnl_holds(const struct jnl *j, blk64_t b)
{
	return find_run(j->by_physical, j->nruns, b, 1) != NULL;
}

/* crc32c(seed) of a block with the 4 bytes at off counted as 0. */
static uint32_t block_csum(const struct jnl *j, const void *block, size_t off)
{
	static const unsigned char zero[sizeof(uint32_t)];
	const unsigned char *p = block;
	uint32_t crc;

	crc = ext2fs_crc32c_le(j->seed, p, off);
	crc = ext2fs_crc32c_le(crc, zero, sizeof(zero));
	return ext2fs_crc32c_le(crc, p + off + sizeof(zero), j->bsize - off - sizeof(zero));
}

int jnl_tail_csum_ok(const struct jnl *j, const void *block)
{
	size_t off = j->bsize - sizeof(struct jf_tail);

	if (!j->csum)
		return 1;
	return jf_be32_at((const unsigned char *)block + off) == block_csum(j, block, off);
}

int jnl_commit_csum_ok(const struct jnl *j, const void *block)
{
	size_t off = offsetof(struct jf_commit, h_chksum);

	if (!j->csum)
		return 1;
	return jf_be32_at((const unsigned char *)block + off) == block_csum(j, block, off);
}

int jnl_commit_head_csum_ok(const struct jnl *j, const void *block)
{
	size_t off = offsetof(struct jf_commit, h_chksum);
	unsigned char *copy;
	int ok;

	if (!j->csum)
		return 1;
	copy = calloc(1, j->bsize);
	if (!copy)
		return 0;
	memcpy(copy, block, sizeof(struct jf_commit));
	ok = jf_be32_at(copy + off) == block_csum(j, copy, off);
	free(copy);
	return ok;
}

int jnl_tag_csum_ok(const struct jnl *j, const void *tag, uint32_t sequence, const void *block)
{
	unsigned char seq[sizeof(uint32_t)];
	uint32_t crc;

	if (!j->csum)
		return 1;
	jf_put_be32(seq, sequence);
	crc = ext2fs_crc32c_le(j->seed, seq, sizeof(seq));
	crc = ext2fs_crc32c_le(crc, block, j->bsize);
	if (j->incompat & JF_INCOMPAT_CSUM_V3)
		return jf_tag_csum(tag, j->incompat) == crc;
	return jf_tag_csum(tag, j->incompat) == (crc & 0xffff);
}

int jnl_mark_empty(struct jnl *j, uint32_t next_seq)
{
	j->sb->s_start = 0;
	j->sb->s_sequence = htobe32(next_seq);
	if (jnl_write_sb(j) || io_channel_flush(j->dev))
		return -EIO;
	return 0;
}

int jnl_write(struct jnl *j, uint32_t blk, uint32_t count, const void *buf)
{
	const unsigned char *p = buf;

	if ((uint64_t)blk + count > j->maxlen)
		return -EIO;
	while (count) {
		blk64_t phys = map_block(j, blk);
		uint32_t n = 1;

		/* As many blocks as lie contiguous on disk: one write for a journal mke2fs made. */
		while (n < count && map_block(j, blk + n) == phys + n)
			n++;
		if (io_channel_write_blk64(j->dev, phys, (int)n, p))
			return -EIO;
		blk += n;
		count -= n;
		p += (size_t)n * j->bsize;
	}
	return 0;
}

void jnl_sb_csum_set(struct jnl *j)
{
	if (j->csum)
		j->sb->s_checksum = htobe32(sb_csum(j->sb));
}

int jnl_write_sb(struct jnl *j)
{
	jnl_sb_csum_set(j);
	return jnl_write(j, 0, 1, j->sbbuf);
}

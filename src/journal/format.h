/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The jbd2 journal as it lies on disk (the kernel's
 * Documentation/filesystems/ext4/journal.rst), shared by the replay at
 * mount and the journal writer to come.  Every field is big-endian, unlike
 * the rest of ext4; the structures are only ever overlaid on whole blocks
 * read from or written to the journal, their fields through jf_be32_at and
 * the tag accessors below.
 *
 * A journal is s_maxlen blocks; block 0 is its superblock.  The log is a
 * ring from s_first up to "last": s_maxlen, or with fast commits s_maxlen
 * less the s_num_fc_blks of the fast commit area, which starts at last + 1.
 * A transaction is descriptor blocks, each followed by the blocks its tags
 * describe, revoke blocks, and a commit block; each of those starts with a
 * jf_header carrying the transaction's sequence number.
 */
#ifndef RRFUSE_JOURNAL_FORMAT_H
#define RRFUSE_JOURNAL_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <endian.h>

#define JF_MAGIC		0xc03b3998U

/* jf_header.h_blocktype */
#define JF_DESCRIPTOR_BLOCK	1
#define JF_COMMIT_BLOCK		2
#define JF_SUPERBLOCK_V1	3
#define JF_SUPERBLOCK_V2	4
#define JF_REVOKE_BLOCK		5
#define JF_FC_BLOCK		6	/* fast commit area block (not part of the ring) */

/* Superblock features (v2 only; v1 has none). */
#define JF_COMPAT_CHECKSUM		0x00000001U	/* commit holds a crc32 of the transaction */
#define JF_INCOMPAT_REVOKE		0x00000001U
#define JF_INCOMPAT_64BIT		0x00000002U	/* tags and revoke records carry 64-bit blocks */
#define JF_INCOMPAT_ASYNC_COMMIT	0x00000004U	/* commit written without waiting for the rest */
#define JF_INCOMPAT_CSUM_V2		0x00000008U	/* crc32c of every block, 16 bits in tags */
#define JF_INCOMPAT_CSUM_V3		0x00000010U	/* as v2, 32 bits in tags (tag3) */
#define JF_INCOMPAT_FAST_COMMIT		0x00000020U	/* s_num_fc_blks blocks after the ring */

/* s_checksum_type; a commit block's h_chksum_type (v1 checksums: crc32) */
#define JF_CSUM_CRC32		1
#define JF_CSUM_MD5		2
#define JF_CSUM_SHA1		3
#define JF_CSUM_CRC32C		4
#define JF_CRC32_CHKSUM_SIZE	4

/* Tag flags (t_flags). */
#define JF_FLAG_ESCAPE		0x1U	/* the block began with JF_MAGIC: stored with 0 there */
#define JF_FLAG_SAME_UUID	0x2U	/* no 16-byte UUID follows this tag */
#define JF_FLAG_DELETED		0x4U	/* unused since jbd */
#define JF_FLAG_LAST_TAG	0x8U	/* the descriptor's last tag */

#define JF_UUID_SIZE		16
#define JF_USERS_MAX		48
#define JF_DEFAULT_FC_BLOCKS	256	/* fast commit blocks when s_num_fc_blks is 0 */

/* The first 12 bytes of every journal metadata block. */
struct jf_header {
	uint32_t h_magic;
	uint32_t h_blocktype;
	uint32_t h_sequence;
};

/* Block 0 of the journal; 1024 bytes are checksummed under csum v2/v3. */
struct jf_superblock {
	struct jf_header s_header;
	/* 0x0c: static */
	uint32_t s_blocksize;
	uint32_t s_maxlen;		/* journal blocks, superblock included */
	uint32_t s_first;		/* first log block */
	/* 0x18: dynamic */
	uint32_t s_sequence;		/* first transaction expected in the log */
	uint32_t s_start;		/* block of that transaction's start; 0: the log is empty */
	uint32_t s_errno;
	/* 0x24: v2 only */
	uint32_t s_feature_compat;
	uint32_t s_feature_incompat;
	uint32_t s_feature_ro_compat;
	uint8_t s_uuid[JF_UUID_SIZE];	/* 0x30 */
	uint32_t s_nr_users;		/* 0x40 */
	uint32_t s_dynsuper;
	uint32_t s_max_transaction;
	uint32_t s_max_trans_data;
	uint8_t s_checksum_type;	/* 0x50 */
	uint8_t s_padding2[3];
	uint32_t s_num_fc_blks;		/* 0x54 */
	uint32_t s_head;		/* 0x58: where the log was last seen to end, if clean */
	uint32_t s_padding[40];
	uint32_t s_checksum;		/* 0xfc: crc32c(~0, this block's 1024 bytes with it 0) */
	uint8_t s_users[JF_UUID_SIZE * JF_USERS_MAX];	/* 0x100 */
};

/*
 * Descriptor block tags, after the header.  Their size depends on the
 * features (jf_tag_size); a tag without JF_FLAG_SAME_UUID is followed by a
 * 16-byte UUID.  Under csum v2/v3 the block ends with a jf_tail.
 */
struct jf_tag3 {			/* csum v3 */
	uint32_t t_blocknr;
	uint32_t t_flags;
	uint32_t t_blocknr_high;	/* with JF_INCOMPAT_64BIT only */
	uint32_t t_checksum;		/* crc32c(seed, be32 sequence, block as logged) */
};

struct jf_tag {				/* otherwise: its last fields as the features say */
	uint32_t t_blocknr;
	uint16_t t_checksum;		/* csum v2: the low 16 bits of tag3's */
	uint16_t t_flags;
	uint32_t t_blocknr_high;	/* with JF_INCOMPAT_64BIT only */
};

/* Descriptor and revoke blocks under csum v2/v3: crc32c(seed, block with it 0). */
struct jf_tail {
	uint32_t t_checksum;
};

/*
 * The commit block.  Under JF_COMPAT_CHECKSUM h_chksum[0] is the crc32 (big
 * endian, seed ~0) of the transaction's descriptor and logged blocks; under
 * csum v2/v3 it is the crc32c of this block with it 0.
 */
#define JF_CHECKSUM_WORDS	8
struct jf_commit {
	struct jf_header c_header;
	uint8_t h_chksum_type;
	uint8_t h_chksum_size;
	uint8_t h_padding[2];
	uint32_t h_chksum[JF_CHECKSUM_WORDS];
	uint64_t h_commit_sec;
	uint32_t h_commit_nsec;
};

/* A revoke block: r_count bytes used, header included; be32 or be64 (64bit) records follow. */
struct jf_revoke {
	struct jf_header r_header;
	uint32_t r_count;
};

_Static_assert(sizeof(struct jf_superblock) == 1024, "journal superblock is 1024 bytes");
_Static_assert(sizeof(struct jf_tag3) == 16, "tag3 is 16 bytes");
_Static_assert(sizeof(struct jf_tag) == 12, "tag is 12 bytes");
/* 60 bytes of fields, padded to 64 (its size in the kernel: a partial commit block is checked over it). */
_Static_assert(sizeof(struct jf_commit) == 64, "commit header is 64 bytes");
_Static_assert(sizeof(struct jf_revoke) == 16, "revoke header is 16 bytes");

/*
 * Bytes of a tag, UUID not included: 16 under csum v3; else struct jf_tag
 * (12), 2 more under csum v2 (the kernel's layout counts its 16-bit
 * checksum twice), 4 fewer without 64bit (no t_blocknr_high).  So 8, 10,
 * 12 or 14; the flags are at byte 6 in each.
 */
static inline unsigned int jf_tag_size(uint32_t incompat)
{
	unsigned int size = sizeof(struct jf_tag);

	if (incompat & JF_INCOMPAT_CSUM_V3)
		return sizeof(struct jf_tag3);
	if (incompat & JF_INCOMPAT_CSUM_V2)
		size += sizeof(uint16_t);
	if (!(incompat & JF_INCOMPAT_64BIT))
		size -= sizeof(uint32_t);
	return size;
}

/*
 * Tag fields, wherever the tag lies in a block (unaligned): the flags and
 * checksum sit in different places in the two layouts.
 */
static inline uint32_t jf_be32_at(const void *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return be32toh(v);
}

static inline void jf_put_be32(void *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, sizeof(v));
}

static inline uint16_t jf_be16_at(const void *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return be16toh(v);
}

static inline uint64_t jf_be64_at(const void *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return be64toh(v);
}

#define JF_FIELD(type, field, p) ((const uint8_t *)(p) + offsetof(type, field))

static inline unsigned int jf_tag_flags(const void *tag, uint32_t incompat)
{
	if (incompat & JF_INCOMPAT_CSUM_V3)
		return jf_be32_at(JF_FIELD(struct jf_tag3, t_flags, tag));
	return jf_be16_at(JF_FIELD(struct jf_tag, t_flags, tag));
}

static inline uint64_t jf_tag_block(const void *tag, uint32_t incompat)
{
	uint64_t block = jf_be32_at(tag);

	if (!(incompat & JF_INCOMPAT_64BIT))
		return block;
	if (incompat & JF_INCOMPAT_CSUM_V3)
		return block | (uint64_t)jf_be32_at(JF_FIELD(struct jf_tag3, t_blocknr_high, tag)) << 32;
	return block | (uint64_t)jf_be32_at(JF_FIELD(struct jf_tag, t_blocknr_high, tag)) << 32;
}

/* The checksum a tag carries: 32 bits under v3, 16 under v2. */
static inline uint32_t jf_tag_csum(const void *tag, uint32_t incompat)
{
	if (incompat & JF_INCOMPAT_CSUM_V3)
		return jf_be32_at(JF_FIELD(struct jf_tag3, t_checksum, tag));
	return jf_be16_at(JF_FIELD(struct jf_tag, t_checksum, tag));
}

/*
 * The fast commit area (after the log, JF_INCOMPAT_FAST_COMMIT) holds
 * ext4's own records, not jbd2 blocks: little-endian tag-length-value
 * entries, the first a head naming the transaction the fast commits
 * follow.  Only that head is described here: enough to see whether the
 * area holds fast commits to replay.
 */
#define JF_FC_TAG_HEAD		0x0009
struct jf_fc_head {
	uint16_t fc_tag;		/* little-endian, JF_FC_TAG_HEAD */
	uint16_t fc_len;
	uint32_t fc_features;
	uint32_t fc_tid;		/* replayed when it is the transaction after the log's last */
};

#endif

// SPDX-License-Identifier: GPL-2.0
/*
 * Recovery in the three passes of jbd2 (fs/jbd2/recovery.c) and e2fsck:
 *
 *   scan    from s_start/s_sequence to the last transaction with a valid
 *           commit block: where the log ends;
 *   revoke  collect the revoke records of those transactions (and check
 *           every tag's home before anything is written);
 *   replay  write every logged block that no later revoke covers home.
 *
 * Then a flush, the journal marked empty, needs_recovery cleared.  The log
 * ends, as in the kernel, at a block without the journal magic, with
 * another sequence number or of an unknown type, and at a commit block
 * whose checksum fails; a descriptor or revoke block whose checksum fails
 * ends it too if a commit older than the last one follows (stale blocks
 * from a previous use of the log), and is corruption otherwise.
 */
#include "recover.h"
#include "journal.h"
#include "revoke.h"
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum jr_pass { JR_SCAN, JR_REVOKE, JR_REPLAY };

/* A tag callback's answer besides 0 and a negative errno: the log ends here. */
#define JR_END 1

#define JR_SB_OFFSET	1024	/* the ext4 superblock's byte offset on the device */

struct jr {
	struct jnl j;
	struct jrv_table revokes;
	unsigned char *buf;		/* a descriptor, commit or revoke block */
	unsigned char *data;		/* a logged block */
	uint64_t fs_blocks;
	uint32_t crc;			/* JF_COMPAT_CHECKSUM: crc32 of the transaction so far */
	uint64_t span;			/* log blocks since the last commit block */
	uint32_t start_seq, end_seq;	/* transactions [start_seq, end_seq) are replayed */
	int end_known;
	int failed_commit;		/* end_seq's commit block is corrupt (not async_commit) */
	uint64_t replayed, revoke_records, revoke_hits, bad_blocks;
	char *msg;
	size_t msglen;
};

typedef int (*jr_tag_fn)(struct jr *r, const unsigned char *tag, uint32_t logblk, uint32_t seq);

/*
 * The tags of descriptor block desc, whose logged blocks follow it from
 * *blk (advanced past them): fn (if any) for each.
 */
static int each_tag(struct jr *r, const unsigned char *desc, uint32_t *blk, uint32_t seq, jr_tag_fn fn)
{
	size_t off = sizeof(struct jf_header), end = r->j.bsize - r->j.tail_size;
	int ret;

	while (off + r->j.tag_size <= end) {
		const unsigned char *tag = desc + off;
		unsigned int flags = jf_tag_flags(tag, r->j.incompat);

		r->span++;
		if (fn) {
			ret = fn(r, tag, *blk, seq);
			if (ret)
				return ret;
		}
		*blk = jnl_next(&r->j, *blk, 1);
		off += r->j.tag_size;
		if (!(flags & JF_FLAG_SAME_UUID))
			off += JF_UUID_SIZE;
		if (flags & JF_FLAG_LAST_TAG)
			break;
	}
	return 0;
}

/* Scan under JF_COMPAT_CHECKSUM: the transaction's crc32 takes in each logged block. */
static int crc_tag(struct jr *r, const unsigned char *tag, uint32_t logblk, uint32_t seq)
{
	(void)tag, (void)seq;
	if (jnl_read(&r->j, logblk, r->data))
		return JR_END;
	r->crc = ext2fs_crc32_be(r->crc, r->data, r->j.bsize);
	return 0;
}

/* Revoke pass: every home block of the transactions to replay is checked before any is written. */
static int check_tag(struct jr *r, const unsigned char *tag, uint32_t logblk, uint32_t seq)
{
	uint64_t home = jf_tag_block(tag, r->j.incompat);

	(void)logblk;
	if (home >= r->fs_blocks) {
		snprintf(r->msg, r->msglen, "corrupt journal: transaction %u logs block %llu, outside the filesystem",
			 seq, (unsigned long long)home);
		return -EUCLEAN;
	}
	if (jnl_holds(&r->j, home)) {
		snprintf(r->msg, r->msglen, "corrupt journal: transaction %u logs block %llu, one of the journal's own",
			 seq, (unsigned long long)home);
		return -EUCLEAN;
	}
	return 0;
}

static int replay_tag(struct jr *r, const unsigned char *tag, uint32_t logblk, uint32_t seq)
{
	uint64_t home = jf_tag_block(tag, r->j.incompat);

	if (jnl_read(&r->j, logblk, r->data)) {
		rr_log(LOG_ERR, "journal: cannot read log block %u (block %llu of transaction %u): not replayed",
		       logblk, (unsigned long long)home, seq);
		r->bad_blocks++;
		return 0;
	}
	if (jrv_revoked(&r->revokes, home, seq)) {
		r->revoke_hits++;
		return 0;
	}
	/* As the kernel: a block that fails its checksum is skipped, the rest replayed, recovery fails. */
	if (!jnl_tag_csum_ok(&r->j, tag, seq, r->data)) {
		rr_log(LOG_ERR, "journal: block %llu of transaction %u has a bad checksum: not replayed",
		       (unsigned long long)home, seq);
		r->bad_blocks++;
		return 0;
	}
	/* The block began with the journal magic: the log holds it with 0 there. */
	if (jf_tag_flags(tag, r->j.incompat) & JF_FLAG_ESCAPE)
		jf_put_be32(r->data, JF_MAGIC);
	if (io_channel_write_blk64(r->j.dev, home, 1, r->data)) {
		snprintf(r->msg, r->msglen, "journal recovery: cannot write block %llu", (unsigned long long)home);
		return -EIO;
	}
	r->replayed++;
	return 0;
}

static int read_revokes(struct jr *r, const unsigned char *block, uint32_t seq)
{
	const struct jf_revoke *h = (const void *)block;
	size_t rec = (r->j.incompat & JF_INCOMPAT_64BIT) ? sizeof(uint64_t) : sizeof(uint32_t);
	size_t off = sizeof(*h), count = be32toh(h->r_count);

	if (count > r->j.bsize - r->j.tail_size) {
		snprintf(r->msg, r->msglen, "corrupt journal: a revoke block of transaction %u claims %zu bytes",
			 seq, count);
		return -EUCLEAN;
	}
	for (; off + rec <= count; off += rec) {
		uint64_t b = rec == sizeof(uint64_t) ? jf_be64_at(block + off) : jf_be32_at(block + off);

		if (jrv_add(&r->revokes, b, seq)) {
			snprintf(r->msg, r->msglen, "out of memory");
			return -ENOMEM;
		}
		r->revoke_records++;
	}
	return 0;
}

/* How a commit block decides the scan: JR_END, 0 (next transaction), or an error. */
static int scan_commit(struct jr *r, uint32_t seq, int suspect, uint64_t *last_time)
{
	const struct jf_commit *c = (const void *)r->buf;
	uint64_t time = be64toh(c->h_commit_sec);
	uint32_t found = be32toh(c->h_chksum[0]);

	if (suspect) {
		/* A block that failed its checksum, then a commit: newer is corruption, older stale. */
		if (time >= *last_time) {
			snprintf(r->msg, r->msglen, "corrupt journal: transaction %u has a block with a bad checksum",
				 seq);
			return -EUCLEAN;
		}
		return JR_END;
	}
	if (r->j.compat & JF_COMPAT_CHECKSUM) {
		if (r->end_known) {
			r->failed_commit = 1;
			return JR_END;
		}
		if ((c->h_chksum_type == JF_CSUM_CRC32 && c->h_chksum_size == JF_CRC32_CHKSUM_SIZE &&
		     found == r->crc) || (!c->h_chksum_type && !c->h_chksum_size && !found)) {
			r->crc = ~0U;
			goto ok;
		}
	} else if (jnl_commit_csum_ok(&r->j, r->buf)) {
		goto ok;
	} else if (jnl_commit_head_csum_ok(&r->j, r->buf)) {
		/* Only the commit block's head reached the disk: the kernel accepts it (6.12+). */
		rr_log(LOG_NOTICE, "journal: incomplete commit block in transaction %u", seq);
		goto ok;
	}
	if (time < *last_time)
		return JR_END;		/* stale: an older use of the log */
	r->end_seq = seq;
	r->end_known = 1;
	if (!(r->j.incompat & JF_INCOMPAT_ASYNC_COMMIT)) {
		r->failed_commit = 1;
		return JR_END;
	}
ok:
	*last_time = time;
	return 0;
}

static int walk(struct jr *r, enum jr_pass pass)
{
	static const jr_tag_fn tag_fn[] = { [JR_SCAN] = NULL, [JR_REVOKE] = check_tag, [JR_REPLAY] = replay_tag };
	struct jnl *j = &r->j;
	uint32_t seq = r->start_seq, blk = be32toh(j->sb->s_start);
	const struct jf_header *h = (const void *)r->buf;
	uint64_t last_time = 0;
	int suspect = 0, ret;

	r->crc = ~0U;
	r->span = 0;
	for (;;) {
		if (pass != JR_SCAN && !jrv_tid_after(r->end_seq, seq))
			break;
		/* Descriptors of one sequence all around the ring, and no commit: it would never end. */
		if (++r->span > j->last - j->first) {
			snprintf(r->msg, r->msglen, "corrupt journal: transaction %u is longer than the log", seq);
			return -EUCLEAN;
		}
		if (jnl_read(j, blk, r->buf)) {
			snprintf(r->msg, r->msglen, "cannot read journal block %u", blk);
			return -EIO;
		}
		blk = jnl_next(j, blk, 1);
		if (be32toh(h->h_magic) != JF_MAGIC || be32toh(h->h_sequence) != seq)
			break;
		switch (be32toh(h->h_blocktype)) {
		case JF_DESCRIPTOR_BLOCK:
			if (!jnl_tail_csum_ok(j, r->buf)) {
				/* The scan may meet stale blocks; within the log, a bad one is corruption. */
				if (pass != JR_SCAN) {
					snprintf(r->msg, r->msglen, "corrupt journal: descriptor block of transaction %u has a bad checksum",
						 seq);
					return -EUCLEAN;
				}
				suspect = 1;
			}
			if (pass == JR_SCAN && (j->compat & JF_COMPAT_CHECKSUM) && !suspect && !r->end_known) {
				r->crc = ext2fs_crc32_be(r->crc, r->buf, j->bsize);
				ret = each_tag(r, r->buf, &blk, seq, crc_tag);
			} else {
				ret = each_tag(r, r->buf, &blk, seq, tag_fn[pass]);
			}
			if (ret < 0)
				return ret;
			if (ret == JR_END)
				goto end;
			break;
		case JF_COMMIT_BLOCK:
			if (pass == JR_SCAN) {
				ret = scan_commit(r, seq, suspect, &last_time);
				if (ret < 0)
					return ret;
				if (ret == JR_END)
					goto end;
			}
			r->span = 0;
			seq++;
			break;
		case JF_REVOKE_BLOCK:
			if (pass == JR_SCAN && !jnl_tail_csum_ok(j, r->buf))
				suspect = 1;
			if (pass == JR_REVOKE) {
				ret = read_revokes(r, r->buf, seq);
				if (ret)
					return ret;
			}
			break;
		default:
			goto end;
		}
	}
end:
	if (pass == JR_SCAN) {
		if (!r->end_known)
			r->end_seq = seq;
	} else if (seq != r->end_seq) {
		snprintf(r->msg, r->msglen, "journal recovery pass %d ended at transaction %u, the scan at %u",
			 pass, seq, r->end_seq);
		return -EIO;
	}
	return 0;
}

/* Fast commits following the log's last transaction: rrfuse cannot replay them, nor drop them. */
static int check_fast_commits(struct jr *r)
{
	const struct jf_fc_head *head = (const void *)r->data;

	if (!(r->j.incompat & JF_INCOMPAT_FAST_COMMIT) || r->j.last + 1 >= r->j.maxlen)
		return 0;
	if (jnl_read(&r->j, r->j.last + 1, r->data)) {
		snprintf(r->msg, r->msglen, "cannot read the journal's fast commit area");
		return -EIO;
	}
	if (le16toh(head->fc_tag) != JF_FC_TAG_HEAD || le32toh(head->fc_tid) != r->end_seq)
		return 0;
	snprintf(r->msg, r->msglen, "the journal holds fast commits (after transaction %u), which rrfuse cannot replay: "
		 "mount the image with the kernel's ext4 or run 'e2fsck -fy' on it first", r->end_seq - 1);
	return -EOPNOTSUPP;
}

/*
 * The ext4 superblock on the device, as the replay left it: needs_recovery
 * cleared, an error the journal recorded (s_errno) kept as the kernel keeps
 * it, its checksum set.
 */
static int clear_needs_recovery(struct jr *r, int journal_errno)
{
	unsigned int bsize = r->j.bsize;
	blk64_t blk = JR_SB_OFFSET / bsize;
	struct ext2_super_block *sb = (void *)(r->data + JR_SB_OFFSET % bsize);

	if (io_channel_read_blk64(r->j.dev, blk, 1, r->data))
		return -EIO;
	if (sb->s_magic != EXT2_SUPER_MAGIC)
		return -EUCLEAN;	/* the replay wrote garbage over it: e2fsck's business */
	sb->s_feature_incompat &= ~EXT3_FEATURE_INCOMPAT_RECOVER;
	if (journal_errno)
		sb->s_state |= EXT2_ERROR_FS;
	if (sb->s_feature_ro_compat & EXT4_FEATURE_RO_COMPAT_METADATA_CSUM)
		sb->s_checksum = ext2fs_crc32c_le(~0U, (const unsigned char *)sb,
						  offsetof(struct ext2_super_block, s_checksum));
	if (io_channel_write_blk64(r->j.dev, blk, 1, r->data) || io_channel_flush(r->j.dev))
		return -EIO;
	return 0;
}

static int finish(struct jr *r)
{
	int32_t journal_errno = (int32_t)be32toh(r->j.sb->s_errno);
	int ret;

	if (io_channel_flush(r->j.dev)) {
		snprintf(r->msg, r->msglen, "journal recovery: cannot flush the replayed blocks");
		return -EIO;
	}
	if (r->failed_commit) {
		snprintf(r->msg, r->msglen, "journal transaction %u is corrupt (the %u before it were replayed): "
			 "run 'e2fsck -fy' on the image", r->end_seq, r->end_seq - r->start_seq);
		return -EUCLEAN;
	}
	if (r->bad_blocks) {
		snprintf(r->msg, r->msglen, "journal recovery failed: %llu logged blocks could not be read or had a bad checksum "
			 "(the rest was replayed): run 'e2fsck -fy' on the image", (unsigned long long)r->bad_blocks);
		return -EIO;
	}
	if (journal_errno) {
		rr_log(LOG_WARNING, "journal: filesystem error recorded from the previous mount: %s",
		       strerror(journal_errno < 0 ? -journal_errno : journal_errno));
		r->j.sb->s_errno = 0;
	}
	/* As the kernel and e2fsck: the next transaction skips end_seq, so no stale commit of it is ever taken. */
	ret = jnl_mark_empty(&r->j, r->end_seq + 1);
	if (!ret)
		ret = clear_needs_recovery(r, journal_errno);
	if (ret)
		snprintf(r->msg, r->msglen, "journal recovery: cannot update the superblocks");
	return ret;
}

static int recover(struct jr *r)
{
	uint32_t n;
	int ret;

	ret = walk(r, JR_SCAN);
	if (!ret)
		ret = check_fast_commits(r);
	if (!ret)
		ret = walk(r, JR_REVOKE);
	if (ret)
		return ret;	/* nothing written */
	rr_log(LOG_NOTICE, "journal: replaying transactions %u to %u from log block %u", r->start_seq,
	       r->end_seq - 1, be32toh(r->j.sb->s_start));
	ret = walk(r, JR_REPLAY);
	if (ret) {
		io_channel_flush(r->j.dev);
		return ret;
	}
	ret = finish(r);
	n = r->end_seq - r->start_seq;
	rr_log(ret ? LOG_ERR : LOG_NOTICE,
	       "journal: %s %u transaction%s (%u to %u), %llu blocks written, %llu revoked by %llu revoke records",
	       ret ? "recovery failed after replaying" : "replayed", n, n == 1 ? "" : "s", r->start_seq, r->end_seq - 1, (unsigned long long)r->replayed,
	       (unsigned long long)r->revoke_hits, (unsigned long long)r->revoke_records);
	return ret;
}

int jr_recover(ext2_filsys fs, char *msg, size_t msglen)
{
	struct jr r = { .msg = msg, .msglen = msglen };
	int ret;

	if (!ext2fs_has_feature_journal(fs->super)) {
		snprintf(msg, msglen, "the superblock says needs_recovery but there is no journal: run 'e2fsck -fy' on the image");
		return -EUCLEAN;
	}
	if (!fs->super->s_journal_inum) {
		snprintf(msg, msglen, "the journal that needs recovery is on an external device (0x%x): rrfuse cannot replay it; "
			 "run 'e2fsck -fy -j DEVICE' on the image", fs->super->s_journal_dev);
		return -EOPNOTSUPP;
	}
	ret = jnl_open(fs, &r.j, msg, msglen);
	if (ret)
		return ret;
	r.fs_blocks = ext2fs_blocks_count(fs->super);
	r.start_seq = be32toh(r.j.sb->s_sequence);
	jrv_init(&r.revokes);
	r.buf = malloc(r.j.bsize);
	r.data = malloc(r.j.bsize);
	if (!r.buf || !r.data) {
		snprintf(msg, msglen, "out of memory");
		ret = -ENOMEM;
	} else if (!r.j.sb->s_start) {
		/* An empty log: nothing to replay, only the flag to clear, as the kernel does. */
		ret = clear_needs_recovery(&r, 0);
		if (ret)
			snprintf(msg, msglen, "journal recovery: cannot update the superblock");
		else
			rr_log(LOG_INFO, "journal: needs_recovery set on an empty journal: cleared");
	} else {
		ret = recover(&r);
	}
	free(r.buf);
	free(r.data);
	jrv_free(&r.revokes);
	jnl_close(&r.j);
	return ret;
}

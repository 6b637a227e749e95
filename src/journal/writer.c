// SPDX-License-Identifier: GPL-2.0
/*
 * jbd2 transactions, written: descriptor blocks with their tags and the
 * logged copies of the metadata blocks, then the commit block (writer.h
 * states the scheme and its ordering rules).
 */
#include "writer.h"
#include "journal.h"
#include "rrfuse/grow.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The environment variable naming a crash point (tests only). */
#define JW_CRASH_ENV "RRFUSE_JOURNAL_CRASH"
/* Fewer blocks per transaction than this: the journal is too small to be worth writing. */
#define JW_MIN_CAPACITY 16

enum jw_point { JW_NOWHERE, JW_AFTER_LOG, JW_AFTER_COMMIT, JW_AFTER_HOME };

struct jw {
	struct jnl j;
	uint32_t seq;			/* the next transaction's id */
	unsigned int per_desc;		/* tags one descriptor block holds */
	size_t capacity;
	unsigned char *stage;		/* a descriptor block and the copies it describes */
	unsigned char *commit;
	uint64_t transactions;
	/*
	 * The log holds one committed transaction whose home writes may not be
	 * durable yet (they are at the next transaction's first flush): it
	 * stays in the log, the next one written after it, from head on.
	 */
	int live;
	uint32_t tail;			/* the live transaction's first log block */
	uint32_t head;			/* the log block after it: where the next one goes */
	struct jw_blocks {
		blk64_t *v;
		size_t n, cap;
	} logged,			/* the live transaction's blocks, sorted */
	  revoked;			/* of those, the ones freed since: the next transaction revokes them */
	int revoke_lost;		/* out of memory for a record: the next transaction empties the log */
	int aborted;
	enum jw_point crash_at;		/* RRFUSE_JOURNAL_CRASH, read once at open */
	uint64_t crash_nth;		/* ... at this transaction (1: the first) */
};

static void parse_crash(struct jw *w)
{
	const char *env = getenv(JW_CRASH_ENV);
	const char *colon;
	size_t len;

	if (!env || !*env)
		return;
	colon = strchr(env, ':');
	len = colon ? (size_t)(colon - env) : strlen(env);
	if (len == 3 && !strncmp(env, "log", 3))
		w->crash_at = JW_AFTER_LOG;
	else if (len == 6 && !strncmp(env, "commit", 6))
		w->crash_at = JW_AFTER_COMMIT;
	else if (len == 4 && !strncmp(env, "home", 4))
		w->crash_at = JW_AFTER_HOME;
	w->crash_nth = colon ? strtoull(colon + 1, NULL, 10) : 1;
}

/* A crash as SIGKILL leaves it: what was written stays, nothing more is. */
static void crash_point(struct jw *w, enum jw_point at)
{
	if (w->crash_at != at || w->transactions + 1 != w->crash_nth)
		return;
	fprintf(stderr, "rrfuse: %s: stopping at the journal's crash point\n", JW_CRASH_ENV);
	raise(SIGKILL);
}

/*
 * As ext4's mount (set_journal_csum_feature_set, and 64-bit tags on a
 * 64bit filesystem): checksum v3 under metadata_csum, no checksum
 * otherwise (v1, v2 and async commit cleared).
 */
static int set_features(struct jw *w, char *msg, size_t msglen)
{
	struct jnl *j = &w->j;
	struct jf_superblock *sb = j->sb;
	ext2_filsys fs = j->fs;
	uint32_t compat = j->compat & ~JF_COMPAT_CHECKSUM;
	uint32_t incompat = j->incompat & ~(JF_INCOMPAT_CSUM_V2 | JF_INCOMPAT_CSUM_V3 | JF_INCOMPAT_ASYNC_COMMIT);

	if (ext2fs_has_feature_metadata_csum(fs->super))
		incompat |= JF_INCOMPAT_CSUM_V3;
	if (ext2fs_has_feature_64bit(fs->super))
		incompat |= JF_INCOMPAT_64BIT;
	/* Its transactions may carry revoke records (the kernel's jbd2 sets it at its first). */
	incompat |= JF_INCOMPAT_REVOKE;
	if (be32toh(sb->s_header.h_blocktype) != JF_SUPERBLOCK_V2) {
		if (compat != j->compat || incompat != j->incompat) {
			snprintf(msg, msglen, "a version 1 journal superblock cannot have the features this filesystem needs");
			return -EOPNOTSUPP;
		}
		return 0;
	}
	j->compat = compat;
	j->incompat = incompat;
	sb->s_feature_compat = htobe32(compat);
	sb->s_feature_incompat = htobe32(incompat);
	j->csum = !!(incompat & JF_INCOMPAT_CSUM_V3);
	if (j->csum) {
		sb->s_checksum_type = JF_CSUM_CRC32C;
		j->seed = ext2fs_crc32c_le(~0U, sb->s_uuid, sizeof(sb->s_uuid));
	}
	j->tag_size = jf_tag_size(incompat);
	j->tail_size = j->csum ? sizeof(struct jf_tail) : 0;
	return 0;
}

int jw_open(ext2_filsys fs, io_channel dev, struct jw **out, char *msg, size_t msglen)
{
	struct jw *w = calloc(1, sizeof(*w));
	struct jnl *j;
	size_t room;
	int ret;

	*out = NULL;
	if (!w) {
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	j = &w->j;
	ret = jnl_open(fs, j, msg, msglen);
	if (ret) {
		free(w);
		return ret;
	}
	j->dev = dev;	/* under the cache, above fault injection: the journal's writes fail as any */
	ret = -EUCLEAN;
	if (j->sb->s_start) {
		snprintf(msg, msglen, "the journal is not empty");
		goto fail;
	}
	ret = set_features(w, msg, msglen);
	if (ret)
		goto fail;
	/* The header, the tail and one UUID (the first tag's) take their room from the tags. */
	room = j->bsize - sizeof(struct jf_header) - j->tail_size - JF_UUID_SIZE;
	w->per_desc = (unsigned int)(room / j->tag_size);
	/* n blocks need ceil(n / per_desc) descriptors and a commit block, in the ring. */
	w->capacity = (size_t)(j->last - j->first - 1) * w->per_desc / (w->per_desc + 1);
	if (w->capacity < JW_MIN_CAPACITY) {
		snprintf(msg, msglen, "the journal is too small (%u log blocks)", j->last - j->first);
		goto fail;
	}
	ret = -ENOMEM;
	w->stage = malloc((size_t)(w->per_desc + 2) * j->bsize);
	w->commit = malloc(j->bsize);
	if (!w->stage || !w->commit) {
		snprintf(msg, msglen, "out of memory");
		goto fail;
	}
	w->seq = be32toh(j->sb->s_sequence);
	w->head = j->first;
	ret = -EIO;
	if (jnl_write_sb(j) || io_channel_flush(j->dev)) {
		snprintf(msg, msglen, "cannot write the journal superblock");
		goto fail;
	}
	parse_crash(w);
	*out = w;
	return 0;
fail:
	free(w->stage);
	free(w->commit);
	jnl_close(j);
	free(w);
	return ret;
}

/*
 * The live transaction's home writes made durable, then the log said empty
 * from the next id on, made durable too (rules 4 and 5 at once).
 */
static int empty_log(struct jw *w)
{
	struct jnl *j = &w->j;

	if (io_channel_flush(j->dev))
		return -EIO;
	j->sb->s_start = 0;
	j->sb->s_sequence = htobe32(w->seq);
	if (jnl_write_sb(j) || io_channel_flush(j->dev))
		return -EIO;
	/* No transaction is left to replay: nothing to revoke. */
	w->live = 0;
	w->logged.n = w->revoked.n = 0;
	w->revoke_lost = 0;
	return 0;
}

int jw_close(struct jw *w)
{
	int ret = 0;

	if (!w)
		return 0;
	if (!w->aborted && empty_log(w))
		ret = -EIO;
	free(w->stage);
	free(w->commit);
	free(w->logged.v);
	free(w->revoked.v);
	jnl_close(&w->j);
	free(w);
	return ret;
}

size_t jw_capacity(const struct jw *w)
{
	return w->capacity;
}

void jw_stats(const struct jw *w, uint64_t *transactions, uint32_t *next_seq)
{
	*transactions = w->transactions;
	*next_seq = w->seq;
}

static void put_be16(unsigned char *p, uint16_t v)
{
	v = htobe16(v);
	memcpy(p, &v, sizeof(v));
}

/* crc32c(seed) of a block with the 4 bytes at off counted as 0, stored there. */
static void block_csum_set(const struct jnl *j, unsigned char *block, size_t off)
{
	uint32_t crc;

	memset(block + off, 0, sizeof(uint32_t));
	crc = ext2fs_crc32c_le(j->seed, block, j->bsize);
	jf_put_be32(block + off, crc);
}

/* A tag in the journal's layout (format.h): 16 bytes under csum v3, 8 to 14 otherwise. */
static void put_tag(const struct jnl *j, unsigned char *t, blk64_t blk, unsigned int flags,
		    uint32_t csum)
{
	jf_put_be32(t, (uint32_t)blk);
	if (j->incompat & JF_INCOMPAT_CSUM_V3) {
		jf_put_be32(t + offsetof(struct jf_tag3, t_flags), flags);
		jf_put_be32(t + offsetof(struct jf_tag3, t_blocknr_high),
			    j->incompat & JF_INCOMPAT_64BIT ? (uint32_t)(blk >> 32) : 0);
		jf_put_be32(t + offsetof(struct jf_tag3, t_checksum), csum);
		return;
	}
	put_be16(t + offsetof(struct jf_tag, t_checksum),
		 j->incompat & JF_INCOMPAT_CSUM_V2 ? (uint16_t)csum : 0);
	put_be16(t + offsetof(struct jf_tag, t_flags), (uint16_t)flags);
	if (j->incompat & JF_INCOMPAT_64BIT)
		jf_put_be32(t + offsetof(struct jf_tag, t_blocknr_high), (uint32_t)(blk >> 32));
}

static void put_header(unsigned char *block, uint32_t type, uint32_t seq)
{
	jf_put_be32(block + offsetof(struct jf_header, h_magic), JF_MAGIC);
	jf_put_be32(block + offsetof(struct jf_header, h_blocktype), type);
	jf_put_be32(block + offsetof(struct jf_header, h_sequence), seq);
}

/* Log blocks from at on, count of them from buf, going on at the first where the ring wraps. */
static int ring_write(struct jw *w, uint32_t at, uint32_t count, const void *buf)
{
	struct jnl *j = &w->j;
	uint32_t n = count < j->last - at ? count : j->last - at;
	int ret = jnl_write(j, at, n, buf);

	if (ret || n == count)
		return ret;
	return jnl_write(j, j->first, count - n, (const unsigned char *)buf + (size_t)n * j->bsize);
}

/*
 * One descriptor block and the n copies it describes, staged at w->stage
 * (after the superblock's block when with_sb: one write for both) and
 * written at journal block at.
 */
static int write_group(struct jw *w, uint32_t seq, uint32_t at, int with_sb, size_t n,
		       const blk64_t *blks, const unsigned char *const *data)
{
	struct jnl *j = &w->j;
	unsigned char *desc = w->stage + (with_sb ? j->bsize : 0);
	unsigned char *copy = desc + j->bsize, *tag = desc + sizeof(struct jf_header);
	unsigned char seqbe[sizeof(uint32_t)];
	size_t i;

	jf_put_be32(seqbe, seq);
	memset(desc, 0, j->bsize);
	put_header(desc, JF_DESCRIPTOR_BLOCK, seq);
	for (i = 0; i < n; i++, copy += j->bsize) {
		unsigned int flags = i ? JF_FLAG_SAME_UUID : 0;
		uint32_t csum = 0;

		memcpy(copy, data[i], j->bsize);
		/* A copy that looks like a journal block would end the replay's scan: escaped. */
		if (jf_be32_at(copy) == JF_MAGIC) {
			memset(copy, 0, sizeof(uint32_t));
			flags |= JF_FLAG_ESCAPE;
		}
		if (i == n - 1)
			flags |= JF_FLAG_LAST_TAG;
		if (j->csum)
			csum = ext2fs_crc32c_le(ext2fs_crc32c_le(j->seed, seqbe, sizeof(seqbe)), copy, j->bsize);
		put_tag(j, tag, blks[i], flags, csum);
		tag += j->tag_size;
		if (!i) {
			memcpy(tag, j->sb->s_uuid, JF_UUID_SIZE);
			tag += JF_UUID_SIZE;
		}
	}
	if (j->csum)
		block_csum_set(j, desc, j->bsize - sizeof(struct jf_tail));
	if (with_sb) {
		jnl_sb_csum_set(j);
		memcpy(w->stage, j->sbbuf, j->bsize);
		return jnl_write(j, 0, (uint32_t)(n + 2), w->stage);
	}
	return ring_write(w, at, (uint32_t)(n + 1), desc);
}

/* Room in b for extra more blocks.  0 or -ENOMEM. */
static int blocks_room(struct jw_blocks *b, size_t extra)
{
	return rr_grow(&b->v, sizeof(*b->v), &b->cap, b->n + extra, 64);
}

static int by_blk(const void *a, const void *b)
{
	blk64_t x = *(const blk64_t *)a, y = *(const blk64_t *)b;

	return x < y ? -1 : x > y;
}

void jw_revoke(struct jw *w, blk64_t blk, uint64_t len)
{
	size_t lo = 0, hi = w->logged.n;

	/* The first logged block at or after blk. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (w->logged.v[mid] < blk)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < w->logged.n && w->logged.v[lo] - blk < len; lo++) {
		if (blocks_room(&w->revoked, 1)) {
			w->revoke_lost = 1;
			return;
		}
		w->revoked.v[w->revoked.n++] = w->logged.v[lo];
	}
}

/* Records a revoke block holds: after its header, before the tail under csum v2/v3. */
static size_t revoke_per_block(const struct jnl *j)
{
	size_t rec = j->incompat & JF_INCOMPAT_64BIT ? sizeof(uint64_t) : sizeof(uint32_t);

	return (j->bsize - sizeof(struct jf_revoke) - j->tail_size) / rec;
}

/* w->revoked as revoke blocks of transaction seq from log block at on; returns the block after. */
static int write_revokes(struct jw *w, uint32_t seq, uint32_t *at)
{
	struct jnl *j = &w->j;
	size_t per = revoke_per_block(j), done, k, off;
	int wide = !!(j->incompat & JF_INCOMPAT_64BIT);
	unsigned char *r = w->commit;	/* free until the commit block is made */

	for (done = 0; done < w->revoked.n; done += k) {
		k = w->revoked.n - done < per ? w->revoked.n - done : per;
		memset(r, 0, j->bsize);
		put_header(r, JF_REVOKE_BLOCK, seq);
		off = sizeof(struct jf_revoke);
		for (size_t i = 0; i < k; i++) {
			blk64_t b = w->revoked.v[done + i];

			if (wide) {
				jf_put_be32(r + off, (uint32_t)(b >> 32));
				off += sizeof(uint32_t);
			}
			jf_put_be32(r + off, (uint32_t)b);
			off += sizeof(uint32_t);
		}
		jf_put_be32(r + offsetof(struct jf_revoke, r_count), (uint32_t)off);
		if (j->csum)
			block_csum_set(j, r, j->bsize - sizeof(struct jf_tail));
		if (jnl_write(j, *at, 1, r))
			return -EIO;
		*at = jnl_next(j, *at, 1);
	}
	return 0;
}

static int write_commit(struct jw *w, uint32_t seq, uint32_t at)
{
	struct jnl *j = &w->j;
	unsigned char *c = w->commit;
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	memset(c, 0, j->bsize);
	put_header(c, JF_COMMIT_BLOCK, seq);
	jf_put_be32(c + offsetof(struct jf_commit, h_commit_sec), (uint32_t)((uint64_t)now.tv_sec >> 32));
	jf_put_be32(c + offsetof(struct jf_commit, h_commit_sec) + 4, (uint32_t)now.tv_sec);
	jf_put_be32(c + offsetof(struct jf_commit, h_commit_nsec), (uint32_t)now.tv_nsec);
	if (j->csum)
		block_csum_set(j, c, offsetof(struct jf_commit, h_chksum));
	return jnl_write(j, at, 1, c);
}

int jw_log(struct jw *w, size_t n, const blk64_t *blks, const unsigned char *const *data)
{
	struct jnl *j = &w->j;
	uint32_t seq, start, at;
	size_t done, g, need, room;
	int ret = 0, with_sb;

	if (w->aborted)
		return -EIO;
	if (!n)
		return 0;
	if (n > w->capacity)
		return -EFBIG;
	/*
	 * Descriptors, copies and the commit block go after the live
	 * transaction, round the ring; where they would reach it, the log is
	 * emptied first.
	 */
	need = n + (n + w->per_desc - 1) / w->per_desc + 1;
	need += (w->revoked.n + revoke_per_block(j) - 1) / revoke_per_block(j);
	room = w->tail >= w->head ? w->tail - w->head : j->last - j->first - (w->head - w->tail);
	/* Emptied, the log replays nothing, and a revoke record lost to memory does not matter. */
	if (w->live && (need > room || w->revoke_lost)) {
		ret = empty_log(w);
		if (ret)
			goto abort;
	}
	start = at = w->head;
	/* An id is used once, even by a transaction that fails halfway. */
	seq = w->seq++;
	/*
	 * Over an empty log the superblock says the log starts here at once,
	 * with the first descriptor (rule 2).  Behind a live transaction it
	 * says so only after the first flush, which makes that one's home
	 * writes durable (rule 4): until then a replay needs it.
	 */
	with_sb = !w->live;
	j->sb->s_start = htobe32(start);
	j->sb->s_sequence = htobe32(seq);
	if (with_sb && (start != 1 || j->first != 1)) {
		ret = jnl_write_sb(j);
		if (ret)
			goto abort;
	}
	for (done = 0; done < n; done += g) {
		g = n - done < w->per_desc ? n - done : w->per_desc;
		ret = write_group(w, seq, at, with_sb && !done && start == 1, g, blks + done, data + done);
		if (ret)
			goto abort;
		at = jnl_next(j, at, (uint32_t)g + 1);
	}
	ret = write_revokes(w, seq, &at);
	if (ret)
		goto abort;
	/* Rules 1, 2 and 4: file data, the log blocks, the live transaction's home writes durable. */
	if (io_channel_flush(j->dev)) {
		ret = -EIO;
		goto abort;
	}
	crash_point(w, JW_AFTER_LOG);
	/*
	 * The superblock naming this transaction, and its commit block: either
	 * may reach the device first; a replay of a log whose only transaction
	 * has no commit block replays nothing, and what stood before it is home.
	 */
	if (!with_sb && jnl_write_sb(j)) {
		ret = -EIO;
		goto abort;
	}
	/* Rule 3: the commit block durable before any home write (the caller's). */
	if (write_commit(w, seq, at) || io_channel_flush(j->dev)) {
		ret = -EIO;
		goto abort;
	}
	w->live = 1;
	w->tail = start;
	w->head = jnl_next(j, at, 1);
	/* This one is the live transaction now: its blocks are the ones a later free revokes. */
	w->revoked.n = w->logged.n = 0;
	if (blocks_room(&w->logged, n)) {
		w->revoke_lost = 1;
	} else {
		memcpy(w->logged.v, blks, n * sizeof(*blks));
		w->logged.n = n;
		qsort(w->logged.v, n, sizeof(*blks), by_blk);
	}
	crash_point(w, JW_AFTER_COMMIT);
	return 0;
abort:
	jw_abort(w);
	return ret;
}

int jw_checkpointed(struct jw *w)
{
	if (w->aborted)
		return -EIO;
	crash_point(w, JW_AFTER_HOME);
	w->transactions++;
	/* Its home writes are durable at the next transaction's first flush, or jw_close's. */
	return 0;
}

void jw_abort(struct jw *w)
{
	w->aborted = 1;
}

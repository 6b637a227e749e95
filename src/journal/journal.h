/* SPDX-License-Identifier: GPL-2.0 */
/*
 * An ext4 filesystem's internal jbd2 journal, opened for reading and for
 * the few writes recovery makes: where its blocks lie (the journal inode's
 * map), its validated superblock, and the checksums its blocks carry.
 * The device is reached under the metadata cache and fault injection
 * (io_under_faults, io/layer.h): journal blocks are never worth caching,
 * and what recovery writes home must not be hidden by a cached older copy.
 * (The writer, writer.h, writes under the cache but above the faults.)
 */
#ifndef RRFUSE_JOURNAL_JOURNAL_H
#define RRFUSE_JOURNAL_JOURNAL_H

#include <stdint.h>
#include <ext2fs/ext2fs.h>

#include "format.h"

struct jnl {
	ext2_filsys fs;
	io_channel dev;			/* the device, under the cache */
	unsigned int bsize;
	uint32_t maxlen;		/* journal blocks, superblock included */
	uint32_t first, last;		/* the log ring: [first, last) */
	uint32_t compat, incompat;	/* 0 for a v1 superblock */
	int csum;			/* csum v2 or v3: crc32c on every block */
	uint32_t seed;			/* crc32c of the journal UUID */
	unsigned int tag_size;		/* jf_tag_size() */
	unsigned int tail_size;		/* jf_tail at the end of descriptor/revoke blocks, or 0 */
	struct jnl_run {		/* journal blocks [logical, +len) at [physical, +len) */
		blk64_t logical, physical, len;
	} *runs, *by_physical;		/* the journal inode's map, by logical and by physical */
	size_t nruns;
	void *sbbuf;			/* the superblock's block */
	struct jf_superblock *sb;	/* in sbbuf */
};

/*
 * Open fs's internal journal: map its inode and check its superblock as
 * the kernel does before it recovers one.  0, or a negative errno with the
 * reason in msg.
 */
int jnl_open(ext2_filsys fs, struct jnl *j, char *msg, size_t msglen);
void jnl_close(struct jnl *j);

/* Read journal block blk (< maxlen) into buf (bsize bytes): 0 or -EIO. */
int jnl_read(struct jnl *j, uint32_t blk, void *buf);
/* The log block after blk, wrapping from last back to first. */
uint32_t jnl_next(const struct jnl *j, uint32_t blk, uint32_t count);
/* Is filesystem block b one of the journal's own? */
int jnl_holds(const struct jnl *j, blk64_t b);

/* Checksums under csum v2/v3 (true without them). */
int jnl_tail_csum_ok(const struct jnl *j, const void *block);
int jnl_commit_csum_ok(const struct jnl *j, const void *block);
/* A commit block whose end was lost: its header checksummed as if the rest were zeros. */
int jnl_commit_head_csum_ok(const struct jnl *j, const void *block);
int jnl_tag_csum_ok(const struct jnl *j, const void *tag, uint32_t sequence, const void *block);

/*
 * After a replay: the log is empty from transaction next_seq on
 * (s_start 0), the superblock written and flushed.
 */
int jnl_mark_empty(struct jnl *j, uint32_t next_seq);

/* Write journal blocks [blk, blk+count) from buf, by the runs they lie in: 0 or -EIO (no flush). */
int jnl_write(struct jnl *j, uint32_t blk, uint32_t count, const void *buf);
/* The superblock's checksum, under csum v2/v3, for what sbbuf holds now. */
void jnl_sb_csum_set(struct jnl *j);
/* The superblock as sbbuf holds it, checksummed and written (no flush): 0 or -EIO. */
int jnl_write_sb(struct jnl *j);

#endif

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The metadata block cache: an io_manager in the stack (layer.h).  Metadata reads
 * are served from memory once read; writes mark the block dirty and return;
 * dirty blocks reach the device in block order, merged, at a flush (the
 * commit), before any byte-addressed write (the superblock, which must not
 * name what is not on the device yet), and when dirty blocks crowd the
 * cache.
 */
#ifndef RRFUSE_IO_CACHE_H
#define RRFUSE_IO_CACHE_H

#include <stdint.h>
#include <ext2fs/ext2fs.h>

extern io_manager rr_cache_io_manager;

/*
 * The cache's bound when -o cache_mb is not given, MiB.  The io_option
 * "cache_mb=N" (ext2fs_open2) sets it: clean blocks are evicted least
 * recently used first; 0 switches the cache off, and every call below that
 * names a cache then finds none.
 */
#define IO_CACHE_MB_DEFAULT 32

/* The channel under the cache in ch's stack (past it, to the device), or ch when there is no cache. */
io_channel io_cache_lower(io_channel ch);

/*
 * A journal under the cache's write-back (src/journal/writer.h): while one
 * is set, every write-back is a transaction.  log() makes up to capacity
 * blocks durable in the journal, then the cache writes them home, without
 * a flush (the next transaction's first flush makes them durable: writer.h,
 * rule 4), and calls checkpointed(); a write-back larger than capacity is cut into
 * several transactions (no longer atomic: counted in st.split).  Nothing
 * reaches home otherwise: dirty blocks are never written back to make room
 * (the cache grows past its bound instead), and byte writes (the
 * superblock) update the cached block.  Write-back happens at a flush,
 * which the fs makes under its lock where no operation is half done; once
 * want blocks are dirty, io_cache_journal_full() says so, for the fs to
 * commit at its next such point.
 */
struct io_cache_journal {
	int (*log)(void *arg, size_t n, const blk64_t *blks, const unsigned char *const *data);
	int (*checkpointed)(void *arg);
	void (*abort)(void *arg);	/* the home writes failed: the journal must write nothing more */
	void (*too_big)(void *arg, size_t n);	/* n dirty blocks are about to be cut into transactions */
	void *arg;
	size_t capacity, want;
};
/* Set (j copied) or, j NULL, cleared: after a write-back, under the fs lock.  -1: ch has no cache. */
int io_cache_set_journal(io_channel ch, const struct io_cache_journal *j);
/* Are want blocks dirty under a journal?  Lock-free, for every rr_fs_end_op. */
int io_cache_journal_full(io_channel ch);
/*
 * Blocks [blk, blk+count) are free: their copies go, dirty or not, written
 * nowhere (a freed block's bytes are nobody's).  Under a journal this is
 * what keeps a transaction from logging a block it frees: the log then
 * never holds a copy that a replay could write over the block's next
 * owner (writer.h).  No-op without a cache.
 */
void io_cache_forget(io_channel ch, blk64_t blk, uint64_t count);

struct io_cache_stats {
	uint64_t hits, misses;		/* blocks read from memory, from the device */
	uint64_t writes, written;	/* write syscalls of dirty blocks, blocks they wrote */
	uint64_t blocks, dirty, max;	/* held now, of which dirty; the bound */
	uint64_t dropped;		/* blocks given up because file data overwrote them */
	uint64_t forgotten;		/* blocks given up because a commit freed them */
	uint64_t transactions;		/* journal transactions written back */
	uint64_t split;			/* write-backs too large for one transaction */
};
/* 0, or -1 when ch has no cache. */
int io_cache_stats(io_channel ch, struct io_cache_stats *st);

#endif

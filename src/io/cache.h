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

/* The cache's bound when -o cache_mb is not given, MiB. */
#define IO_CACHE_MB_DEFAULT 32

/* Set before ext2fs_open2(): the bound, MiB (clean blocks are evicted least recently used first). */
void io_cache_set_mb(unsigned int mb);

/* The channel under the cache in ch's stack (past it, to the device), or ch when there is no cache. */
io_channel io_cache_lower(io_channel ch);

struct io_cache_stats {
	uint64_t hits, misses;		/* blocks read from memory, from the device */
	uint64_t writes, written;	/* write syscalls of dirty blocks, blocks they wrote */
	uint64_t blocks, dirty, max;	/* held now, of which dirty; the bound */
	uint64_t dropped;		/* blocks given up because file data overwrote them */
};
/* 0, or -1 when ch has no cache. */
int io_cache_stats(io_channel ch, struct io_cache_stats *st);

#endif

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A file's delayed-allocation buffer: whole blocks of data written into its
 * holes that have no blocks on disk yet (ext4's delalloc, in the daemon).
 * Runs of consecutive blocks, sorted, never overlapping or touching: a
 * write next to a run joins it, so a file written in order is one run and
 * its flush asks the allocator for all of it at once.
 *
 * Pure memory: no locks (the owner's rw lock covers it), no I/O, no
 * allocator.  Only the data layer fills, reads and flushes it, so its
 * functions live here, in src/data/.  Unit-tested in tests/unit/test_dbuf.c.
 */
#ifndef RRFUSE_DBUF_H
#define RRFUSE_DBUF_H

#include <stddef.h>
#include <stdint.h>

/* The buffer's type is the core's: the in-memory inode holds one (dbuf_type.h says why). */
#include "dbuf_type.h"

/* Blocks of [lblk, lblk+n) that the buffer does not hold. */
uint64_t dbuf_missing(const struct rr_dbuf *d, uint64_t lblk, uint64_t n);
/* The longest prefix of [lblk, lblk+n) with at most `missing` blocks not held. */
uint64_t dbuf_prefix(const struct rr_dbuf *d, uint64_t lblk, uint64_t n, uint64_t missing);
/*
 * Copy len bytes at byte offset pos into the buffer; blocks it did not
 * hold are added, zero apart from the bytes copied.  0 or -ENOMEM (then
 * the buffer is unchanged).
 */
int dbuf_write(struct rr_dbuf *d, unsigned int bbits, uint64_t pos, const char *src, uint64_t len);
/* Fill dst with len bytes from pos: buffered bytes, zeros where nothing is buffered. */
void dbuf_read(const struct rr_dbuf *d, unsigned int bbits, uint64_t pos, char *dst, uint64_t len);
/*
 * Cut the buffer to a file of size bytes: drop the blocks past it, zero
 * the bytes past it in its last block.  Returns the blocks dropped.
 */
uint64_t dbuf_truncate(struct rr_dbuf *d, unsigned int bbits, uint64_t size);
/* Drop the first n blocks of run i (they reached the disk). */
void dbuf_consume(struct rr_dbuf *d, unsigned int bbits, uint32_t i, uint32_t n);
/* Drop everything; returns the blocks dropped. */
uint64_t dbuf_clear(struct rr_dbuf *d);

#endif

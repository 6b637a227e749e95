/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The delayed-allocation buffer's type, without its functions
 * (src/data/dbuf.h, the data layer's).  It is the core's because struct
 * rr_inode holds one in place (a pointer would cost every inode an
 * allocation and a check), and the core reads its block count: stat's
 * st_blocks (rr_idelayed).  The core calls none of its functions.
 */
#ifndef RRFUSE_DBUF_TYPE_H
#define RRFUSE_DBUF_TYPE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/*
 * A run's memory is page aligned (so a device opened O_DIRECT takes it
 * without a bounce) and zero where never written: a small run's on the
 * heap, a larger one its own anonymous mapping, grown by mremap without a
 * copy and back to the system when freed (src/data/dbuf.c says when).
 */
struct rr_drun {
	uint64_t lblk;
	uint32_t n;		/* blocks held */
	uint32_t hw;		/* blocks of buf ever used: past it the memory is still zero */
	size_t mapped;		/* bytes mapped at buf */
	char *buf;
};

struct rr_dbuf {
	struct rr_drun *v;
	uint32_t cnt;
	size_t cap;
	/* Blocks held; read without the owner's lock (st_blocks, limits). */
	atomic_uint_fast64_t blocks;
};

#endif

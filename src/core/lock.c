// SPDX-License-Identifier: GPL-2.0
/*
 * The fs lock: every libext2fs call and the state behind it (rrfs.h states
 * the lock order).  Dropping it settles what libext2fs's own allocations
 * chose.
 */
#include "rrfs.h"

void rr_fs_lock(struct rr_fs *rfs)
{
	pthread_mutex_lock(&rfs->lock);
}

void rr_fs_unlock(struct rr_fs *rfs)
{
	if (rfs->alloc)
		rr_alloc_settle(rfs->alloc);
	pthread_mutex_unlock(&rfs->lock);
}

/*
 * Every operation holds the fs lock from its first metadata change to its
 * last: here none is half done, so a journal's transaction that has grown
 * full is committed here (as jbd2 stops new handles when the log is
 * short of room), before the next operation can make it larger.
 */
void rr_fs_end_op(struct rr_fs *rfs)
{
	if (rfs->op_end) {
		/* The allocator's choices settled first: the commit's bitmaps hold them. */
		if (rfs->alloc)
			rr_alloc_settle(rfs->alloc);
		rfs->op_end(rfs);
	}
	rr_fs_unlock(rfs);
}

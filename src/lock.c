// SPDX-License-Identifier: GPL-2.0
/*
 * The fs lock: every libext2fs call and the state behind it (rrfs.h states
 * the lock order).  Taking it applies what the allocator did without it;
 * dropping it settles what libext2fs's own allocations chose.
 */
#include "rrfs.h"

/*
 * Every fs-locked section starts with the blocks that file data took
 * without the lock applied to libext2fs (so it sees them, and the maps it
 * writes never point at blocks its bitmaps call free), and ends with the
 * allocator's choices for libext2fs's own allocations settled.
 */
void rr_fs_lock(struct rr_fs *rfs)
{
	pthread_mutex_lock(&rfs->lock);
	if (rfs->alloc)
		rr_alloc_sync(rfs->alloc);
}

void rr_fs_unlock_nocommit(struct rr_fs *rfs)
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
void rr_fs_unlock(struct rr_fs *rfs)
{
	if (rfs->jw) {
		/* The allocator's choices settled first: the commit's bitmaps hold them. */
		if (rfs->alloc)
			rr_alloc_settle(rfs->alloc);
		rr_journal_maybe_commit(rfs);
	}
	rr_fs_unlock_nocommit(rfs);
}

void rr_fs_dirty(struct rr_fs *rfs)
{
	rfs->dirty = 1;
}

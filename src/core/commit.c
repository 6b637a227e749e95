// SPDX-License-Identifier: GPL-2.0
/*
 * Commits: what changed in memory reaches the image at the commit interval
 * (the commit thread), at fsync, at rrctl MNT sync, at remount read-only
 * and at unmount; the superblock's primary copy on its own when the orphan
 * list needs it first.
 */
#include "rrfs.h"
#include "cache.h"
#include "dev.h"
#include "writer.h"
#include "log.h"
#include "orphan.h"
#include "error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* At each commit: the MMP block is still ours (libext2fs rewrites it at most once a minute). */
static void mmp_check(struct rr_fs *rfs)
{
	ext2_filsys fs = rfs->fs;
	errcode_t err;

	if (!ext2fs_has_feature_mmp(fs->super) || (fs->flags & EXT2_FLAG_SKIP_MMP) ||
	    !(fs->flags & EXT2_FLAG_RW))
		return;
	err = ext2fs_mmp_update2(fs, 0);
	if (err) {
		rr_log(LOG_CRIT, "multi-mount protection: %s: another node writes this filesystem",
		       error_message(err));
		rr_fs_error(rfs, err, 0, fs->super->s_mmp_block);
	}
}

/*
 * One extent this commit frees: the cache forgets what of it is still
 * free, and the journal revokes what of that the live transaction logged.
 */
static void forget_freed(void *arg, uint64_t blk, uint64_t len)
{
	struct rr_fs *rfs = arg;
	ext2_filsys fs = rfs->fs;
	blk64_t end = blk + len - 1, s = blk, e;

	/* Metadata may have taken some of it again in this commit: those blocks stay (and are logged). */
	while (s <= end && !ext2fs_find_first_zero_block_bitmap2(fs->block_map, s, end, &s)) {
		if (ext2fs_find_first_set_block_bitmap2(fs->block_map, s, end, &e))
			e = end + 1;
		io_cache_forget(fs->io, s, e - s);
		if (rfs->jw)
			jw_revoke(rfs->jw, s, e - s);
		s = e;
	}
}

static int written_cmp(const void *a, const void *b)
{
	const struct rr_written_ino *x = a, *y = b;

	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/*
 * -o check, at commit under the fs lock (no operation half done): every
 * regular file written since the last keeps ext4's size invariant
 * (inode_written_past_size), but those on the orphan list and those that
 * broke it before they were written (a damaged image); abort() if not.
 * Here, not in inode.c, as it asks the orphan list too: inode.c, which
 * the orphan list calls, calls nothing of it.
 */
static void check_written(struct rr_fs *rfs)
{
	struct rr_written *w = &rfs->check_written;
	struct ext2_inode_large in;
	struct ext2fs_extent ex;
	size_t i;

	if (!w->n)
		return;
	qsort(w->v, w->n, sizeof(*w->v), written_cmp);
	for (i = 0; i < w->n; i++) {
		ext2_ino_t ino = w->v[i].ino;

		/* Each inode once, as its first write this interval found it. */
		if ((i && ino == w->v[i - 1].ino) || w->v[i].was_bad || inode_load(rfs, ino, &in))
			continue;
		/* A shrinking truncate or an unlink under way is on the orphan list: recovery finishes it. */
		if (!in.i_links_count || orphan_tracked(rfs, ino) || !inode_written_past_size(rfs, ino, &in, &ex))
			continue;
		rr_log(LOG_ERR, "check: inode %u: written extent %llu+%u->%llu passes its size on disk, %llu",
		       ino, (unsigned long long)ex.e_lblk, ex.e_len, (unsigned long long)ex.e_pblk,
		       (unsigned long long)EXT2_I_SIZE(&in));
		abort();
	}
	w->n = 0;
}

/* Under the fs lock: what libext2fs and the orphan list hold in memory, into the cache. */
static errcode_t commit_prepare(struct rr_fs *rfs)
{
	ext2_filsys fs = rfs->fs;
	errcode_t err = 0;

	if (rfs->opts.check)
		check_written(rfs);
	rr_error_commit(rfs);
	orphan_commit(rfs);
	mmp_check(rfs);
	/* Blocks freed until now are free again once this commit is on disk. */
	if (rfs->alloc)
		rr_alloc_commit_begin(rfs->alloc);
	if (fs->flags & (EXT2_FLAG_DIRTY | EXT2_FLAG_BB_DIRTY | EXT2_FLAG_IB_DIRTY))
		err = rr_fs_flush(rfs, EXT2_FLAG_FLUSH_NO_SYNC);
	/* What this commit frees is written nowhere, nor logged (io_cache_forget). */
	if (rfs->alloc)
		rr_alloc_committing_each(rfs->alloc, forget_freed, rfs);
	return err;
}

/*
 * Journaled, the whole commit is made under the fs lock: the transaction
 * is every block dirty now, and only under the lock is no operation half
 * done (writer.h's rule 1 holds for the same reason: every data write an
 * operation waited for has returned).  Unjournaled, the flush is made
 * after the lock is dropped (rr_fs_commit).
 */
int rr_fs_commit_locked(struct rr_fs *rfs, int sync)
{
	int ret = rr_err(rfs, commit_prepare(rfs));

	if (ret || !rfs->jw || !sync)
		return ret;
	ret = rr_err(rfs, io_channel_flush(rfs->fs->io));
	if (!ret && rfs->alloc)
		rr_alloc_commit_end(rfs->alloc);
	return ret;
}

int rr_fs_commit(struct rr_fs *rfs, int sync)
{
	int ret;

	/* After errors=remount-ro, what was done before the error still reaches the image. */
	if (rfs->ro && !rfs->mounted)
		return 0;
	rr_fs_lock(rfs);
	if (rfs->jw) {
		/* Journaled, always a transaction: a later flush outside the lock could catch an operation halfway. */
		ret = rr_fs_commit_locked(rfs, 1);
		rr_fs_unlock(rfs);
		return ret;
	}
	ret = rr_fs_commit_locked(rfs, sync);
	rr_fs_end_op(rfs);
	if (ret)
		return ret;
	if (sync) {
		ret = rr_err(rfs, io_channel_flush(rfs->fs->io));
		if (ret)
			return ret;
		if (rfs->alloc) {
			rr_fs_lock(rfs);
			rr_alloc_commit_end(rfs->alloc);
			rr_fs_end_op(rfs);
		}
	}
	return 0;
}

/*
 * Delayed data gets its blocks and is written (all of it, or what is due),
 * then one commit (a transaction when journaled) and a device flush: the
 * commit thread's periodic work, and with all of it rrctl's sync
 * (RRCTL_SYNC).  The commit runs even when delayed data failed (what did
 * get written is mapped); the first error is returned.  Fs lock not held.
 */
static int sync_delayed(struct rr_fs *rfs, enum rr_flush how)
{
	int ret = rr_fs_flush_delayed(rfs, how), cret;

	if (ret)
		rr_log(LOG_ERR, "writing delayed data failed: %s", strerror(-ret));
	cret = rr_fs_commit(rfs, 1);
	if (cret)
		rr_log(LOG_ERR, "commit failed: %s", strerror(-cret));
	return ret ? ret : cret;
}

int rr_fs_sync(struct rr_fs *rfs)
{
	return sync_delayed(rfs, RR_FLUSH_SYNC);
}

/* The allocator's way to a commit, when file data finds free space only in blocks freed since the last. */
int rr_fs_commit_for_alloc(void *rfs)
{
	return rr_fs_commit(rfs, 1);
}

/*
 * The commit interval is the journal's (jbd2's commit timer): a commit
 * when it has passed since the last, whatever was written back between.
 * A kick (rr_fs_kick_writeback) is the flusher's: due data gets its blocks
 * and goes out, and the commit waits for its time, so that blocks freed
 * meanwhile stay unusable as long as on the kernel (they are free again
 * only after the commit that frees them).
 */
static void *commit_main(void *arg)
{
	struct rr_fs *rfs = arg;
	struct timespec due, now;

	pthread_mutex_lock(&rfs->commit_lock);
	clock_gettime(CLOCK_REALTIME, &due);
	due.tv_sec += rfs->opts.commit_secs;
	while (!rfs->commit_stop) {
		pthread_cond_timedwait(&rfs->commit_cond, &rfs->commit_lock, &due);
		if (rfs->commit_stop)
			break;
		pthread_mutex_unlock(&rfs->commit_lock);
		clock_gettime(CLOCK_REALTIME, &now);
		if (rr_ts_before(&now, &due)) {
			int ret = rr_fs_flush_delayed(rfs, RR_FLUSH_DUE);

			if (ret)
				rr_log(LOG_ERR, "writing delayed data failed: %s", strerror(-ret));
		} else {
			/* Periodic writeback: delayed data that is due gets its blocks, then the metadata goes out. */
			sync_delayed(rfs, RR_FLUSH_DUE);
			clock_gettime(CLOCK_REALTIME, &due);
			due.tv_sec += rfs->opts.commit_secs;
		}
		pthread_mutex_lock(&rfs->commit_lock);
	}
	pthread_mutex_unlock(&rfs->commit_lock);
	return NULL;
}

void rr_fs_kick_writeback(struct rr_fs *rfs)
{
	if (!rfs->commit_running)
		return;
	pthread_mutex_lock(&rfs->commit_lock);
	pthread_cond_signal(&rfs->commit_cond);
	pthread_mutex_unlock(&rfs->commit_lock);
}

void rr_fs_start_commit_thread(struct rr_fs *rfs)
{
	if (rfs->ro || !rfs->opts.commit_secs)
		return;
	if (pthread_create(&rfs->commit_thread, NULL, commit_main, rfs) == 0)
		rfs->commit_running = 1;
	else
		rr_log(LOG_ERR, "cannot start the commit thread: metadata reaches the image at fsync and unmount only");
}

// SPDX-License-Identifier: GPL-2.0
/*
 * Commits as jbd2 transactions (src/journal/writer.h): the journal writer
 * is set under the metadata cache's write-back while the image is mounted
 * read-write, as the kernel's ext4 loads its journal.  needs_recovery is
 * set in the superblock and on disk before the first transaction (so a
 * crash after any commit block has the next mount replay it) and cleared
 * only after the last one is checkpointed and the log said empty, as
 * ext4's unmount (and remount read-only) clears it.
 */
#include "rrfs.h"
#include "cache.h"
#include "writer.h"
#include "log.h"

#include <errno.h>
#include <string.h>

/*
 * A transaction is committed once the cache holds this share (1/N) of its
 * capacity dirty: what the commit adds (bitmaps, descriptors, the
 * superblock) and the operation that crossed the mark must still fit, as
 * jbd2 keeps a transaction to a quarter of the journal.
 */
#define JOURNAL_WANT_DIV 4

static int cb_log(void *arg, size_t n, const blk64_t *blks, const unsigned char *const *data)
{
	return jw_log(arg, n, blks, data);
}

static int cb_checkpointed(void *arg)
{
	return jw_checkpointed(arg);
}

static void cb_abort(void *arg)
{
	rr_log(LOG_CRIT, "journal: the home writes of a committed transaction failed: the journal is aborted, "
	       "the next mount replays it");
	jw_abort(arg);
}

static void cb_too_big(void *arg, size_t n)
{
	rr_log(LOG_WARNING, "journal: a commit of %zu blocks did not fit in one transaction of %zu: "
	       "written as several, not atomic across a crash", n, jw_capacity(arg));
}

/* needs_recovery set or cleared, and the superblock written home and flushed (no journal set). */
static int set_recover(struct rr_fs *rfs, int on)
{
	ext2_filsys fs = rfs->fs;
	int ret;

	rr_fs_lock(rfs);
	if (on)
		ext2fs_set_feature_journal_needs_recovery(fs->super);
	else
		ext2fs_clear_feature_journal_needs_recovery(fs->super);
	ext2fs_mark_super_dirty(fs);
	ret = rr_fs_commit_locked(rfs, 0);
	rr_fs_unlock(rfs);
	if (!ret)
		ret = rr_err(rfs, io_channel_flush(fs->io));
	return ret;
}

/* rr_fs.op_end: a transaction that has grown full is committed. */
static void commit_if_full(struct rr_fs *rfs)
{
	int ret;

	if (!io_cache_journal_full(rfs->fs->io))
		return;
	ret = rr_fs_commit_locked(rfs, 1);
	if (ret)
		rr_log(LOG_ERR, "journal: commit of a full transaction failed: %s", strerror(-ret));
}

int rr_journal_start(struct rr_fs *rfs)
{
	ext2_filsys fs = rfs->fs;
	struct io_cache_journal cj;
	struct io_cache_stats st;
	struct jw *w;
	char msg[160];
	int ret;

	if (!rfs->opts.journal || rfs->ro || rfs->jw || !ext2fs_has_feature_journal(fs->super))
		return 0;
	if (!fs->super->s_journal_inum) {
		rr_log(LOG_WARNING, "journal: an external journal is not written: commits go straight home");
		return 0;
	}
	if (io_cache_stats(fs->io, &st)) {
		rr_log(LOG_WARNING, "journal: not written without the metadata cache (cache_mb=0): "
		       "commits go straight home");
		return 0;
	}
	ret = jw_open(fs, io_cache_lower(fs->io), &w, msg, sizeof(msg));
	if (ret) {
		rr_log(LOG_WARNING, "journal: not written: %s: commits go straight home", msg);
		return 0;
	}
	/* On disk before the first transaction: a crash after its commit block is replayed. */
	ret = set_recover(rfs, 1);
	if (ret) {
		jw_close(w);
		return ret;
	}
	cj = (struct io_cache_journal){
		.log = cb_log, .checkpointed = cb_checkpointed, .abort = cb_abort,
		.too_big = cb_too_big, .arg = w,
		.capacity = jw_capacity(w), .want = jw_capacity(w) / JOURNAL_WANT_DIV,
	};
	/* Dirty blocks fill the cache past its own mark first: the cache's bound then rules. */
	if (cj.want > st.max / 2)
		cj.want = st.max / 2;
	rr_fs_lock(rfs);
	io_cache_set_journal(fs->io, &cj);
	rfs->jw = w;
	rfs->op_end = commit_if_full;
	rr_fs_unlock(rfs);
	{
		uint64_t n;
		uint32_t next;

		jw_stats(w, &n, &next);
		rr_log(LOG_INFO, "journal: commits are transactions of up to %zu blocks, from id %u on",
		       cj.capacity, next);
	}
	return 0;
}

int rr_journal_stop(struct rr_fs *rfs)
{
	struct jw *w = rfs->jw;
	int ret;

	if (!w)
		return 0;
	/* The last transaction, checkpointed: the log is empty. */
	rr_fs_lock(rfs);
	ret = rr_fs_commit_locked(rfs, 1);
	io_cache_set_journal(rfs->fs->io, NULL);
	rfs->jw = NULL;
	rfs->op_end = NULL;
	rr_fs_unlock(rfs);
	if (jw_close(w) && !ret)
		ret = -EIO;
	/* Cleared only over an empty log, made durable by jw_close. */
	if (!ret)
		ret = set_recover(rfs, 0);
	return ret;
}

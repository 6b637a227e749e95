/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The journal writer: each commit of rrfuse is one jbd2 transaction in the
 * image's internal journal, in the format the kernel's ext4 writes (the
 * journal's features set at start as ext4's mount sets them), so that the
 * kernel, e2fsck and rrfuse (recover.c) all replay it.
 *
 * The scheme keeps at most one committed transaction in the log.  Once a
 * transaction's commit block is durable its blocks are written home (by
 * the metadata cache, io/cache.c, which calls jw_log and jw_checkpointed
 * around its write-back) and not flushed: the transaction stays in the log
 * and the next one is written after it.  That one's first flush makes the
 * home writes durable; only then does the journal superblock name the new
 * transaction as the log's start, and the old one is gone from the log.  A
 * commit so costs two flushes, as the kernel's (the one before the commit
 * block, the one after it).  Transactions follow each other round the
 * ring, wrapping from its last block to its first; only when the next one
 * would reach the live one (a transaction near the log's size) is the log
 * emptied first (a flush, the superblock, a flush).
 * A replay applies the transaction the superblock names and the one
 * after it, if committed: T alone once T's second flush has returned, T-1
 * and T only if T's commit block reached the device before the superblock
 * naming T, so before that flush returned.  A block freed in T is reused
 * only after T commits (the allocator's rule), and no transaction holds a
 * copy of a block it frees (the commit has the cache forget them:
 * io_cache_forget, src/core/commit.c).  So no replay writes a logged copy over
 * a block's next owner: T-1's copies are of blocks not freed before T
 * committed, T's of blocks it did not free.  T still revokes the blocks of
 * T-1 that it frees (jw_revoke), as jbd2 revokes freed metadata: a replay
 * of both then skips them, whatever the order of the writes above.
 * Transaction ids only grow, from the journal superblock's
 * s_sequence at start, across mounts; jw_close empties the log.
 *
 * The ordering rules (data=ordered), each kept where it is named:
 *   1. file data before the commit block: the data path's writes have
 *      returned before the commit (under the fs lock) starts, and the
 *      flush after the log blocks makes them durable with them (jw_log);
 *   2. the log blocks before the commit block: a flush between them
 *      (jw_log); over an empty log the superblock naming them goes with
 *      them, behind a live transaction after that flush (rules 4 and 5);
 *   3. the commit block durable before any home write: a flush after it
 *      (jw_log), home writes only after jw_log returned 0 (cache.c);
 *   4. home writes durable before the log no longer holds their
 *      transaction: the next transaction's first flush comes before the
 *      superblock naming it (jw_log), and jw_close flushes before it says
 *      the log is empty;
 *   5. a superblock naming a transaction may be durable before that
 *      transaction's commit block: a log whose first transaction has no
 *      commit block replays nothing, and rule 4 put what came before home.
 */
#ifndef RRFUSE_JOURNAL_WRITER_H
#define RRFUSE_JOURNAL_WRITER_H

#include <stddef.h>
#include <ext2fs/ext2fs.h>

struct jw;

/*
 * Open fs's internal journal for writing through dev (the channel under
 * the metadata cache): it must be empty (replayed already); its features
 * are set as the kernel's ext4 sets them at mount (csum v3 under
 * metadata_csum, none otherwise; 64-bit tags on a 64bit filesystem) and
 * its superblock written and flushed.  RRFUSE_JOURNAL_CRASH, read here,
 * names a point at which the daemon kills itself (tests only): "log",
 * "commit" or "home", optionally ":N" for the Nth transaction from here (the
 * mount's own superblock update is the first).
 * 0, or a negative errno with the reason in msg.
 */
int jw_open(ext2_filsys fs, io_channel dev, struct jw **out, char *msg, size_t msglen);
/* The superblock's last update made durable; w freed.  0 or -EIO. */
int jw_close(struct jw *w);

/* Metadata blocks one transaction holds (descriptors and commit block aside). */
size_t jw_capacity(const struct jw *w);

/*
 * One transaction of n (<= jw_capacity) blocks: blks[i]'s new content is
 * data[i].  Returns once the commit block is durable: 0, or -EIO (nothing
 * may then be written home; the writer refuses every later transaction,
 * as jbd2 aborts a journal).
 */
int jw_log(struct jw *w, size_t n, const blk64_t *blks, const unsigned char *const *data);
/*
 * Blocks [blk, blk+len) are freed by the transaction being built (fs
 * lock held, before its jw_log): those the live transaction logged get a
 * revoke record in it.
 */
void jw_revoke(struct jw *w, blk64_t blk, uint64_t len);
/* The last transaction's blocks are written home (durable at the next transaction's first flush, or jw_close's). */
int jw_checkpointed(struct jw *w);
/* The home writes failed: the log keeps the only good copy, so nothing more is written. */
void jw_abort(struct jw *w);

/* Transactions committed since jw_open, and the next one's id. */
void jw_stats(const struct jw *w, uint64_t *transactions, uint32_t *next_seq);

#endif

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rrfuse's in-memory filesystem state, shared by the daemon's modules.
 *
 * Locks, in the order they are taken (never the reverse):
 *
 *   delayed.writeback  one write-back of all files' delayed data at a time
 *                   (data_flush_all): a sync waits for one under way, a
 *                   writer short of free space skips it (skip_if_busy).
 *                   Taken with no other lock held.
 *   rr_inode.rw     per inode; shared for reads and overwrites of mapped
 *                   blocks, exclusive while the block map or i_size changes.
 *                   Two inodes' rw locks are never held at once.
 *   rr_fs.lock      the fs lock: every libext2fs call and the state behind
 *                   it (bitmaps, group descriptors, superblock, inode table
 *                   blocks, directories, xattrs).  Held for short sections;
 *                   file data never moves under it, and file data's blocks
 *                   are allocated without it (the allocator's own locks,
 *                   include/rrfuse/alloc.h), reaching libext2fs when the
 *                   lock is next taken (rr_fs_lock).
 *   the allocator's locks (allocators/mballoc.c states them): PA owner
 *                   lock -> group lock, never two of a kind (the scan
 *                   lists are bitmaps changed atomically under the group lock).
 *                   Taken inside the fs lock, or without it by a data
 *                   request (RR_ALLOC_NOLOCK), which then takes the fs lock
 *                   only while it holds none of them.  A discard issued
 *                   under a group lock goes down the I/O stack (cache.lock).
 *   orphans.lock    the in-memory orphan list and orphan-file copies
 *                   (src/core/orphan.c); taken inside the fs lock only.
 *   itab.lock       the in-memory inode table, lookup and open counts.  A
 *                   leaf: nothing is taken while it is held.
 *   delayed.lock    the list of inodes with delayed data (data.c); only
 *                   itab.lock is taken inside it.
 *   cache.lock      the metadata cache (src/io/cache.c), taken after the fs
 *                   lock; below it only the write recorder's lock
 *                   (src/io/record.c, tests).  The journal writer has no
 *                   lock: it runs under this one, inside a commit that
 *                   holds the fs lock (src/core/journaling.c).
 *
 * Leaves, taken with any of the above held and holding nothing inside:
 * the error record's lock (rr_fs.errs, src/core/error.h), the block trace's (src/io/trace.c),
 * the allocation trace's (allocators/mb_trace.c), the plug-in list's
 * (allocators/mb_plugin.c), the delayed-data buffer pool's (src/data/dbuf.c),
 * and the device's waiting data run's (src/io/dev.c pend_lock: metadata
 * writes take it inside cache.lock, data writes alone; inside it only the
 * write that empties the run).  commit_lock guards only the
 * commit thread's sleep; it is dropped before the thread commits.  This
 * list is the whole order: a new lock gets its line here.
 */
#ifndef RRFUSE_RRFS_H
#define RRFUSE_RRFS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <ext2fs/ext2fs.h>
#include "bitmaps.h"
#include "ialloc.h"

#include "rrfuse/alloc.h"
#include "dbuf_type.h"
#include "orphan.h"
#include "error.h"

#define RR_CACHELINE 64

/* One extent of a file's block map, cached in memory. */
struct rr_ext {
	uint32_t lblk;
	uint32_t len;
	uint64_t pblk;		/* 0 in a lookup result means a hole */
	uint32_t uninit;
};

struct rr_emap {
	struct rr_ext *v;
	uint32_t n;
	size_t cap;
};

struct rr_inode {
	ext2_ino_t ino;
	struct rr_inode *hnext;		/* itab hash chain, under itab.lock */
	uint64_t nlookup;		/* kernel references, under itab.lock */
	uint32_t nopen;			/* open file handles, under itab.lock */
	uint32_t pins;			/* requests using it now, under itab.lock */
	atomic_uint nwriters;		/* handles open for writing: the last close drops preallocations */
	pthread_rwlock_t rw;
	/* Below: read under rw shared, written under rw exclusive + fs lock. */
	atomic_int emap_loaded;		/* emap valid; loading takes the fs lock */
	struct rr_emap emap;
	/*
	 * i_size as read and written (stat, read, the kernel see it); stored
	 * with __atomic_store_n, as stat reads it without rw (rr_idelayed).
	 */
	uint64_t size;
	/*
	 * i_size on disk: ext4's i_disksize, at most size.  Data past it is
	 * still buffered (delayed allocation), and a commit meanwhile (another
	 * file's fsync, the tick) must not make a crash show it as a hole.
	 * Blocks that become written raise it to their end in the same inode
	 * write (data.c's size_for_written), so no written block lies past it
	 * on disk; it may pass buffered data below them, as ext4's does.  It
	 * equals size whenever nothing is buffered.
	 */
	uint64_t disksize;
	int extents;			/* EXT4_EXTENTS_FL: otherwise block-mapped */
	/* Delayed allocation: data in holes, blocks promised, none chosen yet (under rw). */
	struct rr_dbuf dbuf;
	/* Outgrew the buffer while open: writes allocate at once until the last writer goes. */
	atomic_int streaming;
	/*
	 * -o delalloc=hold: the buffer outlived the last close, as dirty pages
	 * outlive it in the kernel's page cache; the in-memory inode stays
	 * (rr_itab_release_locked) until its data is written or, unlinked,
	 * may go with it.  dirtied: CLOCK_MONOTONIC seconds when the buffer
	 * last started to hold data (the kernel's inode->dirtied_when).
	 */
	atomic_int held;
	atomic_int_fast64_t dirtied;
	/*
	 * The kernel asks for security.capability before every write() (to
	 * drop privileges), and every create in a directory looks for its
	 * default ACL; both are almost never there.  caps_absent (dacl_absent)
	 * == xattr_gen + 1 records "absent" as of the current attribute set.
	 */
	atomic_uint xattr_gen;
	atomic_uint caps_absent;
	atomic_uint dacl_absent;
	/*
	 * A page the kernel wrote back was refused (ENOSPC, or EFBIG past the
	 * largest file: FUSE has no s_maxbytes to stop the write() itself):
	 * its data is lost, and the kernel would report that only at fsync or
	 * close.  The next write() revalidates the file's attributes with a
	 * GETATTR carrying the open file, and fails with that reply's error,
	 * stored here (0: none).
	 */
	atomic_int lost_err;
	/*
	 * relatime: a read before this realtime second leaves the access time
	 * alone (it is newer than mtime and ctime, and not a day old); 0: look.
	 * Every write of the inode sets it to 0 (inode_write).
	 */
	_Atomic int64_t atime_quiet;
	/* i_flags & RR_FL_GUARD, for the data path; changed under the fs lock. */
	atomic_uint guard;
	/*
	 * A directory's ext4 i_last_alloc_group, which the kernel keeps in
	 * memory only (src/core/ialloc.c): 1 + the group chosen for its last new
	 * inode, 0 none since loaded.  Under the fs lock and itab.lock.
	 */
	uint32_t ialloc_last;
	/*
	 * A directory's name a lookup found absent, "" none (a longer name is
	 * not kept): the kernel looks up every name before it creates it, and
	 * the create that follows need not look again.  Any entry added to
	 * the directory clears it.  Under the fs lock.
	 */
	char absent[32];
};

/*
 * chattr +i and +a: the VFS enforces IS_IMMUTABLE and IS_APPEND for ext4,
 * but a FUSE inode has no such flags, so rrfuse enforces them itself.
 */
#define RR_FL_GUARD (EXT2_IMMUTABLE_FL | EXT2_APPEND_FL)

struct rr_itab {
	pthread_mutex_t lock;
	struct rr_inode **hash;
	size_t nbuckets, count;
};

/*
 * -o delalloc (the default, also delalloc=hold): written data held as the
 * kernel's page cache holds dirty pages; -o delalloc=close: rrfuse's older
 * model, written at the last close (src/data/data.c).
 */
#define RR_DELALLOC_CLOSE 1
#define RR_DELALLOC_HOLD 2

struct rr_opts {
	unsigned int commit_secs;
	int ro;
	int norecovery;
	int writeback;		/* kernel writeback cache */
	int splice;		/* reads spliced from the image where they can be (-o nosplice: 0) */
	int delalloc;		/* delay allocating the kernel's written-back pages: 0 (-o nodelalloc), RR_DELALLOC_* */
	int direct;		/* O_DIRECT data transfers: 1, 0, -1 = on block devices */
	int debug;
	int single;		/* -s: one thread serves every request */
	int check;		/* -o check: verify in-memory state against disk after changes */
	int journal;		/* commits are jbd2 transactions in the image's journal (-o nojournal: not) */
	int errors;		/* errors=: EXT2_ERRORS_*, 0 = as the superblock says */
	int atime;		/* RR_ATIME_RELATIME (default), _NOATIME, _STRICT: what a read does to atime */
	int diratime;		/* 0 (-o nodiratime): a directory's listing leaves its atime alone */
	int io_uring;		/* -o io_uring: FUSE requests over io_uring where the kernel offers it */
	unsigned int cache_mb;	/* the metadata cache's bound, MiB (-o cache_mb=; 0: no cache) */
	int fuseblk;		/* the kernel claims the block device at mount: not opened O_EXCL */
	struct io_trace *trace;	/* -o trace=: the block trace the device writes (src/io/trace.h), or NULL */
	struct rr_alloc_tunables alloc;	/* allocator tunables (-o max_prealloc_kb=, mb_*=) */
};

/* -o check: the inodes written since the last commit, each as it was before (inode.c, commit.c). */
struct rr_written {
	struct rr_written_ino {
		ext2_ino_t ino;
		uint32_t seq;		/* order of the writes: the first of an inode says how it was */
		int was_bad;		/* it broke the size invariant before (a damaged image's, not ours) */
	} *v;
	size_t n, cap;
};

struct rr_fs;
struct jw;
struct io_trace;
struct rr_ring_stats;

/* What a flush of all files' delayed data writes back: the kernel's writeback work it stands for. */
enum rr_flush {
	/* All of it, each file whole: writeback_inodes_sb's tagged work (unmount, remount, short free space). */
	RR_FLUSH_ALL,
	/* What is due, the files taking turns: the flusher's periodic and background work (the commit tick). */
	RR_FLUSH_DUE,
	/* All of it, the files taking turns: sync(1) wakes the flusher for all dirty data (rrctl sync). */
	RR_FLUSH_SYNC,
};

/*
 * What the core (mount.c, commit.c, inode.c, orphan_recover.c) asks of the data
 * layer above it, without naming it: src/data/data.c fills these in
 * (data_hooks, declared in src/data/data.h) and main.c hands them to
 * rr_fs_open.  NULL: no data layer (the unit tests).
 */
struct rr_data_hooks {
	/* Delayed data to its blocks (enum rr_flush says which and how). */
	int (*flush_all)(struct rr_fs *rfs, enum rr_flush how);
	/* An in-memory inode goes: its delayed data and cached block map go with it. */
	void (*evict)(struct rr_fs *rfs, struct rr_inode *ri);
	/* Cut a file to size bytes (the orphan cleanup finishing a truncate a crash left). */
	int (*truncate)(struct rr_fs *rfs, struct rr_inode *ri, uint64_t size);
};

struct rr_fs {
	/* Read-mostly after mount: geometry, options, handles. */
	const struct rr_data_hooks *hooks;
	ext2_filsys fs;
	io_channel dev;		/* the top of the I/O stack, for the data path (src/io/dev.h: io_data_*) */
	unsigned int bsize;
	unsigned int bbits;
	atomic_int ro;		/* set at mount; errors=remount-ro sets it later */
	struct rr_opts opts;
	struct rr_alloc *alloc;
	const char *device;
	void *se;		/* the FUSE session, for notifications */
	uint16_t orig_state;	/* s_state at mount, restored at a clean unmount */
	int mounted;		/* the image says "in use": a clean unmount must say otherwise */
	int ro_cleanup;		/* ro, but writable until the mount has finished orphans */
	uint64_t overhead;	/* blocks of static metadata, left out of statfs f_blocks */
	char *utab;		/* mount point with a utab entry of ours (src/fuse/utab.c), or NULL */
	int wbcache;		/* the kernel's writeback cache is on (set at INIT) */
	int killpriv_v2;	/* rrfuse drops set-id bits itself (set at INIT: src/fuse/channel.c) */
	int splice;		/* reads are spliced (set at INIT) */
	const _Atomic uint64_t *requests;	/* [RRCTL_NREQ] by opcode (src/fuse/channel.c), or NULL */
	const _Atomic uint64_t *request_ns;	/* [RRCTL_NREQ] time to the reply, likewise */
	const struct rr_ring_stats *ring;	/* requests over io_uring (lib/uring.c), or NULL */
	struct jw *jw;		/* the journal writer (src/core/journaling.c), set and cleared under the fs lock */
	/*
	 * Called by rr_fs_end_op() under the fs lock, where no operation is
	 * half done: the journal's trigger (commit a full transaction), set
	 * and cleared with jw.  The layer above passes it down, so that the
	 * lock calls nothing above it.
	 */
	void (*op_end)(struct rr_fs *rfs);
	int closed;		/* rr_fs_close ran at DESTROY; its result: */
	int close_ret;

	/* Written under the fs lock: its own cache lines. */
	pthread_mutex_t lock __attribute__((aligned(RR_CACHELINE)));
	struct rr_bitmaps bitmaps;	/* what the image's bitmap blocks hold (bitmaps.c) */
	struct ialloc_counts icounts;	/* the kernel's counts as its inode allocator sees them */
	uint64_t ns_version;	/* bumped by every directory change */
	char *dirblk[2];	/* room for two directory blocks, htree.c's lookups and adds (malloc'd once) */
	struct rr_written check_written;	/* -o check: regular files written since the last commit (inode.c, commit.c) */

	/* Inode table: written on every lookup/forget. */
	struct rr_itab itab __attribute__((aligned(RR_CACHELINE)));

	/* Commit thread. */
	pthread_t commit_thread __attribute__((aligned(RR_CACHELINE)));
	pthread_mutex_t commit_lock;
	pthread_cond_t commit_cond;
	int commit_stop;
	int commit_running;

	/*
	 * Inodes that may hold delayed data, for the commit thread's flush:
	 * numbers, not pointers (an inode found again through the table is
	 * pinned; one that went away has nothing left to flush).
	 */
	struct {
		pthread_mutex_t lock;
		ext2_ino_t *inos;
		size_t n, cap;
		size_t taken;			/* off the list in a write-back under way (under lock) */
		atomic_uint_fast64_t blocks;	/* held by all inodes */
		atomic_uint_fast64_t peak;	/* the most blocks held at once since the mount */
		pthread_mutex_t writeback;	/* one data_flush_all at a time; see the lock order */
	} delayed __attribute__((aligned(RR_CACHELINE)));

	/* Orphan list: written by unlink, final release and truncate only. */
	struct rr_orphans orphans __attribute__((aligned(RR_CACHELINE)));

	/* Errors met, until a commit writes them into the superblock (error.h); its own lock. */
	struct rr_errors errs;
};

/* errmap.c */
/*
 * libext2fs's error code, met in rfs->fs, as a negative errno; corruption
 * is a filesystem error of the mount (error.h), recorded with the caller's
 * function and line (and the inode, with rr_err_ino) as the kernel's
 * ext4_error records them.
 */
int rr_err_at(struct rr_fs *rfs, errcode_t err, ext2_ino_t ino, const char *func, unsigned int line);
#define rr_err(rfs, err) rr_err_at((rfs), (err), 0, __func__, __LINE__)
#define rr_err_ino(rfs, err, ino) rr_err_at((rfs), (err), (ino), __func__, __LINE__)

/* mount.c */
int rr_fs_open(struct rr_fs *rfs, const char *device, const struct rr_opts *opts,
	       const struct rr_data_hooks *hooks, char *msg, size_t msglen);
int rr_fs_mark_mounted(struct rr_fs *rfs);
int rr_fs_mark_in_use(struct rr_fs *rfs, int new_mount);
int rr_fs_close(struct rr_fs *rfs);
int rr_fs_remount(struct rr_fs *rfs, int ro, char *err, size_t errlen);
struct statvfs;
/* STATFS: sizes and what is free of blocks and inodes. */
void rr_fs_statfs(struct rr_fs *rfs, struct statvfs *st);

/* super.c */
int rr_fs_write_super(struct rr_fs *rfs);
/* libext2fs's flush (superblock, descriptors), the changed bitmaps first.  Fs lock held. */
errcode_t rr_fs_flush(struct rr_fs *rfs, int flags);

/* commit.c */
int rr_fs_commit_for_alloc(void *rfs);
int rr_fs_commit(struct rr_fs *rfs, int sync);
/* The commit's work under the fs lock (held); journaled, the transaction too. */
int rr_fs_commit_locked(struct rr_fs *rfs, int sync);
/* Delayed data written, one commit, the device flushed (rrctl sync).  Fs lock not held. */
int rr_fs_sync(struct rr_fs *rfs);
void rr_fs_start_commit_thread(struct rr_fs *rfs);
/* The flusher's work now (the data layer holds more than it should): due data out, no commit. */
void rr_fs_kick_writeback(struct rr_fs *rfs);

/* a is earlier than b. */
static inline int rr_ts_before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

static inline int rr_fs_flush_delayed(struct rr_fs *rfs, enum rr_flush how)
{
	return rfs->hooks && rfs->hooks->flush_all ? rfs->hooks->flush_all(rfs, how) : 0;
}

/*
 * journaling.c: commits as jbd2 transactions.  start: once the image is
 * marked in use (needs_recovery set and on disk first); stop: after the
 * final commit (needs_recovery cleared, on disk).  Fs lock not held.
 */
int rr_journal_start(struct rr_fs *rfs);
int rr_journal_stop(struct rr_fs *rfs);

/* lock.c */
void rr_fs_lock(struct rr_fs *rfs);
/*
 * The end of a whole operation (the fs lock taken at its start): runs
 * rr_fs.op_end (journaled: commits the transaction if it has grown full),
 * then drops the lock.
 */
void rr_fs_end_op(struct rr_fs *rfs);
/* Drops the fs lock and commits nothing: in a commit, or inside the allocator's own sections. */
void rr_fs_unlock(struct rr_fs *rfs);

/* inode.c */
int rr_itab_init(struct rr_itab *t);
/* Under itab.lock: ino's in-memory inode or NULL; unhash ri if nothing holds it (then 1: free it). */
struct rr_inode *rr_itab_find_locked(struct rr_itab *t, ext2_ino_t ino);
int rr_itab_release_locked(struct rr_itab *t, struct rr_inode *ri);
/* An unhashed in-memory inode goes (the data layer's evict hook first). */
void rr_inode_free(struct rr_fs *rfs, struct rr_inode *ri);
void inode_set_rdev(struct ext2_inode_large *in, dev_t dev);
/* inode_life.c: the rest of the table's calls, and inode_new, inode_free_*. */
void rr_itab_empty(struct rr_fs *rfs);
void rr_itab_destroy(struct rr_fs *rfs);
struct rr_inode *rr_iget(struct rr_fs *rfs, ext2_ino_t ino);
void rr_iopen(struct rr_fs *rfs, struct rr_inode *ri);
struct rr_inode *rr_ifind(struct rr_fs *rfs, ext2_ino_t ino);
struct rr_inode *rr_ipin(struct rr_fs *rfs, ext2_ino_t ino);
void rr_iunpin(struct rr_fs *rfs, struct rr_inode *ri);
void rr_ixattr_changed(struct rr_fs *rfs, ext2_ino_t ino);
/*
 * Directory dir's absent name (rr_inode.absent), if dir is in memory; the
 * fs lock held.  Keep name as absent; forget the kept one, returning 1 if
 * it was name (NULL: just forget, as an entry is being added).
 */
void rr_iabsent_set(struct rr_fs *rfs, ext2_ino_t dir, const char *name);
int rr_iabsent_take(struct rr_fs *rfs, ext2_ino_t dir, const char *name);
void rr_iabsent_clear(struct rr_fs *rfs, ext2_ino_t dir);
unsigned int rr_iguard(struct rr_fs *rfs, ext2_ino_t ino);
void rr_iput(struct rr_fs *rfs, struct rr_inode *ri, uint64_t nlookup, int close);
uint64_t rr_idelayed(struct rr_fs *rfs, ext2_ino_t ino, uint64_t *size);
/* ino lost its last link: data held past close (held) no longer keeps its in-memory inode. */
void rr_iheld_unlinked(struct rr_fs *rfs, ext2_ino_t ino);
int inode_read(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in);
int inode_load(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in);
int inode_write(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in);
/*
 * -o check: does the inode break ext4's size invariant (a written block
 * past i_size's last block)?  *ex: the last written extent.  Fs lock held.
 */
int inode_written_past_size(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in,
			    struct ext2fs_extent *ex);
void inode_stat(struct rr_fs *rfs, ext2_ino_t ino, const struct ext2_inode_large *in, struct stat *st);
void inode_set_time(struct ext2_inode_large *in, int which, const struct timespec *ts);
void inode_get_time(const struct ext2_inode_large *in, int which, struct timespec *ts);
/* Access-time rules, as the mount options relatime (default), noatime, strictatime. */
#define RR_ATIME_RELATIME 0
#define RR_ATIME_NOATIME 1
#define RR_ATIME_STRICT 2
/* A read of ri's data or entries: its access time as the kernel's atime rules would set it. */
void inode_accessed(struct rr_fs *rfs, struct rr_inode *ri);
/* The inode has room for a birth time (not a 128-byte one). */
int inode_has_crtime(const struct ext2_inode_large *in);
void inode_touch(struct ext2_inode_large *in, int which);
int inode_new(struct rr_fs *rfs, ext2_ino_t dir, const char *name, mode_t mode, uid_t uid, gid_t gid,
	      dev_t rdev, ext2_ino_t *ino_out, struct ext2_inode_large *in);
int inode_free_if_unlinked(struct rr_fs *rfs, ext2_ino_t ino);
int inode_free_locked(struct rr_fs *rfs, ext2_ino_t ino);
#define RR_ATIME 1
#define RR_MTIME 2
#define RR_CTIME 4
#define RR_CRTIME 8

/* emap.c: the cached block map and the on-disk tree behind it */
int emap_ensure(struct rr_fs *rfs, struct rr_inode *ri);
void emap_drop(struct rr_inode *ri);
void emap_lookup(const struct rr_emap *m, uint64_t lblk, struct rr_ext *out);
void emap_alloc_hint(struct rr_fs *rfs, struct rr_inode *ri, uint64_t lblk, struct rr_alloc_req *req);
int emap_map(struct rr_fs *rfs, struct rr_inode *ri, struct ext2_inode_large *in, uint64_t lblk,
	     uint64_t pblk, uint32_t len, int uninit);
int emap_tree_map(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in, uint64_t lblk,
		  uint64_t pblk, uint32_t len, int uninit);
int emap_root_bmap(struct ext2_inode_large *in, uint64_t lblk, uint64_t *pblk);
/* An empty extent tree in a new inode's i_block (depth 0, no entries), as the kernel's ext4_ext_tree_init. */
void emap_root_init(struct ext2_inode_large *in);
int emap_tree_punch(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in, uint64_t first,
		    uint64_t last);
int emap_mark_init(struct rr_fs *rfs, struct rr_inode *ri, struct ext2_inode_large *in,
		   uint64_t lblk, uint32_t len);
void emap_cache_set(struct rr_emap *m, uint32_t lblk, uint32_t len, uint64_t pblk, int uninit);
uint64_t emap_goal(struct rr_fs *rfs, struct rr_inode *ri, uint64_t lblk);
/* The pid of the process whose request this thread handles (0: none): it colours nodelalloc goals. */
void rr_set_req_pid(uint32_t pid);

#endif

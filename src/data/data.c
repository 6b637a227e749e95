// SPDX-License-Identifier: GPL-2.0
/*
 * The data path: read, write, truncate, fallocate, lseek.
 *
 * Map under locks, then move bytes with no fs lock held.  An overwrite of
 * blocks that are already mapped and written takes only the inode's rw lock
 * (shared) and goes straight to pwrite.  Anything that changes the map
 * (allocation, unwritten-to-written conversion, punch, truncate) takes rw
 * exclusively and the fs lock only around the libext2fs calls; choosing a
 * hole's blocks does not take it (RR_ALLOC_NOLOCK), so writers of different
 * files allocate at once and meet only on the extent-tree update.
 *
 * Delayed allocation (as ext4's delalloc): pages the kernel's cache writes
 * back into holes go to the inode's buffer (dbuf.h) with their blocks
 * promised (rr_alloc_reserve), so a full filesystem still fails the WRITE.
 * Blocks are chosen when the data is flushed: at the release of the last
 * writer (the file's size is then final and the allocator asks for exactly
 * that), fsync, the commit thread's tick, a buffer grown past
 * DELAY_INODE_MAX (the file is a stream from then on) or DELAY_TOTAL_MAX,
 * and before anything else maps blocks (direct writes, fallocate, seek).
 * Not at FLUSH: every close() of every descriptor sends one, also the
 * copies a fork() and exec() close, while the file stays open.  Buffered
 * blocks sit in holes of the map only.
 *
 * Freshly allocated and unwritten blocks are written whole, the bytes the
 * caller did not supply as zeros, before the map that exposes them reaches
 * the disk: a reader never sees stale blocks.  Past i_size, the rest of the
 * last block is kept zero on disk, so growing a file never exposes old bytes.
 */
#include "data.h"
#include "dbuf.h"
#include "error.h"
#include "rrfs.h"
#include "dev.h"
#include "hold.h"
#include "log.h"
#include "rrfuse/grow.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char zero_block[65536];

/*
 * Flush a file's delayed data once it holds this much (bytes), or all
 * files together this much.  A file that outgrows DELAY_INODE_MAX is a
 * stream: its blocks come from preallocation windows of that size anyway,
 * and copying it through the buffer would halve its speed (measured: W1
 * 913-974 MiB/s direct, 319-388 buffered in 16 MiB pieces), so it is
 * written at once until its last writer closes it.
 */
#define DELAY_INODE_MAX (8ULL << 20)
#define DELAY_TOTAL_MAX (256ULL << 20)
/*
 * Runs a file's buffer may hold: scattered writes of a sparse file, held
 * until its fsync as the page cache holds them (4096 random 4 KiB writes:
 * 3819 runs), so that the file is mapped in one pass as by the kernel's
 * writeback, not in several as the cap sends it out (each pass past the
 * first splits full leaves of its extent tree: 15-19 tree blocks against
 * the kernel's 13).  The memory is bounded by the dirty limits; mappings
 * by dbuf.c; the runs are an array, and a run inserted moves those after
 * it (8192 scattered writes: about 0.5 GB moved in all, 65536 would be 34).
 */
#define DELAY_RUNS_MAX 8192
/*
 * ext4's writepages maps at most this many blocks per allocation request
 * (MAX_WRITEPAGES_EXTENT_LEN): held data goes out in requests of this size,
 * so that two files written back at once (two fsyncs) interleave as on ext4.
 */
#define WRITEPAGES_EXTENT_MAX 2048

/*
 * ext4's s_maxbytes for extent-mapped files (ext4_max_size): 2^32 - 1
 * blocks, the last logical block left out; e2fsck calls a larger i_size
 * corrupt (fstests generic/285 wrote the block at 2^44 - 4 KiB).
 */
static uint64_t max_size(struct rr_fs *rfs)
{
	return ((1ULL << 32) - 1) << rfs->bbits;
}

/*
 * Times that data operations set themselves.  With the kernel's writeback
 * cache the kernel owns mtime and ctime of regular files and sends them with
 * setattr; setting them here too would race with its values.
 */
static int data_times(struct rr_fs *rfs)
{
	return rfs->opts.writeback ? 0 : RR_MTIME | RR_CTIME;
}

static uint64_t blk_start(struct rr_fs *rfs, uint64_t lblk)
{
	return lblk << rfs->bbits;
}

/* Fill iov with len zero bytes; returns the number of entries used. */
static int iov_zero(struct iovec *iov, int max, size_t len)
{
	int n = 0;

	while (len && n < max) {
		size_t c = len < sizeof(zero_block) ? len : sizeof(zero_block);

		iov[n].iov_base = (void *)zero_block;
		iov[n].iov_len = c;
		len -= c;
		n++;
	}
	return n;
}

/*
 * Write blocks [lblk, lblk+n) at pblk in whole: caller bytes for
 * [pos, seg_end), zeros around them.
 */
static int write_whole_blocks(struct rr_fs *rfs, uint64_t pblk, uint64_t lblk, uint32_t n,
			      const char *src, uint64_t pos, uint64_t seg_end)
{
	uint64_t bstart = blk_start(rfs, lblk), bend = blk_start(rfs, lblk + n);
	struct iovec iov[8];
	int cnt = 0, ret;

	/* Pads are each less than one block. */
	cnt += iov_zero(iov + cnt, 2, (size_t)(pos - bstart));
	iov[cnt].iov_base = (void *)src;
	iov[cnt].iov_len = (size_t)(seg_end - pos);
	cnt++;
	cnt += iov_zero(iov + cnt, 2, (size_t)(bend - seg_end));
	ret = io_data_writev(rfs->dev, iov, cnt, blk_start(rfs, pblk));
	if (ret)
		rr_data_io_error(rfs, 1, pblk, -ret);
	return ret;
}

/* Zero [from, to) within one block if that block is mapped and written. Caller holds rw. */
static int zero_partial(struct rr_fs *rfs, struct rr_inode *ri, uint64_t from, uint64_t to)
{
	struct rr_ext m;

	if (from >= to)
		return 0;
	emap_lookup(&ri->emap, from >> rfs->bbits, &m);
	if (!m.pblk || m.uninit)
		return 0;
	return io_data_write(rfs->dev, zero_block, (size_t)(to - from),
			     blk_start(rfs, m.pblk) + (from & (rfs->bsize - 1)));
}

/* Does [off, off+size) lie in mapped, written blocks only? */
static int all_written(struct rr_fs *rfs, struct rr_inode *ri, uint64_t off, uint64_t size)
{
	uint64_t lblk = off >> rfs->bbits, last = (off + size - 1) >> rfs->bbits;
	struct rr_ext m;

	while (lblk <= last) {
		emap_lookup(&ri->emap, lblk, &m);
		if (!m.pblk || m.uninit)
			return 0;
		lblk += m.len;
	}
	return 1;
}

/* Move bytes between buf and the mapped blocks of [off, off+size). Caller holds rw. */
static int move_mapped(struct rr_fs *rfs, struct rr_inode *ri, char *buf, uint64_t off,
		       uint64_t size, int write)
{
	uint64_t pos = off, end = off + size;
	struct rr_ext m;
	int ret = 0;

	while (pos < end && !ret) {
		uint64_t lblk = pos >> rfs->bbits, seg_end;

		emap_lookup(&ri->emap, lblk, &m);
		seg_end = blk_start(rfs, lblk + m.len);
		if (seg_end > end || seg_end < pos)
			seg_end = end;
		if (m.pblk && !m.uninit) {
			uint64_t dev = blk_start(rfs, m.pblk) + (pos - blk_start(rfs, lblk));

			if (write)
				ret = io_data_write(rfs->dev, buf + (pos - off), (size_t)(seg_end - pos), dev);
			else
				ret = io_data_read(rfs->dev, buf + (pos - off), (size_t)(seg_end - pos), dev);
			if (ret)
				rr_data_io_error(rfs, write, m.pblk, -ret);
		} else if (!write) {
			dbuf_read(&ri->dbuf, rfs->bbits, pos, buf + (pos - off), seg_end - pos);
		}
		pos = seg_end;
	}
	return ret;
}

ssize_t data_read(struct rr_fs *rfs, struct rr_inode *ri, char *buf, size_t size, uint64_t off)
{
	int ret;

	pthread_rwlock_rdlock(&ri->rw);
	ret = emap_ensure(rfs, ri);
	if (!ret) {
		if (off >= ri->size)
			size = 0;
		else if (size > ri->size - off)
			size = (size_t)(ri->size - off);
		if (size)
			ret = move_mapped(rfs, ri, buf, off, size, 0);
	}
	pthread_rwlock_unlock(&ri->rw);
	return ret ? ret : (ssize_t)size;
}

int data_read_begin(struct rr_fs *rfs, struct rr_inode *ri, uint64_t off, size_t *size, uint64_t *dev)
{
	uint64_t lblk = off >> rfs->bbits;
	struct rr_ext m;
	int ret;

	*dev = 0;
	pthread_rwlock_rdlock(&ri->rw);
	ret = emap_ensure(rfs, ri);
	if (ret) {
		pthread_rwlock_unlock(&ri->rw);
		return ret;
	}
	if (off >= ri->size)
		*size = 0;
	else if (*size > ri->size - off)
		*size = (size_t)(ri->size - off);
	if (!*size)
		return 0;
	emap_lookup(&ri->emap, lblk, &m);
	if (m.pblk && !m.uninit && blk_start(rfs, lblk + m.len) >= off + *size)
		*dev = blk_start(rfs, m.pblk) + (off - blk_start(rfs, lblk));
	return 0;
}

void data_read_end(struct rr_inode *ri)
{
	pthread_rwlock_unlock(&ri->rw);
}

/* size and disksize in ri, after the inode on disk took disksize. */
static void size_store(struct rr_inode *ri, uint64_t size, uint64_t disksize)
{
	/* Not when unchanged: an overwrite sets only the times, under rw shared. */
	if (ri->size != size)
		__atomic_store_n(&ri->size, size, __ATOMIC_RELAXED);
	if (ri->disksize != disksize)
		ri->disksize = disksize;
}

/*
 * i_size (and times) in ri, disksize on disk (see struct rr_inode).
 * Caller holds rw exclusively (shared for times alone), not the fs lock.
 */
static int write_size(struct rr_fs *rfs, struct rr_inode *ri, uint64_t size, uint64_t disksize, int times)
{
	struct ext2_inode_large in;
	int ret;

	rr_fs_lock(rfs);
	ret = inode_load(rfs, ri->ino, &in);
	if (!ret) {
		ret = rr_err_ino(rfs, ext2fs_inode_size_set(rfs->fs, (struct ext2_inode *)&in, disksize), ri->ino);
		if (!ret) {
			if (times)
				inode_touch(&in, times);
			ret = inode_write(rfs, ri->ino, &in);
		}
	}
	rr_fs_end_op(rfs);
	if (!ret)
		size_store(ri, size, disksize);
	return ret;
}

/*
 * The file's size set to size (truncate, fallocate, a grown hole): on
 * disk too, as ext4 sets i_disksize, but never past data still buffered
 * below a smaller size.  Times alone when size is the size already.
 */
static int set_size(struct rr_fs *rfs, struct rr_inode *ri, uint64_t size, int times)
{
	uint64_t disk = !ri->dbuf.cnt || size > ri->size ? size : size < ri->disksize ? size : ri->disksize;

	return write_size(rfs, ri, size, disk, times);
}

/* A write() grew or touched the file: on disk only as far as no data waits in the buffer. */
static int set_written_size(struct rr_fs *rfs, struct rr_inode *ri, uint64_t size, int times)
{
	return write_size(rfs, ri, size, ri->dbuf.cnt ? ri->disksize : size, times);
}

/* Growing the file: the old last block's bytes past i_size must read as zero. */
static int zero_old_tail(struct rr_fs *rfs, struct rr_inode *ri, uint64_t upto)
{
	uint64_t s = ri->size, blk_end = (s + rfs->bsize - 1) & ~((uint64_t)rfs->bsize - 1);

	if (upto <= s)
		return 0;
	return zero_partial(rfs, ri, s, upto < blk_end ? upto : blk_end);
}

/*
 * ext4's i_disksize rule, for blocks that become written up to block end
 * (mapped written, or converted from unwritten) by an operation that leaves
 * the file at least size_to long: the size on disk reaches their end (never
 * past the file's size), in the same inode write as the map change, so that
 * no commit writes an inode whose initialised blocks pass its size (e2fsck
 * rejects it).  It may pass data still buffered below those blocks, as ext4's
 * does after a ranged writeback: a crash then leaves a hole there (unsynced
 * data, lost as on ext4), not a file that e2fsck must cut or grow.  Sets the
 * size in in; returns 1 if it changed (the caller then calls size_store once
 * the inode is written), or -errno.  Caller holds rw exclusively and the fs lock.
 */
static int size_for_written(struct rr_fs *rfs, struct rr_inode *ri, struct ext2_inode_large *in,
			    uint64_t end, uint64_t size_to, uint64_t *size, uint64_t *disk)
{
	int ret;

	*size = size_to > ri->size ? size_to : ri->size;
	*disk = blk_start(rfs, end);
	if (*disk > *size)
		*disk = *size;
	if (*disk < ri->disksize)
		*disk = ri->disksize;
	if (*size == ri->size && *disk == ri->disksize)
		return 0;
	ret = rr_err_ino(rfs, ext2fs_inode_size_set(rfs->fs, (struct ext2_inode *)in, *disk), ri->ino);
	return ret ? ret : 1;
}

/*
 * Map a run the allocator handed out at lblk (unwritten if uninit), or
 * give it back if that fails (or ret, an earlier step's error, is set):
 * a run is mapped whole or not at all (emap_tree_map).  Its blocks enter
 * the bitmap in the same fs-locked section as the map (rr_alloc_mapped);
 * a written run raises the size on disk with it (size_for_written).
 * Caller holds rw exclusively, not the fs lock.
 */
static int map_run(struct rr_fs *rfs, struct rr_inode *ri, uint64_t lblk, const struct rr_extent *ex,
		   int uninit, unsigned int flags, int ret, uint64_t size_to)
{
	struct ext2_inode_large in;
	uint64_t size = 0, disk = 0;
	int resize = 0;

	rr_fs_lock(rfs);
	if (!ret)
		ret = inode_load(rfs, ri->ino, &in);
	if (!ret && !uninit)
		resize = size_for_written(rfs, ri, &in, lblk + ex->len, size_to, &size, &disk);
	if (resize < 0)
		ret = resize;
	if (!ret)
		ret = emap_map(rfs, ri, &in, lblk, ex->pblk, ex->len, uninit);
	if (ret) {
		rr_free_blocks(rfs->alloc, ex->pblk, ex->len);
		/* The data stays buffered: promise its blocks again (they were just freed). */
		if (flags & RR_ALLOC_RESERVED)
			rr_alloc_reserve(rfs->alloc, ex->len, 1);
		rr_fs_end_op(rfs);
		return ret;
	}
	rr_alloc_mapped(rfs->alloc, ex->pblk, ex->len);
	if (resize)
		size_store(ri, size, disk);
	rr_fs_end_op(rfs);
	return ret;
}

/*
 * Unwritten blocks [lblk, lblk+n), their data just written, become written
 * blocks of a file at least size_to long; the size on disk follows them
 * (size_for_written).  Caller holds rw exclusively, not the fs lock.
 */
static int mark_written(struct rr_fs *rfs, struct rr_inode *ri, uint64_t lblk, uint32_t n, uint64_t size_to)
{
	struct ext2_inode_large in;
	uint64_t size = 0, disk = 0;
	int ret, resize = 0;

	rr_fs_lock(rfs);
	ret = inode_load(rfs, ri->ino, &in);
	if (!ret)
		resize = size_for_written(rfs, ri, &in, lblk + n, size_to, &size, &disk);
	if (resize < 0)
		ret = resize;
	if (!ret)
		ret = emap_mark_init(rfs, ri, &in, lblk, n);
	if (!ret && resize)
		size_store(ri, size, disk);
	rr_fs_end_op(rfs);
	return ret;
}

/*
 * Allocate and write a hole's blocks; returns the end of what was written,
 * or -errno.  grow: a write() (not buffered data, whose size is set): the
 * size follows the data written (map_run).
 */
static int64_t fill_hole(struct rr_fs *rfs, struct rr_inode *ri, const char *src, uint64_t pos,
			 uint64_t end, uint32_t nblk, unsigned int flags, int grow)
{
	uint64_t lblk = pos >> rfs->bbits, seg_end;
	struct rr_alloc_req req = { .ino = ri->ino, .lblk = lblk,
				    .len = nblk < EXT_INIT_MAX_LEN ? nblk : EXT_INIT_MAX_LEN,
				    .flags = RR_ALLOC_DATA | RR_ALLOC_NOLOCK | flags };
	struct rr_extent ex;
	int ret;

	/* No fs lock: writers of different files allocate at once (rw keeps this file's requests apart). */
	emap_alloc_hint(rfs, ri, lblk, &req);
	ret = rr_alloc_blocks(rfs->alloc, &req, &ex);
	if (ret)
		return ret;
	seg_end = blk_start(rfs, lblk + ex.len);
	if (seg_end > end)
		seg_end = end;
	ret = write_whole_blocks(rfs, ex.pblk, lblk, ex.len, src, pos, seg_end);
	ret = map_run(rfs, ri, lblk, &ex, 0, flags, ret, grow ? seg_end : 0);
	return ret ? ret : (int64_t)seg_end;
}

/* ---- delayed allocation ---- */

static int holding(const struct rr_fs *rfs)
{
	return rfs->opts.delalloc == RR_DELALLOC_HOLD;
}

/* Blocks promised to delayed data, and those free with them. */
static void free_and_dirty(struct rr_fs *rfs, uint64_t *free, uint64_t *dirty)
{
	*dirty = rr_alloc_reserved(rfs->alloc);
	*free = rr_alloc_free(rfs->alloc) + *dirty;
}

/*
 * ext4_nonda_switch, for -o delalloc=hold: under one and a half times the
 * blocks promised to delayed data (or a small margin above them), a write
 * gets its blocks at once instead of waiting (1).
 */
static int free_space_short(struct rr_fs *rfs)
{
	uint64_t free, dirty;

	free_and_dirty(rfs, &free, &dirty);
	return 2 * free < 3 * dirty || free < dirty + rr_hold_limits()->free_watermark;
}

static int flush_all_locked(struct rr_fs *rfs, enum rr_flush how);

/*
 * And under twice them, all of it is written back before the write goes
 * on: ext4_nonda_switch's writeback_inodes_sb waits for the flusher's work,
 * unless a write-back is under way already (skip_if_busy), when the write
 * goes on at once.  Caller holds no inode's rw.
 */
static void free_space_push(struct rr_fs *rfs)
{
	uint64_t free, dirty;

	free_and_dirty(rfs, &free, &dirty);
	if (!dirty || free >= 2 * dirty || pthread_mutex_trylock(&rfs->delayed.writeback))
		return;
	(void)flush_all_locked(rfs, RR_FLUSH_ALL);
	pthread_mutex_unlock(&rfs->delayed.writeback);
}

static int64_t monotonic_secs(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec;
}

/* Keep the listed inodes that still hold delayed data.  Under delayed.lock. */
static void delay_list_compact(struct rr_fs *rfs)
{
	size_t i, n = 0;

	for (i = 0; i < rfs->delayed.n; i++)
		if (rr_idelayed(rfs, rfs->delayed.inos[i], NULL))
			rfs->delayed.inos[n++] = rfs->delayed.inos[i];
	rfs->delayed.n = n;
}

/*
 * Put ino on the commit thread's list.  Files flushed at their close stay
 * listed until the next tick; without ticks (commit=0) a full list first
 * drops them, so it grows with the files holding data, not those written.
 */
static void delay_list(struct rr_fs *rfs, ext2_ino_t ino)
{
	pthread_mutex_lock(&rfs->delayed.lock);
	if (rfs->delayed.n == rfs->delayed.cap) {
		if (rfs->delayed.cap >= 1024)
			delay_list_compact(rfs);
		if (rfs->delayed.n * 2 >= rfs->delayed.cap)
			(void)rr_grow(&rfs->delayed.inos, sizeof(ino), &rfs->delayed.cap, rfs->delayed.cap + 1, 64);
	}
	/* Without room the data still reaches the disk at close, fsync or unmount. */
	if (rfs->delayed.n < rfs->delayed.cap)
		rfs->delayed.inos[rfs->delayed.n++] = ino;
	pthread_mutex_unlock(&rfs->delayed.lock);
}

/* After ri's buffer changed from `before` blocks: the total, and the list when it starts to hold some. */
static void delay_account(struct rr_fs *rfs, struct rr_inode *ri, uint64_t before)
{
	uint64_t now = atomic_load(&ri->dbuf.blocks);

	if (now >= before) {
		uint64_t total = atomic_fetch_add(&rfs->delayed.blocks, now - before) + (now - before);
		uint64_t peak = atomic_load(&rfs->delayed.peak);

		while (total > peak && !atomic_compare_exchange_weak(&rfs->delayed.peak, &peak, total))
			;
	} else {
		atomic_fetch_sub(&rfs->delayed.blocks, before - now);
	}
	if (!before && now) {
		atomic_store(&ri->dirtied, monotonic_secs());
		delay_list(rfs, ri->ino);
	}
}

/*
 * Take [pos, end) of a hole of n blocks into the buffer, promising blocks
 * for those it does not hold yet; as much as there is space for.  Returns
 * the end of what was taken, or -errno.  Caller holds rw exclusively.
 */
static int64_t delay_write(struct rr_fs *rfs, struct rr_inode *ri, const char *src, uint64_t pos,
			   uint64_t end, uint64_t n, int root)
{
	uint64_t lblk = pos >> rfs->bbits, want, got = 0, before, seg_end;
	int ret;

	if (n > UINT32_MAX / 2)
		n = UINT32_MAX / 2;
	if (ri->dbuf.cnt >= DELAY_RUNS_MAX)
		return -ENOMEM;
	want = dbuf_missing(&ri->dbuf, lblk, n);
	if (want) {
		got = rr_alloc_reserve(rfs->alloc, want, root);
		if (got < want) {
			n = dbuf_prefix(&ri->dbuf, lblk, n, got);
			if (!n)
				return -ENOSPC;
		}
	}
	seg_end = blk_start(rfs, lblk + n);
	if (seg_end > end)
		seg_end = end;
	/* What the taken part needs may be less than was promised: the prefix ends at a held block. */
	want = dbuf_missing(&ri->dbuf, lblk, ((seg_end - 1) >> rfs->bbits) + 1 - lblk);
	rr_alloc_unreserve(rfs->alloc, got - want);
	before = atomic_load(&ri->dbuf.blocks);
	ret = dbuf_write(&ri->dbuf, rfs->bbits, pos, src, seg_end - pos);
	if (ret) {
		rr_alloc_unreserve(rfs->alloc, want);
		return ret;
	}
	delay_account(rfs, ri, before);
	return (int64_t)seg_end;
}

/*
 * Write the buffer out: allocate, write, map, run by run, the runs that
 * start below block end, until max blocks have gone (a run is cut at end,
 * and under delalloc=hold at a writepages request); *gone (may be NULL)
 * adds what went.  Caller holds rw exclusively.
 */
static int flush_some(struct rr_fs *rfs, struct rr_inode *ri, int closed, uint64_t end, uint64_t max,
		      uint64_t *gone_out)
{
	unsigned int flags = RR_ALLOC_RESERVED | RR_ALLOC_USE_ROOT_RESV | (closed ? RR_ALLOC_CLOSED : 0) |
			     (atomic_load(&ri->streaming) ? RR_ALLOC_WRITEBACK : 0);
	uint64_t gone = 0;
	int ret = 0;

	/* After errors=remount-ro nothing changes any more, as ext4's writeback then fails. */
	if (ri->dbuf.cnt && atomic_load(&rfs->ro))
		return -EROFS;
	while (ri->dbuf.cnt && ri->dbuf.v[0].lblk < end && gone < max && !ret) {
		struct rr_drun *r = &ri->dbuf.v[0];
		uint64_t pos = blk_start(rfs, r->lblk), before = atomic_load(&ri->dbuf.blocks);
		uint32_t n = holding(rfs) && r->n > WRITEPAGES_EXTENT_MAX ? WRITEPAGES_EXTENT_MAX : r->n;
		int64_t done;

		if (n > end - r->lblk)
			n = (uint32_t)(end - r->lblk);
		ret = emap_ensure(rfs, ri);
		if (ret)
			break;
		done = fill_hole(rfs, ri, r->buf, pos, blk_start(rfs, r->lblk + n), n, flags, 0);
		if (done < 0) {
			ret = (int)done;
			break;
		}
		dbuf_consume(&ri->dbuf, rfs->bbits, 0, (uint32_t)(((uint64_t)done - pos) >> rfs->bbits));
		delay_account(rfs, ri, before);
		gone += ((uint64_t)done - pos) >> rfs->bbits;
	}
	/* All on disk: so is the size (data written directly past the last run, as into unwritten blocks). */
	if (!ret && !ri->dbuf.cnt && ri->disksize < ri->size)
		ret = write_size(rfs, ri, ri->size, ri->size, 0);
	if (!ri->dbuf.cnt)
		atomic_store(&ri->held, 0);
	if (gone_out)
		*gone_out += gone;
	return ret;
}

static int flush_locked(struct rr_fs *rfs, struct rr_inode *ri, int closed)
{
	return flush_some(rfs, ri, closed, UINT64_MAX, UINT64_MAX, NULL);
}

/* Past the last block the buffer holds.  Caller holds rw. */
static uint64_t dbuf_end(const struct rr_dbuf *d)
{
	return d->cnt ? (uint64_t)d->v[d->cnt - 1].lblk + d->v[d->cnt - 1].n : 0;
}

/*
 * One turn of a file's write-back: up to max blocks (UINT64_MAX: all) of
 * what its buffer held below *end (UINT64_MAX: its end as it is now, which
 * the first turn records), a writepages request at a time with rw dropped
 * between them, as the kernel's writeback locks a page at a time: a writer
 * of the file is not stopped while gigabytes of it go out.  What it adds
 * past that end waits for the next write-back, as sync's tagged writeback
 * stops at the pages dirty when it began; what lands below goes too.
 * 1: more remains below *end; 0: done; or -errno.
 */
static int flush_turn(struct rr_fs *rfs, struct rr_inode *ri, int closed, uint64_t *end, uint64_t max)
{
	struct ext2_inode_large in;
	uint64_t gone = 0;
	int ret = 0, more = 1, first = 1;

	while (!ret && more && gone < max && atomic_load(&ri->dbuf.blocks)) {
		pthread_rwlock_wrlock(&ri->rw);
		if (*end == UINT64_MAX)
			*end = dbuf_end(&ri->dbuf);
		/*
		 * Unlinked with no writer left: the data dies with the file (ext4 does
		 * not write such pages back either), but readers may still have it open.
		 * Looked at once a turn (the inode read takes the fs lock).
		 */
		if (first && closed && ri->dbuf.cnt && !inode_read(rfs, ri->ino, &in) && !in.i_links_count) {
			atomic_store(&ri->held, 0);
			pthread_rwlock_unlock(&ri->rw);
			return 0;
		}
		first = 0;
		ret = flush_some(rfs, ri, closed, *end, WRITEPAGES_EXTENT_MAX, &gone);
		more = ri->dbuf.cnt && ri->dbuf.v[0].lblk < *end;
		pthread_rwlock_unlock(&ri->rw);
	}
	return ret ? ret : more && atomic_load(&ri->dbuf.blocks);
}

int data_flush(struct rr_fs *rfs, struct rr_inode *ri, int closed)
{
	uint64_t end = UINT64_MAX;

	if (closed)
		atomic_store(&ri->streaming, 0);
	return flush_turn(rfs, ri, closed, &end, UINT64_MAX);
}

/* The dirty bytes the kernel's flusher would count: what the files hold and the machine's own. */
static uint64_t flusher_dirty(struct rr_fs *rfs)
{
	return blk_start(rfs, atomic_load(&rfs->delayed.blocks)) + rr_hold_machine_dirty();
}

/*
 * Held data (-o delalloc=hold) the kernel's flusher would write now: older
 * than the expiry, or any while all files hold more than the background
 * threshold (the list is oldest first, as the flusher's).  An unlinked
 * file's is no longer held (rr_iheld_unlinked): it goes with its inode.
 */
static int due(struct rr_fs *rfs, struct rr_inode *ri, int64_t now)
{
	const struct rr_hold_limits *h = rr_hold_limits();

	return atomic_load(&ri->dirtied) + (int64_t)h->expire_secs <= now ||
	       flusher_dirty(rfs) > h->background_bytes;
}

/* Put kept[0..n) back at the head of the list, ahead of what was listed meanwhile: oldest first. */
static void delay_relist(struct rr_fs *rfs, ext2_ino_t *kept, size_t n)
{
	size_t cur, cap = n;

	pthread_mutex_lock(&rfs->delayed.lock);
	cur = rfs->delayed.n;
	if (!rr_grow(&kept, sizeof(*kept), &cap, n + cur, 1)) {
		if (cur)
			memcpy(kept + n, rfs->delayed.inos, cur * sizeof(*kept));
		free(rfs->delayed.inos);
		rfs->delayed.inos = kept;
		rfs->delayed.n = n + cur;
		rfs->delayed.cap = cap;
		kept = NULL;
	}
	pthread_mutex_unlock(&rfs->delayed.lock);
	free(kept);
}

/* A file data_flush_all writes back: pinned, and where its buffer ended when that began. */
struct wb_file {
	struct rr_inode *ri;
	uint64_t end;
	int closed;
};

/* n files a write-back took off the list are done with it (rrctl -s counts them till then). */
static void wb_taken_done(struct rr_fs *rfs, size_t n)
{
	pthread_mutex_lock(&rfs->delayed.lock);
	rfs->delayed.taken -= n;
	pthread_mutex_unlock(&rfs->delayed.lock);
}

/* One turn of wb's write-back: 1 if it goes on, else it is unpinned (and listed again on failure). */
static int wb_turn(struct rr_fs *rfs, struct wb_file *wb, uint64_t turn, int *ret)
{
	int r = flush_turn(rfs, wb->ri, wb->closed, &wb->end, turn);

	if (r > 0)
		return 1;
	if (r && !*ret)
		*ret = r;
	/*
	 * Listed again while it holds data: on failure, so that a later tick
	 * tries once more; and what a writer added past the end this began
	 * with (no longer on the list, it would otherwise wait for fsync,
	 * close or unmount, as no kernel inode with dirty pages leaves the
	 * flusher's lists: requeue_inode).
	 */
	if (r || atomic_load(&wb->ri->dbuf.blocks))
		delay_list(rfs, wb->ri->ino);
	wb_taken_done(rfs, 1);
	rr_iunpin(rfs, wb->ri);
	return 0;
}

/*
 * Under delalloc=hold, but for RR_FLUSH_ALL (whose tagged work takes each
 * file whole), the files take turns of 8 MiB, the oldest first, as the
 * kernel's flusher gives each inode a chunk and then turns to the next
 * (writeback_sb_inodes, writeback_chunk_size): several files written back
 * by one sync(1) each get one 2048-block extent, then their tails.  A
 * background write-back stops once under the threshold (wb_over_bg_thresh).
 */
static int flush_all_locked(struct rr_fs *rfs, enum rr_flush how)
{
	int64_t now = monotonic_secs();
	int due_only = how == RR_FLUSH_DUE;
	uint64_t turn = holding(rfs) && how != RR_FLUSH_ALL ? (8ULL << 20) >> rfs->bbits : UINT64_MAX;
	struct wb_file *wb;
	ext2_ino_t *inos;
	size_t n, i, nwb = 0, kept = 0;
	int ret = 0;

	pthread_mutex_lock(&rfs->delayed.lock);
	inos = rfs->delayed.inos;
	n = rfs->delayed.n;
	rfs->delayed.inos = NULL;
	rfs->delayed.n = rfs->delayed.cap = 0;
	rfs->delayed.taken = n;
	pthread_mutex_unlock(&rfs->delayed.lock);
	wb = calloc(n ? n : 1, sizeof(*wb));
	for (i = 0; i < n; i++) {
		struct wb_file f = { .ri = rr_ipin(rfs, inos[i]), .end = UINT64_MAX };

		if (!f.ri) {
			wb_taken_done(rfs, 1);
			continue;
		}
		if (due_only && holding(rfs) && atomic_load(&f.ri->dbuf.blocks) && !due(rfs, f.ri, now)) {
			inos[kept++] = inos[i];
			rr_iunpin(rfs, f.ri);
			continue;
		}
		f.closed = !atomic_load(&f.ri->nwriters);
		/* Without memory for the turns, each file whole at once. */
		if (wb_turn(rfs, &f, wb ? turn : UINT64_MAX, &ret) && wb)
			wb[nwb++] = f;
	}
	while (nwb) {
		size_t live = 0;

		for (i = 0; i < nwb; i++) {
			if (due_only && !due(rfs, wb[i].ri, now)) {
				inos[kept++] = wb[i].ri->ino;
				rr_iunpin(rfs, wb[i].ri);
			} else if (wb_turn(rfs, &wb[i], turn, &ret)) {
				wb[live++] = wb[i];
			}
		}
		nwb = live;
	}
	free(wb);
	if (kept)
		delay_relist(rfs, inos, kept);
	else
		free(inos);
	wb_taken_done(rfs, kept);
	return ret;
}

/*
 * One write-back of all files at a time: the files it took off the list
 * are its own until it ends, so a sync that came meanwhile waits for it
 * and then takes what it left (sync_filesystem waits for the flusher's work).
 */
int data_flush_all(struct rr_fs *rfs, enum rr_flush how)
{
	int ret;

	pthread_mutex_lock(&rfs->delayed.writeback);
	ret = flush_all_locked(rfs, how);
	pthread_mutex_unlock(&rfs->delayed.writeback);
	return ret;
}

int data_close(struct rr_fs *rfs, struct rr_inode *ri)
{
	struct ext2_inode_large in;

	atomic_store(&ri->streaming, 0);
	/*
	 * As ext4 keeps dirty pages past close: written when due
	 * (data_flush_all), fsync or sync.  Held first, the links read after
	 * (under the fs lock): an unlink at the same time either sees the hold
	 * and ends it (rr_iheld_unlinked) or has left no link to see.
	 */
	if (holding(rfs) && atomic_load(&ri->dbuf.blocks)) {
		atomic_store(&ri->held, 1);
		if (!inode_read(rfs, ri->ino, &in) && in.i_links_count)
			return 0;
		atomic_store(&ri->held, 0);
	}
	return data_flush(rfs, ri, 1);
}

static void data_drop_delayed(struct rr_fs *rfs, struct rr_inode *ri)
{
	uint64_t before = atomic_load(&ri->dbuf.blocks), n = dbuf_clear(&ri->dbuf);
	struct ext2_inode_large in;

	if (!n)
		return;
	if (inode_read(rfs, ri->ino, &in) || in.i_links_count)
		rr_log(LOG_ERR, "inode %u: %llu blocks of written data dropped: they never got blocks on disk",
		       ri->ino, (unsigned long long)n);
	if (rfs->alloc)
		rr_alloc_unreserve(rfs->alloc, n);
	delay_account(rfs, ri, before);
}

/* An in-memory inode goes (inode.c, through data_hooks): its delayed data and map with it. */
static void data_evict(struct rr_fs *rfs, struct rr_inode *ri)
{
	data_drop_delayed(rfs, ri);
	emap_drop(ri);
}

void data_stats(struct rr_fs *rfs, uint64_t *blocks, uint64_t *files, uint64_t *peak, uint64_t *background,
		uint64_t *limit)
{
	*blocks = atomic_load(&rfs->delayed.blocks);
	*peak = atomic_load(&rfs->delayed.peak);
	pthread_mutex_lock(&rfs->delayed.lock);
	*files = rfs->delayed.n + rfs->delayed.taken;
	pthread_mutex_unlock(&rfs->delayed.lock);
	*background = rr_hold_limits()->background_bytes;
	*limit = 2 * *background;
}

const struct rr_data_hooks data_hooks = {
	.flush_all = data_flush_all,
	.evict = data_evict,
	.truncate = data_truncate,
};

/*
 * After data went into ri's buffer: what the limits ask now.  By default a
 * file past DELAY_INODE_MAX becomes a stream, and the files' total past
 * DELAY_TOTAL_MAX flushes this one.  Held (-o delalloc=hold), past the
 * background threshold the flusher starts, oldest file first; past twice
 * it (vm.dirty_ratio's default against dirty_background_ratio's) the
 * writer writes its own pages, as balance_dirty_pages makes a writer wait
 * on them.  Caller holds rw exclusively.
 */
static void delay_limit(struct rr_fs *rfs, struct rr_inode *ri)
{
	uint64_t total = blk_start(rfs, atomic_load(&rfs->delayed.blocks));
	int stream;

	if (holding(rfs)) {
		if (total >= 2 * rr_hold_limits()->background_bytes)
			flush_locked(rfs, ri, 0);
		else if (flusher_dirty(rfs) >= rr_hold_limits()->background_bytes)
			rr_fs_kick_writeback(rfs);
		return;
	}
	stream = blk_start(rfs, atomic_load(&ri->dbuf.blocks)) >= DELAY_INODE_MAX;
	if (stream)
		atomic_store(&ri->streaming, 1);
	if (stream || total >= DELAY_TOTAL_MAX)
		flush_locked(rfs, ri, 0);
}

ssize_t data_write(struct rr_fs *rfs, struct rr_inode *ri, const char *buf, size_t size,
		   uint64_t off, int root, int delay, int *short_err)
{
	uint64_t end = off + size, pos, last;
	unsigned int wb;
	int ret;

	*short_err = 0;
	if (!size)
		return 0;
	if (end > max_size(rfs) || end < off)
		return -EFBIG;

	/* Fast path: an overwrite inside i_size of written blocks. */
	pthread_rwlock_rdlock(&ri->rw);
	ret = emap_ensure(rfs, ri);
	if (!ret && end <= ri->size && all_written(rfs, ri, off, size)) {
		ret = move_mapped(rfs, ri, (char *)buf, off, size, 1);
		if (!ret && data_times(rfs))
			ret = set_written_size(rfs, ri, ri->size, data_times(rfs));
		pthread_rwlock_unlock(&ri->rw);
		return ret ? ret : (ssize_t)size;
	}
	pthread_rwlock_unlock(&ri->rw);
	if (ret)
		return ret;

	if (delay && holding(rfs))
		free_space_push(rfs);
	pthread_rwlock_wrlock(&ri->rw);
	/* The writeback cache's pages of a stream: allocated now, as the kernel's writeback would. */
	wb = delay && atomic_load(&ri->streaming) ? RR_ALLOC_WRITEBACK : 0;
	delay = delay && !wb && !(holding(rfs) && free_space_short(rfs));
	ret = emap_ensure(rfs, ri);
	/* A direct write maps blocks: none may be waiting in the buffer. */
	if (!ret && !delay && ri->dbuf.cnt)
		ret = flush_locked(rfs, ri, 0);
	if (!ret && off > ri->size)
		ret = zero_old_tail(rfs, ri, off);
	last = (end - 1) >> rfs->bbits;
	pos = off;
	while (!ret && pos < end) {
		uint64_t lblk = pos >> rfs->bbits, seg_end;
		struct rr_ext m;
		uint32_t n;

		ret = emap_ensure(rfs, ri);
		if (ret)
			break;
		emap_lookup(&ri->emap, lblk, &m);
		n = m.len;
		if ((uint64_t)n > last - lblk + 1)
			n = (uint32_t)(last - lblk + 1);
		seg_end = blk_start(rfs, lblk + n);
		if (seg_end > end)
			seg_end = end;
		if (m.pblk && !m.uninit) {
			ret = move_mapped(rfs, ri, (char *)buf + (pos - off), pos, seg_end - pos, 1);
		} else if (m.pblk) {
			ret = write_whole_blocks(rfs, m.pblk, lblk, n, buf + (pos - off), pos, seg_end);
			if (!ret)
				ret = mark_written(rfs, ri, lblk, n, seg_end);
		} else {
			int64_t r = delay ? delay_write(rfs, ri, buf + (pos - off), pos, end, n, root) :
				    fill_hole(rfs, ri, buf + (pos - off), pos, end, n,
					      (root ? RR_ALLOC_USE_ROOT_RESV : 0) | wb, 1);

			/*
			 * No memory for the buffer (or too many runs for one
			 * file): what it holds goes out, and this write after
			 * it, at once; the map is looked up again.
			 */
			if (r == -ENOMEM && delay) {
				delay = 0;
				ret = flush_locked(rfs, ri, 0);
				continue;
			}
			if (r < 0)
				ret = (int)r;
			else
				seg_end = (uint64_t)r;
		}
		if (!ret)
			pos = seg_end;
	}
	/* A short write still counts: report what reached the file, and why it stopped. */
	if (pos > off) {
		int r2 = 0;

		if (pos > ri->size || data_times(rfs))
			r2 = set_written_size(rfs, ri, pos > ri->size ? pos : ri->size, data_times(rfs));
		*short_err = ret;
		ret = r2;
	}
	/* A flush that fails here leaves the data buffered: fsync reports it. */
	if (!ret && delay)
		delay_limit(rfs, ri);
	pthread_rwlock_unlock(&ri->rw);
	return ret ? ret : (ssize_t)(pos - off);
}

/* Free blocks [first, last] (inclusive) of the file.  Caller holds rw exclusively. */
static int punch_blocks(struct rr_fs *rfs, struct rr_inode *ri, uint64_t first, uint64_t last)
{
	struct ext2_inode_large in;
	int ret;

	if (first > last)
		return 0;
	rr_fs_lock(rfs);
	/* As ext4 on truncate and punch: the file's preallocations go first. */
	rr_alloc_discard_inode(rfs->alloc, ri->ino);
	ret = inode_load(rfs, ri->ino, &in);
	if (!ret)
		ret = emap_tree_punch(rfs, ri->ino, &in, first, last);
	rr_fs_end_op(rfs);
	emap_drop(ri);
	return ret;
}

/* Is any block at or past lblk mapped?  Caller holds rw. */
static int mapped_from(const struct rr_inode *ri, uint64_t lblk)
{
	const struct rr_emap *m = &ri->emap;

	return m->n && (uint64_t)m->v[m->n - 1].lblk + m->v[m->n - 1].len > lblk;
}

/*
 * Shrink to size, or to the same size to drop blocks past EOF (fallocated
 * with KEEP_SIZE), as ext4 does.  On the orphan list meanwhile, with i_size
 * final before any block goes: a crash leaves a truncate that the next
 * mount (or the kernel, or e2fsck) finishes by truncating to i_size.
 */
static int shrink(struct rr_fs *rfs, struct rr_inode *ri, uint64_t size, int times)
{
	uint64_t keep = (size + rfs->bsize - 1) >> rfs->bbits;
	int ret, ret2;

	ret = orphan_truncate_begin(rfs, ri->ino);
	if (ret)
		return ret;
	ret = set_size(rfs, ri, size, times);
	if (!ret)
		ret = zero_partial(rfs, ri, size, blk_start(rfs, keep));
	if (!ret)
		ret = punch_blocks(rfs, ri, keep, (1ULL << 32) - 1);
	/* Left listed on failure: the next mount finishes it. */
	ret2 = ret ? 0 : orphan_truncate_done(rfs, ri->ino);
	return ret ? ret : ret2;
}

int data_truncate(struct rr_fs *rfs, struct rr_inode *ri, uint64_t size)
{
	uint64_t old;
	int ret;

	if (size > max_size(rfs))
		return -EFBIG;
	pthread_rwlock_wrlock(&ri->rw);
	ret = emap_ensure(rfs, ri);
	old = ri->size;
	if (!ret && size < old && ri->dbuf.cnt) {
		uint64_t before = atomic_load(&ri->dbuf.blocks);

		rr_alloc_unreserve(rfs->alloc, dbuf_truncate(&ri->dbuf, rfs->bbits, size));
		delay_account(rfs, ri, before);
	}
	if (!ret && (size < old ||
		     (size == old && mapped_from(ri, (size + rfs->bsize - 1) >> rfs->bbits)))) {
		ret = shrink(rfs, ri, size, size != old ? data_times(rfs) : 0);
	} else if (!ret) {
		if (size > old)
			ret = zero_old_tail(rfs, ri, size);
		if (!ret)
			ret = set_size(rfs, ri, size, size != old ? data_times(rfs) : 0);
	}
	pthread_rwlock_unlock(&ri->rw);
	return ret;
}

/*
 * Grow i_size to size (a hole up to it), never shrink: a page the kernel
 * wrote back and we refused for ENOSPC has already grown the file in the
 * kernel's view, and the image keeps the size the kernel shows.
 */
int data_grow(struct rr_fs *rfs, struct rr_inode *ri, uint64_t size)
{
	int ret;

	if (size > max_size(rfs))
		return -EFBIG;
	pthread_rwlock_wrlock(&ri->rw);
	ret = emap_ensure(rfs, ri);
	if (!ret && size > ri->size) {
		ret = zero_old_tail(rfs, ri, size);
		if (!ret)
			ret = set_size(rfs, ri, size, data_times(rfs));
	}
	pthread_rwlock_unlock(&ri->rw);
	return ret;
}

/* Blocks in [first, first+n) that are holes. Caller holds rw. */
static uint64_t count_holes(struct rr_fs *rfs, struct rr_inode *ri, uint64_t first, uint64_t n)
{
	uint64_t lblk = first, end = first + n, holes = 0;
	struct rr_ext m;

	(void)rfs;
	while (lblk < end) {
		uint64_t len;

		emap_lookup(&ri->emap, lblk, &m);
		len = m.len < end - lblk ? m.len : end - lblk;
		if (!m.pblk)
			holes += len;
		lblk += len;
	}
	return holes;
}

/*
 * Allocate unwritten extents over the holes of blocks [first, first+n),
 * and nothing outside them (libext2fs's ext2fs_fallocate fills the whole
 * hole up to the next extent).  As ext4: a range one extent can hold is
 * asked for exactly (no window, nothing preallocated), a longer one in
 * normalised requests; extent-mapped files only; when
 * the space is not there, ENOSPC before anything is taken; should the
 * extent tree find no room halfway, what is mapped stays mapped and
 * accounted, and the call fails with that error.  Caller holds rw.
 */
static int alloc_unwritten(struct rr_fs *rfs, struct rr_inode *ri, uint64_t first, uint64_t n,
			   int root)
{
	uint64_t need = count_holes(rfs, ri, first, n), lblk = first, end = first + n;
	unsigned int flags = RR_ALLOC_DATA | RR_ALLOC_NOLOCK | (root ? RR_ALLOC_USE_ROOT_RESV : 0) |
			     (n <= EXT_UNINIT_MAX_LEN ? RR_ALLOC_EXACT : 0);
	int ret = 0;

	if (!need)
		return 0;
	if (!ri->extents)
		return -EOPNOTSUPP;
	if (need > rr_alloc_avail(rfs->alloc, root))
		return -ENOSPC;
	while (lblk < end && !ret) {
		struct rr_alloc_req req = { .ino = ri->ino, .lblk = lblk, .flags = flags };
		struct rr_extent ex;
		struct rr_ext m;
		uint64_t len;

		emap_lookup(&ri->emap, lblk, &m);
		len = m.len < end - lblk ? m.len : end - lblk;
		if (m.pblk) {
			lblk += len;
			continue;
		}
		req.len = (uint32_t)(len < EXT_UNINIT_MAX_LEN ? len : EXT_UNINIT_MAX_LEN);
		emap_alloc_hint(rfs, ri, lblk, &req);
		ret = rr_alloc_blocks(rfs->alloc, &req, &ex);
		if (!ret)
			ret = map_run(rfs, ri, lblk, &ex, 1, 0, 0, 0);
		if (!ret)
			lblk += ex.len;
	}
	return ret;
}

int data_fallocate(struct rr_fs *rfs, struct rr_inode *ri, int mode, uint64_t off, uint64_t len,
		   int root)
{
	uint64_t end = off + len, first, last_excl;
	int ret;

	if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE))
		return -EOPNOTSUPP;
	if ((mode & FALLOC_FL_PUNCH_HOLE) && (mode & FALLOC_FL_ZERO_RANGE))
		return -EOPNOTSUPP;
	if ((mode & FALLOC_FL_PUNCH_HOLE) && !(mode & FALLOC_FL_KEEP_SIZE))
		return -EOPNOTSUPP;
	if (!len || end < off)
		return -EINVAL;
	if (end > max_size(rfs))
		return -EFBIG;

	pthread_rwlock_wrlock(&ri->rw);
	ret = emap_ensure(rfs, ri);
	if (!ret && ri->dbuf.cnt)
		ret = flush_locked(rfs, ri, 0);
	if (ret)
		goto out;
	/* Whole blocks inside the range, and the block span it touches. */
	first = (off + rfs->bsize - 1) >> rfs->bbits;
	last_excl = end >> rfs->bbits;
	if (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) {
		uint64_t head_end = blk_start(rfs, first);

		if (first > last_excl) {
			/* Inside one block. */
			ret = zero_partial(rfs, ri, off, end);
		} else {
			ret = zero_partial(rfs, ri, off, head_end < end ? head_end : end);
			if (!ret)
				ret = zero_partial(rfs, ri, blk_start(rfs, last_excl) > off ?
						   blk_start(rfs, last_excl) : off, end);
			if (!ret && first < last_excl)
				ret = punch_blocks(rfs, ri, first, last_excl - 1);
		}
		if (!ret && (mode & FALLOC_FL_ZERO_RANGE)) {
			uint64_t s = off >> rfs->bbits, e = (end + rfs->bsize - 1) >> rfs->bbits;

			ret = emap_ensure(rfs, ri);
			if (!ret)
				ret = alloc_unwritten(rfs, ri, s, e - s, root);
		}
	} else {
		uint64_t s = off >> rfs->bbits, e = (end + rfs->bsize - 1) >> rfs->bbits;

		ret = alloc_unwritten(rfs, ri, s, e - s, root);
	}
	if (ret)
		goto out;
	if (!(mode & FALLOC_FL_KEEP_SIZE) && end > ri->size) {
		ret = emap_ensure(rfs, ri);
		if (!ret)
			ret = zero_old_tail(rfs, ri, end);
		if (!ret)
			ret = set_size(rfs, ri, end, data_times(rfs));
	} else if (data_times(rfs)) {
		ret = set_size(rfs, ri, ri->size,
			       (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) ?
			       RR_MTIME | RR_CTIME : RR_CTIME);
	}
out:
	pthread_rwlock_unlock(&ri->rw);
	return ret;
}

int64_t data_seek(struct rr_fs *rfs, struct rr_inode *ri, uint64_t off, int whence)
{
	uint64_t size, lblk;
	struct rr_ext m;
	int64_t ret = -ENXIO;
	int ret2;

	/* Buffered data is data: give it its blocks, and the map answers. */
	ret2 = data_flush(rfs, ri, 0);
	if (ret2)
		return ret2;
	pthread_rwlock_rdlock(&ri->rw);
	ret2 = emap_ensure(rfs, ri);
	size = ri->size;
	if (ret2) {
		ret = ret2;
		goto out;
	}
	if (off >= size)
		goto out;
	/* Unwritten extents read as zeros: they count as holes here. */
	for (lblk = off >> rfs->bbits; blk_start(rfs, lblk) < size; lblk += m.len) {
		int data;

		emap_lookup(&ri->emap, lblk, &m);
		data = m.pblk && !m.uninit;
		if ((whence == SEEK_DATA) == !!data) {
			uint64_t at = blk_start(rfs, lblk);

			ret = (int64_t)(at > off ? at : off);
			if ((uint64_t)ret > size)
				ret = (int64_t)size;
			goto out;
		}
		if (m.len == UINT32_MAX)
			break;
	}
	ret = whence == SEEK_HOLE ? (int64_t)size : -ENXIO;
out:
	pthread_rwlock_unlock(&ri->rw);
	return ret;
}

/*
 * Give a new inode (no rr_inode yet, not visible) its first blocks of data,
 * e.g. a slow symlink's target.  Caller holds the fs lock; in is written.
 */
int data_write_new_file(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in,
			const char *buf, size_t len)
{
	uint32_t nblk = (uint32_t)((len + rfs->bsize - 1) >> rfs->bbits);
	struct rr_alloc_req req = { .ino = ino, .len = nblk, .flags = RR_ALLOC_METADATA | RR_ALLOC_IMMEDIATE };
	struct rr_extent ex;
	int ret;

	req.goal = ext2fs_find_inode_goal(rfs->fs, ino, (struct ext2_inode *)in, 0);
	ret = rr_alloc_blocks(rfs->alloc, &req, &ex);
	if (!ret && ex.len < nblk) {
		rr_free_blocks(rfs->alloc, ex.pblk, ex.len);
		ret = -ENOSPC;
	}
	if (ret)
		return ret;
	ret = write_whole_blocks(rfs, ex.pblk, 0, nblk, buf, 0, len);
	if (!ret)
		ret = emap_tree_map(rfs, ino, in, 0, ex.pblk, nblk, 0);
	if (!ret)
		ret = rr_err_ino(rfs, ext2fs_inode_size_set(rfs->fs, (struct ext2_inode *)in, len), ino);
	if (!ret)
		ret = inode_write(rfs, ino, in);
	if (ret)
		rr_free_blocks(rfs->alloc, ex.pblk, ex.len);
	return ret;
}

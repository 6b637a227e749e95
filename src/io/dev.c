// SPDX-License-Identifier: GPL-2.0
/*
 * rr_io: the device manager, at the bottom of the I/O stack (layer.h).
 *
 * Every metadata read and write is a pread/pwrite on the one descriptor the
 * data path also uses (unless the data path's transfer goes O_DIRECT), in
 * the order of the calls (data writes may wait in the write-behind run,
 * which goes out before anything else touches the device): caching is the layers' above (cache.c), which see
 * every data transfer before it reaches this file.  Not libext2fs's
 * unix_io: its block cache is not safe against the data path writing the
 * same device from other threads.
 */
#include "dev.h"
#include "layer.h"
#include "log.h"
#include "trace.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

/* The device (image file or block device) under the channel; the data path's handle. */
struct io_dev {
	struct io_layer layer;	/* first: the stack's view (nothing below, nothing to do with data) */
	int fd;
	/*
	 * A second descriptor, O_DIRECT, or -1 (read-only, or a file system
	 * with no O_DIRECT).  Under -o direct (direct) every data transfer it
	 * can take goes through it; otherwise only big writes from aligned
	 * memory (direct_as_is).
	 */
	int dfd;
	unsigned int dalign;	/* its offset, length and memory alignment */
	int direct;		/* the data path bypasses the page cache (io_set_direct) */
	int bdev;		/* a block device */
	/*
	 * A block device opened without IO_FLAG_EXCLUSIVE: the kernel claims
	 * it at mount (a fuseblk mount), so it is not held with O_EXCL here.
	 */
	int shared;
	/*
	 * The mount's block trace (-o trace=), or NULL: the io_option
	 * "trace=ADDRESS" (rr_io_set_option) sets it right after the open,
	 * before any transfer; the mount closes it after the channel.
	 */
	struct io_trace *trace;
	const char *name;	/* the channel's */
	/* Calls that moved bytes (io_dev_stats); relaxed atomics, any thread. */
	atomic_uint_fast64_t meta_reads, meta_writes, meta_bytes, data_reads, data_writes, flushes;
	atomic_uint_fast64_t data_spliced;	/* of data_reads: handed out as a descriptor (io_data_read_fd) */
	atomic_uint_fast64_t data_runs;		/* syscalls that wrote the data_writes */
	atomic_uint_fast64_t wb_starts;		/* writebacks started (wb_start) */
	/*
	 * Write-behind on the buffered descriptor: a data write shorter than
	 * PEND_COPY_MAX that continues the run waiting here joins it (a longer
	 * one goes out at once), and the run goes out in one pwrite
	 * when it is full or broken, before a read or trim that overlaps it,
	 * and before every metadata write, flush and close (pend_out), so the
	 * device sees the calls' bytes in their order where it shows.  Small files written
	 * one after another lie one after another on the device: one write
	 * for a run of them instead of one each.  A failed run is logged and
	 * told to the next flush, as the kernel tells a failed writeback to
	 * fsync (a commit then does not go ahead).  pend_lock guards the run
	 * and pend_err; pend_any says, lock-free, that a run waits.
	 */
	pthread_mutex_t pend_lock;
	char *pend;
	size_t pend_len;
	uint64_t pend_off;
	int pend_err;
	atomic_int pend_any;
	/*
	 * Data bytes written to the buffered descriptor since its writeback
	 * was last started (wb_start): relaxed, any thread.
	 */
	atomic_uint_fast64_t wb_unstarted;
};

#define PEND_SIZE (256u << 10)
/* Data writes this long do not wait in the run (pend_write). */
#define PEND_COPY_MAX (64u << 10)
/*
 * Buffered data this large starts going to the device at once, as the
 * kernel's writeback would start a file's dirty pages: a flush (a commit,
 * fsync, rrctl sync) then finds most of it written instead of waiting for
 * all of it.  Without this the host keeps the image's pages dirty until its
 * own thresholds (a tenth of memory), and every sync pays for them.
 */
#define WB_START_BYTES (4u << 20)

/*
 * How long an open waits for the image's previous holder to let go: an
 * rrfuse whose mount is gone but which is still writing the image out (its
 * unmount returned early: fusermount3 -u, umount without the helper).
 */
#define IO_HOLDER_WAIT_SECS 60
#define IO_HOLDER_POLL_MS 20

/* queue/rotational of block device dev, or of its disk when dev is a partition: 1, 0, or -1. */
static int sys_rotational(dev_t dev)
{
	static const char *const where[] = { "queue/rotational", "../queue/rotational" };
	char path[96], c = 0;
	size_t i;

	for (i = 0; i < sizeof(where) / sizeof(where[0]); i++) {
		FILE *f;

		snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/%s", major(dev), minor(dev), where[i]);
		f = fopen(path, "re");
		if (!f)
			continue;
		if (fread(&c, 1, 1, f) != 1)
			c = 0;
		fclose(f);
		return c == '1';
	}
	return -1;
}

int io_dev_rotational(const char *path)
{
	struct stat st;
	int r;

	if (stat(path, &st))
		return 0;
	r = sys_rotational(S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev);
	return r > 0;
}

long io_lock_holder(int fd)
{
	char line[256], want[64];
	struct stat st;
	long pid = 0;
	FILE *f;

	if (fstat(fd, &st))
		return 0;
	snprintf(want, sizeof(want), "%02x:%02x:%llu ", major(st.st_dev), minor(st.st_dev),
		 (unsigned long long)st.st_ino);
	f = fopen("/proc/locks", "re");
	if (!f)
		return 0;
	/* "1: FLOCK  ADVISORY  WRITE 1234 fe:01:5678 0 EOF" */
	while (!pid && fgets(line, sizeof(line), f)) {
		char *p = strstr(line, want);
		long v;

		if (!strstr(line, "FLOCK") || !p)
			continue;
		while (p > line && p[-1] == ' ')
			p--;
		while (p > line && p[-1] != ' ')
			p--;
		v = strtol(p, NULL, 10);
		if (v > 0)
			pid = v;
	}
	fclose(f);
	return pid;
}

/*
 * Take the image's lock: exclusive for writing, shared for reading, so two
 * rrfuse never write one image, and whoever waits for an rrfuse to finish
 * (rrfuse -u, the next mount) waits for this lock.  A held lock is waited
 * for, bounded, saying so; 0 or an errno (EBUSY: still held).
 */
static int lock_image(int fd, int rw, const char *name)
{
	int op = rw ? LOCK_EX : LOCK_SH;
	struct timespec t0, now;
	long pid;

	if (!flock(fd, op | LOCK_NB))
		return 0;
	if (errno != EWOULDBLOCK)
		return errno;
	pid = io_lock_holder(fd);
	if (pid > 0)
		rr_log(LOG_NOTICE, "%s is held by process %ld (a previous rrfuse still writing it out?): "
		       "waiting up to %d s for it to let go", name, pid, IO_HOLDER_WAIT_SECS);
	else
		rr_log(LOG_NOTICE, "%s is held by another process: waiting up to %d s for it to let go",
		       name, IO_HOLDER_WAIT_SECS);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		usleep(IO_HOLDER_POLL_MS * 1000);
		if (!flock(fd, op | LOCK_NB)) {
			rr_log(LOG_NOTICE, "%s: let go, going on", name);
			return 0;
		}
		if (errno != EWOULDBLOCK)
			return errno;
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (now.tv_sec - t0.tv_sec < IO_HOLDER_WAIT_SECS);
	return EBUSY;
}

static struct io_dev *dev_of(io_channel ch)
{
	return io_bottom(ch)->private_data;
}

static void tally(atomic_uint_fast64_t *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

void io_dev_stats(io_channel ch, struct io_dev_stats *st)
{
	struct io_dev *d = dev_of(ch);

	st->meta_reads = atomic_load_explicit(&d->meta_reads, memory_order_relaxed);
	st->meta_writes = atomic_load_explicit(&d->meta_writes, memory_order_relaxed);
	st->meta_bytes = atomic_load_explicit(&d->meta_bytes, memory_order_relaxed);
	st->data_reads = atomic_load_explicit(&d->data_reads, memory_order_relaxed);
	st->data_spliced = atomic_load_explicit(&d->data_spliced, memory_order_relaxed);
	st->data_writes = atomic_load_explicit(&d->data_writes, memory_order_relaxed);
	st->data_runs = atomic_load_explicit(&d->data_runs, memory_order_relaxed);
	st->wb_starts = atomic_load_explicit(&d->wb_starts, memory_order_relaxed);
	st->flushes = atomic_load_explicit(&d->flushes, memory_order_relaxed);
}

static int io_pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	char *p = buf;

	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0) {
			/* Past the end of the image: what was never written reads as zero. */
			memset(p, 0, len);
			return 0;
		}
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

static int io_pwritev_all(int fd, struct iovec *iov, int iovcnt, uint64_t off)
{
	while (iovcnt > 0) {
		ssize_t n = pwritev(fd, iov, iovcnt, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		off += (uint64_t)n;
		while (iovcnt > 0 && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			iovcnt--;
		}
		if (iovcnt > 0) {
			iov->iov_base = (char *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

static int io_pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return io_pwritev_all(fd, &iov, 1, off);
}

static int io_flush(int fd)
{
	return fdatasync(fd) ? -errno : 0;
}

/* Set by io_data_direct: this thread's data writes serve an application's direct write. */
static __thread int data_direct;

void io_data_direct(int on)
{
	data_direct = on;
}

/* One system call of file data on the buffered descriptor: counted, and owed to wb_start. */
static int data_pwritev(struct io_dev *priv, struct iovec *iov, int iovcnt, uint64_t off, size_t len)
{
	tally(&priv->data_runs);
	atomic_fetch_add_explicit(&priv->wb_unstarted, len, memory_order_relaxed);
	return io_pwritev_all(priv->fd, iov, iovcnt, off);
}

/* Write the waiting run out.  Under pend_lock. */
static void pend_out_locked(struct io_dev *priv)
{
	struct iovec iov = { .iov_base = priv->pend, .iov_len = priv->pend_len };
	int ret;

	if (!priv->pend_len)
		return;
	ret = data_pwritev(priv, &iov, 1, priv->pend_off, priv->pend_len);
	if (ret) {
		rr_log(LOG_ERR, "%s: I/O error writing data, %zu bytes at %llu: %s", priv->name,
		       priv->pend_len, (unsigned long long)priv->pend_off, strerror(-ret));
		if (!priv->pend_err)
			priv->pend_err = ret;
	}
	priv->pend_len = 0;
	atomic_store(&priv->pend_any, 0);
}

/*
 * Before a use of [off, off+len) of the device (len 0: all of it): the
 * waiting run goes first if it overlaps, so the use sees or overwrites it
 * in the calls' order.  A read elsewhere needs nothing; every metadata
 * write takes the run first (len 0), so that no metadata on the device
 * ever names data that is not there, whatever comes after.
 */
static void pend_out(struct io_dev *priv, uint64_t off, uint64_t len)
{
	if (!atomic_load(&priv->pend_any))
		return;
	pthread_mutex_lock(&priv->pend_lock);
	if (!len || (off < priv->pend_off + priv->pend_len && priv->pend_off < off + len))
		pend_out_locked(priv);
	pthread_mutex_unlock(&priv->pend_lock);
}

/*
 * A buffered data write: joins the waiting run, or starts one.  One of
 * PEND_COPY_MAX or more goes out at once from the caller's buffer, outside
 * pend_lock (a waiting run it overlaps first): the run would save it no
 * system call worth the copy (an O_DIRECT stream's 128 KiB WRITE: a
 * 128 KiB memcpy each), and writers of different files would queue on the
 * lock for each other's copies and pwrites (issue 39).  One that serves an
 * application's direct write (io_data_direct) is not owed to wb_start:
 * the writer waits for each WRITE's reply, and with the image's writeback
 * running beside its pwrites (the host writing back the same file, the
 * starter waiting for the device's queue) seed 002's two O_DIRECT streams
 * wrote at half d394f4e's speed.  Its pages go out with the flush that
 * asks for them, or by the host's own writeback.
 */
static int pend_write(struct io_dev *priv, struct iovec *iov, int iovcnt, uint64_t off, size_t len)
{
	int i, ret = 0;

	if (len >= PEND_COPY_MAX) {
		pend_out(priv, off, len);
		if (!data_direct)
			return data_pwritev(priv, iov, iovcnt, off, len);
		tally(&priv->data_runs);
		return io_pwritev_all(priv->fd, iov, iovcnt, off);
	}
	pthread_mutex_lock(&priv->pend_lock);
	if (priv->pend_len && (off != priv->pend_off + priv->pend_len || priv->pend_len + len > PEND_SIZE))
		pend_out_locked(priv);
	if (!priv->pend)
		priv->pend = malloc(PEND_SIZE);
	if (!priv->pend) {
		ret = data_pwritev(priv, iov, iovcnt, off, len);
	} else {
		if (!priv->pend_len)
			priv->pend_off = off;
		for (i = 0; i < iovcnt; i++) {
			memcpy(priv->pend + priv->pend_len, iov[i].iov_base, iov[i].iov_len);
			priv->pend_len += iov[i].iov_len;
		}
		atomic_store(&priv->pend_any, 1);
	}
	pthread_mutex_unlock(&priv->pend_lock);
	return ret;
}

/*
 * Start the writeback of the image's dirty pages once WB_START_BYTES of data
 * have been written since the last start; not waiting for it.  Outside
 * pend_lock; a caller may hold the fs lock (a slow symlink's target is
 * written under it), so the call must not wait long: it may wait for the
 * device's queue, never for the written pages themselves, and never for a
 * page of the FUSE mount.  Its errors reach the next flush (fdatasync
 * reports a failed writeback).
 */
static void wb_start(struct io_dev *priv)
{
	if (atomic_load_explicit(&priv->wb_unstarted, memory_order_relaxed) < WB_START_BYTES)
		return;
	/* One thread starts it; the others go on. */
	if (atomic_exchange(&priv->wb_unstarted, 0) < WB_START_BYTES)
		return;
	tally(&priv->wb_starts);
	sync_file_range(priv->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
}

/*
 * The O_DIRECT descriptor: a second open of the same file (the exclusive
 * hold and the lock stay on fd).  0 or -errno.
 */
static int open_direct(struct io_dev *priv)
{
	int sector = 0;

	if (priv->dfd >= 0)
		return 0;
	priv->dfd = open(priv->name, (fcntl(priv->fd, F_GETFL) & O_ACCMODE) | O_DIRECT | O_CLOEXEC);
	if (priv->dfd < 0)
		return -errno;
	/* Devices: their logical sector; files: a page covers every file system's need. */
	priv->dalign = priv->bdev && ioctl(priv->fd, BLKSSZGET, &sector) == 0 && sector > 0 ?
		       (unsigned int)sector : 4096;
	return 0;
}

static errcode_t rr_io_open(const char *name, int flags, io_channel *channel)
{
	struct io_dev *priv = NULL;
	io_channel ch = NULL;
	errcode_t err;
	struct stat st;
	int oflags, fd;

	if (!name)
		return EXT2_ET_BAD_DEVICE_NAME;
	/*
	 * What the open needs comes in flags, which libext2fs builds from
	 * ext2fs_open2's (EXT2_FLAG_RW, EXT2_FLAG_EXCLUSIVE): its io_options
	 * reach a channel only once it is open (set_option).
	 */
	oflags = (flags & IO_FLAG_RW) ? O_RDWR : O_RDONLY;
	oflags |= O_CLOEXEC;
	fd = open(name, oflags);
	if (fd < 0)
		return errno;
	if (fstat(fd, &st) == 0 && S_ISBLK(st.st_mode) && (oflags & O_RDWR)) {
		/* O_EXCL on a block device fails if the kernel has it mounted. */
		int efd = open(name, oflags | O_EXCL), devro = 0;

		/* A read-only device opens for writing and then fails every write. */
		if (efd >= 0 && ioctl(efd, BLKROGET, &devro) == 0 && devro) {
			close(efd);
			efd = -1;
			errno = EROFS;
		}

		if (efd < 0) {
			err = errno;
			close(fd);
			return err;
		}
		/*
		 * Mounted as fuseblk, the kernel claims the device itself at
		 * mount, which our exclusive open would refuse: it was only a probe.
		 */
		if (!(flags & IO_FLAG_EXCLUSIVE)) {
			close(efd);
		} else {
			close(fd);
			fd = efd;
		}
	}
	err = lock_image(fd, oflags & O_RDWR, name);
	if (err) {
		close(fd);
		return err;
	}

	err = ext2fs_get_memzero(sizeof(*ch), &ch);
	if (!err)
		err = ext2fs_get_memzero(sizeof(*priv), &priv);
	if (!err)
		err = ext2fs_get_mem(strlen(name) + 1, &ch->name);
	if (err) {
		close(fd);
		ext2fs_free_mem(&priv);
		ext2fs_free_mem(&ch);
		return err;
	}
	strcpy(ch->name, name);
	pthread_mutex_init(&priv->pend_lock, NULL);
	priv->fd = fd;
	priv->dfd = -1;
	priv->bdev = S_ISBLK(st.st_mode);
	priv->shared = priv->bdev && !(flags & IO_FLAG_EXCLUSIVE);
	ch->magic = EXT2_ET_MAGIC_IO_CHANNEL;
	ch->manager = rr_io_manager;
	ch->block_size = 1024;
	ch->refcount = 1;
	ch->flags = CHANNEL_FLAGS_THREADS;
	if (S_ISBLK(st.st_mode))
		ch->flags |= CHANNEL_FLAGS_BLOCK_DEVICE;
	ch->private_data = priv;
	priv->name = ch->name;
	if (oflags & O_RDWR)
		open_direct(priv);
	*channel = ch;
	return 0;
}

static errcode_t rr_io_close(io_channel ch)
{
	struct io_dev *priv = ch->private_data;

	pend_out(priv, 0, 0);
	if (--ch->refcount > 0)
		return 0;
	free(priv->pend);
	pthread_mutex_destroy(&priv->pend_lock);
	/* Before the lock goes with the descriptor: the trace is complete for whoever waits. */
	trace_io(priv->trace, TRACE_NONE, TRACE_CLOSE, 0, 0);
	if (priv->dfd >= 0)
		close(priv->dfd);
	close(priv->fd);
	ext2fs_free_mem(&ch->private_data);
	ext2fs_free_mem(&ch->name);
	ext2fs_free_mem(&ch);
	return 0;
}

static errcode_t rr_io_set_blksize(io_channel ch, int blksize)
{
	ch->block_size = blksize;
	return 0;
}

static errcode_t rr_io_read_blk64(io_channel ch, unsigned long long block, int count, void *data)
{
	struct io_dev *priv = ch->private_data;
	size_t len = (size_t)io_count_bytes(ch, count);
	int ret;

	pend_out(priv, block * (uint64_t)ch->block_size, len);
	trace_io(priv->trace, TRACE_META, TRACE_READ, block * (uint64_t)ch->block_size, len);
	tally(&priv->meta_reads);
	ret = io_pread_all(priv->fd, data, len, block * (uint64_t)ch->block_size);

	if (ret && ch->read_error)
		return ch->read_error(ch, (unsigned long)block, count, data, len, 0, -ret);
	return ret ? (errcode_t)-ret : 0;
}

static errcode_t rr_io_write_blk64(io_channel ch, unsigned long long block, int count,
				   const void *data)
{
	struct io_dev *priv = ch->private_data;
	size_t len = (size_t)io_count_bytes(ch, count);
	int ret;

	pend_out(priv, 0, 0);
	trace_io(priv->trace, TRACE_META, TRACE_WRITE, block * (uint64_t)ch->block_size, len);
	tally(&priv->meta_writes);
	atomic_fetch_add_explicit(&priv->meta_bytes, len, memory_order_relaxed);
	ret = io_pwrite_all(priv->fd, data, len, block * (uint64_t)ch->block_size);

	if (ret && ch->write_error)
		return ch->write_error(ch, (unsigned long)block, count, data, len, 0, -ret);
	return ret ? (errcode_t)-ret : 0;
}

static errcode_t rr_io_write_byte(io_channel ch, unsigned long offset, int size, const void *data)
{
	struct io_dev *priv = ch->private_data;
	int ret;

	pend_out(priv, 0, 0);
	trace_io(priv->trace, TRACE_META, TRACE_WRITE, offset, (uint64_t)size);
	tally(&priv->meta_writes);
	atomic_fetch_add_explicit(&priv->meta_bytes, (uint64_t)size, memory_order_relaxed);
	ret = io_pwrite_all(priv->fd, data, (size_t)size, offset);

	return ret ? (errcode_t)-ret : 0;
}

static errcode_t rr_io_flush(io_channel ch)
{
	struct io_dev *priv = ch->private_data;
	int ret, failed;

	/* A run that failed since the last flush fails this one: what it wrote is not there. */
	pthread_mutex_lock(&priv->pend_lock);
	pend_out_locked(priv);
	failed = priv->pend_err;
	priv->pend_err = 0;
	pthread_mutex_unlock(&priv->pend_lock);
	trace_io(priv->trace, TRACE_NONE, TRACE_SYNC, 0, 0);
	tally(&priv->flushes);
	ret = io_flush(priv->fd);
	if (!ret)
		ret = failed;

	return ret ? (errcode_t)-ret : 0;
}

/* Ask the kernel to start reading blocks that will be read soon (bitmaps at mount). */
static errcode_t rr_io_cache_readahead(io_channel ch, unsigned long long block,
				       unsigned long long count)
{
	struct io_dev *priv = ch->private_data;

	posix_fadvise(priv->fd, (off_t)(block * ch->block_size), (off_t)(count * ch->block_size),
		      POSIX_FADV_WILLNEED);
	return 0;
}

/*
 * trace=ADDRESS: the mount's block trace (trace.h), a struct io_trace of
 * this process whose address the mount writes as the value (io_options
 * are strings), which then sees the device opened.  The bottom of the
 * stack: an option no layer above took is unknown (as unix_io says).
 */
static errcode_t rr_io_set_option(io_channel ch, const char *option, const char *arg)
{
	struct io_dev *priv = ch->private_data;
	unsigned long long addr;
	char *end;

	if (strcmp(option, "trace") || !arg || !*arg || priv->trace)
		return EXT2_ET_INVALID_ARGUMENT;
	errno = 0;
	addr = strtoull(arg, &end, 0);
	if (*end || errno || !addr)
		return EXT2_ET_INVALID_ARGUMENT;
	priv->trace = (struct io_trace *)(uintptr_t)addr;
	trace_io(priv->trace, TRACE_NONE, TRACE_OPEN, 0, 0);
	return 0;
}

static errcode_t rr_io_zeroout(io_channel ch, unsigned long long block, unsigned long long count)
{
	struct io_dev *priv = ch->private_data;
	static const char zero[65536];
	uint64_t off = block * (uint64_t)ch->block_size;
	uint64_t len = count * (uint64_t)ch->block_size;

	pend_out(priv, 0, 0);
	trace_io(priv->trace, TRACE_META, TRACE_WRITE, off, len);
	while (len) {
		size_t n = len > sizeof(zero) ? sizeof(zero) : (size_t)len;
		int ret;

		tally(&priv->meta_writes);
		atomic_fetch_add_explicit(&priv->meta_bytes, n, memory_order_relaxed);
		ret = io_pwrite_all(priv->fd, zero, n, off);

		if (ret)
			return (errcode_t)-ret;
		off += n;
		len -= n;
	}
	return 0;
}

/*
 * Tell the device that blocks hold nothing: BLKDISCARD on a block device, a
 * punched hole in an image file (so a sparse image shrinks).  EOPNOTSUPP if
 * the device or the file system under the image cannot.
 */
static errcode_t rr_io_discard(io_channel ch, unsigned long long block, unsigned long long count)
{
	struct io_dev *priv = ch->private_data;
	uint64_t r[2] = { block * (uint64_t)ch->block_size, count * (uint64_t)ch->block_size };
	int ret;

	pend_out(priv, r[0], r[1]);
	trace_io(priv->trace, TRACE_NONE, TRACE_TRIM, r[0], r[1]);
	/*
	 * A fuseblk mount's device is claimed by the kernel, so BLKDISCARD
	 * cannot take it over to drop the range's page cache and only
	 * invalidates it, which fails with EBUSY on a dirty page (a freed
	 * metadata block written through the cache): write the range first.
	 */
	if (priv->shared)
		sync_file_range(priv->fd, (off_t)r[0], (off_t)r[1],
				SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
	if (ch->flags & CHANNEL_FLAGS_BLOCK_DEVICE)
		ret = ioctl(priv->fd, BLKDISCARD, r);
	else
		ret = fallocate(priv->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)r[0], (off_t)r[1]);
	if (ret && (errno == ENOTTY || errno == EINVAL))
		errno = EOPNOTSUPP;
	return ret ? errno : 0;
}

/* ---- the data path's transfers, on the device's own descriptors ---- */

int io_set_direct(io_channel ch, int mode, char *msg, size_t msglen)
{
	struct io_dev *priv = dev_of(ch);
	int ret;

	if (mode < 0)
		mode = priv->bdev;	/* auto: devices only */
	if (!mode)
		return 0;
	pend_out(priv, 0, 0);
	ret = open_direct(priv);
	if (ret) {
		snprintf(msg, msglen, "%s: cannot open with O_DIRECT: %s", priv->name, strerror(-ret));
		return ret;
	}
	priv->direct = 1;
	return 0;
}

/*
 * Each FUSE worker has its own aligned bounce buffer: libfuse hands write
 * data 80 bytes into its receive buffer, which O_DIRECT cannot take.
 */
#define BOUNCE_SIZE (1u << 20)
static pthread_key_t bounce_key;
static pthread_once_t bounce_once = PTHREAD_ONCE_INIT;

static void bounce_key_init(void)
{
	pthread_key_create(&bounce_key, free);
}

static void *bounce_buf(void)
{
	void *b;

	pthread_once(&bounce_once, bounce_key_init);
	b = pthread_getspecific(bounce_key);
	if (!b && !posix_memalign(&b, 4096, BOUNCE_SIZE))
		pthread_setspecific(bounce_key, b);
	return b;
}

static int aligned(const struct io_dev *priv, uint64_t off, size_t len)
{
	return priv->direct && !(off % priv->dalign) && !(len % priv->dalign);
}

/*
 * Outside -o direct, a write this long from aligned memory goes through
 * the O_DIRECT descriptor (direct_as_is).
 */
#define DIRECT_AS_IS_MIN (1u << 20)
#define AS_IS_IOVS 8

/*
 * A write the O_DIRECT descriptor takes as it is, without a bounce: aligned
 * memory to an aligned place; outside -o direct only DIRECT_AS_IS_MIN or
 * longer, which in practice is held data's write-back (src/data: its
 * buffers are page aligned; libfuse's are not).  The image's page cache
 * would only hold a second copy of it for the flush that follows to wait
 * on: sixteen files synced at once (W3) wrote at 0.78x of 5303c2a's
 * default through the cache, 0.90x this way.  Shorter ones keep to the
 * write-behind run, which lays small files end to end in one write.
 */
static int direct_as_is(const struct io_dev *priv, const struct iovec *iov, int iovcnt, uint64_t off,
			size_t len)
{
	int i;

	if (priv->dfd < 0 || iovcnt > AS_IS_IOVS || off % priv->dalign ||
	    (!priv->direct && len < DIRECT_AS_IS_MIN))
		return 0;
	for (i = 0; i < iovcnt; i++)
		if (((uintptr_t)iov[i].iov_base | iov[i].iov_len) % priv->dalign)
			return 0;
	return 1;
}

int io_data_read(io_channel ch, void *buf, size_t len, uint64_t off)
{
	struct io_dev *priv = dev_of(ch);
	char *p = buf, *b;
	int ret = io_layers_data(ch, 0, off, len, NULL, 0);

	if (ret)
		return ret;
	pend_out(priv, off, len);
	trace_io(priv->trace, TRACE_DATA, TRACE_READ, off, len);
	tally(&priv->data_reads);
	if (!aligned(priv, off, len))
		return io_pread_all(priv->fd, buf, len, off);
	if (!((uintptr_t)buf % priv->dalign))
		return io_pread_all(priv->dfd, buf, len, off);
	if (!(b = bounce_buf()))
		return io_pread_all(priv->fd, buf, len, off);
	while (len) {
		size_t n = len < BOUNCE_SIZE ? len : BOUNCE_SIZE;

		ret = io_pread_all(priv->dfd, b, n, off);
		if (ret)
			return ret;
		memcpy(p, b, n);
		p += n;
		off += n;
		len -= n;
	}
	return 0;
}

int io_data_read_fd(io_channel ch, uint64_t off, size_t len, int *fd)
{
	struct io_dev *priv = dev_of(ch);
	int ret;

	if (priv->direct)
		return -EOPNOTSUPP;	/* the data path bypasses the page cache: no pages to splice */
	ret = io_layers_data(ch, 0, off, len, NULL, 0);
	if (ret)
		return ret;
	pend_out(priv, off, len);
	trace_io(priv->trace, TRACE_DATA, TRACE_READ, off, len);
	tally(&priv->data_reads);
	tally(&priv->data_spliced);
	*fd = priv->fd;
	return 0;
}

int io_data_writev(io_channel ch, struct iovec *iov, int iovcnt, uint64_t off)
{
	struct io_dev *priv = dev_of(ch);
	size_t len = 0, fill = 0, done = 0;
	char *b;
	int i, ret;

	for (i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	ret = io_layers_data(ch, 1, off, len, iov, iovcnt);
	if (ret)
		return ret;
	trace_io(priv->trace, TRACE_DATA, TRACE_WRITE, off, len);
	tally(&priv->data_writes);
	if (direct_as_is(priv, iov, iovcnt, off, len)) {
		struct iovec mine[AS_IS_IOVS];	/* io_pwritev_all moves through them */

		memcpy(mine, iov, (size_t)iovcnt * sizeof(*iov));
		pend_out(priv, off, len);
		tally(&priv->data_runs);
		ret = io_pwritev_all(priv->dfd, mine, iovcnt, off);
		/* A file system that opens O_DIRECT but refuses this alignment: through the cache. */
		if (ret != -EINVAL)
			return ret;
	}
	if (!priv->direct) {
		ret = pend_write(priv, iov, iovcnt, off, len);
		if (!data_direct)
			wb_start(priv);
		return ret;
	}
	if (!aligned(priv, off, len) || !(b = bounce_buf())) {
		ret = data_pwritev(priv, iov, iovcnt, off, len);
		wb_start(priv);
		return ret;
	}
	tally(&priv->data_runs);
	/* Gather into the bounce buffer, a full buffer (or the end) at a time. */
	for (i = 0; i < iovcnt; i++) {
		size_t pos = 0;

		while (pos < iov[i].iov_len) {
			size_t n = iov[i].iov_len - pos;

			if (n > BOUNCE_SIZE - fill)
				n = BOUNCE_SIZE - fill;
			memcpy(b + fill, (const char *)iov[i].iov_base + pos, n);
			fill += n;
			pos += n;
			if (fill < BOUNCE_SIZE && done + fill < len)
				continue;
			ret = io_pwrite_all(priv->dfd, b, fill, off + done);
			if (ret)
				return ret;
			done += fill;
			fill = 0;
		}
	}
	return 0;
}

int io_data_write(io_channel ch, const void *buf, size_t len, uint64_t off)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return io_data_writev(ch, &iov, 1, off);
}

static struct struct_io_manager rr_io_struct =
	IO_LAYER_MANAGER(rr_io, "rrfuse I/O manager", rr_io_set_blksize,
			 rr_io_set_option, rr_io_cache_readahead);

io_manager rr_io_manager = &rr_io_struct;

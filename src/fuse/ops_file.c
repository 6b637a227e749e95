// SPDX-License-Identifier: GPL-2.0
/*
 * FUSE requests on open files: open and create, read, write, fsync,
 * fallocate, lseek and release.  Decode, call data.c, reply.
 */
#include "ops_int.h"
#include "attr.h"
#include "channel.h"
#include "data.h"
#include "dir.h"
#include "error.h"
#include "dev.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

static int fh_privileged(const struct fuse_file_info *fi)
{
	return !!(fi->fh & RR_FH_PRIVILEGED);
}

static void fh_init(fuse_req_t req, struct rr_inode *ri, struct fuse_file_info *fi)
{
	fi->keep_cache = 1;
	fi->fh = ops_is_root(req) ? RR_FH_PRIVILEGED : 0;
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fi->fh |= RR_FH_WRITER;
		atomic_fetch_add(&ri->nwriters, 1);
	}
	rr_iopen(rr_fs_of(req), ri);
}

/*
 * A writer's handle goes: the last one writes the delayed data out (the
 * file's size is final now; -o delalloc=hold keeps it) and, when none is
 * left, gives the file's preallocations back (as ext4_release_file).  A
 * failure here has no one to tell (as ext4's writeback errors, fsync
 * reports them): the data stays buffered, and the commit thread tries again.
 */
static void fh_release(struct rr_fs *rfs, struct rr_inode *ri, struct fuse_file_info *fi)
{
	if ((fi->fh & RR_FH_WRITER) && atomic_fetch_sub(&ri->nwriters, 1) == 1 && rfs->alloc) {
		int ret = data_close(rfs, ri);

		if (ret)
			rr_log(LOG_ERR, "inode %u: writing delayed data at close: %s", ri->ino, strerror(-ret));
		if (atomic_load(&ri->dbuf.blocks))
			return;
		rr_fs_lock(rfs);
		rr_alloc_discard_inode(rfs->alloc, ri->ino);
		rr_fs_end_op(rfs);
	}
}

static void open_reply(fuse_req_t req, struct rr_inode *ri, struct fuse_file_info *fi)
{
	fh_init(req, ri, fi);
	if (fuse_reply_open(req, fi) == -ENOENT) {
		fh_release(rr_fs_of(req), ri, fi);
		rr_iput(rr_fs_of(req), ri, 0, 1);
	}
}

void rr_open(fuse_req_t req, fuse_ino_t fino, struct fuse_file_info *fi)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct rr_inode *ri = ops_node(rfs, fino);
	int ret = 0;

	if (!ri) {
		fuse_reply_err(req, EIO);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY && rfs->ro)
		ret = -EROFS;
	else if ((ret = attr_guard_open(ri, fi->flags)))
		;
	else if ((fi->flags & O_TRUNC) && (fi->flags & O_ACCMODE) != O_RDONLY)
		ret = data_truncate(rfs, ri, 0);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		open_reply(req, ri, fi);
	rr_iunpin(rfs, ri);
}

void rr_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct fuse_entry_param e;
	struct ext2_inode_large in;
	struct rr_inode *ri = NULL;
	struct rr_cred cr;
	ext2_ino_t ino;
	int ret;

	if (!ops_check_rw(req))
		return;
	ops_cred(req, &cr);
	ret = dir_create(rfs, e2ino(parent), name, S_IFREG | (mode & ~S_IFMT), 0, &cr, &ino, &ri, &in);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	ops_fill_entry(rfs, ino, &in, &e);
	fh_init(req, ri, fi);
	if (fuse_reply_create(req, &e, fi) == -ENOENT) {
		fh_release(rfs, ri, fi);
		rr_iput(rfs, ri, 1, 1);
	}
}

/*
 * A read that lies in one written extent goes from the image's page cache
 * to the reader's pages without a copy in rrfuse (FUSE_CAP_SPLICE_WRITE:
 * libfuse splices it through a pipe).  1 if answered, 0 to copy instead.
 */
/* Reads shorter than this are copied: libfuse splices nothing under two pages. */
#define RR_SPLICE_MIN (2 * 4096)

static int splice_read(fuse_req_t req, struct rr_inode *ri, size_t size, uint64_t off)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);
	uint64_t dev;
	int ret, fd;

	if (!rfs->splice)
		return 0;
	ret = data_read_begin(rfs, ri, off, &size, &dev);
	if (!ret && dev && size >= RR_SPLICE_MIN) {
		ret = io_data_read_fd(rfs->dev, dev, size, &fd);
		if (ret && ret != -EOPNOTSUPP)
			rr_data_io_error(rfs, 0, dev >> rfs->bbits, -ret);
		if (!ret) {
			bv.buf[0].size = size;
			bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
			bv.buf[0].fd = fd;
			bv.buf[0].pos = (off_t)dev;
			fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
		}
		data_read_end(ri);
		if (ret == -EOPNOTSUPP)
			return 0;
		if (ret)
			fuse_reply_err(req, -ret);
		return 1;
	}
	if (!ret)
		data_read_end(ri);
	return 0;
}

void rr_read(fuse_req_t req, fuse_ino_t fino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct rr_inode *ri;
	char *buf;
	ssize_t n;

	(void)fi;
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	ri = ops_node(rfs, fino);
	if (!ri) {
		fuse_reply_err(req, EIO);
		return;
	}
	inode_accessed(rfs, ri);
	if (!splice_read(req, ri, size, (uint64_t)off)) {
		/* Page aligned, so that O_DIRECT reads land in it without a bounce. */
		if (posix_memalign((void **)&buf, 4096, size ? size : 1)) {
			fuse_reply_err(req, ENOMEM);
		} else {
			n = data_read(rfs, ri, buf, size, (uint64_t)off);
			if (n < 0)
				fuse_reply_err(req, (int)-n);
			else
				fuse_reply_buf(req, buf, (size_t)n);
			free(buf);
		}
	}
	rr_iunpin(rfs, ri);
}

void rr_write(fuse_req_t req, fuse_ino_t fino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct rr_inode *ri;
	int short_err = 0, lost;
	ssize_t n;

	if (off < 0 || rfs->ro) {
		fuse_reply_err(req, rfs->ro ? EROFS : EINVAL);
		return;
	}
	ri = ops_node(rfs, fino);
	n = ri ? 0 : -EIO;
	if (!n && (atomic_load(&ri->guard) & EXT2_IMMUTABLE_FL))
		n = -EPERM;	/* made immutable after it was opened for writing */
	if (!n && chan_req_kills_suidgid())
		n = ops_drop_suidgid(req, fino);
	if (!n) {
		io_data_direct(!fi->writepage);
		n = data_write(rfs, ri, buf, size, (uint64_t)off, fh_privileged(fi),
			       fi->writepage && rfs->opts.delalloc, &short_err);
		io_data_direct(0);
	}
	/*
	 * Writeback of cached pages ignores a short count: the rest would be
	 * lost without a word.  Only an error reaches fsync() and close().
	 */
	if (n >= 0 && (size_t)n < size && fi->writepage && short_err)
		n = short_err;
	lost = (n == -ENOSPC || n == -EFBIG) && fi->writepage && ri;
	if (lost) {
		atomic_store(&ri->lost_err, (int)-n);
		/*
		 * The size the kernel shows is the size the image gets; the lost
		 * part a hole.  Past the largest file no size can be kept.
		 */
		if (n == -ENOSPC)
			data_grow(rfs, ri, (uint64_t)off + size);
	}
	if (ri)
		rr_iunpin(rfs, ri);
	/*
	 * A direct write: pages of its range that a buffered reader pulled in
	 * while it ran hold the old bytes, and the kernel drops them only
	 * after a synchronous one (not after an asynchronous one: fstests
	 * generic/451).  Drop them now, with the data on disk and before the
	 * writer hears of it.  Only for fuse_direct_io()'s WRITEs: every other
	 * may come with those pages locked until this reply (a write-through
	 * to a set-id file, a short direct write's buffered fallback), and
	 * the kernel's pages already hold what it wrote.
	 */
	if (n > 0 && chan_req_is_direct_write() && !rfs->opts.single)
		fuse_lowlevel_notify_inval_inode(rfs->se, fino, off, n);
	/*
	 * Attributes stale: the writer's next write() asks, and hears the
	 * error.  Before the reply, or an fsync waiting for this page returns
	 * and the next write() runs before the kernel hears; offset -1 touches
	 * no page, so it does not wait for this write-back.
	 */
	if (lost)
		fuse_lowlevel_notify_inval_inode(rfs->se, fino, -1, 0);
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else
		fuse_reply_write(req, (size_t)n);
}

void rr_release(fuse_req_t req, fuse_ino_t fino, struct fuse_file_info *fi)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct rr_inode *ri = ops_node(rfs, fino);

	if (ri) {
		fh_release(rfs, ri, fi);
		rr_iput(rfs, ri, 0, 1);
		rr_iunpin(rfs, ri);
	}
	fuse_reply_err(req, 0);
}

void rr_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct fuse_session *se = rfs->se;
	struct rr_inode *ri = ops_node(rfs, ino);
	int ret = 0;

	(void)datasync;
	(void)fi;
	if (ri) {
		ret = data_flush(rfs, ri, 0);
		rr_iunpin(rfs, ri);
	}
	/* Inodes and maps are written through; bitmaps and counts are not. */
	if (!ret)
		ret = rr_fs_commit(rfs, 1);
	/*
	 * Writeback allocated blocks behind the kernel's cached attributes:
	 * have it ask again, so st_blocks is right after fsync as on ext4.
	 * Before the reply, so that no stat after fsync() returns can miss
	 * it; for attributes only (offset < 0) the kernel takes no lock that
	 * the waiting fsync holds.
	 */
	if (!ret)
		fuse_lowlevel_notify_inval_inode(se, ino, -1, 0);
	fuse_reply_err(req, -ret);
}

void rr_fallocate(fuse_req_t req, fuse_ino_t fino, int mode, off_t off, off_t len,
			 struct fuse_file_info *fi)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct rr_inode *ri;
	int ret;

	if (!ops_check_rw(req))
		return;
	if (off < 0 || len <= 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	ri = ops_node(rfs, fino);
	ret = ri ? attr_guard_fallocate(ri, mode) : -EIO;
	/* The kernel marks no FALLOCATE: a caller other than root is taken to lack CAP_FSETID. */
	if (!ret && rfs->killpriv_v2 && fuse_req_ctx(req)->uid)
		ret = ops_drop_suidgid(req, fino);
	if (!ret)
		ret = data_fallocate(rfs, ri, mode, (uint64_t)off, (uint64_t)len, fh_privileged(fi));
	if (ri)
		rr_iunpin(rfs, ri);
	fuse_reply_err(req, -ret);
}

void rr_lseek(fuse_req_t req, fuse_ino_t fino, off_t off, int whence, struct fuse_file_info *fi)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct rr_inode *ri;
	int64_t r;

	(void)fi;
	if (off < 0 || (whence != SEEK_DATA && whence != SEEK_HOLE)) {
		fuse_reply_err(req, off < 0 ? ENXIO : EINVAL);
		return;
	}
	ri = ops_node(rfs, fino);
	/*
	 * With the writeback cache, written pages may still sit in the
	 * kernel, which asks without writing them back first (and owns
	 * i_size meanwhile): a hole would be reported where a write landed.
	 * Invalidating the rest of the file's cache makes the kernel write
	 * its dirty pages (launder) before this returns; another thread
	 * serves those WRITEs, so not with -s.
	 */
	if (ri && rfs->wbcache && !rfs->opts.single && atomic_load(&ri->nwriters))
		fuse_lowlevel_notify_inval_inode(rfs->se, fino, off & ~(off_t)4095, 0);
	r = ri ? data_seek(rfs, ri, (uint64_t)off, whence) : -EIO;
	if (ri)
		rr_iunpin(rfs, ri);
	if (r < 0)
		fuse_reply_err(req, (int)-r);
	else
		fuse_reply_lseek(req, (off_t)r);
}

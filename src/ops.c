// SPDX-License-Identifier: GPL-2.0
/*
 * The FUSE low-level operation table: decode the request, call the module
 * that does the work, reply exactly once.  Replies happen only here.
 *
 * FUSE node ids are ext4 inode numbers, except that FUSE's root (1) is
 * ext4's root (2); ext4's inode 1 (bad blocks) is never exposed.
 */
#include "ops.h"
#include "acl.h"
#include "channel.h"
#include "ctl.h"
#include "dir.h"
#include "error.h"
#include "io/dev.h"
#include "trim.h"
#include "log.h"
#include "rrfs.h"
#include "utab.h"
#include "xattr.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

/* rrfuse is the only writer of the image: the kernel may cache for long. */
#define RR_TIMEOUT 1.0

/*
 * A file handle remembers whether its opener may use the root-reserved
 * blocks: writeback WRITE requests come from the kernel's flusher with no
 * caller credentials of their own.
 */
#define RR_FH_PRIVILEGED 1
#define RR_FH_WRITER 2		/* counted in ri->nwriters */

static struct rr_fs *rr_fs_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static ext2_ino_t e2ino(fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? EXT2_ROOT_INO : (ext2_ino_t)ino;
}

static fuse_ino_t fuseino(ext2_ino_t ino)
{
	return ino == EXT2_ROOT_INO ? FUSE_ROOT_ID : ino;
}

/* The in-memory inode of a node the kernel holds a reference to, pinned: rr_iunpin() when done. */
static struct rr_inode *node(struct rr_fs *rfs, fuse_ino_t ino)
{
	struct rr_inode *ri = rr_ipin(rfs, e2ino(ino));

	if (!ri)
		rr_log(LOG_ERR, "request for inode %llu that the kernel never looked up",
		       (unsigned long long)ino);
	return ri;
}

static void cred_of(fuse_req_t req, struct rr_cred *cr)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	cr->uid = ctx->uid;
	cr->gid = ctx->gid;
	/* FUSE_CAP_DONT_MASK: a parent's default ACL decides whether the umask applies. */
	cr->umask = ctx->umask;
}

static int is_root(fuse_req_t req)
{
	struct rr_fs *rfs = rr_fs_of(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct ext2_super_block *sb = rfs->fs->super;

	return ctx->uid == 0 || ctx->uid == sb->s_def_resuid ||
	       (sb->s_def_resgid && ctx->gid == sb->s_def_resgid);
}

/*
 * How long the kernel may keep an inode's attributes.  Not at all for an
 * immutable one: under the writeback cache a write() reaches rrfuse only
 * as a GETATTR on the open file when the attributes are stale (rr_getattr
 * refuses it), so cached ones would let writes into the page cache.
 */
static double attr_timeout(const struct ext2_inode_large *in)
{
	return in->i_flags & EXT2_IMMUTABLE_FL ? 0 : RR_TIMEOUT;
}

static void fill_entry(struct rr_fs *rfs, ext2_ino_t ino, const struct ext2_inode_large *in,
		       struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = fuseino(ino);
	e->generation = in->i_generation;
	inode_stat(rfs, ino, in, &e->attr);
	e->attr_timeout = attr_timeout(in);
	e->entry_timeout = RR_TIMEOUT;
}

static void reply_entry(fuse_req_t req, int ret, ext2_ino_t ino, struct rr_inode *ri,
			const struct ext2_inode_large *in)
{
	struct fuse_entry_param e;

	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	fill_entry(rr_fs_of(req), ino, in, &e);
	/* A lost reply means the kernel never got the reference: give it back. */
	if (fuse_reply_entry(req, &e) == -ENOENT)
		rr_iput(rr_fs_of(req), ri, 1, 0);
}

static void rr_init(void *userdata, struct fuse_conn_info *conn)
{
	struct rr_fs *rfs = userdata;

	if (rfs->opts.writeback && !rfs->ro && (conn->capable & FUSE_CAP_WRITEBACK_CACHE)) {
		conn->want |= FUSE_CAP_WRITEBACK_CACHE;
		rfs->wbcache = 1;
	}
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	/* File handles outlive the kernel's cache (open_by_handle_at, NFS): dir_lookup_dot. */
	if (conn->capable & FUSE_CAP_EXPORT_SUPPORT)
		conn->want |= FUSE_CAP_EXPORT_SUPPORT;
	if ((conn->capable & FUSE_CAP_POSIX_ACL) && (conn->capable & FUSE_CAP_DONT_MASK))
		conn->want |= FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK;
	conn->want &= ~(unsigned)FUSE_CAP_ATOMIC_O_TRUNC;
	/* A spliced request would not pass chan_read: its set-id marks would be lost. */
	conn->want &= ~(unsigned)FUSE_CAP_SPLICE_READ;
	if (rfs->opts.splice && (conn->capable & FUSE_CAP_SPLICE_WRITE)) {
		conn->want |= FUSE_CAP_SPLICE_WRITE;
		rfs->splice = 1;
	}
	conn->max_write = 1 << 20;
	conn->max_readahead = 1 << 20;
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	conn->time_gran = 1;
}

/*
 * The image is written out and let go of here, not after the session loop:
 * a fuseblk mount's umount(2) waits for this request's reply, so the image
 * is complete when the unmount returns (and rrfuse -u waits for the lock).
 */
static void rr_destroy(void *userdata)
{
	struct rr_fs *rfs = userdata;

	if (rfs->closed)
		return;
	/* Before the image's lock goes: a new mount on this mount point adds its own. */
	if (rfs->utab)
		rr_utab_remove(rfs->utab);
	rfs->close_ret = rr_fs_close(rfs);
	rfs->closed = 1;
}

static void rr_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct ext2_inode_large in;
	struct rr_inode *ri = NULL;
	ext2_ino_t ino;
	int ret;

	if (name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2]))) {
		/* Not in one call: ino and ri are its results. */
		ret = dir_lookup_dot(rfs, e2ino(parent), name, &ino, &ri, &in);
		reply_entry(req, ret, ino, ri, &in);
		return;
	}
	ret = dir_lookup(rfs, e2ino(parent), name, &ino, &ri, &in);
	if (ret == -ENOENT) {
		/* A negative entry the kernel may cache: we are the only writer. */
		struct fuse_entry_param e = { .ino = 0, .entry_timeout = RR_TIMEOUT };

		fuse_reply_entry(req, &e);
		return;
	}
	reply_entry(req, ret, ino, ri, &in);
}

static void rr_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct rr_inode *ri = node(rfs, ino);

	if (ri) {
		rr_iput(rfs, ri, nlookup, 0);
		rr_iunpin(rfs, ri);
	}
	fuse_reply_none(req);
}

static void rr_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	struct rr_fs *rfs = rr_fs_of(req);
	size_t i;

	for (i = 0; i < count; i++) {
		struct rr_inode *ri = node(rfs, forgets[i].ino);

		if (ri) {
			rr_iput(rfs, ri, forgets[i].nlookup, 0);
			rr_iunpin(rfs, ri);
		}
	}
	fuse_reply_none(req);
}

static void reply_attr(fuse_req_t req, ext2_ino_t ino, const struct ext2_inode_large *in)
{
	struct stat st;

	inode_stat(rr_fs_of(req), ino, in, &st);
	fuse_reply_attr(req, &st, attr_timeout(in));
}

static void sx_time(const struct ext2_inode_large *in, int which, struct rr_fuse_sx_time *t)
{
	struct timespec ts;

	inode_get_time(in, which, &ts);
	t->tv_sec = ts.tv_sec;
	t->tv_nsec = (uint32_t)ts.tv_nsec;
}

/* The inode flags statx reports as attributes, as ext4_getattr. */
static const struct { __u32 fl; uint64_t attr; } sx_attr_map[] = {
	{ EXT2_IMMUTABLE_FL, STATX_ATTR_IMMUTABLE },
	{ EXT2_APPEND_FL, STATX_ATTR_APPEND },
	{ EXT2_NODUMP_FL, STATX_ATTR_NODUMP },
	{ EXT4_ENCRYPT_FL, STATX_ATTR_ENCRYPTED },
	{ EXT2_COMPR_FL, STATX_ATTR_COMPRESSED },
};

int rr_statx(struct rr_fs *rfs, uint64_t nodeid, struct rr_fuse_statx_out *out)
{
	struct ext2_inode_large in;
	struct rr_fuse_statx *sx = &out->stat;
	double timeout;
	struct stat st;
	size_t i;
	int ret = inode_read(rfs, e2ino(nodeid), &in);

	if (ret)
		return ret;
	inode_stat(rfs, e2ino(nodeid), &in, &st);
	memset(out, 0, sizeof(*out));
	timeout = attr_timeout(&in);
	out->attr_valid = (uint64_t)timeout;
	out->attr_valid_nsec = (uint32_t)((timeout - (double)out->attr_valid) * 1e9);
	sx->mask = STATX_BASIC_STATS;
	sx->blksize = (uint32_t)st.st_blksize;
	sx->nlink = (uint32_t)st.st_nlink;
	sx->uid = st.st_uid;
	sx->gid = st.st_gid;
	sx->mode = (uint16_t)st.st_mode;
	sx->ino = st.st_ino;
	sx->size = (uint64_t)st.st_size;
	sx->blocks = (uint64_t)st.st_blocks;
	sx->rdev_major = major(st.st_rdev);
	sx->rdev_minor = minor(st.st_rdev);
	sx_time(&in, RR_ATIME, &sx->atime);
	sx_time(&in, RR_MTIME, &sx->mtime);
	sx_time(&in, RR_CTIME, &sx->ctime);
	/* Birth time where the inode has room for it (not in 128-byte inodes), as ext4. */
	if (inode_has_crtime(&in)) {
		sx->mask |= STATX_BTIME;
		sx_time(&in, RR_CRTIME, &sx->btime);
	}
	for (i = 0; i < sizeof(sx_attr_map) / sizeof(sx_attr_map[0]); i++) {
		sx->attributes_mask |= sx_attr_map[i].attr;
		if (in.i_flags & sx_attr_map[i].fl)
			sx->attributes |= sx_attr_map[i].attr;
	}
	return 0;
}

static void rr_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct ext2_inode_large in;
	int ret;

	/* With a writer's open file: a write() asking (see rr_inode.lost_err), once. */
	if (fi && rfs->wbcache && (fi->fh & RR_FH_WRITER)) {
		struct rr_inode *ri = rr_ipin(rfs, e2ino(ino));
		int lost = ri ? atomic_exchange(&ri->lost_err, 0) : 0;

		if (ri)
			rr_iunpin(rfs, ri);
		if (lost) {
			fuse_reply_err(req, lost);
			return;
		}
	}
	ret = inode_read(rfs, e2ino(ino), &in);
	/*
	 * A GETATTR naming an open file comes from write(), copy_file_range(),
	 * or a read or lseek past EOF, never from stat: the writeback cache's
	 * write() fails with its error, where its data would otherwise wait in
	 * the page cache for a WRITE that rr_write() refuses.  That is how a
	 * file made immutable after it was opened for writing refuses writes
	 * (ext4: generic_write_checks), at the price of EPERM for reads on
	 * such a descriptor (with auto_inval_data the kernel revalidates
	 * before reading).  Without the writeback cache WRITE comes at once
	 * and is refused there.
	 */
	if (!ret && fi && rfs->opts.writeback && LINUX_S_ISREG(in.i_mode) &&
	    (fi->fh & RR_FH_WRITER) && (in.i_flags & EXT2_IMMUTABLE_FL))
		ret = -EPERM;
	if (ret)
		fuse_reply_err(req, -ret);
	else
		reply_attr(req, e2ino(ino), &in);
}

/* in_group_p(): the caller's filesystem gid or one of its supplementary groups. */
static int caller_in_group(fuse_req_t req, gid_t gid)
{
	gid_t small[32], *list = small;
	int n, i, in = fuse_req_ctx(req)->gid == gid;

	n = in ? 0 : fuse_req_getgroups(req, 32, small);
	if (n > 32) {
		int cap = n;

		list = malloc((size_t)cap * sizeof(*list));
		n = list ? fuse_req_getgroups(req, cap, list) : 0;
		if (n > cap)
			n = cap;	/* it gained groups meanwhile: these will do */
	}
	for (i = 0; i < n && !in; i++)
		in = list[i] == gid;
	if (list != small)
		free(list);
	return in;
}

/*
 * The set-id bits the VFS's setattr_should_drop_suidgid() drops for a
 * caller without CAP_FSETID (capable: the caller may keep a set-group-ID
 * that is not group-executable, as in_group_or_capable()).  Under
 * KILLPRIV_V2 the kernel leaves this to the server: it marks the requests
 * whose caller lacks CAP_FSETID (chan_req_kills_suidgid), and marks none
 * for fallocate().  For every kind but directories, as chown_common() asks.
 */
static __u16 suidgid_to_drop(fuse_req_t req, ext2_ino_t ino, int capable)
{
	struct ext2_inode_large in;
	__u16 mode, kill = 0;

	if (inode_read(rr_fs_of(req), ino, &in) || LINUX_S_ISDIR(in.i_mode))
		return 0;
	mode = in.i_mode;
	if (mode & S_ISUID)
		kill |= S_ISUID;
	if ((mode & S_ISGID) && ((mode & S_IXGRP) || (!capable && !caller_in_group(req, inode_gid(in)))))
		kill |= S_ISGID;
	return kill;
}

/*
 * Drop them for a write or an fallocate: no SETATTR follows, so the
 * kernel's copy of the mode is stale until it hears.
 */
static int drop_suidgid(fuse_req_t req, fuse_ino_t fino, int capable)
{
	struct rr_fs *rfs = rr_fs_of(req);
	__u16 kill = suidgid_to_drop(req, e2ino(fino), capable);
	struct ext2_inode_large in;
	struct timespec now;
	int ret;

	if (!kill)
		return 0;
	clock_gettime(CLOCK_REALTIME_COARSE, &now);
	rr_fs_lock(rfs);
	ret = inode_load(rfs, e2ino(fino), &in);
	if (!ret) {
		in.i_mode &= (__u16)~kill;
		inode_set_time(&in, RR_CTIME, &now);
		ret = inode_write(rfs, e2ino(fino), &in);
	}
	rr_fs_end_op(rfs);
	if (!ret && !rfs->opts.single)
		fuse_lowlevel_notify_inval_inode(rfs->se, fino, -1, 0);
	return ret;
}

/*
 * The writeback cache's flush of the mtime and ctime it keeps for a regular
 * file (after writes, and after calls it failed only once it had touched
 * them): MTIME without ATIME and without MTIME_NOW, on an open file, which
 * explicit utimes never names.  Refusing it on an append-only or immutable
 * file would fail fsync() and leave stat showing a time the image lacks.
 */
static int wb_time_flush(const struct rr_fs *rfs, int to_set, const struct fuse_file_info *fi)
{
	return rfs->opts.writeback && fi && (to_set & FUSE_SET_ATTR_MTIME) &&
	       !(to_set & ~(FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_CTIME));
}

/*
 * The kernel's may_setattr() on an append-only inode: no new size, mode or
 * owner, and no times given explicitly (ATTR_TIMES_SET: utimes with a times
 * array, UTIME_OMIT included), but "now" for both (utimes(NULL),
 * ATTR_TOUCH) is allowed.  FUSE does not pass those flags: a touch arrives
 * as ATIME_NOW with MTIME_NOW, or with MTIME of the kernel's own clock under
 * the writeback cache, where (UTIME_NOW, t) therefore passes as a touch.
 */
static int append_only_denies(const struct rr_fs *rfs, int to_set, const struct fuse_file_info *fi)
{
	if (to_set & (FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))
		return 1;
	if (!(to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME)) || wb_time_flush(rfs, to_set, fi))
		return 0;
	return !((to_set & FUSE_SET_ATTR_ATIME_NOW) &&
		 ((to_set & FUSE_SET_ATTR_MTIME_NOW) || (rfs->opts.writeback && (to_set & FUSE_SET_ATTR_MTIME))));
}

static void rr_setattr(fuse_req_t req, fuse_ino_t fino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct rr_fs *rfs = rr_fs_of(req);
	ext2_ino_t ino = e2ino(fino);
	struct ext2_inode_large in;
	struct timespec now;
	unsigned int guard;
	__u16 kill = 0;
	int ret = 0;

	if (rfs->ro) {
		fuse_reply_err(req, EROFS);
		return;
	}
	/* As may_setattr(): an immutable inode changes nothing. */
	guard = rr_iguard(rfs, e2ino(fino));
	if (((guard & EXT2_IMMUTABLE_FL) && !wb_time_flush(rfs, to_set, fi)) ||
	    ((guard & EXT2_APPEND_FL) && append_only_denies(rfs, to_set, fi))) {
		fuse_reply_err(req, EPERM);
		return;
	}
	if (to_set & FUSE_SET_ATTR_SIZE) {
		struct rr_inode *ri = node(rfs, fino);

		if (!ri) {
			ret = -EIO;
		} else {
			ret = data_truncate(rfs, ri, (uint64_t)attr->st_size);
			rr_iunpin(rfs, ri);
		}
		if (ret) {
			fuse_reply_err(req, -ret);
			return;
		}
	}
	/*
	 * Marked for a chown() always, for a truncate by a caller without
	 * CAP_FSETID; root's chown() keeps a set-gid that is not group-executable.
	 */
	if (chan_req_kills_suidgid())
		kill = suidgid_to_drop(req, ino, !(to_set & FUSE_SET_ATTR_SIZE) && fuse_req_ctx(req)->uid == 0);
	clock_gettime(CLOCK_REALTIME_COARSE, &now);
	rr_fs_lock(rfs);
	ret = inode_load(rfs, ino, &in);
	if (!ret) {
		in.i_mode &= (__u16)~kill;
		if (to_set & FUSE_SET_ATTR_MODE)
			in.i_mode = (__u16)((in.i_mode & S_IFMT) | (attr->st_mode & ~S_IFMT));
		if (to_set & FUSE_SET_ATTR_UID) {
			in.i_uid = (__u16)attr->st_uid;
			ext2fs_set_i_uid_high(in, attr->st_uid >> 16);
		}
		if (to_set & FUSE_SET_ATTR_GID) {
			in.i_gid = (__u16)attr->st_gid;
			ext2fs_set_i_gid_high(in, attr->st_gid >> 16);
		}
		if (to_set & FUSE_SET_ATTR_ATIME_NOW)
			inode_set_time(&in, RR_ATIME, &now);
		else if (to_set & FUSE_SET_ATTR_ATIME)
			inode_set_time(&in, RR_ATIME, &attr->st_atim);
		if (to_set & FUSE_SET_ATTR_MTIME_NOW)
			inode_set_time(&in, RR_MTIME, &now);
		else if (to_set & FUSE_SET_ATTR_MTIME)
			inode_set_time(&in, RR_MTIME, &attr->st_mtim);
		if (to_set & FUSE_SET_ATTR_CTIME)
			inode_set_time(&in, RR_CTIME, &attr->st_ctim);
		else
			inode_set_time(&in, RR_CTIME, &now);
		ret = inode_write(rfs, ino, &in);
		if (!ret && (to_set & FUSE_SET_ATTR_MODE))
			ret = xattr_acl_chmod(rfs, ino, in.i_mode);
		if (!ret && (to_set & FUSE_SET_ATTR_MODE))
			ret = inode_load(rfs, ino, &in);
	}
	rr_fs_end_op(rfs);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		reply_attr(req, ino, &in);
}

static void rr_readlink(fuse_req_t req, fuse_ino_t fino)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct ext2_inode_large in;
	char *buf = NULL;
	int ret = inode_read(rfs, e2ino(fino), &in);

	if (!ret && !LINUX_S_ISLNK(in.i_mode))
		ret = -EINVAL;
	if (!ret && (in.i_size >= rfs->bsize || in.i_size_high))
		ret = -EIO;	/* longer than a symlink can be: corruption */
	if (!ret) {
		buf = calloc(1, in.i_size + 1);
		if (!buf)
			ret = -ENOMEM;
	}
	if (!ret && ext2fs_is_fast_symlink((struct ext2_inode *)&in)) {
		memcpy(buf, in.i_block, in.i_size < sizeof(in.i_block) ? in.i_size : sizeof(in.i_block));
	} else if (!ret) {
		struct rr_inode *ri = node(rfs, fino);
		ssize_t n = ri ? data_read(rfs, ri, buf, in.i_size, 0) : -EIO;

		if (ri)
			rr_iunpin(rfs, ri);
		if (n < 0)
			ret = (int)n;
	}
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_readlink(req, buf);
	free(buf);
}

static int check_rw(fuse_req_t req)
{
	if (rr_fs_of(req)->ro) {
		fuse_reply_err(req, EROFS);
		return 0;
	}
	return 1;
}

/* A new inode and its entry: a symlink to target, or (target NULL) mode's kind. */
static void make_entry(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev,
		       const char *target)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct ext2_inode_large in;
	struct rr_inode *ri = NULL;
	struct rr_cred cr;
	ext2_ino_t ino = 0;
	int ret;

	if (!check_rw(req))
		return;
	cred_of(req, &cr);
	if (target)
		ret = dir_symlink(rfs, e2ino(parent), name, target, &cr, &ino, &ri, &in);
	else
		ret = dir_create(rfs, e2ino(parent), name, mode, rdev, &cr, &ino, &ri, &in);
	reply_entry(req, ret, ino, ri, &in);
}

static void rr_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	make_entry(req, parent, name, mode, rdev, NULL);
}

static void rr_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	make_entry(req, parent, name, S_IFDIR | (mode & ~S_IFMT), 0, NULL);
}

static void rr_symlink(fuse_req_t req, const char *target, fuse_ino_t parent, const char *name)
{
	make_entry(req, parent, name, 0, 0, target);
}

static void rr_link(fuse_req_t req, fuse_ino_t fino, fuse_ino_t newparent, const char *newname)
{
	struct ext2_inode_large in;
	struct rr_inode *ri = NULL;

	int ret;

	if (!check_rw(req))
		return;
	ret = dir_link(rr_fs_of(req), e2ino(fino), e2ino(newparent), newname, &ri, &in);
	reply_entry(req, ret, e2ino(fino), ri, &in);
}

static void rr_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	if (check_rw(req))
		fuse_reply_err(req, -dir_unlink(rr_fs_of(req), e2ino(parent), name, 0));
}

static void rr_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	if (check_rw(req))
		fuse_reply_err(req, -dir_unlink(rr_fs_of(req), e2ino(parent), name, 1));
}

static void rr_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	struct rr_cred cr;

	if (!check_rw(req))
		return;
	cred_of(req, &cr);
	fuse_reply_err(req, -dir_rename(rr_fs_of(req), e2ino(parent), name, e2ino(newparent), newname, flags,
					&cr));
}

static int fh_privileged(const struct fuse_file_info *fi)
{
	return !!(fi->fh & RR_FH_PRIVILEGED);
}

static void fh_init(fuse_req_t req, struct rr_inode *ri, struct fuse_file_info *fi)
{
	fi->keep_cache = 1;
	fi->fh = is_root(req) ? RR_FH_PRIVILEGED : 0;
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fi->fh |= RR_FH_WRITER;
		atomic_fetch_add(&ri->nwriters, 1);
	}
	rr_iopen(rr_fs_of(req), ri);
}

/*
 * A writer's handle goes: the last one writes the delayed data out (the
 * file's size is final now) and gives the file's preallocations back (as
 * ext4_release_file).  A failure here has no one to tell (as ext4's
 * writeback errors, fsync reports them): the data stays buffered, and the
 * commit thread tries again.
 */
static void fh_release(struct rr_fs *rfs, struct rr_inode *ri, struct fuse_file_info *fi)
{
	if ((fi->fh & RR_FH_WRITER) && atomic_fetch_sub(&ri->nwriters, 1) == 1 && rfs->alloc) {
		int ret = data_flush(rfs, ri, 1);

		if (ret)
			rr_log(LOG_ERR, "inode %u: writing delayed data at close: %s", ri->ino, strerror(-ret));
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

/* Writing an immutable file, or an append-only one other than by appending. */
static int guard_denies_write(struct rr_inode *ri, int flags)
{
	unsigned int g = atomic_load(&ri->guard);

	return (g & EXT2_IMMUTABLE_FL) || ((g & EXT2_APPEND_FL) && (!(flags & O_APPEND) || (flags & O_TRUNC)));
}

static void rr_open(fuse_req_t req, fuse_ino_t fino, struct fuse_file_info *fi)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct rr_inode *ri = node(rfs, fino);
	int ret = 0;

	if (!ri) {
		fuse_reply_err(req, EIO);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY && rfs->ro)
		ret = -EROFS;
	else if ((fi->flags & O_ACCMODE) != O_RDONLY && guard_denies_write(ri, fi->flags))
		ret = -EPERM;
	else if ((fi->flags & O_TRUNC) && (fi->flags & O_ACCMODE) != O_RDONLY)
		ret = data_truncate(rfs, ri, 0);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		open_reply(req, ri, fi);
	rr_iunpin(rfs, ri);
}

static void rr_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct fuse_entry_param e;
	struct ext2_inode_large in;
	struct rr_inode *ri = NULL;
	struct rr_cred cr;
	ext2_ino_t ino;
	int ret;

	if (!check_rw(req))
		return;
	cred_of(req, &cr);
	ret = dir_create(rfs, e2ino(parent), name, S_IFREG | (mode & ~S_IFMT), 0, &cr, &ino, &ri, &in);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	fill_entry(rfs, ino, &in, &e);
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
			rr_data_io_error(0, dev >> rfs->bbits, -ret);
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

static void rr_read(fuse_req_t req, fuse_ino_t fino, size_t size, off_t off, struct fuse_file_info *fi)
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
	ri = node(rfs, fino);
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

static void rr_write(fuse_req_t req, fuse_ino_t fino, const char *buf, size_t size, off_t off,
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
	ri = node(rfs, fino);
	n = ri ? 0 : -EIO;
	if (!n && (atomic_load(&ri->guard) & EXT2_IMMUTABLE_FL))
		n = -EPERM;	/* made immutable after it was opened for writing */
	if (!n && chan_req_kills_suidgid())
		n = drop_suidgid(req, fino, 0);
	if (!n)
		n = data_write(rfs, ri, buf, size, (uint64_t)off, fh_privileged(fi),
			       fi->writepage && rfs->opts.delalloc, &short_err);
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

static void rr_release(fuse_req_t req, fuse_ino_t fino, struct fuse_file_info *fi)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct rr_inode *ri = node(rfs, fino);

	if (ri) {
		fh_release(rfs, ri, fi);
		rr_iput(rfs, ri, 0, 1);
		rr_iunpin(rfs, ri);
	}
	fuse_reply_err(req, 0);
}

static void rr_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct fuse_session *se = rfs->se;
	struct rr_inode *ri = node(rfs, ino);
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

struct rr_dirh {
	struct rr_dirlist list;
	int loaded;
};

static void rr_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct rr_dirh *dh = calloc(1, sizeof(*dh));

	(void)ino;
	if (!dh) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fi->fh = (uintptr_t)dh;
	if (fuse_reply_open(req, fi) == -ENOENT)
		free(dh);
}

static void do_readdir(fuse_req_t req, fuse_ino_t fino, size_t size, off_t off,
		       struct fuse_file_info *fi, int plus)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct rr_dirh *dh = (struct rr_dirh *)(uintptr_t)fi->fh;
	struct rr_inode *dir;
	char *buf, *p;
	size_t rem = size, i;
	int ret;

	/* Offset 0 is a fresh opendir or a rewinddir: take a new snapshot. */
	if (off == 0 || !dh->loaded) {
		dir_list_free(&dh->list);
		ret = dir_list(rfs, e2ino(fino), &dh->list);
		if (ret) {
			fuse_reply_err(req, -ret);
			return;
		}
		dh->loaded = 1;
		dir = node(rfs, fino);
		if (dir) {
			inode_accessed(rfs, dir);
			rr_iunpin(rfs, dir);
		}
	}
	buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	p = buf;
	for (i = (size_t)off; i < dh->list.n; i++) {
		struct rr_dirent *d = &dh->list.v[i];
		size_t n;

		if (plus) {
			struct fuse_entry_param e = { 0 };
			int dots = !strcmp(d->name, ".") || !strcmp(d->name, "..");
			struct ext2_inode_large in;
			struct rr_inode *ri = NULL;

			if (!dots) {
				ret = dir_entry_ref(rfs, e2ino(fino), &dh->list, d, &ri, &in);
				if (ret == -ENOENT)
					continue;	/* gone since the listing */
				if (ret) {
					/* Unreadable: a plain entry, no reference. */
					ri = NULL;
					e.attr.st_ino = d->ino;
					e.attr.st_mode = (mode_t)DTTOIF(d->type);
				} else {
					fill_entry(rfs, d->ino, &in, &e);
				}
			} else {
				e.attr.st_ino = d->ino;
				e.attr.st_mode = S_IFDIR;
			}
			n = fuse_add_direntry_plus(req, p, rem, d->name, &e, (off_t)(i + 1));
			if (n > rem) {
				if (ri)
					rr_iput(rfs, ri, 1, 0);
				break;
			}
		} else {
			struct stat st = { .st_ino = d->ino, .st_mode = (mode_t)DTTOIF(d->type) };

			n = fuse_add_direntry(req, p, rem, d->name, &st, (off_t)(i + 1));
			if (n > rem)
				break;
		}
		p += n;
		rem -= n;
	}
	fuse_reply_buf(req, buf, size - rem);
	free(buf);
}

static void rr_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, 0);
}

static void rr_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, 1);
}

static void rr_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct rr_dirh *dh = (struct rr_dirh *)(uintptr_t)fi->fh;

	(void)ino;
	dir_list_free(&dh->list);
	free(dh);
	fuse_reply_err(req, 0);
}

static void rr_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct ext2_super_block *sb = rfs->fs->super;
	struct statvfs st = { 0 };
	uint64_t free_blocks, resv;

	(void)ino;
	rr_fs_lock(rfs);
	/*
	 * Blocks promised to delayed data are not free (ext4: free minus dirty
	 * clusters), nor those taken by writes still running.
	 */
	free_blocks = rfs->alloc ? rr_alloc_free(rfs->alloc) : ext2fs_free_blocks_count(sb);
	resv = ext2fs_r_blocks_count(sb) + (rfs->alloc ? rr_alloc_meta_reserve(rfs->alloc) : 0);
	st.f_bsize = rfs->bsize;
	st.f_frsize = rfs->bsize;
	st.f_blocks = ext2fs_blocks_count(sb) - rfs->overhead;
	st.f_bfree = free_blocks;
	st.f_bavail = free_blocks > resv ? free_blocks - resv : 0;
	st.f_files = sb->s_inodes_count;
	st.f_ffree = sb->s_free_inodes_count;
	st.f_favail = sb->s_free_inodes_count;
	st.f_namemax = EXT2_NAME_LEN;
	st.f_fsid = *(unsigned long *)sb->s_uuid;
	rr_fs_end_op(rfs);
	fuse_reply_statfs(req, &st);
}

/*
 * An access ACL sets the mode's permission bits; the kernel's
 * posix_acl_update_mode() also drops set-gid for a caller neither in the
 * file's group nor privileged (CAP_FSETID: root here).  libfuse 3.14 does
 * not pass the kernel's verdict (FUSE_SETXATTR_ACL_KILL_SGID), so decide it
 * here from the caller's groups.
 */
static int acl_kills_sgid(fuse_req_t req, ext2_ino_t ino, const char *name)
{
	struct ext2_inode_large in;

	if (strcmp(name, ACL_ACCESS_XATTR) || fuse_req_ctx(req)->uid == 0)
		return 0;
	if (inode_read(rr_fs_of(req), ino, &in) || !(in.i_mode & S_ISGID))
		return 0;
	return !caller_in_group(req, inode_gid(in));
}

static void rr_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	if (!check_rw(req))
		return;
	if (rr_iguard(rr_fs_of(req), e2ino(ino))) {
		fuse_reply_err(req, EPERM);	/* as xattr_permission() */
		return;
	}
	flags &= XATTR_CREATE | XATTR_REPLACE;	/* the VFS allows no others */
	if (acl_kills_sgid(req, e2ino(ino), name))
		flags |= RR_XATTR_ACL_KILL_SGID;
	fuse_reply_err(req, -xattr_set(rr_fs_of(req), e2ino(ino), name, value, size, flags));
}

/* size 0 asks for the length; too small a buffer is ERANGE. */
static void reply_xattr_buf(fuse_req_t req, const void *val, size_t len, size_t size)
{
	if (!size)
		fuse_reply_xattr(req, len);
	else if (len > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, val, len);
}

static void rr_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	void *val = NULL;
	size_t len = 0;
	int ret = xattr_get(rr_fs_of(req), e2ino(ino), name, &val, &len);

	if (ret)
		fuse_reply_err(req, -ret);
	else
		reply_xattr_buf(req, val, len, size);
	free(val);
}

static void rr_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	char *names = NULL;
	size_t len = 0;
	int ret = xattr_list(rr_fs_of(req), e2ino(ino), fuse_req_ctx(req)->uid == 0, &names, &len);

	if (ret)
		fuse_reply_err(req, -ret);
	else
		reply_xattr_buf(req, names, len, size);
	free(names);
}

static void rr_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	if (!check_rw(req))
		return;
	if (rr_iguard(rr_fs_of(req), e2ino(ino)))
		fuse_reply_err(req, EPERM);
	else
		fuse_reply_err(req, -xattr_remove(rr_fs_of(req), e2ino(ino), name));
}

static void rr_fallocate(fuse_req_t req, fuse_ino_t fino, int mode, off_t off, off_t len,
			 struct fuse_file_info *fi)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct rr_inode *ri;
	unsigned int guard;
	int ret;

	if (!check_rw(req))
		return;
	if (off < 0 || len <= 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	ri = node(rfs, fino);
	guard = ri ? atomic_load(&ri->guard) : 0;
	ret = ri ? 0 : -EIO;
	/* As vfs_fallocate(): an append-only file may only grow. */
	if (!ret && ((guard & EXT2_IMMUTABLE_FL) || ((guard & EXT2_APPEND_FL) && (mode & ~FALLOC_FL_KEEP_SIZE))))
		ret = -EPERM;
	/* The kernel marks no FALLOCATE: a caller other than root is taken to lack CAP_FSETID. */
	if (!ret && rfs->killpriv_v2 && fuse_req_ctx(req)->uid)
		ret = drop_suidgid(req, fino, 0);
	if (!ret)
		ret = data_fallocate(rfs, ri, mode, (uint64_t)off, (uint64_t)len, fh_privileged(fi));
	if (ri)
		rr_iunpin(rfs, ri);
	fuse_reply_err(req, -ret);
}

/*
 * The inode flags lsattr shows, as ext4's EXT4_FL_USER_VISIBLE.  chattr's
 * changes reach a FUSE server masked to the VFS's FS_FL_USER_MODIFIABLE (the
 * kernel's fileattr_fill_flags), so the other bits are never changed here.
 */
#define RR_FL_VISIBLE		0x705BDFFFu
#define RR_FL_SETTABLE		FS_FL_USER_MODIFIABLE
/* What FS_IOC_FSSETXATTR sets: the flags of xflag_map below. */
#define RR_FL_XSETTABLE		(EXT2_SYNC_FL | EXT2_IMMUTABLE_FL | EXT2_APPEND_FL | EXT2_NODUMP_FL | \
				 EXT2_NOATIME_FL | EXT4_PROJINHERIT_FL)

/* ext4 inode flags and their FS_IOC_FSGETXATTR names (ext4_iflags_to_xflags). */
static const struct {
	unsigned int fl, xfl;
} xflag_map[] = {
	{ EXT2_SYNC_FL, FS_XFLAG_SYNC },
	{ EXT2_IMMUTABLE_FL, FS_XFLAG_IMMUTABLE },
	{ EXT2_APPEND_FL, FS_XFLAG_APPEND },
	{ EXT2_NODUMP_FL, FS_XFLAG_NODUMP },
	{ EXT2_NOATIME_FL, FS_XFLAG_NOATIME },
	{ EXT4_PROJINHERIT_FL, FS_XFLAG_PROJINHERIT },
};

static unsigned int to_xflags(unsigned int fl)
{
	unsigned int x = 0;
	size_t i;

	for (i = 0; i < sizeof(xflag_map) / sizeof(xflag_map[0]); i++)
		if (fl & xflag_map[i].fl)
			x |= xflag_map[i].xfl;
	return x;
}

static unsigned int projid_of(const struct ext2_inode_large *in)
{
	size_t end = offsetof(struct ext2_inode_large, i_projid) + sizeof(in->i_projid);

	return (size_t)EXT2_GOOD_OLD_INODE_SIZE + in->i_extra_isize >= end ? in->i_projid : 0;
}

/* want: the new flags, of which only the bits in mask are changed. */
static int set_flags(fuse_req_t req, ext2_ino_t ino, unsigned int want, unsigned int mask)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct rr_fs *rfs = rr_fs_of(req);
	struct ext2_inode_large in;
	struct rr_inode *ri;
	unsigned int changed;
	int ret;

	if (rfs->ro)
		return -EROFS;
	rr_fs_lock(rfs);
	ret = inode_load(rfs, ino, &in);
	if (ret)
		goto out;
	changed = (in.i_flags ^ want) & mask;
	if (ctx->uid != 0 && ctx->uid != inode_uid(in))
		ret = -EPERM;		/* inode_owner_or_capable() */
	else if ((changed & RR_FL_GUARD) && ctx->uid != 0)
		ret = -EPERM;		/* CAP_LINUX_IMMUTABLE */
	if (ret || !changed)
		goto out;
	in.i_flags = (in.i_flags & ~mask) | (want & mask);
	inode_touch(&in, RR_CTIME);
	ret = inode_write(rfs, ino, &in);
	ri = ret ? NULL : rr_ipin(rfs, ino);
	if (ri) {
		atomic_store(&ri->guard, in.i_flags & RR_FL_GUARD);
		rr_iunpin(rfs, ri);
	}
out:
	rr_fs_end_op(rfs);
	return ret;
}

/* fstrim MOUNTPOINT: root only, as ext4 asks CAP_SYS_ADMIN. */
static void rr_ioctl_trim(fuse_req_t req, const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct fstrim_range r;
	uint64_t trimmed;
	int ret;

	if (in_bufsz < sizeof(r) || out_bufsz < sizeof(r)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (fuse_req_ctx(req)->uid != 0) {
		fuse_reply_err(req, EPERM);
		return;
	}
	if (rfs->ro) {
		fuse_reply_err(req, EROFS);
		return;
	}
	memcpy(&r, in_buf, sizeof(r));
	ret = rr_trim(rfs, r.start, r.len, r.minlen, &trimmed);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	r.len = trimmed;
	fuse_reply_ioctl(req, 0, &r, sizeof(r));
}

/* rrctl: commands on the mount's root only, so no file's ioctl namespace is taken. */
static void rr_ioctl_ctl(fuse_req_t req, fuse_ino_t fino, unsigned int cmd, const void *in_buf,
			 size_t in_bufsz, size_t out_bufsz)
{
	union rr_ctl_buf *buf;
	size_t len = 0;
	int ret;

	if (fino != FUSE_ROOT_ID) {
		fuse_reply_err(req, ENOTTY);
		return;
	}
	buf = malloc(sizeof(*buf));
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	ret = rr_ctl(rr_fs_of(req), cmd, fuse_req_ctx(req)->uid, in_buf, in_bufsz, out_bufsz, buf, &len);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_ioctl(req, 0, buf, len);
	free(buf);
}

static void rr_ioctl(fuse_req_t req, fuse_ino_t fino, unsigned int cmd, void *arg,
		     struct fuse_file_info *fi, unsigned flags, const void *in_buf, size_t in_bufsz,
		     size_t out_bufsz)
{
	struct ext2_inode_large in;
	size_t in_need = 0, out_need = 0, i;
	struct fsxattr fa;
	unsigned int v;
	int ret;

	(void)arg;
	(void)fi;
	if (flags & FUSE_IOCTL_COMPAT) {
		fuse_reply_err(req, ENOSYS);
		return;
	}
	if (cmd == FITRIM) {
		rr_ioctl_trim(req, in_buf, in_bufsz, out_bufsz);
		return;
	}
	if (rr_ctl_is_cmd(cmd)) {
		rr_ioctl_ctl(req, fino, cmd, in_buf, in_bufsz, out_bufsz);
		return;
	}
	/* The kernel passes the flags as an int (fuse_fileattr_get/set), whatever FS_IOC_* says. */
	switch (cmd) {
	case FS_IOC_GETFLAGS:
		out_need = sizeof(v);
		break;
	case FS_IOC_SETFLAGS:
		in_need = sizeof(v);
		break;
	case FS_IOC_FSGETXATTR:		/* the kernel's chattr path reads the flags this way first */
		out_need = sizeof(fa);
		break;
	case FS_IOC_FSSETXATTR:
		in_need = sizeof(fa);
		break;
	default:
		fuse_reply_err(req, ENOTTY);
		return;
	}
	if (in_bufsz < in_need || out_bufsz < out_need) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	ret = inode_read(rr_fs_of(req), e2ino(fino), &in);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	switch (cmd) {
	case FS_IOC_GETFLAGS:
		v = in.i_flags & RR_FL_VISIBLE;
		fuse_reply_ioctl(req, 0, &v, sizeof(v));
		return;
	case FS_IOC_FSGETXATTR:
		memset(&fa, 0, sizeof(fa));
		fa.fsx_xflags = to_xflags(in.i_flags);
		fa.fsx_projid = projid_of(&in);
		fuse_reply_ioctl(req, 0, &fa, sizeof(fa));
		return;
	case FS_IOC_SETFLAGS:
		memcpy(&v, in_buf, sizeof(v));
		ret = set_flags(req, e2ino(fino), v, RR_FL_SETTABLE);
		break;
	default:	/* FS_IOC_FSSETXATTR */
		memcpy(&fa, in_buf, sizeof(fa));
		/* Project ids are not managed here (the quota feature mounts read-only). */
		if ((fa.fsx_xflags & ~to_xflags(~0u)) || fa.fsx_projid != projid_of(&in)) {
			ret = -EOPNOTSUPP;
			break;
		}
		v = 0;
		for (i = 0; i < sizeof(xflag_map) / sizeof(xflag_map[0]); i++)
			if (fa.fsx_xflags & xflag_map[i].xfl)
				v |= xflag_map[i].fl;
		ret = set_flags(req, e2ino(fino), v, RR_FL_XSETTABLE);
	}
	/*
	 * The new ctime (ext4_fileattr_set sets it) is ours alone: the kernel
	 * neither sets nor asks for it after this ioctl, and would show the
	 * cached one until the attributes time out.  Attributes only, before
	 * the reply: the kernel holds the inode's lock across the ioctl but
	 * takes no lock to invalidate attributes.
	 */
	if (!ret)
		fuse_lowlevel_notify_inval_inode(rr_fs_of(req)->se, fino, -1, 0);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_ioctl(req, 0, NULL, 0);
}

static void rr_lseek(fuse_req_t req, fuse_ino_t fino, off_t off, int whence, struct fuse_file_info *fi)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct rr_inode *ri;
	int64_t r;

	(void)fi;
	if (off < 0 || (whence != SEEK_DATA && whence != SEEK_HOLE)) {
		fuse_reply_err(req, off < 0 ? ENXIO : EINVAL);
		return;
	}
	ri = node(rfs, fino);
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

const struct fuse_lowlevel_ops rr_ops = {
	.init = rr_init,
	.destroy = rr_destroy,
	.lookup = rr_lookup,
	.forget = rr_forget,
	.forget_multi = rr_forget_multi,
	.getattr = rr_getattr,
	.setattr = rr_setattr,
	.readlink = rr_readlink,
	.mknod = rr_mknod,
	.mkdir = rr_mkdir,
	.symlink = rr_symlink,
	.link = rr_link,
	.unlink = rr_unlink,
	.rmdir = rr_rmdir,
	.rename = rr_rename,
	.open = rr_open,
	.create = rr_create,
	.read = rr_read,
	.write = rr_write,
	/*
	 * No .flush: libfuse answers ENOSYS once and the kernel stops sending
	 * FLUSH (it still writes dirty pages back at close, and then drops its
	 * cached block count).  Nothing is left to do at close here.
	 */
	.release = rr_release,
	.fsync = rr_fsync,
	.opendir = rr_opendir,
	.readdir = rr_readdir,
	.readdirplus = rr_readdirplus,
	.releasedir = rr_releasedir,
	.fsyncdir = rr_fsync,
	.statfs = rr_statfs,
	.setxattr = rr_setxattr,
	.getxattr = rr_getxattr,
	.listxattr = rr_listxattr,
	.removexattr = rr_removexattr,
	.fallocate = rr_fallocate,
	.lseek = rr_lseek,
	.ioctl = rr_ioctl,
};

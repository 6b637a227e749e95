// SPDX-License-Identifier: GPL-2.0
/*
 * The FUSE low-level operation table: decode the request, call the module
 * that does the work, reply exactly once.  Replies happen only here and in
 * ops_file.c (open files), ops_dir.c (listings) and ops_ioctl.c.
 *
 * FUSE node ids are ext4 inode numbers, except that FUSE's root (1) is
 * ext4's root (2); ext4's inode 1 (bad blocks) is never exposed.
 */
#include "ops_int.h"
#include "attr.h"
#include "channel.h"
#include "dir.h"
#include "log.h"
#include "rrfs.h"
#include "symlink.h"
#include "utab.h"
#include "xattr.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>

/* The in-memory inode of a node the kernel holds a reference to, pinned: rr_iunpin() when done. */
struct rr_inode *ops_node(struct rr_fs *rfs, fuse_ino_t ino)
{
	struct rr_inode *ri = rr_ipin(rfs, e2ino(ino));

	if (!ri)
		rr_log(LOG_ERR, "request for inode %llu that the kernel never looked up",
		       (unsigned long long)ino);
	return ri;
}

/* in_group_p(): the caller's filesystem gid or one of its supplementary groups. */
static int caller_in_group(const struct rr_cred *cr, gid_t gid)
{
	fuse_req_t req = cr->req;
	gid_t small[32], *list = small;
	int n, i, in = cr->gid == gid;

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

void ops_cred(fuse_req_t req, struct rr_cred *cr)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	cr->uid = ctx->uid;
	cr->gid = ctx->gid;
	/* FUSE_CAP_DONT_MASK: a parent's default ACL decides whether the umask applies. */
	cr->umask = ctx->umask;
	cr->in_group = caller_in_group;
	cr->req = req;
}

int ops_is_root(fuse_req_t req)
{
	struct rr_fs *rfs = rr_fs_of(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct ext2_super_block *sb = rfs->fs->super;

	return ctx->uid == 0 || ctx->uid == sb->s_def_resuid ||
	       (sb->s_def_resgid && ctx->gid == sb->s_def_resgid);
}

void ops_fill_entry(struct rr_fs *rfs, ext2_ino_t ino, const struct ext2_inode_large *in,
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
	ops_fill_entry(rr_fs_of(req), ino, in, &e);
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
	struct rr_inode *ri = ops_node(rfs, ino);

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
		struct rr_inode *ri = ops_node(rfs, forgets[i].ino);

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

/*
 * A write or an fallocate drops the set-id bits: no SETATTR follows, so the
 * kernel's copy of the mode is stale until it hears.
 */
int ops_drop_suidgid(fuse_req_t req, fuse_ino_t fino)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct rr_cred cr;
	int dropped, ret;

	ops_cred(req, &cr);
	ret = attr_drop_suidgid(rfs, e2ino(fino), &cr, &dropped);
	if (dropped && !rfs->opts.single)
		fuse_lowlevel_notify_inval_inode(rfs->se, fino, -1, 0);
	return ret;
}

/* FUSE's SETATTR bits and attr_set()'s. */
static const struct {
	int fuse;
	unsigned int rr;
} set_bits[] = {
	{ FUSE_SET_ATTR_MODE, RR_ATTR_MODE },
	{ FUSE_SET_ATTR_UID, RR_ATTR_UID },
	{ FUSE_SET_ATTR_GID, RR_ATTR_GID },
	{ FUSE_SET_ATTR_SIZE, RR_ATTR_SIZE },
	{ FUSE_SET_ATTR_ATIME, RR_ATTR_ATIME },
	{ FUSE_SET_ATTR_MTIME, RR_ATTR_MTIME },
	{ FUSE_SET_ATTR_ATIME_NOW, RR_ATTR_ATIME_NOW },
	{ FUSE_SET_ATTR_MTIME_NOW, RR_ATTR_MTIME_NOW },
	{ FUSE_SET_ATTR_CTIME, RR_ATTR_CTIME },
};

static void rr_setattr(fuse_req_t req, fuse_ino_t fino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct ext2_inode_large in;
	unsigned int set = 0;
	struct rr_cred cr;
	size_t i;
	int ret;

	for (i = 0; i < sizeof(set_bits) / sizeof(set_bits[0]); i++) {
		if (to_set & set_bits[i].fuse)
			set |= set_bits[i].rr;
		to_set &= ~set_bits[i].fuse;
	}
	set |= (to_set ? RR_ATTR_OTHER : 0) | (fi ? RR_ATTR_OPEN_FILE : 0) |
	       (chan_req_kills_suidgid() ? RR_ATTR_KILL_SUIDGID : 0);
	ops_cred(req, &cr);
	ret = attr_set(rr_fs_of(req), e2ino(fino), &cr, set, attr, &in);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		reply_attr(req, e2ino(fino), &in);
}

static void rr_readlink(fuse_req_t req, fuse_ino_t fino)
{
	char *target;
	int ret = symlink_read(rr_fs_of(req), e2ino(fino), &target);

	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_readlink(req, target);
	free(target);
}

int ops_check_rw(fuse_req_t req)
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

	if (!ops_check_rw(req))
		return;
	ops_cred(req, &cr);
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

	if (!ops_check_rw(req))
		return;
	ret = dir_link(rr_fs_of(req), e2ino(fino), e2ino(newparent), newname, &ri, &in);
	reply_entry(req, ret, e2ino(fino), ri, &in);
}

static void rr_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	if (ops_check_rw(req))
		fuse_reply_err(req, -dir_unlink(rr_fs_of(req), e2ino(parent), name, 0));
}

static void rr_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	if (ops_check_rw(req))
		fuse_reply_err(req, -dir_unlink(rr_fs_of(req), e2ino(parent), name, 1));
}

static void rr_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	struct rr_cred cr;

	if (!ops_check_rw(req))
		return;
	ops_cred(req, &cr);
	fuse_reply_err(req, -dir_rename(rr_fs_of(req), e2ino(parent), name, e2ino(newparent), newname, flags,
					&cr));
}

static void rr_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs st;

	(void)ino;
	rr_fs_statfs(rr_fs_of(req), &st);
	fuse_reply_statfs(req, &st);
}

static void rr_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	struct rr_cred cr;

	if (!ops_check_rw(req))
		return;
	if (rr_iguard(rr_fs_of(req), e2ino(ino))) {
		fuse_reply_err(req, EPERM);	/* as xattr_permission() */
		return;
	}
	flags &= XATTR_CREATE | XATTR_REPLACE;	/* the VFS allows no others */
	ops_cred(req, &cr);
	if (attr_acl_kills_sgid(rr_fs_of(req), e2ino(ino), &cr, name))
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
	if (!ops_check_rw(req))
		return;
	if (rr_iguard(rr_fs_of(req), e2ino(ino)))
		fuse_reply_err(req, EPERM);
	else
		fuse_reply_err(req, -xattr_remove(rr_fs_of(req), e2ino(ino), name));
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

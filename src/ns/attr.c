// SPDX-License-Identifier: GPL-2.0
/*
 * An inode's attributes as the VFS asks for them and changes them: SETATTR
 * with the kernel's may_setattr() rules for immutable and append-only
 * inodes, the set-id bits a change drops, and statx's fields.
 */
#include "attr.h"
#include "acl.h"
#include "data.h"
#include "xattr.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#define RR_ATTR_FIELDS	(RR_ATTR_MODE | RR_ATTR_UID | RR_ATTR_GID | RR_ATTR_SIZE | RR_ATTR_ATIME | \
			 RR_ATTR_MTIME | RR_ATTR_ATIME_NOW | RR_ATTR_MTIME_NOW | RR_ATTR_CTIME | \
			 RR_ATTR_OTHER)

/*
 * The set-id bits the VFS's setattr_should_drop_suidgid() drops for a
 * caller without CAP_FSETID (capable: the caller may keep a set-group-ID
 * that is not group-executable, as in_group_or_capable()).  Under
 * KILLPRIV_V2 the kernel leaves this to the server: it marks the requests
 * whose caller lacks CAP_FSETID, and marks none for fallocate().  For
 * every kind but directories, as chown_common() asks.
 */
static __u16 suidgid_to_drop(struct rr_fs *rfs, ext2_ino_t ino, const struct rr_cred *cr, int capable)
{
	struct ext2_inode_large in;
	__u16 mode, kill = 0;

	if (inode_read(rfs, ino, &in) || LINUX_S_ISDIR(in.i_mode))
		return 0;
	mode = in.i_mode;
	if (mode & S_ISUID)
		kill |= S_ISUID;
	if ((mode & S_ISGID) && ((mode & S_IXGRP) || (!capable && !cr->in_group(cr, inode_gid(in)))))
		kill |= S_ISGID;
	return kill;
}

int attr_drop_suidgid(struct rr_fs *rfs, ext2_ino_t ino, const struct rr_cred *cr, int *dropped)
{
	__u16 kill = suidgid_to_drop(rfs, ino, cr, 0);
	struct ext2_inode_large in;
	struct timespec now;
	int ret;

	*dropped = 0;
	if (!kill)
		return 0;
	clock_gettime(CLOCK_REALTIME_COARSE, &now);
	rr_fs_lock(rfs);
	ret = inode_load(rfs, ino, &in);
	if (!ret) {
		in.i_mode &= (__u16)~kill;
		inode_set_time(&in, RR_CTIME, &now);
		ret = inode_write(rfs, ino, &in);
	}
	rr_fs_end_op(rfs);
	*dropped = !ret;
	return ret;
}

/*
 * An access ACL sets the mode's permission bits; the kernel's
 * posix_acl_update_mode() also drops set-gid for a caller neither in the
 * file's group nor privileged (CAP_FSETID: root here).  libfuse 3.14 does
 * not pass the kernel's verdict (FUSE_SETXATTR_ACL_KILL_SGID), so decide it
 * here from the caller's groups.
 */
int attr_acl_kills_sgid(struct rr_fs *rfs, ext2_ino_t ino, const struct rr_cred *cr, const char *name)
{
	struct ext2_inode_large in;

	if (strcmp(name, ACL_ACCESS_XATTR) || cr->uid == 0)
		return 0;
	if (inode_read(rfs, ino, &in) || !(in.i_mode & S_ISGID))
		return 0;
	return !cr->in_group(cr, inode_gid(in));
}

/*
 * The writeback cache's flush of the mtime and ctime it keeps for a regular
 * file (after writes, and after calls it failed only once it had touched
 * them): MTIME without ATIME and without MTIME_NOW, on an open file, which
 * explicit utimes never names.  Refusing it on an append-only or immutable
 * file would fail fsync() and leave stat showing a time the image lacks.
 */
static int wb_time_flush(const struct rr_fs *rfs, unsigned int set)
{
	return rfs->opts.writeback && (set & RR_ATTR_OPEN_FILE) && (set & RR_ATTR_MTIME) &&
	       !(set & RR_ATTR_FIELDS & ~(RR_ATTR_MTIME | RR_ATTR_CTIME));
}

/*
 * The kernel's may_setattr() on an append-only inode: no new size, mode or
 * owner, and no times given explicitly (ATTR_TIMES_SET: utimes with a times
 * array, UTIME_OMIT included), but "now" for both (utimes(NULL),
 * ATTR_TOUCH) is allowed.  FUSE does not pass those flags: a touch arrives
 * as ATIME_NOW with MTIME_NOW, or with MTIME of the kernel's own clock under
 * the writeback cache, where (UTIME_NOW, t) therefore passes as a touch.
 */
static int append_only_denies(const struct rr_fs *rfs, unsigned int set)
{
	if (set & (RR_ATTR_SIZE | RR_ATTR_MODE | RR_ATTR_UID | RR_ATTR_GID))
		return 1;
	if (!(set & (RR_ATTR_ATIME | RR_ATTR_MTIME)) || wb_time_flush(rfs, set))
		return 0;
	return !((set & RR_ATTR_ATIME_NOW) &&
		 ((set & RR_ATTR_MTIME_NOW) || (rfs->opts.writeback && (set & RR_ATTR_MTIME))));
}

static int truncate_ino(struct rr_fs *rfs, ext2_ino_t ino, uint64_t size)
{
	struct rr_inode *ri = rr_ipin(rfs, ino);
	int ret;

	if (!ri) {
		rr_log(LOG_ERR, "request for inode %u that the kernel never looked up", ino);
		return -EIO;
	}
	ret = data_truncate(rfs, ri, size);
	rr_iunpin(rfs, ri);
	return ret;
}

/* The new mode, owner and times of in; the set-id bits kill go. */
static void apply_attr(struct ext2_inode_large *in, unsigned int set, const struct stat *attr,
		       __u16 kill, const struct timespec *now)
{
	in->i_mode &= (__u16)~kill;
	if (set & RR_ATTR_MODE)
		in->i_mode = (__u16)((in->i_mode & S_IFMT) | (attr->st_mode & ~S_IFMT));
	if (set & RR_ATTR_UID) {
		in->i_uid = (__u16)attr->st_uid;
		ext2fs_set_i_uid_high(*in, attr->st_uid >> 16);
	}
	if (set & RR_ATTR_GID) {
		in->i_gid = (__u16)attr->st_gid;
		ext2fs_set_i_gid_high(*in, attr->st_gid >> 16);
	}
	if (set & RR_ATTR_ATIME_NOW)
		inode_set_time(in, RR_ATIME, now);
	else if (set & RR_ATTR_ATIME)
		inode_set_time(in, RR_ATIME, &attr->st_atim);
	if (set & RR_ATTR_MTIME_NOW)
		inode_set_time(in, RR_MTIME, now);
	else if (set & RR_ATTR_MTIME)
		inode_set_time(in, RR_MTIME, &attr->st_mtim);
	inode_set_time(in, RR_CTIME, (set & RR_ATTR_CTIME) ? &attr->st_ctim : now);
}

int attr_set(struct rr_fs *rfs, ext2_ino_t ino, const struct rr_cred *cr, unsigned int set,
	     const struct stat *attr, struct ext2_inode_large *in)
{
	struct timespec now;
	unsigned int guard;
	__u16 kill = 0;
	int ret;

	if (rfs->ro)
		return -EROFS;
	/* As may_setattr(): an immutable inode changes nothing. */
	guard = rr_iguard(rfs, ino);
	if (((guard & EXT2_IMMUTABLE_FL) && !wb_time_flush(rfs, set)) ||
	    ((guard & EXT2_APPEND_FL) && append_only_denies(rfs, set)))
		return -EPERM;
	if (set & RR_ATTR_SIZE) {
		ret = truncate_ino(rfs, ino, (uint64_t)attr->st_size);
		if (ret)
			return ret;
	}
	/*
	 * Marked for a chown() always, for a truncate by a caller without
	 * CAP_FSETID; root's chown() keeps a set-gid that is not group-executable.
	 */
	if (set & RR_ATTR_KILL_SUIDGID)
		kill = suidgid_to_drop(rfs, ino, cr, !(set & RR_ATTR_SIZE) && cr->uid == 0);
	clock_gettime(CLOCK_REALTIME_COARSE, &now);
	rr_fs_lock(rfs);
	ret = inode_load(rfs, ino, in);
	if (!ret) {
		apply_attr(in, set, attr, kill, &now);
		ret = inode_write(rfs, ino, in);
		if (!ret && (set & RR_ATTR_MODE))
			ret = xattr_acl_chmod(rfs, ino, in->i_mode);
		if (!ret && (set & RR_ATTR_MODE))
			ret = inode_load(rfs, ino, in);
	}
	rr_fs_end_op(rfs);
	return ret;
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

void attr_statx(struct rr_fs *rfs, ext2_ino_t ino, const struct ext2_inode_large *in,
		struct rr_fuse_statx *sx)
{
	struct stat st;
	size_t i;

	inode_stat(rfs, ino, in, &st);
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
	sx_time(in, RR_ATIME, &sx->atime);
	sx_time(in, RR_MTIME, &sx->mtime);
	sx_time(in, RR_CTIME, &sx->ctime);
	/* Birth time where the inode has room for it (not in 128-byte inodes), as ext4. */
	if (inode_has_crtime(in)) {
		sx->mask |= STATX_BTIME;
		sx_time(in, RR_CRTIME, &sx->btime);
	}
	for (i = 0; i < sizeof(sx_attr_map) / sizeof(sx_attr_map[0]); i++) {
		sx->attributes_mask |= sx_attr_map[i].attr;
		if (in->i_flags & sx_attr_map[i].fl)
			sx->attributes |= sx_attr_map[i].attr;
	}
}

/* Writing an immutable file, or an append-only one other than by appending. */
int attr_guard_open(struct rr_inode *ri, int flags)
{
	unsigned int g = atomic_load(&ri->guard);

	if ((flags & O_ACCMODE) == O_RDONLY)
		return 0;
	if ((g & EXT2_IMMUTABLE_FL) || ((g & EXT2_APPEND_FL) && (!(flags & O_APPEND) || (flags & O_TRUNC))))
		return -EPERM;
	return 0;
}

/* As vfs_fallocate(): an append-only file may only grow. */
int attr_guard_fallocate(struct rr_inode *ri, int mode)
{
	unsigned int g = atomic_load(&ri->guard);

	if ((g & EXT2_IMMUTABLE_FL) || ((g & EXT2_APPEND_FL) && (mode & ~FALLOC_FL_KEEP_SIZE)))
		return -EPERM;
	return 0;
}

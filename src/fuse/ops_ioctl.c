// SPDX-License-Identifier: GPL-2.0
/*
 * FUSE ioctls: lsattr/chattr (chattr.c), fstrim (trim.c) and rrctl's
 * commands on the mount's root (ctl.c).
 */
#include "ops_int.h"
#include "chattr.h"
#include "ctl.h"
#include "trim.h"

#include <errno.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>

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

void rr_ioctl(fuse_req_t req, fuse_ino_t fino, unsigned int cmd, void *arg,
		     struct fuse_file_info *fi, unsigned flags, const void *in_buf, size_t in_bufsz,
		     size_t out_bufsz)
{
	size_t in_need = 0, out_need = 0;
	struct fsxattr fa;
	struct rr_cred cr;
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
	ops_cred(req, &cr);
	switch (cmd) {
	case FS_IOC_GETFLAGS:
		ret = chattr_get_flags(rr_fs_of(req), e2ino(fino), &v);
		if (!ret)
			fuse_reply_ioctl(req, 0, &v, sizeof(v));
		break;
	case FS_IOC_FSGETXATTR:
		ret = chattr_get_xattr(rr_fs_of(req), e2ino(fino), &fa);
		if (!ret)
			fuse_reply_ioctl(req, 0, &fa, sizeof(fa));
		break;
	case FS_IOC_SETFLAGS:
		memcpy(&v, in_buf, sizeof(v));
		ret = chattr_set_flags(rr_fs_of(req), e2ino(fino), &cr, v);
		break;
	default:	/* FS_IOC_FSSETXATTR */
		memcpy(&fa, in_buf, sizeof(fa));
		ret = chattr_set_xattr(rr_fs_of(req), e2ino(fino), &cr, &fa);
	}
	if (ret)
		fuse_reply_err(req, -ret);
	if (ret || cmd == FS_IOC_GETFLAGS || cmd == FS_IOC_FSGETXATTR)
		return;
	/*
	 * The new ctime (ext4_fileattr_set sets it) is ours alone: the kernel
	 * neither sets nor asks for it after this ioctl, and would show the
	 * cached one until the attributes time out.  Attributes only, before
	 * the reply: the kernel holds the inode's lock across the ioctl but
	 * takes no lock to invalidate attributes.
	 */
	fuse_lowlevel_notify_inval_inode(rr_fs_of(req)->se, fino, -1, 0);
	fuse_reply_ioctl(req, 0, NULL, 0);
}

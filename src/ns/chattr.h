/* SPDX-License-Identifier: GPL-2.0 */
#ifndef RRFUSE_CHATTR_H
#define RRFUSE_CHATTR_H

#include <linux/fs.h>

#include "dir.h"
#include "rrfs.h"

/*
 * lsattr and chattr: FS_IOC_GETFLAGS/SETFLAGS and FS_IOC_FSGETXATTR/
 * FSSETXATTR on an inode.  All return 0 or -errno; the setters take the fs
 * lock themselves and change the inode's ctime.
 */
int chattr_get_flags(struct rr_fs *rfs, ext2_ino_t ino, unsigned int *flags);
int chattr_set_flags(struct rr_fs *rfs, ext2_ino_t ino, const struct rr_cred *cr, unsigned int flags);
int chattr_get_xattr(struct rr_fs *rfs, ext2_ino_t ino, struct fsxattr *fa);
int chattr_set_xattr(struct rr_fs *rfs, ext2_ino_t ino, const struct rr_cred *cr, const struct fsxattr *fa);

#endif

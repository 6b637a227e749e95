/* SPDX-License-Identifier: GPL-2.0 */
#ifndef RRFUSE_ATTR_H
#define RRFUSE_ATTR_H

#include "dir.h"
#include "rrfs.h"
#include "rrfuse/fuse_statx.h"

/* What attr_set() changes: the fields of struct stat named, and how it was asked. */
#define RR_ATTR_MODE		(1u << 0)
#define RR_ATTR_UID		(1u << 1)
#define RR_ATTR_GID		(1u << 2)
#define RR_ATTR_SIZE		(1u << 3)
#define RR_ATTR_ATIME		(1u << 4)
#define RR_ATTR_MTIME		(1u << 5)
#define RR_ATTR_ATIME_NOW	(1u << 6)
#define RR_ATTR_MTIME_NOW	(1u << 7)
#define RR_ATTR_CTIME		(1u << 8)
#define RR_ATTR_OTHER		(1u << 9)	/* a bit the front end has no name for */
#define RR_ATTR_OPEN_FILE	(1u << 10)	/* on an open file */
#define RR_ATTR_KILL_SUIDGID	(1u << 11)	/* the caller lacks CAP_FSETID (KILLPRIV_V2's mark) */

/*
 * All return 0 or -errno and take the fs lock themselves.
 * SETATTR: in is the inode as it is now.
 */
int attr_set(struct rr_fs *rfs, ext2_ino_t ino, const struct rr_cred *cr, unsigned int set,
	     const struct stat *attr, struct ext2_inode_large *in);
/*
 * A write or an fallocate by a caller without CAP_FSETID drops the file's
 * set-id bits; *dropped: whether any went (the front end's copy is stale).
 */
int attr_drop_suidgid(struct rr_fs *rfs, ext2_ino_t ino, const struct rr_cred *cr, int *dropped);
/* Setting the access ACL name by cr clears set-gid (the kernel's posix_acl_update_mode). */
int attr_acl_kills_sgid(struct rr_fs *rfs, ext2_ino_t ino, const struct rr_cred *cr, const char *name);
/* The fields of FUSE_STATX's reply from the inode in; attr_valid is the caller's. */
void attr_statx(struct rr_fs *rfs, ext2_ino_t ino, const struct ext2_inode_large *in,
		struct rr_fuse_statx *sx);
/* Opening with flags for writing, or fallocate() with mode, on ri: -EPERM if its flags forbid it. */
int attr_guard_open(struct rr_inode *ri, int flags);
int attr_guard_fallocate(struct rr_inode *ri, int mode);

#endif

/* SPDX-License-Identifier: GPL-2.0 */
#ifndef RRFUSE_XATTR_H
#define RRFUSE_XATTR_H

#include "rrfs.h"

/* Values are malloc'd; all return 0 or -errno.  _locked: caller holds the fs lock. */
void xattr_caps_absent(struct rr_inode *ri);
int xattr_get(struct rr_fs *rfs, ext2_ino_t ino, const char *name, void **val, size_t *len);
int xattr_get_locked(struct rr_fs *rfs, ext2_ino_t ino, const char *name, void **val, size_t *len);
int xattr_list(struct rr_fs *rfs, ext2_ino_t ino, int privileged, char **names, size_t *len);
/*
 * A flag of xattr_set(), beside XATTR_CREATE and XATTR_REPLACE: setting an
 * access ACL also clears the set-gid bit (the caller is neither in the
 * file's group nor privileged: the kernel's posix_acl_update_mode).
 */
#define RR_XATTR_ACL_KILL_SGID	0x100

int xattr_set(struct rr_fs *rfs, ext2_ino_t ino, const char *name, const void *val, size_t len,
	      int flags);
int xattr_set_locked(struct rr_fs *rfs, ext2_ino_t ino, const char *name, const void *val,
		     size_t len, int flags);
int xattr_remove(struct rr_fs *rfs, ext2_ino_t ino, const char *name);

/* POSIX ACLs kept in step with modes and inherited by new inodes. */
struct rr_acl_init {
	void *dflt, *acc;
	size_t dflt_len, acc_len;
};
int xattr_acl_chmod(struct rr_fs *rfs, ext2_ino_t ino, mode_t mode);
int xattr_acl_prepare(struct rr_fs *rfs, ext2_ino_t dir, mode_t *mode, mode_t umask,
		      struct rr_acl_init *ai);
int xattr_acl_apply(struct rr_fs *rfs, ext2_ino_t ino, mode_t mode, struct rr_acl_init *ai);
void xattr_acl_done(struct rr_acl_init *ai);

#endif

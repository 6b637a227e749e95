/* SPDX-License-Identifier: GPL-2.0 */
/*
 * POSIX ACLs in the VFS xattr format (system.posix_acl_*), which libext2fs
 * converts to and from ext4's on-disk format.  With FUSE_CAP_POSIX_ACL the
 * kernel enforces ACLs; the filesystem keeps mode and ACL in step and
 * applies default ACLs to new inodes.
 */
#ifndef RRFUSE_ACL_H
#define RRFUSE_ACL_H

#include <stddef.h>
#include <sys/types.h>

#define ACL_ACCESS_XATTR "system.posix_acl_access"
#define ACL_DEFAULT_XATTR "system.posix_acl_default"

/* Validate; *perm gets the rwx bits the ACL implies for the mode, *equiv whether mode says it all. */
int acl_to_mode(const void *val, size_t len, mode_t *perm, int *equiv);
/* chmod: the owner, group-class (mask, else group) and other entries follow mode. */
int acl_chmod(void *val, size_t len, mode_t mode);
/*
 * A new inode's access ACL from its parent's default ACL: entries masked by
 * the creation mode, whose permission bits are updated.  *acc is malloc'd,
 * or NULL when the mode says it all.
 */
int acl_inherit(const void *dflt, size_t len, mode_t *mode, void **acc, size_t *acclen);

#endif

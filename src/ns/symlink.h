/* SPDX-License-Identifier: GPL-2.0 */
#ifndef RRFUSE_SYMLINK_H
#define RRFUSE_SYMLINK_H

#include "rrfs.h"

/* A new symlink inode ino (in) gets its target of len bytes; the caller holds the fs lock. */
int symlink_set_target(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in,
		       const char *target, size_t len);
/* READLINK: *target is malloc'd and NUL-terminated.  0 or -errno. */
int symlink_read(struct rr_fs *rfs, ext2_ino_t ino, char **target);

#endif

/* SPDX-License-Identifier: GPL-2.0 */
#ifndef RRFUSE_XATTR_H
#define RRFUSE_XATTR_H

#include "rrfs.h"

/* Values are malloc'd; all return 0 or -errno and take the fs lock. */
int xattr_get(struct rr_fs *rfs, ext2_ino_t ino, const char *name, void **val, size_t *len);
int xattr_list(struct rr_fs *rfs, ext2_ino_t ino, char **names, size_t *len);
int xattr_set(struct rr_fs *rfs, ext2_ino_t ino, const char *name, const void *val, size_t len,
	      int flags);
int xattr_remove(struct rr_fs *rfs, ext2_ino_t ino, const char *name);

#endif

/* SPDX-License-Identifier: GPL-2.0 */
#ifndef RRFUSE_HTREE_H
#define RRFUSE_HTREE_H

#include "rrfs.h"

/*
 * Index a full one-block linear directory and add the entry that did not
 * fit.  Caller holds the fs lock.  -ENOSPC: not a candidate (grow it
 * linearly instead); nothing was changed.
 */
int htree_index_dir(struct rr_fs *rfs, ext2_ino_t dir, const char *name, ext2_ino_t ino, int ftype);

#endif

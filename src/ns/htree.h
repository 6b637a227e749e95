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

/*
 * Find name through the index, or in the one block of a small linear
 * directory (caller holds the fs lock): 0 with *ino and the block's
 * physical number, -ENOENT, or -EAGAIN when the caller must scan with
 * libext2fs.
 */
int htree_find(struct rr_fs *rfs, ext2_ino_t dir, const char *name, ext2_ino_t *ino, blk64_t *leaf);
/*
 * Add name's entry where ext2fs_link() would put it, when that is the leaf
 * its hash leads to (or the one block of a small linear directory) and
 * it has room; -EAGAIN: otherwise, nothing changed.  Caller holds the fs
 * lock.
 */
int htree_add(struct rr_fs *rfs, ext2_ino_t dir, const char *name, ext2_ino_t ino, int ftype);
/* Remove name from the leaf block htree_find() returned. */
int htree_remove_in_block(struct rr_fs *rfs, ext2_ino_t dir, blk64_t pblk, const char *name);

/*
 * name's hash (and minor hash) under hash version hv and the image's seed,
 * as directory indexes take it.
 */
errcode_t htree_name_hash(ext2_filsys fs, int hv, const char *name, size_t len,
			  ext2_dirhash_t *hash, ext2_dirhash_t *minor);

#endif

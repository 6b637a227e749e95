/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rrfuse block allocation interface.
 *
 * Every block that rrfuse hands out or takes back goes through here: file
 * data from the data path, and libext2fs's own metadata blocks (extent-tree
 * nodes, directory blocks, xattr blocks) through the callbacks that
 * rr_alloc_attach() installs.  There is therefore exactly one owner of free
 * space, and an allocator engine can be swapped in behind these calls without
 * touching the data path.
 *
 * Locking: the caller holds the fs lock (libext2fs's bitmaps are the state).
 * A later engine may relax this; callers must not rely on more than that.
 */
#ifndef RRFUSE_ALLOC_H
#define RRFUSE_ALLOC_H

#include <stdint.h>
#include <ext2fs/ext2fs.h>

/* Request flags. */
#define RR_ALLOC_DATA		0x0001	/* file data (counts against quotas of free space) */
#define RR_ALLOC_METADATA	0x0002	/* extent/dir/xattr block: may use the metadata reserve */
#define RR_ALLOC_USE_ROOT_RESV	0x0004	/* caller may use the root-reserved blocks */
#define RR_ALLOC_HINT_ONLY	0x0008	/* pick blocks but do not account them (libext2fs will) */

struct rr_alloc_req {
	ext2_ino_t ino;		/* owner; 0 for none */
	uint64_t lblk;		/* logical block in the owner */
	uint32_t len;		/* blocks wanted; the answer may be shorter */
	uint64_t goal;		/* physical block to start near; 0 = none */
	unsigned int flags;
};

struct rr_extent {
	uint64_t pblk;
	uint32_t len;
};

struct rr_alloc;

/* Create the allocator for an open filesystem and hook libext2fs's own allocations into it. */
int rr_alloc_attach(ext2_filsys fs, struct rr_alloc **out);
void rr_alloc_detach(struct rr_alloc *a);

/*
 * Allocate up to req->len contiguous blocks near req->goal and mark them in
 * use.  Returns 0 with *out filled (1 <= out->len <= req->len), or -ENOSPC.
 */
int rr_alloc_blocks(struct rr_alloc *a, const struct rr_alloc_req *req, struct rr_extent *out);

/* Return an extent that rr_alloc_blocks handed out and that no file references. */
void rr_free_blocks(struct rr_alloc *a, uint64_t pblk, uint32_t len);

/*
 * Blocks that ordinary (non-root) writers may still allocate, and the
 * reserve kept back for metadata growth (extent-tree splits, directory
 * blocks) so that a full filesystem never corrupts itself.
 */
uint64_t rr_alloc_avail(struct rr_alloc *a, int root);
uint64_t rr_alloc_meta_reserve(struct rr_alloc *a);

#endif

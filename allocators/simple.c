// SPDX-License-Identifier: GPL-2.0
/*
 * The simple allocator: goal-first, then the first free run that is long
 * enough, searched in libext2fs's in-memory block bitmap.  It is the
 * placeholder behind include/rrfuse/alloc.h until the mballoc engine
 * (buddies, normalisation, preallocation) takes its place.
 *
 * State: the filesystem's block bitmap and free counts, owned by libext2fs
 * and protected by the caller's fs lock.  libext2fs's own allocations come
 * here through its callbacks: the get_alloc_block and new_range callbacks
 * only choose blocks, because libext2fs accounts them itself right after,
 * within the same fs-lock section.
 */
#include "rrfuse/alloc.h"

#include <errno.h>
#include <stdlib.h>

/* Fragments examined before settling for the best one seen. */
#define SIMPLE_MAX_SCAN 256

struct rr_alloc {
	ext2_filsys fs;
	uint64_t meta_resv;
	void *old_priv;
	errcode_t (*old_get_alloc_block)(ext2_filsys, blk64_t, blk64_t *);
	errcode_t (*old_new_range)(ext2_filsys, int, blk64_t, blk64_t, blk64_t *, blk64_t *);
};

static uint64_t free_blocks(struct rr_alloc *a)
{
	return ext2fs_free_blocks_count(a->fs->super);
}

uint64_t rr_alloc_meta_reserve(struct rr_alloc *a)
{
	return a->meta_resv;
}

uint64_t rr_alloc_avail(struct rr_alloc *a, int root)
{
	uint64_t keep = a->meta_resv + (root ? 0 : ext2fs_r_blocks_count(a->fs->super));
	uint64_t f = free_blocks(a);

	return f > keep ? f - keep : 0;
}

/*
 * Find a free run near goal: the goal itself if free, else the first run of
 * at least want blocks, else the longest of the first SIMPLE_MAX_SCAN runs.
 * fixed: the run must start at goal.  Returns 0 or ENOSPC.
 */
static int find_run(struct rr_alloc *a, uint64_t goal, uint64_t len, uint64_t want, int fixed,
		    uint64_t *pblk, uint64_t *plen)
{
	ext2_filsys fs = a->fs;
	uint64_t first = fs->super->s_first_data_block;
	uint64_t last = ext2fs_blocks_count(fs->super) - 1;
	uint64_t best = 0, best_len = 0, start, b, e;
	int pass, scanned = 0;

	if (goal < first || goal > last)
		goal = first;
	start = goal;
	for (pass = 0; pass < 2; pass++) {
		uint64_t end = pass ? goal - 1 : last;

		if (pass && goal == first)
			break;
		b = pass ? first : start;
		while (b <= end) {
			blk64_t z, s;

			if (ext2fs_find_first_zero_block_bitmap2(fs->block_map, b, end, &z))
				break;
			if (fixed && z != goal)
				return ENOSPC;
			e = z + len - 1 < end ? z + len - 1 : end;
			if (ext2fs_find_first_set_block_bitmap2(fs->block_map, z, e, &s) == 0)
				e = s - 1;
			if (e - z + 1 >= want || z == goal || fixed) {
				*pblk = z;
				*plen = e - z + 1;
				return 0;
			}
			if (e - z + 1 > best_len) {
				best = z;
				best_len = e - z + 1;
			}
			if (++scanned >= SIMPLE_MAX_SCAN)
				goto done;
			b = e + 2;
		}
	}
done:
	if (!best_len)
		return ENOSPC;
	*pblk = best;
	*plen = best_len;
	return 0;
}

int rr_alloc_blocks(struct rr_alloc *a, const struct rr_alloc_req *req, struct rr_extent *out)
{
	uint64_t avail, len = req->len, want, pblk, plen;

	if (!len)
		return -EINVAL;
	if (req->flags & RR_ALLOC_METADATA)
		avail = free_blocks(a);
	else
		avail = rr_alloc_avail(a, !!(req->flags & RR_ALLOC_USE_ROOT_RESV));
	if (!avail)
		return -ENOSPC;
	if (len > avail)
		len = avail;
	want = len < 64 ? len : 64;
	if (find_run(a, req->goal, len, want, 0, &pblk, &plen))
		return -ENOSPC;
	if (!(req->flags & RR_ALLOC_HINT_ONLY))
		ext2fs_block_alloc_stats_range(a->fs, pblk, (blk_t)plen, +1);
	out->pblk = pblk;
	out->len = (uint32_t)plen;
	return 0;
}

void rr_free_blocks(struct rr_alloc *a, uint64_t pblk, uint32_t len)
{
	ext2fs_block_alloc_stats_range(a->fs, pblk, len, -1);
}

/* libext2fs wants one block for its own metadata: choose it, libext2fs accounts it. */
static errcode_t cb_get_alloc_block(ext2_filsys fs, blk64_t goal, blk64_t *ret)
{
	struct rr_alloc *a = fs->priv_data;
	struct rr_alloc_req req = { .len = 1, .goal = goal,
				    .flags = RR_ALLOC_METADATA | RR_ALLOC_HINT_ONLY };
	struct rr_extent ex;

	if (rr_alloc_blocks(a, &req, &ex))
		return EXT2_ET_BLOCK_ALLOC_FAIL;
	*ret = ex.pblk;
	return 0;
}

/* ext2fs_fallocate and friends want a range: choose it, libext2fs accounts it. */
static errcode_t cb_new_range(ext2_filsys fs, int flags, blk64_t goal, blk64_t len,
			      blk64_t *pblk, blk64_t *plen)
{
	struct rr_alloc *a = fs->priv_data;
	uint64_t avail = rr_alloc_avail(a, 1), b, l;
	int fixed = !!(flags & EXT2_NEWRANGE_FIXED_GOAL);

	if (len > avail)
		len = avail;
	if (!len)
		return EXT2_ET_BLOCK_ALLOC_FAIL;
	if (find_run(a, goal, len, (flags & EXT2_NEWRANGE_MIN_LENGTH) ? len : 1, fixed, &b, &l))
		return EXT2_ET_BLOCK_ALLOC_FAIL;
	if ((flags & EXT2_NEWRANGE_MIN_LENGTH) && l < len)
		return EXT2_ET_BLOCK_ALLOC_FAIL;
	*pblk = b;
	*plen = l;
	return 0;
}

int rr_alloc_attach(ext2_filsys fs, struct rr_alloc **out)
{
	struct rr_alloc *a = calloc(1, sizeof(*a));
	uint64_t blocks = ext2fs_blocks_count(fs->super);

	if (!a)
		return -ENOMEM;
	a->fs = fs;
	/* As the kernel's s_resv_clusters: 2 % of the blocks, at most 4096. */
	a->meta_resv = blocks / 50 < 4096 ? blocks / 50 : 4096;
	a->old_priv = fs->priv_data;
	fs->priv_data = a;
	ext2fs_set_alloc_block_callback(fs, cb_get_alloc_block, &a->old_get_alloc_block);
	ext2fs_set_new_range_callback(fs, cb_new_range, &a->old_new_range);
	*out = a;
	return 0;
}

void rr_alloc_detach(struct rr_alloc *a)
{
	ext2fs_set_alloc_block_callback(a->fs, a->old_get_alloc_block, NULL);
	ext2fs_set_new_range_callback(a->fs, a->old_new_range, NULL);
	a->fs->priv_data = a->old_priv;
	free(a);
}

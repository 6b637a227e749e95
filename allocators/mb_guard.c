// SPDX-License-Identifier: GPL-2.0
/*
 * The engine checks every answer of a policy before it uses it, so that a
 * policy can slow a mount down but never corrupt its image.
 *
 *  - Where (here, before any lock): the extent must lie inside one group
 *    of the device and touch no metadata: the superblock and descriptor
 *    copies with the reserved GDT blocks, the bitmaps, the inode tables,
 *    the journal and the MMP block.  Those are used in the bitmap, so the
 *    buddy would refuse them too; they are checked on their own so that a
 *    damaged bitmap cannot hand them out, and so that the log can say what
 *    the policy aimed at.
 *  - Free (mballoc.c, grab_locked, under the group lock): the extent must be
 *    free in the buddy.  An extent an engine search found free and another
 *    request took meanwhile is a lost race (the group's gen moved since the
 *    search saw it: ac->seen_gen), searched again as before; anything else
 *    is refused, as used or, when the disk calls it free, as reserved.
 *
 * A refused answer is counted by kind (rrctl -s), logged once per kind and
 * policy, and the request is served by regular.  After
 * MB_GUARD_MAX_REFUSED refusals the policy is switched off: requests go to
 * regular until rrctl switches to a policy again (mb_ctl.c makes the switch
 * visible in the allocator tunable at the next rrctl command).
 */
#include "mb_guard.h"
#include "mb_host.h"
#include "rrfuse/grow.h"

#include <errno.h>
#include <stdlib.h>
#include <syslog.h>

static const char *const refusal_names[MB_NREFUSE] = {
	[MB_REFUSE_OUTSIDE] = "outside the device or across a group's end",
	[MB_REFUSE_METADATA] = "in the filesystem's metadata",
	[MB_REFUSE_USED] = "in use",
	[MB_REFUSE_RESERVED] = "reserved (preallocated, pending or freed before the last commit)",
};

struct meta_list {
	struct rr_extent *v;
	size_t n, cap;
	int failed; /* an add found no memory: the list is short, and is dropped */
};

/*
 * Extents here are short (a group's head, bitmaps, a table, a journal block): len < 2^32.
 * Out of memory sets l->failed, and later adds do nothing: the caller checks once, at the end.
 */
static void meta_add(struct meta_list *l, uint64_t blk, uint64_t len)
{
	struct rr_extent *last = l->n ? &l->v[l->n - 1] : NULL;

	if (!len || l->failed)
		return;
	/* Consecutive groups' bitmaps and a journal's blocks follow each other: join them. */
	if (last && last->pblk + last->len == blk && last->len + len <= UINT32_MAX)
		last->len += (uint32_t)len;
	else if (rr_grow(&l->v, sizeof(*l->v), &l->cap, l->n + 1, 256))
		l->failed = 1;
	else
		l->v[l->n++] = (struct rr_extent){ .pblk = blk, .len = (uint32_t)len };
}

static int journal_block(ext2_filsys fs, blk64_t *blocknr, e2_blkcnt_t blockcnt, blk64_t ref_blk,
			 int ref_offset, void *priv)
{
	struct meta_list *l = priv;

	(void)fs, (void)blockcnt, (void)ref_blk, (void)ref_offset;
	meta_add(l, *blocknr, 1);
	return l->failed ? BLOCK_ABORT : 0;
}

static int cmp_extent(const void *x, const void *y)
{
	const struct rr_extent *a = x, *b = y;

	return a->pblk < b->pblk ? -1 : a->pblk > b->pblk;
}

/* Sort, then merge overlapping and touching extents (a journal may sit right after a table). */
static void meta_merge(struct meta_list *l)
{
	size_t i, n = 0;

	qsort(l->v, l->n, sizeof(*l->v), cmp_extent);
	for (i = 0; i < l->n; i++) {
		struct rr_extent *last = n ? &l->v[n - 1] : NULL;
		uint64_t end = l->v[i].pblk + l->v[i].len;

		if (last && l->v[i].pblk <= last->pblk + last->len &&
		    end - last->pblk <= UINT32_MAX) {
			if (end > last->pblk + last->len)
				last->len = (uint32_t)(end - last->pblk);
			continue;
		}
		l->v[n++] = l->v[i];
	}
	l->n = n;
}

int mb_guard_attach(struct rr_alloc *a)
{
	ext2_filsys fs = a->fs;
	struct meta_list l = { 0 };
	uint32_t g;

	for (g = 0; g < a->ngroups && !l.failed; g++) {
		blk64_t super, old_desc, new_desc;
		blk_t used;

		ext2fs_super_and_bgd_loc2(fs, g, &super, &old_desc, &new_desc, &used);
		/* The copies and the reserved GDT blocks start the group, used blocks long. */
		meta_add(&l, a->first_data_block + (uint64_t)g * a->bpg, used);
		meta_add(&l, ext2fs_block_bitmap_loc(fs, g), 1);
		meta_add(&l, ext2fs_inode_bitmap_loc(fs, g), 1);
		meta_add(&l, ext2fs_inode_table_loc(fs, g), fs->inode_blocks_per_group);
	}
	if (ext2fs_has_feature_mmp(fs->super) && fs->super->s_mmp_block)
		meta_add(&l, fs->super->s_mmp_block, 1);
	if (!l.failed && ext2fs_has_feature_journal(fs->super) && fs->super->s_journal_inum) {
		/* Its data and its extent-tree blocks; a journal we cannot read is checked by nothing else either. */
		if (ext2fs_block_iterate3(fs, fs->super->s_journal_inum, BLOCK_FLAG_READ_ONLY, NULL,
					  journal_block, &l))
			mb_log(LOG_WARNING, "mballoc: the journal's blocks could not be listed: policies' "
			       "answers are checked against the bitmap only there");
	}
	if (l.failed) {
		free(l.v);
		return -ENOMEM;
	}
	meta_merge(&l);
	a->meta = l.v;
	a->nmeta = l.n;
	return 0;
}

/* Does [blk, blk + len) overlap a metadata extent?  Binary search: the merged ends are sorted too. */
static int in_metadata(const struct rr_alloc *a, uint64_t blk, uint64_t len)
{
	size_t lo = 0, hi = a->nmeta;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (a->meta[mid].pblk + a->meta[mid].len <= blk)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < a->nmeta && a->meta[lo].pblk < blk + len;
}

int mb_guard_where(const struct rr_alloc *a, const struct mb_ext *ex)
{
	uint64_t first, end;

	if (ex->group >= a->ngroups || ex->len > a->bpg || ex->start >= a->bpg || ex->start + ex->len > a->bpg)
		return MB_REFUSE_OUTSIDE;
	first = mb_block_of(a, ex);
	end = first + ex->len;
	if (end > ext2fs_blocks_count(a->fs->super))
		return MB_REFUSE_OUTSIDE;
	if (in_metadata(a, first, ex->len))
		return MB_REFUSE_METADATA;
	return -1;
}

void mb_guard_refuse(struct rr_alloc *a, struct mb_running *run, enum mb_refusal why)
{
	const char *name = run->policy->name;
	unsigned int n;

	atomic_fetch_add(&a->stats.refused[why], 1);
	if (!(atomic_fetch_or(&run->logged, 1u << why) & (1u << why)))
		mb_log(LOG_WARNING, "mballoc: allocator '%s' chose blocks %s: refused, the request "
		       "goes to regular (logged once per kind)", name, refusal_names[why]);
	n = atomic_fetch_add(&run->refused, 1) + 1;
	if (n == MB_GUARD_MAX_REFUSED && !atomic_exchange(&run->off, 1)) {
		atomic_fetch_add(&a->stats.policies_off, 1);
		mb_log(LOG_ERR, "mballoc: allocator '%s' switched off after %u refused answers: "
		       "regular serves every request", name, n);
	}
}

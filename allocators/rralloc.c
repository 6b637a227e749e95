// SPDX-License-Identifier: GPL-2.0
/*
 * The "rralloc" policy: round-robin placement of file data, after the
 * rralloc patch posted to linux-ext4 (seeds/000), so that writes walk the
 * whole device instead of returning to the same low groups.
 *
 * What it does
 *  - Each CPU has a cursor, a block address; they start spread over the
 *    device (CPU c at group c x groups / CPUs).
 *  - A file's data goes first where its own stream continues (the goal
 *    the engine derives from the file's neighbouring extent: the per-inode
 *    cursor), tried for the whole normalised window.
 *  - Otherwise it is placed by first fit from a cursor: the file's own
 *    position when it has blocks already, else this CPU's cursor.  First
 *    fit takes the first free run that holds the normalised window (the
 *    preallocation), going up through the device and wrapping; only when no
 *    run that long exists anywhere does it take the first free run of any
 *    length.
 *  - The CPU cursor then moves to the end of what was found, so the next
 *    new file starts after it: over overwrite cycles (write, delete,
 *    write) the cursor keeps going forward through space that deletes
 *    freed behind it, and comes round to the start only after a lap.
 *
 * Where it departs from the patch, and why
 *  - The patch's cursors are group numbers and are set to the group just
 *    allocated from, and its scan takes the first free extent of a group.
 *    A group emptied by a delete is then found again at once by the next
 *    write, so under write/delete cycles the patch keeps reusing the same
 *    few groups and does not spread at all.  Here the cursor is a block
 *    address past the last allocation and only moves forward (a result
 *    less than half the device behind it is not taken as the new cursor),
 *    which is what makes it walk.
 *  - The patch's first-free-extent scan takes any length, which cuts a
 *    stream into whatever fragments lie ahead.  Here the whole window is
 *    looked for first, so a sequential file gets as few extents as under
 *    regular; the any-length pass is the last resort before ENOSPC.
 *  - The per-inode cursor of the patch (an atomic group number in the
 *    inode) is, here, the file's own last block before the write: it needs
 *    no storage, cannot go stale when an inode number is reused, and also
 *    serves writes into holes.
 *  - Metadata (directory, extent-tree and xattr blocks) is placed by the
 *    regular policy, next to its goal: scattering it would cost every
 *    lookup a seek and spreads nothing worth spreading.
 */
#include "policy.h"

#include <stdlib.h>

struct rr_cursors {
	uint64_t span;			/* blocks from first_data_block to the end */
	_Atomic uint64_t cur[];		/* per CPU slot, a block address */
};

static int rralloc_init(struct rr_alloc *a)
{
	struct rr_cursors *c = calloc(1, sizeof(*c) + a->nlg * sizeof(c->cur[0]));
	uint32_t i;

	if (!c)
		return -1;
	c->span = ext2fs_blocks_count(a->fs->super) - a->first_data_block;
	for (i = 0; i < a->nlg; i++)
		atomic_init(&c->cur[i], a->first_data_block +
			    (uint64_t)((uint64_t)i * a->ngroups / a->nlg) * a->bpg);
	a->policy_priv = c;
	return 0;
}

static void rralloc_fini(struct rr_alloc *a)
{
	free(a->policy_priv);
	a->policy_priv = NULL;
}

/* Move the cursor to end if end is ahead of it (less than half the device forward). */
static void advance(struct rr_cursors *c, uint32_t slot, uint64_t first, uint64_t end)
{
	uint64_t cur = atomic_load(&c->cur[slot]);
	uint64_t ahead = (end - first + c->span - (cur - first)) % c->span;

	if (ahead && ahead <= c->span / 2)
		atomic_store(&c->cur[slot], first + (end - first) % c->span);
}

static void rralloc_choose(struct rr_alloc *a, struct mb_ac *ac)
{
	struct rr_cursors *c = ac->priv;
	uint32_t slot = mb_cpu_slot(a);
	uint64_t from;

	if (!(ac->hints & MB_HINT_DATA)) {
		mb_policy_regular.choose(a, ac);
		return;
	}
	ac->cr = CR_ANY_FREE;
	if (ac->hints & MB_HINT_FILE_GOAL) {
		if ((ac->hints & MB_HINT_TRY_GOAL) && mb_find_by_goal(a, ac))
			goto found;
		from = mb_block_of(a, &ac->g_ex);
	} else {
		from = atomic_load(&c->cur[slot]);
	}
	if (!mb_first_fit(a, ac, from, ac->g_ex.len) && !mb_first_fit(a, ac, from, 1))
		return;
found:
	if (MB_T(a, mb_stats))
		atomic_fetch_add(&a->stats.cr_hits[ac->cr], 1);
	advance(c, slot, a->first_data_block, mb_block_of(a, &ac->b_ex) + ac->b_ex.len);
}

const struct mb_policy mb_policy_rralloc = {
	.name = "rralloc",
	.init = rralloc_init,
	.fini = rralloc_fini,
	.choose = rralloc_choose,
};

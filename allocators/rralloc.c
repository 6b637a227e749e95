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
 *
 * It uses only the public policy API (include/rrfuse/policy.h).
 */
#include "rrfuse/policy.h"

#include <stdatomic.h>
#include <stdlib.h>

struct rr_cursors {
	uint64_t first;			/* the first data block */
	uint64_t span;			/* blocks from first to the end */
	_Atomic uint64_t cur[];		/* per CPU slot, a block address */
};

static int rralloc_init(struct rrp_engine *e, void **priv)
{
	uint32_t i, n = rrp_cpus(e);
	struct rr_cursors *c = calloc(1, sizeof(*c) + n * sizeof(c->cur[0]));

	if (!c)
		return -1;
	c->first = rrp_first_data_block(e);
	c->span = rrp_blocks(e) - c->first;
	for (i = 0; i < n; i++)
		atomic_init(&c->cur[i], c->first +
			    (uint64_t)((uint64_t)i * rrp_groups(e) / n) * rrp_blocks_per_group(e));
	*priv = c;
	return 0;
}

static void rralloc_fini(struct rrp_engine *e, void *priv)
{
	(void)e;
	free(priv);
}

/* Move the cursor to end if end is ahead of it (less than half the device forward). */
static void advance(struct rr_cursors *c, uint32_t slot, uint64_t end)
{
	uint64_t cur = atomic_load(&c->cur[slot]);
	uint64_t ahead = (end - c->first + c->span - (cur - c->first)) % c->span;

	if (ahead && ahead <= c->span / 2)
		atomic_store(&c->cur[slot], c->first + (end - c->first) % c->span);
}

static int rralloc_choose(struct rrp_engine *e, void *priv, const struct rrp_request *r,
			  struct rrp_extent *out)
{
	struct rr_cursors *c = priv;
	uint64_t from;

	if (!(r->flags & RRP_DATA))
		return rrp_regular(e, r, out);
	if (r->flags & RRP_FILE_GOAL) {
		if ((r->flags & RRP_HAS_GOAL) && !rrp_at_goal(e, r->goal, r->goal_len, out))
			goto found;
		from = r->goal;
	} else {
		from = atomic_load(&c->cur[r->cpu]);
	}
	if (rrp_first_fit(e, from, r->goal_len, r->goal_len, out) && rrp_first_fit(e, from, 1, r->goal_len, out))
		return -1;
found:
	advance(c, r->cpu, out->start + out->len);
	return 0;
}

const struct rrp_policy rrp_policy_rralloc = {
	.abi = RRP_ABI_VERSION,
	.name = "rralloc",
	.init = rralloc_init,
	.fini = rralloc_fini,
	.choose = rralloc_choose,
};

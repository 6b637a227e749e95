// SPDX-License-Identifier: GPL-2.0
/*
 * The "regular" policy: the kernel's ext4_mb_regular_allocator.
 *
 *  1. The goal itself, when the request has one worth trying (a window:
 *     only a goal that joins it to the file's blocks).
 *  2. Streams (files past mb_stream_req blocks) start their search at the
 *     group the last stream allocation of their slot (inode % slots) used,
 *     so concurrent large files fill groups one after another instead of
 *     all fighting over their inodes' groups.
 *  3. The criteria cascade, cheapest first: CR_POWER2_ALIGNED (a buddy
 *     chunk of exactly the goal's power-of-two order; a file's first
 *     window tries its goal group at CR_GOAL_LEN_FAST before it, where
 *     rrfuse parts from the kernel: see regular_choose), CR_GOAL_LEN_FAST
 *     (groups whose average free fragment holds the goal), for data
 *     CR_BEST_AVAIL_LEN (the same with the goal trimmed to smaller powers
 *     of two, at most mb_best_avail_max_trim_order halvings and never
 *     below the request), CR_GOAL_LEN_SLOW (any group with that many free
 *     blocks, loading groups as needed), CR_ANY_FREE (take what there is).
 *
 * With mb_optimize_scan the first three criteria pick groups from the
 * engine's lists (by largest free order, by average fragment order) after
 * the goal group and mb_max_linear_groups groups after it, each order's
 * groups by group number from the goal group on, so their cost does not
 * grow with the number of groups; otherwise every criterion is a linear
 * pass from the goal group.
 */
#include "policy.h"

/* Try group g at cr; nonzero when the search is over. */
static int try_group(struct rr_alloc *a, struct mb_ac *ac, uint32_t g, enum mb_cr cr)
{
	if (mb_good_group(a, ac, g, cr)) {
		mb_scan_group(a, ac, g, cr);
		if (MB_T(a, mb_stats))
			atomic_fetch_add(&a->stats.cr_considered[cr], 1);
	}
	return ac->status != AC_CONTINUE;
}

static int scan_linear(struct rr_alloc *a, struct mb_ac *ac, enum mb_cr cr, uint32_t count)
{
	uint32_t i, start = ac->g_ex.group;

	if (count > a->ngroups)
		count = a->ngroups;
	for (i = 0; i < count; i++)
		if (try_group(a, ac, (start + i) % a->ngroups, cr))
			return 1;
	return 0;
}

/* Groups in [from, end) on list l, orders lo and up, each order by group number. */
static int scan_lists_range(struct rr_alloc *a, struct mb_ac *ac, enum mb_cr cr, int l, int lo,
			    uint32_t from, uint32_t end)
{
	int o, g;

	for (o = lo < 0 ? 0 : lo; o <= (int)a->max_order; o++)
		for (g = mb_list_find(a, l, o, from, end); g >= 0; g = mb_list_find(a, l, o, (uint32_t)g + 1, end))
			if (try_group(a, ac, (uint32_t)g, cr))
				return 1;
	return 0;
}

/*
 * The groups on list l of order >= lo: those from the goal group up, then
 * those below it (kernel 6.18), so that a search goes on where the last
 * one of its stream stopped, as a linear scan would.  Groups already tried
 * linearly come round again only to be passed over by their summary.
 */
static int scan_lists(struct rr_alloc *a, struct mb_ac *ac, enum mb_cr cr, int l, int lo)
{
	uint32_t start = ac->g_ex.group;

	return scan_lists_range(a, ac, cr, l, lo, start, a->ngroups) ||
	       (start && scan_lists_range(a, ac, cr, l, lo, 0, start));
}

static int scan_optimized(struct rr_alloc *a, struct mb_ac *ac, enum mb_cr cr)
{
	int o, min_o;

	if (scan_linear(a, ac, cr, 1 + MB_T(a, mb_max_linear_groups)))
		return 1;
	switch (cr) {
	case CR_POWER2_ALIGNED:
		return scan_lists(a, ac, cr, MB_LIST_LARGEST, (int)ac->two_order);
	case CR_GOAL_LEN_FAST:
		return scan_lists(a, ac, cr, MB_LIST_AVG, mb_avg_order(ac->g_ex.len, 1, a->max_order));
	case CR_BEST_AVAIL_LEN:
		o = mb_fls(ac->g_ex.len) - 1;
		min_o = o - (int)MB_T(a, mb_best_avail_max_trim_order);
		if (min_o < 0)
			min_o = 0;
		if ((1u << min_o) < ac->o_ex.len)
			min_o = mb_fls(ac->o_ex.len);
		for (; o >= min_o; o--) {
			ac->g_ex.len = 1u << o;
			if (scan_lists(a, ac, cr, MB_LIST_AVG, mb_avg_order(ac->g_ex.len, 1, a->max_order)))
				return 1;
		}
		ac->g_ex.len = ac->orig_goal_len;
		return 0;
	default:
		return scan_linear(a, ac, cr, a->ngroups);
	}
}

static void regular_choose(struct rr_alloc *a, struct mb_ac *ac)
{
	unsigned int i = (unsigned int)mb_fls(ac->g_ex.len) - 1;
	uint32_t slot = ac->ino % a->nr_last_groups;
	enum mb_cr cr;

	/*
	 * A window takes its goal block only where that joins it to the file's
	 * blocks, as the kernel's normalisation asks.  Elsewhere the goal only
	 * names the group to search from: a file's first window does not take
	 * the first block of its flex group's second group just because it is
	 * free, and a stream searches from its slot's group (below).
	 */
	if ((ac->hints & MB_HINT_TRY_GOAL) &&
	    (!(ac->hints & MB_HINT_WINDOW) || (ac->hints & MB_HINT_MERGE_GOAL)) && mb_find_by_goal(a, ac))
		return;
	/* Only requests of 2^order2_req blocks or more are worth aligning. */
	ac->two_order = ((ac->g_ex.len & (ac->g_ex.len - 1)) == 0 && i + 1 >= MB_T(a, mb_order2_req) &&
			 i <= a->max_order) ? i : 0;
	if (ac->hints & MB_HINT_STREAM) {
		ac->g_ex.group = atomic_load(&a->last_groups[slot]) % a->ngroups;
		ac->g_ex.start = 0;
	}
	/* A search: have the groups ahead loaded, so the lists know them. */
	mb_prefetch(a, ac->g_ex.group, a->prefetch);
	/*
	 * A file's first window first tries its goal group for any run that
	 * holds it, before the aligned criterion sends it to an aligned buddy
	 * chunk elsewhere.  The kernel allocates most files after they are
	 * closed (delayed allocation) with a request of exactly their size,
	 * rarely a power of two, which the goal-length criterion puts in the
	 * first run that holds it, holes included; this window is asked for
	 * while the file is written, rounded up to a power of two, and aged
	 * images kept about twice the kernel's free extents
	 * (tests/mount/test_aging.py).  Only the goal group: not aligning first
	 * windows anywhere closed more of that gap but cost interleaved
	 * streams (rrbench W4) 14 % of their write speed and 2.4x the extents,
	 * as both streams then started side by side.  Not in a flex group's
	 * metadata group (the goal of a file's first window on a fresh image),
	 * which data leaves alone.
	 */
	if ((ac->hints & MB_HINT_FIRST_WINDOW) && ac->two_order && !mb_flex_meta_group(a, ac->g_ex.group)) {
		ac->cr = CR_GOAL_LEN_FAST;
		try_group(a, ac, ac->g_ex.group, CR_GOAL_LEN_FAST);
	}
	for (cr = ac->two_order ? CR_POWER2_ALIGNED : CR_GOAL_LEN_FAST;
	     cr < MB_NUM_CRS && ac->status == AC_CONTINUE; cr++) {
		int done;

		/* Metadata goes straight from the fast pass to the slow one. */
		if (cr == CR_BEST_AVAIL_LEN && !(ac->hints & MB_HINT_DATA))
			continue;
		ac->cr = cr;
		if (MB_T(a, mb_optimize_scan) && cr < CR_GOAL_LEN_SLOW)
			done = scan_optimized(a, ac, cr);
		else
			done = scan_linear(a, ac, cr, a->ngroups);
		if (!done && MB_T(a, mb_stats))
			atomic_fetch_add(&a->stats.cr_useless[cr], 1);
	}
	if (ac->b_ex.len) {
		if (MB_T(a, mb_stats))
			atomic_fetch_add(&a->stats.cr_hits[ac->cr], 1);
		/* Kernel 6.17: a stream's blocks came from its slot's group. */
		if (MB_T(a, mb_stats) && (ac->hints & MB_HINT_STREAM) && ac->b_ex.group == ac->g_ex.group)
			atomic_fetch_add(&a->stats.stream_goal_hits, 1);
		if (ac->hints & MB_HINT_STREAM)
			atomic_store(&a->last_groups[slot], ac->b_ex.group);
	}
}

const struct mb_policy mb_policy_regular = {
	.name = "regular",
	.choose = regular_choose,
};

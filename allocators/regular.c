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
 *     chunk of exactly the goal's power-of-two order), CR_GOAL_LEN_FAST
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
 *
 * It uses only the public policy API (include/rrfuse/policy.h): the
 * criteria search there is the engine's part of the kernel's allocator
 * (best extent, scan limits, per-criterion statistics), the cascade and
 * the order of the groups are this file's.
 */
#include "rrfuse/policy.h"

#include <stdatomic.h>

/* One request's cascade. */
struct cascade {
	struct rrp_engine *e;
	struct rrp_search *s;
	const struct rrp_request *r;
	uint32_t ngroups;
	unsigned int max_order;
	unsigned int two_order;		/* rrp_search_order */
	uint64_t goal;			/* the search's goal block, its group, the length */
	uint32_t group, len;
};

/* Tunables by id, looked up once: the same for every mount of the process. */
enum { T_OPTIMIZE_SCAN, T_MAX_LINEAR_GROUPS, T_BEST_AVAIL_TRIM, T_NUM };
static const char *const tunable_names[T_NUM] = { "mb_optimize_scan", "mb_max_linear_groups",
						  "mb_best_avail_max_trim_order" };
static _Atomic int tunable_ids[T_NUM] = { -1, -1, -1 };

static unsigned int tunable(const struct cascade *c, int t)
{
	int id = atomic_load_explicit(&tunable_ids[t], memory_order_relaxed);

	if (id < 0) {
		id = rrp_tunable_id(tunable_names[t]);
		atomic_store_explicit(&tunable_ids[t], id, memory_order_relaxed);
	}
	return rrp_tunable_get(c->e, id);
}

static int fls32(uint32_t x)
{
	return x ? 32 - __builtin_clz(x) : 0;
}

/* The average-fragment order a group needs for len blocks (the engine's lists' order for it). */
static int avg_order(const struct cascade *c, uint32_t len)
{
	int o = fls32(len) - 2;

	if (o < 0)
		return 0;
	return o > (int)c->max_order ? (int)c->max_order : o;
}

/* Try group g at cr; nonzero when the search is over. */
static int try_group(struct cascade *c, uint32_t g, int cr)
{
	return rrp_search_good(c->s, g, cr) && rrp_search_scan(c->s, g, cr);
}

static int scan_linear(struct cascade *c, int cr, uint32_t count)
{
	uint32_t i;

	if (count > c->ngroups)
		count = c->ngroups;
	for (i = 0; i < count; i++)
		if (try_group(c, (c->group + i) % c->ngroups, cr))
			return 1;
	return 0;
}

/* Groups in [from, end) on list l, orders lo and up, each order by group number. */
static int scan_lists_range(struct cascade *c, int cr, int l, int lo, uint32_t from, uint32_t end)
{
	int o, g;

	for (o = lo < 0 ? 0 : lo; o <= (int)c->max_order; o++)
		for (g = rrp_list_find(c->e, l, o, from, end); g >= 0;
		     g = rrp_list_find(c->e, l, o, (uint32_t)g + 1, end))
			if (try_group(c, (uint32_t)g, cr))
				return 1;
	return 0;
}

/*
 * The groups on list l of order >= lo: those from the goal group up, then
 * those below it (kernel 6.18), so that a search goes on where the last
 * one of its stream stopped, as a linear scan would.  Groups already tried
 * linearly come round again only to be passed over by their summary.
 */
static int scan_lists(struct cascade *c, int cr, int l, int lo)
{
	return scan_lists_range(c, cr, l, lo, c->group, c->ngroups) ||
	       (c->group && scan_lists_range(c, cr, l, lo, 0, c->group));
}

static int scan_optimized(struct cascade *c, int cr)
{
	int o, min_o;

	if (scan_linear(c, cr, 1 + tunable(c, T_MAX_LINEAR_GROUPS)))
		return 1;
	switch (cr) {
	case RRP_CR_POWER2_ALIGNED:
		return scan_lists(c, cr, RRP_LIST_LARGEST, (int)c->two_order);
	case RRP_CR_GOAL_LEN_FAST:
		return scan_lists(c, cr, RRP_LIST_AVG, avg_order(c, c->len));
	case RRP_CR_BEST_AVAIL_LEN:
		o = fls32(c->len) - 1;
		min_o = o - (int)tunable(c, T_BEST_AVAIL_TRIM);
		if (min_o < 0)
			min_o = 0;
		if ((1u << min_o) < c->r->len)
			min_o = fls32(c->r->len);
		for (; o >= min_o; o--) {
			rrp_search_goal(c->s, c->goal, 1u << o);
			if (scan_lists(c, cr, RRP_LIST_AVG, avg_order(c, 1u << o)))
				return 1;
		}
		rrp_search_goal(c->s, c->goal, c->len);
		return 0;
	default:
		return scan_linear(c, cr, c->ngroups);
	}
}

/*
 * The search's result.  Kernel 6.17: the next stream of this slot starts
 * where this one's blocks came from, whether the goal or a search found
 * them (ext4_mb_use_best_found serves both).
 */
static int found(struct cascade *c, uint64_t first, struct rrp_extent *out)
{
	if (rrp_search_result(c->s, out))
		return -1;
	if (c->r->flags & RRP_STREAM)
		rrp_set_stream_group(c->e, c->r->ino, (uint32_t)((out->start - first) / rrp_blocks_per_group(c->e)));
	return 0;
}

static int regular_choose(struct rrp_engine *e, void *priv, const struct rrp_request *r, struct rrp_extent *out)
{
	struct cascade c = {
		.e = e,
		.r = r,
		.ngroups = rrp_groups(e),
		.max_order = rrp_max_order(e),
		.goal = r->goal,
		.len = r->goal_len,
	};
	uint64_t first = rrp_first_data_block(e);
	int cr;

	(void)priv;
	c.s = rrp_search_begin(e, c.goal, c.len);
	if (!c.s)
		return -1;
	/*
	 * A window takes its goal block only where that joins it to the file's
	 * blocks, as the kernel's normalisation asks.  Elsewhere the goal only
	 * names the group to search from: a file's first window does not take
	 * the first block of its flex group's second group just because it is
	 * free, and a stream searches from its slot's group (below).
	 */
	if ((r->flags & RRP_HAS_GOAL) && (!(r->flags & RRP_WINDOW) || (r->flags & RRP_MERGE_GOAL)) &&
	    rrp_search_at_goal(c.s))
		return found(&c, first, out);
	/* Only requests of 2^order2_req blocks or more are worth aligning. */
	c.two_order = rrp_search_order(c.s);
	c.group = (uint32_t)((c.goal - first) / rrp_blocks_per_group(e));
	if (r->flags & RRP_STREAM) {
		c.group = rrp_stream_group(e, r->ino);
		c.goal = first + (uint64_t)c.group * rrp_blocks_per_group(e);
		rrp_search_goal(c.s, c.goal, c.len);
	}
	/* A search: have the groups ahead loaded, so the lists know them. */
	rrp_prefetch(e, c.group);
	for (cr = rrp_search_first_cr(c.s);
	     cr < RRP_NUM_CRS && !rrp_search_done(c.s); cr++) {
		int done;

		/* Metadata goes straight from the fast pass to the slow one. */
		if (cr == RRP_CR_BEST_AVAIL_LEN && !(r->flags & RRP_DATA))
			continue;
		if (tunable(&c, T_OPTIMIZE_SCAN) && cr < RRP_CR_GOAL_LEN_SLOW)
			done = scan_optimized(&c, cr);
		else
			done = scan_linear(&c, cr, c.ngroups);
		if (!done)
			rrp_search_exhausted(c.s, cr);
	}
	return found(&c, first, out);
}

const struct rrp_policy rrp_policy_regular = {
	.abi = RRP_ABI_VERSION,
	.name = "regular",
	.choose = regular_choose,
};

// SPDX-License-Identifier: GPL-2.0
/*
 * The criteria search of the public policy API (include/rrfuse/policy.h,
 * rrp_search_*): the engine's goal try, group test and group scan
 * (mballoc.c: mb_find_by_goal, mb_good_group, mb_scan_group) on the
 * request a public policy is answering, with the statistics a cascade
 * keeps (rrctl -s, the kernel's per-criterion figures).
 *
 * The handle is that request itself (mb_pub_ac, set by the wrapper in
 * mb_plugin.c): the search runs in it as the engine's own did, nothing is
 * allocated, and what a scan saw free is recorded in it for the answer
 * checks (mb_guard.c: a lost race is searched again, not refused).  Only
 * the request's thread touches it.  ac->cr is the criterion last asked
 * about, MB_NUM_CRS before any (a goal hit is no criterion's).
 */
#include "mballoc.h"
#include "mb_plugin.h"
#include "rrfuse/policy.h"

#define AC(s) ((struct mb_ac *)(s))
#define SEARCH(ac) ((struct rrp_search *)(ac))

static struct rr_alloc *engine(const struct rrp_engine *e)
{
	return (struct rr_alloc *)e;
}

/* The allocator the search's request is for: the one the wrapper runs in this thread. */
static _Thread_local struct rr_alloc *tl_engine;

static void set_goal(struct mb_ac *ac, uint64_t goal, uint32_t len)
{
	if (!len)
		len = 1;
	if (mb_ext_of(tl_engine, goal, len, &ac->g_ex))
		mb_ext_of(tl_engine, tl_engine->first_data_block, len, &ac->g_ex);
}

struct rrp_search *rrp_search_begin(struct rrp_engine *e, uint64_t goal, uint32_t len)
{
	struct mb_ac *ac = mb_pub_ac;

	if (!ac)
		return NULL;
	tl_engine = engine(e);
	set_goal(ac, goal, len);
	ac->two_order = mb_two_order(tl_engine, ac->g_ex.len);
	ac->cr = MB_NUM_CRS;
	ac->status = AC_CONTINUE;
	ac->b_ex.len = 0;
	return SEARCH(ac);
}

void rrp_search_goal(struct rrp_search *s, uint64_t goal, uint32_t len)
{
	set_goal(AC(s), goal, len);
}

unsigned int rrp_search_order(const struct rrp_search *s)
{
	return AC(s)->two_order;
}

int rrp_search_first_cr(const struct rrp_search *s)
{
	return (int)mb_first_cr(AC(s));
}

int rrp_search_at_goal(struct rrp_search *s)
{
	return mb_find_by_goal(tl_engine, AC(s));
}

static int criterion_ok(uint32_t g, int cr)
{
	return g < tl_engine->ngroups && cr >= 0 && cr < MB_NUM_CRS;
}

int rrp_search_good(struct rrp_search *s, uint32_t g, int cr)
{
	if (!criterion_ok(g, cr))
		return 0;
	AC(s)->cr = (enum mb_cr)cr;
	return mb_good_group(tl_engine, AC(s), g, (enum mb_cr)cr);
}

int rrp_search_scan(struct rrp_search *s, uint32_t g, int cr)
{
	struct rr_alloc *a = tl_engine;

	if (criterion_ok(g, cr) && AC(s)->status == AC_CONTINUE) {
		AC(s)->cr = (enum mb_cr)cr;
		mb_scan_group(a, AC(s), g, (enum mb_cr)cr);
		if (MB_T(a, mb_stats))
			atomic_fetch_add(&a->stats.cr_considered[cr], 1);
	}
	return AC(s)->status != AC_CONTINUE;
}

int rrp_search_done(const struct rrp_search *s)
{
	return AC(s)->status != AC_CONTINUE;
}

void rrp_search_exhausted(struct rrp_search *s, int cr)
{
	if (cr >= 0 && cr < MB_NUM_CRS && AC(s)->status == AC_CONTINUE && MB_T(tl_engine, mb_stats))
		atomic_fetch_add(&tl_engine->stats.cr_useless[cr], 1);
}

int rrp_search_result(struct rrp_search *s, struct rrp_extent *out)
{
	struct rr_alloc *a = tl_engine;
	struct mb_ac *ac = AC(s);

	if (!ac->b_ex.len)
		return -1;
	mb_pub_counted = 1;
	if (ac->cr < MB_NUM_CRS && MB_T(a, mb_stats)) {
		atomic_fetch_add(&a->stats.cr_hits[ac->cr], 1);
		/* Kernel 6.17: a stream's blocks came from its goal group (regular: its slot's). */
		if ((ac->hints & MB_HINT_STREAM) && ac->b_ex.group == ac->g_ex.group)
			atomic_fetch_add(&a->stats.stream_goal_hits, 1);
	}
	out->start = mb_block_of(a, &ac->b_ex);
	out->len = ac->b_ex.len;
	return 0;
}

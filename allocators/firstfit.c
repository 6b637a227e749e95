// SPDX-License-Identifier: GPL-2.0
/*
 * The "firstfit" policy: file data goes to the lowest-addressed free run
 * that holds its normalised window (else the lowest free run of any
 * length), whatever the goal.  It is the opposite of rralloc: every
 * rewrite lands on the same low addresses, the hot spot a flash wear study
 * wants as its worst case, and what a naive allocator does.  Metadata is
 * placed as under regular.
 *
 * It is also the proof that a policy is one file plus one line in
 * policies.def: the tests switch to it live and check where data lands.
 */
#include "policy.h"

static void firstfit_choose(struct rr_alloc *a, struct mb_ac *ac)
{
	if (!(ac->hints & MB_HINT_DATA)) {
		mb_policy_regular.choose(a, ac);
		return;
	}
	ac->cr = CR_ANY_FREE;
	if ((mb_first_fit(a, ac, a->first_data_block, ac->g_ex.len) ||
	     mb_first_fit(a, ac, a->first_data_block, 1)) && MB_T(a, mb_stats))
		atomic_fetch_add(&a->stats.cr_hits[ac->cr], 1);
}

const struct mb_policy mb_policy_firstfit = {
	.name = "firstfit",
	.choose = firstfit_choose,
};

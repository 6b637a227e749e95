// SPDX-License-Identifier: GPL-2.0
/*
 * The "firstfit" policy: file data goes to the lowest-addressed free run
 * that holds its normalised window (else the lowest free run of any
 * length), whatever the goal.  It is the opposite of rralloc: every
 * rewrite lands on the same low addresses, the hot spot a flash wear study
 * wants as its worst case, and what a naive allocator does.  Metadata is
 * placed as under regular.
 *
 * It uses only the public policy API (include/rrfuse/policy.h), as a
 * policy built outside rrfuse would; the tests switch to it live and check
 * where data lands.
 */
#include "rrfuse/policy.h"

static int firstfit_choose(struct rrp_engine *e, void *priv, const struct rrp_request *r,
			   struct rrp_extent *out)
{
	uint64_t low = rrp_first_data_block(e);

	(void)priv;
	if (!(r->flags & RRP_DATA))
		return rrp_regular(e, r, out);
	if (!rrp_first_fit(e, low, r->goal_len, r->goal_len, out))
		return 0;
	return rrp_first_fit(e, low, 1, r->goal_len, out);
}

const struct rrp_policy rrp_policy_firstfit = {
	.abi = RRP_ABI_VERSION,
	.name = "firstfit",
	.choose = firstfit_choose,
};

// SPDX-License-Identifier: GPL-2.0
/*
 * An rrfuse allocation policy built outside rrfuse: small files' data in
 * the lower half of the device, large files' (streams, past mb_stream_req
 * blocks) in the upper half, so that the two never interleave.  Metadata
 * goes where rrfuse's regular policy puts it.
 *
 * Build: make (pkg-config finds rrfuse-policy.pc); use: rrfuse -o
 * allocator=halves,policy_dir=$PWD IMAGE MNT, or copy halves.so into the
 * installed policy directory (make install) and -o allocator=halves.
 */
#include <rrfuse/policy.h>

static int halves_choose(struct rrp_engine *e, void *priv, const struct rrp_request *r,
			 struct rrp_extent *out)
{
	uint64_t first = rrp_first_data_block(e);
	uint64_t mid = first + (rrp_blocks(e) - first) / 2;
	/*
	 * A stream, or a closed file's whole data at once (the kernel's
	 * NOPREALLOC request, which is neither stream nor small) past the
	 * default mb_stream_req: how a large file reaches a policy when it is
	 * written back after its close, as by default.
	 */
	int large = (r->flags & RRP_STREAM) || (!(r->flags & RRP_SMALL) && r->len > 16);
	uint64_t from = large ? mid : first;

	(void)priv;
	if (!(r->flags & RRP_DATA))
		return rrp_regular(e, r, out);
	/* A file that has blocks in its half goes on after them. */
	if ((r->flags & RRP_FILE_GOAL) && (r->goal >= mid) == large &&
	    !rrp_at_goal(e, r->goal, r->goal_len, out))
		return 0;
	/* The first run that holds the whole window, from the start of the half; else any run. */
	if (!rrp_first_fit(e, from, r->goal_len, r->goal_len, out))
		return 0;
	if (!rrp_first_fit(e, from, 1, r->goal_len, out))
		return 0;
	return -1;	/* the device is full: the engine's regular policy has the last word */
}

const struct rrp_policy rrfuse_policy = {
	.abi = RRP_ABI_VERSION,
	.name = "halves",
	.choose = halves_choose,
};

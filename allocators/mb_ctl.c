// SPDX-License-Identifier: GPL-2.0
/*
 * The running allocator as rrctl sees it: tunables read and changed live,
 * the groups' buddy summaries and the statistics, as records
 * (include/rrfuse/rrctl_wire.h).  Called with the fs lock held; requests of
 * file data may be running meanwhile without it (RR_ALLOC_NOLOCK), so a
 * tunable is stored atomically and a policy is replaced, not freed
 * (mb_policy_switch, policies.c).  Validation stays in mb_tunables.c.
 */
#include "mballoc.h"
#include "policies.h"
#include "rrfuse/rrctl_wire.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/*
 * A policy the engine switched off (mb_guard.c: it cannot take the fs lock
 * where it decides) becomes a real switch to regular at the next rrctl
 * command, so that the allocator tunable says what runs.
 */
static void settle_off(struct rr_alloc *a)
{
	char err[RRCTL_ERR_LEN];

	if (a->policy == &mb_policy_regular || !atomic_load(&a->run->off))
		return;
	if (!mb_policy_switch(a, &mb_policy_regular, err, sizeof(err)))
		snprintf(a->t.policy, sizeof(a->t.policy), "%s", mb_policy_regular.name);
}

int rr_alloc_get(struct rr_alloc *a, const char *name, char *buf, size_t len, char *err, size_t errlen)
{
	settle_off(a);
	return rr_alloc_tunable_get(&a->t, name, buf, len, err, errlen);
}

/*
 * Requests without the fs lock read the tunables meanwhile (MB_T): every
 * field is stored on its own, atomically.  The policy's name is read under
 * the fs lock only.
 */
static void tunables_store(struct rr_alloc_tunables *to, const struct rr_alloc_tunables *from)
{
#define STORE(f) __atomic_store_n(&to->f, from->f, __ATOMIC_RELAXED)
#define MB_TUNABLE(n, k, m, d) STORE(n);
#include "rrfuse/tunables.def"
#undef MB_TUNABLE
	STORE(check);
	STORE(discard);
	STORE(shared);
#undef STORE
	memcpy(to->policy, from->policy, sizeof(to->policy));
	memcpy(to->policy_dir, from->policy_dir, sizeof(to->policy_dir));
}

/*
 * What needs more than the new value:
 *  - mb_group_prealloc: the kernel refuses more than the blocks per group
 *    (attach clamps a mount option; a live value is refused instead, so
 *    the user sees the limit).
 *  - mb_optimize_scan: the order lists are kept up to date whatever its
 *    value (group_update), so turning it on live finds every loaded group
 *    listed.
 *  - mb_stats: counting starts (or stops) with the next request; the
 *    counts so far are kept, as the kernel keeps them.
 *  - allocator: requests that start after the switch run the new policy.
 * mb_max_prealloc_kb and the scan limits are read per request; existing
 * preallocations keep their size.
 */
int rr_alloc_set(struct rr_alloc *a, const char *name, const char *value, char *err, size_t errlen)
{
	struct rr_alloc_tunables t;
	int ret;

	settle_off(a);
	t = a->t;
	ret = rr_alloc_tunable_set(&t, name, value, err, errlen);

	if (ret)
		return ret;
	if (t.mb_group_prealloc > a->bpg) {
		snprintf(err, errlen, "bad value for %s=: '%s' (at most %u, the blocks per group)", name,
			 value, a->bpg);
		return -EINVAL;
	}
	if (strcmp(t.policy, a->t.policy)) {
		const struct mb_policy *p = mb_policy_get(t.policy, &t, err, errlen);

		if (!p)
			return -EINVAL;
		ret = mb_policy_switch(a, p, err, errlen);
		if (ret)
			return ret;
	}
	tunables_store(&a->t, &t);
	return 0;
}

uint32_t rr_alloc_ngroups(struct rr_alloc *a)
{
	return a->ngroups;
}

/* As ext4_mb_seq_groups_show: a group not loaded yet is loaded to be shown. */
int rr_alloc_group_info(struct rr_alloc *a, uint32_t g, struct rrctl_group *out)
{
	struct mb_group *grp;
	struct mb_buddy *b;
	unsigned int k;
	int ret, first;

	if (g >= a->ngroups)
		return -EINVAL;
	ret = mb_load_group(a, g);
	if (ret)
		return ret;
	grp = &a->groups[g];
	memset(out, 0, sizeof(*out));
	out->group = g;
	pthread_mutex_lock(&grp->lock);
	b = grp->buddy;
	out->free = b->free;
	out->frags = b->fragments;
	/* The kernel's bb_first_free is the blocks per group in a full group. */
	first = mb_buddy_first_free(b);
	out->first = first < 0 ? a->bpg : (uint32_t)first;
	for (k = 0; k <= b->max_order && k < RRCTL_ORDERS; k++)
		out->counters[k] = b->counters[k];
	pthread_mutex_unlock(&grp->lock);
	return 0;
}

void rr_alloc_stats(struct rr_alloc *a, struct rrctl_stats *out)
{
	const struct mb_stats *s = &a->stats;
	int c;

	out->enabled = !!a->t.mb_stats;
	out->ngroups = a->ngroups;
	out->reqs = atomic_load(&s->reqs);
	out->success = atomic_load(&s->success);
	out->groups_scanned = atomic_load(&s->groups_scanned);
	out->extents_scanned = atomic_load(&s->extents_scanned);
	out->goal_hits = atomic_load(&s->goal_hits);
	out->stream_goal_hits = atomic_load(&s->stream_goal_hits);
	out->len_goal_hits = atomic_load(&s->len_goal_hits);
	out->two_n_hits = atomic_load(&s->two_n_hits);
	out->breaks = atomic_load(&s->breaks);
	out->lost = atomic_load(&s->lost);
	out->buddies_generated = atomic_load(&s->buddies_generated);
	out->buddies_time_ns = atomic_load(&s->buddies_time_ns);
	out->preallocated = atomic_load(&s->preallocated);
	out->discarded = atomic_load(&s->discarded);
	for (c = 0; c < RRCTL_NCR && c < MB_NUM_CRS; c++) {
		out->cr_hits[c] = atomic_load(&s->cr_hits[c]);
		out->cr_considered[c] = atomic_load(&s->cr_considered[c]);
		out->cr_extents[c] = atomic_load(&s->cr_extents[c]);
		out->cr_useless[c] = atomic_load(&s->cr_useless[c]);
	}
	for (c = 0; c < RRCTL_NREFUSE && c < MB_NREFUSE; c++)
		out->refused[c] = atomic_load(&s->refused[c]);
	out->policies_off = atomic_load(&s->policies_off);
}

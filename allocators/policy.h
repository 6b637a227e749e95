/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The allocation policy interface.  The engine (mballoc.c) owns the
 * groups, buddies, normalisation and preallocations; a policy decides only
 * where to look: given a normalised request (struct mb_ac, goal group and
 * length set) it walks groups with the engine's helpers (mb_good_group,
 * mb_scan_group, mb_find_by_goal, the optimised-scan lists) until
 * ac->status is AC_FOUND, or gives up with ac->b_ex.len == 0.
 *
 * A policy is one file, allocators/NAME.c defining mb_policy_NAME, and one
 * line MB_POLICY(NAME) in allocators/policies.def.  init and fini run
 * under the fs lock; choose may not (file data is allocated without it):
 * requests run at once, so whatever state a policy keeps beyond the
 * engine's (ac->priv) must be atomic or locked by the policy itself, and
 * tunables are read with MB_T().
 *
 * The engine does not trust the answer (mb_guard.c): an extent outside
 * the device, in metadata or not free is refused and the request served
 * by regular; only b_ex is taken from ac, the request's fields are put
 * back after choose.
 */
#ifndef RR_MB_POLICY_H
#define RR_MB_POLICY_H

#include <stddef.h>

#include "mballoc.h"

struct mb_policy {
	const char *name;
	/*
	 * Optional: init sets a->policy_priv (choose then finds it in
	 * ac->priv), fini frees it (a->policy_priv set to it).  init runs at
	 * attach and at a live switch (rrctl allocator=NAME, mb_ctl.c); fini
	 * only at detach, also for policies switched away from, as a request
	 * may still be running in them after the switch.
	 */
	int (*init)(struct rr_alloc *a);
	void (*fini)(struct rr_alloc *a);
	/* Find blocks for ac (leaves the found extent in ac->b_ex, not yet marked used). */
	void (*choose)(struct rr_alloc *a, struct mb_ac *ac);
};

/* The others fall back on it for metadata. */
extern const struct mb_policy mb_policy_regular;

const struct mb_policy *mb_policy_find(const char *name);
/*
 * Make p the running policy (mb_ctl.c, fs lock held): p's init; the old
 * one's fini waits for detach.  0, or -ENOMEM with err set and the old
 * policy running.
 */
int mb_policy_switch(struct rr_alloc *a, const struct mb_policy *p, char *err, size_t errlen);
/* "regular, ..." for messages. */
void mb_policy_names(char *buf, size_t len);

#endif

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

struct rrp_policy;

/* Where allocator=NAME finds NAME.so without policy_dir (meson.build sets it from $libdir). */
#ifndef RRFUSE_POLICY_DIR
#define RRFUSE_POLICY_DIR "/usr/local/lib/rrfuse/policies"
#endif

struct mb_policy {
	const char *name;
	/* A policy on the public API (include/rrfuse/policy.h, mb_plugin.c): the engine's wrapper runs it. */
	const struct rrp_policy *pub;
	/*
	 * Optional: init sets a->policy_priv (choose then finds it in
	 * ac->priv), fini frees it (a->policy_priv set to it).  init runs at
	 * attach and at a live switch (rrctl allocator=NAME, mb_ctl.c); fini
	 * only at detach, also for policies switched away from, as a request
	 * may still be running in them after the switch.
	 */
	int (*init)(struct rr_alloc *a, const struct mb_policy *self);
	void (*fini)(struct rr_alloc *a, const struct mb_policy *self);
	/* Find blocks for ac (leaves the found extent in ac->b_ex, not yet marked used). */
	void (*choose)(struct rr_alloc *a, struct mb_ac *ac);
};

/* The others fall back on it for metadata. */
extern const struct mb_policy mb_policy_regular;

/* A built-in, or one loaded already (mb_plugin.c); NULL if neither. */
const struct mb_policy *mb_policy_find(const char *name);
/*
 * Find name as mb_policy_find does, else load it as a shared object
 * (mb_plugin.c: NAME.so in t->policy_dir, or the installed policy
 * directory when that is empty, or the file itself when name holds a
 * '/'; with t->shared or as root only a file of root's).  NULL with err
 * set when it is none of those or is refused.
 */
const struct mb_policy *mb_policy_get(const char *name, const struct rr_alloc_tunables *t, char *err,
				      size_t errlen);
/* Does name look like a policy: a built-in, a plain name (NAME.so) or a path? */
int mb_policy_name_ok(const char *name);
/*
 * Make p the running policy (mb_ctl.c, fs lock held): p's init; the old
 * one's fini waits for detach.  0, or -ENOMEM with err set and the old
 * policy running.
 */
int mb_policy_switch(struct rr_alloc *a, const struct mb_policy *p, char *err, size_t errlen);
/* mb_plugin.c: the wrapper that runs a policy on the public API, and the loaded ones by name. */
int mb_plugin_init(struct rr_alloc *a, const struct mb_policy *self);
void mb_plugin_fini(struct rr_alloc *a, const struct mb_policy *self);
void mb_plugin_choose(struct rr_alloc *a, struct mb_ac *ac);
const struct mb_policy *mb_plugin_find(const char *name);
/* A built-in policy on the public API: NAME.c defines rrp_policy_NAME and says MB_PUBLIC_POLICY(NAME). */
#define MB_PUBLIC_POLICY(n) \
	const struct mb_policy mb_policy_##n = { .name = #n, .pub = &rrp_policy_##n, \
		.init = mb_plugin_init, .fini = mb_plugin_fini, .choose = mb_plugin_choose }

/* "regular, ..." for messages. */
void mb_policy_names(char *buf, size_t len);

#endif

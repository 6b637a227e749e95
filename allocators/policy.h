/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The engine's side of the allocation policies: what is public and what
 * is private.
 *
 * Public (include/rrfuse/policy.h): the versioned policy API.  Every
 * built-in policy but one is written against it alone, as a policy built
 * outside rrfuse is: allocators/NAME.c includes rrfuse/policy.h (and the C
 * library), defines const struct rrp_policy rrp_policy_NAME, and
 * allocators/policies.def says MB_PUBLIC_POLICY(NAME).  The engine runs
 * them through the wrapper in mb_plugin.c (the request translated, the
 * answer checked as any policy's); the criteria search they use is in
 * mb_search.c.
 *
 * Private (this header, mballoc.h): struct mb_policy, the engine's table
 * entry, whose choose works on the engine's request (struct mb_ac) itself.
 * Only liar, fault injection for the answer checks (tests only), is
 * written on it, as its lies need no service: MB_POLICY(liar).  init and
 * fini run under the fs lock; choose may not (file data is allocated
 * without it).
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
/*
 * Make p the running policy (mb_ctl.c, fs lock held): p's init; the old
 * one's fini waits for detach.  0, or -ENOMEM with err set and the old
 * policy running.
 */
int mb_policy_switch(struct rr_alloc *a, const struct mb_policy *p, char *err, size_t errlen);
/* mb_plugin.c: the wrapper that runs a policy on the public API, and the loaded ones by name. */
int mb_plugin_init(struct rr_alloc *a, const struct mb_policy *self);
void mb_plugin_fini(struct rr_alloc *a, const struct mb_policy *self);
void mb_plugin_choose(struct rr_alloc *a, const struct mb_policy *self, struct mb_ac *ac);
const struct mb_policy *mb_plugin_find(const char *name);
/*
 * The request the public policy running in this thread answers (NULL
 * outside its choose), for the services; and whether its answer's hit
 * was counted already (by the criteria search, mb_search.c).
 */
extern _Thread_local struct mb_ac *mb_pub_ac;
extern _Thread_local int mb_pub_counted;
/* regular's public side (regular.c), which rrp_regular runs directly. */
extern const struct rrp_policy rrp_policy_regular __attribute__((visibility("hidden")));

#endif

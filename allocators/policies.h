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
 * Private (this header, mb_types.h): struct mb_policy, the engine's table
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
#ifndef RR_MB_POLICIES_H
#define RR_MB_POLICIES_H

#include <stddef.h>

#include "mb_types.h"

/* The others fall back on it for metadata. */
extern const struct mb_policy mb_policy_regular;

/* A built-in, or one loaded already; NULL if neither. */
const struct mb_policy *mb_policy_find(const char *name);
/*
 * Find name as mb_policy_find does, else load it as a shared object
 * (NAME.so in t->policy_dir, or the installed policy directory when
 * that is empty, or the file itself when name holds a '/'; with
 * t->shared or as root only a file of root's).  NULL with err
 * set when it is none of those or is refused.
 */
const struct mb_policy *mb_policy_get(const char *name, const struct rr_alloc_tunables *t, char *err,
				      size_t errlen);
/*
 * Make p the running policy (attach, rrctl; fs lock held): p's init;
 * the old one's fini waits for detach.  0, or -ENOMEM with err set and the old
 * policy running.
 */
int mb_policy_switch(struct rr_alloc *a, const struct mb_policy *p, char *err, size_t errlen);

#endif

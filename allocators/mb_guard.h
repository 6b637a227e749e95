/* SPDX-License-Identifier: GPL-2.0 */
/*
 * mb_guard.c: the engine checks every answer of a policy before it uses
 * it.  Attach collects the metadata extents (fs lock); where says whether
 * b_ex lies inside one group and outside metadata (-1) or why not; refuse
 * counts and logs a refused answer of run's policy and switches the policy
 * off after MB_GUARD_MAX_REFUSED of them.
 */
#ifndef RR_MB_GUARD_H
#define RR_MB_GUARD_H

#include "mb_types.h"

#define MB_GUARD_MAX_REFUSED 64
int mb_guard_attach(struct rr_alloc *a);
int mb_guard_where(const struct rr_alloc *a, const struct mb_ext *ex);
void mb_guard_refuse(struct rr_alloc *a, struct mb_running *run, enum mb_refusal why);

#endif

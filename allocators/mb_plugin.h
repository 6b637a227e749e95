/* SPDX-License-Identifier: GPL-2.0 */
/* The wrapper that runs a policy on the public API as an mb_policy (mb_plugin.c). */
#ifndef RR_MB_PLUGIN_H
#define RR_MB_PLUGIN_H

#include "mb_types.h"

int mb_plugin_init(struct rr_alloc *a, const struct mb_policy *self);
void mb_plugin_fini(struct rr_alloc *a, const struct mb_policy *self);
void mb_plugin_choose(struct rr_alloc *a, const struct mb_policy *self, struct mb_ac *ac);
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

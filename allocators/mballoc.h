/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The engine's services (mballoc.c) for the files above it: the policy
 * API's side (mb_plugin.c, mb_search.c), rrctl's (mb_ctl.c) and attach
 * (mb_attach.c).  The types are in mb_types.h.
 */
#ifndef RR_MBALLOC_H
#define RR_MBALLOC_H

#include "mb_types.h"

/* The engine's life (mb_attach.c drives it): built, given libext2fs's callbacks, taken down. */
int mb_engine_new(ext2_filsys fs, const struct rr_alloc_tunables *t, struct rr_alloc **out);
void mb_engine_hook(struct rr_alloc *a);
void mb_engine_free(struct rr_alloc *a);
int mb_load_group(struct rr_alloc *a, uint32_t g);
void mb_prefetch(struct rr_alloc *a, uint32_t g, uint32_t n);
int mb_good_group(struct rr_alloc *a, struct mb_ac *ac, uint32_t g, enum mb_cr cr);
void mb_scan_group(struct rr_alloc *a, struct mb_ac *ac, uint32_t g, enum mb_cr cr);
int mb_find_by_goal(struct rr_alloc *a, struct mb_ac *ac);
/* The lowest-numbered group in [from, end) on list (list, order), or -1. */
int mb_list_find(struct rr_alloc *a, int list, int order, uint32_t from, uint32_t end);
/* First free run of >= need blocks from block from on, wrapping; 1 = found (ac->b_ex, AC_FOUND). */
int mb_first_fit(struct rr_alloc *a, struct mb_ac *ac, uint64_t from, uint32_t need);
/* The first group of a flex group of 4 or more: its metadata's; data leaves it alone when it can. */
int mb_flex_meta_group(const struct rr_alloc *a, uint32_t g);
/* The extent of len blocks at block blk, in group coordinates: 0, or -1 when blk is outside the device. */
int mb_ext_of(const struct rr_alloc *a, uint64_t blk, uint32_t len, struct mb_ext *ex);
/* Kernel's ac_2order: log2(len) if len is a power of two worth aligning (mb_order2_req), else 0. */
unsigned int mb_two_order(const struct rr_alloc *a, uint32_t len);
/* This CPU's slot among a->nlg (locality groups, per-CPU cursors). */
uint32_t mb_cpu_slot(const struct rr_alloc *a);

#endif

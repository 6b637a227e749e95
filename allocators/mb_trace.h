/* SPDX-License-Identifier: GPL-2.0 */
/*
 * mb_trace.c: one line of the kernel's tracefs text per request, search
 * (ext4_mballoc_alloc), preallocation use and free; call them only when
 * MB_TRACING(a).  exact: a closed file's last request (no preallocation).
 */
#ifndef RR_MB_TRACE_H
#define RR_MB_TRACE_H

#include "mb_types.h"

#define MB_TRACING(a) __builtin_expect(atomic_load_explicit(&(a)->tracing, memory_order_relaxed), 0)
void mb_trace_request(struct rr_alloc *a, const struct rr_alloc_req *req, uint32_t len);
void mb_trace_alloc(struct rr_alloc *a, const struct rr_alloc_req *req, const struct mb_ac *ac,
		    const struct rr_extent *out, int exact);
void mb_trace_prealloc(struct rr_alloc *a, const struct rr_alloc_req *req, uint32_t len,
		       const struct rr_extent *out);
void mb_trace_free(struct rr_alloc *a, uint64_t blk, uint64_t len);
/* ext4_discard_preallocations: the inode's preallocations dropped (gone: their list, by inext). */
void mb_trace_discard(struct rr_alloc *a, ext2_ino_t ino, const struct mb_pa *gone);
/*
 * jbd2_start_commit / jbd2_end_commit (end nonzero): what was freed before a
 * commit begins is free once it ends, as a replay of the trace must know.
 */
void mb_trace_commit(struct rr_alloc *a, int end);
void mb_trace_flush(struct rr_alloc *a);

#endif

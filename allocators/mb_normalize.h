/* SPDX-License-Identifier: GPL-2.0 */
/* Request normalisation (mb_normalize.c): a pure function of its input, unit-tested as a table. */
#ifndef RR_MB_NORMALIZE_H
#define RR_MB_NORMALIZE_H

#include <stdint.h>

#include "rrfuse/alloc.h"

/* Normalisation input and output: pure, see mb_normalize(). */
struct mb_norm {
	unsigned int bbits;
	uint32_t bpg;
	uint32_t max_prealloc_kb;
	uint64_t lblk, len;		/* the request */
	uint64_t isize;			/* i_size in bytes */
	struct rr_alloc_nbr nbr;	/* allocated neighbours */
	/* out */
	uint64_t start, size;		/* window, logical blocks */
	uint64_t goal;			/* physical goal, 0 = keep the request's */
};
void mb_normalize(struct mb_norm *n);

#endif

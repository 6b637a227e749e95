// SPDX-License-Identifier: GPL-2.0
/*
 * Request normalisation (kernel: ext4_mb_normalize_request): grow a data
 * request into the window of the file that one preallocation should cover,
 * so that later writes find their blocks reserved next to these.
 *
 * The window follows from the file's size (request end or i_size, the
 * larger): 16 KiB .. 1 MiB steps starting at 0, then 2 MiB and 4 MiB windows
 * aligned to their size, then mb_max_prealloc_kb (the kernel's fixed 8 MiB,
 * made tunable by the seed patch) starting on an 8 MiB boundary, whatever
 * the request's length (with 4 KiB blocks NRL_CHECK_SIZE's "max <= chunk"
 * always holds there).  It is then cut to the request's group-sized span and
 * to the file's allocated neighbours, and may end before the request does.
 * Overlap with the inode's live preallocations is cut by the engine (it
 * holds them).  Pure: unit-tested as a table.
 */
#include "mb_normalize.h"

#define KB(x) ((uint64_t)(x) << 10)
#define MB(x) ((uint64_t)(x) << 20)

/* NRL_CHECK_SIZE: the row applies if req <= size, or if the block size is small. */
static int row(uint64_t req, uint64_t size, uint64_t max, uint64_t chunk)
{
	return req <= size || max <= chunk;
}

void mb_normalize(struct mb_norm *n)
{
	unsigned int bb = n->bbits;
	uint64_t size, start_off, max = 2ULL << bb, start, end;

	size = (n->lblk + n->len) << bb;
	if (size < n->isize)
		size = n->isize;
	/* The kernel's ladder up to 1 MiB: the next power of two, 16 KiB at least. */
	if (size <= MB(1)) {
		uint64_t rung = KB(16);

		while (rung < size)
			rung <<= 1;
		size = rung;
	}
	if (size <= MB(1)) {
		start_off = 0;
	} else if (row(size, MB(4), max, KB(2))) {
		start_off = (n->lblk << bb) & ~(MB(2) - 1);
		size = MB(2);
	} else if (row(size, MB(8), max, KB(4))) {
		start_off = (n->lblk << bb) & ~(MB(4) - 1);
		size = MB(4);
	} else if (row(n->len, MB(8) >> bb, max, KB(8))) {
		start_off = (n->lblk << bb) & ~(MB(8) - 1);
		size = KB(n->max_prealloc_kb);
	} else {
		start_off = n->lblk << bb;
		size = n->len << bb;
	}
	start = start_off >> bb;
	end = start + (size >> bb);

	/* Not before the request's group-sized span (kernel: rounddown by blocks per group). */
	if (start < n->lblk - n->lblk % n->bpg)
		start = n->lblk - n->lblk % n->bpg;
	/* Not past the last logical block an extent can map. */
	if (end > 0xffffffffULL)
		end = 0xffffffffULL;
	/* Not over the file's allocated neighbours. */
	if (n->nbr.pleft && start <= n->nbr.lleft)
		start = n->nbr.lleft + 1;
	if (n->nbr.pright && end > n->nbr.lright)
		end = n->nbr.lright;
	if (end - start > n->bpg)
		end = start + n->bpg;
	/*
	 * The window must hold the request's first block, not its whole: a
	 * request longer than its window is served that much, and the caller
	 * asks again for the rest (the kernel's fallocate of 1 GiB asks for
	 * 32767 blocks at a time and gets 8 MiB windows: its trace shows
	 * "orig 1/0/32767@0 goal 0/-1/2048@0").
	 */
	if (start > n->lblk)
		start = n->lblk;
	if (end <= n->lblk) {
		end = n->lblk + n->len;
		if (end - start > n->bpg)	/* the request is at most a group (the engine caps it) */
			start = n->lblk;
	}
	n->start = start;
	n->size = end - start;
	n->goal = 0;
	/* Sit next to the neighbour the window touches; the left one wins. */
	if (n->nbr.pright && end == n->nbr.lright && n->nbr.pright > n->size)
		n->goal = n->nbr.pright - n->size;
	if (n->nbr.pleft && start == n->nbr.lleft + 1)
		n->goal = n->nbr.pleft + 1;
}

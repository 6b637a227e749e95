/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The buddy of one group (mb_buddy.c) and the bitmap bit operations it is
 * built on.  It knows nothing of the engine: pure functions over a group's
 * bits, unit-tested without a filesystem; the caller holds the group's lock.
 */
#ifndef RR_MB_BUDDY_H
#define RR_MB_BUDDY_H

#include <stdint.h>

/* Orders 0 .. MB_MAX_ORDER; the kernel's MB_NUM_ORDERS is blocksize_bits + 2. */
#define MB_NUM_ORDERS_MAX	18

/*
 * A buddy over one group: order 0 is the group's block bitmap with every
 * preallocated block also marked used; a 0 bit at order k >= 1 marks an
 * aligned free chunk of 2^k blocks that is not inside a free chunk of order
 * k + 1.  Blocks past the group's end (the last group) are used.
 * counters[k] counts those maximal chunks (at order 0: free blocks whose
 * buddy is not free).
 */
struct mb_buddy {
	uint32_t nblocks;		/* blocks in this group */
	uint32_t size;			/* nblocks rounded up to 2^max_order */
	unsigned int max_order;
	uint32_t free;
	uint32_t fragments;		/* maximal free runs */
	uint32_t counters[MB_NUM_ORDERS_MAX];
	uint8_t *bits[MB_NUM_ORDERS_MAX];	/* bits[k]: size >> k bits, 1 = used */
};

/* Bitmaps as libext2fs exports them: bit i of byte i / 8, LSB first. */
static inline int mb_bit_test(const uint8_t *m, uint32_t i)
{
	return (m[i >> 3] >> (i & 7)) & 1;
}

static inline void mb_bit_set(uint8_t *m, uint32_t i)
{
	m[i >> 3] |= (uint8_t)(1u << (i & 7));
}

static inline void mb_bit_clear(uint8_t *m, uint32_t i)
{
	m[i >> 3] &= (uint8_t)~(1u << (i & 7));
}

/* Bits [start, start + len) of m set (used) or cleared. */
void mb_bits_fill(uint8_t *m, uint32_t start, uint32_t len, int used);
/* How many of m's bits from start on (at most len) are all used (1) or all free (0). */
uint32_t mb_bits_run(const uint8_t *m, uint32_t start, uint32_t len, int used);
int mb_buddy_init(struct mb_buddy *b, uint32_t nblocks, unsigned int max_order);
void mb_buddy_destroy(struct mb_buddy *b);
/* Build from a bitmap of nblocks bits (1 = used, LSB first as libext2fs's range export). */
void mb_buddy_generate(struct mb_buddy *b, const uint8_t *bitmap);
int mb_buddy_test(const struct mb_buddy *b, uint32_t blk);	/* 1 = used */
/* The range must be free (mark_used) or used (free); returns -1 (and changes nothing) if not. */
int mb_buddy_mark_used(struct mb_buddy *b, uint32_t start, uint32_t len);
int mb_buddy_free(struct mb_buddy *b, uint32_t start, uint32_t len);
/* Length of the free run starting at start, at most max; 0 if start is used. */
uint32_t mb_buddy_extent_at(const struct mb_buddy *b, uint32_t start, uint32_t max);
/* The free extent at start as the kernel's mb_find_extent counts it (whole buddy chunks); 0 if used. */
uint32_t mb_buddy_chunk_extent(const struct mb_buddy *b, uint32_t start, uint32_t needed);
/* Next free run at or after from: 0 with its start and length set, or -1. */
int mb_buddy_next_run(const struct mb_buddy *b, uint32_t from, uint32_t *start, uint32_t *len);
/* First maximal free chunk of order >= order: its start, or -1. *got = its order. */
int64_t mb_buddy_find_order(const struct mb_buddy *b, unsigned int order, unsigned int *got);
int mb_buddy_largest_order(const struct mb_buddy *b);		/* -1 if none free */
int mb_buddy_first_free(const struct mb_buddy *b);		/* -1 if none */
/* 0 if a and b hold the same buddy (every order, counters, free, fragments). */
int mb_buddy_compare(const struct mb_buddy *a, const struct mb_buddy *b);
/* fls(free / fragments) - 2 clamped to [0, max_order], or -1 with no fragments. */
int mb_avg_order(uint32_t free, uint32_t fragments, unsigned int max_order);
int mb_fls(uint64_t x);

#endif

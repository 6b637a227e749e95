// SPDX-License-Identifier: GPL-2.0
/*
 * The buddy of one group, kept current incrementally (kernel:
 * ext4_mb_generate_buddy, mb_mark_used, mb_free_blocks).
 *
 * bits[0] is the block bitmap with preallocations marked: 1 = used, and
 * every free block is 0 there whatever chunk it belongs to.  At order
 * k >= 1 a 0 bit means "this aligned 2^k chunk is free and is not inside a
 * free chunk of order k + 1", so each free block belongs to exactly one
 * maximal chunk, found by walking up (order_of()).  counters[k] counts the
 * maximal chunks of order k; at order 0 they are the free blocks whose
 * buddy block is used.
 *
 * No locking here: the caller holds the group's lock.
 */
#include "mb_buddy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int mb_fls(uint64_t x)
{
	return x ? 64 - __builtin_clzll(x) : 0;
}

int mb_avg_order(uint32_t free, uint32_t fragments, unsigned int max_order)
{
	int o;

	if (!fragments)
		return -1;
	o = mb_fls(free / fragments) - 2;
	if (o < 0)
		o = 0;
	if (o > (int)max_order)
		o = (int)max_order;
	return o;
}

int mb_buddy_init(struct mb_buddy *b, uint32_t nblocks, unsigned int max_order)
{
	size_t total = 0, off = 0;
	unsigned int k;
	uint8_t *mem;

	memset(b, 0, sizeof(*b));
	if (max_order >= MB_NUM_ORDERS_MAX || !nblocks)
		return -EINVAL;
	b->nblocks = nblocks;
	b->max_order = max_order;
	b->size = (nblocks + (1u << max_order) - 1) & ~((1u << max_order) - 1);
	for (k = 0; k <= max_order; k++)
		total += ((b->size >> k) + 7) / 8;
	mem = malloc(total);
	if (!mem)
		return -ENOMEM;
	for (k = 0; k <= max_order; k++) {
		b->bits[k] = mem + off;
		off += ((b->size >> k) + 7) / 8;
	}
	memset(mem, 0xff, total);
	return 0;
}

void mb_buddy_destroy(struct mb_buddy *b)
{
	free(b->bits[0]);
	memset(b, 0, sizeof(*b));
}

int mb_buddy_test(const struct mb_buddy *b, uint32_t blk)
{
	return blk >= b->nblocks || mb_bit_test(b->bits[0], blk);
}

/* Bits [start, start + len) of m set (used) or cleared, whole bytes at a time where they can be. */
void mb_bits_fill(uint8_t *m, uint32_t start, uint32_t len, int used)
{
	uint32_t end = start + len;

	for (; start < end && (start & 7); start++)
		used ? mb_bit_set(m, start) : mb_bit_clear(m, start);
	if (end - start >= 8) {
		memset(m + start / 8, used ? 0xff : 0, (end - start) / 8);
		start += (end - start) & ~7u;
	}
	for (; start < end; start++)
		used ? mb_bit_set(m, start) : mb_bit_clear(m, start);
}

/* How many of m's bits from start on (at most len) are all used (1) or all free (0), whole words at a time. */
uint32_t mb_bits_run(const uint8_t *m, uint32_t start, uint32_t len, int used)
{
	uint32_t i = start, end = start + len;
	uint64_t full = used ? ~0ull : 0;

	for (; i < end && (i & 63); i++)
		if (mb_bit_test(m, i) != used)
			return i - start;
	for (; i + 64 <= end; i += 64) {
		uint64_t w;

		memcpy(&w, m + i / 8, sizeof(w));
		if (w != full)
			break;
	}
	for (; i < end; i++)
		if (mb_bit_test(m, i) != used)
			break;
	return i - start;
}

/* The order of the largest chunk that starts at start (aligned to it) and fits in len (> 0). */
static unsigned int chunk_order(const struct mb_buddy *b, uint32_t start, uint32_t len)
{
	unsigned int k = start ? (unsigned int)__builtin_ctz(start) : b->max_order;

	if (k > b->max_order)
		k = b->max_order;
	while ((1u << k) > len)
		k--;
	return k;
}

/* Record [start, start+len) (order-0 bits already clear) as maximal chunks. */
static void add_free_chunks(struct mb_buddy *b, uint32_t start, uint32_t len)
{
	while (len) {
		unsigned int k = chunk_order(b, start, len);

		if (k)
			mb_bit_clear(b->bits[k], start >> k);
		b->counters[k]++;
		start += 1u << k;
		len -= 1u << k;
	}
}

/* Used/free status of the neighbours of [start, start+len), for the fragment count. */
static int nbr_free(const struct mb_buddy *b, uint32_t start, uint32_t len)
{
	int n = 0;

	if (start > 0 && !mb_buddy_test(b, start - 1))
		n++;
	if (start + len < b->nblocks && !mb_buddy_test(b, start + len))
		n++;
	return n;
}

/* A whole free run of the bitmap: its chunks, its blocks, one fragment. */
static void add_free_run(struct mb_buddy *b, uint32_t start, uint32_t len)
{
	add_free_chunks(b, start, len);
	b->free += len;
	b->fragments++;
}

void mb_buddy_generate(struct mb_buddy *b, const uint8_t *bitmap)
{
	uint32_t i = 0;
	unsigned int k;

	for (k = 0; k <= b->max_order; k++)
		memset(b->bits[k], 0xff, ((b->size >> k) + 7) / 8);
	memset(b->counters, 0, sizeof(b->counters));
	b->free = b->fragments = 0;
	/* Run by run of the bitmap, a word at a time where they are long. */
	while (i < b->nblocks) {
		uint32_t len;

		i += mb_bits_run(bitmap, i, b->nblocks - i, 1);
		len = mb_bits_run(bitmap, i, b->nblocks - i, 0);
		if (!len)
			break;
		mb_bits_fill(b->bits[0], i, len, 0);
		add_free_run(b, i, len);
		i += len;
	}
}

/* The order of the maximal free chunk holding the free block blk. */
static unsigned int order_of(const struct mb_buddy *b, uint32_t blk)
{
	unsigned int k;

	for (k = 1; k <= b->max_order; k++)
		if (!mb_bit_test(b->bits[k], blk >> k))
			return k;
	return 0;
}

static int range_is(const struct mb_buddy *b, uint32_t start, uint32_t len, int used)
{
	if (start > b->nblocks || len > b->nblocks - start)
		return 0;
	return mb_bits_run(b->bits[0], start, len, used) == len;
}

int mb_buddy_mark_used(struct mb_buddy *b, uint32_t start, uint32_t len)
{
	uint32_t cur = start, end = start + len;
	int nf;

	if (!len || !range_is(b, start, len, 0))
		return -1;
	nf = nbr_free(b, start, len);
	/* One run split in two, shortened, or consumed whole. */
	b->fragments += nf == 2 ? 1 : nf == 0 ? (uint32_t)-1 : 0;
	b->free -= len;
	while (cur < end) {
		unsigned int k = order_of(b, cur);
		uint32_t cstart = cur & ~((1u << k) - 1), cend = cstart + (1u << k);
		uint32_t uend = end < cend ? end : cend;

		if (k)
			mb_bit_set(b->bits[k], cur >> k);
		b->counters[k]--;
		mb_bits_fill(b->bits[0], cur, uend - cur, 1);
		/* What is left of the chunk on either side stays free, as smaller chunks. */
		add_free_chunks(b, cstart, cur - cstart);
		add_free_chunks(b, uend, cend - uend);
		cur = uend;
	}
	return 0;
}

/* Free one aligned chunk of order k at start (all used), merging with free buddies. */
static void free_chunk(struct mb_buddy *b, uint32_t start, unsigned int k)
{
	uint32_t idx = start >> k;

	mb_bits_fill(b->bits[0], start, 1u << k, 0);
	while (k < b->max_order) {
		uint32_t bud = idx ^ 1;

		if (mb_bit_test(b->bits[k], bud))
			break;
		/* At order 0 the buddy block is a chunk of its own: its parent is not free. */
		if (k)
			mb_bit_set(b->bits[k], bud);
		b->counters[k]--;
		idx >>= 1;
		k++;
	}
	if (k)
		mb_bit_clear(b->bits[k], idx);
	b->counters[k]++;
}

int mb_buddy_free(struct mb_buddy *b, uint32_t start, uint32_t len)
{
	uint32_t cur = start, left = len;
	int nf;

	if (!len || !range_is(b, start, len, 1))
		return -1;
	nf = nbr_free(b, start, len);
	/* A new run, one grown, or two joined. */
	b->fragments += nf == 0 ? 1 : nf == 2 ? (uint32_t)-1 : 0;
	b->free += len;
	while (left) {
		unsigned int k = chunk_order(b, cur, left);

		free_chunk(b, cur, k);
		cur += 1u << k;
		left -= 1u << k;
	}
	return 0;
}

uint32_t mb_buddy_extent_at(const struct mb_buddy *b, uint32_t start, uint32_t max)
{
	if (start >= b->nblocks)
		return 0;
	return mb_bits_run(b->bits[0], start, max < b->nblocks - start ? max : b->nblocks - start, 0);
}

/*
 * The kernel's mb_find_extent: the free extent at start counted in whole
 * maximal chunks, start's own (from start on) and those after it, added
 * only while the count is short of needed.  So it is often longer than
 * needed and as long as needed only where the chunks happen to end there,
 * which is what its best-fit search measures (mballoc.c: measure()).
 */
uint32_t mb_buddy_chunk_extent(const struct mb_buddy *b, uint32_t start, uint32_t needed)
{
	unsigned int k;
	uint32_t len, next;

	if (start >= b->nblocks || mb_bit_test(b->bits[0], start))
		return 0;
	k = order_of(b, start);
	len = (1u << k) - (start & ((1u << k) - 1));
	for (next = start + len; len < needed && next < b->nblocks && !mb_bit_test(b->bits[0], next);
	     next += 1u << k) {
		k = order_of(b, next);
		len += 1u << k;
	}
	return start + len > b->nblocks ? b->nblocks - start : len;
}

int mb_buddy_next_run(const struct mb_buddy *b, uint32_t from, uint32_t *start, uint32_t *len)
{
	uint32_t i;

	if (from >= b->nblocks)
		return -1;
	i = from + mb_bits_run(b->bits[0], from, b->nblocks - from, 1);
	if (i >= b->nblocks)
		return -1;
	*start = i;
	*len = mb_bits_run(b->bits[0], i, b->nblocks - i, 0);
	return 0;
}

int64_t mb_buddy_find_order(const struct mb_buddy *b, unsigned int order, unsigned int *got)
{
	unsigned int k;

	for (k = order; k <= b->max_order; k++) {
		uint32_t n = b->size >> k, i;

		if (!b->counters[k])
			continue;
		for (i = 0; i < n; i++) {
			if (!(i & 7) && b->bits[k][i >> 3] == 0xff && i + 8 <= n) {
				i += 7;
				continue;
			}
			if (!mb_bit_test(b->bits[k], i) && (k || !mb_bit_test(b->bits[0], i))) {
				/* At order 0 every free block is 0: only a block whose pair is used counts. */
				if (!k && !mb_bit_test(b->bits[0], i ^ 1) && (i ^ 1) < b->nblocks)
					continue;
				*got = k;
				return (int64_t)i << k;
			}
		}
	}
	return -1;
}

int mb_buddy_largest_order(const struct mb_buddy *b)
{
	int k;

	for (k = (int)b->max_order; k >= 0; k--)
		if (b->counters[k])
			return k;
	return -1;
}

int mb_buddy_first_free(const struct mb_buddy *b)
{
	uint32_t s, l;

	return mb_buddy_next_run(b, 0, &s, &l) ? -1 : (int)s;
}

int mb_buddy_compare(const struct mb_buddy *a, const struct mb_buddy *b)
{
	unsigned int k;

	if (a->nblocks != b->nblocks || a->max_order != b->max_order || a->free != b->free ||
	    a->fragments != b->fragments)
		return -1;
	if (memcmp(a->counters, b->counters, sizeof(a->counters)))
		return -1;
	for (k = 0; k <= a->max_order; k++)
		if (memcmp(a->bits[k], b->bits[k], ((a->size >> k) + 7) / 8))
			return -1;
	return 0;
}

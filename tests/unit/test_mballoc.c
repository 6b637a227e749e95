// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests of the mballoc engine's pure parts, no filesystem at all:
 * the buddy (built from a bitmap == built block by block; random marks and
 * frees == regenerating), the normalisation table with its caps, and the
 * tunables' validation.
 */
#include "unit.h"
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../allocators/mballoc.h"
#include "../../allocators/mb_normalize.h"

#define NB 32768
#define MAXO 13

static uint8_t map[NB / 8];

static void map_set(uint32_t i, int used)
{
	if (used)
		map[i >> 3] |= (uint8_t)(1u << (i & 7));
	else
		map[i >> 3] &= (uint8_t)~(1u << (i & 7));
}

static void random_map(unsigned int seed, int density)
{
	uint32_t i = 0;

	srand(seed);
	memset(map, 0, sizeof(map));
	while (i < NB) {
		uint32_t run = 1 + (uint32_t)rand() % 300;
		int used = rand() % 100 < density;

		for (; run && i < NB; run--, i++)
			map_set(i, used);
	}
}

START_TEST(generate_equals_block_by_block)
{
	struct mb_buddy gen, byfree, byuse;
	uint32_t i;

	random_map(42 + (unsigned int)_i, 40 + 10 * _i);
	ck_assert_int_eq(mb_buddy_init(&gen, NB - 77, MAXO), 0);
	ck_assert_int_eq(mb_buddy_init(&byfree, NB - 77, MAXO), 0);
	ck_assert_int_eq(mb_buddy_init(&byuse, NB - 77, MAXO), 0);
	mb_buddy_generate(&gen, map);
	/* From all used, free every free block alone; from all free, take every used one. */
	{
		static uint8_t full[NB / 8];

		memset(full, 0xff, sizeof(full));
		mb_buddy_generate(&byfree, full);
		memset(full, 0, sizeof(full));
		mb_buddy_generate(&byuse, full);
	}
	ck_assert_uint_eq(byfree.free, 0);
	ck_assert_uint_eq(byuse.free, NB - 77);
	ck_assert_uint_eq(byuse.fragments, 1);
	for (i = 0; i < NB - 77; i++) {
		int used = (map[i >> 3] >> (i & 7)) & 1;

		if (!used)
			ck_assert_int_eq(mb_buddy_free(&byfree, i, 1), 0);
		else
			ck_assert_int_eq(mb_buddy_mark_used(&byuse, i, 1), 0);
	}
	ck_assert_int_eq(mb_buddy_compare(&gen, &byfree), 0);
	ck_assert_int_eq(mb_buddy_compare(&gen, &byuse), 0);
	mb_buddy_destroy(&gen);
	mb_buddy_destroy(&byfree);
	mb_buddy_destroy(&byuse);
}
END_TEST

START_TEST(empty_group_counters)
{
	struct mb_buddy b;
	static uint8_t zero[NB / 8];

	ck_assert_int_eq(mb_buddy_init(&b, NB, MAXO), 0);
	mb_buddy_generate(&b, zero);
	/* As the kernel's mb_groups shows an empty 4 KiB-block group: 4 chunks of 2^13. */
	ck_assert_uint_eq(b.counters[13], 4);
	ck_assert_int_eq(mb_buddy_largest_order(&b), 13);
	ck_assert_uint_eq(b.fragments, 1);
	/* Taking one block splits one 2^13 chunk into 2^0 .. 2^12. */
	ck_assert_int_eq(mb_buddy_mark_used(&b, 0, 1), 0);
	ck_assert_uint_eq(b.counters[13], 3);
	for (int k = 0; k < 13; k++)
		ck_assert_uint_eq(b.counters[k], 1);
	ck_assert_int_eq(mb_buddy_mark_used(&b, 0, 1), -1);	/* not free */
	ck_assert_int_eq(mb_buddy_free(&b, 5, 1), -1);		/* not used */
	ck_assert_int_eq(mb_buddy_free(&b, 0, 1), 0);
	ck_assert_uint_eq(b.counters[13], 4);
	ck_assert_uint_eq(b.free, NB);
	mb_buddy_destroy(&b);
}
END_TEST

/* Random marks and frees, each checked against a buddy regenerated from a shadow bitmap. */
START_TEST(random_ops_equal_regenerated)
{
	struct mb_buddy b, fresh;
	int op;

	random_map(7, 50);
	ck_assert_int_eq(mb_buddy_init(&b, NB, MAXO), 0);
	ck_assert_int_eq(mb_buddy_init(&fresh, NB, MAXO), 0);
	mb_buddy_generate(&b, map);
	for (op = 0; op < 3000; op++) {
		uint32_t s, l, i;

		if (rand() % 2) {
			uint32_t off;

			if (mb_buddy_next_run(&b, (uint32_t)rand() % NB, &s, &l))
				continue;
			off = (uint32_t)rand() % l;
			s += off;
			l = 1 + (uint32_t)rand() % (l - off);
			ck_assert_int_eq(mb_buddy_mark_used(&b, s, l), 0);
			for (i = s; i < s + l; i++)
				map_set(i, 1);
		} else {
			s = (uint32_t)rand() % NB;
			for (l = 0; s + l < NB && l < 500 && ((map[(s + l) >> 3] >> ((s + l) & 7)) & 1); l++)
				;
			if (!l)
				continue;
			ck_assert_int_eq(mb_buddy_free(&b, s, l), 0);
			for (i = s; i < s + l; i++)
				map_set(i, 0);
		}
		if (op % 50 == 0) {
			mb_buddy_generate(&fresh, map);
			ck_assert_int_eq(mb_buddy_compare(&fresh, &b), 0);
		}
	}
	mb_buddy_generate(&fresh, map);
	ck_assert_int_eq(mb_buddy_compare(&fresh, &b), 0);
	mb_buddy_destroy(&b);
	mb_buddy_destroy(&fresh);
}
END_TEST

/* mb_bits_run and mb_bits_fill, whole words at a time, against the same bit by bit. */
START_TEST(bit_runs_equal_bit_by_bit)
{
	static uint8_t m[64], shadow[64];
	int op;

	srand(11);
	for (op = 0; op < 20000; op++) {
		uint32_t s = (uint32_t)rand() % 512, l = (uint32_t)rand() % (512 - s + 1), i, want;
		int used = rand() % 2;

		if (op % 3 == 0) {
			mb_bits_fill(m, s, l, used);
			for (i = s; i < s + l; i++)
				used ? mb_bit_set(shadow, i) : mb_bit_clear(shadow, i);
			ck_assert_int_eq(memcmp(m, shadow, sizeof(m)), 0);
		}
		for (want = 0; want < l && mb_bit_test(shadow, s + want) == used; want++)
			;
		ck_assert_uint_eq(mb_bits_run(m, s, l, used), want);
	}
}
END_TEST

START_TEST(find_order_and_runs)
{
	struct mb_buddy b;
	unsigned int got;
	uint32_t s, l;

	memset(map, 0xff, sizeof(map));
	for (uint32_t i = 100; i < 100 + 700; i++)	/* run 100..799 */
		map_set(i, 0);
	for (uint32_t i = 4096; i < 8192; i++)		/* aligned 2^12 */
		map_set(i, 0);
	ck_assert_int_eq(mb_buddy_init(&b, NB, MAXO), 0);
	mb_buddy_generate(&b, map);
	ck_assert_uint_eq(b.fragments, 2);
	ck_assert_int_eq(mb_buddy_largest_order(&b), 12);
	ck_assert_int_eq(mb_buddy_find_order(&b, 9, &got), 4096);
	ck_assert_uint_eq(got, 12);
	ck_assert_int_eq(mb_buddy_find_order(&b, 8, &got), 256);	/* 256..511 inside 100..799 */
	ck_assert_int_eq(mb_buddy_find_order(&b, 13, &got), -1);
	ck_assert_int_eq(mb_buddy_next_run(&b, 0, &s, &l), 0);
	ck_assert_uint_eq(s, 100);
	ck_assert_uint_eq(l, 700);
	ck_assert_uint_eq(mb_buddy_extent_at(&b, 150, 10000), 650);
	ck_assert_uint_eq(mb_buddy_extent_at(&b, 150, 20), 20);
	ck_assert_int_eq(mb_buddy_first_free(&b), 100);
	mb_buddy_destroy(&b);
}
END_TEST

/* ---- normalisation ---- */

static struct mb_norm norm(uint64_t lblk, uint64_t len, uint64_t isize, unsigned int kb)
{
	struct mb_norm n = { .bbits = 12, .bpg = 32768, .max_prealloc_kb = kb,
			     .lblk = lblk, .len = len, .isize = isize };

	mb_normalize(&n);
	return n;
}

START_TEST(normalize_table)
{
	static const struct {
		uint64_t lblk, len, isize;
		unsigned int kb;
		uint64_t start, size;
	} t[] = {
		/* File size steps of 16 KiB .. 1 MiB, from block 0. */
		{ 0, 1, 0, 8192, 0, 4 },
		{ 0, 4, 0, 8192, 0, 4 },
		{ 4, 1, 16384, 8192, 0, 8 },
		{ 0, 32, 0, 8192, 0, 32 },
		{ 32, 32, 131072, 8192, 0, 64 },
		{ 200, 10, 0, 8192, 0, 256 },
		/* 2 MiB windows up to 4 MiB, 4 MiB windows up to 8 MiB, aligned to themselves. */
		{ 300, 32, 0, 8192, 0, 512 },
		{ 600, 32, 0, 8192, 512, 512 },
		{ 1100, 32, 0, 8192, 1024, 1024 },
		{ 1900, 32, 0, 8192, 1024, 1024 },
		/* Past 8 MiB: the cap, on an 8 MiB boundary. */
		{ 2100, 32, 0, 8192, 2048, 2048 },
		{ 5000, 32, 0, 8192, 4096, 2048 },
		{ 5000, 32, 0, 32768, 4096, 8192 },
		{ 2048, 32, 0, 32768, 2048, 8192 },
		/* A request longer than the window gets the window (kernel: fallocate 1 GiB). */
		{ 0, 32767, 0, 8192, 0, 2048 },
		{ 2048, 32767, 0, 8192, 2048, 2048 },
		{ 30720, 32767, 0, 8192, 30720, 2048 },
		{ 100, 4000, 0, 32768, 0, 8192 },
		/* i_size counts: a write inside a big file gets the big window. */
		{ 10, 1, 100 << 20, 8192, 0, 2048 },
		/* Never more than a group. */
		{ 32768 + 100, 32, 0, 262144, 32768, 32768 },
	};
	size_t i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct mb_norm n = norm(t[i].lblk, t[i].len, t[i].isize, t[i].kb);

		ck_assert_msg(n.start == t[i].start && n.size == t[i].size,
			      "row %zu: (%llu,%llu) -> [%llu,+%llu), want [%llu,+%llu)", i,
			      (unsigned long long)t[i].lblk, (unsigned long long)t[i].len,
			      (unsigned long long)n.start, (unsigned long long)n.size,
			      (unsigned long long)t[i].start, (unsigned long long)t[i].size);
	}
}
END_TEST

START_TEST(normalize_neighbours)
{
	struct mb_norm n = { .bbits = 12, .bpg = 32768, .max_prealloc_kb = 8192,
			     .lblk = 2100, .len = 32 };

	/* Allocated up to 2099 at physical 50099: start right after it, goal right after it. */
	n.nbr.lleft = 2099;
	n.nbr.pleft = 50099;
	mb_normalize(&n);
	ck_assert_uint_eq(n.start, 2100);
	ck_assert_uint_eq(n.size, 4096 - 2100);
	ck_assert_uint_eq(n.goal, 50100);
	/* A right neighbour at 3000 cuts the window there; the left goal still wins. */
	n.nbr.lright = 3000;
	n.nbr.pright = 90000;
	mb_normalize(&n);
	ck_assert_uint_eq(n.size, 900);
	ck_assert_uint_eq(n.goal, 50100);
	/* Only the right one: end just before it. */
	n.nbr.pleft = 0;
	mb_normalize(&n);
	ck_assert_uint_eq(n.start, 2048);
	ck_assert_uint_eq(n.goal, 90000 - (3000 - 2048));
}
END_TEST

/* ---- tunables ---- */

START_TEST(tunables_prealloc_kb)
{
	static const struct {
		const char *v;
		int ret;
		unsigned int want;
	} t[] = {
		{ "8192", 0, 8192 }, { "0", 0, 8192 }, { "4096", 0, 8192 }, { "8193", 0, 16384 },
		{ "32768", 0, 32768 }, { "30000", 0, 32768 }, { "0x8000", 0, 32768 },
		{ "2147483648", 0, 2147483648u },
		{ "2147483649", -EINVAL, 0 },	/* rounds up past 2^32 */
		{ "4294967296", -EINVAL, 0 },	/* not an unsigned int */
		{ "99999999999999999999", -EINVAL, 0 },
		{ "abc", -EINVAL, 0 }, { "12k", -EINVAL, 0 }, { "", -EINVAL, 0 }, { "-1", -EINVAL, 0 },
	};
	size_t i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct rr_alloc_tunables tu;
		char err[160];
		int r;

		rr_alloc_tunables_default(&tu);
		r = rr_alloc_tunable_set(&tu, i % 2 ? "max_prealloc_kb" : "mb_max_prealloc_kb", t[i].v, err,
					 sizeof(err));
		ck_assert_msg(r == t[i].ret, "'%s': %d", t[i].v, r);
		ck_assert_uint_eq(tu.mb_max_prealloc_kb, r ? 8192 : t[i].want);
	}
}
END_TEST

START_TEST(tunables_others)
{
	struct rr_alloc_tunables tu;
	char err[160];

	rr_alloc_tunables_default(&tu);
	ck_assert_uint_eq(tu.mb_stream_req, 16);
	ck_assert_uint_eq(tu.mb_group_prealloc, 512);
	ck_assert_uint_eq(tu.mb_min_to_scan, 10);
	ck_assert_uint_eq(tu.mb_max_to_scan, 200);
	ck_assert_uint_eq(tu.mb_order2_req, 2);
	ck_assert_str_eq(tu.policy, "regular");
	ck_assert_int_eq(rr_alloc_tunable_set(&tu, "mb_stats", "1", err, sizeof(err)), 0);
	ck_assert_uint_eq(tu.mb_stats, 1);
	ck_assert_int_eq(rr_alloc_tunable_set(&tu, "mb_stats", "2", err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(rr_alloc_tunable_set(&tu, "mb_optimize_scan", "0", err, sizeof(err)), 0);
	ck_assert_uint_eq(tu.mb_optimize_scan, 0);
	ck_assert_int_eq(rr_alloc_tunable_set(&tu, "mb_best_avail_max_trim_order", "65", err, sizeof(err)),
			 -EINVAL);
	ck_assert_int_eq(rr_alloc_tunable_set(&tu, "mb_nonsense", "1", err, sizeof(err)), -ENOENT);
	ck_assert_int_eq(rr_alloc_tunable_set(&tu, "allocator", "regular", err, sizeof(err)), 0);
	/* A plain name may be a policy to load (mb_plugin.c); this is no name. */
	ck_assert_int_eq(rr_alloc_tunable_set(&tu, "allocator", "no pe", err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "regular"));
	ck_assert_int_eq(rr_alloc_tunable_set(&tu, "policy_dir", "relative", err, sizeof(err)), -EINVAL);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("mballoc");
	TCase *tc = tcase_create("pure");

	tcase_add_loop_test(tc, generate_equals_block_by_block, 0, 5);
	tcase_add_test(tc, empty_group_counters);
	tcase_add_test(tc, random_ops_equal_regenerated);
	tcase_add_test(tc, bit_runs_equal_bit_by_bit);
	tcase_add_test(tc, find_order_and_runs);
	tcase_add_test(tc, normalize_table);
	tcase_add_test(tc, normalize_neighbours);
	tcase_add_test(tc, tunables_prealloc_kb);
	tcase_add_test(tc, tunables_others);
	suite_add_tcase(s, tc);
	return unit_run(s);
}

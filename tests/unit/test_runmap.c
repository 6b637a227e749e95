// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests: rrreplay's run map (tools/replay/runmap.c) against a plain
 * array of keys, under random puts and deletes that split, trim, replace
 * and join runs.
 */
#include "unit.h"
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "../../tools/replay/runmap.h"

#define KEYS 2048
#define NONE UINT64_MAX

static uint64_t shadow[KEYS];

/* Every key as the map gives it, and the runs in order, against the shadow. */
struct walk {
	uint64_t next, seen;
};

static int walk_run(void *arg, const struct runmap_run *run)
{
	struct walk *w = arg;
	uint64_t k;

	ck_assert_uint_ge(run->key, w->next);	/* in order, never overlapping */
	ck_assert_uint_gt(run->len, 0);
	for (k = 0; k < run->len; k++)
		ck_assert_uint_eq(shadow[run->key + k], run->flat ? run->val : run->val + k);
	w->next = run->key + run->len;
	w->seen += run->len;
	return 0;
}

static void check_all(const struct runmap *m)
{
	struct walk w = { 0 };
	uint64_t k, mapped = 0;

	for (k = 0; k < KEYS; k++) {
		struct runmap_run r;
		int in = runmap_at(m, k, &r);

		ck_assert_uint_eq(runmap_get(m, k, NONE), shadow[k]);
		ck_assert_int_eq(in, shadow[k] != NONE);
		if (in) {
			ck_assert_uint_eq(r.key, k);
			ck_assert_uint_eq(r.val, shadow[k]);
			mapped++;
		} else if (r.len) {
			ck_assert_uint_gt(r.key, k);	/* the next run: nothing mapped in between */
			ck_assert_uint_ne(shadow[r.key], NONE);
		}
	}
	ck_assert_int_eq(runmap_each(m, walk_run, &w), 0);
	ck_assert_uint_eq(w.seen, mapped);
}

START_TEST(random_puts_and_deletes)
{
	struct runmap m = { 0 };
	int op;

	srand(5);
	for (op = 0; op < KEYS; op++)
		shadow[op] = NONE;
	for (op = 0; op < 6000; op++) {
		uint64_t key = (uint64_t)rand() % KEYS, len = 1 + (uint64_t)rand() % 64, k;
		uint64_t val = (uint64_t)rand() % 100000;
		int flat = rand() % 4 == 0;

		if (key + len > KEYS)
			len = KEYS - key;
		if (rand() % 3) {
			ck_assert_int_eq(runmap_put(&m, key, len, val, flat), 0);
			for (k = 0; k < len; k++)
				shadow[key + k] = flat ? val : val + k;
		} else {
			ck_assert_int_eq(runmap_del(&m, key, len), 0);
			for (k = 0; k < len; k++)
				shadow[key + k] = NONE;
		}
		if (op % 200 == 0)
			check_all(&m);
	}
	check_all(&m);
	runmap_free(&m);
	ck_assert_ptr_null(m.root);
}
END_TEST

/* A run continued by the next put is one run; a delete in its middle makes two. */
START_TEST(join_and_split)
{
	struct runmap m = { 0 };
	struct runmap_run r;

	ck_assert_int_eq(runmap_put(&m, 100, 10, 5000, 0), 0);
	ck_assert_int_eq(runmap_put(&m, 110, 20, 5010, 0), 0);
	ck_assert_uint_eq(m.n, 1);
	ck_assert_int_eq(runmap_at(&m, 100, &r), 1);
	ck_assert_uint_eq(r.len, 30);
	ck_assert_int_eq(runmap_del(&m, 105, 3), 0);
	ck_assert_uint_eq(m.n, 2);
	ck_assert_int_eq(runmap_at(&m, 106, &r), 0);
	ck_assert_uint_eq(r.key, 108);
	ck_assert_uint_eq(r.val, 5008);
	ck_assert_uint_eq(r.len, 22);
	ck_assert_int_eq(runmap_at(&m, 200, &r), 0);
	ck_assert_uint_eq(r.len, 0);
	runmap_free(&m);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("runmap");
	TCase *tc = tcase_create("runmap");

	tcase_add_test(tc, join_and_split);
	tcase_add_test(tc, random_puts_and_deletes);
	suite_add_tcase(s, tc);
	return unit_run(s);
}

// SPDX-License-Identifier: GPL-2.0
/*
 * The running allocator as rrctl changes it (allocators/mb_ctl.c), on a
 * real image without a mount: live tunables through the one validation,
 * the limits that need the filesystem, group records against the buddy,
 * and the policy switch's init/fini order with a policy made up here.
 */
#include "unit.h"
#include <check.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "rrfuse/alloc.h"
#include "rrfuse/rrctl_wire.h"
#include "../../allocators/policies.h"

static char img[64];
static ext2_filsys fs;
static struct rr_alloc *a;

static void setup(void)
{
	struct rr_alloc_tunables t;

	fs = unit_image(img, "64M", "-b 4096");
	rr_alloc_tunables_default(&t);
	t.check = 1;
	ck_assert_int_eq(rr_alloc_attach(fs, &t, &a), 0);
}

static void teardown(void)
{
	rr_alloc_verify(a);
	rr_alloc_detach(a);
	ext2fs_close_free(&fs);
	unlink(img);
}

static const char *get(const char *name)
{
	static char buf[64];
	char err[128];

	ck_assert_int_eq(rr_alloc_get(a, name, buf, sizeof(buf), err, sizeof(err)), 0);
	return buf;
}

START_TEST(set_validates_once_and_applies)
{
	char err[128] = "";
	unsigned int i;

	ck_assert_int_eq(rr_alloc_set(a, "max_prealloc_kb", "9000", err, sizeof(err)), 0);
	ck_assert_str_eq(get("mb_max_prealloc_kb"), "16384");
	ck_assert_int_eq(rr_alloc_set(a, "mb_max_prealloc_kb", "x", err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(get("mb_max_prealloc_kb"), "16384");
	ck_assert_int_eq(rr_alloc_set(a, "nope", "1", err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "nope"));
	/* A locality group's PA is no larger than the blocks per group (32768 here). */
	ck_assert_uint_eq(fs->super->s_blocks_per_group, 32768);
	ck_assert_int_eq(rr_alloc_set(a, "mb_group_prealloc", "32769", err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "at most 32768"));
	ck_assert_str_eq(get("mb_group_prealloc"), "512");
	ck_assert_int_eq(rr_alloc_set(a, "mb_group_prealloc", "32768", err, sizeof(err)), 0);
	ck_assert_str_eq(get("mb_group_prealloc"), "32768");
	/* Every listed name reads; aliases are not listed. */
	for (i = 0; rr_alloc_tunable_name(i); i++) {
		get(rr_alloc_tunable_name(i));
		ck_assert_str_ne(rr_alloc_tunable_name(i), "max_prealloc_kb");
	}
	ck_assert_uint_eq(i, 13);
	/* A name that is no built-in and no NAME.so in policy_dir: refused, the policy unchanged. */
	ck_assert_int_eq(rr_alloc_set(a, "policy_dir", "/nonexistent", err, sizeof(err)), 0);
	ck_assert_int_eq(rr_alloc_set(a, "allocator", "nope", err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "unknown allocator 'nope'"));
	ck_assert_str_eq(get("allocator"), "regular");
}
END_TEST

START_TEST(group_record_is_the_buddy)
{
	struct rrctl_group g;
	uint64_t sum = 0;
	unsigned int k;

	ck_assert_int_eq(rr_alloc_group_info(a, rr_alloc_ngroups(a), &g), -EINVAL);
	ck_assert_int_eq(rr_alloc_group_info(a, 0, &g), 0);
	ck_assert_uint_eq(g.free, ext2fs_bg_free_blocks_count(fs, 0));
	for (k = 0; k < RRCTL_ORDERS; k++)
		sum += (uint64_t)g.counters[k] << k;
	ck_assert_uint_eq(sum, g.free);
	ck_assert(!ext2fs_test_block_bitmap2(fs->block_map, g.first));
	ck_assert(ext2fs_test_block_bitmap2(fs->block_map, g.first - 1));
}
END_TEST

START_TEST(stats_count_preallocation_hits_as_the_kernel)
{
	struct rr_alloc_req req = { .ino = 12, .lblk = 600, .len = 32, .isize = 600 * 4096,
				    .flags = RR_ALLOC_DATA };
	struct rrctl_stats st;
	struct rr_extent ex;
	char err[128];

	ck_assert_int_eq(rr_alloc_set(a, "mb_stats", "1", err, sizeof(err)), 0);
	/* A search that leaves a window preallocated, then a write the window serves. */
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), 0);
	req.lblk += 32;
	req.goal = ex.pblk + ex.len;
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), 0);
	ck_assert_uint_eq(ex.pblk, req.goal);
	memset(&st, 0, sizeof(st));
	rr_alloc_stats(a, &st);
	ck_assert_uint_eq(st.enabled, 1);
	ck_assert_uint_eq(st.reqs, 2);
	ck_assert_uint_eq(st.success, 2);
	ck_assert_uint_ge(st.goal_hits, 1);
	ck_assert_uint_ge(st.extents_scanned, 1);
	ck_assert_uint_eq(st.preallocated, 512 - 32);
	ck_assert_uint_eq(st.cr_extents[0] + st.cr_extents[1] + st.cr_extents[2] + st.cr_extents[3] +
			  st.cr_extents[4], st.extents_scanned);
	ck_assert_uint_eq(st.lost, 0);
	/* Off: counting stops, the counts stay. */
	ck_assert_int_eq(rr_alloc_set(a, "mb_stats", "0", err, sizeof(err)), 0);
	req.lblk += 32;
	req.goal = ex.pblk + ex.len;
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), 0);
	rr_alloc_stats(a, &st);
	ck_assert_uint_eq(st.enabled, 0);
	ck_assert_uint_eq(st.reqs, 2);
}
END_TEST

/* A policy that records its calls, to see the switch's order. */
static int calls, fail_init;
static char priv_a, priv_b;
static int init_a(struct rr_alloc *x, const struct mb_policy *self)
{
	(void)self;
	ck_assert_ptr_null(x->policy_priv);	/* the running policy's priv is not handed over */
	calls = calls * 10 + 1;
	if (fail_init)
		return -1;
	x->policy_priv = &priv_a;
	return 0;
}
static void fini_a(struct rr_alloc *x, const struct mb_policy *self)
{
	(void)self;
	ck_assert_ptr_eq(x->policy_priv, &priv_a);
	calls = calls * 10 + 2;
	x->policy_priv = NULL;
}
static int init_b(struct rr_alloc *x, const struct mb_policy *self)
{
	(void)self;
	calls = calls * 10 + 3;
	x->policy_priv = &priv_b;
	return 0;
}
static void fini_b(struct rr_alloc *x, const struct mb_policy *self)
{
	(void)self;
	ck_assert_ptr_eq(x->policy_priv, &priv_b);
	calls = calls * 10 + 4;
}
static const struct mb_policy pol_a = { .name = "a", .init = init_a, .fini = fini_a };
static const struct mb_policy pol_b = { .name = "b", .init = init_b, .fini = fini_b };

START_TEST(policy_switch_starts_new_keeps_old_until_detach)
{
	const struct mb_policy *regular = a->policy;
	char err[128] = "";

	calls = 0;
	ck_assert_int_eq(mb_policy_switch(a, &pol_a, err, sizeof(err)), 0);
	ck_assert_ptr_eq(a->policy, &pol_a);
	ck_assert_ptr_eq(a->policy_priv, &priv_a);
	ck_assert_int_eq(mb_policy_switch(a, &pol_b, err, sizeof(err)), 0);
	/* a's init, b's init; a's fini waits: a request may still be running in a. */
	ck_assert_int_eq(calls, 13);
	ck_assert_ptr_eq(a->policy_priv, &priv_b);
	/* The same policy again: nothing happens. */
	ck_assert_int_eq(mb_policy_switch(a, &pol_b, err, sizeof(err)), 0);
	ck_assert_int_eq(calls, 13);
	/* A start that fails leaves the running policy and its priv alone. */
	fail_init = 1;
	ck_assert_int_eq(mb_policy_switch(a, &pol_a, err, sizeof(err)), -EINVAL);
	fail_init = 0;
	ck_assert_ptr_nonnull(strstr(err, "'a'"));
	ck_assert_ptr_eq(a->policy, &pol_b);
	ck_assert_ptr_eq(a->policy_priv, &priv_b);
	ck_assert_int_eq(mb_policy_switch(a, regular, err, sizeof(err)), 0);
	ck_assert_int_eq(calls, 131);
	ck_assert_ptr_eq(a->policy, regular);
	/* Detach stops each with its own priv, newest first. */
	rr_alloc_detach(a);
	ck_assert_int_eq(calls, 13142);
	ck_assert_int_eq(rr_alloc_attach(fs, NULL, &a), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("mb_ctl");
	TCase *tc = tcase_create("ctl");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, set_validates_once_and_applies);
	tcase_add_test(tc, group_record_is_the_buddy);
	tcase_add_test(tc, stats_count_preallocation_hits_as_the_kernel);
	tcase_add_test(tc, policy_switch_starts_new_keeps_old_until_detach);
	suite_add_tcase(s, tc);
	return unit_run(s);
}

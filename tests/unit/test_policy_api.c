// SPDX-License-Identifier: GPL-2.0
/*
 * The public policy API's services (allocators/mb_plugin.c, mb_search.c)
 * on a real image without a mount: what they find is free and where they
 * were asked to look, the geometry is the filesystem's, the criteria
 * search runs in a request as regular's does, and the loader refuses what
 * it cannot load with the reason and leaves the running policy.
 */
#include "unit.h"
#include <check.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "rrfuse/alloc.h"
#include "rrfuse/policy.h"
#include "../../allocators/mballoc.h"
#include "../../allocators/policies.h"
#include "../../allocators/mb_tunables.h"
#include "../../allocators/mb_guard.h"
#include "../../allocators/mb_plugin.h"

static char img[64];
static ext2_filsys fs;
static struct rr_alloc *a;
#define E ((struct rrp_engine *)a)

static void setup(void)
{
	struct rr_alloc_tunables t;

	fs = unit_image(img, "64M", "-b 4096 -g 4096");	/* 4 groups */
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

/* Every block of x free in libext2fs's bitmap (nothing is allocated meanwhile here). */
static void assert_free(const struct rrp_extent *x)
{
	uint32_t i;

	ck_assert_uint_ge(x->len, 1);
	for (i = 0; i < x->len; i++)
		ck_assert_int_eq(ext2fs_test_block_bitmap2(fs->block_map, x->start + i), 0);
}

START_TEST(geometry_is_the_filesystems)
{
	uint32_t g, free = 0;
	unsigned int v;

	ck_assert_uint_eq(rrp_groups(E), fs->group_desc_count);
	ck_assert_uint_eq(rrp_blocks_per_group(E), fs->super->s_blocks_per_group);
	ck_assert_uint_eq(rrp_first_data_block(E), fs->super->s_first_data_block);
	ck_assert_uint_eq(rrp_blocks(E), ext2fs_blocks_count(fs->super));
	ck_assert_uint_ge(rrp_cpus(E), 1);
	for (g = 0; g < rrp_groups(E); g++)
		free += rrp_group_free(E, g);
	ck_assert_uint_eq(free, ext2fs_free_blocks_count(fs->super));
	ck_assert_uint_eq(rrp_group_free(E, rrp_groups(E)), 0);
	ck_assert_int_eq(rrp_tunable(E, "mb_stream_req", &v), 0);
	ck_assert_uint_eq(v, 16);
	ck_assert_int_eq(rrp_tunable(E, "nope", &v), -1);
}
END_TEST

START_TEST(searches_find_free_runs_where_asked)
{
	uint32_t bpg = rrp_blocks_per_group(E), g;
	uint64_t mid = rrp_blocks(E) / 2;
	struct rrp_extent x;
	int order;

	/* Group 0 holds the metadata: its first free run is past it, and cut to max. */
	ck_assert_int_eq(rrp_find_in_group(E, 0, 0, 8, 8, &x), 0);
	assert_free(&x);
	ck_assert_uint_eq(x.len, 8);
	ck_assert_uint_gt(x.start, ext2fs_inode_table_loc(fs, 0));
	/* At or after the block asked for, inside the group. */
	ck_assert_int_eq(rrp_find_in_group(E, 1, bpg + 1000, 1, 100, &x), 0);
	assert_free(&x);
	ck_assert_uint_ge(x.start, bpg + 1000);
	ck_assert_uint_lt(x.start, 2ull * bpg);
	/* Nothing past a group's end, nor longer than a group. */
	ck_assert_int_eq(rrp_find_in_group(E, 1, 2ull * bpg, 1, 1, &x), -1);
	ck_assert_int_eq(rrp_find_in_group(E, 1, bpg, bpg + 1, bpg + 1, &x), -1);
	ck_assert_int_eq(rrp_find_in_group(E, rrp_groups(E), 0, 1, 1, &x), -1);
	/* First fit from the middle of the device goes up from there. */
	ck_assert_int_eq(rrp_first_fit(E, mid, 64, 64, &x), 0);
	assert_free(&x);
	ck_assert_uint_ge(x.start, mid);
	ck_assert_uint_eq(x.len, 64);
	/* The goal itself: a free one is taken, a used one (the inode table) is not. */
	ck_assert_int_eq(rrp_at_goal(E, x.start, 16, &x), 0);
	assert_free(&x);
	ck_assert_int_eq(rrp_at_goal(E, ext2fs_inode_table_loc(fs, 0), 1, &x), -1);
	ck_assert_int_eq(rrp_at_goal(E, rrp_blocks(E), 1, &x), -1);
	/* The lists know every loaded group with free space, by its largest free order. */
	for (g = 0; g < rrp_groups(E); g++)
		ck_assert_int_eq(rrp_find_in_group(E, g, 0, 1, 1, &x), 0);
	for (order = 0, g = UINT32_MAX; order < 20 && g == UINT32_MAX; order++) {
		int found = rrp_list_find(E, RRP_LIST_LARGEST, order, 0, rrp_groups(E));

		if (found >= 0)
			g = (uint32_t)found;
	}
	ck_assert_uint_lt(g, rrp_groups(E));
	ck_assert_uint_gt(rrp_group_free(E, g), 0);
	ck_assert_int_eq(rrp_list_find(E, 7, 0, 0, 1), -1);
	/* regular answers only inside a request. */
	ck_assert_int_eq(rrp_regular(E, NULL, &x), -1);
}
END_TEST

/* ABI 1.1's services: tunables by id, the stream goals, the flex metadata group. */
START_TEST(tunables_by_id_and_stream_goals)
{
	char err[128];
	int id = rrp_tunable_id("mb_max_to_scan");

	ck_assert_int_ge(id, 0);
	ck_assert_uint_eq(rrp_tunable_get(E, id), 200);
	ck_assert_int_eq(rr_alloc_set(a, "mb_max_to_scan", "50", err, sizeof(err)), 0);
	ck_assert_uint_eq(rrp_tunable_get(E, id), 50);
	ck_assert_int_eq(rrp_tunable_id("allocator"), -1);
	ck_assert_int_eq(rrp_tunable_id("nope"), -1);
	ck_assert_uint_eq(rrp_tunable_get(E, -1), 0);
	ck_assert_uint_eq(rrp_tunable_get(E, 1000), 0);
	rrp_set_stream_group(E, 7, 3);
	ck_assert_uint_eq(rrp_stream_group(E, 7), 3);
	rrp_set_stream_group(E, 7, rrp_groups(E));
	ck_assert_uint_eq(rrp_stream_group(E, 7), 3);
	ck_assert_uint_ge(rrp_max_order(E), 10);
	ck_assert_int_eq(rrp_flex_meta_group(E, rrp_groups(E)), 0);
	/* A search only inside a request. */
	ck_assert_ptr_null(rrp_search_begin(E, 0, 1));
}
END_TEST

/*
 * A policy on the public API that runs the criteria search by hand and
 * checks it: the goal taken whole when free, not when used; a scan at a
 * criterion finds a free run of the whole length in the group asked; the
 * statistics count the criterion's group and hit.  It answers with what it
 * found, which the engine must take.
 */
static struct rrp_extent probe_found;
static unsigned int probe_runs;

static int probe_choose(struct rrp_engine *e, void *priv, const struct rrp_request *r, struct rrp_extent *out)
{
	struct rrp_search *s;
	struct rrp_extent x;

	(void)priv;
	(void)r;
	probe_runs++;
	ck_assert_int_eq(rrp_find_in_group(e, 2, 0, 64, 64, &x), 0);
	s = rrp_search_begin(e, x.start, 64);
	ck_assert_ptr_nonnull(s);
	ck_assert_uint_eq(rrp_search_order(s), 6);
	ck_assert_int_eq(rrp_search_first_cr(s), RRP_CR_POWER2_ALIGNED);
	ck_assert_int_ne(rrp_search_at_goal(s), 0);
	ck_assert_int_ne(rrp_search_done(s), 0);
	ck_assert_int_eq(rrp_search_result(s, out), 0);
	ck_assert_uint_eq(out->start, x.start);
	ck_assert_uint_eq(out->len, 64);

	/* Again, from a used goal: not taken; group 3 at the slow criterion has a whole run. */
	s = rrp_search_begin(e, ext2fs_inode_table_loc(fs, 0), 64);
	ck_assert_int_eq(rrp_search_at_goal(s), 0);
	ck_assert_int_eq(rrp_search_done(s), 0);
	ck_assert_int_eq(rrp_search_result(s, out), -1);
	ck_assert_int_eq(rrp_search_good(s, rrp_groups(e), RRP_CR_ANY_FREE), 0);
	ck_assert_int_eq(rrp_search_good(s, 3, RRP_NUM_CRS), 0);
	ck_assert_int_ne(rrp_search_good(s, 3, RRP_CR_GOAL_LEN_SLOW), 0);
	ck_assert_int_ne(rrp_search_scan(s, 3, RRP_CR_GOAL_LEN_SLOW), 0);
	ck_assert_int_eq(rrp_search_result(s, out), 0);
	ck_assert_uint_eq(out->len, 64);
	ck_assert_uint_eq((out->start - rrp_first_data_block(e)) / rrp_blocks_per_group(e), 3);
	assert_free(out);
	probe_found = *out;
	return 0;
}

static const struct rrp_policy probe_pub = {
	.abi = RRP_ABI_VERSION, .name = "probe", .choose = probe_choose,
};
static const struct mb_policy probe = {
	.name = "probe", .pub = &probe_pub,
	.init = mb_plugin_init, .fini = mb_plugin_fini, .choose = mb_plugin_choose,
};

START_TEST(criteria_search_in_a_public_policy)
{
	struct rr_alloc_req meta = { .len = 1, .flags = RR_ALLOC_METADATA };
	struct rr_extent out;
	char err[128];

	ck_assert_int_eq(rr_alloc_set(a, "mb_stats", "1", err, sizeof(err)), 0);
	ck_assert_int_eq(mb_policy_switch(a, &probe, err, sizeof(err)), 0);
	ck_assert_int_eq(rr_alloc_blocks(a, &meta, &out), 0);
	ck_assert_uint_eq(probe_runs, 1);
	/* The engine took the answer, cut to the request's length. */
	ck_assert_uint_eq(out.pblk, probe_found.start);
	ck_assert_uint_eq(out.len, 1);
	ck_assert(ext2fs_test_block_bitmap2(fs->block_map, out.pblk));
	ck_assert_uint_eq(atomic_load(&a->stats.cr_considered[CR_GOAL_LEN_SLOW]), 1);
	ck_assert_uint_eq(atomic_load(&a->stats.cr_hits[CR_GOAL_LEN_SLOW]), 1);
	ck_assert_uint_eq(atomic_load(&a->stats.cr_hits[CR_ANY_FREE]), 0);
	ck_assert_uint_eq(atomic_load(&a->stats.refused[MB_REFUSE_USED]), 0);
}
END_TEST

/*
 * A search below CR_ANY_FREE passes over a group whose lock is held (by a
 * free, or another search), as the kernel's does; CR_ANY_FREE waits.  The
 * lock is this thread's: a wait would never end, a pass-over returns.
 */
START_TEST(a_busy_group_is_passed_over)
{
	struct rr_alloc_req req = { .ino = 12, .len = 256, .flags = RR_ALLOC_DATA | RR_ALLOC_CLOSED };
	struct rr_extent free_run, busy, idle;
	uint32_t g;

	ck_assert_int_eq(rr_alloc_blocks(a, &req, &free_run), 0);
	g = (uint32_t)((free_run.pblk - a->first_data_block) / a->bpg);
	rr_free_blocks(a, free_run.pblk, free_run.len);
	/* The same request again goes where the first went; with that group busy, elsewhere. */
	pthread_mutex_lock(&a->groups[g].lock);
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &busy), 0);
	pthread_mutex_unlock(&a->groups[g].lock);
	ck_assert_uint_ne((busy.pblk - a->first_data_block) / a->bpg, g);
	ck_assert_uint_eq(busy.len, 256);
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &idle), 0);
	ck_assert_uint_eq((idle.pblk - a->first_data_block) / a->bpg, g);
}
END_TEST

START_TEST(loader_refuses_with_the_reason)
{
	struct rr_alloc_tunables t;
	char err[256] = "";

	rr_alloc_tunables_default(&t);
	snprintf(t.policy_dir, sizeof(t.policy_dir), "/nonexistent");
	ck_assert_ptr_null(mb_policy_get("nope", &t, err, sizeof(err)));
	ck_assert_ptr_nonnull(strstr(err, "unknown allocator 'nope'"));
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/nope.so"));
	ck_assert_ptr_null(mb_policy_get("/nonexistent/x.so", &t, err, sizeof(err)));
	ck_assert_ptr_nonnull(strstr(err, "No such file"));
	/* Not a shared object: dlopen's reason. */
	ck_assert_ptr_null(mb_policy_get(img, &t, err, sizeof(err)));
	ck_assert_ptr_nonnull(strstr(err, "allocator '"));
	ck_assert_ptr_eq(mb_policy_get("firstfit", &t, err, sizeof(err)), mb_policy_find("firstfit"));
	ck_assert_int_eq(mb_policy_name_ok("a/b"), 0);
	ck_assert_int_eq(mb_policy_name_ok(""), 0);
	ck_assert_int_eq(mb_policy_name_ok("halves"), 1);
	ck_assert_int_eq(mb_policy_name_ok("/x/halves.so"), 1);
	ck_assert_str_eq(a->policy->name, "regular");
}
END_TEST

/* A policy that answers every request with one block, set by the test. */
static uint64_t answer;
static unsigned int asked;

static void fixed_choose(struct rr_alloc *x, const struct mb_policy *self, struct mb_ac *ac)
{
	(void)self;
	ac->b_ex.group = (uint32_t)((answer - x->first_data_block) / x->bpg);
	ac->b_ex.start = (uint32_t)((answer - x->first_data_block) % x->bpg);
	ac->b_ex.len = 1;
	ac->status = AC_FOUND;
	asked++;
}

static const struct mb_policy fixed = { .name = "fixed", .choose = fixed_choose };

static void meta_block(struct rr_extent *out)
{
	struct rr_alloc_req req = { .len = 1, .flags = RR_ALLOC_METADATA };

	ck_assert_int_eq(rr_alloc_blocks(a, &req, out), 0);
	ck_assert(ext2fs_test_block_bitmap2(fs->block_map, out->pblk));
}

/*
 * The engine's checks (allocators/mb_guard.c) by kind: a block preallocated
 * for another file, one in use, metadata, one past the end; each refused,
 * counted, and the request served by regular elsewhere; after 64
 * refusals the policy is no longer asked.
 */
START_TEST(guard_refuses_each_kind_then_switches_off)
{
	struct rr_alloc_req small = { .ino = 12, .lblk = 0, .len = 1, .isize = 4096, .flags = RR_ALLOC_DATA };
	struct rr_extent file, out;
	char err[128];
	unsigned int i;

	/* A small file's block; the rest of its CPU's group preallocation follows it. */
	ck_assert_int_eq(rr_alloc_blocks(a, &small, &file), 0);
	ck_assert_uint_gt(rr_alloc_prealloc_blocks(a), 0);
	ck_assert_int_eq(mb_policy_switch(a, &fixed, err, sizeof(err)), 0);

	answer = file.pblk + file.len;
	meta_block(&out);
	ck_assert_uint_eq(atomic_load(&a->stats.refused[MB_REFUSE_RESERVED]), 1);
	ck_assert_uint_ne(out.pblk, answer);

	answer = file.pblk;
	meta_block(&out);
	ck_assert_uint_eq(atomic_load(&a->stats.refused[MB_REFUSE_USED]), 1);
	ck_assert_uint_ne(out.pblk, answer);

	answer = ext2fs_inode_table_loc(fs, 0) + 1;
	meta_block(&out);
	ck_assert_uint_eq(atomic_load(&a->stats.refused[MB_REFUSE_METADATA]), 1);

	answer = ext2fs_blocks_count(fs->super) + 5;
	meta_block(&out);
	ck_assert_uint_eq(atomic_load(&a->stats.refused[MB_REFUSE_OUTSIDE]), 1);
	ck_assert_uint_eq(atomic_load(&a->stats.policies_off), 0);

	/* A free block is taken as answered. */
	answer = out.pblk + 100;
	ck_assert_int_eq(ext2fs_test_block_bitmap2(fs->block_map, answer), 0);
	meta_block(&out);
	ck_assert_uint_eq(out.pblk, answer);

	answer = file.pblk;
	for (i = 4; i < MB_GUARD_MAX_REFUSED; i++)
		meta_block(&out);
	ck_assert_uint_eq(atomic_load(&a->stats.policies_off), 1);
	ck_assert_int_eq(atomic_load(&a->run->off), 1);
	asked = 0;
	meta_block(&out);
	ck_assert_uint_eq(asked, 0);
	/* The next rrctl command shows regular running, and a switch back starts the policy afresh. */
	ck_assert_int_eq(rr_alloc_get(a, "allocator", err, sizeof(err), err, sizeof(err)), 0);
	ck_assert_str_eq(err, "regular");
	ck_assert_ptr_eq(a->policy, &mb_policy_regular);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("policy_api");
	TCase *tc = tcase_create("api");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, geometry_is_the_filesystems);
	tcase_add_test(tc, searches_find_free_runs_where_asked);
	tcase_add_test(tc, tunables_by_id_and_stream_goals);
	tcase_add_test(tc, criteria_search_in_a_public_policy);
	tcase_add_test(tc, a_busy_group_is_passed_over);
	tcase_add_test(tc, loader_refuses_with_the_reason);
	tcase_add_test(tc, guard_refuses_each_kind_then_switches_off);
	suite_add_tcase(s, tc);
	return unit_run(s);
}

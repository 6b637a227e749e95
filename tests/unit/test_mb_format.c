// SPDX-License-Identifier: GPL-2.0
/* The kernel's mb_groups and mb_stats text from rrctl's records (lib/mb_format.c). */
#include "unit.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mb_format.h"

/* Run fn into a string (the caller frees it). */
#define CAPTURE(out, call) do {						\
		size_t len_;						\
		FILE *f = open_memstream(&(out), &len_);		\
		ck_assert_ptr_nonnull(f);				\
		call;							\
		fclose(f);						\
	} while (0)

START_TEST(groups_header_is_the_kernels)
{
	char *s;

	CAPTURE(s, mb_format_groups_header(f));
	ck_assert_str_eq(s, "#group: free  frags first [ 2^0   2^1   2^2   2^3   2^4   2^5   2^6  "
			 " 2^7   2^8   2^9   2^10  2^11  2^12  2^13  ]\n");
	free(s);
}
END_TEST

START_TEST(group_line_widths_and_orders)
{
	struct rrctl_group g = { .group = 3, .free = 32768, .frags = 1, .first = 0 };
	char *s;
	int k;

	for (k = 0; k < RRCTL_ORDERS; k++)
		g.counters[k] = (uint32_t)k + 100;
	/* 4 KiB blocks: orders 0..13, all shown. */
	CAPTURE(s, mb_format_group(f, &g, 12));
	ck_assert_str_eq(s, "#3    : 32768 1     0     [ 100   101   102   103   104   105   106   107  "
			 " 108   109   110   111   112   113   ]\n");
	free(s);
	/* 1 KiB blocks: orders 12 and 13 do not exist and print 0, as the kernel's. */
	CAPTURE(s, mb_format_group(f, &g, 10));
	ck_assert_ptr_nonnull(strstr(s, " 110   111   0     0     ]\n"));
	free(s);
	/* Wide numbers push the columns, as %-5u does. */
	g.group = 123456;
	CAPTURE(s, mb_format_group(f, &g, 12));
	ck_assert_int_eq(strncmp(s, "#123456: 32768 1     0     [", 28), 0);
	free(s);
}
END_TEST

START_TEST(stats_off)
{
	struct rrctl_stats st = { .enabled = 0, .reqs = 5 };
	char *s;

	CAPTURE(s, mb_format_stats(f, &st));
	ck_assert_str_eq(s, "mballoc:\n\tmb stats collection turned off.\n"
			 "\tTo enable, please write \"1\" to sysfs file mb_stats.\n");
	ck_assert_ptr_null(strstr(s, "reqs"));
	free(s);
}
END_TEST

START_TEST(stats_on_in_kernel_order)
{
	struct rrctl_stats st = { .enabled = 1, .ngroups = 8, .reqs = 1, .success = 2, .groups_scanned = 3,
				  .extents_scanned = 4, .goal_hits = 5, .stream_goal_hits = 6,
				  .len_goal_hits = 7, .two_n_hits = 8, .breaks = 9, .lost = 10,
				  .buddies_generated = 11, .buddies_time_ns = 12, .preallocated = 13,
				  .discarded = 14 };
	static const char *const want =
		"mballoc:\n\treqs: 1\n\tsuccess: 2\n\tgroups_scanned: 3\n"
		"\tcr_p2_aligned_stats:\n\t\thits: 20\n\t\tgroups_considered: 30\n"
		"\t\textents_scanned: 40\n\t\tuseless_loops: 50\n"
		"\tcr_goal_fast_stats:\n\t\thits: 21\n\t\tgroups_considered: 31\n"
		"\t\textents_scanned: 41\n\t\tuseless_loops: 51\n"
		"\tcr_best_avail_stats:\n\t\thits: 22\n\t\tgroups_considered: 32\n"
		"\t\textents_scanned: 42\n\t\tuseless_loops: 52\n"
		"\tcr_goal_slow_stats:\n\t\thits: 23\n\t\tgroups_considered: 33\n"
		"\t\textents_scanned: 43\n\t\tuseless_loops: 53\n"
		"\tcr_any_free_stats:\n\t\thits: 24\n\t\tgroups_considered: 34\n"
		"\t\textents_scanned: 44\n\t\tuseless_loops: 54\n"
		"\textents_scanned: 4\n\t\tgoal_hits: 5\n\t\tstream_goal_hits: 6\n"
		"\t\tlen_goal_hits: 7\n\t\t2^n_hits: 8\n\t\tbreaks: 9\n\t\tlost: 10\n"
		"\tbuddies_generated: 11/8\n\tbuddies_time_used: 12\n"
		"\tpreallocated: 13\n\tdiscarded: 14\n";
	char *s;
	int c;

	for (c = 0; c < RRCTL_NCR; c++) {
		st.cr_hits[c] = 20 + (uint64_t)c;
		st.cr_considered[c] = 30 + (uint64_t)c;
		st.cr_extents[c] = 40 + (uint64_t)c;
		st.cr_useless[c] = 50 + (uint64_t)c;
	}
	CAPTURE(s, mb_format_stats(f, &st));
	ck_assert_str_eq(s, want);
	free(s);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("mb_format");
	TCase *tc = tcase_create("format");

	tcase_add_test(tc, groups_header_is_the_kernels);
	tcase_add_test(tc, group_line_widths_and_orders);
	tcase_add_test(tc, stats_off);
	tcase_add_test(tc, stats_on_in_kernel_order);
	suite_add_tcase(s, tc);
	return unit_run(s);
}

// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel's text formats for mb_groups (ext4_mb_seq_groups_show) and
 * mb_stats (ext4_seq_mb_stats_show, Linux 6.17: five criteria, no
 * bad_suggestions, stream_goal_hits).  Same field widths and order, so
 * scripts written against /proc/fs/ext4 read rrctl's output unchanged.
 * The kernel prints 32-bit counters; ours are 64-bit and print the same
 * digits below 2^32.  buddies_time_used is nanoseconds here (the kernel's
 * is get_cycles(), which user space has no portable equivalent of).
 */
#include "mb_format.h"

/* The kernel prints orders 0..13 whatever the block size: 14 columns. */
#define MB_SHOWN_ORDERS	14

void mb_format_groups_header(FILE *f)
{
	fputs("#group: free  frags first ["
	      " 2^0   2^1   2^2   2^3   2^4   2^5   2^6  "
	      " 2^7   2^8   2^9   2^10  2^11  2^12  2^13  ]\n", f);
}

void mb_format_group(FILE *f, const struct rrctl_group *g, unsigned int blocksize_bits)
{
	unsigned int i;

	fprintf(f, "#%-5u: %-5u %-5u %-5u [", g->group, g->free, g->frags, g->first);
	for (i = 0; i < MB_SHOWN_ORDERS; i++)
		fprintf(f, " %-5u", i <= blocksize_bits + 1 && i < RRCTL_ORDERS ? g->counters[i] : 0);
	fputs(" ]\n", f);
}

void mb_format_stats(FILE *f, const struct rrctl_stats *s)
{
	static const char *const crn[RRCTL_NCR] = {
		"p2_aligned", "goal_fast", "best_avail", "goal_slow", "any_free" };
	int c;

	fputs("mballoc:\n", f);
	if (!s->enabled) {
		/* The kernel's words: "the sysfs file mb_stats" is rrctl's key of that name here. */
		fputs("\tmb stats collection turned off.\n", f);
		fputs("\tTo enable, please write \"1\" to sysfs file mb_stats.\n", f);
		return;
	}
	fprintf(f, "\treqs: %llu\n", (unsigned long long)s->reqs);
	fprintf(f, "\tsuccess: %llu\n", (unsigned long long)s->success);
	fprintf(f, "\tgroups_scanned: %llu\n", (unsigned long long)s->groups_scanned);
	for (c = 0; c < RRCTL_NCR; c++) {
		fprintf(f, "\tcr_%s_stats:\n", crn[c]);
		fprintf(f, "\t\thits: %llu\n", (unsigned long long)s->cr_hits[c]);
		fprintf(f, "\t\tgroups_considered: %llu\n", (unsigned long long)s->cr_considered[c]);
		fprintf(f, "\t\textents_scanned: %llu\n", (unsigned long long)s->cr_extents[c]);
		fprintf(f, "\t\tuseless_loops: %llu\n", (unsigned long long)s->cr_useless[c]);
	}
	fprintf(f, "\textents_scanned: %llu\n", (unsigned long long)s->extents_scanned);
	fprintf(f, "\t\tgoal_hits: %llu\n", (unsigned long long)s->goal_hits);
	fprintf(f, "\t\tstream_goal_hits: %llu\n", (unsigned long long)s->stream_goal_hits);
	fprintf(f, "\t\tlen_goal_hits: %llu\n", (unsigned long long)s->len_goal_hits);
	fprintf(f, "\t\t2^n_hits: %llu\n", (unsigned long long)s->two_n_hits);
	fprintf(f, "\t\tbreaks: %llu\n", (unsigned long long)s->breaks);
	fprintf(f, "\t\tlost: %llu\n", (unsigned long long)s->lost);
	fprintf(f, "\tbuddies_generated: %llu/%u\n", (unsigned long long)s->buddies_generated, s->ngroups);
	fprintf(f, "\tbuddies_time_used: %llu\n", (unsigned long long)s->buddies_time_ns);
	fprintf(f, "\tpreallocated: %llu\n", (unsigned long long)s->preallocated);
	fprintf(f, "\tdiscarded: %llu\n", (unsigned long long)s->discarded);
}

/* Not a kernel format: the kernel has no policy to check (allocators/mb_guard.c). */
void mb_format_refusals(FILE *f, const struct rrctl_stats *s)
{
	fprintf(f, "policy answers refused: %llu outside the device, %llu in metadata, %llu in use, "
		"%llu reserved; %llu policies switched off\n",
		(unsigned long long)s->refused[0], (unsigned long long)s->refused[1],
		(unsigned long long)s->refused[2], (unsigned long long)s->refused[3],
		(unsigned long long)s->policies_off);
}

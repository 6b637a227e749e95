// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests: the allocator on a real ext4 image made by mke2fs, no mount.
 * Goal first, contiguity, reserves, ENOSPC, and libext2fs's own allocations
 * going through the callbacks with exact accounting; preallocations and
 * their accounting; the criteria on groups fragmented on purpose.  Every
 * test runs with the engine's check on (buddy == bitmap + preallocations
 * after every change, abort otherwise) and verifies all groups at the end.
 */
#include "unit.h"
#include <check.h>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sched.h>

#include "rrfuse/alloc.h"
#include "../../allocators/mballoc.h"

static char img[64];
static ext2_filsys fs;
static struct rr_alloc *a;

static void attach_checked_opt(int optimize_scan)
{
	struct rr_alloc_tunables t;

	rr_alloc_tunables_default(&t);
	if (optimize_scan >= 0)
		t.mb_optimize_scan = (unsigned int)optimize_scan;
	t.check = 1;
	t.mb_stats = 1;
	ck_assert_int_eq(rr_alloc_attach(fs, &t, &a), 0);
}

static void attach_checked(void)
{
	attach_checked_opt(-1);
}

static void setup(void)
{
	fs = unit_image(img, "64M", "-b 4096 -m 5");
	attach_checked();
}

static void teardown(void)
{
	rr_alloc_verify(a);
	rr_alloc_detach(a);
	ext2fs_close_free(&fs);
	unlink(img);
}

START_TEST(goal_first_and_contiguous)
{
	struct rr_alloc_req req = { .len = 250, .goal = 5000, .flags = RR_ALLOC_DATA };
	struct rr_alloc_tunables t;
	struct rr_extent ex, ex2;
	uint64_t before = ext2fs_free_blocks_count(fs->super);

	/* First fit from the goal (the kernel's best fit may take a snugger chunk before it: snuggest_run). */
	rr_alloc_detach(a);
	rr_alloc_tunables_default(&t);
	t.check = 1;
	t.rr_best_fit = 0;
	ck_assert_int_eq(rr_alloc_attach(fs, &t, &a), 0);

	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), 0);
	ck_assert_uint_eq(ex.pblk, 5000);
	ck_assert_uint_eq(ex.len, 250);
	ck_assert(ext2fs_test_block_bitmap_range2(fs->block_map, 5000, 250) == 0);
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), before - 250);
	/* The next request at the same goal lands just after (the goal group is walked from the goal). */
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex2), 0);
	ck_assert_uint_eq(ex2.pblk, 5250);
	rr_free_blocks(a, ex.pblk, ex.len);
	rr_free_blocks(a, ex2.pblk, ex2.len);
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), before);
}
END_TEST

START_TEST(reserves_and_enospc)
{
	uint64_t r = ext2fs_r_blocks_count(fs->super), meta = rr_alloc_meta_reserve(a);
	struct rr_alloc_req req = { .len = 4096, .flags = RR_ALLOC_DATA };
	struct rr_extent ex;
	uint64_t got = 0;

	ck_assert_uint_gt(r, 0);
	ck_assert_uint_gt(meta, 0);
	while (rr_alloc_blocks(a, &req, &ex) == 0)
		got += ex.len;
	/* A normal user stops at the root reserve plus the metadata reserve. */
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), r + meta);
	ck_assert_uint_eq(rr_alloc_avail(a, 0), 0);
	/* Root goes on to the metadata reserve. */
	req.flags |= RR_ALLOC_USE_ROOT_RESV;
	while (rr_alloc_blocks(a, &req, &ex) == 0)
		got += ex.len;
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), meta);
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), -ENOSPC);
	/* libext2fs's metadata allocations may still use the last blocks. */
	{
		blk64_t b;

		ck_assert_int_eq(ext2fs_alloc_block2(fs, 0, NULL, &b), 0);
		ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), meta - 1);
	}
	ck_assert_uint_gt(got, 0);
}
END_TEST

START_TEST(libext2fs_alloc_goes_through_callback)
{
	blk64_t b1, b2;
	uint64_t before = ext2fs_free_blocks_count(fs->super);

	/* Accounted exactly once even though both we and libext2fs are involved. */
	ck_assert_int_eq(ext2fs_alloc_block2(fs, 7000, NULL, &b1), 0);
	ck_assert_uint_eq(b1, 7000);
	ck_assert_int_eq(ext2fs_alloc_block2(fs, 7000, NULL, &b2), 0);
	ck_assert_uint_eq(b2, 7001);
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), before - 2);
	/*
	 * Ranges changed by libext2fs itself (ext2fs_alloc_range, punch): 1.47.0
	 * tells the callback only where they end; the buddy follows anyway
	 * (teardown verifies), also across a group boundary and in a group not
	 * loaded yet.
	 */
	ext2fs_block_alloc_stats_range(fs, 9000, 300, +1);
	ck_assert_int_eq(rr_alloc_verify(a), 0);
	ext2fs_block_alloc_stats_range(fs, 9100, 100, -1);
	ext2fs_block_alloc_stats_range(fs, 9000, 100, -1);
	ext2fs_block_alloc_stats_range(fs, 9200, 100, -1);
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), before - 2);
}
END_TEST


/* A file's first writes: the window is preallocated, later writes take it in order. */
START_TEST(inode_prealloc_used_and_discarded)
{
	uint64_t before = ext2fs_free_blocks_count(fs->super), lblk;
	struct rr_alloc_req req = { .ino = 12, .len = 32, .flags = RR_ALLOC_DATA };
	struct rr_extent ex, prev = { 0, 0 };

	/* 2 MiB..: lblk 600 of a file whose size says 2.4 MiB gets a 2 MiB window [512, 1024). */
	for (lblk = 600; lblk < 1024; lblk += 32) {
		req.lblk = lblk;
		req.isize = lblk * 4096;
		if (prev.len) {
			req.nbr.lleft = lblk - 1;
			req.nbr.pleft = prev.pblk + prev.len - 1;
		}
		ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), 0);
		if (prev.len)
			ck_assert_uint_eq(ex.pblk, prev.pblk + prev.len);	/* from the PA, contiguous */
		prev = ex;
		req.len = lblk + 32 + 32 > 1024 ? (uint32_t)(1024 - lblk - 32) : 32;
		if (!req.len)
			break;
	}
	/* On disk: only what was handed out; the rest of the window is held in memory. */
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), before - (1024 - 600));
	ck_assert_uint_eq(rr_alloc_prealloc_blocks(a), 600 - 512);
	ck_assert_uint_eq(atomic_load(&a->stats.preallocated), 512 - 32);
	ck_assert_int_eq(rr_alloc_verify(a), 0);
	rr_alloc_discard_inode(a, 12);
	ck_assert_uint_eq(rr_alloc_prealloc_blocks(a), 0);
	ck_assert_uint_eq(atomic_load(&a->stats.discarded), 600 - 512);
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), before - (1024 - 600));
}
END_TEST

/* Frees of blocks inside a live PA, by us or behind our back by libext2fs, keep everything exact. */
START_TEST(free_inside_prealloc)
{
	struct rr_alloc_req req = { .ino = 13, .lblk = 100, .len = 8, .flags = RR_ALLOC_DATA };
	uint64_t before = ext2fs_free_blocks_count(fs->super);
	struct rr_extent ex, ex2;

	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), 0);
	ck_assert_uint_gt(rr_alloc_prealloc_blocks(a), 0);
	/* libext2fs frees one of them itself (e.g. ext2fs_punch): the PA goes, the buddy follows. */
	ext2fs_block_alloc_stats2(fs, ex.pblk + 1, -1);
	ck_assert_uint_eq(rr_alloc_prealloc_blocks(a), 0);
	rr_free_blocks(a, ex.pblk, 1);
	rr_free_blocks(a, ex.pblk + 2, ex.len - 2);
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), before);
	/* A new PA, and libext2fs takes a block out of it (its own search, no callback). */
	req.ino = 14;
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), 0);
	ck_assert_uint_gt(rr_alloc_prealloc_blocks(a), 0);
	ext2fs_block_alloc_stats2(fs, ex.pblk + ex.len, +1);
	ck_assert_uint_eq(rr_alloc_prealloc_blocks(a), 0);
	ext2fs_block_alloc_stats2(fs, ex.pblk + ex.len, -1);
	/* The next write of that file searches again and is still exact. */
	req.lblk += ex.len;
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex2), 0);
	rr_alloc_discard_all(a);
	rr_free_blocks(a, ex.pblk, ex.len);
	rr_free_blocks(a, ex2.pblk, ex2.len);
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), before);
}
END_TEST

/* Space held in PAs is given back when an allocation would otherwise fail. */
START_TEST(enospc_discards_and_retries)
{
	struct rr_alloc_req req = { .len = 4096, .flags = RR_ALLOC_METADATA };
	struct rr_alloc_req f = { .ino = 15, .lblk = 0, .len = 1, .flags = RR_ALLOC_DATA };
	struct rr_extent ex;
	uint64_t held;

	ck_assert_int_eq(rr_alloc_blocks(a, &f, &ex), 0);	/* a small file: the group PA keeps 511 */
	held = rr_alloc_prealloc_blocks(a);
	ck_assert_uint_eq(held, 511);
	while (rr_alloc_blocks(a, &req, &ex) == 0)
		;
	/* The last allocations took the PA's blocks back rather than failing early. */
	ck_assert_uint_eq(rr_alloc_prealloc_blocks(a), 0);
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), 0);
}
END_TEST

/* Small files share their CPU's locality-group PA, one after the other. */
START_TEST(locality_group)
{
	struct rr_alloc_req req = { .ino = 40, .lblk = 0, .len = 2, .isize = 0, .flags = RR_ALLOC_DATA };
	uint64_t before = ext2fs_free_blocks_count(fs->super);
	struct rr_extent ex1, ex2, ex3;

	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex1), 0);
	ck_assert_uint_eq(rr_alloc_prealloc_blocks(a), 510);
	req.ino = 41;
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex2), 0);
	ck_assert_uint_eq(ex2.pblk, ex1.pblk + 2);		/* unless the thread moved CPU */
	ck_assert_uint_eq(rr_alloc_prealloc_blocks(a), 508);
	/* Freeing a small file's blocks leaves the group PA (they are behind its front). */
	rr_free_blocks(a, ex1.pblk, ex1.len);
	ck_assert_uint_eq(rr_alloc_prealloc_blocks(a), 508);
	/* A big file is not a small one: its own window. */
	req.ino = 42;
	req.lblk = 100;
	req.len = 32;
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex3), 0);
	ck_assert_uint_eq(rr_alloc_prealloc_blocks(a), 508 + 256 - 32);	/* a 1 MiB window */
	ck_assert_int_eq(rr_alloc_verify(a), 0);
	rr_alloc_discard_all(a);
	rr_free_blocks(a, ex2.pblk, ex2.len);
	rr_free_blocks(a, ex3.pblk, ex3.len);
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), before);
}
END_TEST

/* Use [first, first+len) on disk, before the engine is attached. */
static void occupy(uint64_t first, uint64_t len)
{
	ext2fs_block_alloc_stats_range(fs, first, (blk_t)len, +1);
}

/* Leave only runs of 512 free, every other 512 from block 8192 on. */
static void fragment(void)
{
	uint64_t b, end = ext2fs_blocks_count(fs->super);

	rr_alloc_detach(a);
	for (b = 0; b < end; b += 512)
		if (b < 8192 || (b / 512) % 2)
			for (uint64_t i = b; i < b + 512 && i < end; i++)
				if (!ext2fs_test_block_bitmap2(fs->block_map, i))
					occupy(i, 1);
	/* One group only: the lists are used when asked for (the default needs 16 groups). */
	attach_checked_opt(1);
}

START_TEST(criteria)
{
	struct rr_alloc_req req = { .len = 256, .flags = RR_ALLOC_METADATA };
	struct rr_extent ex;

	/* A power of two: an aligned buddy chunk (data would skip the flex group's first group). */
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), 0);
	ck_assert_uint_eq(ex.len, 256);
	ck_assert_uint_eq(ex.pblk % 256, 0);
	ck_assert_uint_eq(atomic_load(&a->stats.cr_hits[CR_POWER2_ALIGNED]), 1);
	/* Not a power of two: the fast goal-length pass. */
	req.len = 300;
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), 0);
	ck_assert_uint_eq(ex.len, 300);
	ck_assert_uint_eq(atomic_load(&a->stats.cr_hits[CR_GOAL_LEN_FAST]), 1);

	fragment();
	req.flags = RR_ALLOC_DATA;
	/* A file's 8 MiB window (2048) in 512-block holes: trimmed to 512 by CR_BEST_AVAIL_LEN. */
	req.ino = 20;
	req.lblk = 2100;
	req.len = 32;
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), 0);
	ck_assert_uint_eq(ex.len, 32);
	ck_assert_uint_eq(atomic_load(&a->stats.cr_hits[CR_BEST_AVAIL_LEN]), 1);
	ck_assert_uint_eq(rr_alloc_prealloc_blocks(a), 512 - 32);
	/* Metadata (no best-avail pass) longer than any hole: the slow passes give the longest. */
	req.ino = 0;
	req.len = 600;
	req.flags = RR_ALLOC_METADATA;
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), 0);
	ck_assert_uint_eq(ex.len, 512);
	ck_assert_uint_eq(atomic_load(&a->stats.cr_hits[CR_BEST_AVAIL_LEN]), 1);
	ck_assert_uint_ge(atomic_load(&a->stats.cr_hits[CR_GOAL_LEN_SLOW]) +
			  atomic_load(&a->stats.cr_hits[CR_ANY_FREE]), 1);
}
END_TEST

/*
 * A closed file's exact request goes to the snuggest of the runs the
 * goal-length criterion measures, each counted in whole buddy chunks as
 * the kernel's mb_find_extent counts it (ext4_mb_measure_extent), not to
 * the first run that holds it: 18 blocks pass a 40-block run (measured
 * 32) for a 20-block one (16 + 4) further on.  First fit there left the
 * small holes the kernel fills (FIDELITY.md, tree and aging).  That is
 * rr_best_fit (on by default); off, the first run.
 */
START_TEST(snuggest_run)
{
	struct rr_alloc_req req = { .ino = 50, .len = 18, .isize = 18 * 4096,
				    .flags = RR_ALLOC_DATA | RR_ALLOC_CLOSED };
	struct rr_extent ex;
	struct rr_alloc_tunables t;
	uint64_t b;

	rr_alloc_detach(a);
	/* Of blocks 0-12287 (64 MiB: one group) only the two runs stay free; 12288 on, 4096 free. */
	for (b = 0; b < 12288; b++)
		if (!(b >= 8192 && b < 8192 + 40) && !(b >= 9216 && b < 9216 + 20) &&
		    !ext2fs_test_block_bitmap2(fs->block_map, b))
			occupy(b, 1);
	/* Off: the first run that holds 18. */
	rr_alloc_tunables_default(&t);
	t.check = 1;
	t.rr_best_fit = 0;
	ck_assert_int_eq(rr_alloc_attach(fs, &t, &a), 0);
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), 0);
	ck_assert_uint_eq(ex.pblk, 8192);
	rr_free_blocks(a, ex.pblk, ex.len);
	rr_alloc_detach(a);
	/* On (the default, the kernel's). */
	attach_checked();
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), 0);
	ck_assert_uint_eq(ex.len, 18);
	ck_assert_uint_eq(ex.pblk, 9216);
	ck_assert_uint_eq(rr_alloc_prealloc_blocks(a), 0);
	/* The next (nothing as snug left) takes the 40-block run, measured 32 from its start. */
	req.ino = 51;
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), 0);
	ck_assert_uint_eq(ex.pblk, 8192);
}
END_TEST

/* Reopen with 8 groups of 2048 blocks and the named policy; stay on one CPU (one cursor). */
static void reattach_policy(const char *policy)
{
	struct rr_alloc_tunables t;
	char err[128];
	cpu_set_t cpus;

	CPU_ZERO(&cpus);
	CPU_SET(sched_getcpu() > 0 ? sched_getcpu() : 0, &cpus);
	ck_assert_int_eq(sched_setaffinity(0, sizeof(cpus), &cpus), 0);

	rr_alloc_detach(a);
	ext2fs_close_free(&fs);
	unlink(img);
	fs = unit_image(img, "64M", "-b 4096 -g 2048");
	rr_alloc_tunables_default(&t);
	t.check = 1;
	ck_assert_int_eq(rr_alloc_tunable_set(&t, "allocator", policy, err, sizeof(err)), 0);
	ck_assert_int_eq(rr_alloc_attach(fs, &t, &a), 0);
}

/*
 * Write-and-delete cycles of new 1 MiB files through 1.25x the device:
 * returns the groups allocated from (a bit mask) and, in *first, the
 * lowest block any file got.
 */
static uint32_t cycles(uint64_t *first, uint64_t *last_start)
{
	uint64_t total = ext2fs_blocks_count(fs->super), done = 0;
	uint32_t groups = 0;
	ext2_ino_t ino = 100;

	*first = UINT64_MAX;
	while (done < total * 5 / 4) {
		struct rr_alloc_req req = { .ino = ++ino, .len = 256, .flags = RR_ALLOC_DATA,
					    .goal = ext2fs_group_first_block2(fs, 0) };
		struct rr_extent ex;

		req.isize = 1 << 20;
		ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), 0);
		ck_assert_uint_eq(ex.len, 256);
		groups |= 1u << ext2fs_group_of_blk2(fs, ex.pblk);
		groups |= 1u << ext2fs_group_of_blk2(fs, ex.pblk + ex.len - 1);
		if (ex.pblk < *first)
			*first = ex.pblk;
		*last_start = ex.pblk;
		/* Delete: preallocations first, then the blocks. */
		rr_alloc_discard_inode(a, ino);
		rr_free_blocks(a, ex.pblk, ex.len);
		done += ex.len;
	}
	return groups;
}

START_TEST(policies_spread_or_not)
{
	uint64_t first_rr, first_ff, last_ff, last;
	uint32_t rr, ff, reg;

	reattach_policy("rralloc");
	ck_assert_uint_eq(fs->group_desc_count, 8);
	rr = cycles(&first_rr, &last);
	reattach_policy("firstfit");
	ff = cycles(&first_ff, &last_ff);
	reattach_policy("regular");
	reg = cycles(&first_rr, &last);
	/* rralloc: every group; firstfit: the same lowest place every time; regular: few. */
	ck_assert_uint_eq(rr, 0xff);
	ck_assert_uint_eq(first_ff, last_ff);
	ck_assert_uint_eq(__builtin_popcount(ff), 1);
	ck_assert_uint_le(__builtin_popcount(reg), 2);
}
END_TEST

START_TEST(rralloc_stream_follows_file)
{
	struct rr_alloc_req ra = { .ino = 30, .len = 64, .flags = RR_ALLOC_DATA, .isize = 64 << 12 };
	struct rr_alloc_req rb = ra;
	struct rr_extent exa, exb, ex2;

	reattach_policy("rralloc");
	rb.ino = 31;
	ck_assert_int_eq(rr_alloc_blocks(a, &ra, &exa), 0);
	ck_assert_int_eq(rr_alloc_blocks(a, &rb, &exb), 0);
	/* New files follow each other at the cursor, which is now past b. */
	ck_assert_uint_eq(exb.pblk, exa.pblk + 64);
	rr_alloc_discard_inode(a, 31);
	rr_free_blocks(a, exb.pblk, exb.len);
	/* a's next blocks go where its stream continues (b's old place), not to the cursor. */
	ra.lblk = 64;
	ra.isize = 128 << 12;
	ra.nbr.lleft = 63;
	ra.nbr.pleft = exa.pblk + 63;
	ra.goal = exa.pblk + 64;
	ck_assert_int_eq(rr_alloc_blocks(a, &ra, &ex2), 0);
	ck_assert_uint_eq(ex2.pblk, exa.pblk + 64);
	/* While a new file still goes to the cursor, past where b was. */
	rb.ino = 32;
	ck_assert_int_eq(rr_alloc_blocks(a, &rb, &exb), 0);
	ck_assert_uint_ge(exb.pblk, exa.pblk + 128);
}
END_TEST

/*
 * A file's first window (no block of it on either side) goes to the
 * aligned criterion as any window does, as the kernel's: until 2026-12-07
 * regular tried its goal group at the goal-length criterion first, for
 * files allocated while written (delalloc=close), which made aged images
 * less fragmented than the kernel's (test_aging's fsync mode: 193-238 free
 * extents against 247-272; without it 246-274).
 */
START_TEST(first_window_aligned_as_any)
{
	struct rr_alloc_req req = { .ino = 31, .len = 32, .lblk = 32, .isize = 64 * 4096,
				    .flags = RR_ALLOC_DATA };
	struct rr_extent ex;
	uint32_t g;

	/* Several groups: data never takes the aligned path in a flex group's first group. */
	rr_alloc_detach(a);
	ext2fs_close_free(&fs);
	unlink(img);
	fs = unit_image(img, "512M", "-b 4096");
	attach_checked();
	/* Continuing a file whose goal is taken (metadata): an aligned chunk, outside group 0. */
	req.nbr.lleft = 31;
	req.nbr.pleft = 1;
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), 0);
	ck_assert_uint_eq(ex.len, 32);
	ck_assert_uint_eq(ex.pblk % 32, 0);
	ck_assert_uint_eq(atomic_load(&a->stats.cr_hits[CR_POWER2_ALIGNED]), 1);
	g = (uint32_t)ext2fs_group_of_blk2(fs, ex.pblk);
	ck_assert_uint_ne(g, 0);
	/* A new file's first window: an aligned chunk too. */
	memset(&req, 0, sizeof(req));
	req.ino = 31 + a->nr_last_groups;	/* the same stream slot as 31 */
	req.len = 32;
	req.isize = 32 * 4096;
	req.flags = RR_ALLOC_DATA;
	ck_assert_int_eq(rr_alloc_blocks(a, &req, &ex), 0);
	ck_assert_uint_eq(ex.len, 32);
	ck_assert_uint_eq(ex.pblk % 32, 0);
	ck_assert_uint_eq(atomic_load(&a->stats.cr_hits[CR_GOAL_LEN_FAST]), 0);
	ck_assert_uint_eq(atomic_load(&a->stats.cr_hits[CR_POWER2_ALIGNED]), 2);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("alloc");
	TCase *tc = tcase_create("mballoc");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, goal_first_and_contiguous);
	tcase_add_test(tc, reserves_and_enospc);
	tcase_add_test(tc, libext2fs_alloc_goes_through_callback);
	tcase_add_test(tc, inode_prealloc_used_and_discarded);
	tcase_add_test(tc, free_inside_prealloc);
	tcase_add_test(tc, enospc_discards_and_retries);
	tcase_add_test(tc, criteria);
	tcase_add_test(tc, first_window_aligned_as_any);
	tcase_add_test(tc, snuggest_run);
	tcase_add_test(tc, locality_group);
	tcase_add_test(tc, policies_spread_or_not);
	tcase_add_test(tc, rralloc_stream_follows_file);
	suite_add_tcase(s, tc);
	return unit_run(s);
}

// SPDX-License-Identifier: GPL-2.0
/*
 * mballoc: the multiblock allocation engine, after the kernel's
 * fs/ext4/mballoc.c (our own code; the kernel is the reference for
 * behaviour).
 *
 * Design
 *  - Every group has a buddy (mb_buddy.c) built lazily, on the group's first
 *    use, from libext2fs's in-memory block bitmap.  Until then only the
 *    descriptor's free count is known, so attaching to a 16 TiB image costs
 *    one pass over the descriptors and no bitmap work; BLOCK_UNINIT groups
 *    are synthesised by libext2fs in memory and never read.
 *  - A data request of a file is normalised (mb_normalize.c) into the
 *    window one preallocation should cover; a policy (policy.h; regular.c
 *    is the kernel's criteria cascade) finds free space for it; the part
 *    the request needs goes to disk (bitmap, descriptor, checksums, free
 *    counts: ext2fs_block_alloc_stats_range does that work), the rest
 *    becomes an inode preallocation (PA) that later writes of the file at
 *    those logical blocks take without a search.
 *  - PAs never reach the disk: e2fsck sees their blocks as free and a crash
 *    loses nothing.  They are given back on truncate/punch/delete (before
 *    the file's blocks are freed), at the last close of a writer, when an
 *    allocation fails (then it is retried once) and at detach.
 *  - libext2fs's own allocations and frees come through its callbacks:
 *    get_alloc_block and new_range choose from the buddy (libext2fs then
 *    accounts the block itself), and the block_alloc_stats callbacks apply
 *    every bitmap change libext2fs makes (ext2fs_punch, our emap/xattr code)
 *    to the buddy.  So the buddy can never disagree with the bitmap.
 *
 * Invariants (checked after every operation with -o check, rr_alloc_verify)
 *  - For a loaded group: buddy order 0 == on-disk bitmap | PA ranges, and
 *    the higher orders, counters, free and fragment counts are what
 *    generating the buddy from that bitmap gives.
 *  - A PA's free count == blocks of its range that are clear in the bitmap.
 *    A PA block is handed out only for its own logical block, and only
 *    while that logical block is a hole, so "clear in the bitmap" and "not
 *    handed out" are the same thing.
 *  - Any free of a block inside a live PA first discards that PA (minus the
 *    freed range), so a free can never return a block twice.
 *
 * Locking
 *  - Every entry point is called with the daemon's fs lock held (libext2fs
 *    is not thread-safe and its bitmaps are part of our state).  Under it:
 *  - pa_lock: the inode PA hash.  group->lock: that group's buddy, summary
 *    and PA list.  list_lock: the optimised-scan lists.
 *  - Order: fs lock -> pa_lock -> group lock -> list_lock; never two group
 *    locks at once.  The group locks make the buddies readable without the
 *    fs lock (statistics, issue 7's rrctl -g) and are where allocation
 *    moves once it leaves the fs lock; today they are never contended.
 *  - stats are atomics; in_engine is read and written under the fs lock.
 */
#include "mballoc.h"
#include "mb_format.h"
#include "policy.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#define STAT_INC(a, f) do { if ((a)->t.mb_stats) atomic_fetch_add(&(a)->stats.f, 1); } while (0)
#define STAT_ADD(a, f, n) do { if ((a)->t.mb_stats) atomic_fetch_add(&(a)->stats.f, (n)); } while (0)

static void mb_fail(const char *what, uint32_t g)
{
	fprintf(stderr, "rrfuse: mballoc: %s (group %u)\n", what, g);
	abort();
}

/* ---- geometry ---- */

static uint64_t group_first(const struct rr_alloc *a, uint32_t g)
{
	return a->first_data_block + (uint64_t)g * a->bpg;
}

static uint32_t group_nblocks(const struct rr_alloc *a, uint32_t g)
{
	uint64_t left = ext2fs_blocks_count(a->fs->super) - group_first(a, g);

	return left < a->bpg ? (uint32_t)left : a->bpg;
}

static uint32_t group_of(const struct rr_alloc *a, uint64_t blk)
{
	return (uint32_t)((blk - a->first_data_block) / a->bpg);
}

static int valid_block(const struct rr_alloc *a, uint64_t blk)
{
	return blk >= a->first_data_block && blk < ext2fs_blocks_count(a->fs->super);
}

/* ---- optimised-scan lists (kernel: s_mb_largest_free_orders, s_mb_avg_fragment_size) ---- */

static void list_del_locked(struct rr_alloc *a, int l, uint32_t g)
{
	struct mb_group *grp = &a->groups[g];
	int o = grp->list_order[l];

	if (o < 0)
		return;
	if (grp->list_prev[l] >= 0)
		a->groups[grp->list_prev[l]].list_next[l] = grp->list_next[l];
	else
		a->list_head[l][o] = grp->list_next[l];
	if (grp->list_next[l] >= 0)
		a->groups[grp->list_next[l]].list_prev[l] = grp->list_prev[l];
	else
		a->list_tail[l][o] = grp->list_prev[l];
	grp->list_order[l] = -1;
}

/* At the tail, as the kernel's lists: groups come out of a list in the order they went in. */
static void list_add_locked(struct rr_alloc *a, int l, uint32_t g, int o)
{
	struct mb_group *grp = &a->groups[g];
	int32_t t = a->list_tail[l][o];

	grp->list_order[l] = (int8_t)o;
	grp->list_next[l] = -1;
	grp->list_prev[l] = t;
	if (t >= 0)
		a->groups[t].list_next[l] = (int32_t)g;
	else
		a->list_head[l][o] = (int32_t)g;
	a->list_tail[l][o] = (int32_t)g;
}

/* Copy the buddy's summary into the group and move it to the right lists.  Group lock held. */
static void group_update(struct rr_alloc *a, uint32_t g)
{
	struct mb_group *grp = &a->groups[g];
	struct mb_buddy *b = grp->buddy;
	int lo = mb_buddy_largest_order(b), ao = mb_avg_order(b->free, b->fragments, b->max_order);

	grp->free = b->free;
	grp->fragments = b->fragments;
	if (lo == grp->largest_order && ao == grp->avg_order && grp->list_order[0] == lo)
		return;
	grp->largest_order = (int8_t)lo;
	grp->avg_order = (int8_t)ao;
	pthread_mutex_lock(&a->list_lock);
	list_del_locked(a, MB_LIST_LARGEST, g);
	list_del_locked(a, MB_LIST_AVG, g);
	if (lo >= 0)
		list_add_locked(a, MB_LIST_LARGEST, g, lo);
	if (ao >= 0)
		list_add_locked(a, MB_LIST_AVG, g, ao);
	pthread_mutex_unlock(&a->list_lock);
}

int mb_list_first(struct rr_alloc *a, int list, int order)
{
	int g;

	pthread_mutex_lock(&a->list_lock);
	g = a->list_head[list][order];
	pthread_mutex_unlock(&a->list_lock);
	return g;
}

int mb_list_next(struct rr_alloc *a, int list, uint32_t g)
{
	int n;

	pthread_mutex_lock(&a->list_lock);
	n = a->groups[g].list_order[list] >= 0 ? a->groups[g].list_next[list] : -1;
	pthread_mutex_unlock(&a->list_lock);
	return n;
}

/* ---- groups ---- */

/* The group's bitmap from libext2fs (1 = used), with the PA ranges or'ed in if with_pa. */
static uint8_t *group_bitmap(struct rr_alloc *a, uint32_t g, int with_pa)
{
	uint32_t n = group_nblocks(a, g);
	uint8_t *map = calloc(1, (a->bpg + 7) / 8 + 8);
	struct mb_pa *pa;
	uint32_t i;

	if (!map)
		return NULL;
	if (ext2fs_get_block_bitmap_range2(a->fs->block_map, group_first(a, g), n, map)) {
		free(map);
		return NULL;
	}
	if (with_pa)
		for (pa = a->groups[g].pas; pa; pa = pa->gnext)
			for (i = 0; i < pa->len; i++) {
				uint32_t o = (uint32_t)(pa->pstart - group_first(a, g)) + i;

				map[o >> 3] |= (uint8_t)(1u << (o & 7));
			}
	return map;
}

/* Build the group's buddy on first use.  Group lock held. */
static int group_load_locked(struct rr_alloc *a, uint32_t g)
{
	struct mb_group *grp = &a->groups[g];
	struct timespec t0 = { 0 }, t1;
	struct mb_buddy *b;
	uint8_t *map;

	if (grp->buddy)
		return 0;
	b = malloc(sizeof(*b));
	if (!b || mb_buddy_init(b, group_nblocks(a, g), a->max_order)) {
		free(b);
		return -ENOMEM;
	}
	if (a->t.mb_stats)
		clock_gettime(CLOCK_MONOTONIC, &t0);
	map = group_bitmap(a, g, 1);
	if (!map) {
		mb_buddy_destroy(b);
		free(b);
		return -EIO;
	}
	mb_buddy_generate(b, map);
	free(map);
	if (a->t.mb_stats) {
		clock_gettime(CLOCK_MONOTONIC, &t1);
		/* Kernel: s_mb_generation_time, nanoseconds spent building buddies. */
		STAT_ADD(a, buddies_time_ns, (unsigned long)((t1.tv_sec - t0.tv_sec) * 1000000000L +
							      (t1.tv_nsec - t0.tv_nsec)));
	}
	if (!grp->pas && b->free != ext2fs_bg_free_blocks_count(a->fs, g))
		fprintf(stderr, "rrfuse: mballoc: group %u: block bitmap (%u free) and descriptor (%u) disagree\n",
			g, b->free, ext2fs_bg_free_blocks_count(a->fs, g));
	grp->buddy = b;
	group_update(a, g);
	STAT_INC(a, buddies_generated);
	return 0;
}

int mb_load_group(struct rr_alloc *a, uint32_t g)
{
	struct mb_group *grp = &a->groups[g];
	int ret;

	pthread_mutex_lock(&grp->lock);
	ret = group_load_locked(a, g);
	pthread_mutex_unlock(&grp->lock);
	return ret;
}

/*
 * Load the buddies of up to n groups from g on (kernel: ext4_mb_prefetch
 * and its _fini, which read block bitmaps ahead and build their buddies).
 * The bitmaps are in memory already, so this costs CPU only; it puts the
 * groups a search is heading for on the optimised-scan lists.
 */
void mb_prefetch(struct rr_alloc *a, uint32_t g, uint32_t n)
{
	uint32_t i;

	if (n > a->ngroups)
		n = a->ngroups;
	for (i = 0; i < n; i++, g = (g + 1) % a->ngroups)
		if (!a->groups[g].buddy && a->groups[g].free)
			mb_load_group(a, g);
}

/* -o check: the group's buddy must be what its bitmap and PAs give. */
static void group_verify(struct rr_alloc *a, uint32_t g)
{
	struct mb_group *grp = &a->groups[g];
	struct mb_buddy fresh;
	struct mb_pa *pa;
	uint8_t *map;

	pthread_mutex_lock(&grp->lock);
	if (!grp->buddy) {
		pthread_mutex_unlock(&grp->lock);
		return;
	}
	map = group_bitmap(a, g, 1);
	if (!map || mb_buddy_init(&fresh, grp->buddy->nblocks, a->max_order))
		mb_fail("out of memory in check", g);
	mb_buddy_generate(&fresh, map);
	if (mb_buddy_compare(&fresh, grp->buddy)) {
		uint32_t i;

		for (i = 0; i < fresh.nblocks; i++)
			if (mb_buddy_test(&fresh, i) != mb_buddy_test(grp->buddy, i)) {
				fprintf(stderr, "rrfuse: mballoc: block %llu: %s on disk, %s in the buddy\n",
					(unsigned long long)(group_first(a, g) + i),
					mb_buddy_test(&fresh, i) ? "used" : "free",
					mb_buddy_test(grp->buddy, i) ? "used" : "free");
				break;
			}
		for (pa = grp->pas; pa; pa = pa->gnext)
			fprintf(stderr, "rrfuse: mballoc: PA ino %u l %llu p %llu len %u free %u\n", pa->ino,
				(unsigned long long)pa->lstart, (unsigned long long)pa->pstart, pa->len, pa->free);
		mb_fail("buddy differs from bitmap + preallocations", g);
	}
	if (grp->free != fresh.free || grp->fragments != fresh.fragments)
		mb_fail("group summary differs from its buddy", g);
	for (pa = grp->pas; pa; pa = pa->gnext) {
		uint32_t i, clear = 0;

		for (i = 0; i < pa->len; i++)
			clear += !ext2fs_test_block_bitmap2(a->fs->block_map, pa->pstart + i);
		if (clear != pa->free)
			mb_fail("preallocation's free count differs from the bitmap", g);
	}
	mb_buddy_destroy(&fresh);
	free(map);
	pthread_mutex_unlock(&grp->lock);
}

static void verify_range(struct rr_alloc *a, uint64_t blk, uint64_t len)
{
	uint32_t g, last;

	if (!a->t.check || !len)
		return;
	last = group_of(a, blk + len - 1);
	for (g = group_of(a, blk); g <= last; g++)
		group_verify(a, g);
}

int rr_alloc_verify(struct rr_alloc *a)
{
	uint32_t g;

	for (g = 0; g < a->ngroups; g++)
		group_verify(a, g);
	return 0;
}

/* ---- the on-disk side ---- */

/* Mark [blk, blk+len) in (+1) or out of (-1) the bitmap, descriptors and counts. */
static void disk_mark(struct rr_alloc *a, uint64_t blk, uint32_t len, int inuse)
{
	a->in_engine++;
	ext2fs_block_alloc_stats_range(a->fs, blk, len, inuse);
	a->in_engine--;
}

/* Apply a change to the buddy of the group holding [blk, blk+len) (one group). */
static void buddy_apply(struct rr_alloc *a, uint64_t blk, uint32_t len, int inuse)
{
	uint32_t g = group_of(a, blk), off = (uint32_t)(blk - group_first(a, g));
	struct mb_group *grp = &a->groups[g];
	int r;

	pthread_mutex_lock(&grp->lock);
	if (!grp->buddy) {
		/* Not loaded (callbacks only): the descriptor already has the change. */
		grp->free = ext2fs_bg_free_blocks_count(a->fs, g);
		pthread_mutex_unlock(&grp->lock);
		return;
	}
	r = inuse > 0 ? mb_buddy_mark_used(grp->buddy, off, len) : mb_buddy_free(grp->buddy, off, len);
	if (r)
		mb_fail(inuse > 0 ? "marking used blocks that are not free" : "freeing blocks that are free", g);
	group_update(a, g);
	pthread_mutex_unlock(&grp->lock);
}

/* ---- preallocations ---- */

static uint32_t pa_bucket(const struct rr_alloc *a, ext2_ino_t ino)
{
	return (ino * 2654435761u) % a->pa_nbuckets;
}

/* Give a PA's unused blocks back to the buddy; blocks in [xs, xs+xn) are left alone. */
static void pa_release(struct rr_alloc *a, struct mb_pa *pa, uint64_t xs, uint64_t xn)
{
	struct mb_group *grp = &a->groups[pa->group];
	uint64_t gfirst = group_first(a, pa->group), b, run = 0, freed = 0;

	pthread_mutex_lock(&grp->lock);
	for (b = pa->pstart; b <= pa->pstart + pa->len; b++) {
		int give = b < pa->pstart + pa->len && !(b >= xs && b < xs + xn) &&
			   !ext2fs_test_block_bitmap2(a->fs->block_map, b);

		if (give) {
			run++;
			continue;
		}
		if (run && mb_buddy_free(grp->buddy, (uint32_t)(b - run - gfirst), (uint32_t)run))
			mb_fail("preallocation held free blocks", pa->group);
		freed += run;
		run = 0;
	}
	group_update(a, pa->group);
	pthread_mutex_unlock(&grp->lock);
	STAT_ADD(a, discarded, freed);
	atomic_fetch_sub(&a->pa_count, 1);
	free(pa);
}

/* Put a new pa on its group's list, then drop pa_lock (held by the caller). */
static void pa_link_group_unlock(struct rr_alloc *a, struct mb_pa *pa)
{
	pthread_mutex_lock(&a->groups[pa->group].lock);
	pa->gnext = a->groups[pa->group].pas;
	a->groups[pa->group].pas = pa;
	pthread_mutex_unlock(&a->groups[pa->group].lock);
	pthread_mutex_unlock(&a->pa_lock);
	atomic_fetch_add(&a->pa_count, 1);
}

/* Take pa out of the inode hash (pa_lock held) and its group's list. */
static void pa_unlink_locked(struct rr_alloc *a, struct mb_pa *pa)
{
	struct mb_pa **pp;
	struct mb_group *grp = &a->groups[pa->group];

	if (pa->lg >= 0) {
		if (a->lg[pa->lg] == pa)
			a->lg[pa->lg] = NULL;
	} else {
		for (pp = &a->pa_hash[pa_bucket(a, pa->ino)]; *pp; pp = &(*pp)->inext)
			if (*pp == pa) {
				*pp = pa->inext;
				break;
			}
	}
	pthread_mutex_lock(&grp->lock);
	for (pp = &grp->pas; *pp; pp = &(*pp)->gnext)
		if (*pp == pa) {
			*pp = pa->gnext;
			break;
		}
	pthread_mutex_unlock(&grp->lock);
}

/*
 * Release PAs already unlinked (chained by inext), then check their
 * groups: only once all are back, as the check counts linked PAs only.
 */
static void pa_release_list(struct rr_alloc *a, struct mb_pa *gone)
{
	uint64_t starts[16], lens[16];
	unsigned int n = 0, i;
	struct mb_pa *pa;

	while ((pa = gone)) {
		gone = pa->inext;
		if (n < 16) {
			starts[n] = pa->pstart;
			lens[n++] = pa->len;
		}
		pa_release(a, pa, 0, 0);
	}
	for (i = 0; i < n; i++)
		verify_range(a, starts[i], lens[i]);
}

void rr_alloc_discard_inode(struct rr_alloc *a, ext2_ino_t ino)
{
	struct mb_pa *pa, **pp, *gone = NULL;

	if (!a || !atomic_load(&a->pa_count))
		return;
	pthread_mutex_lock(&a->pa_lock);
	for (pp = &a->pa_hash[pa_bucket(a, ino)]; (pa = *pp);) {
		if (pa->ino != ino) {
			pp = &pa->inext;
			continue;
		}
		pa_unlink_locked(a, pa);
		pa->inext = gone;
		gone = pa;
	}
	pthread_mutex_unlock(&a->pa_lock);
	pa_release_list(a, gone);
}

uint64_t rr_alloc_discard_all(struct rr_alloc *a)
{
	struct mb_pa *pa, *gone = NULL;
	uint64_t n = 0;
	uint32_t i;

	pthread_mutex_lock(&a->pa_lock);
	for (i = 0; i < a->pa_nbuckets; i++)
		while ((pa = a->pa_hash[i])) {
			pa_unlink_locked(a, pa);
			pa->inext = gone;
			gone = pa;
		}
	for (i = 0; i < a->nlg; i++)
		if ((pa = a->lg[i])) {
			pa_unlink_locked(a, pa);
			pa->inext = gone;
			gone = pa;
		}
	pthread_mutex_unlock(&a->pa_lock);
	for (pa = gone; pa; pa = pa->inext)
		n += pa->free;
	pa_release_list(a, gone);
	return n;
}

uint64_t rr_alloc_prealloc_blocks(struct rr_alloc *a)
{
	uint64_t n = 0;
	uint32_t i;
	struct mb_pa *pa;

	pthread_mutex_lock(&a->pa_lock);
	for (i = 0; i < a->pa_nbuckets; i++)
		for (pa = a->pa_hash[i]; pa; pa = pa->inext)
			n += pa->free;
	for (i = 0; i < a->nlg; i++)
		if (a->lg[i])
			n += a->lg[i]->free;
	pthread_mutex_unlock(&a->pa_lock);
	return n;
}

/*
 * Discard every PA overlapping [blk, blk+len) (one group) before that
 * range changes hands behind the PA's back; the range itself is left out
 * of what goes back to the buddy when exclude is set.
 */
static void pa_discard_overlap(struct rr_alloc *a, uint64_t blk, uint32_t len, int exclude)
{
	struct mb_group *grp = &a->groups[group_of(a, blk)];
	struct mb_pa *pa, *hit;

	if (!atomic_load(&a->pa_count))
		return;
	for (;;) {
		hit = NULL;
		pthread_mutex_lock(&a->pa_lock);
		pthread_mutex_lock(&grp->lock);
		for (pa = grp->pas; pa; pa = pa->gnext)
			if (pa->pstart < blk + len && blk < pa->pstart + pa->len) {
				hit = pa;
				break;
			}
		pthread_mutex_unlock(&grp->lock);
		if (hit)
			pa_unlink_locked(a, hit);
		pthread_mutex_unlock(&a->pa_lock);
		if (!hit)
			return;
		pa_release(a, hit, exclude ? blk : 0, exclude ? len : 0);
	}
}

/*
 * The inode's PA covering lblk, if any: hand out up to len of its blocks
 * from lblk on.  Returns 1 with out filled, 0 if there is none.
 */
static int pa_use(struct rr_alloc *a, ext2_ino_t ino, uint64_t lblk, uint32_t len, struct rr_extent *out)
{
	struct mb_pa *pa, *done = NULL;
	uint64_t p;
	uint32_t n = 0;

	pthread_mutex_lock(&a->pa_lock);
	for (pa = a->pa_hash[pa_bucket(a, ino)]; pa; pa = pa->inext)
		if (pa->ino == ino && lblk >= pa->lstart && lblk < pa->lstart + pa->len)
			break;
	if (!pa) {
		pthread_mutex_unlock(&a->pa_lock);
		return 0;
	}
	p = pa->pstart + (lblk - pa->lstart);
	while (n < len && p + n < pa->pstart + pa->len &&
	       !ext2fs_test_block_bitmap2(a->fs->block_map, p + n))
		n++;
	if (!n) {
		/* Its block for lblk is in use: the PA no longer matches the file. */
		pa_unlink_locked(a, pa);
		pthread_mutex_unlock(&a->pa_lock);
		pa_release(a, pa, 0, 0);
		return 0;
	}
	pa->free -= n;
	if (!pa->free) {
		pa_unlink_locked(a, pa);
		done = pa;
	}
	pthread_mutex_unlock(&a->pa_lock);
	/* The buddy has had these blocks since the PA was made: only the disk changes. */
	disk_mark(a, p, n, +1);
	if (done) {
		atomic_fetch_sub(&a->pa_count, 1);
		free(done);
	}
	out->pblk = p;
	out->len = n;
	return 1;
}

/*
 * Locality groups (kernel: ext4_locality_group), one per CPU as the
 * kernel's: small files written from the same CPU at about the same time
 * share one group PA and sit next to each other.  FUSE worker threads come
 * and go, CPUs do not, so the number of groups stays bounded.
 */
uint32_t mb_cpu_slot(const struct rr_alloc *a)
{
	int cpu = sched_getcpu();

	return cpu > 0 ? (uint32_t)cpu % a->nlg : 0;
}

/* Small files: the data request (end, or i_size if larger) is within mb_stream_req blocks. */
static int group_alloc(const struct rr_alloc *a, const struct rr_alloc_req *req, uint32_t len)
{
	uint64_t isize_blk = (req->isize + a->fs->blocksize - 1) / a->fs->blocksize;
	uint64_t end = req->lblk + len;

	return a->t.mb_group_prealloc && (end > isize_blk ? end : isize_blk) <= a->t.mb_stream_req;
}

/*
 * A closed file's data up to its end (kernel: EXT4_MB_HINT_NOPREALLOC from
 * ext4_mb_group_or_file): its size is final, so the request is the whole
 * need, searched for as it is, with nothing preallocated.
 */
static int closed_to_end(const struct rr_alloc *a, const struct rr_alloc_req *req)
{
	uint64_t isize_blk = (req->isize + a->fs->blocksize - 1) / a->fs->blocksize;

	return (req->flags & RR_ALLOC_CLOSED) && req->lblk + req->len >= isize_blk;
}

/* Take len blocks from the front of the locality group's PA, if it has them. */
static int lg_use(struct rr_alloc *a, uint32_t slot, uint32_t len, struct rr_extent *out)
{
	struct mb_pa *pa, *done = NULL;

	pthread_mutex_lock(&a->pa_lock);
	pa = a->lg[slot];
	if (!pa || pa->len < len) {
		pthread_mutex_unlock(&a->pa_lock);
		return 0;
	}
	/* The group's lock: its PA list is walked by checks and frees. */
	pthread_mutex_lock(&a->groups[pa->group].lock);
	out->pblk = pa->pstart;
	out->len = len;
	pa->pstart += len;
	pa->len -= len;
	pa->free -= len;
	pthread_mutex_unlock(&a->groups[pa->group].lock);
	if (!pa->len) {
		pa_unlink_locked(a, pa);
		done = pa;
	}
	pthread_mutex_unlock(&a->pa_lock);
	disk_mark(a, out->pblk, len, +1);
	if (done) {
		atomic_fetch_sub(&a->pa_count, 1);
		free(done);
	}
	return 1;
}

/* Cut the window [*start, *start + *size) so it overlaps none of the inode's PAs (none covers lblk). */
static void pa_adjust_overlap(struct rr_alloc *a, ext2_ino_t ino, uint64_t lblk, uint64_t *start,
			      uint64_t *size)
{
	uint64_t s = *start, e = *start + *size;
	struct mb_pa *pa;

	if (!atomic_load(&a->pa_count))
		return;
	pthread_mutex_lock(&a->pa_lock);
	for (pa = a->pa_hash[pa_bucket(a, ino)]; pa; pa = pa->inext) {
		uint64_t ps = pa->lstart, pe = pa->lstart + pa->len;

		if (pa->ino != ino || pe <= s || ps >= e)
			continue;
		if (pe <= lblk && pe > s)
			s = pe;
		else if (ps > lblk && ps < e)
			e = ps;
	}
	pthread_mutex_unlock(&a->pa_lock);
	*start = s;
	*size = e - s;
}

/* ---- search helpers for the policies ---- */

int mb_flex_meta_group(const struct rr_alloc *a, uint32_t g)
{
	unsigned int lf = a->fs->super->s_log_groups_per_flex;

	return ext2fs_has_feature_flex_bg(a->fs->super) && lf >= 2 && lf < 32 && !(g & ((1u << lf) - 1));
}

/*
 * Is group g worth a scan at cr (kernel: ext4_mb_good_group)?  Cheap
 * criteria load only groups that need no work to load in the kernel
 * (BLOCK_UNINIT, first of a flex group) and the goal group; the summary is
 * a hint until the group's lock is taken in mb_scan_group.
 */
int mb_good_group(struct rr_alloc *a, struct mb_ac *ac, uint32_t g, enum mb_cr cr)
{
	struct mb_group *grp = &a->groups[g];
	uint32_t glen = ac->g_ex.len, free = grp->free, frags;

	if (!free || (cr < CR_ANY_FREE && free < glen))
		return 0;
	if (!grp->buddy) {
		if (cr < CR_GOAL_LEN_SLOW && g != ac->g_ex.group &&
		    !ext2fs_bg_flags_test(a->fs, g, EXT2_BG_BLOCK_UNINIT) &&
		    !mb_flex_meta_group(a, g))
			return 0;
		if (mb_load_group(a, g))
			return 0;
	}
	free = grp->free;
	frags = grp->fragments;
	if (!free || !frags)
		return 0;
	switch (cr) {
	case CR_POWER2_ALIGNED:
		if (grp->largest_order < (int)ac->two_order)
			return 0;
		/* Leave the flex group's metadata group to metadata. */
		if ((ac->hints & MB_HINT_DATA) && mb_flex_meta_group(a, g))
			return 0;
		return free >= glen;
	case CR_GOAL_LEN_FAST:
	case CR_BEST_AVAIL_LEN:
		return free >= glen && free / frags >= glen;
	case CR_GOAL_LEN_SLOW:
		return free >= glen;
	default:
		return 1;
	}
}

static void use_best(struct mb_ac *ac)
{
	if (ac->b_ex.len > ac->g_ex.len)
		ac->b_ex.len = ac->g_ex.len;
	ac->status = AC_FOUND;
}

/* Kernel: ext4_mb_check_limits. */
static void check_limits(struct rr_alloc *a, struct mb_ac *ac, int finish_group)
{
	if (ac->status != AC_CONTINUE)
		return;
	if (ac->found > a->t.mb_max_to_scan && !(ac->hints & MB_HINT_FIRST)) {
		STAT_INC(a, breaks);
		ac->status = AC_BREAK;
		return;
	}
	if (ac->b_ex.len < ac->g_ex.len)
		return;
	if (finish_group || ac->found > a->t.mb_min_to_scan)
		use_best(ac);
}

/*
 * Kernel: ext4_mb_measure_extent.  The run is measured only up to the goal
 * length, so a run as long as the goal is taken at once (first fit); below
 * that the longest run seen is remembered.
 */
static void measure(struct rr_alloc *a, struct mb_ac *ac, uint32_t g, uint32_t s, uint32_t l)
{
	if (l > ac->g_ex.len)
		l = ac->g_ex.len;
	ac->found++;
	STAT_INC(a, extents_scanned);
	STAT_INC(a, cr_extents[ac->cr]);
	if ((ac->hints & MB_HINT_FIRST) || l == ac->g_ex.len || l > ac->b_ex.len) {
		ac->b_ex.group = g;
		ac->b_ex.start = s;
		ac->b_ex.len = l;
	}
	if ((ac->hints & MB_HINT_FIRST) || l == ac->g_ex.len) {
		use_best(ac);
		return;
	}
	check_limits(a, ac, 0);
}

/*
 * Walk the group's free runs (kernel: ext4_mb_complex_scan_group).  In the
 * goal group the walk starts at the goal and wraps, which keeps small
 * requests (metadata, short files) next to their goal; the kernel starts
 * at the first free block.
 */
static void complex_scan(struct rr_alloc *a, struct mb_ac *ac, uint32_t g, enum mb_cr cr)
{
	struct mb_buddy *b = a->groups[g].buddy;
	uint32_t from = g == ac->g_ex.group ? ac->g_ex.start : 0, s, l, pos;
	int pass;

	for (pass = 0; pass < 2 && ac->status == AC_CONTINUE; pass++) {
		uint32_t end = pass ? from : b->nblocks;

		pos = pass ? 0 : from;
		if (pass && !from)
			break;
		/* Start of a run that began before from: measure from from. */
		while (pos < end && !mb_buddy_next_run(b, pos, &s, &l) && s < end) {
			if (s + l > end && pass)
				l = end - s;
			pos = s + l;
			if (cr < CR_GOAL_LEN_SLOW && l < ac->g_ex.len)
				continue;
			measure(a, ac, g, s, l);
			if (ac->status != AC_CONTINUE)
				return;
		}
	}
	check_limits(a, ac, 1);
}

void mb_scan_group(struct rr_alloc *a, struct mb_ac *ac, uint32_t g, enum mb_cr cr)
{
	struct mb_group *grp = &a->groups[g];

	pthread_mutex_lock(&grp->lock);
	if (!grp->buddy && group_load_locked(a, g)) {
		pthread_mutex_unlock(&grp->lock);
		return;
	}
	ac->groups_scanned++;
	STAT_INC(a, groups_scanned);
	if (cr == CR_POWER2_ALIGNED) {
		unsigned int got;
		int64_t s = mb_buddy_find_order(grp->buddy, ac->two_order, &got);

		ac->found++;
		STAT_INC(a, extents_scanned);
		STAT_INC(a, cr_extents[cr]);
		if (s >= 0) {
			ac->b_ex.group = g;
			ac->b_ex.start = (uint32_t)s;
			ac->b_ex.len = 1u << ac->two_order;
			STAT_INC(a, two_n_hits);
			use_best(ac);
		}
	} else if (grp->free) {
		complex_scan(a, ac, g, cr);
	}
	pthread_mutex_unlock(&grp->lock);
}

/* The goal itself, if free for the goal's whole length (kernel: ext4_mb_find_by_goal). */
int mb_find_by_goal(struct rr_alloc *a, struct mb_ac *ac)
{
	uint32_t g = ac->g_ex.group, n;
	struct mb_group *grp = &a->groups[g];

	if (mb_load_group(a, g))
		return 0;
	pthread_mutex_lock(&grp->lock);
	n = mb_buddy_extent_at(grp->buddy, ac->g_ex.start, ac->g_ex.len);
	pthread_mutex_unlock(&grp->lock);
	if (n < ac->g_ex.len)
		return 0;
	ac->b_ex = ac->g_ex;
	ac->status = AC_FOUND;
	return 1;
}

/*
 * First fit by position, for the policies that place by address rather than
 * by free-space shape: the first free run of at least need blocks at or
 * after block from, going up through the groups and wrapping once round
 * the device.  A group whose summary rules out such a run is passed over
 * without loading it; a run found is cut to the goal length.
 */
int mb_first_fit(struct rr_alloc *a, struct mb_ac *ac, uint64_t from, uint32_t need)
{
	uint32_t g0, s0, i;

	if (!valid_block(a, from))
		from = a->first_data_block;
	g0 = group_of(a, from);
	s0 = (uint32_t)(from - group_first(a, g0));
	for (i = 0; i <= a->ngroups; i++) {
		uint32_t g = (g0 + i) % a->ngroups, lo = i ? 0 : s0, hi, pos, s, l;
		struct mb_group *grp = &a->groups[g];
		int k = grp->largest_order;

		if (i == a->ngroups && !s0)
			break;
		/* No run of need blocks without a buddy chunk of order fls(need + 1) - 2. */
		if (grp->free < need || (grp->buddy && (k < 0 || (k < (int)a->max_order &&
								   (uint64_t)need + 1 >= (4ull << k)))))
			continue;
		if (!grp->buddy && mb_load_group(a, g))
			continue;
		pthread_mutex_lock(&grp->lock);
		hi = i == a->ngroups ? s0 : grp->buddy->nblocks;
		ac->groups_scanned++;
		STAT_INC(a, groups_scanned);
		for (pos = lo; pos < hi && !mb_buddy_next_run(grp->buddy, pos, &s, &l) && s < hi; pos = s + l) {
			if (s + l > hi)
				l = hi - s;
			ac->found++;
			STAT_INC(a, extents_scanned);
			STAT_INC(a, cr_extents[ac->cr]);
			if (l >= need) {
				ac->b_ex.group = g;
				ac->b_ex.start = s;
				ac->b_ex.len = l;
				use_best(ac);
				pthread_mutex_unlock(&grp->lock);
				return 1;
			}
		}
		pthread_mutex_unlock(&grp->lock);
	}
	return 0;
}

uint64_t mb_block_of(const struct rr_alloc *a, const struct mb_ext *ex)
{
	return group_first(a, ex->group) + ex->start;
}

/* ---- the allocation pipeline (kernel: ext4_mb_new_blocks) ---- */

/* Blocks that ordinary (non-root) writers may still allocate. */
uint64_t rr_alloc_avail(struct rr_alloc *a, int root)
{
	uint64_t keep = a->meta_resv + a->da_reserved + (root ? 0 : ext2fs_r_blocks_count(a->fs->super));
	uint64_t f = ext2fs_free_blocks_count(a->fs->super);

	return f > keep ? f - keep : 0;
}

uint64_t rr_alloc_reserve(struct rr_alloc *a, uint64_t n, int root)
{
	uint64_t avail = rr_alloc_avail(a, root);

	if (n > avail)
		n = avail;
	a->da_reserved += n;
	return n;
}

void rr_alloc_unreserve(struct rr_alloc *a, uint64_t n)
{
	if (n > a->da_reserved) {
		fprintf(stderr, "rrfuse: mballoc: giving back %llu reserved blocks of %llu\n",
			(unsigned long long)n, (unsigned long long)a->da_reserved);
		n = a->da_reserved;
	}
	a->da_reserved -= n;
}

uint64_t rr_alloc_reserved(struct rr_alloc *a)
{
	return a->da_reserved;
}

uint64_t rr_alloc_meta_reserve(struct rr_alloc *a)
{
	return a->meta_resv;
}

static void ac_init(struct rr_alloc *a, struct mb_ac *ac, const struct rr_alloc_req *req, uint32_t len)
{
	uint64_t goal = req->goal;

	memset(ac, 0, sizeof(*ac));
	ac->ino = req->ino;
	if (!valid_block(a, goal)) {
		goal = a->first_data_block;
	} else if (goal) {
		ac->hints |= MB_HINT_TRY_GOAL;
	}
	ac->o_ex.group = group_of(a, goal);
	ac->o_ex.start = (uint32_t)(goal - group_first(a, ac->o_ex.group));
	ac->o_ex.len = len;
	ac->o_ex.logical = req->lblk;
	ac->g_ex = ac->o_ex;
	ac->status = AC_CONTINUE;
}

/* Grow a file's data request into its preallocation window. */
static void ac_normalize(struct rr_alloc *a, struct mb_ac *ac, const struct rr_alloc_req *req)
{
	struct mb_norm n = {
		.bbits = (unsigned int)__builtin_ctz(a->fs->blocksize),
		.bpg = a->bpg,
		.max_prealloc_kb = a->t.mb_max_prealloc_kb,
		.lblk = req->lblk,
		.len = ac->o_ex.len,
		.isize = req->isize,
		.nbr = req->nbr,
	};
	uint64_t isize_blk = (req->isize + a->fs->blocksize - 1) / a->fs->blocksize;
	uint64_t end = req->lblk + ac->o_ex.len;

	if ((end > isize_blk ? end : isize_blk) > a->t.mb_stream_req)
		ac->hints |= MB_HINT_STREAM;
	/* No block of the file on either side: its first window (regular.c tries its goal group first). */
	if (!req->nbr.pleft && !req->nbr.pright)
		ac->hints |= MB_HINT_FIRST_WINDOW;
	mb_normalize(&n);
	pa_adjust_overlap(a, req->ino, req->lblk, &n.start, &n.size);
	ac->g_ex.logical = n.start;
	ac->g_ex.len = (uint32_t)n.size;
	if (n.goal && valid_block(a, n.goal)) {
		ac->g_ex.group = group_of(a, n.goal);
		ac->g_ex.start = (uint32_t)(n.goal - group_first(a, ac->g_ex.group));
		ac->hints |= MB_HINT_TRY_GOAL;
	}
}

/* Put the found extent to use: a PA for the part beyond the request, the request's part on disk. */
static void ac_use(struct rr_alloc *a, struct mb_ac *ac, int make_pa, struct rr_extent *out)
{
	uint64_t p = mb_block_of(a, &ac->b_ex);
	uint32_t blen = ac->b_ex.len;
	struct mb_pa *pa;
	uint64_t lstart, off;

	if (!make_pa || blen <= ac->o_ex.len || !(pa = calloc(1, sizeof(*pa)))) {
		if (blen > ac->o_ex.len)
			blen = ac->o_ex.len;
		buddy_apply(a, p, blen, +1);
		disk_mark(a, p, blen, +1);
		out->pblk = p;
		out->len = blen;
		return;
	}
	buddy_apply(a, p, blen, +1);
	pa->group = ac->b_ex.group;
	pa->ino = ac->ino;
	out->pblk = p;
	out->len = ac->o_ex.len;
	if (ac->hints & MB_HINT_GROUP_ALLOC) {
		/* The rest becomes the locality group's PA, replacing what was left of the last. */
		struct mb_pa *old;
		uint32_t slot = mb_cpu_slot(a);

		pa->lg = (int32_t)slot;
		pa->pstart = p + out->len;
		pa->len = pa->free = blen - out->len;
		disk_mark(a, out->pblk, out->len, +1);
		STAT_ADD(a, preallocated, pa->free);
		pthread_mutex_lock(&a->pa_lock);
		old = a->lg[slot];
		if (old)
			pa_unlink_locked(a, old);
		a->lg[slot] = pa;
		pa_link_group_unlock(a, pa);
		if (old) {
			old->inext = NULL;
			pa_release_list(a, old);
		}
		return;
	}
	pa->lg = -1;
	/* Shorter than the window: place it so it still covers the request (kernel's three tries). */
	lstart = ac->g_ex.logical;
	if (blen < ac->orig_goal_len) {
		uint64_t gend = ac->g_ex.logical + ac->orig_goal_len;

		if (ac->o_ex.logical >= gend - blen)
			lstart = gend - blen;
		else if (ac->o_ex.logical + ac->o_ex.len <= ac->g_ex.logical + blen)
			lstart = ac->g_ex.logical;
		else
			lstart = ac->o_ex.logical;
	}
	off = ac->o_ex.logical - lstart;
	pa->lstart = lstart;
	pa->pstart = p;
	pa->len = blen;
	out->pblk = p + off;
	out->len = (uint32_t)(blen - off < ac->o_ex.len ? blen - off : ac->o_ex.len);
	pa->free = blen - out->len;
	disk_mark(a, out->pblk, out->len, +1);
	STAT_ADD(a, preallocated, pa->free);
	pthread_mutex_lock(&a->pa_lock);
	pa->inext = a->pa_hash[pa_bucket(a, pa->ino)];
	a->pa_hash[pa_bucket(a, pa->ino)] = pa;
	pa_link_group_unlock(a, pa);
}

/*
 * Kernel: ext4_mb_collect_stats counts every allocation context it
 * releases, also one a preallocation served without a search: as a
 * request, a success if it got all it asked for, a goal hit if it starts
 * at the goal.
 */
static void stat_pa_hit(struct rr_alloc *a, const struct rr_alloc_req *req, uint32_t len,
			const struct rr_extent *out)
{
	STAT_INC(a, reqs);
	if (out->len >= len) {
		STAT_INC(a, success);
		STAT_INC(a, len_goal_hits);
	}
	if (out->pblk == req->goal)
		STAT_INC(a, goal_hits);
}

/* One try: a PA hit, else normalise, search, use.  0 or -ENOSPC. */
static int mb_new_blocks(struct rr_alloc *a, const struct rr_alloc_req *req, uint32_t len,
			 struct rr_extent *out)
{
	int file_data = (req->flags & RR_ALLOC_DATA) && req->ino && !(req->flags & RR_ALLOC_HINT_ONLY);
	struct mb_ac ac;
	int small, exact;

	if (file_data && pa_use(a, req->ino, req->lblk, len, out)) {
		stat_pa_hit(a, req, len, out);
		return 0;
	}
	small = file_data && group_alloc(a, req, len);
	exact = file_data && !small && closed_to_end(a, req);
	if (small && lg_use(a, mb_cpu_slot(a), len, out)) {
		stat_pa_hit(a, req, len, out);
		return 0;
	}
	ac_init(a, &ac, req, len);
	if (req->flags & RR_ALLOC_DATA)
		ac.hints |= MB_HINT_DATA;
	if (file_data && (req->nbr.pleft || req->nbr.pright))
		ac.hints |= MB_HINT_FILE_GOAL;
	if (small) {
		/* Kernel: GROUP_ALLOC requests are not normalised; they ask for mb_group_prealloc. */
		ac.hints |= MB_HINT_GROUP_ALLOC;
		if (a->t.mb_group_prealloc > len)
			ac.g_ex.len = a->t.mb_group_prealloc;
	} else if (file_data && !exact) {
		ac_normalize(a, &ac, req);
	}
	ac.orig_goal_len = ac.g_ex.len;
	a->policy->choose(a, &ac);
	if (!ac.b_ex.len)
		return -ENOSPC;
	STAT_INC(a, reqs);
	if (ac.b_ex.len >= ac.o_ex.len)
		STAT_INC(a, success);
	if (ac.b_ex.group == ac.o_ex.group && ac.b_ex.start == ac.o_ex.start)
		STAT_INC(a, goal_hits);
	if (ac.b_ex.len == ac.orig_goal_len)
		STAT_INC(a, len_goal_hits);
	if (req->flags & RR_ALLOC_HINT_ONLY) {
		/* libext2fs accounts the blocks; its stats callback updates the buddy. */
		out->pblk = mb_block_of(a, &ac.b_ex);
		out->len = ac.b_ex.len < len ? ac.b_ex.len : len;
		return 0;
	}
	ac_use(a, &ac, file_data && !exact, out);
	return 0;
}

int rr_alloc_blocks(struct rr_alloc *a, const struct rr_alloc_req *req, struct rr_extent *out)
{
	uint64_t avail, len = req->len;
	int ret;

	if (!len)
		return -EINVAL;
	/* A reserved request's blocks were counted when they were promised. */
	if (req->flags & (RR_ALLOC_METADATA | RR_ALLOC_RESERVED))
		avail = ext2fs_free_blocks_count(a->fs->super);
	else
		avail = rr_alloc_avail(a, !!(req->flags & RR_ALLOC_USE_ROOT_RESV));
	if (!avail)
		return -ENOSPC;
	if (len > avail)
		len = avail;
	if (len > a->bpg)
		len = a->bpg;
	ret = mb_new_blocks(a, req, (uint32_t)len, out);
	/* Free space may sit in preallocations: give them all back and try once more. */
	if (ret == -ENOSPC && rr_alloc_discard_all(a))
		ret = mb_new_blocks(a, req, (uint32_t)len, out);
	if (!ret)
		verify_range(a, out->pblk, out->len);
	return ret;
}

/* ---- freeing: one place for the buddy, whoever changed the bitmap ---- */

/*
 * Free in the buddy what the bitmap shows freed in [blk, blk+n) (one
 * group, no PA overlapping it any more).  Blocks the buddy has free
 * already are left alone: a corrupt image can make libext2fs free a block
 * twice (two files claiming it), which must not bring the daemon down.
 */
static void free_freed(struct rr_alloc *a, uint32_t g, uint64_t blk, uint32_t n)
{
	struct mb_group *grp = &a->groups[g];
	uint32_t off = (uint32_t)(blk - group_first(a, g)), i, run = 0, twice = 0;

	pthread_mutex_lock(&grp->lock);
	if (!grp->buddy) {
		grp->free = ext2fs_bg_free_blocks_count(a->fs, g);
		if (a->t.discard)
			io_channel_discard(a->fs->io, blk, n);
		pthread_mutex_unlock(&grp->lock);
		return;
	}
	for (i = 0; i <= n; i++) {
		int freed = i < n && !ext2fs_test_block_bitmap2(a->fs->block_map, blk + i) &&
			    mb_buddy_test(grp->buddy, off + i);

		if (freed) {
			run++;
			continue;
		}
		twice += i < n;
		/*
		 * -o discard: before the buddy lets anyone have the run again.
		 * There is no journal to wait for, so unlike the kernel this does
		 * not wait for a commit: a crash may bring back a deleted file
		 * with its contents discarded.
		 */
		if (run && a->t.discard)
			io_channel_discard(a->fs->io, blk + i - run, run);
		if (run && mb_buddy_free(grp->buddy, off + i - run, run))
			mb_fail("freeing blocks that are free", g);
		run = 0;
	}
	group_update(a, g);
	pthread_mutex_unlock(&grp->lock);
	if (twice)
		fprintf(stderr, "rrfuse: mballoc: group %u: %u blocks freed that were free (corrupt filesystem?)\n",
			g, twice);
}

/* [blk, blk+len) was just freed (clear in the bitmap already). */
static void release_range(struct rr_alloc *a, uint64_t blk, uint64_t len)
{
	while (len) {
		uint32_t g = group_of(a, blk);
		uint64_t n = group_first(a, g) + group_nblocks(a, g) - blk;

		if (n > len)
			n = len;
		pa_discard_overlap(a, blk, (uint32_t)n, 1);
		free_freed(a, g, blk, (uint32_t)n);
		verify_range(a, blk, n);
		blk += n;
		len -= n;
	}
}

/* libext2fs marked [blk, blk+len) used: mark what the buddy still shows free. */
static void claim_range(struct rr_alloc *a, uint64_t blk, uint64_t len)
{
	while (len) {
		uint32_t g = group_of(a, blk), off, end, s, l;
		uint64_t n = group_first(a, g) + group_nblocks(a, g) - blk;
		struct mb_group *grp = &a->groups[g];

		if (n > len)
			n = len;
		/* A block taken from inside a PA: the PA is stale, give the rest of it back. */
		pa_discard_overlap(a, blk, (uint32_t)n, 0);
		pthread_mutex_lock(&grp->lock);
		if (!grp->buddy) {
			grp->free = ext2fs_bg_free_blocks_count(a->fs, g);
		} else {
			off = (uint32_t)(blk - group_first(a, g));
			end = off + (uint32_t)n;
			while (off < end && !mb_buddy_next_run(grp->buddy, off, &s, &l) && s < end) {
				if (l > end - s)
					l = end - s;
				mb_buddy_mark_used(grp->buddy, s, l);
				off = s + l;
			}
			group_update(a, g);
		}
		pthread_mutex_unlock(&grp->lock);
		verify_range(a, blk, n);
		blk += n;
		len -= n;
	}
}

void rr_free_blocks(struct rr_alloc *a, uint64_t pblk, uint32_t len)
{
	disk_mark(a, pblk, len, -1);
	release_range(a, pblk, len);
}

/* ---- libext2fs's callbacks ---- */

/* Is blk's state in the bitmap (inuse > 0: used) not yet in its loaded group's buddy? */
static int pending(struct rr_alloc *a, uint64_t blk, int inuse)
{
	uint32_t g = group_of(a, blk), off = (uint32_t)(blk - group_first(a, g));
	struct mb_group *grp = &a->groups[g];
	int disk = !!ext2fs_test_block_bitmap2(a->fs->block_map, blk), r;
	struct mb_pa *pa;

	pthread_mutex_lock(&grp->lock);
	r = grp->buddy && disk == (inuse > 0) && mb_buddy_test(grp->buddy, off) != disk;
	/* A preallocated block is free on disk and used in the buddy by design. */
	for (pa = grp->pas; r && pa; pa = pa->gnext)
		if (blk >= pa->pstart && blk < pa->pstart + pa->len)
			r = 0;
	pthread_mutex_unlock(&grp->lock);
	return r;
}

static void apply_range(struct rr_alloc *a, uint64_t blk, uint64_t num, int inuse)
{
	if (inuse > 0)
		claim_range(a, blk, num);
	else
		release_range(a, blk, num);
}

/*
 * libext2fs changed the bitmap for [blk, blk+num).  But e2fsprogs 1.47.0's
 * ext2fs_block_alloc_stats_range hands its callback the end of the range
 * and a count of 0 (its loop consumed both; later versions pass the
 * originals).  Then the range is recovered from the bitmap: the blocks just
 * before the end whose new state the buddy does not have yet.  Such a
 * range lies in at most two groups (ext2fs_alloc_range takes what our
 * new_range chose, one group; punch frees one extent, at most a group
 * long); a group not loaded yet needs nothing, it is built from the bitmap
 * as it is now.
 */
static void cb_stats_range(ext2_filsys fs, blk64_t blk, blk_t num, int inuse)
{
	struct rr_alloc *a = fs->priv_data;
	uint64_t end = blk;
	int n;

	if (a->in_engine)
		return;
	if (num) {
		apply_range(a, blk, num, inuse);
		return;
	}
	for (n = 0; n < 2 && end > a->first_data_block; n++) {
		uint32_t g = group_of(a, end - 1);
		uint64_t gfirst = group_first(a, g), s = end;

		if (!a->groups[g].buddy) {
			mb_load_group(a, g);
		} else {
			while (s > gfirst && pending(a, s - 1, inuse))
				s--;
			if (s < end)
				apply_range(a, s, end - s, inuse);
			if (s > gfirst || s == end)
				break;
		}
		end = gfirst;
	}
}

static void cb_stats(ext2_filsys fs, blk64_t blk, int inuse)
{
	cb_stats_range(fs, blk, 1, inuse);
}

/* libext2fs wants one block for its own metadata: choose it, libext2fs accounts it. */
static errcode_t cb_get_alloc_block(ext2_filsys fs, blk64_t goal, blk64_t *ret)
{
	struct rr_alloc *a = fs->priv_data;
	struct rr_alloc_req req = { .len = 1, .goal = goal,
				    .flags = RR_ALLOC_METADATA | RR_ALLOC_HINT_ONLY };
	struct rr_extent ex;

	if (rr_alloc_blocks(a, &req, &ex))
		return EXT2_ET_BLOCK_ALLOC_FAIL;
	*ret = ex.pblk;
	return 0;
}

/* ext2fs_fallocate and friends want a range: choose it, libext2fs accounts it. */
static errcode_t cb_new_range(ext2_filsys fs, int flags, blk64_t goal, blk64_t len,
			      blk64_t *pblk, blk64_t *plen)
{
	struct rr_alloc *a = fs->priv_data;
	uint64_t avail = rr_alloc_avail(a, 1);
	/* The daemon checked the caller's right to the root reserve before ext2fs_fallocate. */
	struct rr_alloc_req req = { .goal = goal, .flags = RR_ALLOC_HINT_ONLY | RR_ALLOC_USE_ROOT_RESV };
	struct rr_extent ex;

	if (len > avail)
		len = avail;
	if (!len)
		return EXT2_ET_BLOCK_ALLOC_FAIL;
	if (flags & EXT2_NEWRANGE_FIXED_GOAL) {
		uint32_t g, n;

		if (!valid_block(a, goal))
			return EXT2_ET_BLOCK_ALLOC_FAIL;
		g = group_of(a, goal);
		if (mb_load_group(a, g))
			return EXT2_ET_BLOCK_ALLOC_FAIL;
		pthread_mutex_lock(&a->groups[g].lock);
		n = mb_buddy_extent_at(a->groups[g].buddy, (uint32_t)(goal - group_first(a, g)),
				       len < a->bpg ? (uint32_t)len : a->bpg);
		pthread_mutex_unlock(&a->groups[g].lock);
		if (!n && atomic_load(&a->pa_count)) {
			rr_alloc_discard_all(a);
			return cb_new_range(fs, flags, goal, len, pblk, plen);
		}
		if (!n || ((flags & EXT2_NEWRANGE_MIN_LENGTH) && n < len))
			return EXT2_ET_BLOCK_ALLOC_FAIL;
		*pblk = goal;
		*plen = n;
		return 0;
	}
	req.len = len < a->bpg ? (uint32_t)len : a->bpg;
	if (rr_alloc_blocks(a, &req, &ex))
		return EXT2_ET_BLOCK_ALLOC_FAIL;
	if ((flags & EXT2_NEWRANGE_MIN_LENGTH) && ex.len < len)
		return EXT2_ET_BLOCK_ALLOC_FAIL;
	*pblk = ex.pblk;
	*plen = ex.len;
	return 0;
}

/* ---- attach / detach ---- */

int rr_alloc_attach(ext2_filsys fs, const struct rr_alloc_tunables *t, struct rr_alloc **out)
{
	struct rr_alloc *a = calloc(1, sizeof(*a));
	uint64_t blocks = ext2fs_blocks_count(fs->super);
	unsigned int bbits = (unsigned int)__builtin_ctz(fs->blocksize);
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	uint32_t g;
	int l, o;

	if (!a)
		return -ENOMEM;
	if (t)
		a->t = *t;
	else
		rr_alloc_tunables_default(&a->t);
	a->policy = mb_policy_find(a->t.policy);
	if (!a->policy || EXT2FS_CLUSTER_RATIO(fs) != 1) {
		free(a);
		return -EINVAL;
	}
	a->fs = fs;
	a->ngroups = fs->group_desc_count;
	a->bpg = fs->super->s_blocks_per_group;
	a->first_data_block = fs->super->s_first_data_block;
	/* As the kernel's mb_prefetch default: 8 flex groups' worth with flex_bg, else 32. */
	a->prefetch = ext2fs_has_feature_flex_bg(fs->super) && fs->super->s_log_groups_per_flex < 13 ?
		      8u << fs->super->s_log_groups_per_flex : 32;
	a->max_order = bbits + 1 < MB_NUM_ORDERS_MAX ? bbits + 1 : MB_NUM_ORDERS_MAX - 1;
	while (a->max_order && (1u << a->max_order) > a->bpg)
		a->max_order--;
	if (a->t.mb_optimize_scan == UINT_MAX)
		a->t.mb_optimize_scan = a->ngroups >= 16;
	if (a->t.mb_group_prealloc > a->bpg)
		a->t.mb_group_prealloc = a->bpg;
	/* As the kernel's s_resv_clusters: 2 % of the blocks, at most 4096. */
	a->meta_resv = blocks / 50 < 4096 ? blocks / 50 : 4096;
	a->groups = calloc(a->ngroups, sizeof(*a->groups));
	a->pa_nbuckets = 1024;
	a->pa_hash = calloc(a->pa_nbuckets, sizeof(*a->pa_hash));
	/* Stream goals: min(CPUs, groups / 4) slots, as the kernel's s_mb_nr_global_goals. */
	a->nr_last_groups = (uint32_t)(ncpu > 0 ? ncpu : 1);
	if (a->nr_last_groups > (a->ngroups + 3) / 4)
		a->nr_last_groups = (a->ngroups + 3) / 4;
	a->last_groups = calloc(a->nr_last_groups, sizeof(*a->last_groups));
	a->nlg = (uint32_t)(ncpu > 0 ? ncpu : 1);
	a->lg = calloc(a->nlg, sizeof(*a->lg));
	if (!a->groups || !a->pa_hash || !a->last_groups || !a->lg) {
		free(a->lg);
		free(a->groups);
		free(a->pa_hash);
		free(a->last_groups);
		free(a);
		return -ENOMEM;
	}
	for (l = 0; l < MB_NLISTS; l++)
		for (o = 0; o < MB_NUM_ORDERS_MAX; o++)
			a->list_head[l][o] = a->list_tail[l][o] = -1;
	/* Only the descriptors: buddies are built on first use. */
	for (g = 0; g < a->ngroups; g++) {
		struct mb_group *grp = &a->groups[g];

		pthread_mutex_init(&grp->lock, NULL);
		grp->free = ext2fs_bg_free_blocks_count(fs, g);
		grp->largest_order = grp->avg_order = -1;
		grp->list_order[0] = grp->list_order[1] = -1;
	}
	pthread_mutex_init(&a->list_lock, NULL);
	pthread_mutex_init(&a->pa_lock, NULL);
	if (a->policy->init && a->policy->init(a)) {
		rr_alloc_detach(a);
		return -ENOMEM;
	}
	a->old_priv = fs->priv_data;
	fs->priv_data = a;
	ext2fs_set_alloc_block_callback(fs, cb_get_alloc_block, &a->old_get_alloc_block);
	ext2fs_set_new_range_callback(fs, cb_new_range, &a->old_new_range);
	ext2fs_set_block_alloc_stats_callback(fs, cb_stats, &a->old_stats);
	ext2fs_set_block_alloc_stats_range_callback(fs, cb_stats_range, &a->old_stats_range);
	*out = a;
	return 0;
}

/* With mb_stats, the statistics at unmount (as the kernel's ext4_mb_release), in rrctl -s's text. */
static void print_stats(struct rr_alloc *a)
{
	struct rrctl_stats st;

	memset(&st, 0, sizeof(st));
	rr_alloc_stats(a, &st);
	mb_format_stats(stderr, &st);
}

void rr_alloc_detach(struct rr_alloc *a)
{
	uint32_t g;

	if (!a)
		return;
	if (a->t.mb_stats)
		print_stats(a);
	if (a->fs->priv_data == a) {
		/* PAs were never on disk: dropping them leaves the bitmap holding only owned blocks. */
		rr_alloc_discard_all(a);
		ext2fs_set_alloc_block_callback(a->fs, a->old_get_alloc_block, NULL);
		ext2fs_set_new_range_callback(a->fs, a->old_new_range, NULL);
		ext2fs_set_block_alloc_stats_callback(a->fs, a->old_stats, NULL);
		ext2fs_set_block_alloc_stats_range_callback(a->fs, a->old_stats_range, NULL);
		a->fs->priv_data = a->old_priv;
	}
	if (a->policy && a->policy->fini)
		a->policy->fini(a);
	for (g = 0; g < a->ngroups; g++) {
		if (a->groups[g].buddy) {
			mb_buddy_destroy(a->groups[g].buddy);
			free(a->groups[g].buddy);
		}
		pthread_mutex_destroy(&a->groups[g].lock);
	}
	pthread_mutex_destroy(&a->list_lock);
	pthread_mutex_destroy(&a->pa_lock);
	free(a->groups);
	free(a->pa_hash);
	free(a->last_groups);
	free(a->lg);
	free(a);
}

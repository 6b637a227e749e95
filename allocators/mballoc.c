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
 *    window one preallocation should cover; a policy (policies.h; regular.c
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
 *    get_alloc_block and new_range choose from the buddy and mark the
 *    choice there at once (a hint, so that no allocator running without
 *    the fs lock takes it meanwhile; libext2fs then accounts the block
 *    itself, and what it did not take goes back at rr_alloc_settle), and
 *    the block_alloc_stats callbacks apply every bitmap change libext2fs
 *    makes (ext2fs_punch, our emap/xattr code) to the buddy.  So the buddy
 *    can never disagree with the bitmap.
 *  - File data may be allocated without the fs lock (RR_ALLOC_NOLOCK):
 *    the blocks go to the buddy and to the group's pending map, and reach
 *    libext2fs's bitmap, descriptors and counts at rr_alloc_mapped, in the
 *    fs-locked section that maps them.  Not before: a commit in between
 *    would write a bitmap with blocks that no file owns, and a crash then
 *    leaves them lost to e2fsck.  The free-space counts the engine checks
 *    requests against are its own atomics (sb_free, claimed, da_reserved),
 *    so no request reads libext2fs without the fs lock.
 *
 * Invariants (checked with -o check, rr_alloc_verify; for groups changed
 * without the fs lock, when the change is mapped or given back)
 *  - For a loaded group: buddy order 0 == on-disk bitmap | pending map |
 *    frozen blocks | PA ranges | hints, and the higher orders, counters,
 *    free and fragment counts are what generating the buddy from that map
 *    gives.
 *  - A PA's free count == its blocks not handed out; every block handed out
 *    is on disk or pending.  A PA block is handed out only for its own
 *    logical block, and only while that logical block is a hole.
 *  - Any free of a block inside a live PA first discards that PA (minus the
 *    freed range), so a free can never return a block twice.
 *  - A freed block stays used in the buddy (frozen) until the commit that
 *    frees it on disk is on disk (rr_alloc_commit_end), when the daemon
 *    commits (rr_alloc_set_commit): file data, written to the device at
 *    once, never lands in a block the image still maps to a deleted file.
 *
 * Locking
 *  - The fs lock (the daemon's) covers libext2fs and everything that reads
 *    or changes its bitmap: group loads, the callbacks, frees, sync,
 *    settle, hints, verification.  Allocation of file data does not need
 *    it (RR_ALLOC_NOLOCK); the engine then takes it only to load a group
 *    (rr_alloc_set_lock), holding none of its own locks.
 *  - PA owner locks: pa_locks[] (striped over the inode hash) and
 *    lg_locks[] (one per locality group).  group->lock: that group's buddy,
 *    pending map, summary and PA list, and its bits in the scan lists.
 *  - Order: fs lock -> PA owner lock -> group lock; never two
 *    group locks or two owner locks at once.  There is no lock that every
 *    allocation takes: a request locks the groups it scans, one at a time,
 *    and the owner lock of its own inode's PAs or of its CPU's locality
 *    group.  Two requests of one inode never run at once (the daemon holds
 *    the inode's rw lock exclusively around allocation).
 *  - stats are atomics; in_engine and the hints are under the fs lock.
 */
#include "mballoc.h"
#include "mb_guard.h"
#include "mb_host.h"
#include "mb_normalize.h"
#include "mb_trace.h"
#include "rrfuse/grow.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#define STAT_INC(a, f) do { if (MB_T(a, mb_stats)) atomic_fetch_add(&(a)->stats.f, 1); } while (0)
#define STAT_ADD(a, f, n) do { if (MB_T(a, mb_stats)) atomic_fetch_add(&(a)->stats.f, (n)); } while (0)

/*
 * This thread is inside an RR_ALLOC_NOLOCK request: blocks it takes go to
 * the pending maps, and loading a group takes the fs lock.
 */
static _Thread_local int tl_nolock;

static void mb_fail(const char *what, uint32_t g)
{
	mb_log(LOG_CRIT, "mballoc: %s (group %u)", what, g);
	abort();
}

/* ---- geometry ---- */

static uint32_t group_nblocks(const struct rr_alloc *a, uint32_t g)
{
	uint64_t left = ext2fs_blocks_count(a->fs->super) - mb_group_first(a, g);

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

/*
 * Each (list, order) is a bitmap with a bit per group, read in group
 * number order as the kernel's xarrays (6.17): which group a search picks
 * must not depend on when a group last changed, or two streams started
 * together drift into different groups where the kernel's share one.
 * Bits change with atomic word operations, under the group's lock only.
 */
static _Atomic uint64_t *list_map(const struct rr_alloc *a, int l, int o)
{
	return a->list_bits + ((size_t)l * MB_NUM_ORDERS_MAX + (size_t)o) * a->list_words;
}

/* Move g from its order on list l to order o (-1: off it).  Group lock held: nobody else moves g. */
static void list_move(struct rr_alloc *a, int l, uint32_t g, int o)
{
	int old = atomic_load(&a->groups[g].list_order[l]);
	uint64_t bit = 1ull << (g & 63);

	if (old == o)
		return;
	if (old >= 0)
		atomic_fetch_and(&list_map(a, l, old)[g >> 6], ~bit);
	if (o >= 0)
		atomic_fetch_or(&list_map(a, l, o)[g >> 6], bit);
	atomic_store(&a->groups[g].list_order[l], (int8_t)o);
}

/* Copy the buddy's summary into the group and move it to the right lists.  Group lock held. */
static void group_update(struct rr_alloc *a, uint32_t g)
{
	struct mb_group *grp = &a->groups[g];
	struct mb_buddy *b = grp->buddy;
	int lo = mb_buddy_largest_order(b), ao = mb_avg_order(b->free, b->fragments, b->max_order);

	grp->gen++;
	atomic_store(&grp->free, b->free);
	atomic_store(&grp->fragments, b->fragments);
	atomic_store(&grp->largest_order, (int8_t)lo);
	atomic_store(&grp->avg_order, (int8_t)ao);
	list_move(a, MB_LIST_LARGEST, g, lo);
	list_move(a, MB_LIST_AVG, g, ao);
}

int mb_list_find(struct rr_alloc *a, int list, int order, uint32_t from, uint32_t end)
{
	_Atomic uint64_t *m = list_map(a, list, order);
	uint32_t w;

	if (end > a->ngroups)
		end = a->ngroups;
	for (w = from >> 6; from < end; w++, from = w << 6) {
		uint64_t bits = atomic_load(&m[w]) & (~0ull << (from & 63));

		if (bits) {
			uint32_t g = (w << 6) + (uint32_t)__builtin_ctzll(bits);

			return g < end ? (int)g : -1;
		}
	}
	return -1;
}

/* ---- groups ---- */

/* A map of a group's blocks, a bit each, with a word to spare past its end. */
static size_t map_size(const struct rr_alloc *a)
{
	return (a->bpg + 7) / 8 + 8;
}

static uint8_t *map_alloc(const struct rr_alloc *a)
{
	return calloc(1, map_size(a));
}

/* A loaded group's frozen map (mb_group.pmap); NULL before the group loads. */
static uint8_t *group_fmap(const struct rr_alloc *a, const struct mb_group *grp)
{
	return grp->pmap ? grp->pmap + map_size(a) : NULL;
}

static void map_set_range(uint8_t *map, uint32_t start, uint32_t len)
{
	mb_bits_fill(map, start, len, 1);
}

/* Mark in map (group g's, 1 = used) the frozen blocks of g.  Group lock held. */
static void map_frozen(struct rr_alloc *a, uint32_t g, uint8_t *map)
{
	const uint8_t *f = group_fmap(a, &a->groups[g]);
	uint32_t i, n = (a->bpg + 7) / 8;

	for (i = 0; f && i < n; i++)
		map[i] |= f[i];
}

/* The group's bitmap from libext2fs (1 = used).  fs lock held. */
static uint8_t *group_bitmap(struct rr_alloc *a, uint32_t g)
{
	uint8_t *map = map_alloc(a);

	if (map && ext2fs_get_block_bitmap_range2(a->fs->block_map, mb_group_first(a, g), group_nblocks(a, g), map)) {
		free(map);
		return NULL;
	}
	return map;
}

/* The blocks a map (1 = used) has free among a group's first n. */
static uint32_t map_free_count(const uint8_t *map, uint32_t n)
{
	uint32_t i, used = 0;

	for (i = 0; i + 64 <= n; i += 64) {
		uint64_t w;

		memcpy(&w, map + i / 8, sizeof(w));
		used += (uint32_t)__builtin_popcountll(w);
	}
	for (; i < n; i++)
		used += mb_bit_test(map, i);
	return n - used;
}

/*
 * Build the group's buddy on first use, with its blocks [hold, hold+nhold)
 * used whatever the bitmap says: a first free in a group after the mount
 * loads it after libext2fs has freed them (free_freed), and they must go
 * through the buddy's free, frozen until their commit like every other.
 * fs lock and group lock held.
 */
static int group_load_holding(struct rr_alloc *a, uint32_t g, uint32_t hold, uint32_t nhold)
{
	struct mb_group *grp = &a->groups[g];
	struct timespec t0 = { 0 }, t1;
	struct mb_buddy *b;
	uint32_t on_disk;
	uint8_t *map;

	if (grp->buddy)
		return 0;
	b = malloc(sizeof(*b));
	if (!b || mb_buddy_init(b, group_nblocks(a, g), a->max_order)) {
		free(b);
		return -ENOMEM;
	}
	grp->pmap = calloc(2, map_size(a));
	if (MB_T(a, mb_stats))
		clock_gettime(CLOCK_MONOTONIC, &t0);
	map = group_bitmap(a, g);
	if (!map || !grp->pmap) {
		free(map);
		free(grp->pmap);
		grp->pmap = NULL;
		mb_buddy_destroy(b);
		free(b);
		return map ? -ENOMEM : -EIO;
	}
	on_disk = map_free_count(map, group_nblocks(a, g));
	/* Free on disk, still waiting for their commit: used here. */
	map_frozen(a, g, map);
	map_set_range(map, hold, nhold);
	mb_buddy_generate(b, map);
	free(map);
	if (MB_T(a, mb_stats)) {
		clock_gettime(CLOCK_MONOTONIC, &t1);
		/* Kernel: s_mb_generation_time, nanoseconds spent building buddies. */
		STAT_ADD(a, buddies_time_ns, (unsigned long)((t1.tv_sec - t0.tv_sec) * 1000000000L +
							      (t1.tv_nsec - t0.tv_nsec)));
	}
	if (on_disk != ext2fs_bg_free_blocks_count(a->fs, g))
		mb_log(LOG_WARNING, "mballoc: group %u: block bitmap (%u free) and descriptor (%u) disagree",
			g, on_disk, ext2fs_bg_free_blocks_count(a->fs, g));
	atomic_store(&grp->block_uninit, !!ext2fs_bg_flags_test(a->fs, g, EXT2_BG_BLOCK_UNINIT));
	grp->buddy = b;
	group_update(a, g);
	STAT_INC(a, buddies_generated);
	return 0;
}

static int group_load_locked(struct rr_alloc *a, uint32_t g)
{
	return group_load_holding(a, g, 0, 0);
}

/*
 * Load g if it is not loaded.  Reading libext2fs's bitmap needs the fs
 * lock: a request running without it takes it here (holding none of the
 * engine's locks).
 */
int mb_load_group(struct rr_alloc *a, uint32_t g)
{
	struct mb_group *grp = &a->groups[g];
	int host = tl_nolock, ret;

	if (grp->buddy)
		return 0;
	if (host) {
		tl_nolock = 0;
		a->host_lock(a->host_arg);
	}
	pthread_mutex_lock(&grp->lock);
	ret = group_load_locked(a, g);
	pthread_mutex_unlock(&grp->lock);
	if (host) {
		a->host_unlock(a->host_arg);
		tl_nolock = 1;
	}
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
		if (!a->groups[g].buddy && atomic_load(&a->groups[g].free))
			mb_load_group(a, g);
}

/*
 * -o check: the group's buddy must be what its bitmap, pending map, PAs and
 * hints give; each PA's count must match its map.  fs lock held.
 */
static void group_verify(struct rr_alloc *a, uint32_t g)
{
	struct mb_group *grp = &a->groups[g];
	uint64_t gfirst = mb_group_first(a, g);
	struct mb_buddy *b, fresh;
	struct mb_pa *pa;
	uint8_t *map;
	uint32_t i;

	atomic_store(&grp->watched, 1);
	pthread_mutex_lock(&grp->lock);
	/* Spelled out: GCC 12 under -fsanitize=address warns falsely on grp->buddy here. */
	b = atomic_load_explicit(&a->groups[g].buddy, memory_order_relaxed);
	if (!b) {
		pthread_mutex_unlock(&grp->lock);
		atomic_store(&grp->watched, 0);
		return;
	}
	map = group_bitmap(a, g);
	if (!map || mb_buddy_init(&fresh, b->nblocks, a->max_order))
		mb_fail("out of memory in check", g);
	for (i = 0; i < b->nblocks; i++) {
		if (!mb_bit_test(grp->pmap, i))
			continue;
		if (mb_bit_test(map, i))
			mb_fail("a pending block is in the bitmap already", g);
		mb_bit_set(map, i);
	}
	map_frozen(a, g, map);
	/* A hint lies in one group. */
	for (i = 0; i < a->nhints; i++)
		if (a->hints[i].len && group_of(a, a->hints[i].pblk) == g)
			map_set_range(map, (uint32_t)(a->hints[i].pblk - gfirst), a->hints[i].len);
	for (pa = grp->pas; pa; pa = pa->gnext) {
		uint32_t taken = 0, off = (uint32_t)(pa->pstart - gfirst);

		for (i = 0; pa->lg < 0 && i < pa->len; i++)
			if (mb_bit_test(pa->taken, i)) {
				taken++;
				if (!mb_bit_test(map, off + i))
					mb_fail("a preallocated block handed out is neither on disk nor pending", g);
			}
		if (pa->free != pa->len - taken)
			mb_fail("preallocation's free count differs from its map", g);
		for (i = 0; i < pa->len; i++)
			if (pa->lg >= 0 || !mb_bit_test(pa->taken, i))
				mb_bit_set(map, off + i);
	}
	mb_buddy_generate(&fresh, map);
	if (mb_buddy_compare(&fresh, b)) {
		for (i = 0; i < fresh.nblocks; i++)
			if (mb_buddy_test(&fresh, i) != mb_buddy_test(b, i)) {
				mb_log(LOG_CRIT, "mballoc: block %llu: %s on disk, %s in the buddy",
					(unsigned long long)(gfirst + i),
					mb_buddy_test(&fresh, i) ? "used" : "free",
					mb_buddy_test(b, i) ? "used" : "free");
				break;
			}
		for (pa = grp->pas; pa; pa = pa->gnext)
			mb_log(LOG_CRIT, "mballoc: PA ino %u l %llu p %llu len %u free %u", pa->ino,
				(unsigned long long)pa->lstart, (unsigned long long)pa->pstart, pa->len, pa->free);
		mb_fail("buddy differs from bitmap + pending + frozen + preallocations", g);
	}
	if (grp->free != fresh.free || grp->fragments != fresh.fragments)
		mb_fail("group summary differs from its buddy", g);
	mb_buddy_destroy(&fresh);
	free(map);
	pthread_mutex_unlock(&grp->lock);
	atomic_store(&grp->watched, 0);
}

/* After a change to [blk, blk+len) under the fs lock; a request without it is checked when mapped. */
static void verify_range(struct rr_alloc *a, uint64_t blk, uint64_t len)
{
	uint32_t g, last;

	if (!MB_T(a, check) || !len || tl_nolock)
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

/* The engine's copy of libext2fs's free count and of g's BLOCK_UNINIT flag.  fs lock held. */
static void mirror_disk(struct rr_alloc *a, uint32_t g)
{
	atomic_store(&a->sb_free, ext2fs_free_blocks_count(a->fs->super));
	atomic_store(&a->groups[g].block_uninit, !!ext2fs_bg_flags_test(a->fs, g, EXT2_BG_BLOCK_UNINIT));
}

/* Mark [blk, blk+len) in (+1) or out of (-1) the bitmap, descriptors and counts.  fs lock held. */
static void disk_mark(struct rr_alloc *a, uint64_t blk, uint32_t len, int inuse)
{
	a->in_engine++;
	ext2fs_block_alloc_stats_range(a->fs, blk, len, inuse);
	a->in_engine--;
	mirror_disk(a, group_of(a, blk));
}

/*
 * Blocks [off, off+len) of group g (its lock held), free in the buddy
 * until now or preallocated, are in use from now on: on disk at once with
 * the fs lock, else in the pending map until they are mapped.
 */
static void take_locked(struct rr_alloc *a, uint32_t g, uint32_t off, uint32_t len)
{
	struct mb_group *grp = &a->groups[g];

	if (!tl_nolock) {
		disk_mark(a, mb_group_first(a, g) + off, len, +1);
		return;
	}
	map_set_range(grp->pmap, off, len);
	grp->npending += len;
}

/*
 * libext2fs's own allocations: the choice is marked in the buddy (no
 * request without the fs lock may take it) and remembered until settle.
 * fs lock held.
 */
static int hint_add(struct rr_alloc *a, uint64_t blk, uint32_t len)
{
	struct rr_extent *last = a->nhints ? &a->hints[a->nhints - 1] : NULL;

	/* libext2fs takes block after block (block-mapped files, fallocate): one hint for the run. */
	if (last && last->pblk + last->len == blk && group_of(a, last->pblk) == group_of(a, blk)) {
		last->len += len;
		return 0;
	}
	if (rr_grow(&a->hints, sizeof(*a->hints), &a->hints_cap, a->nhints + 1, 8))
		return -ENOMEM;
	a->hints[a->nhints++] = (struct rr_extent){ .pblk = blk, .len = len };
	return 0;
}

/* libext2fs freed [blk, blk+len): no hint may cover it any more (settle would free it twice). */
static void hints_forget(struct rr_alloc *a, uint64_t blk, uint64_t len)
{
	uint32_t i;

	for (i = 0; i < a->nhints; i++) {
		struct rr_extent *h = &a->hints[i];
		uint64_t hs = h->pblk, he = h->pblk + h->len;

		if (he <= blk || hs >= blk + len)
			continue;
		if (hs < blk && he > blk + len) {
			/* The middle goes: the tail becomes a hint of its own (room or not, dropping it is safe). */
			h->len = (uint32_t)(blk - hs);
			hint_add(a, blk + len, (uint32_t)(he - blk - len));
		} else if (hs < blk) {
			h->len = (uint32_t)(blk - hs);
		} else if (he > blk + len) {
			h->pblk = blk + len;
			h->len = (uint32_t)(he - blk - len);
		} else {
			h->len = 0;
		}
	}
}

static int in_hint(const struct rr_alloc *a, uint64_t blk)
{
	uint32_t i;

	for (i = 0; i < a->nhints; i++)
		if (blk >= a->hints[i].pblk && blk < a->hints[i].pblk + a->hints[i].len)
			return 1;
	return 0;
}

void rr_alloc_settle(struct rr_alloc *a)
{
	uint32_t i;

	if (!a->nhints)
		return;
	for (i = 0; i < a->nhints; i++) {
		uint64_t blk = a->hints[i].pblk, end = blk + a->hints[i].len, run = 0;
		uint32_t g = group_of(a, blk);
		struct mb_group *grp = &a->groups[g];
		uint64_t gfirst = mb_group_first(a, g);

		if (!a->hints[i].len)
			continue;
		pthread_mutex_lock(&grp->lock);
		for (; blk <= end; blk++) {
			int unused = blk < end && !ext2fs_test_block_bitmap2(a->fs->block_map, blk) &&
				     !mb_bit_test(grp->pmap, (uint32_t)(blk - gfirst));

			if (unused) {
				run++;
				continue;
			}
			if (run && mb_buddy_free(grp->buddy, (uint32_t)(blk - run - gfirst), (uint32_t)run))
				mb_fail("a hint held free blocks", g);
			run = 0;
		}
		group_update(a, g);
		pthread_mutex_unlock(&grp->lock);
	}
	/* No count to mirror: what libext2fs took came through its callbacks, which did. */
	a->nhints = 0;
}

/* ---- preallocations ---- */

static uint32_t pa_bucket(const struct rr_alloc *a, ext2_ino_t ino)
{
	return (ino * 2654435761u) % a->pa_nbuckets;
}

static pthread_mutex_t *ino_lock(struct rr_alloc *a, ext2_ino_t ino)
{
	return &a->pa_locks[pa_bucket(a, ino) % MB_PA_LOCKS];
}

/* The lock that owns pa: its inode's hash bucket's, or its locality group's. */
static pthread_mutex_t *pa_owner_lock(struct rr_alloc *a, const struct mb_pa *pa)
{
	return pa->lg >= 0 ? &a->lg_locks[pa->lg] : ino_lock(a, pa->ino);
}

/* The list of locality group slot that a PA with free blocks belongs on. */
static struct mb_pa **lg_list(struct rr_alloc *a, uint32_t slot, uint32_t free)
{
	int k = free ? 31 - __builtin_clz(free) : 0;

	return &a->lg[slot * MB_LG_ORDERS + (k < MB_LG_ORDERS ? k : MB_LG_ORDERS - 1)];
}

/* Take a locality group's PA off its list, if on one.  lg_locks[pa->lg] held. */
static void lg_remove_locked(struct rr_alloc *a, struct mb_pa *pa)
{
	struct mb_pa **pp;

	for (pp = lg_list(a, (uint32_t)pa->lg, pa->free); *pp; pp = &(*pp)->inext)
		if (*pp == pa) {
			*pp = pa->inext;
			pa->inext = NULL;
			return;
		}
}

/* Give a PA's unused blocks back to the buddy; blocks in [xs, xs+xn) are left alone.  Group lock held. */
static void pa_give_back_locked(struct rr_alloc *a, struct mb_pa *pa, uint64_t xs, uint64_t xn)
{
	struct mb_group *grp = &a->groups[pa->group];
	uint64_t gfirst = mb_group_first(a, pa->group), b, run = 0, freed = 0;

	for (b = pa->pstart; b <= pa->pstart + pa->len; b++) {
		int give = b < pa->pstart + pa->len && !(b >= xs && b < xs + xn) &&
			   (pa->lg >= 0 || !mb_bit_test(pa->taken, (uint32_t)(b - pa->pstart)));

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
	STAT_ADD(a, discarded, freed);
}

/*
 * Take pa out of the inode hash or its locality group and out of its
 * group, giving its unused blocks (but [xs, xs+xn)) back in the same
 * group-locked step, so that a check never finds them held by no PA.
 * Owner lock held; the caller frees pa (pa_free).
 */
static void pa_unlink_locked(struct rr_alloc *a, struct mb_pa *pa, uint64_t xs, uint64_t xn)
{
	struct mb_pa **pp;
	struct mb_group *grp = &a->groups[pa->group];

	if (pa->lg >= 0) {
		lg_remove_locked(a, pa);
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
	pa_give_back_locked(a, pa, xs, xn);
	pthread_mutex_unlock(&grp->lock);
}

static void pa_free(struct rr_alloc *a, struct mb_pa *pa)
{
	atomic_fetch_sub(&a->pa_count, 1);
	free(pa);
}

/* Free PAs already unlinked (chained by inext), then check their groups. */
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
		pa_free(a, pa);
	}
	for (i = 0; i < n; i++)
		verify_range(a, starts[i], lens[i]);
}

/* Unlink ino's PAs in hash bucket b (its lock held) onto *gone. */
static void pa_collect_bucket(struct rr_alloc *a, uint32_t b, int all, ext2_ino_t ino, struct mb_pa **gone)
{
	struct mb_pa *pa, **pp;

	for (pp = &a->pa_hash[b]; (pa = *pp);) {
		if (!all && pa->ino != ino) {
			pp = &pa->inext;
			continue;
		}
		pa_unlink_locked(a, pa, 0, 0);
		pa->inext = *gone;
		*gone = pa;
	}
}

void rr_alloc_discard_inode(struct rr_alloc *a, ext2_ino_t ino)
{
	struct mb_pa *gone = NULL;

	if (!a)
		return;
	if (atomic_load(&a->pa_count)) {
		pthread_mutex_lock(ino_lock(a, ino));
		pa_collect_bucket(a, pa_bucket(a, ino), 0, ino, &gone);
		pthread_mutex_unlock(ino_lock(a, ino));
	}
	/* Every call, as the kernel's ext4_discard_preallocations traces every call: a replay needs it. */
	if (MB_TRACING(a))
		mb_trace_discard(a, ino, gone);
	pa_release_list(a, gone);
}

uint64_t rr_alloc_discard_all(struct rr_alloc *a)
{
	struct mb_pa *pa, *gone = NULL;
	uint64_t n = 0;
	uint32_t i;

	for (i = 0; i < a->pa_nbuckets; i++) {
		pthread_mutex_lock(&a->pa_locks[i % MB_PA_LOCKS]);
		pa_collect_bucket(a, i, 1, 0, &gone);
		pthread_mutex_unlock(&a->pa_locks[i % MB_PA_LOCKS]);
	}
	for (i = 0; i < a->nlg * MB_LG_ORDERS; i++) {
		pthread_mutex_lock(&a->lg_locks[i / MB_LG_ORDERS]);
		while ((pa = a->lg[i])) {
			pa_unlink_locked(a, pa, 0, 0);
			pa->inext = gone;
			gone = pa;
		}
		pthread_mutex_unlock(&a->lg_locks[i / MB_LG_ORDERS]);
	}
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

	for (i = 0; i < a->pa_nbuckets; i++) {
		pthread_mutex_lock(&a->pa_locks[i % MB_PA_LOCKS]);
		for (pa = a->pa_hash[i]; pa; pa = pa->inext)
			n += pa->free;
		pthread_mutex_unlock(&a->pa_locks[i % MB_PA_LOCKS]);
	}
	for (i = 0; i < a->nlg * MB_LG_ORDERS; i++) {
		pthread_mutex_lock(&a->lg_locks[i / MB_LG_ORDERS]);
		for (pa = a->lg[i]; pa; pa = pa->inext)
			n += pa->free;
		pthread_mutex_unlock(&a->lg_locks[i / MB_LG_ORDERS]);
	}
	return n;
}

/* The first PA on g's list overlapping [blk, blk+len) and owned by lock (any owner if NULL).  Group lock held. */
static struct mb_pa *pa_overlapping(struct rr_alloc *a, uint32_t g, uint64_t blk, uint32_t len,
				    pthread_mutex_t *lock)
{
	struct mb_pa *pa;

	for (pa = a->groups[g].pas; pa; pa = pa->gnext)
		if (pa->pstart < blk + len && blk < pa->pstart + pa->len &&
		    (!lock || pa_owner_lock(a, pa) == lock))
			return pa;
	return NULL;
}

/*
 * Discard every PA overlapping [blk, blk+len) (one group) before that
 * range changes hands behind the PA's back; the range itself is left out
 * of what goes back to the buddy when exclude is set.  A PA is found
 * through its group and unlinked under its owner's lock, taken first.
 */
static void pa_discard_overlap(struct rr_alloc *a, uint64_t blk, uint32_t len, int exclude)
{
	uint32_t g = group_of(a, blk);
	struct mb_group *grp = &a->groups[g];
	pthread_mutex_t *owner;
	struct mb_pa *hit;

	if (!atomic_load(&a->pa_count))
		return;
	for (;;) {
		pthread_mutex_lock(&grp->lock);
		hit = pa_overlapping(a, g, blk, len, NULL);
		owner = hit ? pa_owner_lock(a, hit) : NULL;
		pthread_mutex_unlock(&grp->lock);
		if (!hit)
			return;
		pthread_mutex_lock(owner);
		pthread_mutex_lock(&grp->lock);
		hit = pa_overlapping(a, g, blk, len, owner);
		pthread_mutex_unlock(&grp->lock);
		if (hit)
			pa_unlink_locked(a, hit, exclude ? blk : 0, exclude ? len : 0);
		pthread_mutex_unlock(owner);
		if (hit)
			pa_free(a, hit);
	}
}

/*
 * The inode's PA covering lblk, if any: hand out up to len of its blocks
 * from lblk on.  Returns 1 with out filled, 0 if there is none.
 */
static int pa_use(struct rr_alloc *a, ext2_ino_t ino, uint64_t lblk, uint32_t len, struct rr_extent *out)
{
	pthread_mutex_t *owner = ino_lock(a, ino);
	struct mb_pa *pa, *done = NULL;
	struct mb_group *grp;
	uint32_t n = 0, i0;

	pthread_mutex_lock(owner);
	for (pa = a->pa_hash[pa_bucket(a, ino)]; pa; pa = pa->inext)
		if (pa->ino == ino && lblk >= pa->lstart && lblk < pa->lstart + pa->len)
			break;
	if (!pa) {
		pthread_mutex_unlock(owner);
		return 0;
	}
	grp = &a->groups[pa->group];
	i0 = (uint32_t)(lblk - pa->lstart);
	pthread_mutex_lock(&grp->lock);
	while (n < len && i0 + n < pa->len && !mb_bit_test(pa->taken, i0 + n))
		n++;
	if (n) {
		/* The buddy has had these blocks since the PA was made: only the disk changes. */
		map_set_range(pa->taken, i0, n);
		pa->free -= n;
		take_locked(a, pa->group, (uint32_t)(pa->pstart + i0 - mb_group_first(a, pa->group)), n);
	}
	pthread_mutex_unlock(&grp->lock);
	if (!n) {
		/* Its block for lblk is in use: the PA no longer matches the file. */
		pa_unlink_locked(a, pa, 0, 0);
		pthread_mutex_unlock(owner);
		pa_free(a, pa);
		return 0;
	}
	out->pblk = pa->pstart + i0;
	out->len = n;
	if (!pa->free) {
		pa_unlink_locked(a, pa, 0, 0);
		done = pa;
	}
	pthread_mutex_unlock(owner);
	if (done)
		pa_free(a, done);
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
	int cpu = mb_cpu();

	return cpu > 0 ? (uint32_t)cpu % a->nlg : 0;
}

/* Small files: the data request (end, or i_size if larger) is within mb_stream_req blocks. */
static int group_alloc(const struct rr_alloc *a, const struct rr_alloc_req *req, uint32_t len)
{
	uint64_t isize_blk = (req->isize + a->fs->blocksize - 1) / a->fs->blocksize;
	uint64_t end = req->lblk + len;

	return MB_T(a, mb_group_prealloc) && (end > isize_blk ? end : isize_blk) <= MB_T(a, mb_stream_req);
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

/*
 * Put a locality group's PA on the list its free count says, after those
 * with no more free blocks; a list grown past 8 drops its smallest PAs
 * (but pa) onto *gone until 5 are left, as the kernel's
 * ext4_mb_add_n_trim.  lg_locks[pa->lg] held.
 */
static void lg_insert_locked(struct rr_alloc *a, struct mb_pa *pa, struct mb_pa **gone)
{
	struct mb_pa **head = lg_list(a, (uint32_t)pa->lg, pa->free), **pp, *q;
	unsigned int n = 1;

	for (pp = head; *pp && (*pp)->free <= pa->free; pp = &(*pp)->inext)
		n++;
	pa->inext = *pp;
	*pp = pa;
	for (q = pa->inext; q; q = q->inext)
		n++;
	for (pp = head; n > 8 && (q = *pp);) {
		if (q == pa) {
			pp = &q->inext;
			continue;
		}
		pa_unlink_locked(a, q, 0, 0);
		q->inext = *gone;
		*gone = q;
		if (--n <= 5)
			break;
	}
}

/*
 * Take len blocks from the front of one of the locality group's PAs: of
 * those with enough free, the one starting nearest the goal (kernel:
 * ext4_mb_use_preallocated and ext4_mb_check_group_pa).  What is left of
 * it goes back on the list its free count now says.
 */
static int lg_use(struct rr_alloc *a, uint32_t slot, uint32_t len, uint64_t goal, struct rr_extent *out)
{
	struct mb_pa *pa = NULL, *q, **head, *gone = NULL;
	struct mb_group *grp;
	uint64_t best = UINT64_MAX;

	pthread_mutex_lock(&a->lg_locks[slot]);
	for (head = lg_list(a, slot, len); head < &a->lg[(slot + 1) * MB_LG_ORDERS]; head++)
		for (q = *head; q; q = q->inext) {
			uint64_t d = q->pstart > goal ? q->pstart - goal : goal - q->pstart;

			if (q->free >= len && d < best) {
				best = d;
				pa = q;
			}
		}
	if (!pa) {
		pthread_mutex_unlock(&a->lg_locks[slot]);
		return 0;
	}
	lg_remove_locked(a, pa);
	grp = &a->groups[pa->group];
	pthread_mutex_lock(&grp->lock);
	out->pblk = pa->pstart;
	out->len = len;
	pa->pstart += len;
	pa->len -= len;
	pa->free -= len;
	take_locked(a, pa->group, (uint32_t)(out->pblk - mb_group_first(a, pa->group)), len);
	pthread_mutex_unlock(&grp->lock);
	if (pa->len) {
		lg_insert_locked(a, pa, &gone);
	} else {
		pa_unlink_locked(a, pa, 0, 0);
		pa->inext = gone;
		gone = pa;
	}
	pthread_mutex_unlock(&a->lg_locks[slot]);
	pa_release_list(a, gone);
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
	pthread_mutex_lock(ino_lock(a, ino));
	for (pa = a->pa_hash[pa_bucket(a, ino)]; pa; pa = pa->inext) {
		uint64_t ps = pa->lstart, pe = pa->lstart + pa->len;

		if (pa->ino != ino || pe <= s || ps >= e)
			continue;
		if (pe <= lblk && pe > s)
			s = pe;
		else if (ps > lblk && ps < e)
			e = ps;
	}
	pthread_mutex_unlock(ino_lock(a, ino));
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
		if (cr < CR_GOAL_LEN_SLOW && g != ac->g_ex.group && !atomic_load(&grp->block_uninit) &&
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

/* A search found [s, s + l) free in group g, whose lock it holds: the best so far. */
static void set_best(const struct rr_alloc *a, struct mb_ac *ac, uint32_t g, uint32_t s, uint32_t l)
{
	ac->b_ex.group = g;
	ac->b_ex.start = s;
	ac->b_ex.len = l;
	ac->seen_group = g;
	ac->seen_gen = a->groups[g].gen;
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
	if (ac->found > MB_T(a, mb_max_to_scan) && !(ac->hints & MB_HINT_FIRST)) {
		STAT_INC(a, breaks);
		ac->status = AC_BREAK;
		return;
	}
	if (ac->b_ex.len < ac->g_ex.len)
		return;
	if (finish_group || ac->found > MB_T(a, mb_min_to_scan))
		use_best(ac);
}

/*
 * Kernel: ext4_mb_measure_extent.  l is the extent as mb_find_extent
 * counts it, in whole buddy chunks: one exactly as long as the goal is
 * taken at once; otherwise, short of the goal the longest seen is kept,
 * and once one holds the goal the shortest that still does, until
 * check_limits (mb_min_to_scan extents, or the group's end) settles.  So a
 * request goes to the snuggest of the first runs that hold it, not to the
 * first (which left the kernel's small holes whole: FIDELITY.md, tree).
 * With rr_best_fit off (delalloc=close's better fit) a run is measured
 * whole and the first that holds the goal is taken.
 */
static void measure(struct rr_alloc *a, struct mb_ac *ac, uint32_t g, uint32_t s, uint32_t l)
{
	uint32_t want = ac->g_ex.len, best = ac->b_ex.len;

	ac->found++;
	STAT_INC(a, extents_scanned);
	STAT_INC(a, cr_extents[ac->cr]);
	if ((ac->hints & MB_HINT_FIRST) || l == want || (!MB_T(a, rr_best_fit) && l > want)) {
		set_best(a, ac, g, s, l);
		use_best(ac);
		return;
	}
	if (!best || (best < want ? l > best : l > want && l < best))
		set_best(a, ac, g, s, l);
	check_limits(a, ac, 0);
}

/*
 * Walk the group's free extents (kernel: ext4_mb_complex_scan_group), each
 * measured in buddy chunks from where the last one ended.  In the goal
 * group the walk starts at the goal and wraps, which keeps small requests
 * (metadata, short files) next to their goal; the kernel starts at the
 * first free block.
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
			/* The fast criteria pass over runs too short for the goal whole. */
			if (cr < CR_GOAL_LEN_SLOW && l < ac->g_ex.len) {
				pos = s + l;
				continue;
			}
			if (!(ac->hints & MB_HINT_FIRST) && MB_T(a, rr_best_fit))
				l = mb_buddy_chunk_extent(b, s, ac->g_ex.len);
			if (s + l > end && pass)
				l = end - s;
			pos = s + l;
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

	if (mb_load_group(a, g))
		return;
	/*
	 * Below CR_ANY_FREE a group whose lock another search or a free holds
	 * is passed over, not waited for (the kernel's ext4_mb_scan_group, 6.16
	 * on): two streams searching at once then part, as on ext4.
	 */
	if (cr >= CR_ANY_FREE || atomic_load(&grp->watched))
		pthread_mutex_lock(&grp->lock);
	else if (pthread_mutex_trylock(&grp->lock))
		return;
	ac->groups_scanned++;
	STAT_INC(a, groups_scanned);
	if (cr == CR_POWER2_ALIGNED) {
		unsigned int got;
		int64_t s = mb_buddy_find_order(grp->buddy, ac->two_order, &got);

		ac->found++;
		STAT_INC(a, extents_scanned);
		STAT_INC(a, cr_extents[cr]);
		if (s >= 0) {
			set_best(a, ac, g, (uint32_t)s, 1u << ac->two_order);
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
	if (n >= ac->g_ex.len) {
		set_best(a, ac, g, ac->g_ex.start, ac->g_ex.len);
		ac->b_ex.logical = ac->g_ex.logical;
	}
	pthread_mutex_unlock(&grp->lock);
	if (n < ac->g_ex.len)
		return 0;
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
	s0 = (uint32_t)(from - mb_group_first(a, g0));
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
				set_best(a, ac, g, s, l);
				use_best(ac);
				pthread_mutex_unlock(&grp->lock);
				return 1;
			}
		}
		pthread_mutex_unlock(&grp->lock);
	}
	return 0;
}

int mb_ext_of(const struct rr_alloc *a, uint64_t blk, uint32_t len, struct mb_ext *ex)
{
	if (!valid_block(a, blk))
		return -1;
	ex->group = group_of(a, blk);
	ex->start = (uint32_t)(blk - mb_group_first(a, ex->group));
	ex->len = len;
	return 0;
}

unsigned int mb_two_order(const struct rr_alloc *a, uint32_t len)
{
	unsigned int i = (unsigned int)mb_fls(len) - 1;

	return ((len & (len - 1)) == 0 && i + 1 >= MB_T(a, mb_order2_req) && i <= a->max_order) ? i : 0;
}

/* ---- the allocation pipeline (kernel: ext4_mb_new_blocks) ---- */

static uint64_t sub0(uint64_t x, uint64_t y)
{
	return x > y ? x - y : 0;
}

/* What a request may take, with da blocks promised and claimed taken but not yet on disk. */
static uint64_t avail_with(struct rr_alloc *a, int root, uint64_t da, uint64_t claimed)
{
	uint64_t keep = a->meta_resv + da + (root ? 0 : ext2fs_r_blocks_count(a->fs->super));

	return sub0(sub0(atomic_load(&a->sb_free), claimed), keep);
}

/* Blocks that ordinary (non-root) writers may still allocate. */
uint64_t rr_alloc_avail(struct rr_alloc *a, int root)
{
	return avail_with(a, root, atomic_load(&a->da_reserved), atomic_load(&a->claimed));
}

uint64_t rr_alloc_free(struct rr_alloc *a)
{
	return sub0(sub0(atomic_load(&a->sb_free), atomic_load(&a->claimed)), atomic_load(&a->da_reserved));
}

/* One compare-and-swap on the promise: two writers never promise the same free block. */
uint64_t rr_alloc_reserve(struct rr_alloc *a, uint64_t n, int root)
{
	uint64_t r = atomic_load(&a->da_reserved), got;

	do {
		uint64_t avail = avail_with(a, root, r, atomic_load(&a->claimed));

		got = n < avail ? n : avail;
	} while (got && !atomic_compare_exchange_weak(&a->da_reserved, &r, r + got));
	return got;
}

void rr_alloc_unreserve(struct rr_alloc *a, uint64_t n)
{
	uint64_t r = atomic_load(&a->da_reserved);

	do {
		if (n > r) {
			mb_log(LOG_WARNING, "mballoc: giving back %llu reserved blocks of %llu",
				(unsigned long long)n, (unsigned long long)r);
			n = r;
		}
	} while (n && !atomic_compare_exchange_weak(&a->da_reserved, &r, r - n));
}

uint64_t rr_alloc_reserved(struct rr_alloc *a)
{
	return atomic_load(&a->da_reserved);
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
	ac->o_ex.start = (uint32_t)(goal - mb_group_first(a, ac->o_ex.group));
	ac->o_ex.len = len;
	ac->o_ex.logical = req->lblk;
	ac->g_ex = ac->o_ex;
	ac->status = AC_CONTINUE;
	ac->seen_group = UINT32_MAX;
}

/* Grow a file's data request into its preallocation window. */
static void ac_normalize(struct rr_alloc *a, struct mb_ac *ac, const struct rr_alloc_req *req)
{
	struct mb_norm n = {
		.bbits = (unsigned int)__builtin_ctz(a->fs->blocksize),
		.bpg = a->bpg,
		.max_prealloc_kb = MB_T(a, mb_max_prealloc_kb),
		.lblk = req->lblk,
		.len = ac->o_ex.len,
		.isize = req->isize,
		.nbr = req->nbr,
	};
	uint64_t isize_blk = (req->isize + a->fs->blocksize - 1) / a->fs->blocksize;
	uint64_t end = req->lblk + ac->o_ex.len;

	if ((end > isize_blk ? end : isize_blk) > MB_T(a, mb_stream_req))
		ac->hints |= MB_HINT_STREAM;
	/* No block of the file on either side: its first window (a hint for policies: RRP_FIRST_WINDOW). */
	if (!req->nbr.pleft && !req->nbr.pright)
		ac->hints |= MB_HINT_FIRST_WINDOW;
	ac->hints |= MB_HINT_WINDOW;
	mb_normalize(&n);
	pa_adjust_overlap(a, req->ino, req->lblk, &n.start, &n.size);
	ac->g_ex.logical = n.start;
	ac->g_ex.len = (uint32_t)n.size;
	if (n.goal && valid_block(a, n.goal)) {
		ac->g_ex.group = group_of(a, n.goal);
		ac->g_ex.start = (uint32_t)(n.goal - mb_group_first(a, ac->g_ex.group));
		ac->hints |= MB_HINT_TRY_GOAL | MB_HINT_MERGE_GOAL;
	}
}

/*
 * Why [start, start + len) of group g is not free in the buddy, for a
 * refused answer: promised blocks the disk calls free, or used ones.
 * Group lock held.
 */
static enum mb_refusal busy_kind(struct rr_alloc *a, uint32_t g, uint32_t start, uint32_t len)
{
	struct mb_group *grp = &a->groups[g];
	const uint8_t *fmap = group_fmap(a, grp);
	uint32_t i;

	if (pa_overlapping(a, g, mb_group_first(a, g) + start, len, NULL))
		return MB_REFUSE_RESERVED;
	for (i = start; i < start + len; i++)
		if (mb_bit_test(grp->pmap, i) || mb_bit_test(fmap, i))
			return MB_REFUSE_RESERVED;
	return MB_REFUSE_USED;
}

/*
 * Mark the found extent used in the buddy, if it is still free: between a
 * search and its use the group was unlocked, and another request may have
 * taken part of it (kernel: s_mb_lost_chunks).  Returns with the group
 * locked, or -EAGAIN (unlocked).  An extent that no search of this
 * request saw free since the group last changed is no lost race but a
 * policy's wrong answer: -EPERM, its kind in ac->refused (mb_guard.c).
 */
static int grab_locked(struct rr_alloc *a, struct mb_ac *ac)
{
	struct mb_group *grp = &a->groups[ac->b_ex.group];

	pthread_mutex_lock(&grp->lock);
	if (mb_buddy_extent_at(grp->buddy, ac->b_ex.start, ac->b_ex.len) < ac->b_ex.len) {
		int lost = ac->seen_group == ac->b_ex.group && ac->seen_gen != grp->gen;

		if (!lost)
			ac->refused = busy_kind(a, ac->b_ex.group, ac->b_ex.start, ac->b_ex.len);
		pthread_mutex_unlock(&grp->lock);
		if (!lost)
			return -EPERM;
		STAT_INC(a, lost);
		return -EAGAIN;
	}
	if (mb_buddy_mark_used(grp->buddy, ac->b_ex.start, ac->b_ex.len))
		mb_fail("marking used blocks that are not free", ac->b_ex.group);
	group_update(a, ac->b_ex.group);
	return 0;
}

/* libext2fs's own allocation: the extent stays marked in the buddy until settle (see hint_add). */
static int use_hint(struct rr_alloc *a, struct mb_ac *ac, uint32_t len, struct rr_extent *out)
{
	struct mb_group *grp = &a->groups[ac->b_ex.group];
	struct mb_ac one = *ac;
	int ret;

	one.b_ex.len = ac->b_ex.len < len ? ac->b_ex.len : len;
	ret = grab_locked(a, &one);
	ac->refused = one.refused;
	if (ret)
		return ret;
	if (hint_add(a, mb_block_of(a, &one.b_ex), one.b_ex.len)) {
		mb_buddy_free(grp->buddy, one.b_ex.start, one.b_ex.len);
		group_update(a, one.b_ex.group);
		pthread_mutex_unlock(&grp->lock);
		return -ENOSPC;
	}
	pthread_mutex_unlock(&grp->lock);
	out->pblk = mb_block_of(a, &one.b_ex);
	out->len = one.b_ex.len;
	return 0;
}

/* Where in a window shorter than asked for the request's blocks sit (kernel's three tries). */
static uint64_t pa_lstart(const struct mb_ac *ac, uint32_t blen)
{
	uint64_t gend = ac->g_ex.logical + ac->orig_goal_len;

	if (blen >= ac->orig_goal_len)
		return ac->g_ex.logical;
	if (ac->o_ex.logical >= gend - blen)
		return gend - blen;
	if (ac->o_ex.logical + ac->o_ex.len <= ac->g_ex.logical + blen)
		return ac->g_ex.logical;
	return ac->o_ex.logical;
}

/*
 * Put the found extent to use: the request's part in use, the rest a PA
 * (the inode's, or for a small file its CPU's locality group's, which
 * replaces what was left of the last).  The PA's owner lock is taken
 * before the group's, so that a check never sees the window half made.
 * 0, -EAGAIN when the extent was lost to another request, or -EPERM
 * when it was not free to begin with (grab_locked).
 */
static int ac_use(struct rr_alloc *a, struct mb_ac *ac, int make_pa, struct rr_extent *out)
{
	uint32_t blen = ac->b_ex.len, g = ac->b_ex.group, gstart = ac->b_ex.start;
	uint64_t p = mb_block_of(a, &ac->b_ex);
	struct mb_pa *pa = NULL, *old = NULL;
	pthread_mutex_t *owner = NULL;
	uint64_t off = 0;
	uint32_t made;
	int lg = (ac->hints & MB_HINT_GROUP_ALLOC) != 0, ret;

	if (make_pa && blen > ac->o_ex.len)
		pa = calloc(1, sizeof(*pa) + (lg ? 0 : (blen + 7) / 8));
	if (!pa) {
		int ret;

		if (blen > ac->o_ex.len)
			ac->b_ex.len = blen = ac->o_ex.len;
		ret = grab_locked(a, ac);
		if (ret)
			return ret;
		take_locked(a, g, gstart, blen);
		pthread_mutex_unlock(&a->groups[g].lock);
		out->pblk = p;
		out->len = blen;
		return 0;
	}
	pa->group = g;
	pa->ino = ac->ino;
	pa->len = blen;
	out->len = ac->o_ex.len;
	if (lg) {
		pa->lg = (int32_t)mb_cpu_slot(a);
		pa->pstart = p + out->len;
		pa->len = pa->free = blen - out->len;
		out->pblk = p;
		owner = &a->lg_locks[pa->lg];
	} else {
		pa->lg = -1;
		pa->lstart = pa_lstart(ac, blen);
		off = ac->o_ex.logical - pa->lstart;
		pa->pstart = p;
		out->pblk = p + off;
		if (blen - off < out->len)
			out->len = (uint32_t)(blen - off);
		pa->free = blen - out->len;
		map_set_range(pa->taken, (uint32_t)off, out->len);
		owner = ino_lock(a, pa->ino);
	}
	/* Counted as made: once listed, other requests take from it. */
	made = pa->free;
	pthread_mutex_lock(owner);
	ret = grab_locked(a, ac);
	if (ret) {
		pthread_mutex_unlock(owner);
		free(pa);
		return ret;
	}
	take_locked(a, g, (uint32_t)(out->pblk - mb_group_first(a, g)), out->len);
	pa->gnext = a->groups[g].pas;
	a->groups[g].pas = pa;
	pthread_mutex_unlock(&a->groups[g].lock);
	if (lg) {
		lg_insert_locked(a, pa, &old);
	} else {
		pa->inext = a->pa_hash[pa_bucket(a, pa->ino)];
		a->pa_hash[pa_bucket(a, pa->ino)] = pa;
	}
	pthread_mutex_unlock(owner);
	atomic_fetch_add(&a->pa_count, 1);
	STAT_ADD(a, preallocated, made);
	pa_release_list(a, old);
	return 0;
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

/*
 * Run policy p on ac, and check where its answer lies (mb_guard.c): 0 with
 * the answer in ac->b_ex, its group loaded; or -ENOSPC.  A policy other
 * than regular that finds nothing, or whose answer is refused, has the
 * request served by regular.  The request's own fields are the engine's:
 * whatever a policy changed of them is put back.
 */
static int choose_checked(struct rr_alloc *a, struct mb_running *run, const struct mb_policy *p,
			  struct mb_ac *ac)
{
	const struct mb_ac asked = *ac;
	int why;

	for (;;) {
		ac->priv = p == run->policy ? run->priv : NULL;
		p->choose(a, p, ac);
		ac->ino = asked.ino;
		ac->hints = asked.hints;
		ac->o_ex = asked.o_ex;
		ac->orig_goal_len = asked.orig_goal_len;
		ac->g_ex.logical = asked.g_ex.logical;
		ac->priv = NULL;
		if (ac->b_ex.len) {
			why = mb_guard_where(a, &ac->b_ex);
			if (why < 0) {
				/* More than the window: the rest stays free. */
				if (ac->b_ex.len > ac->orig_goal_len)
					ac->b_ex.len = ac->orig_goal_len;
				return mb_load_group(a, ac->b_ex.group) ? -ENOSPC : 0;
			}
			mb_guard_refuse(a, run, (enum mb_refusal)why);
		}
		if (p == a->fallback)
			return -ENOSPC;
		p = a->fallback;
		*ac = asked;
	}
}

/*
 * A stream's window from the kernel's writeback cache, found whole, grows
 * over the free run that follows it in its group, up to one extent
 * (EXT_INIT_MAX_LEN blocks).  ext4_writepages maps a file's dirty range in
 * calls of at most 2048 blocks, each at the goal where the last one ended,
 * and finishes the file before it turns to the next: two files written at
 * once each end up whole (two 256 MiB writers: 3 extents a file).  The FUSE
 * writeback cache sends rrfuse the same pages interleaved every few MiB, and
 * windows taken in that order alternate between the files (13 extents a
 * file).  Taking the run now gives this file the blocks its next requests
 * would have had before the other file's; what it does not use goes back at
 * its last close, as any preallocation (kernel: ext4_discard_preallocations
 * from ext4_release_file), or when the device runs short.
 */
static void writeback_window(struct rr_alloc *a, struct mb_ac *ac, const struct rr_alloc_req *req)
{
	struct mb_group *grp = &a->groups[ac->b_ex.group];
	uint64_t start = ac->g_ex.logical, size = EXT_INIT_MAX_LEN, end;
	uint32_t more;

	if (ac->g_ex.len >= size)
		return;
	if (start + size > 0xffffffffULL)
		size = 0xffffffffULL - start;
	if (req->nbr.pright && start + size > req->nbr.lright)
		size = req->nbr.lright - start;
	pa_adjust_overlap(a, req->ino, req->lblk, &start, &size);
	end = start + size;
	if (start != ac->g_ex.logical || end <= ac->g_ex.logical + ac->g_ex.len)
		return;
	more = (uint32_t)(end - (ac->g_ex.logical + ac->g_ex.len));
	pthread_mutex_lock(&grp->lock);
	more = mb_buddy_extent_at(grp->buddy, ac->b_ex.start + ac->b_ex.len, more);
	pthread_mutex_unlock(&grp->lock);
	ac->b_ex.len += more;
	ac->g_ex.len += more;
	ac->orig_goal_len += more;
}

/* One try: a PA hit, else normalise, search, use (again if the find was lost).  0 or -ENOSPC. */
static int mb_new_blocks(struct rr_alloc *a, const struct rr_alloc_req *req, uint32_t len,
			 struct rr_extent *out)
{
	int file_data = (req->flags & RR_ALLOC_DATA) && req->ino && !(req->flags & RR_ALLOC_HINT_ONLY);
	struct mb_ac ac;
	int small, exact, ret, refused = 0;

	if (file_data && pa_use(a, req->ino, req->lblk, len, out)) {
		stat_pa_hit(a, req, len, out);
		if (MB_TRACING(a))
			mb_trace_prealloc(a, req, len, out);
		return 0;
	}
	small = file_data && group_alloc(a, req, len);
	exact = file_data && !small && (closed_to_end(a, req) || (req->flags & RR_ALLOC_EXACT));
	if (small && lg_use(a, mb_cpu_slot(a), len, req->goal, out)) {
		stat_pa_hit(a, req, len, out);
		if (MB_TRACING(a))
			mb_trace_prealloc(a, req, len, out);
		return 0;
	}
	do {
		struct mb_running *run = atomic_load(&a->run);
		uint32_t gp = MB_T(a, mb_group_prealloc);

		ac_init(a, &ac, req, len);
		if (req->flags & RR_ALLOC_DATA)
			ac.hints |= MB_HINT_DATA;
		if (file_data && (req->nbr.pleft || req->nbr.pright))
			ac.hints |= MB_HINT_FILE_GOAL;
		if (small) {
			/* Kernel: GROUP_ALLOC requests are not normalised; they ask for mb_group_prealloc. */
			ac.hints |= MB_HINT_GROUP_ALLOC;
			if (gp > len)
				ac.g_ex.len = gp;
		} else if (file_data && !exact) {
			ac_normalize(a, &ac, req);
		}
		ac.orig_goal_len = ac.g_ex.len;
		ret = choose_checked(a, run, refused || atomic_load(&run->off) ? a->fallback : run->policy,
				     &ac);
		if (ret)
			return ret;
		STAT_INC(a, reqs);
		if (ac.b_ex.len >= ac.o_ex.len)
			STAT_INC(a, success);
		if (ac.b_ex.group == ac.o_ex.group && ac.b_ex.start == ac.o_ex.start)
			STAT_INC(a, goal_hits);
		if (ac.b_ex.len == ac.orig_goal_len)
			STAT_INC(a, len_goal_hits);
		if ((req->flags & RR_ALLOC_WRITEBACK) && (ac.hints & MB_HINT_WINDOW) &&
		    ac.b_ex.len == ac.orig_goal_len)
			writeback_window(a, &ac, req);
		if (req->flags & RR_ALLOC_HINT_ONLY)
			ret = use_hint(a, &ac, len, out);
		else
			ret = ac_use(a, &ac, file_data && !exact, out);
		/* Not free when the policy chose it: regular serves the request. */
		if (ret == -EPERM) {
			mb_guard_refuse(a, run, (enum mb_refusal)ac.refused);
			if (refused++)
				return -ENOSPC;
			ret = -EAGAIN;
		}
	} while (ret == -EAGAIN);
	if (!ret && MB_TRACING(a))
		mb_trace_alloc(a, req, &ac, out, exact);
	return ret;
}

/*
 * Without the fs lock, the blocks a request may take are claimed first
 * (one compare-and-swap), so that requests running at once never take
 * more than the reserves leave; what it did not use is given back after.
 */
static uint64_t claim(struct rr_alloc *a, uint64_t len, int root, int all)
{
	uint64_t c = atomic_load(&a->claimed), got;

	do {
		uint64_t avail = all ? sub0(atomic_load(&a->sb_free), c) :
				 avail_with(a, root, atomic_load(&a->da_reserved), c);

		got = len < avail ? len : avail;
	} while (got && !atomic_compare_exchange_weak(&a->claimed, &c, c + got));
	return got;
}

/*
 * One block of the frozen sets for a request under the fs lock (see
 * rr_alloc_blocks): out of the set, in use on disk (or a hint, for
 * libext2fs to account), still used in the buddy.  0 or -ENOSPC.
 */
static int take_frozen(struct rr_alloc *a, const struct rr_alloc_req *req, struct rr_extent *out)
{
	struct mb_frozen *sets[2] = { &a->frozen, &a->committing };
	struct mb_group *grp;
	uint8_t *fmap;
	int k, taken;

	for (k = 0; k < 2; k++) {
		struct mb_frozen *f = sets[k];

		while (f->n) {
			struct rr_extent *e = &f->v[f->n - 1];
			uint64_t blk = e->pblk + e->len - 1;

			if (!--e->len)
				f->n--;
			atomic_fetch_sub(&f->blocks, 1);
			grp = &a->groups[group_of(a, blk)];
			pthread_mutex_lock(&grp->lock);
			fmap = group_fmap(a, grp);
			taken = fmap && mb_bit_test(fmap, blk - mb_group_first(a, group_of(a, blk)));
			if (taken)
				mb_bit_clear(fmap, blk - mb_group_first(a, group_of(a, blk)));
			pthread_mutex_unlock(&grp->lock);
			/* Taken on disk since (libext2fs marked it): not this one. */
			if (!taken || ext2fs_test_block_bitmap2(a->fs->block_map, blk))
				continue;
			if (req->flags & RR_ALLOC_HINT_ONLY) {
				if (hint_add(a, blk, 1))
					return -ENOSPC;
			} else {
				disk_mark(a, blk, 1, +1);
			}
			out->pblk = blk;
			out->len = 1;
			return 0;
		}
	}
	return -ENOSPC;
}

int rr_alloc_blocks(struct rr_alloc *a, const struct rr_alloc_req *req, struct rr_extent *out)
{
	/* Metadata may use every free block; a reserved request's blocks were counted when promised. */
	int all = !!(req->flags & (RR_ALLOC_METADATA | RR_ALLOC_RESERVED));
	int root = !!(req->flags & RR_ALLOC_USE_ROOT_RESV);
	int nolock = (req->flags & RR_ALLOC_NOLOCK) && a->host_lock;
	uint64_t len = req->len < a->bpg ? req->len : a->bpg;
	int ret;

	if (!len)
		return -EINVAL;
	if (nolock) {
		len = claim(a, len, root, all);
	} else {
		uint64_t avail = all ? sub0(atomic_load(&a->sb_free), atomic_load(&a->claimed)) :
				 rr_alloc_avail(a, root);

		if (len > avail)
			len = avail;
	}
	if (MB_TRACING(a))
		mb_trace_request(a, req, (uint32_t)len);
	if (!len)
		return -ENOSPC;
	tl_nolock = nolock;
	ret = mb_new_blocks(a, req, (uint32_t)len, out);
	/* Free space may sit in preallocations: give them all back and try once more. */
	if (ret == -ENOSPC && rr_alloc_discard_all(a))
		ret = mb_new_blocks(a, req, (uint32_t)len, out);
	/*
	 * Or in blocks freed since the last commit.  File data without the fs
	 * lock waits for a commit (as ext4_should_retry_alloc).  A request
	 * under the fs lock cannot commit in the middle of its operation; if
	 * its blocks reach the device only through the metadata cache, at the
	 * commit that also frees them, a frozen block will do.
	 */
	if (ret == -ENOSPC && a->commit && rr_alloc_frozen(a)) {
		tl_nolock = 0;
		if (!nolock) {
			if (!(req->flags & (RR_ALLOC_DATA | RR_ALLOC_IMMEDIATE)))
				ret = take_frozen(a, req, out);
		} else if (!a->commit(a->commit_arg)) {
			tl_nolock = 1;
			ret = mb_new_blocks(a, req, (uint32_t)len, out);
		}
	}
	tl_nolock = 0;
	if (nolock)
		atomic_fetch_sub(&a->claimed, len - (ret ? 0 : out->len));
	if (ret)
		return ret;
	if (req->flags & RR_ALLOC_RESERVED)
		rr_alloc_unreserve(a, out->len);
	if (!nolock)
		verify_range(a, out->pblk, out->len);
	return 0;
}

/* ---- freeing: one place for the buddy, whoever changed the bitmap ---- */

/* Add [blk, blk+len) to a frozen set, joining the last extent when it follows it.  fs lock held. */
static void frozen_add(struct mb_frozen *f, uint64_t blk, uint64_t len)
{
	struct rr_extent *last = f->n ? &f->v[f->n - 1] : NULL;

	if (!len)
		return;
	atomic_fetch_add(&f->blocks, len);
	if (last && last->pblk + last->len == blk && last->len + len <= UINT32_MAX) {
		last->len += (uint32_t)len;
		return;
	}
	if (rr_grow(&f->v, sizeof(*f->v), &f->cap, f->n + 1, 64)) {
		/* No memory to wait with: the blocks are free at once, as before the rule. */
		atomic_fetch_sub(&f->blocks, len);
		mb_log(LOG_WARNING, "mballoc: out of memory: %llu freed blocks reusable before their commit",
		       (unsigned long long)len);
		return;
	}
	f->v[f->n++] = (struct rr_extent){ .pblk = blk, .len = (uint32_t)len };
}

/* Whether every block of [blk, blk+n) (group offset off) is freed here for the first time: free_freed's test, run at once. */
static int whole_run_freed(struct rr_alloc *a, struct mb_group *grp, const uint8_t *fmap, uint64_t blk,
			   uint32_t off, uint32_t n)
{
	blk64_t used;

	return n && ext2fs_find_first_set_block_bitmap2(a->fs->block_map, blk, blk + n - 1, &used) == ENOENT &&
	       mb_bits_run(grp->pmap, off, n, 0) == n && mb_bits_run(grp->buddy->bits[0], off, n, 1) == n &&
	       mb_bits_run(fmap, off, n, 0) == n;
}

/*
 * Free in the buddy what the bitmap shows freed in [blk, blk+n) (one
 * group, no PA overlapping it any more), or, when the daemon commits
 * (rr_alloc_set_commit), freeze it: used in the buddy, marked in the
 * group's frozen map and the frozen set, until its commit is on disk.
 * Blocks the buddy has free already, or frozen already, are left alone: a
 * corrupt image can make libext2fs free a block twice (two files claiming
 * it), which must not bring the daemon down.  fs lock held.
 */
static void free_freed(struct rr_alloc *a, uint32_t g, uint64_t blk, uint32_t n)
{
	struct mb_group *grp = &a->groups[g];
	uint32_t off = (uint32_t)(blk - mb_group_first(a, g)), i, run = 0, twice = 0;
	int freeze = !!a->commit;
	uint8_t *fmap;

	pthread_mutex_lock(&grp->lock);
	/* A group frozen blocks lie in is loaded: its frozen map lives beside the buddy. */
	if (freeze && !grp->buddy && group_load_holding(a, g, off, n))
		freeze = 0;
	fmap = group_fmap(a, grp);
	if (!grp->buddy) {
		atomic_store(&grp->free, ext2fs_bg_free_blocks_count(a->fs, g));
		if (MB_T(a, discard))
			io_channel_discard(a->fs->io, blk, n);
		pthread_mutex_unlock(&grp->lock);
		return;
	}
	/* A whole extent freed once (a delete, a truncate): its runs whole, not block by block. */
	if (whole_run_freed(a, grp, fmap, blk, off, n)) {
		i = n;
		run = n;
	} else {
		i = 0;
	}
	for (; i <= n; i++) {
		int freed = i < n && !ext2fs_test_block_bitmap2(a->fs->block_map, blk + i) &&
			    !mb_bit_test(grp->pmap, off + i) && mb_buddy_test(grp->buddy, off + i) &&
			    !mb_bit_test(fmap, off + i);

		if (freed) {
			run++;
			continue;
		}
		twice += i < n;
		if (run && freeze) {
			map_set_range(fmap, off + i - run, run);
			frozen_add(&a->frozen, blk + i - run, run);
		} else if (run) {
			if (MB_T(a, discard))
				io_channel_discard(a->fs->io, blk + i - run, run);
			if (mb_buddy_free(grp->buddy, off + i - run, run))
				mb_fail("freeing blocks that are free", g);
		}
		run = 0;
	}
	group_update(a, g);
	pthread_mutex_unlock(&grp->lock);
	if (twice)
		mb_log(LOG_ERR, "mballoc: group %u: %u blocks freed that were free (corrupt filesystem?)",
			g, twice);
}

/*
 * Their commit is on disk: the frozen blocks of [blk, blk+n) (one group)
 * are free, but for those the bitmap shows taken again meanwhile.  -o
 * discard discards them now, after the commit and before the buddy lets
 * anyone have them.  fs lock held.
 */
static void thaw(struct rr_alloc *a, uint32_t g, uint64_t blk, uint32_t n)
{
	struct mb_group *grp = &a->groups[g];
	uint32_t off = (uint32_t)(blk - mb_group_first(a, g)), i, run = 0;
	uint8_t *fmap = group_fmap(a, grp);
	blk64_t used;

	pthread_mutex_lock(&grp->lock);
	/* The common case, a run frozen whole and still free in the bitmap: at once. */
	if (fmap && n && mb_bits_run(fmap, off, n, 1) == n &&
	    ext2fs_find_first_set_block_bitmap2(a->fs->block_map, blk, blk + n - 1, &used) == ENOENT) {
		mb_bits_fill(fmap, off, n, 0);
		i = n;
		run = n;
	} else {
		i = 0;
	}
	for (; fmap && i <= n; i++) {
		int freed = 0;

		if (i < n && mb_bit_test(fmap, off + i)) {
			mb_bit_clear(fmap, off + i);
			freed = !ext2fs_test_block_bitmap2(a->fs->block_map, blk + i);
		}
		if (freed) {
			run++;
			continue;
		}
		if (run && MB_T(a, discard))
			io_channel_discard(a->fs->io, blk + i - run, run);
		if (run && mb_buddy_free(grp->buddy, off + i - run, run))
			mb_fail("thawing blocks that are free", g);
		run = 0;
	}
	group_update(a, g);
	pthread_mutex_unlock(&grp->lock);
}

/* Split [blk, blk+len) at group ends for free_freed (or thaw).  fs lock held. */
static void free_range(struct rr_alloc *a, uint64_t blk, uint64_t len, int thaw_them)
{
	while (len) {
		uint32_t g = group_of(a, blk);
		uint64_t n = mb_group_first(a, g) + group_nblocks(a, g) - blk;

		if (n > len)
			n = len;
		if (thaw_them) {
			thaw(a, g, blk, (uint32_t)n);
		} else {
			pa_discard_overlap(a, blk, (uint32_t)n, 1);
			free_freed(a, g, blk, (uint32_t)n);
		}
		verify_range(a, blk, n);
		blk += n;
		len -= n;
	}
}

void rr_alloc_set_commit(struct rr_alloc *a, int (*commit)(void *arg), void *arg)
{
	a->commit = commit;
	a->commit_arg = arg;
}

void rr_alloc_commit_begin(struct rr_alloc *a)
{
	size_t i;

	if (MB_TRACING(a))
		mb_trace_commit(a, 0);
	if (!a->frozen.n)
		return;
	/* A failed commit's blocks are still waiting: they go with this one. */
	for (i = 0; i < a->frozen.n; i++)
		frozen_add(&a->committing, a->frozen.v[i].pblk, a->frozen.v[i].len);
	a->frozen.n = 0;
	atomic_store(&a->frozen.blocks, 0);
}

void rr_alloc_commit_end(struct rr_alloc *a)
{
	struct mb_frozen *f = &a->committing;

	/* One extent at a time out of the set, so that -o check sees the rest still frozen. */
	while (f->n) {
		struct rr_extent e = f->v[--f->n];

		atomic_fetch_sub(&f->blocks, e.len);
		free_range(a, e.pblk, e.len, 1);
	}
	if (MB_TRACING(a)) {
		mb_trace_commit(a, 1);
		mb_trace_flush(a);
	}
}

void rr_alloc_committing_each(struct rr_alloc *a, void (*fn)(void *arg, uint64_t blk, uint64_t len),
			      void *arg)
{
	size_t i;

	for (i = 0; i < a->committing.n; i++)
		fn(arg, a->committing.v[i].pblk, a->committing.v[i].len);
}

uint64_t rr_alloc_frozen(struct rr_alloc *a)
{
	return atomic_load(&a->frozen.blocks) + atomic_load(&a->committing.blocks);
}

/* [blk, blk+len) was just freed (clear in the bitmap already).  fs lock held. */
static void release_range(struct rr_alloc *a, uint64_t blk, uint64_t len)
{
	hints_forget(a, blk, len);
	free_range(a, blk, len, 0);
}

/* libext2fs marked [blk, blk+len) used: mark what the buddy still shows free.  fs lock held. */
static void claim_range(struct rr_alloc *a, uint64_t blk, uint64_t len)
{
	while (len) {
		uint32_t g = group_of(a, blk), off, end, s, l;
		uint64_t n = mb_group_first(a, g) + group_nblocks(a, g) - blk;
		struct mb_group *grp = &a->groups[g];

		if (n > len)
			n = len;
		/* A block taken from inside a PA: the PA is stale, give the rest of it back. */
		pa_discard_overlap(a, blk, (uint32_t)n, 0);
		pthread_mutex_lock(&grp->lock);
		if (!grp->buddy) {
			atomic_store(&grp->free, ext2fs_bg_free_blocks_count(a->fs, g));
		} else {
			off = (uint32_t)(blk - mb_group_first(a, g));
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

/*
 * How much of [blk, blk+n) (one group, its lock held) from blk on is
 * pending, or not, as blk is (*pending); a pending run leaves the map.
 */
static uint32_t take_pending_run(struct rr_alloc *a, uint32_t g, uint64_t blk, uint32_t n, int *pending)
{
	struct mb_group *grp = &a->groups[g];
	uint32_t off = (uint32_t)(blk - mb_group_first(a, g)), i;

	if (!grp->pmap) {
		*pending = 0;
		return n;
	}
	*pending = mb_bit_test(grp->pmap, off);
	i = mb_bits_run(grp->pmap, off, n, *pending);
	if (*pending) {
		mb_bits_fill(grp->pmap, off, i, 0);
		grp->npending -= i;
	}
	return i;
}

/* [blk, blk+len) in runs within a group, each pending or not and out of the map, to fn.  fs lock held. */
static void each_pending_run(struct rr_alloc *a, uint64_t blk, uint64_t len,
			     void (*fn)(struct rr_alloc *, uint64_t, uint32_t, int))
{
	while (len) {
		uint32_t g = group_of(a, blk), n;
		uint64_t rest = mb_group_first(a, g) + group_nblocks(a, g) - blk;
		struct mb_group *grp = &a->groups[g];
		int pending;

		if (rest > len)
			rest = len;
		pthread_mutex_lock(&grp->lock);
		n = take_pending_run(a, g, blk, (uint32_t)rest, &pending);
		pthread_mutex_unlock(&grp->lock);
		fn(a, blk, n, pending);
		blk += n;
		len -= n;
	}
}

/* Mapped: a pending run goes into libext2fs; one there already (taken under the fs lock) stays. */
static void map_run_mapped(struct rr_alloc *a, uint64_t blk, uint32_t n, int pending)
{
	blk64_t clear;

	if (!pending) {
		/* Taken with the fs lock held (no host lock set): in the bitmap already, every one. */
		if (!ext2fs_find_first_zero_block_bitmap2(a->fs->block_map, blk, blk + n - 1, &clear))
			mb_fail("mapping blocks that no request handed out", group_of(a, blk));
		return;
	}
	disk_mark(a, blk, n, +1);
	/* After the free count went down: a request may count them twice meanwhile, never not at all. */
	atomic_fetch_sub(&a->claimed, n);
	verify_range(a, blk, n);
}

void rr_alloc_mapped(struct rr_alloc *a, uint64_t pblk, uint32_t len)
{
	each_pending_run(a, pblk, len, map_run_mapped);
}

/*
 * Given back: a pending run never reached the disk, so it is free again
 * at once, with no commit to wait for; a run on disk is freed as any.
 */
static void free_run(struct rr_alloc *a, uint64_t blk, uint32_t n, int pending)
{
	uint32_t g = group_of(a, blk);
	struct mb_group *grp = &a->groups[g];

	if (!pending) {
		disk_mark(a, blk, n, -1);
		release_range(a, blk, n);
		return;
	}
	/* Handed out of a PA: the PA goes first, as for any free inside one. */
	pa_discard_overlap(a, blk, n, 1);
	pthread_mutex_lock(&grp->lock);
	if (mb_buddy_free(grp->buddy, (uint32_t)(blk - mb_group_first(a, g)), n))
		mb_fail("giving back pending blocks that are free", g);
	group_update(a, g);
	pthread_mutex_unlock(&grp->lock);
	atomic_fetch_sub(&a->claimed, n);
	verify_range(a, blk, n);
}

void rr_free_blocks(struct rr_alloc *a, uint64_t pblk, uint32_t len)
{
	if (MB_TRACING(a))
		mb_trace_free(a, pblk, len);
	each_pending_run(a, pblk, len, free_run);
}

/* ---- libext2fs's callbacks (fs lock held) ---- */

static void apply_range(struct rr_alloc *a, uint64_t blk, uint64_t num, int inuse)
{
	if (inuse > 0) {
		claim_range(a, blk, num);
	} else {
		if (MB_TRACING(a))
			mb_trace_free(a, blk, num);
		release_range(a, blk, num);
	}
}

/*
 * Where the run that libext2fs just changed, ending at end (in loaded
 * group g), starts: the blocks before end whose new state (inuse > 0:
 * used) the buddy does not have yet.  Pending blocks (free on disk, used in
 * the buddy, not yet applied) and preallocated ones (the same by design)
 * are not part of it, nor blocks chosen for libext2fs that it has not
 * accounted yet.  Group lock held, so no request adds pending blocks
 * meanwhile.
 */
static uint64_t changed_from(struct rr_alloc *a, uint32_t g, uint64_t end, int inuse)
{
	struct mb_group *grp = &a->groups[g];
	uint64_t gfirst = mb_group_first(a, g), s = end;
	struct mb_pa *pa;

	while (s > gfirst) {
		uint64_t b = s - 1;
		uint32_t off = (uint32_t)(b - gfirst);
		int disk = !!ext2fs_test_block_bitmap2(a->fs->block_map, b), r;

		r = disk == (inuse > 0) && mb_buddy_test(grp->buddy, off) != disk &&
		    !mb_bit_test(grp->pmap, off) && !(inuse < 0 && in_hint(a, b));
		for (pa = grp->pas; r && pa; pa = pa->gnext)
			if (b >= pa->pstart && b < pa->pstart + pa->len)
				r = 0;
		if (!r)
			break;
		s = b;
	}
	return s;
}

/*
 * libext2fs changed the bitmap for [blk, blk+num).  But e2fsprogs 1.47.0's
 * ext2fs_block_alloc_stats_range hands its callback the end of the range
 * and a count of 0 (its loop consumed both; later versions pass the
 * originals).  Then the range is recovered from the bitmap (changed_from).
 * Such a range lies in at most two groups (ext2fs_alloc_range takes what
 * our new_range chose, one group; punch frees one extent, at most a group
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
	atomic_store(&a->sb_free, ext2fs_free_blocks_count(fs->super));
	if (num) {
		apply_range(a, blk, num, inuse);
		return;
	}
	for (n = 0; n < 2 && end > a->first_data_block; n++) {
		uint32_t g = group_of(a, end - 1);
		uint64_t gfirst = mb_group_first(a, g), s;

		if (!a->groups[g].buddy) {
			mb_load_group(a, g);
			end = gfirst;
			continue;
		}
		pthread_mutex_lock(&a->groups[g].lock);
		s = changed_from(a, g, end, inuse);
		pthread_mutex_unlock(&a->groups[g].lock);
		if (s < end)
			apply_range(a, s, end - s, inuse);
		if (s > gfirst || s == end)
			break;
		end = gfirst;
	}
}

static void cb_stats(ext2_filsys fs, blk64_t blk, int inuse)
{
	cb_stats_range(fs, blk, 1, inuse);
}

void rr_alloc_tree_goal(struct rr_alloc *a, ext2_ino_t ino, uint64_t goal, unsigned int keep)
{
	a->tree.ino = ino;
	a->tree.goal = goal;
	a->tree.keep = keep;
	a->tree.on = 1;
}

void rr_alloc_tree_done(struct rr_alloc *a)
{
	a->tree.on = 0;
}

/*
 * libext2fs wants one block for its own metadata: choose it, libext2fs
 * accounts it.  An extent-tree block of an insertion the caller described
 * (rr_alloc_tree_goal) goes to that goal and is the inode's, as the
 * kernel's ext4_new_meta_blocks asks for it.
 */
static errcode_t cb_get_alloc_block(ext2_filsys fs, blk64_t goal, blk64_t *ret)
{
	struct rr_alloc *a = fs->priv_data;
	struct rr_alloc_req req = { .len = 1, .goal = goal,
				    .flags = RR_ALLOC_METADATA | RR_ALLOC_HINT_ONLY };
	struct rr_extent ex;

	if (a->tree.on) {
		req.ino = a->tree.ino;
		if (a->tree.keep)
			a->tree.keep--;
		else
			req.goal = a->tree.goal;
	}
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
		n = mb_buddy_extent_at(a->groups[g].buddy, (uint32_t)(goal - mb_group_first(a, g)),
				       len < a->bpg ? (uint32_t)len : a->bpg);
		pthread_mutex_unlock(&a->groups[g].lock);
		if ((flags & EXT2_NEWRANGE_MIN_LENGTH) && n < len)
			n = 0;
		if (n) {
			/* Held for libext2fs until settle, as every choice made for it. */
			struct mb_ac ac = { .b_ex = { .group = g, .start = (uint32_t)(goal - mb_group_first(a, g)),
						      .len = n } };

			if (use_hint(a, &ac, n, &ex))
				n = 0;
		}
		/*
		 * The goal held by a preallocation: that one goes and the goal
		 * is tried again.  Not every preallocation: libext2fs asks this
		 * for a block next to the last one of a directory or extent
		 * tree, mostly a block simply in use, and dropping them all
		 * each time left the locality groups' windows as holes (a
		 * copied tree: 184 free extents where the kernel leaves 78).
		 */
		if (!n && atomic_load(&a->pa_count)) {
			struct mb_pa *held;

			pthread_mutex_lock(&a->groups[g].lock);
			held = pa_overlapping(a, g, goal, 1, NULL);
			pthread_mutex_unlock(&a->groups[g].lock);
			if (held) {
				pa_discard_overlap(a, goal, 1, 0);
				return cb_new_range(fs, flags, goal, len, pblk, plen);
			}
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

/* a and the arrays it holds (attach's that failed to be made are NULL). */
static void alloc_free(struct rr_alloc *a)
{
	free(a->groups);
	free(a->frozen.v);
	free(a->committing.v);
	free(a->pa_hash);
	free(a->last_groups);
	free(a->lg);
	free(a->lg_locks);
	free(a->list_bits);
	free(a->hints);
	free(a->meta);
	free(a);
}

/*
 * The engine for fs with tunables t: its groups known by their descriptors
 * alone and the answer checks ready, but no policy running and libext2fs's
 * callbacks not taken yet (rr_alloc_attach, mb_attach.c, does both).
 */
int mb_engine_new(ext2_filsys fs, const struct rr_alloc_tunables *t, struct rr_alloc **out)
{
	struct rr_alloc *a = calloc(1, sizeof(*a));
	uint64_t blocks = ext2fs_blocks_count(fs->super);
	unsigned int bbits = (unsigned int)__builtin_ctz(fs->blocksize);
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	uint32_t g, i;

	if (!a)
		return -ENOMEM;
	a->t = *t;
	if (EXT2FS_CLUSTER_RATIO(fs) != 1) {
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
	if (a->t.mb_optimize_scan == RR_TUNABLE_AT_MOUNT)
		a->t.mb_optimize_scan = a->ngroups >= 16;
	/* Undecided by the mount (no device known): as the kernel on a device that is not rotational. */
	if (a->t.mb_max_linear_groups == RR_TUNABLE_AT_MOUNT)
		a->t.mb_max_linear_groups = 0;
	if (a->t.mb_group_prealloc > a->bpg)
		a->t.mb_group_prealloc = a->bpg;
	/* As the kernel's s_resv_clusters: 2 % of the blocks, at most 4096. */
	a->meta_resv = blocks / 50 < 4096 ? blocks / 50 : 4096;
	atomic_init(&a->sb_free, ext2fs_free_blocks_count(fs->super));
	a->groups = calloc(a->ngroups, sizeof(*a->groups));
	a->pa_nbuckets = 1024;
	a->pa_hash = calloc(a->pa_nbuckets, sizeof(*a->pa_hash));
	/* Stream goals: min(CPUs, groups / 4) slots, as the kernel's s_mb_nr_global_goals. */
	a->nr_last_groups = (uint32_t)(ncpu > 0 ? ncpu : 1);
	if (a->nr_last_groups > (a->ngroups + 3) / 4)
		a->nr_last_groups = (a->ngroups + 3) / 4;
	a->last_groups = calloc(a->nr_last_groups, sizeof(*a->last_groups));
	a->nlg = (uint32_t)(ncpu > 0 ? ncpu : 1);
	a->lg = calloc((size_t)a->nlg * MB_LG_ORDERS, sizeof(*a->lg));
	a->lg_locks = calloc(a->nlg, sizeof(*a->lg_locks));
	a->list_words = (a->ngroups + 63) / 64;
	a->list_bits = calloc((size_t)MB_NLISTS * MB_NUM_ORDERS_MAX * a->list_words, sizeof(*a->list_bits));
	if (!a->groups || !a->pa_hash || !a->last_groups || !a->lg || !a->lg_locks || !a->list_bits) {
		alloc_free(a);
		return -ENOMEM;
	}
	for (i = 0; i < MB_PA_LOCKS; i++)
		pthread_mutex_init(&a->pa_locks[i], NULL);
	pthread_mutex_init(&a->trace.lock, NULL);
	for (i = 0; i < a->nlg; i++)
		pthread_mutex_init(&a->lg_locks[i], NULL);
	/* Only the descriptors: buddies are built on first use. */
	for (g = 0; g < a->ngroups; g++) {
		struct mb_group *grp = &a->groups[g];

		pthread_mutex_init(&grp->lock, NULL);
		atomic_init(&grp->free, ext2fs_bg_free_blocks_count(fs, g));
		atomic_init(&grp->block_uninit, !!ext2fs_bg_flags_test(fs, g, EXT2_BG_BLOCK_UNINIT));
		atomic_init(&grp->largest_order, -1);
		atomic_init(&grp->avg_order, -1);
		atomic_init(&grp->list_order[0], -1);
		atomic_init(&grp->list_order[1], -1);
	}
	if (mb_guard_attach(a)) {
		mb_engine_free(a);
		return -ENOMEM;
	}
	*out = a;
	return 0;
}

/* libext2fs's allocations and bitmap changes come to a from now on (mb_engine_free gives them back). */
void mb_engine_hook(struct rr_alloc *a)
{
	ext2_filsys fs = a->fs;

	a->old_priv = fs->priv_data;
	fs->priv_data = a;
	ext2fs_set_alloc_block_callback(fs, cb_get_alloc_block, &a->old_get_alloc_block);
	ext2fs_set_new_range_callback(fs, cb_new_range, &a->old_new_range);
	ext2fs_set_block_alloc_stats_callback(fs, cb_stats, &a->old_stats);
	ext2fs_set_block_alloc_stats_range_callback(fs, cb_stats_range, &a->old_stats_range);
}

void rr_alloc_set_lock(struct rr_alloc *a, void (*lock)(void *), void (*unlock)(void *), void *arg)
{
	a->host_lock = lock;
	a->host_unlock = unlock;
	a->host_arg = arg;
}

/* a and all it holds, the policies' state too; libext2fs's callbacks given back if it took them. */
void mb_engine_free(struct rr_alloc *a)
{
	struct mb_running *run, *next;
	uint32_t g, i;

	if (a->fs->priv_data == a) {
		rr_alloc_settle(a);
		/* PAs were never on disk: dropping them leaves the bitmap holding only owned blocks. */
		rr_alloc_discard_all(a);
		ext2fs_set_alloc_block_callback(a->fs, a->old_get_alloc_block, NULL);
		ext2fs_set_new_range_callback(a->fs, a->old_new_range, NULL);
		ext2fs_set_block_alloc_stats_callback(a->fs, a->old_stats, NULL);
		ext2fs_set_block_alloc_stats_range_callback(a->fs, a->old_stats_range, NULL);
		a->fs->priv_data = a->old_priv;
	}
	rr_alloc_set_trace(a, NULL, NULL, 0, 0);
	pthread_mutex_destroy(&a->trace.lock);
	/* The running policy and every one a live switch replaced (kept for requests then in flight). */
	for (run = atomic_load(&a->run); run; run = next) {
		next = run->retired;
		a->policy_priv = run->priv;
		if (run->policy->fini)
			run->policy->fini(a, run->policy);
		free(run);
	}
	for (g = 0; g < a->ngroups; g++) {
		if (a->groups[g].buddy) {
			mb_buddy_destroy(a->groups[g].buddy);
			free(a->groups[g].buddy);
		}
		free(a->groups[g].pmap);
		pthread_mutex_destroy(&a->groups[g].lock);
	}
	for (i = 0; i < MB_PA_LOCKS; i++)
		pthread_mutex_destroy(&a->pa_locks[i]);
	for (i = 0; i < a->nlg; i++)
		pthread_mutex_destroy(&a->lg_locks[i]);
	alloc_free(a);
}

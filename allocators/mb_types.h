/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The allocator's state and the engine's request, as types only: struct
 * rr_alloc and what it holds, the allocation context, a policy's entry.
 * Shared by the engine (mballoc.c), the files it calls (mb_guard.c,
 * mb_trace.c) and those above it (mb_plugin.c, mb_search.c, policies.c,
 * mb_ctl.c, mb_attach.c): a header of its own, so that sharing a type
 * ties no file to another.  Policies do not see it, but for liar (fault
 * injection, allocators/policies.h): the built-ins use
 * include/rrfuse/policy.h only.  Nothing here is visible to the daemon; it
 * sees include/rrfuse/alloc.h only.  The design and the locking rules are
 * stated at the top of mballoc.c.
 */
#ifndef RR_MB_TYPES_H
#define RR_MB_TYPES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "mb_buddy.h"
#include "rrfuse/alloc.h"

/* The criteria, cheapest first (kernel names). */
enum mb_cr {
	CR_POWER2_ALIGNED,
	CR_GOAL_LEN_FAST,
	CR_BEST_AVAIL_LEN,
	CR_GOAL_LEN_SLOW,
	CR_ANY_FREE,
	MB_NUM_CRS
};

/* Optimised-scan lists, by the group's largest free order and its average fragment order. */
enum { MB_LIST_LARGEST, MB_LIST_AVG, MB_NLISTS };

/*
 * Per-group state.  The summary fields are copies of the buddy's, written
 * under the group lock and read without it by the scans as hints
 * (rechecked under the lock before use): atomics, as is the buddy pointer
 * (set once, by the group's load).
 */
struct mb_group {
	/*
	 * buddy, pmap, npending, pas list.  A search below CR_ANY_FREE passes a
	 * group whose lock is held over (mb_scan_group), but waits while -o
	 * check's verification holds it (watched): checking must not move blocks.
	 */
	pthread_mutex_t lock;
	_Atomic int watched;
	struct mb_buddy *_Atomic buddy;	/* NULL until first use (lazy load) */
	/*
	 * Blocks taken without the fs lock and not yet in libext2fs's bitmap
	 * (1 = pending): held there until the fs-locked section that maps them
	 * applies them (rr_alloc_mapped) or gives them back (rr_free_blocks).
	 * Allocated with the buddy, and followed in the same allocation by the
	 * frozen map (group_fmap): blocks freed and waiting for their commit
	 * (1 = frozen: free in the bitmap, used in the buddy), in a->frozen or
	 * a->committing; fs lock and this lock.  One pointer for both: on
	 * 16 TiB a second one in every group was 1 MiB.
	 */
	uint8_t *pmap;
	uint32_t npending;
	_Atomic uint32_t free;		/* in the buddy: preallocated blocks count as used */
	_Atomic uint32_t fragments;
	_Atomic int8_t largest_order;	/* -1: none free */
	_Atomic int8_t avg_order;
	_Atomic uint8_t block_uninit;	/* EXT2_BG_BLOCK_UNINIT as of the last fs-locked look */
	_Atomic int8_t list_order[MB_NLISTS];	/* the order whose list holds this group, -1 none */
	struct mb_pa *pas;		/* preallocations inside this group */
	uint32_t gen;			/* buddy changes (group_update): a lost race or a lie? */
};

/*
 * A preallocation: physical blocks [pstart, pstart+len) reserved in the
 * buddy, not on disk.  An inode PA (lg < 0) is for logical blocks
 * [lstart, lstart+len) of one file; a block is handed out by logical
 * position (its bit in taken is set) and free counts those not handed out.
 * A locality-group PA (lg >= 0) serves small files of that group from its
 * front: pstart and len move up as it is used, so free == len and taken is
 * not used.  Fields change under the PA's owner lock (pa_owner_lock) and
 * its group's lock both, so either one makes them readable.
 */
struct mb_pa {
	uint64_t lstart;
	uint64_t pstart;
	uint32_t len;
	uint32_t free;
	ext2_ino_t ino;
	uint32_t group;
	int32_t lg;			/* locality group, or -1 for an inode PA */
	struct mb_pa *inext;		/* inode hash chain, or the locality group's list */
	struct mb_pa *gnext;		/* group's list */
	uint8_t taken[];		/* inode PA: a bit per block, 1 = handed out */
};

/* A locality group's PA lists, by order of free blocks (kernel: PREALLOC_TB_SIZE). */
#define MB_LG_ORDERS 10

/* Request hints (EXT4_MB_HINT_* in the kernel). */
#define MB_HINT_DATA		0x01
#define MB_HINT_TRY_GOAL	0x02
#define MB_HINT_FIRST		0x04
#define MB_HINT_STREAM		0x08
#define MB_HINT_NOPREALLOC	0x10
#define MB_HINT_GROUP_ALLOC	0x20	/* a small file: from the locality group's PA */
#define MB_HINT_FILE_GOAL	0x40	/* the goal follows the file's own blocks (not its inode's group) */
#define MB_HINT_FIRST_WINDOW	0x80	/* a file's data with no block of it on either side */
#define MB_HINT_WINDOW		0x100	/* normalised into a preallocation window */
#define MB_HINT_MERGE_GOAL	0x200	/* WINDOW: the goal joins the window to the file's blocks */

enum mb_status { AC_CONTINUE, AC_FOUND, AC_BREAK };

/* A free extent in group coordinates; logical is the file block it will back. */
struct mb_ext {
	uint32_t group;
	uint32_t start;
	uint32_t len;
	uint64_t logical;
};

/* One allocation context, passed through the pipeline (kernel: ext4_allocation_context). */
struct mb_ac {
	ext2_ino_t ino;
	unsigned int hints;
	struct mb_ext o_ex;		/* original request (start = goal) */
	struct mb_ext g_ex;		/* normalised goal */
	uint32_t orig_goal_len;		/* g_ex.len before CR_BEST_AVAIL_LEN trims it */
	struct mb_ext b_ex;		/* best found */
	unsigned int two_order;		/* log2(goal len) if a power of two worth aligning, else 0 */
	enum mb_cr cr;
	enum mb_status status;
	uint32_t found;			/* extents measured (ac_found) */
	void *priv;			/* the running policy's own state (struct mb_running) */
	uint32_t groups_scanned;
	/* The group of the last extent an engine search set in b_ex, and its gen then (mb_guard.c). */
	uint32_t seen_group, seen_gen;
	int refused;			/* grab_locked's -EPERM: why (enum mb_refusal) */
};

/*
 * The criterion a search starts from (kernel: ext4_mb_regular_allocator):
 * a power-of-two length worth aligning looks for its buddy order first,
 * any other for the goal length.  The kernel's trace names a request its
 * goal served by this one too.
 */
static inline enum mb_cr mb_first_cr(const struct mb_ac *ac)
{
	return ac->two_order ? CR_POWER2_ALIGNED : CR_GOAL_LEN_FAST;
}

struct rrp_policy;

/* A policy as the engine runs it (allocators/policies.h says which are which). */
struct mb_policy {
	const char *name;
	/* A policy on the public API (include/rrfuse/policy.h, mb_plugin.c): the engine's wrapper runs it. */
	const struct rrp_policy *pub;
	/*
	 * Optional: init sets a->policy_priv (choose then finds it in
	 * ac->priv), fini frees it (a->policy_priv set to it).  init runs at
	 * attach and at a live switch (rrctl allocator=NAME, mb_ctl.c); fini
	 * only at detach, also for policies switched away from, as a request
	 * may still be running in them after the switch.
	 */
	int (*init)(struct rr_alloc *a, const struct mb_policy *self);
	void (*fini)(struct rr_alloc *a, const struct mb_policy *self);
	/*
	 * Find blocks for ac (leaves the found extent in ac->b_ex, not yet
	 * marked used).  ac->priv is NULL when the engine runs the policy as
	 * a fallback (regular, for a policy that found nothing or was refused).
	 */
	void (*choose)(struct rr_alloc *a, const struct mb_policy *self, struct mb_ac *ac);
};

/* Why the engine refused a policy's answer (mb_guard.c); rrctl -s counts them in this order. */
enum mb_refusal {
	MB_REFUSE_OUTSIDE,	/* not inside one group of the device */
	MB_REFUSE_METADATA,	/* superblock, descriptors, reserved GDT, bitmaps, inode tables, journal, MMP */
	MB_REFUSE_USED,		/* in use */
	MB_REFUSE_RESERVED,	/* free on disk but promised: a preallocation, pending, or freed before the last commit */
	MB_NREFUSE
};

/*
 * Statistics (mb_stats), in the kernel's meaning; counted only when mb_stats
 * is on (rrctl -s shows them in the kernel's format).  lost is the
 * kernel's s_mb_lost_chunks: a best extent taken by another allocator
 * between its search and its use (the search then runs again).
 */
struct mb_stats {
	atomic_ulong reqs, success, groups_scanned, extents_scanned, goal_hits, len_goal_hits;
	atomic_ulong stream_goal_hits, two_n_hits, breaks, lost, buddies_generated, buddies_time_ns;
	atomic_ulong preallocated, discarded;
	atomic_ulong cr_hits[MB_NUM_CRS], cr_considered[MB_NUM_CRS], cr_extents[MB_NUM_CRS];
	atomic_ulong cr_useless[MB_NUM_CRS];
	/* Counted whatever mb_stats says: a policy's answers the engine refused, by kind. */
	atomic_ulong refused[MB_NREFUSE], policies_off;
};

/*
 * A policy and its state; a live switch puts a new one in and keeps the old until detach.
 * refused, logged and off belong to mb_guard.c: answers refused, the kinds already
 * logged (a bit each), and set once the policy has been switched off for refusing too many.
 */
struct mb_running {
	const struct mb_policy *policy;
	void *priv;
	struct mb_running *retired;	/* the one it replaced */
	atomic_uint refused, logged;
	atomic_int off;
};

#define MB_PA_LOCKS 64		/* inode PA hash buckets share this many locks */

/*
 * -o alloc_trace (mb_trace.c): the file the lines go to, its name (for
 * rrctl) and the device numbers every line names.  lock: all of them, and
 * the order of the lines; taken alone, never with another lock held
 * inside it.
 */
struct mb_trace {
	pthread_mutex_t lock;
	FILE *f;
	char name[256];
	unsigned int major, minor;
	/* A free not written yet, which the next free may extend: its blocks and its line's head. */
	uint64_t free_blk, free_len;
	char free_head[96];
	unsigned int commits;	/* the commits begun (their jbd2 lines' transaction numbers) */
};

/*
 * The allocator.  Fields without a note are set at attach and read-only
 * after.  Tunables (t) change only under the fs lock, field by field with
 * atomic stores (rr_alloc_set); readers without the fs lock use MB_T().
 */
struct rr_alloc {
	ext2_filsys fs;
	struct rr_alloc_tunables t;
	/* What requests run: read once per request.  policy is the same, for fs-locked readers. */
	struct mb_running *_Atomic run;
	const struct mb_policy *policy;
	void *policy_priv;		/* set by a policy's init, handed to its fini (fs lock) */
	/* Serves a request the running policy could not, or whose answer was refused: regular. */
	const struct mb_policy *fallback;
	uint64_t meta_resv;
	uint32_t ngroups, bpg;
	uint64_t first_data_block;
	unsigned int max_order;
	uint32_t prefetch;		/* groups loaded ahead of a search (kernel: mb_prefetch) */
	struct mb_group *groups;

	/*
	 * Free space, as counts (the kernel's s_freeclusters_counter and
	 * s_dirtyclusters_counter): libext2fs's free count as of its last
	 * change (updated under the fs lock), blocks taken without the fs
	 * lock and not in that count yet, and blocks promised to delayed
	 * allocations.
	 */
	_Atomic uint64_t sb_free;
	_Atomic uint64_t claimed;
	_Atomic uint64_t da_reserved;
	/* Blocks chosen for libext2fs (HINT_ONLY), marked in the buddy until it accounts them (fs lock). */
	struct rr_extent *hints;
	uint32_t nhints;
	size_t hints_cap;
	/* Taken by an allocation without the fs lock that must load a group (rr_alloc_set_lock). */
	void (*host_lock)(void *);
	void (*host_unlock)(void *);
	void *host_arg;

	/* The optimised-scan lists: a bitmap of groups per (list, order), list_words words each. */
	_Atomic uint64_t *list_bits;
	uint32_t list_words;

	/* Inode preallocations by inode number; bucket b under pa_locks[b % MB_PA_LOCKS]. */
	pthread_mutex_t pa_locks[MB_PA_LOCKS];
	struct mb_pa **pa_hash;
	uint32_t pa_nbuckets;
	/*
	 * Locality groups, one per CPU: lg[i * MB_LG_ORDERS + k] lists group
	 * i's PAs whose free count has order k (the last list: that or more),
	 * in rising free count, chained by inext, under lg_locks[i] (kernel:
	 * lg_prealloc_list).
	 */
	struct mb_pa **lg;
	pthread_mutex_t *lg_locks;
	uint32_t nlg;
	atomic_ulong pa_count;

	/* Stream goals (s_mb_last_groups): group of the last stream allocation per slot. */
	atomic_uint *last_groups;
	uint32_t nr_last_groups;

	/*
	 * Blocks freed since the last commit began (frozen) and those freed
	 * before it, whose commit is being written (committing): used in the
	 * buddy, free in the bitmap, until that commit is on disk
	 * (rr_alloc_commit_begin/end).  Under the fs lock; the counts atomic.
	 * commit NULL: frees reach the buddy at once (no commits: unit tests).
	 */
	struct mb_frozen {
		struct rr_extent *v;
		size_t n, cap;
		_Atomic uint64_t blocks;
	} frozen, committing;
	int (*commit)(void *arg);
	void *commit_arg;

	/* Metadata blocks, sorted and merged, for the answer checks (mb_guard.c); set at attach. */
	struct rr_extent *meta;
	size_t nmeta;

	/* Set while the engine itself calls libext2fs's stats functions (fs lock held). */
	int in_engine;
	struct mb_stats stats;
	/* trace.f is set: read by every request without a lock, so that tracing off costs a branch. */
	atomic_int tracing;
	struct mb_trace trace;

	/*
	 * The extent-tree blocks libext2fs asks for while a caller inserts
	 * into ino's tree (rr_alloc_tree_goal): the first keep at libext2fs's
	 * own goal, the others at goal; off: libext2fs's goal.  fs lock.
	 */
	struct {
		ext2_ino_t ino;
		uint64_t goal;
		unsigned int keep;
		int on;
	} tree;

	void *old_priv;
	errcode_t (*old_get_alloc_block)(ext2_filsys, blk64_t, blk64_t *);
	errcode_t (*old_new_range)(ext2_filsys, int, blk64_t, blk64_t, blk64_t *, blk64_t *);
	void (*old_stats)(ext2_filsys, blk64_t, int);
	void (*old_stats_range)(ext2_filsys, blk64_t, blk_t, int);
};

/* A tunable, read where rrctl may change it meanwhile (no fs lock). */
#define MB_T(a, f) __atomic_load_n(&(a)->t.f, __ATOMIC_RELAXED)

/* The first block of group g. */
static inline uint64_t mb_group_first(const struct rr_alloc *a, uint32_t g)
{
	return a->first_data_block + (uint64_t)g * a->bpg;
}

/* The filesystem block an extent starts at. */
static inline uint64_t mb_block_of(const struct rr_alloc *a, const struct mb_ext *ex)
{
	return mb_group_first(a, ex->group) + ex->start;
}

#endif

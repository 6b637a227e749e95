/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rrfuse's block allocation policy API, for policies built outside rrfuse
 * (a shared object loaded with -o allocator=NAME or rrctl MNT allocator=NAME)
 * and for the built-in ones, which use nothing else (allocators/regular.c,
 * rralloc.c, firstfit.c).
 *
 * The engine (rrfuse's mballoc) owns free space: the groups' buddies,
 * request normalisation, preallocations, the on-disk bitmaps.  A policy
 * only answers one question per request: where should this extent go?
 * It looks at the device through the services below, on an opaque engine
 * handle, and answers with an extent.  The engine checks every answer (in
 * the device, not metadata, free); a wrong one is refused, counted
 * (rrctl MNT -s) and the request served by the engine's regular policy;
 * after 64 refusals the policy is switched off.  A policy can make a mount
 * slow, never its image inconsistent.
 *
 * A shared object exports one symbol, RRP_SYMBOL ("rrfuse_policy"), a
 * const struct rrp_policy whose abi is RRP_ABI_VERSION: a policy built
 * against another version of this header is refused when loaded.
 *
 * Threads: choose runs in many threads at once, without any lock the
 * policy can see; whatever state it keeps must be atomic or locked by the
 * policy.  init and fini run alone.  Blocks are filesystem blocks; group
 * g holds the blocks from first_data_block + g * blocks_per_group on.
 */
#ifndef RRFUSE_POLICY_H
#define RRFUSE_POLICY_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RRP_ABI_VERSION	1
#define RRP_SYMBOL	"rrfuse_policy"
/*
 * What was added within an ABI version, without changing a layout: a
 * policy built against an older minor loads unchanged; one that calls
 * functions of a newer minor than the rrfuse it is loaded into is refused
 * by dlopen (an undefined symbol, named in the error).
 *   1.0  the request, the answer, the services up to rrp_log.
 *   1.1  flags RRP_WINDOW and RRP_MERGE_GOAL; rrp_max_order,
 *        rrp_flex_meta_group, rrp_prefetch, rrp_stream_group,
 *        rrp_set_stream_group, rrp_tunable_id, rrp_tunable_get; the
 *        criteria search (RRP_CR_*, rrp_search_*), on which regular runs.
 */
#define RRP_ABI_MINOR	1

/* Request flags. */
#define RRP_DATA		0x01	/* file data (else metadata: directory, extent-tree, xattr blocks) */
#define RRP_STREAM		0x02	/* a large file (past mb_stream_req blocks) still open or written in part;
					   a closed file's whole data is neither this nor RRP_SMALL, as the kernel's
					   NOPREALLOC request is neither stream nor group allocation */
#define RRP_SMALL		0x04	/* a small file, served from its CPU's group preallocation */
#define RRP_HAS_GOAL		0x08	/* goal is worth trying as it is */
#define RRP_FILE_GOAL		0x10	/* the goal follows the file's own blocks */
#define RRP_FIRST_WINDOW	0x20	/* a file's data with no block of it on either side */
#define RRP_WINDOW		0x40	/* 1.1: goal_len is the preallocation window the request was grown into */
#define RRP_MERGE_GOAL		0x80	/* 1.1: (a window) the goal joins the window to the file's blocks */

/* One request, as the engine has normalised it. */
struct rrp_request {
	uint32_t ino;		/* owning inode, 0 for none */
	uint32_t flags;		/* RRP_* */
	uint64_t lblk;		/* first logical block the file needs */
	uint32_t len;		/* blocks it needs */
	uint32_t goal_len;	/* blocks the engine would like (the normalised window), >= len */
	uint64_t goal;		/* block to start at or near */
	uint32_t cpu;		/* this CPU's slot, < rrp_cpus() */
	uint32_t reserved[5];
};

/* An answer: blocks [start, start + len), inside one group. */
struct rrp_extent {
	uint64_t start;
	uint32_t len;
};

struct rrp_engine;	/* opaque */

struct rrp_policy {
	uint32_t abi;		/* RRP_ABI_VERSION */
	const char *name;
	/* Optional: set *priv (handed to choose and fini); nonzero refuses the policy. */
	int (*init)(struct rrp_engine *e, void **priv);
	/* Optional: runs at unmount (a switched-away policy may still have requests in flight). */
	void (*fini)(struct rrp_engine *e, void *priv);
	/* 0 with *out set (1 <= len <= goal_len), or nonzero: the engine's regular policy serves it. */
	int (*choose)(struct rrp_engine *e, void *priv, const struct rrp_request *r, struct rrp_extent *out);
};

/* Geometry. */
uint32_t rrp_groups(const struct rrp_engine *e);
uint32_t rrp_blocks_per_group(const struct rrp_engine *e);
uint64_t rrp_first_data_block(const struct rrp_engine *e);
uint64_t rrp_blocks(const struct rrp_engine *e);
uint32_t rrp_cpus(const struct rrp_engine *e);
/* The group's free blocks and maximal free runs, as of now (a hint: others allocate meanwhile). */
uint32_t rrp_group_free(const struct rrp_engine *e, uint32_t g);
uint32_t rrp_group_fragments(const struct rrp_engine *e, uint32_t g);
/*
 * The first free run of at least min blocks in group g at or after block
 * from (a block number, not an offset), cut to max: 0 with *out, or -1.
 */
int rrp_find_in_group(struct rrp_engine *e, uint32_t g, uint64_t from, uint32_t min, uint32_t max,
		      struct rrp_extent *out);
/* The same from block from to the device's end, then from its start: first fit by address. */
int rrp_first_fit(struct rrp_engine *e, uint64_t from, uint32_t min, uint32_t max, struct rrp_extent *out);
/* The goal itself, if free for len blocks: 0 with *out, or -1. */
int rrp_at_goal(struct rrp_engine *e, uint64_t goal, uint32_t len, struct rrp_extent *out);
/*
 * The optimised-scan lists: the lowest group in [from, end) whose largest
 * free chunk (list RRP_LIST_LARGEST) or average free run (RRP_LIST_AVG) is
 * of order order (2^order blocks), or -1.
 */
#define RRP_LIST_LARGEST	0
#define RRP_LIST_AVG		1
int rrp_list_find(struct rrp_engine *e, int list, int order, uint32_t from, uint32_t end);
/*
 * What the engine's regular policy (the kernel's mballoc) would answer
 * for this request as the engine made it (r is not read): 0 with *out,
 * or -1.  regular runs the criteria search (1.1) in the request: one the
 * policy had begun is over.
 */
int rrp_regular(struct rrp_engine *e, const struct rrp_request *r, struct rrp_extent *out);
/* A tunable by its rrctl name (mb_stream_req, ...): 0 with *value, or -1. */
int rrp_tunable(const struct rrp_engine *e, const char *name, unsigned int *value);
/* A line in the daemon's log; prio as syslog's (LOG_INFO, ...). */
void rrp_log(const struct rrp_engine *e, int prio, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- 1.1 ---- */

/* The largest buddy order: the lists hold orders 0 .. rrp_max_order (chunks of 2^order blocks). */
unsigned int rrp_max_order(const struct rrp_engine *e);
/* Is g the first group of a flex group of 4 or more, which holds its metadata (data leaves it alone)? */
int rrp_flex_meta_group(const struct rrp_engine *e, uint32_t g);
/* Load groups from g on ahead of a search (the engine says how many), so that the lists know them. */
void rrp_prefetch(struct rrp_engine *e, uint32_t g);
/*
 * The stream goals (the kernel's s_mb_last_groups): the group where the
 * last large file of ino's slot (ino modulo a number of slots the engine
 * picks) was given blocks, for the next one to start from; and setting it.
 * Kept by the engine across policy switches.
 */
uint32_t rrp_stream_group(const struct rrp_engine *e, uint32_t ino);
void rrp_set_stream_group(struct rrp_engine *e, uint32_t ino, uint32_t g);
/*
 * A tunable on the hot path: its id by its rrctl name (the same for every
 * mount of the process; -1 if there is no such number), and its value now
 * (0 for an id that is none).  rrctl changes values while choose runs.
 */
int rrp_tunable_id(const char *name);
unsigned int rrp_tunable_get(const struct rrp_engine *e, int id);

/*
 * The criteria search: the kernel's ext4_mb_regular_allocator in pieces,
 * so that a policy can run a cascade of criteria over the groups in the
 * order it likes (allocators/regular.c is the kernel's).  The criteria,
 * cheapest first, say which groups are worth a scan (rrp_search_good):
 *   POWER2_ALIGNED  a free buddy chunk of the search's order
 *                   (rrp_search_order); data stays out of flex groups'
 *                   metadata groups;
 *   GOAL_LEN_FAST   the average free run holds the search's length;
 *   BEST_AVAIL_LEN  the same, for a length the policy trimmed;
 *   GOAL_LEN_SLOW   that many free blocks;
 *   ANY_FREE        a free block.
 * The first three look only at groups loaded already, at groups the
 * kernel loads without reading (never initialised, a flex group's first)
 * and at the goal group; the others load what they look at.
 */
#define RRP_CR_POWER2_ALIGNED	0
#define RRP_CR_GOAL_LEN_FAST	1
#define RRP_CR_BEST_AVAIL_LEN	2
#define RRP_CR_GOAL_LEN_SLOW	3
#define RRP_CR_ANY_FREE		4
#define RRP_NUM_CRS		5

struct rrp_search;	/* opaque: the search state of the request being answered */

/*
 * Start the search of the request being answered, for len blocks from
 * block goal on (a goal outside the device: the first data block); NULL
 * outside choose.  One search per request, kept in the engine's request
 * (nothing is allocated): beginning again starts it afresh.  The engine
 * keeps the best extent found and applies the kernel's rules: a free run
 * of the whole length is taken at once; shorter ones are measured and the
 * longest kept; after mb_max_to_scan runs measured the search ends with
 * that, and once one of the whole length is kept it ends after
 * mb_min_to_scan runs or at the end of its group.
 */
struct rrp_search *rrp_search_begin(struct rrp_engine *e, uint64_t goal, uint32_t len);
/* Move the goal and change the length (a stream's own group, a trimmed length) without forgetting the best. */
void rrp_search_goal(struct rrp_search *s, uint64_t goal, uint32_t len);
/*
 * The order RRP_CR_POWER2_ALIGNED looks for: log2 of the length at begin
 * when that is a power of two worth aligning (2^(mb_order2_req - 1)
 * blocks or more, order at most rrp_max_order); 0: skip that criterion.
 */
unsigned int rrp_search_order(const struct rrp_search *s);
/* The criterion to start from: RRP_CR_POWER2_ALIGNED when rrp_search_order is nonzero, else RRP_CR_GOAL_LEN_FAST. */
int rrp_search_first_cr(const struct rrp_search *s);
/* The goal block itself for the whole length (kernel: find_by_goal): nonzero when found; the search is then done. */
int rrp_search_at_goal(struct rrp_search *s);
/* Is group g worth a scan at criterion cr?  The goal group's scan starts at the goal and wraps. */
int rrp_search_good(struct rrp_search *s, uint32_t g, int cr);
/* Scan group g at cr: nonzero when the search is done (found, or its limits reached). */
int rrp_search_scan(struct rrp_search *s, uint32_t g, int cr);
int rrp_search_done(const struct rrp_search *s);
/* For rrctl -s (useless_loops): criterion cr went through its groups and the search is not done. */
void rrp_search_exhausted(struct rrp_search *s, int cr);
/*
 * The best extent found: 0 with *out, or -1.  rrctl -s counts it as a hit
 * of the criterion last asked about, unless rrp_search_at_goal found it.
 */
int rrp_search_result(struct rrp_search *s, struct rrp_extent *out);

#ifdef __cplusplus
}
#endif

#endif

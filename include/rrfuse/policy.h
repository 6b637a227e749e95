/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rrfuse's block allocation policy API, for policies built outside rrfuse
 * (a shared object loaded with -o allocator=NAME or rrctl MNT allocator=NAME)
 * and for the built-in ones that use it (allocators/firstfit.c, rralloc.c).
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

/* Request flags. */
#define RRP_DATA		0x01	/* file data (else metadata: directory, extent-tree, xattr blocks) */
#define RRP_STREAM		0x02	/* a large file (past mb_stream_req blocks) */
#define RRP_SMALL		0x04	/* a small file, served from its CPU's group preallocation */
#define RRP_HAS_GOAL		0x08	/* goal is worth trying as it is */
#define RRP_FILE_GOAL		0x10	/* the goal follows the file's own blocks */
#define RRP_FIRST_WINDOW	0x20	/* a file's data with no block of it on either side */

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
/* What the engine's regular policy (the kernel's mballoc) would answer: 0 with *out, or -1. */
int rrp_regular(struct rrp_engine *e, const struct rrp_request *r, struct rrp_extent *out);
/* A tunable by its rrctl name (mb_stream_req, ...): 0 with *value, or -1. */
int rrp_tunable(const struct rrp_engine *e, const char *name, unsigned int *value);
/* A line in the daemon's log; prio as syslog's (LOG_INFO, ...). */
void rrp_log(const struct rrp_engine *e, int prio, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif

#endif

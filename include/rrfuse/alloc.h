/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rrfuse block allocation interface.
 *
 * Every block that rrfuse hands out or takes back goes through here: file
 * data from the data path, and libext2fs's own metadata blocks (extent-tree
 * nodes, directory blocks, xattr blocks) through the callbacks that
 * rr_alloc_attach() installs.  There is therefore exactly one owner of free
 * space, and an allocator engine can be swapped in behind these calls without
 * touching the data path.
 *
 * The engine behind it is allocators/mballoc.c (the kernel's mballoc: buddy
 * per group, request normalisation, inode preallocations, the criteria
 * cascade) with a policy chosen by name (allocators/policies.h).
 *
 * Locking: the caller holds the fs lock (libext2fs's bitmaps are the
 * state), except for rr_alloc_blocks with RR_ALLOC_NOLOCK, rr_alloc_avail,
 * rr_alloc_free and the promise calls, which need no lock.  Blocks taken
 * without the fs lock reach libext2fs's bitmap and counts only at
 * rr_alloc_mapped, in the fs-locked section that maps them: no commit
 * writes a bitmap that holds blocks no file owns (a crash would leave
 * them lost), nor a map whose blocks the bitmap calls free.
 */
#ifndef RRFUSE_ALLOC_H
#define RRFUSE_ALLOC_H

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <ext2fs/ext2fs.h>

/* Request flags. */
#define RR_ALLOC_DATA		0x0001	/* file data (counts against quotas of free space) */
#define RR_ALLOC_METADATA	0x0002	/* extent/dir/xattr block: may use the metadata reserve */
#define RR_ALLOC_USE_ROOT_RESV	0x0004	/* caller may use the root-reserved blocks */
#define RR_ALLOC_HINT_ONLY	0x0008	/* pick blocks but do not account them (libext2fs will) */
#define RR_ALLOC_RESERVED	0x0010	/* DATA: blocks rr_alloc_reserve promised (a delayed allocation) */
/*
 * DATA: the file is closed and the request runs to its end, so its size
 * is final: ask for exactly that, with no preallocation (as ext4 does for
 * a closed file's delayed allocation, ext4_mb_group_or_file).
 */
#define RR_ALLOC_CLOSED		0x0020
/*
 * The caller does not hold the fs lock (file data only): the blocks are
 * held in the engine, used for every other request and free in
 * libext2fs's bitmap, until the caller maps them (rr_alloc_mapped) or
 * gives them back (rr_free_blocks).  The allocator takes the fs lock
 * itself (rr_alloc_set_lock) only to load a group it has not used before.
 */
#define RR_ALLOC_NOLOCK		0x0040
/*
 * METADATA written to the device at once, not through the metadata cache
 * (a symlink's target): never a block freed since the last commit.
 */
#define RR_ALLOC_IMMEDIATE	0x0080
/*
 * DATA: a stream that reaches rrfuse through the kernel's writeback cache.
 * The kernel's own writeback maps one file's dirty pages before the next
 * file's; FUSE's interleaves files every few MiB.  The engine gives such a
 * request the blocks the file's next requests would have had first (see
 * writeback_window in allocators/mballoc.c).
 */
#define RR_ALLOC_WRITEBACK	0x0100
/*
 * DATA: exactly this, no window and no preallocation (fallocate of a
 * range one extent can hold: ext4_alloc_file_blocks's
 * EXT4_GET_BLOCKS_NO_NORMALIZE, which mballoc sees as HINT_NOPREALLOC).
 */
#define RR_ALLOC_EXACT		0x0200

/* The file's allocated blocks around a hole, for normalisation (kernel: lleft/pleft, lright/pright). */
struct rr_alloc_nbr {
	uint64_t lleft, pleft;	/* last mapped block before the request; pleft 0 = none */
	uint64_t lright, pright;	/* first mapped block after it; pright 0 = none */
};

struct rr_alloc_req {
	ext2_ino_t ino;		/* owner; 0 for none */
	uint64_t lblk;		/* logical block in the owner */
	uint32_t len;		/* blocks wanted; the answer may be shorter */
	uint64_t goal;		/* physical block to start near; 0 = none */
	unsigned int flags;
	uint64_t isize;		/* DATA: the file's size in bytes (normalisation) */
	struct rr_alloc_nbr nbr;	/* DATA: allocated neighbours, zero if unknown */
};

/*
 * Tunables, with the kernel's sysfs names and defaults, listed once in
 * rrfuse/tunables.def (mb_tunables.c validates every one of them).  check is the debug option:
 * verify after every operation that the buddy equals bitmap + preallocations.
 */
#define RR_POLICY_NAME_LEN 64	/* rrctl's value field */
/*
 * A default the mount decides, as the kernel's ext4_mb_init does (tunables.def):
 * mb_max_linear_groups by whether the device is rotational (src/core/mount.c),
 * mb_optimize_scan by the number of groups (rr_alloc_attach).
 */
#define RR_TUNABLE_AT_MOUNT UINT_MAX

struct rr_alloc_tunables {
#define MB_TUNABLE(name, kind, max, def) unsigned int name;
#include "rrfuse/tunables.def"
#undef MB_TUNABLE
	unsigned int check;			/* 0 */
	unsigned int discard;			/* -o discard: freed blocks are discarded at once */
	char policy[RR_POLICY_NAME_LEN];	/* "regular", a policy's NAME (NAME.so) or a path to one */
	char policy_dir[256];			/* -o policy_dir: where NAME.so is looked for; "" = installed */
	unsigned int shared;			/* -o allow_other: load policies only from root's files */
};

void rr_alloc_tunables_default(struct rr_alloc_tunables *t);
/* The i'th built-in policy a user picks (-o allocator=NAME) and what it is (*about); NULL past the last. */
const char *rr_alloc_builtin_policy(unsigned int i, const char **about);
/*
 * Load the policy t names if it is no built-in (a NAME.so, a path: see
 * allocators/policies.c), so that a mount refuses it before opening the
 * image; 0, or -EINVAL with the reason in err.  An empty name is the default.
 */
int rr_alloc_policy_check(const struct rr_alloc_tunables *t, char *err, size_t errlen);
/*
 * Set one tunable by its name (the kernel's sysfs name, or the alias
 * max_prealloc_kb, or allocator) from text.  Returns 0, or -ENOENT for an
 * unknown name, -EINVAL for a bad value, with a one-line reason in err.
 */
int rr_alloc_tunable_set(struct rr_alloc_tunables *t, const char *name, const char *value,
			 char *err, size_t errlen);
/* Is name=value an allocator option?  (For the daemon's option parser.) */
int rr_alloc_is_tunable(const char *name);
/* The i'th tunable's name (0, 1, ...; aliases left out), NULL past the last. */
const char *rr_alloc_tunable_name(unsigned int i);
/* A tunable's value as text (as rr_alloc_tunable_set takes it); 0 or -ENOENT with err. */
int rr_alloc_tunable_get(const struct rr_alloc_tunables *t, const char *name, char *buf, size_t len,
			 char *err, size_t errlen);

struct rr_extent {
	uint64_t pblk;
	uint32_t len;
};

struct rr_alloc;

/*
 * Where the allocator's messages go (warnings, corruption it meets, the
 * mb_stats report at detach): one line each, without a newline, with a
 * syslog priority.  Until set: stderr.  For the whole process; set it before
 * attaching.  Returns the previous one.
 */
typedef void (*rr_alloc_log_fn)(int prio, const char *fmt, va_list ap);
rr_alloc_log_fn rr_alloc_set_log(rr_alloc_log_fn fn);

/*
 * Create the allocator for an open filesystem (bitmaps read) and hook
 * libext2fs's own allocations and frees into it.  t NULL = defaults.
 * Detach drops every preallocation (they never reach the disk).
 */
int rr_alloc_attach(ext2_filsys fs, const struct rr_alloc_tunables *t, struct rr_alloc **out);
void rr_alloc_detach(struct rr_alloc *a);
/*
 * -o alloc_trace: from now on every request, search, preallocation use
 * and free is a line in f, in the text the kernel's tracefs prints for
 * ext4_request_blocks, ext4_mballoc_alloc, ext4_mballoc_prealloc and
 * ext4_free_blocks (allocators/mb_trace.c: which fields rrfuse fills and
 * how), naming device major,minor.  f belongs to the allocator from here:
 * it is closed at the next call or at detach.  f NULL stops tracing.
 * name is what rr_alloc_trace_name reports ("" when off).  Returns 0, or
 * -errno when the file replaced lost lines (the log says so too).  Any
 * lock or none.
 */
int rr_alloc_set_trace(struct rr_alloc *a, FILE *f, const char *name, unsigned int major, unsigned int minor);
void rr_alloc_trace_name(struct rr_alloc *a, char *buf, size_t len);
/*
 * This thread's requests run as if made on CPU cpu (its locality group,
 * its per-CPU cursor), whatever CPU it runs on: a replay gives each request
 * the CPU its trace names.  -1: the CPU the thread runs on (the default).
 */
void rr_alloc_use_cpu(int cpu);
/*
 * How RR_ALLOC_NOLOCK requests take and drop the fs lock (to load a group).
 * Without it they run as if the caller held the lock (single-threaded use).
 */
void rr_alloc_set_lock(struct rr_alloc *a, void (*lock)(void *), void (*unlock)(void *), void *arg);
/*
 * Blocks handed out are mapped now (fs lock held, in the section whose
 * metadata maps them): those an RR_ALLOC_NOLOCK request took go into
 * libext2fs's bitmap, descriptors and counts.
 */
void rr_alloc_mapped(struct rr_alloc *a, uint64_t pblk, uint32_t len);
/*
 * The caller is about to insert into ino's extent tree, and libext2fs may
 * split it: the tree blocks it allocates go near goal, as the kernel's
 * ext4_ext_new_meta_block puts them near the data being mapped
 * (ext4_ext_find_goal), except the first keep, which keep libext2fs's own
 * goal (a tree grown in depth: both put that block just before the old
 * root's first child), until rr_alloc_tree_done.  fs lock held.
 */
void rr_alloc_tree_goal(struct rr_alloc *a, ext2_ino_t ino, uint64_t goal, unsigned int keep);
void rr_alloc_tree_done(struct rr_alloc *a);
/*
 * With the fs lock about to be dropped: blocks chosen for libext2fs's own
 * allocations (its callbacks) that it did not account after all go back.
 */
void rr_alloc_settle(struct rr_alloc *a);

/*
 * Give back the inode's preallocated blocks: before its blocks are freed
 * (truncate, punch, delete) and at the last close of a writer.
 */
void rr_alloc_discard_inode(struct rr_alloc *a, ext2_ino_t ino);
/* Give back every preallocation; returns the blocks released. */
uint64_t rr_alloc_discard_all(struct rr_alloc *a);
/* Blocks held in preallocations (free on disk, reserved in memory). */
uint64_t rr_alloc_prealloc_blocks(struct rr_alloc *a);
/* Verify every loaded group: buddy == bitmap + preallocations.  0 or -EIO (and a message). */
int rr_alloc_verify(struct rr_alloc *a);

/*
 * Allocate up to req->len contiguous blocks near req->goal and mark them in
 * use.  Returns 0 with *out filled (1 <= out->len <= req->len), or -ENOSPC.
 * With RR_ALLOC_RESERVED the blocks handed out are taken from the promise
 * (rr_alloc_reserve) in the same step.
 */
int rr_alloc_blocks(struct rr_alloc *a, const struct rr_alloc_req *req, struct rr_extent *out);

/*
 * Delayed allocation: promise up to n blocks to data that has no blocks
 * yet (kernel: dirty clusters).  Returns how many were promised (0: none
 * free).  Promised blocks are not available to other allocations; the
 * flush allocates them with RR_ALLOC_RESERVED, dropping the data gives the
 * promise back with rr_alloc_unreserve.  No lock needed.
 */
uint64_t rr_alloc_reserve(struct rr_alloc *a, uint64_t n, int root);
void rr_alloc_unreserve(struct rr_alloc *a, uint64_t n);
uint64_t rr_alloc_reserved(struct rr_alloc *a);

/*
 * Return an extent that rr_alloc_blocks handed out and that no file
 * references: blocks on disk wait for the commit that frees them, blocks
 * an RR_ALLOC_NOLOCK request took and nobody mapped are free at once.
 */
void rr_free_blocks(struct rr_alloc *a, uint64_t pblk, uint32_t len);

/*
 * Blocks freed are not handed out again before the commit that frees them
 * on disk is on disk (the kernel's rule, ext4_mb_free_metadata): file data
 * written into a block that the image still maps to a deleted file would
 * show through that file after a crash.  commit(arg) runs a commit and
 * returns 0 once it is on disk; the allocator calls it, without the fs
 * lock, when file data finds no other free space (ENOSPC otherwise).
 * Until set, frees reach the free space at once.  The daemon brackets each
 * commit: begin under the fs lock as the commit writes the metadata (what
 * was freed until then waits for this commit), end under the fs lock after
 * the flush (those blocks are free from now on; -o discard discards them
 * then).  A failed commit calls neither end nor anything: its blocks wait
 * for the next.
 */
void rr_alloc_set_commit(struct rr_alloc *a, int (*commit)(void *arg), void *arg);
void rr_alloc_commit_begin(struct rr_alloc *a);
void rr_alloc_commit_end(struct rr_alloc *a);
/* Blocks freed and waiting for their commit. */
uint64_t rr_alloc_frozen(struct rr_alloc *a);
/* The extents the commit begun last frees (after rr_alloc_commit_begin), to fn.  fs lock held. */
void rr_alloc_committing_each(struct rr_alloc *a, void (*fn)(void *arg, uint64_t blk, uint64_t len),
			      void *arg);

/*
 * Blocks that ordinary (non-root) writers may still allocate, and the
 * reserve kept back for metadata growth (extent-tree splits, directory
 * blocks) so that a full filesystem never corrupts itself.
 */
uint64_t rr_alloc_avail(struct rr_alloc *a, int root);
uint64_t rr_alloc_meta_reserve(struct rr_alloc *a);
/* Free blocks as statfs shows them: not in use, not taken, not promised. */
uint64_t rr_alloc_free(struct rr_alloc *a);

/*
 * rrctl (allocators/mb_ctl.c), fs lock held as for every call here.
 * Get or set a tunable of the running allocator: set validates through
 * rr_alloc_tunable_set (a refused value changes nothing; err says why) and
 * applies at once, including a switch of policy (allocator=NAME).
 * Returns 0, -ENOENT (unknown name) or -EINVAL.
 */
int rr_alloc_get(struct rr_alloc *a, const char *name, char *buf, size_t len, char *err, size_t errlen);
int rr_alloc_set(struct rr_alloc *a, const char *name, const char *value, char *err, size_t errlen);
uint32_t rr_alloc_ngroups(struct rr_alloc *a);
/* Group g's buddy summary (loading the group if needed): 0, -EINVAL (no such group) or -errno. */
struct rrctl_group;
struct rrctl_stats;
int rr_alloc_group_info(struct rr_alloc *a, uint32_t g, struct rrctl_group *out);
void rr_alloc_stats(struct rr_alloc *a, struct rrctl_stats *out);

#endif

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rrctl's wire format: ioctls on the root directory of an rrfuse mount.
 *
 * FUSE passes a "restricted" ioctl's buffer by the size and direction that
 * its number encodes (_IOWR: copied in and back out, at most 16 KiB), so
 * every command is one fixed-size struct.  Each starts with version
 * (RRCTL_VERSION); the daemon refuses another version, a short buffer or a
 * string that is not NUL-terminated within its field with EINVAL, and an
 * unknown command with ENOTTY.
 *
 * A command the daemon understood returns 0 from ioctl() and reports its
 * own outcome in result (0 or a positive errno) with a one-line reason in
 * err, so that a refused value comes back with the allocator's message.
 * Changing a value (RRCTL_SET) is for the mount's owner (the daemon's uid)
 * and root; for anyone else the ioctl fails with EPERM.  Reading, and
 * RRCTL_SYNC, are for everyone who can open the mount point.
 *
 * The daemon returns records; rrctl formats them (lib/mb_format.c
 * has the kernel's text formats, shared with the daemon).
 */
#ifndef RRFUSE_RRCTL_WIRE_H
#define RRFUSE_RRCTL_WIRE_H

#include <stdint.h>
#include <sys/ioctl.h>

#define RRCTL_VERSION	1
#define RRCTL_MAGIC	0xE4	/* ioctl type byte: ext4-ish, unused by the VFS ioctls FUSE forwards */

#define RRCTL_NAME_LEN	32
#define RRCTL_VALUE_LEN	64
#define RRCTL_ERR_LEN	128

/*
 * RRCTL_GET: name set: its value.  name empty: the index'th tunable
 * (0, 1, ...) with its name and value, result ENOENT past the last
 * (that is how rrctl lists them).  RRCTL_SET: name = value, validated as
 * the mount option is; a refused value leaves the old one.
 */
struct rrctl_tunable {
	uint32_t version;
	uint32_t index;
	int32_t result;			/* out: 0 or a positive errno */
	uint32_t reserved;
	char name[RRCTL_NAME_LEN];
	char value[RRCTL_VALUE_LEN];
	char err[RRCTL_ERR_LEN];	/* out */
};

/* Orders 0 .. RRCTL_ORDERS - 1: blocksize_bits + 2 of them at 64 KiB blocks. */
#define RRCTL_ORDERS	18

/* One group, as /proc/fs/ext4/DEV/mb_groups shows it (kernel: ext4_group_info). */
struct rrctl_group {
	uint32_t group;
	uint32_t free;			/* free in the buddy: preallocated blocks count as used */
	uint32_t frags;			/* maximal free runs */
	uint32_t first;			/* first free block; blocks per group when none */
	uint32_t counters[RRCTL_ORDERS];	/* free chunks of 2^k blocks */
};

/* RRCTL_GROUPS: up to RRCTL_GROUPS_PAGE groups from start on (loaded if they were not). */
#define RRCTL_GROUPS_PAGE	128
struct rrctl_groups {
	uint32_t version;
	uint32_t start;
	int32_t result;			/* out */
	uint32_t count;			/* out: groups in g[] */
	uint32_t ngroups;		/* out: groups in the filesystem */
	uint32_t blocksize_bits;	/* out: the kernel prints blocksize_bits + 2 orders */
	uint32_t reserved[2];
	struct rrctl_group g[RRCTL_GROUPS_PAGE];
};

/* The criteria, in the kernel's order (CR_POWER2_ALIGNED .. CR_ANY_FREE). */
#define RRCTL_NCR	5

#define RRCTL_NREFUSE	4

/* RRCTL_STATS: the allocator's counters (kernel: ext4_seq_mb_stats_show). */
/* Opcodes counted one by one: every FUSE opcode below CUSE_INIT is smaller. */
#define RRCTL_NREQ 64

struct rrctl_stats {
	uint32_t version;
	uint32_t enabled;		/* out: mb_stats */
	int32_t result;			/* out */
	uint32_t ngroups;		/* out */
	uint64_t reqs, success, groups_scanned, extents_scanned;
	uint64_t goal_hits, stream_goal_hits, len_goal_hits, two_n_hits, breaks, lost;
	uint64_t buddies_generated, buddies_time_ns, preallocated, discarded;
	uint64_t cr_hits[RRCTL_NCR], cr_considered[RRCTL_NCR], cr_extents[RRCTL_NCR];
	uint64_t cr_useless[RRCTL_NCR];
	/* The metadata block cache (all 0 with cache_mb=0): blocks held, dirty, the bound;
	 * blocks read from memory and from the device; write-back syscalls; blocks
	 * dropped because file data overwrote them. */
	uint64_t cache_blocks, cache_dirty, cache_max, cache_hits, cache_misses, cache_writes;
	uint64_t cache_dropped;
	/* The device (src/io/dev.c): calls that moved bytes, metadata and file data apart. */
	uint64_t io_meta_reads, io_meta_writes, io_data_reads, io_data_writes, io_flushes;
	uint64_t io_meta_blocks;	/* bytes of metadata written, in blocks */
	uint64_t io_data_spliced;	/* data reads moved by splice, not copied (of io_data_reads) */
	/* FUSE requests read since the mount, by opcode (linux/fuse.h); the last counts the rest. */
	uint64_t requests[RRCTL_NREQ];
	/* Cached blocks given up because a commit freed them (written nowhere, nor logged). */
	uint64_t cache_forgotten;
	/* FUSE over io_uring (-o io_uring): requests that came over the ring (of requests[]),
	 * ring entries registered and serving now, entries started, the kernel's queues. */
	uint64_t ring_requests;
	uint32_t ring_entries, ring_wanted, ring_queues, reserved2;
	/*
	 * A policy's answers the engine refused (allocators/mb_guard.c), by kind:
	 * outside the device, in metadata, in use, reserved; and the policies
	 * switched off for refusing too many.  Counted whatever mb_stats says.
	 */
	uint64_t refused[RRCTL_NREFUSE];
	uint64_t policies_off;
	/*
	 * Time from reading each request to writing its reply, by opcode (of
	 * requests[]; requests with no reply, FORGET, count none), in ns: what
	 * the daemon spends on a request beside the kernel's round trip.
	 */
	uint64_t request_ns[RRCTL_NREQ];
	/* Of io_data_writes: the syscalls that wrote them (the write-behind joins a run into one). */
	uint64_t io_data_runs;
	/* Writebacks of the image's page cache started early (src/io/dev.c: wb_start). */
	uint64_t io_wb_starts;
	/*
	 * Written data waiting for its blocks (delayed allocation, src/data/
	 * data.c): held now in blocks, the files listed as holding some, the most
	 * held at once since the mount; and in bytes the kernel's dirty limits
	 * that bound it (vm.dirty_background_* as rrfuse reads them, and twice
	 * that, where writers write their own).
	 */
	uint64_t delayed_blocks, delayed_files, delayed_peak;
	uint64_t dirty_background_bytes, dirty_limit_bytes;
};

/*
 * RRCTL_REMOUNT: what `mount -o remount,ro` and `remount,rw` ask of the
 * daemon (rrfuse runs it beside the kernel's remount, which FUSE does not
 * pass on).  ro: everything written out and the image marked clean, then
 * every change refused; rw: the image marked in use again, changes
 * accepted.  For the mount's owner and root.
 */
struct rrctl_remount {
	uint32_t version;
	uint32_t ro;
	int32_t result;			/* out */
	uint32_t reserved;
	char err[RRCTL_ERR_LEN];	/* out */
};

/*
 * RRCTL_SYNC: commit everything now and return once it is durable: delayed
 * data gets its blocks and is written, the metadata goes out as one commit
 * (a jbd2 transaction on a journaled mount) and the device is flushed
 * (rr_fs_sync, the commit thread's periodic work).  The kernel's sync(1)
 * and syncfs(2) never reach a /dev/fuse server (FUSE_SYNCFS is sent only
 * where fc->sync_fs is set, which only virtiofs sets), so rrctl MNT sync
 * calls syncfs(2) first, for the kernel's dirty pages, then this.  For
 * everyone who can open the mount point, as syncfs(2) is.  A read-only
 * mount has nothing to write: result 0.
 */
struct rrctl_sync {
	uint32_t version;
	uint32_t reserved;
	int32_t result;			/* out: 0 or a positive errno */
	uint32_t reserved2;
	char err[RRCTL_ERR_LEN];	/* out */
};

#define RRCTL_GET	_IOWR(RRCTL_MAGIC, 1, struct rrctl_tunable)
#define RRCTL_SET	_IOWR(RRCTL_MAGIC, 2, struct rrctl_tunable)
#define RRCTL_GROUPS	_IOWR(RRCTL_MAGIC, 3, struct rrctl_groups)
#define RRCTL_STATS	_IOWR(RRCTL_MAGIC, 4, struct rrctl_stats)
#define RRCTL_REMOUNT	_IOWR(RRCTL_MAGIC, 5, struct rrctl_remount)
#define RRCTL_SYNC	_IOWR(RRCTL_MAGIC, 6, struct rrctl_sync)

#endif

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * FUSE_STATX (protocol 7.39, Linux 6.6): the request and reply as the
 * kernel's uapi <linux/fuse.h> defines them.  Debian 12's kernel headers
 * (6.1) and libfuse 3.14 predate it, so rrfuse's channel (src/fuse/channel.c)
 * answers it from these.  The sizes are the ABI: checked below.
 */
#ifndef RRFUSE_FUSE_STATX_H
#define RRFUSE_FUSE_STATX_H

#include <stdint.h>

#define RR_FUSE_STATX 52

struct rr_fuse_sx_time {
	int64_t tv_sec;
	uint32_t tv_nsec;
	int32_t reserved;
};

struct rr_fuse_statx {
	uint32_t mask;
	uint32_t blksize;
	uint64_t attributes;
	uint32_t nlink;
	uint32_t uid;
	uint32_t gid;
	uint16_t mode;
	uint16_t spare0[1];
	uint64_t ino;
	uint64_t size;
	uint64_t blocks;
	uint64_t attributes_mask;
	struct rr_fuse_sx_time atime;
	struct rr_fuse_sx_time btime;
	struct rr_fuse_sx_time ctime;
	struct rr_fuse_sx_time mtime;
	uint32_t rdev_major;
	uint32_t rdev_minor;
	uint32_t dev_major;
	uint32_t dev_minor;
	uint64_t spare2[14];
};

struct rr_fuse_statx_in {
	uint32_t getattr_flags;
	uint32_t reserved;
	uint64_t fh;
	uint32_t sx_flags;
	uint32_t sx_mask;
};

struct rr_fuse_statx_out {
	uint64_t attr_valid;	/* seconds the kernel may keep them */
	uint32_t attr_valid_nsec;
	uint32_t flags;
	uint64_t spare[2];
	struct rr_fuse_statx stat;
};

_Static_assert(sizeof(struct rr_fuse_statx) == 256, "fuse_statx is 256 bytes in the kernel's ABI");
_Static_assert(sizeof(struct rr_fuse_statx_in) == 24, "fuse_statx_in is 24 bytes in the kernel's ABI");
_Static_assert(sizeof(struct rr_fuse_statx_out) == 288, "fuse_statx_out is 288 bytes in the kernel's ABI");

#endif

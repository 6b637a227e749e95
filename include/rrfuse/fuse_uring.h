/* SPDX-License-Identifier: GPL-2.0 */
/*
 * FUSE over io_uring (protocol 7.42, Linux 6.14): the ring entry's header
 * and the command an SQE128 carries, as the kernel's uapi <linux/fuse.h>
 * defines them.  Debian 12's kernel headers (6.1) predate them, so rrfuse
 * (lib/uring.c) speaks them from these.  The layout is the ABI: checked
 * below, and against the system's header when it has them.
 */
#ifndef RRFUSE_FUSE_URING_H
#define RRFUSE_FUSE_URING_H

#include <stdint.h>
#include <linux/fuse.h>

/* The INIT request's flags2 bit with which the kernel offers the ring (enable_uring=Y). */
#define RR_FUSE_OVER_IO_URING_FLAGS2 (1u << (41 - 32))

#define RR_FUSE_URING_IN_OUT_HEADER_SZ 128
#define RR_FUSE_URING_OP_IN_OUT_SZ 128

/* The kernel's word on the request in the entry, and rrfuse's on the reply. */
struct rr_fuse_uring_ent_in_out {
	uint64_t flags;
	uint64_t commit_id;	/* the request's unique: named again by COMMIT_AND_FETCH */
	uint32_t payload_sz;	/* bytes of the payload buffer in use, either way */
	uint32_t padding;
	uint64_t reserved;
};

/* iov[0] of a registered entry: iov[1] is the payload buffer. */
struct rr_fuse_uring_req_header {
	char in_out[RR_FUSE_URING_IN_OUT_HEADER_SZ];	/* fuse_in_header in, fuse_out_header out */
	char op_in[RR_FUSE_URING_OP_IN_OUT_SZ];	/* the opcode's fixed argument (in_args[0]) */
	struct rr_fuse_uring_ent_in_out ring_ent_in_out;
};

/* The SQE's cmd_op. */
enum {
	RR_FUSE_IO_URING_CMD_REGISTER = 1,
	RR_FUSE_IO_URING_CMD_COMMIT_AND_FETCH = 2,
};

/* In the SQE128's 80-byte command area. */
struct rr_fuse_uring_cmd_req {
	uint64_t flags;
	uint64_t commit_id;
	uint16_t qid;		/* the queue: the CPU whose requests it serves */
	uint8_t padding[6];
};

_Static_assert(sizeof(struct rr_fuse_uring_ent_in_out) == 32, "fuse_uring_ent_in_out is 32 bytes");
_Static_assert(sizeof(struct rr_fuse_uring_req_header) == 288, "fuse_uring_req_header is 288 bytes");
_Static_assert(sizeof(struct rr_fuse_uring_cmd_req) == 24, "fuse_uring_cmd_req is 24 bytes");
_Static_assert(sizeof(struct fuse_in_header) <= RR_FUSE_URING_IN_OUT_HEADER_SZ, "in header fits");

#ifdef FUSE_URING_IN_OUT_HEADER_SZ
_Static_assert(sizeof(struct rr_fuse_uring_req_header) == sizeof(struct fuse_uring_req_header), "");
_Static_assert(sizeof(struct rr_fuse_uring_cmd_req) == sizeof(struct fuse_uring_cmd_req), "");
_Static_assert(RR_FUSE_IO_URING_CMD_COMMIT_AND_FETCH == FUSE_IO_URING_CMD_COMMIT_AND_FETCH, "");
_Static_assert((1ULL << 32) * RR_FUSE_OVER_IO_URING_FLAGS2 == FUSE_OVER_IO_URING, "");
#endif

#endif

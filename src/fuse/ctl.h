/* SPDX-License-Identifier: GPL-2.0 */
/* rrctl's ioctls on the mount's root directory (include/rrfuse/rrctl_wire.h). */
#ifndef RRFUSE_CTL_H
#define RRFUSE_CTL_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "rrfuse/rrctl_wire.h"

struct rr_fs;

/* Room for any command's reply. */
union rr_ctl_buf {
	struct rrctl_tunable t;
	struct rrctl_groups g;
	struct rrctl_stats s;
	struct rrctl_remount r;
	struct rrctl_sync y;
};

/* Is cmd one of rrctl's (the caller routes it here)? */
int rr_ctl_is_cmd(unsigned int cmd);

/*
 * Run command cmd from uid with in (in_size bytes; out_size may come
 * back): 0 with the reply in *buf, *len bytes, or -errno (EINVAL for a
 * malformed command, ENOTTY for an unknown one, EPERM for a change by
 * someone else than the mount's owner or root, EROFS without an
 * allocator).  Takes the fs lock.
 */
int rr_ctl(struct rr_fs *rfs, unsigned int cmd, uid_t uid, const void *in, size_t in_size,
	   size_t out_size, union rr_ctl_buf *buf, size_t *len);

/*
 * -o alloc_trace and rrctl's alloc_trace=: hand f (named name, an absolute
 * path) to the allocator as its trace; f NULL stops the trace.  The
 * allocator closes f.  0 or -errno.  Fs lock held, or no request running
 * yet.  Every line names the device numbers rr_ctl_trace_dev was given
 * for the image (main, before the daemon leaves its working directory):
 * a block device's own, what the kernel's ext4 on it would print, else
 * those of the filesystem that holds the image file.
 */
int rr_ctl_alloc_trace(struct rr_fs *rfs, FILE *f, const char *name);
void rr_ctl_trace_dev(const char *device);

#endif

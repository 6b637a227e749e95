/* SPDX-License-Identifier: GPL-2.0 */
#ifndef RRFUSE_OPS_H
#define RRFUSE_OPS_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include "rrfuse/fuse_statx.h"

struct rr_fs;

extern const struct fuse_lowlevel_ops rr_ops;

/*
 * FUSE_STATX's reply for inode nodeid (the channel answers it: libfuse
 * 3.14 does not know it).  0, or a negative errno.
 */
int rr_statx(struct rr_fs *rfs, uint64_t nodeid, struct rr_fuse_statx_out *out);

#endif

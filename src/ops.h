/* SPDX-License-Identifier: GPL-2.0 */
#ifndef RRFUSE_OPS_H
#define RRFUSE_OPS_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

extern const struct fuse_lowlevel_ops rr_ops;

#endif

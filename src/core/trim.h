/* SPDX-License-Identifier: GPL-2.0 */
/* Discarding free space: FITRIM (fstrim). */
#ifndef RRFUSE_TRIM_H
#define RRFUSE_TRIM_H

#include <stdint.h>

struct rr_fs;

/*
 * Discard the free runs of at least minlen bytes in [start, start+len)
 * bytes of the filesystem; *trimmed: bytes discarded.  0 or -errno
 * (-EOPNOTSUPP when the device or image file cannot discard).
 */
int rr_trim(struct rr_fs *rfs, uint64_t start, uint64_t len, uint64_t minlen, uint64_t *trimmed);

#endif

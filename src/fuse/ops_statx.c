// SPDX-License-Identifier: GPL-2.0
/*
 * FUSE_STATX, which the channel answers itself (libfuse 3.14 does not know
 * it): the attributes of attr.c with the FUSE room's cache timeout.
 */
#include "ops_int.h"
#include "attr.h"

#include <string.h>

int rr_statx(struct rr_fs *rfs, uint64_t nodeid, struct rr_fuse_statx_out *out)
{
	struct ext2_inode_large in;
	double timeout;
	int ret = inode_read(rfs, e2ino(nodeid), &in);

	if (ret)
		return ret;
	memset(out, 0, sizeof(*out));
	timeout = attr_timeout(&in);
	out->attr_valid = (uint64_t)timeout;
	out->attr_valid_nsec = (uint32_t)((timeout - (double)out->attr_valid) * 1e9);
	attr_statx(rfs, e2ino(nodeid), &in, &out->stat);
	return 0;
}

/* SPDX-License-Identifier: GPL-2.0 */
/* imgcheck.c: the checks an image passes before it is mounted (mount.c calls them). */
#ifndef RRFUSE_IMGCHECK_H
#define RRFUSE_IMGCHECK_H

#include <ext2fs/ext2fs.h>
#include <stddef.h>

/* Incompat features rrfuse cannot handle: 0, or -errno with msg. */
int check_features(ext2_filsys fs, char *msg, size_t msglen);
/* The ro_compat feature that keeps rrfuse from writing the image, named in buf, or NULL. */
const char *check_unwritable(ext2_filsys fs, char *buf, size_t len);
/* Fits the device, sane group descriptors: 0, or -errno with msg. */
int check_geometry(ext2_filsys fs, const char *device, char *msg, size_t msglen);
/* Group descriptors that fit the device and clash with no other metadata: 0, or why not. */
errcode_t rr_check_desc(ext2_filsys fs);
/* Blocks of static metadata, which statfs leaves out of f_blocks as the kernel does. */
uint64_t check_overhead_blocks(ext2_filsys fs);

/* A crash left orphans to finish. */
static inline int orphans_pending(ext2_filsys fs)
{
	return fs->super->s_last_orphan || ext2fs_has_feature_orphan_present(fs->super);
}

#endif

/* SPDX-License-Identifier: GPL-2.0 */
/* Where a new inode goes: the kernel's ext4 placement (src/core/ialloc.c). */
#ifndef RRFUSE_IALLOC_H
#define RRFUSE_IALLOC_H

#include <stdint.h>
#include <ext2fs/ext2fs.h>

/* No inode allocated for a directory since it was loaded (the kernel's ~0). */
#define IALLOC_NO_GROUP ((dgrp_t)~0U)

/* What the placement needs to know of the directory the new inode goes in. */
struct ialloc_parent {
	ext2_ino_t ino;
	__u32 flags;		/* its i_flags: EXT2_TOPDIR_FL spreads its subdirectories */
	dgrp_t last;		/* the group chosen for its last new inode, or IALLOC_NO_GROUP */
};

/*
 * The kernel's whole-filesystem counts as its allocator reads them: per-CPU
 * counters, whose shared value moves only when one CPU's pending change
 * reaches a batch (32 on up to 16 CPUs).  Right after a mount, the first
 * directories are placed by the counts the mount found.  Modelled as one
 * CPU's counters (the kernel's spread over its CPUs as the scheduler had
 * the callers run).  Zero: set from the descriptors at first use.
 */
struct ialloc_counts {
	int inited;
	int64_t batch;
	int64_t free_inodes, inodes_pending;
	int64_t dirs, dirs_pending;
	int64_t free_clusters;	/* the block allocator's changes are not seen one by one: caught up at a batch's drift */
};

/* Count an inode allocated (inodes -1, dirs +1 for a directory) or freed, before its descriptor changes. */
void ialloc_counts_change(ext2_filsys fs, struct ialloc_counts *c, int inodes, int dirs);

/*
 * The group the kernel would start from for a new inode of mode in parent p
 * (name: its name, for a top-level directory's spread; NULL: a random
 * start), c: the counts as the kernel reads them (NULL: exact ones).  -1:
 * no group has a free inode.
 */
int ialloc_find_group(ext2_filsys fs, struct ialloc_counts *c, const struct ialloc_parent *p, int mode,
		      const char *name, dgrp_t *group);

/*
 * Choose the inode for a new inode of mode in p, as the kernel would: the
 * first free inode from ialloc_find_group()'s group on.  *group gets that
 * group, to remember as p's last.  Nothing is marked: the caller does that
 * with ext2fs_inode_alloc_stats2(), which keeps the descriptors' counts.
 * EXT2_ET_INODE_ALLOC_FAIL: no free inode.
 */
errcode_t ialloc_new(ext2_filsys fs, struct ialloc_counts *c, const struct ialloc_parent *p, int mode,
		     const char *name, ext2_ino_t *ino, dgrp_t *group);

#endif

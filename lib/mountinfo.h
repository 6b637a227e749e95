/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Reading /proc/self/mountinfo: which mount sits on a directory, and where
 * an image or device is mounted.  Used by the daemon before it opens an
 * image and by rrfuse's commands on a running mount (unmount, remount).
 */
#ifndef RRFUSE_MOUNTINFO_H
#define RRFUSE_MOUNTINFO_H

#include <limits.h>
#include <sys/types.h>

struct rr_mnt {
	char target[PATH_MAX];	/* mount point */
	char source[PATH_MAX];	/* image or device (rrfuse's fsname) */
	char fstype[64];	/* "fuse.rrfuse", "fuseblk", "ext4", ... */
	char opts[256];		/* per-mount options: rw/ro, nosuid, nodev, ... */
	dev_t dev;		/* the superblock's device: one per FUSE connection */
};

/* The topmost mount whose mount point is path (resolved); 0, or -errno (-ENOENT: none). */
int rr_mnt_at(const char *path, struct rr_mnt *m);
/* A mount of source (an image or device, resolved); 0, or -errno (-ENOENT: none). */
int rr_mnt_of(const char *source, struct rr_mnt *m);
/*
 * Is m's superblock still mounted somewhere this process can see (same
 * device number and source: an unmounted superblock's number is recycled
 * at once by the next mount)?  1, 0, or -errno.
 */
int rr_mnt_still_mounted(const struct rr_mnt *m);
/* Mounted by rrfuse (fuse.rrfuse, or fuseblk with rrfuse's subtype). */
int rr_mnt_is_rrfuse(const struct rr_mnt *m);
/* Is the per-mount option opt ("ro", "nosuid", ...) set? */
int rr_mnt_has_opt(const struct rr_mnt *m, const char *opt);

#endif

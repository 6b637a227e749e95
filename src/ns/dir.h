/* SPDX-License-Identifier: GPL-2.0 */
#ifndef RRFUSE_DIR_H
#define RRFUSE_DIR_H

#include "rrfs.h"

/* Who asks: owner and group for new inodes, and whether root's reserve applies. */
struct rr_cred {
	uid_t uid;
	gid_t gid;
	mode_t umask;
	/*
	 * in_group_p(): gid is the caller's or one of its supplementary groups.
	 * The front end's, for only it knows the groups; req is its request.
	 */
	int (*in_group)(const struct rr_cred *cr, gid_t gid);
	void *req;
};

struct rr_dirent {
	ext2_ino_t ino;
	unsigned char type;	/* DT_* */
	char *name;
};

struct rr_dirlist {
	struct rr_dirent *v;
	size_t n, cap;
	uint64_t version;	/* rr_fs.ns_version when listed */
};

/* All return 0 or -errno and take the fs lock themselves. */
/* LOOKUP of "." or ".." (name) on a node id from a file handle: -ESTALE if it names nothing. */
int dir_lookup_dot(struct rr_fs *rfs, ext2_ino_t dir, const char *name, ext2_ino_t *ino,
		   struct rr_inode **ri, struct ext2_inode_large *in);
int dir_lookup(struct rr_fs *rfs, ext2_ino_t dir, const char *name, ext2_ino_t *ino,
	       struct rr_inode **ri, struct ext2_inode_large *in);
int dir_create(struct rr_fs *rfs, ext2_ino_t dir, const char *name, mode_t mode, dev_t rdev,
	       const struct rr_cred *cr, ext2_ino_t *ino, struct rr_inode **ri,
	       struct ext2_inode_large *in);
int dir_symlink(struct rr_fs *rfs, ext2_ino_t dir, const char *name, const char *target,
		const struct rr_cred *cr, ext2_ino_t *ino, struct rr_inode **ri,
		struct ext2_inode_large *in);
int dir_link(struct rr_fs *rfs, ext2_ino_t ino, ext2_ino_t dir, const char *name,
	     struct rr_inode **ri, struct ext2_inode_large *in);
int dir_unlink(struct rr_fs *rfs, ext2_ino_t dir, const char *name, int isdir);
/* flags: RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT (its whiteout is cr's). */
int dir_rename(struct rr_fs *rfs, ext2_ino_t odir, const char *oname, ext2_ino_t ndir,
	       const char *nname, unsigned int flags, const struct rr_cred *cr);
int dir_list(struct rr_fs *rfs, ext2_ino_t dir, struct rr_dirlist *out);
int dir_entry_ref(struct rr_fs *rfs, ext2_ino_t dir, const struct rr_dirlist *l,
		  const struct rr_dirent *d, struct rr_inode **ri, struct ext2_inode_large *in);
void dir_list_free(struct rr_dirlist *l);

#endif

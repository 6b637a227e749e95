// SPDX-License-Identifier: GPL-2.0
/*
 * An inode's birth and death.  inode_new allocates one where the kernel
 * would (src/core/ialloc.c).  An inode whose last link is removed while in use
 * is freed when its last lookup and open are gone (rr_iput, rr_iunpin);
 * until then it is on the on-disk orphan list (src/core/orphan.c), so that a
 * crash cannot leak it.
 */
#include "rrfs.h"
#include "ialloc.h"
#include "log.h"
#include "orphan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* The last holder frees: the in-memory inode, then an unlinked inode on disk. */
static void rr_inode_gone(struct rr_fs *rfs, struct rr_inode *ri)
{
	ext2_ino_t ino = ri->ino;

	rr_inode_free(rfs, ri);
	if (!rfs->ro)
		inode_free_if_unlinked(rfs, ino);
}

void rr_iunpin(struct rr_fs *rfs, struct rr_inode *ri)
{
	int gone;

	pthread_mutex_lock(&rfs->itab.lock);
	ri->pins--;
	gone = rr_itab_release_locked(&rfs->itab, ri);
	pthread_mutex_unlock(&rfs->itab.lock);
	if (gone)
		rr_inode_gone(rfs, ri);
}

/* Drop nlookup kernel references or one open reference; the last holder frees. */
void rr_iput(struct rr_fs *rfs, struct rr_inode *ri, uint64_t nlookup, int close)
{
	struct rr_itab *t = &rfs->itab;
	ext2_ino_t ino = ri->ino;
	int gone;

	pthread_mutex_lock(&t->lock);
	if (nlookup > ri->nlookup) {
		rr_log(LOG_ERR, "inode %u: forget of %llu lookups, only %llu held", ino,
		       (unsigned long long)nlookup, (unsigned long long)ri->nlookup);
		nlookup = ri->nlookup;
	}
	ri->nlookup -= nlookup;
	if (close && ri->nopen)
		ri->nopen--;
	gone = rr_itab_release_locked(t, ri);
	pthread_mutex_unlock(&t->lock);
	if (gone)
		rr_inode_gone(rfs, ri);
}

/*
 * Free every in-memory inode, deleting those unlinked; the table itself stays,
 * because the unmount's orphan cleanup looks inodes up again after this.
 */
void rr_itab_empty(struct rr_fs *rfs)
{
	struct rr_itab *t = &rfs->itab;
	size_t i;

	if (!t->hash)
		return;
	for (i = 0; i < t->nbuckets; i++) {
		struct rr_inode *ri, *next;

		for (ri = t->hash[i]; ri; ri = next) {
			ext2_ino_t ino = ri->ino;

			next = ri->hnext;
			t->hash[i] = next;
			t->count--;
			rr_inode_free(rfs, ri);
			if (!rfs->ro)
				inode_free_if_unlinked(rfs, ino);
		}
	}
}

void rr_itab_destroy(struct rr_fs *rfs)
{
	rr_itab_empty(rfs);
	free(rfs->itab.hash);
	rfs->itab.hash = NULL;
}

/*
 * The whole on-disk inode: in, then zeros over what a freed inode may have
 * left (in-inode xattrs).  Not ext2fs_write_new_inode(): it copies only the
 * 128-byte base inode, so the nanoseconds, crtime and i_extra_isize set here
 * would be lost.
 */
static errcode_t write_fresh_inode(ext2_filsys fs, ext2_ino_t ino, const struct ext2_inode_large *in)
{
	size_t size = EXT2_INODE_SIZE(fs->super);
	errcode_t err;
	char *buf = calloc(1, size);

	if (!buf)
		return EXT2_ET_NO_MEMORY;
	memcpy(buf, in, size < sizeof(*in) ? size : sizeof(*in));
	err = ext2fs_write_inode_full(fs, ino, (struct ext2_inode *)buf, (int)size);
	free(buf);
	return err;
}

/*
 * A new inode's generation: any value will do for NFS, and it seeds the
 * inode's checksum.  The kernel draws it from a fast generator, as here
 * (splitmix64, seeded once per thread): a getrandom per create was a
 * system call per file.
 */
static __u32 generation(void)
{
	static __thread uint64_t state;
	uint64_t z;

	if (!state && getrandom(&state, sizeof(state), 0) != sizeof(state))
		state = (uint64_t)random() << 32 | (uint64_t)random();
	z = (state += 0x9E3779B97F4A7C15ULL);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return (__u32)(z ^ (z >> 31));
}

/*
 * What the placement needs of dir: its flags for a directory (TOPDIR), and
 * the group of its last new inode from its in-memory inode, which the
 * kernel holds for as long as it holds dir.  Fs lock held.
 */
static void ialloc_parent_of(struct rr_fs *rfs, ext2_ino_t dir, mode_t mode, struct ialloc_parent *p)
{
	struct ext2_inode_large pin;
	struct rr_inode *ri;

	p->ino = dir;
	p->flags = 0;
	p->last = IALLOC_NO_GROUP;
	if (S_ISDIR(mode) && dir != EXT2_ROOT_INO && !inode_load(rfs, dir, &pin))
		p->flags = pin.i_flags;
	pthread_mutex_lock(&rfs->itab.lock);
	ri = rr_itab_find_locked(&rfs->itab, dir);
	if (ri && ri->ialloc_last)
		p->last = ri->ialloc_last - 1;
	pthread_mutex_unlock(&rfs->itab.lock);
}

static void ialloc_remember(struct rr_fs *rfs, ext2_ino_t dir, dgrp_t group)
{
	struct rr_inode *ri;

	pthread_mutex_lock(&rfs->itab.lock);
	ri = rr_itab_find_locked(&rfs->itab, dir);
	if (ri)
		ri->ialloc_last = group + 1;
	pthread_mutex_unlock(&rfs->itab.lock);
}

/*
 * Allocate and initialise a new inode named name in dir (not yet linked
 * anywhere), where the kernel would put it (src/core/ialloc.c).  Caller holds
 * the fs lock.  Regular files and directories get an empty extent tree
 * when the filesystem has extents.
 */
int inode_new(struct rr_fs *rfs, ext2_ino_t dir, const char *name, mode_t mode, uid_t uid, gid_t gid,
	      dev_t rdev, ext2_ino_t *ino_out, struct ext2_inode_large *in)
{
	ext2_filsys fs = rfs->fs;
	struct ialloc_parent parent;
	ext2_ino_t ino;
	errcode_t err;
	dgrp_t group;
	int isdir = S_ISDIR(mode), tries;

	ialloc_parent_of(rfs, dir, mode, &parent);
	for (tries = 0;; tries++) {
		err = ialloc_new(fs, &rfs->icounts, &parent, (int)mode, name, &ino, &group);
		if (!tries)
			ialloc_remember(rfs, dir, group);
		if (err)
			return rr_err(rfs, err);
		/*
		 * A corrupt inode bitmap can offer an inode that is in use;
		 * overwriting it would destroy a file.  Keep it marked, as the
		 * kernel keeps suspect inodes out of use, and look again.
		 */
		err = ext2fs_read_inode_full(fs, ino, (struct ext2_inode *)in, sizeof(*in));
		if (!err && !in->i_links_count && !(in->i_mode && !in->i_dtime) && !rr_ifind(rfs, ino))
			break;
		rr_log(LOG_ERR, "inode bitmap says inode %u is free but it is in use: run e2fsck", ino);
		ext2fs_mark_inode_bitmap2(fs->inode_map, ino);
		ext2fs_mark_ib_dirty(fs);
		if (tries >= 8)
			return -EIO;
	}
	memset(in, 0, sizeof(*in));
	in->i_mode = (__u16)mode;
	in->i_uid = (__u16)uid;
	ext2fs_set_i_uid_high(*in, uid >> 16);
	in->i_gid = (__u16)gid;
	ext2fs_set_i_gid_high(*in, gid >> 16);
	in->i_links_count = 1;
	if (EXT2_INODE_SIZE(fs->super) > EXT2_GOOD_OLD_INODE_SIZE) {
		__u16 want = fs->super->s_want_extra_isize;

		if (!want || want > EXT2_INODE_SIZE(fs->super) - EXT2_GOOD_OLD_INODE_SIZE)
			want = sizeof(struct ext2_inode_large) - EXT2_GOOD_OLD_INODE_SIZE;
		in->i_extra_isize = want;
	}
	inode_touch(in, RR_ATIME | RR_MTIME | RR_CTIME | RR_CRTIME);
	in->i_generation = generation();
	if (S_ISCHR(mode) || S_ISBLK(mode))
		inode_set_rdev(in, rdev);
	if ((S_ISREG(mode) || isdir) && ext2fs_has_feature_extents(fs->super))
		emap_root_init(in);
	err = write_fresh_inode(fs, ino, in);
	if (err)
		return rr_err_ino(rfs, err, ino);
	ialloc_counts_change(fs, &rfs->icounts, -1, isdir);
	ext2fs_inode_alloc_stats2(fs, ino, +1, isdir);
	*ino_out = ino;
	return 0;
}

/*
 * Free an inode that has no links left and no users: its blocks, its xattr
 * block, and the inode itself.  Takes the fs lock.
 */
int inode_free_if_unlinked(struct rr_fs *rfs, ext2_ino_t ino)
{
	int ret;

	rr_fs_lock(rfs);
	ret = inode_free_locked(rfs, ino);
	rr_fs_end_op(rfs);
	return ret;
}

/* inode_free_if_unlinked() with the fs lock held by the caller. */
int inode_free_locked(struct rr_fs *rfs, ext2_ino_t ino)
{
	ext2_filsys fs = rfs->fs;
	struct ext2_inode_large in;
	errcode_t err;
	blk64_t xblk;
	int ret = 0;

	err = ext2fs_read_inode_full(fs, ino, (struct ext2_inode *)&in, sizeof(in));
	/*
	 * Freed already (e.g. by a racing path), or still linked: nothing to
	 * do.  Not i_dtime: on an orphan it is the next-orphan link.
	 */
	if (err || in.i_links_count || !in.i_mode || !ext2fs_test_inode_bitmap2(fs->inode_map, ino))
		return rr_err_ino(rfs, err, ino);
	rr_alloc_discard_inode(rfs->alloc, ino);
	/* Blocks first, while the inode is still listed: a crash resumes the delete. */
	ret = emap_tree_punch(rfs, ino, &in, 0, ~0ULL);
	if (ret)
		rr_log(LOG_ERR, "inode %u: cannot free its blocks: %s", ino, strerror(-ret));
	xblk = ext2fs_file_acl_block(fs, (struct ext2_inode *)&in);
	if (xblk && !ret) {
		__u32 count = 0;

		err = ext2fs_adjust_ea_refcount3(fs, xblk, NULL, -1, &count, ino);
		if (!err && count == 0)
			ext2fs_block_alloc_stats2(fs, xblk, -1);
		ext2fs_file_acl_block_set(fs, (struct ext2_inode *)&in, 0);
	}
	if (!ret)
		ret = orphan_del(rfs, ino, &in);
	if (!ret) {
		in.i_dtime = (__u32)time(NULL);
		ext2fs_iblk_set(fs, (struct ext2_inode *)&in, 0);
		ret = inode_write(rfs, ino, &in);
		if (!ret) {
			ialloc_counts_change(fs, &rfs->icounts, +1, -LINUX_S_ISDIR(in.i_mode));
			ext2fs_inode_alloc_stats2(fs, ino, -1, LINUX_S_ISDIR(in.i_mode));
		}
	}
	return ret;
}

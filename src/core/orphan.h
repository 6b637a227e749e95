/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The orphan list: inodes that must be finished after a crash, because they
 * are unlinked but still open, or in the middle of a shrinking truncate.
 * See src/core/orphan.c for the on-disk formats, the write order and the locking.
 */
#ifndef RRFUSE_ORPHAN_H
#define RRFUSE_ORPHAN_H

#include <pthread.h>
#include <stdint.h>
#include <ext2fs/ext2fs.h>

struct rr_fs;
struct orphan_ent;

/* Everything here is under lock; see src/core/orphan.c. */
struct rr_orphans {
	pthread_mutex_t lock;
	int inited;
	/* In-memory index of tracked orphans, by inode number. */
	struct orphan_ent **hash;
	size_t nbuckets, count;
	/* Legacy list, newest first: the on-disk chain from s_last_orphan. */
	struct orphan_ent *head;
	/* The orphan file (COMPAT_ORPHAN_FILE), when the image has a usable one. */
	ext2_ino_t of_ino;
	__u32 of_gen;
	unsigned int of_blocks, of_per_block;
	unsigned int of_used;		/* slots holding an inode */
	unsigned int of_hint;		/* block to look in first */
	uint64_t *of_pblk;		/* physical block of each file block */
	uint32_t *of_free;		/* free slots per block */
	char *of_buf;			/* our copy of every block */
};

/*
 * Mount: read and check the orphan file, if the image has the feature.
 * -EUCLEAN with a message when it is unusable (the caller mounts read-only).
 */
int orphan_init(struct rr_fs *rfs, char *msg, size_t msglen);
void orphan_destroy(struct rr_fs *rfs);

/*
 * Mount: finish what a crash (of rrfuse or the kernel) left, as the kernel's
 * ext4_orphan_cleanup does.  Takes the fs lock itself; single-threaded.
 */
void orphan_cleanup(struct rr_fs *rfs);

/*
 * The fs lock is held for the calls below.
 *
 * orphan_add: put ino on the list before it loses its last link or starts
 * to shrink.  in is the caller's copy of the inode with its pending changes:
 * it is written here, in the order that a crash needs.
 */
int orphan_add(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in);
/*
 * orphan_del: take ino off the list (nothing if it is not on it).  in is
 * the caller's fresh copy; its i_dtime (the next-orphan link) is cleared
 * here and the caller writes it afterwards: the list write must come first.
 */
int orphan_del(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in);
/* ino is on the list (in the index).  Takes orphans.lock: after the fs lock. */
int orphan_tracked(struct rr_fs *rfs, ext2_ino_t ino);
/* At commit: clear orphan_present once the orphan file is empty. */
void orphan_commit(struct rr_fs *rfs);

/*
 * A shrinking truncate is on the list while it runs (these two take the fs
 * lock themselves): begin puts ino on it, done takes it off again unless the
 * inode lost its last link meanwhile (then its final release does).
 */
int orphan_truncate_begin(struct rr_fs *rfs, ext2_ino_t ino);
int orphan_truncate_done(struct rr_fs *rfs, ext2_ino_t ino);

#endif

// SPDX-License-Identifier: GPL-2.0
/*
 * The orphan list, as ext4 keeps it on disk.
 *
 * An inode is an orphan while it has no links but is still open (or looked
 * up) and while a shrinking truncate runs.  A crash then leaves it on a list
 * that the next mount finishes: links == 0 means delete, otherwise truncate
 * to i_size.  This is the kernel's contract (fs/ext4/orphan.c), and the
 * kernel, e2fsck and rrfuse must each be able to finish what another left.
 *
 * Two formats, never both for one image except as the kernel falls back:
 *
 *  - the legacy list: s_last_orphan names the newest orphan, each orphan's
 *    i_dtime names the next older one, 0 ends it.  In memory we keep the
 *    same chain doubly linked, to find an inode's predecessor.
 *  - the orphan file (COMPAT_ORPHAN_FILE, s_orphan_file_inum): blocks of
 *    __le32 inode slots (0 = free) with a tail of magic and, under
 *    metadata_csum, a crc32c over the inode's seed, the block's physical
 *    number and the slots.  RO_COMPAT_ORPHAN_PRESENT says "look in it".  A
 *    full file falls back to the legacy list, as the kernel does.
 *
 * Write order.  The list reaches the image with the rest of the metadata,
 * at the commit (src/core/commit.c): every commit leaves a walkable list (every
 * inode reachable from s_last_orphan or an orphan-file slot is in use with
 * a valid next link), because every change to it is made whole under the
 * fs lock, which the commit holds.  Within the commit the metadata cache
 * writes the blocks (inodes, slots) before the superblock, so the image
 * passes through:
 *
 *   add (list):  inode (links, i_dtime = old head)  ->  superblock (head)
 *   del (list):  inode's predecessor (when an inode) -> superblock
 *
 * A daemon killed between commits leaves the image of the last commit,
 * where an inode unlinked since is still linked: the unlink is lost, the
 * image consistent (as the kernel without a journal, which keeps no list at
 * all).  Until the journal, a kill while the cache writes back (a commit,
 * or dirty blocks crowding the cache between commits) can leave a list
 * whose head was written before its inode; e2fsck mends that.  An inode
 * is freed (blocks punched first, still listed) only after it has left the
 * list.  orphan_present is cleared at commit once the file is empty.
 * Bitmaps and group counts reach the image at commit, so blocks freed after
 * the last commit are e2fsck's after a crash.
 *
 * Locking.  rr_orphans.lock protects struct rr_orphans: the index, the
 * order of the in-memory list and the orphan file's block copies and
 * counts.  It nests inside the fs lock (fs lock -> orphan lock, never the
 * reverse): the legacy list is written through inodes and the superblock,
 * which libext2fs owns under the fs lock, so every caller holds it.  The
 * orphan file's blocks are our own copies, written through the I/O channel
 * (a block write, thread-safe) under the orphan lock alone.  Reads, writes and lookups never come here; the state
 * sits on its own cache lines at the end of struct rr_fs.
 */
#include "orphan.h"
#include "orphan_int.h"
#include "dev.h"
#include "log.h"
#include "rrfs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The kernel refuses bigger orphan files (EXT4_MAX_ORPHAN_FILE_BLOCKS). */
#define ORPHAN_FILE_MAX_BLOCKS 512

struct orphan_ent {
	ext2_ino_t ino;
	int32_t slot;			/* orphan-file slot, or -1: on the legacy list */
	struct orphan_ent *hnext;	/* index chain */
	struct orphan_ent *newer, *older;	/* legacy list; newer == NULL: the head */
};

/* ---------------------------------------------------------------- index */

static size_t ent_hash(const struct rr_orphans *o, ext2_ino_t ino)
{
	return (ino * 2654435761u) & (o->nbuckets - 1);
}

static struct orphan_ent *ent_find(struct rr_orphans *o, ext2_ino_t ino)
{
	struct orphan_ent *e = o->hash[ent_hash(o, ino)];

	while (e && e->ino != ino)
		e = e->hnext;
	return e;
}

struct orphan_ent *orphan_ent_new(struct rr_orphans *o, ext2_ino_t ino, int32_t slot)
{
	struct orphan_ent *e = calloc(1, sizeof(*e));
	size_t b;

	if (!e)
		return NULL;
	e->ino = ino;
	e->slot = slot;
	b = ent_hash(o, ino);
	e->hnext = o->hash[b];
	o->hash[b] = e;
	o->count++;
	return e;
}

static void ent_free(struct rr_orphans *o, struct orphan_ent *e)
{
	struct orphan_ent **pp = &o->hash[ent_hash(o, e->ino)];

	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	o->count--;
	free(e);
}

/* Link e in as the newest orphan of the legacy list. */
void orphan_ent_push(struct rr_orphans *o, struct orphan_ent *e)
{
	e->newer = NULL;
	e->older = o->head;
	if (o->head)
		o->head->newer = e;
	o->head = e;
}

static void list_unlink(struct rr_orphans *o, struct orphan_ent *e)
{
	if (e->newer)
		e->newer->older = e->older;
	else
		o->head = e->older;
	if (e->older)
		e->older->newer = e->newer;
}

int orphan_tracked(struct rr_fs *rfs, ext2_ino_t ino)
{
	struct rr_orphans *o = &rfs->orphans;
	int ret;

	pthread_mutex_lock(&o->lock);
	ret = ent_find(o, ino) != NULL;
	pthread_mutex_unlock(&o->lock);
	return ret;
}

/* ---------------------------------------------------------- orphan file */

__le32 *orphan_file_slots(struct rr_fs *rfs, unsigned int blk)
{
	return (__le32 *)(rfs->orphans.of_buf + (size_t)blk * rfs->bsize);
}

/* Write our copy of one orphan-file block, checksum first.  Under the orphan lock. */
static int of_write(struct rr_fs *rfs, unsigned int blk)
{
	struct rr_orphans *o = &rfs->orphans;
	ext2_filsys fs = rfs->fs;
	char *buf = (char *)orphan_file_slots(rfs, blk);
	int ret;

	if (ext2fs_has_feature_metadata_csum(fs->super))
		ext2fs_orphan_block_tail(fs, buf)->ob_checksum =
			ext2fs_cpu_to_le32(ext2fs_do_orphan_file_block_csum(fs, o->of_ino, o->of_gen,
									     o->of_pblk[blk], buf));
	ret = rr_err(rfs, io_channel_write_blk64(fs->io, o->of_pblk[blk], 1, buf));
	if (ret)
		rr_log(LOG_ERR, "orphan file block %u: write error: %s", blk, strerror(-ret));
	return ret;
}

/* Put ino in a free slot; -ENOSPC when the file is full.  Under the orphan lock. */
static int of_add(struct rr_fs *rfs, ext2_ino_t ino, int32_t *slot)
{
	struct rr_orphans *o = &rfs->orphans;
	unsigned int i, b, j;
	__le32 *s;
	int ret;

	for (i = 0; i < o->of_blocks; i++) {
		b = (o->of_hint + i) % o->of_blocks;
		if (o->of_free[b])
			break;
	}
	if (i == o->of_blocks)
		return -ENOSPC;
	s = orphan_file_slots(rfs, b);
	for (j = 0; j < o->of_per_block && s[j]; j++)
		;
	if (j == o->of_per_block)
		return -ENOSPC;		/* not reached: of_free counts the zero slots */
	s[j] = ext2fs_cpu_to_le32(ino);
	ret = of_write(rfs, b);
	if (ret) {
		s[j] = 0;
		return ret;
	}
	o->of_free[b]--;
	o->of_used++;
	o->of_hint = b;
	*slot = (int32_t)(b * o->of_per_block + j);
	return 0;
}

int orphan_file_clear(struct rr_fs *rfs, int32_t slot)
{
	struct rr_orphans *o = &rfs->orphans;
	unsigned int b = (unsigned int)slot / o->of_per_block;
	__le32 *s = orphan_file_slots(rfs, b) + (unsigned int)slot % o->of_per_block;
	__le32 old = *s;
	int ret;

	*s = 0;
	ret = of_write(rfs, b);
	if (ret) {
		*s = old;
		return ret;
	}
	o->of_free[b]++;
	o->of_used--;
	return 0;
}

/* Read and check the orphan file as the kernel's ext4_init_orphan_info does. */
static int of_load(struct rr_fs *rfs, char *msg, size_t msglen)
{
	struct rr_orphans *o = &rfs->orphans;
	ext2_filsys fs = rfs->fs;
	struct ext2_inode_large in;
	ext2_ino_t ino = fs->super->s_orphan_file_inum;
	uint64_t size;
	unsigned int b, j;
	errcode_t err;

	if (!ino || ino > fs->super->s_inodes_count ||
	    ext2fs_read_inode_full(fs, ino, (struct ext2_inode *)&in, sizeof(in))) {
		snprintf(msg, msglen, "orphan file inode %u cannot be read", ino);
		return -EUCLEAN;
	}
	size = EXT2_I_SIZE(&in);
	if (!LINUX_S_ISREG(in.i_mode) || !size || size % rfs->bsize ||
	    size / rfs->bsize > ORPHAN_FILE_MAX_BLOCKS) {
		snprintf(msg, msglen, "orphan file (inode %u) has a bad type or size (%llu bytes)", ino,
			 (unsigned long long)size);
		return -EUCLEAN;
	}
	o->of_blocks = (unsigned int)(size / rfs->bsize);
	o->of_per_block = (unsigned int)ext2fs_inodes_per_orphan_block(fs);
	o->of_pblk = calloc(o->of_blocks, sizeof(*o->of_pblk));
	o->of_free = calloc(o->of_blocks, sizeof(*o->of_free));
	o->of_buf = malloc((size_t)o->of_blocks * rfs->bsize);
	if (!o->of_pblk || !o->of_free || !o->of_buf) {
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	o->of_ino = ino;
	o->of_gen = in.i_generation;
	for (b = 0; b < o->of_blocks; b++) {
		blk64_t pblk = 0;
		char *buf = (char *)orphan_file_slots(rfs, b);

		err = ext2fs_bmap2(fs, ino, (struct ext2_inode *)&in, NULL, 0, b, NULL, &pblk);
		if (err || pblk < fs->super->s_first_data_block || pblk >= ext2fs_blocks_count(fs->super)) {
			snprintf(msg, msglen, "orphan file (inode %u) block %u is not mapped", ino, b);
			return -EUCLEAN;
		}
		o->of_pblk[b] = pblk;
		if (io_channel_read_blk64(fs->io, pblk, 1, buf)) {
			snprintf(msg, msglen, "orphan file (inode %u) block %u cannot be read", ino, b);
			return -EIO;
		}
		if (ext2fs_le32_to_cpu(ext2fs_orphan_block_tail(fs, buf)->ob_magic) !=
		    EXT4_ORPHAN_BLOCK_MAGIC) {
			snprintf(msg, msglen, "orphan file (inode %u) block %u: bad magic", ino, b);
			return -EUCLEAN;
		}
		if (ext2fs_has_feature_metadata_csum(fs->super) &&
		    ext2fs_le32_to_cpu(ext2fs_orphan_block_tail(fs, buf)->ob_checksum) !=
		    ext2fs_do_orphan_file_block_csum(fs, ino, o->of_gen, pblk, buf)) {
			snprintf(msg, msglen, "orphan file (inode %u) block %u: bad checksum", ino, b);
			return -EUCLEAN;
		}
		for (j = 0; j < o->of_per_block; j++) {
			if (orphan_file_slots(rfs, b)[j])
				o->of_used++;
			else
				o->of_free[b]++;
		}
	}
	return 0;
}

/* Forget the orphan file: the image is mounted read-only. */
static void of_unload(struct rr_orphans *o)
{
	free(o->of_pblk);
	free(o->of_free);
	free(o->of_buf);
	o->of_pblk = NULL;
	o->of_free = NULL;
	o->of_buf = NULL;
	o->of_blocks = o->of_used = 0;
	o->of_ino = 0;
}

int orphan_init(struct rr_fs *rfs, char *msg, size_t msglen)
{
	struct rr_orphans *o = &rfs->orphans;
	struct ext2_super_block *sb = rfs->fs->super;
	int ret;

	pthread_mutex_init(&o->lock, NULL);
	o->inited = 1;
	/* Orphans are few (in flight unlinks, open-unlinked files): no need to grow. */
	o->nbuckets = 1024;
	o->hash = calloc(o->nbuckets, sizeof(*o->hash));
	if (!o->hash) {
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	if (!ext2fs_has_feature_orphan_file(sb)) {
		if (ext2fs_has_feature_orphan_present(sb)) {
			snprintf(msg, msglen, "orphan_present is set without orphan_file");
			return -EUCLEAN;
		}
		return 0;
	}
	ret = of_load(rfs, msg, msglen);
	if (ret)
		of_unload(o);
	return ret;
}

void orphan_destroy(struct rr_fs *rfs)
{
	struct rr_orphans *o = &rfs->orphans;
	size_t i;

	if (!o->inited)
		return;
	for (i = 0; i < o->nbuckets && o->hash; i++) {
		struct orphan_ent *e, *next;

		for (e = o->hash[i]; e; e = next) {
			next = e->hnext;
			free(e);
		}
	}
	free(o->hash);
	of_unload(o);
	pthread_mutex_destroy(&o->lock);
	memset(o, 0, sizeof(*o));
}

/* ------------------------------------------------------------ add / del */

/* Legacy list: the inode points at the old head, then the superblock at the inode. */
static int list_add(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in)
{
	struct ext2_super_block *sb = rfs->fs->super;
	int ret;

	in->i_dtime = sb->s_last_orphan;
	ret = inode_write(rfs, ino, in);
	if (ret)
		return ret;
	sb->s_last_orphan = ino;
	ext2fs_mark_super_dirty(rfs->fs);
	return 0;
}

int orphan_add(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in)
{
	struct rr_orphans *o = &rfs->orphans;
	struct ext2_super_block *sb = rfs->fs->super;
	struct orphan_ent *e;
	int32_t slot = -1;
	int ret;

	pthread_mutex_lock(&o->lock);
	if (ent_find(o, ino)) {
		pthread_mutex_unlock(&o->lock);
		return inode_write(rfs, ino, in);
	}
	e = orphan_ent_new(o, ino, -1);
	if (!e) {
		pthread_mutex_unlock(&o->lock);
		return -ENOMEM;
	}
	ret = -ENOSPC;
	if (o->of_blocks) {
		if (!ext2fs_has_feature_orphan_present(sb)) {
			/* On disk before the first slot: e2fsck looks only when it is set. */
			ext2fs_set_feature_orphan_present(sb);
			ext2fs_mark_super_dirty(rfs->fs);
		}
		ret = of_add(rfs, ino, &slot);
		if (!ret) {
			e->slot = slot;
			ret = inode_write(rfs, ino, in);
			if (ret)
				orphan_file_clear(rfs, slot);
		}
	}
	if (ret == -ENOSPC) {
		/* No orphan file, or a full one: the superblock's list, as the kernel falls back. */
		ret = list_add(rfs, ino, in);
		if (!ret)
			orphan_ent_push(o, e);
	}
	if (ret)
		ent_free(o, e);
	pthread_mutex_unlock(&o->lock);
	return ret;
}

/* Legacy list: the predecessor takes ino's link, then the caller writes ino. */
static int list_del(struct rr_fs *rfs, struct orphan_ent *e, struct ext2_inode_large *in)
{
	struct ext2_super_block *sb = rfs->fs->super;
	__u32 next = in->i_dtime;
	int ret;

	if (!e->newer) {
		if (sb->s_last_orphan != e->ino)
			rr_log(LOG_ERR, "orphan list: head is inode %u, expected %u", sb->s_last_orphan,
			       e->ino);
		sb->s_last_orphan = next;
		ext2fs_mark_super_dirty(rfs->fs);
		ret = 0;
	} else {
		struct ext2_inode_large prev;

		ret = inode_load(rfs, e->newer->ino, &prev);
		if (!ret) {
			prev.i_dtime = next;
			ret = inode_write(rfs, e->newer->ino, &prev);
		}
	}
	if (!ret)
		in->i_dtime = 0;
	return ret;
}

int orphan_del(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in)
{
	struct rr_orphans *o = &rfs->orphans;
	struct orphan_ent *e;
	int ret;

	pthread_mutex_lock(&o->lock);
	e = ent_find(o, ino);
	if (!e) {
		pthread_mutex_unlock(&o->lock);
		return 0;
	}
	if (e->slot >= 0) {
		ret = orphan_file_clear(rfs, e->slot);
	} else {
		ret = list_del(rfs, e, in);
		if (!ret)
			list_unlink(o, e);
	}
	if (!ret)
		ent_free(o, e);
	pthread_mutex_unlock(&o->lock);
	if (ret)
		rr_log(LOG_ERR, "inode %u: cannot take it off the orphan list: %s", ino, strerror(-ret));
	return ret;
}

int orphan_truncate_begin(struct rr_fs *rfs, ext2_ino_t ino)
{
	struct ext2_inode_large in;
	int ret;

	rr_fs_lock(rfs);
	ret = inode_load(rfs, ino, &in);
	if (!ret)
		ret = orphan_add(rfs, ino, &in);
	rr_fs_end_op(rfs);
	return ret;
}

int orphan_truncate_done(struct rr_fs *rfs, ext2_ino_t ino)
{
	struct ext2_inode_large in;
	int ret = 0;

	rr_fs_lock(rfs);
	/* Unlinked meanwhile: it stays listed until its final release frees it. */
	if (orphan_tracked(rfs, ino) && !(ret = inode_load(rfs, ino, &in)) && in.i_links_count) {
		ret = orphan_del(rfs, ino, &in);
		if (!ret)
			ret = inode_write(rfs, ino, &in);
	}
	rr_fs_end_op(rfs);
	return ret;
}

void orphan_commit(struct rr_fs *rfs)
{
	struct rr_orphans *o = &rfs->orphans;
	struct ext2_super_block *sb = rfs->fs->super;

	if (!o->inited)
		return;
	pthread_mutex_lock(&o->lock);
	/* The slots were zeroed on disk already; the flag may follow lazily. */
	if (o->of_blocks && !o->of_used && ext2fs_has_feature_orphan_present(sb)) {
		ext2fs_clear_feature_orphan_present(sb);
		ext2fs_mark_super_dirty(rfs->fs);
	}
	pthread_mutex_unlock(&o->lock);
}

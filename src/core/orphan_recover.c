// SPDX-License-Identifier: GPL-2.0
/*
 * Orphan recovery at mount: finish what a crash left on the orphan list
 * and in the orphan file (delete unlinked inodes, complete truncates), as
 * the kernel's ext4_orphan_cleanup.  Above the inodes' life and death
 * (inode_life.c), which the list itself (orphan.c) lies below.
 */
#include "orphan.h"
#include "orphan_int.h"
#include "log.h"
#include "rrfs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct cleanup {
	ext2fs_inode_bitmap seen;	/* each inode is finished once: cuts loops */
	unsigned int deleted, truncated;
	struct rr_progress progress;	/* deleting many big files can take minutes */
};

/*
 * Why ino cannot be an orphan, or NULL (in is then loaded).  The kernel's
 * ext4_orphan_get refuses the same: out of range, not in use, and linked
 * inodes that cannot be truncated; we also refuse the special inodes.
 */
static const char *not_orphan(struct rr_fs *rfs, struct cleanup *c, ext2_ino_t ino,
			      struct ext2_inode_large *in)
{
	struct ext2_super_block *sb = rfs->fs->super;

	if (ino < EXT2_FIRST_INO(sb) || ino > sb->s_inodes_count)
		return "out of range";
	if (ino == sb->s_journal_inum || ino == sb->s_usr_quota_inum || ino == sb->s_grp_quota_inum ||
	    ino == sb->s_prj_quota_inum ||
	    (ext2fs_has_feature_orphan_file(sb) && ino == sb->s_orphan_file_inum))
		return "a special inode";
	if (ext2fs_test_inode_bitmap2(c->seen, ino))
		return "listed twice (a loop)";
	if (!ext2fs_test_inode_bitmap2(rfs->fs->inode_map, ino) || inode_load(rfs, ino, in) ||
	    !in->i_mode)
		return "not in use";
	if (in->i_links_count && !LINUX_S_ISREG(in->i_mode) && !LINUX_S_ISDIR(in->i_mode) &&
	    !LINUX_S_ISLNK(in->i_mode))
		return "linked and not truncatable";
	return NULL;
}

/* Delete or truncate one orphan that is tracked already.  Without the fs lock. */
static int finish_one(struct rr_fs *rfs, struct cleanup *c, ext2_ino_t ino, int linked)
{
	struct rr_inode *ri;
	int ret;

	if (!linked) {
		ret = inode_free_if_unlinked(rfs, ino);
		if (!ret && !orphan_tracked(rfs, ino))
			c->deleted++;
		goto out;
	}
	rr_fs_lock(rfs);
	ri = rr_iget(rfs, ino);
	rr_fs_end_op(rfs);
	if (!ri)
		return -EIO;
	/* A crash mid-truncate left i_size final already: free what lies past it. */
	ret = rfs->hooks && rfs->hooks->truncate ? rfs->hooks->truncate(rfs, ri, ri->size) : -EOPNOTSUPP;
	rr_iput(rfs, ri, 1, 0);
	if (!ret)
		ret = orphan_truncate_done(rfs, ino);
	if (!ret)
		c->truncated++;
out:
	{
		char detail[64];

		snprintf(detail, sizeof(detail), "%u deleted, %u truncated", c->deleted, c->truncated);
		rr_progress_step(&c->progress, c->deleted + c->truncated, detail);
	}
	return ret;
}

static void cut_list(struct rr_fs *rfs, ext2_ino_t ino, const char *why)
{
	rr_log(LOG_WARNING, "orphan list: inode %u is %s: list cut there; run e2fsck", ino, why);
	rfs->fs->super->s_last_orphan = 0;
	rr_fs_write_super(rfs);
}

/* Walk the legacy list from its head, finishing each orphan as we go. */
static void cleanup_list(struct rr_fs *rfs, struct cleanup *c)
{
	struct rr_orphans *o = &rfs->orphans;
	struct ext2_super_block *sb = rfs->fs->super;
	ext2_ino_t ino;

	rr_fs_lock(rfs);
	while ((ino = sb->s_last_orphan)) {
		struct ext2_inode_large in;
		const char *why = not_orphan(rfs, c, ino, &in);
		struct orphan_ent *e;
		__u32 next;
		int ret;

		if (why) {
			cut_list(rfs, ino, why);
			break;
		}
		ext2fs_mark_inode_bitmap2(c->seen, ino);
		next = in.i_dtime;
		if (next && (next < EXT2_FIRST_INO(sb) || next > sb->s_inodes_count))
			why = "out-of-range";
		else if (next && ext2fs_test_inode_bitmap2(c->seen, next))
			why = "the already seen";
		if (why) {
			/* Finish this one; the link past it is bad: end the list here. */
			rr_log(LOG_WARNING, "orphan list: inode %u links to %s inode %u: list cut after it; run e2fsck",
			       ino, why, next);
			in.i_dtime = 0;
			if (inode_write(rfs, ino, &in))
				break;
		}
		pthread_mutex_lock(&o->lock);
		e = orphan_ent_new(o, ino, -1);
		if (e)
			orphan_ent_push(o, e);
		pthread_mutex_unlock(&o->lock);
		ret = -ENOMEM;
		if (e) {
			rr_fs_end_op(rfs);
			ret = finish_one(rfs, c, ino, in.i_links_count);
			rr_fs_lock(rfs);
		}
		if (ret || orphan_tracked(rfs, ino)) {
			rr_log(LOG_ERR, "orphan list: cannot finish inode %u (%s): left for e2fsck", ino,
			       strerror(ret ? -ret : EIO));
			break;
		}
	}
	rr_fs_end_op(rfs);
}

/* Finish every inode named in the orphan file. */
static void cleanup_file(struct rr_fs *rfs, struct cleanup *c)
{
	struct rr_orphans *o = &rfs->orphans;
	unsigned int b, j;

	rr_fs_lock(rfs);
	for (b = 0; b < o->of_blocks; b++) {
		for (j = 0; j < o->of_per_block; j++) {
			ext2_ino_t ino = ext2fs_le32_to_cpu(orphan_file_slots(rfs, b)[j]);
			int32_t slot = (int32_t)(b * o->of_per_block + j);
			struct ext2_inode_large in;
			const char *why;
			int ret;

			if (!ino)
				continue;
			why = not_orphan(rfs, c, ino, &in);
			if (why) {
				rr_log(LOG_WARNING, "orphan file: slot %d names inode %u, which is %s: slot cleared",
				       slot, ino, why);
				pthread_mutex_lock(&o->lock);
				orphan_file_clear(rfs, slot);
				pthread_mutex_unlock(&o->lock);
				continue;
			}
			ext2fs_mark_inode_bitmap2(c->seen, ino);
			pthread_mutex_lock(&o->lock);
			ret = orphan_ent_new(o, ino, slot) ? 0 : -ENOMEM;
			pthread_mutex_unlock(&o->lock);
			rr_fs_end_op(rfs);
			if (!ret)
				ret = finish_one(rfs, c, ino, in.i_links_count);
			rr_fs_lock(rfs);
			if (ret || orphan_tracked(rfs, ino))
				rr_log(LOG_ERR, "orphan file: cannot finish inode %u (%s): left for e2fsck", ino,
				       strerror(ret ? -ret : EIO));
		}
	}
	rr_fs_end_op(rfs);
}

void orphan_cleanup(struct rr_fs *rfs)
{
	ext2_filsys fs = rfs->fs;
	struct cleanup c = { 0 };

	if (!fs->super->s_last_orphan && !rfs->orphans.of_used)
		return;
	if (fs->super->s_state & EXT2_ERROR_FS) {
		/* As the kernel: the list cannot be trusted; e2fsck will do it all. */
		if (fs->super->s_last_orphan) {
			rr_log(LOG_WARNING, "errors on filesystem, clearing orphan list");
			rr_fs_lock(rfs);
			fs->super->s_last_orphan = 0;
			rr_fs_write_super(rfs);
			rr_fs_end_op(rfs);
		}
		return;
	}
	if (ext2fs_allocate_inode_bitmap(fs, "orphans seen", &c.seen)) {
		rr_log(LOG_ERR, "orphan cleanup: out of memory: orphans left for e2fsck");
		return;
	}
	/* The orphan file's count is known; the legacy list's length is not. */
	rr_progress_begin(&c.progress, "orphan cleanup", fs->super->s_last_orphan ? 0 : rfs->orphans.of_used);
	cleanup_list(rfs, &c);
	cleanup_file(rfs, &c);
	rr_progress_end(&c.progress, c.deleted + c.truncated);
	ext2fs_free_inode_bitmap(c.seen);
	if (c.deleted)
		rr_log(LOG_NOTICE, "%u orphan inode%s deleted", c.deleted, c.deleted == 1 ? "" : "s");
	if (c.truncated)
		rr_log(LOG_NOTICE, "%u truncate%s cleaned up", c.truncated, c.truncated == 1 ? "" : "s");
}

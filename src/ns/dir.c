// SPDX-License-Identifier: GPL-2.0
/*
 * The namespace: lookup, create, link, unlink, rename, directory listing.
 * Each operation runs whole under the fs lock: directories, link counts and
 * the inode table change together, so unlink and a racing lookup of the same
 * name see one order.  libext2fs keeps htree directories indexed as entries
 * are added (ext2fs_link) and removed.
 */
#include "dir.h"
#include "symlink.h"
#include "log.h"
#include "htree.h"
#include "xattr.h"
#include "rrfuse/grow.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif
#ifndef RENAME_WHITEOUT
#define RENAME_WHITEOUT (1 << 2)
#endif

static int check_name(const char *name)
{
	size_t len = strlen(name);

	if (!len)
		return -ENOENT;
	if (len > EXT2_NAME_LEN)
		return -ENAMETOOLONG;
	return 0;
}

/*
 * chattr +i / +a on a directory, as the VFS's may_create/may_delete: nothing
 * enters an immutable directory, nothing leaves an append-only one.
 */
static int dir_may_change(struct rr_fs *rfs, ext2_ino_t dir, int removing)
{
	return (rr_iguard(rfs, dir) & (removing ? RR_FL_GUARD : EXT2_IMMUTABLE_FL)) ? -EPERM : 0;
}

/* An entry removed or replaced as a directory (rmdir, rename of one) must be one, and the other way round. */
static int kind_is(int dir, __u16 mode)
{
	if (dir && !LINUX_S_ISDIR(mode))
		return -ENOTDIR;
	if (!dir && LINUX_S_ISDIR(mode))
		return -EISDIR;
	return 0;
}

/* An immutable or append-only inode is never unlinked, renamed or linked to. */
static int victim_may_change(const struct ext2_inode_large *in)
{
	return (in->i_flags & RR_FL_GUARD) ? -EPERM : 0;
}

static int ftype_of(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG: return EXT2_FT_REG_FILE;
	case S_IFDIR: return EXT2_FT_DIR;
	case S_IFCHR: return EXT2_FT_CHRDEV;
	case S_IFBLK: return EXT2_FT_BLKDEV;
	case S_IFIFO: return EXT2_FT_FIFO;
	case S_IFSOCK: return EXT2_FT_SOCK;
	case S_IFLNK: return EXT2_FT_SYMLINK;
	default: return EXT2_FT_UNKNOWN;
	}
}

/*
 * Look name up in dir; -ENOENT if absent.  Caller holds the fs lock.
 * Through the hash index where there is one (libext2fs only scans); *leaf
 * is then the block that holds the entry, else 0.
 */
static int find_leaf(struct rr_fs *rfs, ext2_ino_t dir, const char *name, ext2_ino_t *ino, blk64_t *leaf)
{
	errcode_t err;
	int ret = htree_find(rfs, dir, name, ino, leaf);

	if (ret != -EAGAIN)
		return ret;
	*leaf = 0;
	err = ext2fs_lookup(rfs->fs, dir, name, (int)strlen(name), NULL, ino);
	if (err == EXT2_ET_FILE_NOT_FOUND)
		return -ENOENT;
	return rr_err_ino(rfs, err, dir);
}

static int find(struct rr_fs *rfs, ext2_ino_t dir, const char *name, ext2_ino_t *ino)
{
	blk64_t leaf;

	return find_leaf(rfs, dir, name, ino, &leaf);
}

/*
 * Remove name's entry (to ino) from dir.  Caller holds the fs lock.  leaf:
 * the block find_leaf() found it in, with nothing changed in dir since;
 * 0 to look again.
 */
static int remove_entry(struct rr_fs *rfs, ext2_ino_t dir, const char *name, ext2_ino_t ino, blk64_t leaf)
{
	ext2_ino_t found = ino;
	int ret = leaf ? 0 : htree_find(rfs, dir, name, &found, &leaf);

	if (!ret && found == ino)
		return htree_remove_in_block(rfs, dir, leaf, name);
	if (ret && ret != -EAGAIN && ret != -ENOENT)
		return ret;
	return rr_err_ino(rfs, ext2fs_unlink(rfs->fs, dir, name, ino, 0), dir);
}

/*
 * Add an entry, growing the directory when it is full.  The caller has
 * made dir forget its absent name (lock_for_new_entry's take, or
 * rr_iabsent_clear): a LOOKUP may have kept this one.
 */
static int add_entry(struct rr_fs *rfs, ext2_ino_t dir, const char *name, ext2_ino_t ino, int ftype)
{
	errcode_t err;
	int ret = htree_add(rfs, dir, name, ino, ftype);

	if (ret != -EAGAIN)
		return ret;
	err = ext2fs_link(rfs->fs, dir, name, ino, ftype);
	if (err != EXT2_ET_DIR_NO_SPACE)
		return rr_err_ino(rfs, err, dir);
	/* Outgrowing the first block: index it, as ext4 does. */
	ret = htree_index_dir(rfs, dir, name, ino, ftype);
	if (ret != -ENOSPC)
		return ret;
	/* Not a candidate: a linear directory grows by a block. */
	err = ext2fs_expand_dir(rfs->fs, dir);
	if (!err)
		err = ext2fs_link(rfs->fs, dir, name, ino, ftype);
	return rr_err_ino(rfs, err, dir);
}

struct set_entry_ctx {
	const char *name;
	size_t len;
	ext2_ino_t ino;
	int ftype;
	int found;
};

static int set_entry_cb(struct ext2_dir_entry *de, int offset, int blocksize, char *buf, void *priv)
{
	struct set_entry_ctx *c = priv;

	(void)offset, (void)blocksize, (void)buf;
	if (!de->inode || (size_t)ext2fs_dirent_name_len(de) != c->len ||
	    memcmp(de->name, c->name, c->len))
		return 0;
	de->inode = c->ino;
	if (c->ftype >= 0)
		ext2fs_dirent_set_file_type(de, c->ftype);
	c->found = 1;
	return DIRENT_CHANGED | DIRENT_ABORT;
}

/* Point an existing entry at another inode (rename over, exchange, ".."). */
static int set_entry(struct rr_fs *rfs, ext2_ino_t dir, const char *name, ext2_ino_t ino, int ftype)
{
	struct set_entry_ctx c = { .name = name, .len = strlen(name), .ino = ino, .ftype = ftype };
	errcode_t err = ext2fs_dir_iterate(rfs->fs, dir, DIRENT_FLAG_INCLUDE_EMPTY, NULL, set_entry_cb, &c);

	if (err)
		return rr_err_ino(rfs, err, dir);
	return c.found ? 0 : -EIO;
}

static int empty_cb(struct ext2_dir_entry *de, int offset, int blocksize, char *buf, void *priv)
{
	int len = ext2fs_dirent_name_len(de);

	(void)offset, (void)blocksize, (void)buf;
	if (!de->inode)
		return 0;
	if ((len == 1 && de->name[0] == '.') || (len == 2 && de->name[0] == '.' && de->name[1] == '.'))
		return 0;
	*(int *)priv = 0;
	return DIRENT_ABORT;
}

static int dir_empty(struct rr_fs *rfs, ext2_ino_t dir)
{
	int empty = 1;
	errcode_t err = ext2fs_dir_iterate(rfs->fs, dir, 0, NULL, empty_cb, &empty);

	if (err)
		return rr_err_ino(rfs, err, dir);
	return empty ? 0 : -ENOTEMPTY;
}

/* Directory link counts as ext4 keeps them: 1 means "more than EXT2_LINK_MAX". */
static int dir_nlink_inc(struct rr_fs *rfs, struct ext2_inode_large *in)
{
	if (in->i_links_count == 1 && ext2fs_has_feature_dir_nlink(rfs->fs->super))
		return 0;
	if (in->i_links_count + 1 >= EXT2_LINK_MAX) {
		if (!ext2fs_has_feature_dir_nlink(rfs->fs->super))
			return -EMLINK;
		in->i_links_count = 1;
		return 0;
	}
	in->i_links_count++;
	return 0;
}

static void dir_nlink_dec(struct ext2_inode_large *in)
{
	if (in->i_links_count > 2)
		in->i_links_count--;
}

/* Change a directory: add/remove a subdirectory link, touch mtime and ctime. */
static int dir_touch(struct rr_fs *rfs, ext2_ino_t dir, int subdirs)
{
	struct ext2_inode_large in;
	int ret = inode_load(rfs, dir, &in);

	if (ret)
		return ret;
	if (subdirs > 0)
		ret = dir_nlink_inc(rfs, &in);
	else if (subdirs < 0)
		dir_nlink_dec(&in);
	if (ret)
		return ret;
	rfs->ns_version++;
	inode_touch(&in, RR_MTIME | RR_CTIME);
	return inode_write(rfs, dir, &in);
}

/* Take a kernel reference on ino and return its inode: the tail of every entry reply. */
static int entry_ref(struct rr_fs *rfs, ext2_ino_t ino, struct rr_inode **ri,
		     struct ext2_inode_large *in)
{
	struct ext2_super_block *sb = rfs->fs->super;
	int ret;

	/* A directory entry naming a reserved, out-of-range or free inode is corruption. */
	if ((ino < EXT2_FIRST_INO(sb) && ino != EXT2_ROOT_INO) || ino > sb->s_inodes_count) {
		rr_log(LOG_ERR, "directory entry refers to inode %u: reserved or out of range", ino);
		return -EIO;
	}
	ret = inode_load(rfs, ino, in);
	if (ret)
		return ret;
	if (!in->i_mode || !in->i_links_count) {
		rr_log(LOG_ERR, "directory entry refers to deleted inode %u", ino);
		return -EIO;
	}
	*ri = rr_iget(rfs, ino);
	return *ri ? 0 : -ENOMEM;
}

int dir_lookup(struct rr_fs *rfs, ext2_ino_t dir, const char *name, ext2_ino_t *ino,
	       struct rr_inode **ri, struct ext2_inode_large *in)
{
	int ret = check_name(name);

	if (ret)
		return ret;
	rr_fs_lock(rfs);
	ret = find(rfs, dir, name, ino);
	if (!ret)
		ret = entry_ref(rfs, *ino, ri, in);
	else if (ret == -ENOENT)
		rr_iabsent_set(rfs, dir, name);
	rr_fs_end_op(rfs);
	return ret;
}

/*
 * "." and "..": what FUSE's export operations ask when the kernel decodes a
 * file handle (open_by_handle_at, an NFS export) of an inode it no longer
 * caches: LOOKUP(nodeid, ".") for the inode itself, LOOKUP(dir, "..") for
 * a directory's parent.  The node id comes from the handle, not from a
 * reference the kernel holds, so anything out of range, free or deleted is
 * ESTALE, as ext4's handle decoding says; the kernel then compares the
 * generation with the handle's.
 */
int dir_lookup_dot(struct rr_fs *rfs, ext2_ino_t dir, const char *name, ext2_ino_t *ino,
		   struct rr_inode **ri, struct ext2_inode_large *in)
{
	struct ext2_super_block *sb = rfs->fs->super;
	int ret;

	if ((dir < EXT2_FIRST_INO(sb) && dir != EXT2_ROOT_INO) || dir > sb->s_inodes_count)
		return -ESTALE;
	rr_fs_lock(rfs);
	ret = inode_load(rfs, dir, in);
	if (!ret && (!in->i_mode || !in->i_links_count))
		ret = -ESTALE;
	if (!ret && name[1]) {
		ret = LINUX_S_ISDIR(in->i_mode) ? find(rfs, dir, "..", ino) : -ENOTDIR;
		if (!ret)
			ret = entry_ref(rfs, *ino, ri, in);
	} else if (!ret) {
		*ino = dir;
		*ri = rr_iget(rfs, dir);
		ret = *ri ? 0 : -ENOMEM;
	}
	rr_fs_end_op(rfs);
	return ret;
}

/* Owner, group and mode of a new inode in dir, as the kernel's inode_init_owner. */
static void new_owner(struct rr_fs *rfs, ext2_ino_t dir, mode_t *mode, const struct rr_cred *cr,
		      gid_t *gid)
{
	struct ext2_inode_large pin;

	*gid = cr->gid;
	if (inode_load(rfs, dir, &pin))
		return;
	if (pin.i_mode & S_ISGID) {
		*gid = inode_gid(pin);
		if (S_ISDIR(*mode))
			*mode |= S_ISGID;
	}
}

static int make_dir_block(struct rr_fs *rfs, ext2_ino_t dir, ext2_ino_t ino,
			  struct ext2_inode_large *in)
{
	ext2_filsys fs = rfs->fs;
	struct rr_alloc_req req = { .ino = ino, .len = 1, .flags = RR_ALLOC_METADATA };
	struct rr_extent ex;
	char *block = NULL;
	errcode_t err;
	int ret;

	err = ext2fs_new_dir_block(fs, ino, dir, &block);
	if (err)
		return rr_err_ino(rfs, err, ino);
	req.goal = ext2fs_find_inode_goal(fs, ino, (struct ext2_inode *)in, 0);
	ret = rr_alloc_blocks(rfs->alloc, &req, &ex);
	if (!ret) {
		ret = rr_err_ino(rfs, ext2fs_write_dir_block4(fs, ex.pblk, block, 0, ino), ino);
		if (!ret)
			ret = emap_tree_map(rfs, ino, in, 0, ex.pblk, 1, 0);
		if (ret)
			rr_free_blocks(rfs->alloc, ex.pblk, 1);
	}
	ext2fs_free_mem(&block);
	if (ret)
		return ret;
	in->i_size = fs->blocksize;
	in->i_links_count = 2;
	return inode_write(rfs, ino, in);
}

/*
 * Take the fs lock for a new entry name in dir: 0 with the lock held, or
 * the reason it cannot be made (EEXIST, a dir that may not change) with
 * the lock dropped.
 */
static int lock_for_new_entry(struct rr_fs *rfs, ext2_ino_t dir, const char *name)
{
	ext2_ino_t existing;
	int ret;

	rr_fs_lock(rfs);
	/* A name the kernel has just looked up (LOOKUP before CREATE): no entry added since. */
	ret = rr_iabsent_take(rfs, dir, name) ? -ENOENT : find(rfs, dir, name, &existing);
	if (ret == -ENOENT && !(ret = dir_may_change(rfs, dir, 0)))
		return 0;
	rr_fs_end_op(rfs);
	return ret ? ret : -EEXIST;
}

/* A new inode that never got an entry: freed like any unlinked one.  Fs lock held. */
static void inode_drop_unlinked(struct rr_fs *rfs, ext2_ino_t ino)
{
	struct ext2_inode_large in;

	if (ino && !inode_load(rfs, ino, &in)) {
		in.i_links_count = 0;
		inode_write(rfs, ino, &in);
		inode_free_locked(rfs, ino);
	}
}

/*
 * After a new inode was made (ret: how that went; *ino 0 if none was):
 * its entry in dir and dir's times (subdir: one more link), its reference
 * for the kernel; on any failure the inode is freed like any unlinked one.
 * Drops the fs lock lock_for_new_entry took.
 */
static int link_new_and_unlock(struct rr_fs *rfs, ext2_ino_t dir, const char *name, int ret,
			       int ftype, int subdir, ext2_ino_t ino, struct rr_inode **ri,
			       struct ext2_inode_large *in)
{
	if (!ret)
		ret = add_entry(rfs, dir, name, ino, ftype);
	if (!ret)
		ret = dir_touch(rfs, dir, subdir);
	if (ret)
		inode_drop_unlinked(rfs, ino);
	else
		ret = entry_ref(rfs, ino, ri, in);
	if (!ret)
		xattr_caps_absent(*ri);
	rr_fs_end_op(rfs);
	return ret;
}

int dir_create(struct rr_fs *rfs, ext2_ino_t dir, const char *name, mode_t mode, dev_t rdev,
	       const struct rr_cred *cr, ext2_ino_t *ino, struct rr_inode **ri,
	       struct ext2_inode_large *in)
{
	struct rr_acl_init ai;
	gid_t gid;
	int ret = check_name(name);

	if (ret)
		return ret;
	if (!S_ISREG(mode) && !S_ISDIR(mode) && !S_ISCHR(mode) && !S_ISBLK(mode) &&
	    !S_ISFIFO(mode) && !S_ISSOCK(mode))
		return -EINVAL;
	*ino = 0;
	ret = lock_for_new_entry(rfs, dir, name);
	if (ret)
		return ret;
	ret = xattr_acl_prepare(rfs, dir, &mode, cr->umask, &ai);
	if (ret) {
		xattr_acl_done(&ai);
		rr_fs_end_op(rfs);
		return ret;
	}
	new_owner(rfs, dir, &mode, cr, &gid);
	if (S_ISDIR(mode)) {
		struct ext2_inode_large pin;

		/* Refuse before allocating anything if the parent cannot take one more link. */
		ret = inode_load(rfs, dir, &pin);
		if (!ret)
			ret = dir_nlink_inc(rfs, &pin);
		if (ret) {
			xattr_acl_done(&ai);
			rr_fs_end_op(rfs);
			return ret;
		}
	}
	ret = inode_new(rfs, dir, name, mode, cr->uid, gid, rdev, ino, in);
	if (!ret && S_ISDIR(mode))
		ret = make_dir_block(rfs, dir, *ino, in);
	if (!ret)
		ret = xattr_acl_apply(rfs, *ino, mode, &ai);
	xattr_acl_done(&ai);
	return link_new_and_unlock(rfs, dir, name, ret, ftype_of(mode), !!S_ISDIR(mode), *ino, ri, in);
}

int dir_symlink(struct rr_fs *rfs, ext2_ino_t dir, const char *name, const char *target,
		const struct rr_cred *cr, ext2_ino_t *ino, struct rr_inode **ri,
		struct ext2_inode_large *in)
{
	size_t len = strlen(target);
	mode_t mode = S_IFLNK | 0777;
	gid_t gid;
	int ret = check_name(name);

	if (ret)
		return ret;
	if (!len)
		return -ENOENT;
	if (len >= rfs->bsize)
		return -ENAMETOOLONG;
	ret = lock_for_new_entry(rfs, dir, name);
	if (ret)
		return ret;
	new_owner(rfs, dir, &mode, cr, &gid);
	*ino = 0;
	ret = inode_new(rfs, dir, name, mode, cr->uid, gid, 0, ino, in);
	if (!ret)
		ret = symlink_set_target(rfs, *ino, in, target, len);
	return link_new_and_unlock(rfs, dir, name, ret, EXT2_FT_SYMLINK, 0, *ino, ri, in);
}

int dir_link(struct rr_fs *rfs, ext2_ino_t ino, ext2_ino_t dir, const char *name,
	     struct rr_inode **ri, struct ext2_inode_large *in)
{
	ext2_ino_t existing;
	int ret = check_name(name);

	if (ret)
		return ret;
	rr_fs_lock(rfs);
	ret = find(rfs, dir, name, &existing);
	if (ret != -ENOENT || (ret = dir_may_change(rfs, dir, 0))) {
		ret = ret ? ret : -EEXIST;
		goto out;
	}
	ret = inode_load(rfs, ino, in);
	if (!ret)
		ret = victim_may_change(in);
	if (ret)
		goto out;
	if (LINUX_S_ISDIR(in->i_mode)) {
		ret = -EPERM;
		goto out;
	}
	if (in->i_links_count >= EXT2_LINK_MAX) {
		ret = -EMLINK;
		goto out;
	}
	if (!in->i_links_count) {
		ret = -ENOENT;
		goto out;
	}
	rr_iabsent_clear(rfs, dir);
	ret = add_entry(rfs, dir, name, ino, ftype_of(in->i_mode));
	if (ret)
		goto out;
	ret = inode_load(rfs, ino, in);
	if (!ret) {
		in->i_links_count++;
		inode_touch(in, RR_CTIME);
		ret = inode_write(rfs, ino, in);
	}
	if (!ret)
		ret = dir_touch(rfs, dir, 0);
	if (!ret)
		ret = entry_ref(rfs, ino, ri, in);
out:
	rr_fs_end_op(rfs);
	return ret;
}

/*
 * Drop one link of a victim inode after its entry is gone: a directory
 * loses all, and takes its ".." link from parent.  Freed at once when
 * nobody holds it, else at the last forget/release, and on the orphan list
 * until then.
 */
static int drop_victim(struct rr_fs *rfs, ext2_ino_t parent, ext2_ino_t ino)
{
	struct ext2_inode_large in;
	int ret = inode_load(rfs, ino, &in), in_use;

	if (ret)
		return ret;
	if (LINUX_S_ISDIR(in.i_mode)) {
		in.i_links_count = 0;
		ret = dir_touch(rfs, parent, -1);
		if (ret)
			return ret;
	} else if (in.i_links_count) {
		in.i_links_count--;
	}
	inode_touch(&in, RR_CTIME);
	in_use = rr_ifind(rfs, ino) != NULL;
	if (!in.i_links_count && in_use) {
		rr_iheld_unlinked(rfs, ino);
		ret = orphan_add(rfs, ino, &in);
	} else {
		ret = inode_write(rfs, ino, &in);
	}
	if (!ret && !in.i_links_count && !in_use)
		ret = inode_free_locked(rfs, ino);
	return ret;
}

int dir_unlink(struct rr_fs *rfs, ext2_ino_t dir, const char *name, int isdir)
{
	struct ext2_inode_large in;
	blk64_t leaf;
	ext2_ino_t ino;
	int ret = check_name(name);

	if (ret)
		return ret;
	rr_fs_lock(rfs);
	ret = find_leaf(rfs, dir, name, &ino, &leaf);
	if (!ret)
		ret = inode_load(rfs, ino, &in);
	if (!ret)
		ret = dir_may_change(rfs, dir, 1);
	if (!ret)
		ret = victim_may_change(&in);
	if (ret)
		goto out;
	ret = kind_is(isdir, in.i_mode);
	if (ret)
		goto out;
	if (isdir) {
		ret = dir_empty(rfs, ino);
		if (ret)
			goto out;
	}
	ret = remove_entry(rfs, dir, name, ino, leaf);
	if (!ret)
		ret = dir_touch(rfs, dir, 0);
	if (!ret)
		ret = drop_victim(rfs, dir, ino);
out:
	rr_fs_end_op(rfs);
	return ret;
}

static int rename_exchange(struct rr_fs *rfs, ext2_ino_t odir, const char *oname, ext2_ino_t src,
			   struct ext2_inode_large *sin, ext2_ino_t ndir, const char *nname,
			   ext2_ino_t dst, struct ext2_inode_large *din)
{
	int sdir = LINUX_S_ISDIR(sin->i_mode), ddir = LINUX_S_ISDIR(din->i_mode);
	int ret;

	ret = set_entry(rfs, odir, oname, dst, ftype_of(din->i_mode));
	if (!ret)
		ret = set_entry(rfs, ndir, nname, src, ftype_of(sin->i_mode));
	if (!ret && odir != ndir) {
		if (sdir)
			ret = set_entry(rfs, src, "..", ndir, -1);
		if (!ret && ddir)
			ret = set_entry(rfs, dst, "..", odir, -1);
		if (!ret && sdir != ddir) {
			ret = dir_touch(rfs, odir, sdir ? -1 : 1);
			if (!ret)
				ret = dir_touch(rfs, ndir, sdir ? 1 : -1);
		}
	}
	if (ret)
		return ret;
	ret = dir_touch(rfs, odir, 0);
	if (!ret && odir != ndir)
		ret = dir_touch(rfs, ndir, 0);
	inode_touch(sin, RR_CTIME);
	inode_touch(din, RR_CTIME);
	if (!ret)
		ret = inode_write(rfs, src, sin);
	if (!ret)
		ret = inode_write(rfs, dst, din);
	return ret;
}

/*
 * RENAME_WHITEOUT's whiteout (overlayfs): a character device 0:0 of mode 0,
 * the caller's, made before the rename changes anything so that running
 * out of inodes fails it whole, as ext4_whiteout_for_rename.  Fs lock held.
 */
static int whiteout_new(struct rr_fs *rfs, ext2_ino_t dir, const char *name, const struct rr_cred *cr,
			ext2_ino_t *ino)
{
	struct ext2_inode_large in;
	mode_t mode = S_IFCHR;
	gid_t gid;

	new_owner(rfs, dir, &mode, cr, &gid);
	return inode_new(rfs, dir, name, mode, cr->uid, gid, 0, ino, &in);
}

int dir_rename(struct rr_fs *rfs, ext2_ino_t odir, const char *oname, ext2_ino_t ndir,
	       const char *nname, unsigned int flags, const struct rr_cred *cr)
{
	struct ext2_inode_large sin, din;
	ext2_ino_t src, dst = 0, wh = 0;
	int ret, sdir;

	if ((ret = check_name(oname)) || (ret = check_name(nname)))
		return ret;
	if ((flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT)) ||
	    ((flags & RENAME_EXCHANGE) && (flags & (RENAME_NOREPLACE | RENAME_WHITEOUT))))
		return -EINVAL;
	rr_fs_lock(rfs);
	ret = find(rfs, odir, oname, &src);
	if (!ret)
		ret = inode_load(rfs, src, &sin);
	if (ret)
		goto out;
	sdir = LINUX_S_ISDIR(sin.i_mode);
	ret = find(rfs, ndir, nname, &dst);
	if (ret == -ENOENT) {
		dst = 0;
		ret = 0;
	}
	if (ret)
		goto out;
	if (dst && (ret = inode_load(rfs, dst, &din)))
		goto out;
	if ((ret = victim_may_change(&sin)) || (dst && (ret = victim_may_change(&din))) ||
	    (ret = dir_may_change(rfs, odir, 1)) ||
	    (ret = dir_may_change(rfs, ndir, dst && dst != src)))
		goto out;
	if (flags & RENAME_EXCHANGE) {
		ret = dst ? rename_exchange(rfs, odir, oname, src, &sin, ndir, nname, dst, &din) : -ENOENT;
		goto out;
	}
	if (dst && (flags & RENAME_NOREPLACE)) {
		ret = -EEXIST;
		goto out;
	}
	if (dst == src)
		goto out;	/* two links to one inode: POSIX says do nothing */
	if ((flags & RENAME_WHITEOUT) && (ret = whiteout_new(rfs, odir, oname, cr, &wh)))
		goto out;
	if (dst) {
		ret = kind_is(sdir, din.i_mode);
		if (ret)
			goto out;
		if (sdir && (ret = dir_empty(rfs, dst)))
			goto out;
		ret = set_entry(rfs, ndir, nname, src, ftype_of(sin.i_mode));
		if (!ret)
			ret = drop_victim(rfs, ndir, dst);
	} else {
		if (sdir && odir != ndir) {
			/* Refuse before changing anything if the new parent is full of links. */
			ret = inode_load(rfs, ndir, &din);
			if (!ret)
				ret = dir_nlink_inc(rfs, &din);
			if (ret)
				goto out;
		}
		rr_iabsent_clear(rfs, ndir);
		ret = add_entry(rfs, ndir, nname, src, ftype_of(sin.i_mode));
	}
	if (ret)
		goto out;
	ret = wh ? set_entry(rfs, odir, oname, wh, EXT2_FT_CHRDEV) : remove_entry(rfs, odir, oname, src, 0);
	if (!ret)
		wh = 0;		/* linked: kept */
	if (!ret && sdir && odir != ndir) {
		ret = set_entry(rfs, src, "..", ndir, -1);
		if (!ret)
			ret = dir_touch(rfs, odir, -1);
		if (!ret)
			ret = dir_touch(rfs, ndir, 1);
	} else if (!ret) {
		ret = dir_touch(rfs, odir, 0);
		if (!ret && odir != ndir)
			ret = dir_touch(rfs, ndir, 0);
	}
	if (!ret && !(ret = inode_load(rfs, src, &sin))) {
		inode_touch(&sin, RR_CTIME);
		ret = inode_write(rfs, src, &sin);
	}
out:
	inode_drop_unlinked(rfs, wh);
	rr_fs_end_op(rfs);
	return ret;
}

static int list_cb(struct ext2_dir_entry *de, int offset, int blocksize, char *buf, void *priv)
{
	struct rr_dirlist *l = priv;
	int len = ext2fs_dirent_name_len(de);
	static const unsigned char dt[] = {
		[EXT2_FT_UNKNOWN] = DT_UNKNOWN, [EXT2_FT_REG_FILE] = DT_REG, [EXT2_FT_DIR] = DT_DIR,
		[EXT2_FT_CHRDEV] = DT_CHR, [EXT2_FT_BLKDEV] = DT_BLK, [EXT2_FT_FIFO] = DT_FIFO,
		[EXT2_FT_SOCK] = DT_SOCK, [EXT2_FT_SYMLINK] = DT_LNK,
	};
	int ft = ext2fs_dirent_file_type(de);

	(void)offset, (void)blocksize, (void)buf;
	if (!de->inode)
		return 0;
	if (rr_grow(&l->v, sizeof(*l->v), &l->cap, l->n + 1, 64))
		return DIRENT_ABORT;
	l->v[l->n].name = strndup(de->name, (size_t)len);
	if (!l->v[l->n].name)
		return DIRENT_ABORT;
	l->v[l->n].ino = de->inode;
	l->v[l->n].type = ft < (int)sizeof(dt) ? dt[ft] : DT_UNKNOWN;
	l->n++;
	return 0;
}

/* A snapshot of the directory's entries, "." and ".." included. */
int dir_list(struct rr_fs *rfs, ext2_ino_t dir, struct rr_dirlist *out)
{
	errcode_t err;

	memset(out, 0, sizeof(*out));
	rr_fs_lock(rfs);
	out->version = rfs->ns_version;
	err = ext2fs_dir_iterate(rfs->fs, dir, 0, NULL, list_cb, out);
	rr_fs_end_op(rfs);
	if (err) {
		dir_list_free(out);
		return rr_err_ino(rfs, err, dir);
	}
	return 0;
}

/*
 * A kernel reference for a listed entry (readdirplus).  The listing may be
 * stale: an entry deleted since may have had its inode freed, or reused by
 * another file, and a reference to it would give the kernel the wrong
 * inode.  So when any directory changed since the listing, the name must
 * still lead to the same inode.  -ENOENT: skip the entry.
 */
int dir_entry_ref(struct rr_fs *rfs, ext2_ino_t dir, const struct rr_dirlist *l,
		  const struct rr_dirent *d, struct rr_inode **ri, struct ext2_inode_large *in)
{
	ext2_ino_t now;
	int ret = 0;

	rr_fs_lock(rfs);
	if (rfs->ns_version != l->version) {
		ret = find(rfs, dir, d->name, &now);
		if (!ret && now != d->ino)
			ret = -ENOENT;
	}
	if (!ret)
		ret = entry_ref(rfs, d->ino, ri, in);
	rr_fs_end_op(rfs);
	return ret;
}

void dir_list_free(struct rr_dirlist *l)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		free(l->v[i].name);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

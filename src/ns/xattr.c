// SPDX-License-Identifier: GPL-2.0
/*
 * Extended attributes through libext2fs's xattr handles: in-inode space
 * first, then an xattr block (allocated through our allocator's callback).
 * POSIX ACLs are translated between the VFS and ext4 formats by libext2fs;
 * here they are kept in step with the mode (see acl.h).
 */
#include "xattr.h"
#include "acl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

static int known_namespace(const char *name)
{
	static const char *const prefixes[] = { "user.", "trusted.", "security.",
						ACL_ACCESS_XATTR, ACL_DEFAULT_XATTR };
	size_t i;

	for (i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
		size_t n = strlen(prefixes[i]);

		if (!strncmp(name, prefixes[i], n) && (prefixes[i][n - 1] == '.' || !name[n]))
			return 1;
	}
	return 0;
}

/* Open and read the inode's attributes.  Caller holds the fs lock. */
static int xopen(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_xattr_handle **h)
{
	errcode_t err = ext2fs_xattrs_open(rfs->fs, ino, h);

	if (!err) {
		err = ext2fs_xattrs_read(*h);
		if (err)
			ext2fs_xattrs_close(h);
	}
	return rr_err_ino(rfs, err, ino);
}

int xattr_get_locked(struct rr_fs *rfs, ext2_ino_t ino, const char *name, void **val, size_t *len)
{
	struct ext2_xattr_handle *h;
	void *v = NULL;
	int ret;

	if (!known_namespace(name))
		return -ENODATA;
	ret = xopen(rfs, ino, &h);
	if (!ret) {
		errcode_t err = ext2fs_xattr_get(h, name, &v, len);

		ret = err == EXT2_ET_EA_KEY_NOT_FOUND ? -ENODATA : rr_err_ino(rfs, err, ino);
		ext2fs_xattrs_close(&h);
	}
	if (ret)
		return ret;
	*val = malloc(*len ? *len : 1);
	if (*val)
		memcpy(*val, v, *len);
	ext2fs_free_mem(&v);
	return *val ? 0 : -ENOMEM;
}

#define CAPS_XATTR "security.capability"

/*
 * A new inode has no capability: its first write need not look (the
 * kernel asks before every write that may drop privileges).
 */
void xattr_caps_absent(struct rr_inode *ri)
{
	atomic_store(&ri->caps_absent, atomic_load(&ri->xattr_gen) + 1);
}

/*
 * xattr_get_locked (under the fs lock if locked, else taking it), answered
 * from the inode's memo of absence for the names that have one.  The
 * kernel holds the inode of every request, so the unpin here is never the
 * last reference, whose release would take the fs lock.
 */
static int get_remembered(struct rr_fs *rfs, ext2_ino_t ino, const char *name, void **val,
			  size_t *len, int locked)
{
	struct rr_inode *ri = NULL;
	atomic_uint *memo = NULL;
	unsigned int gen = 0;
	int ret;

	if ((!strcmp(name, CAPS_XATTR) || !strcmp(name, ACL_DEFAULT_XATTR)) && (ri = rr_ipin(rfs, ino))) {
		memo = strcmp(name, CAPS_XATTR) ? &ri->dacl_absent : &ri->caps_absent;
		gen = atomic_load(&ri->xattr_gen);
		if (atomic_load(memo) == gen + 1) {
			rr_iunpin(rfs, ri);
			return -ENODATA;
		}
	}
	if (!locked)
		rr_fs_lock(rfs);
	ret = xattr_get_locked(rfs, ino, name, val, len);
	if (!locked)
		rr_fs_end_op(rfs);
	if (ri) {
		/* A change since gen was read makes this record stale, as it should. */
		if (ret == -ENODATA)
			atomic_store(memo, gen + 1);
		rr_iunpin(rfs, ri);
	}
	return ret;
}

int xattr_get(struct rr_fs *rfs, ext2_ino_t ino, const char *name, void **val, size_t *len)
{
	return get_remembered(rfs, ino, name, val, len, 0);
}



struct list_ctx {
	char *buf;
	size_t len, cap;
	int privileged;
	int err;
};

static int list_cb(char *name, char *value, size_t value_len, void *data)
{
	struct list_ctx *c = data;
	size_t n = strlen(name) + 1;

	(void)value;
	(void)value_len;
	/* As ext4: trusted.* is listed to privileged callers only. */
	if (!c->privileged && !strncmp(name, "trusted.", 8))
		return 0;
	if (c->len + n > c->cap) {
		size_t cap = (c->cap + n) * 2;
		char *b = realloc(c->buf, cap);

		if (!b) {
			c->err = -ENOMEM;
			return XATTR_ABORT;
		}
		c->buf = b;
		c->cap = cap;
	}
	memcpy(c->buf + c->len, name, n);
	c->len += n;
	return 0;
}

int xattr_list(struct rr_fs *rfs, ext2_ino_t ino, int privileged, char **names, size_t *len)
{
	struct ext2_xattr_handle *h;
	struct list_ctx c = { .privileged = privileged };
	int ret;

	rr_fs_lock(rfs);
	ret = xopen(rfs, ino, &h);
	if (!ret) {
		ret = rr_err_ino(rfs, ext2fs_xattrs_iterate(h, list_cb, &c), ino);
		ext2fs_xattrs_close(&h);
	}
	rr_fs_end_op(rfs);
	if (!ret)
		ret = c.err;
	if (ret) {
		free(c.buf);
		return ret;
	}
	*names = c.buf;
	*len = c.len;
	return 0;
}

/*
 * libext2fs leaves an xattr block attached when its last entry goes; ext4
 * frees it.  Detach and release an empty block.  Caller holds the fs lock.
 */
static int drop_empty_block(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in)
{
	ext2_filsys fs = rfs->fs;
	blk64_t blk = ext2fs_file_acl_block(fs, (struct ext2_inode *)in);
	__u32 first, count = 0;
	char *buf;
	int ret;

	if (!blk)
		return 0;
	buf = malloc(fs->blocksize);
	if (!buf)
		return -ENOMEM;
	ret = rr_err_ino(rfs, ext2fs_read_ext_attr3(fs, blk, buf, ino), ino);
	if (!ret) {
		memcpy(&first, buf + sizeof(struct ext2_ext_attr_header), sizeof(first));
		if (first == 0) {
			ret = rr_err_ino(rfs, ext2fs_adjust_ea_refcount3(fs, blk, buf, -1, &count, ino), ino);
			if (!ret) {
				if (count == 0)
					ext2fs_block_alloc_stats2(fs, blk, -1);
				ext2fs_file_acl_block_set(fs, (struct ext2_inode *)in, 0);
				ext2fs_iblk_sub_blocks(fs, (struct ext2_inode *)in, 1);
			}
		}
	}
	free(buf);
	return ret;
}

/*
 * After a change: drop an emptied block, and ctime, as for any inode change.
 * perm: the permission bits an access ACL gave, and then kill_sgid whether
 * the set-gid bit goes with them.
 */
static int after_change(struct rr_fs *rfs, ext2_ino_t ino, const mode_t *perm, int kill_sgid)
{
	struct ext2_inode_large in;
	int ret = inode_load(rfs, ino, &in);

	if (!ret)
		ret = drop_empty_block(rfs, ino, &in);
	if (ret)
		return ret;
	if (perm)
		in.i_mode = (__u16)((in.i_mode & ~(kill_sgid ? 0777 | S_ISGID : 0777)) | (*perm & 0777));
	inode_touch(&in, RR_CTIME);
	return inode_write(rfs, ino, &in);
}

/* Set or remove (val == NULL) one attribute.  Caller holds the fs lock. */
static int set_raw(struct rr_fs *rfs, ext2_ino_t ino, const char *name, const void *val, size_t len,
		   int flags)
{
	struct ext2_xattr_handle *h;
	void *old = NULL;
	size_t oldlen;
	errcode_t err;
	int ret = xopen(rfs, ino, &h);

	if (ret)
		return ret;
	err = ext2fs_xattr_get(h, name, &old, &oldlen);
	if (!err)
		ext2fs_free_mem(&old);
	if (err && err != EXT2_ET_EA_KEY_NOT_FOUND)
		ret = rr_err_ino(rfs, err, ino);
	else if ((flags & XATTR_CREATE) && !err)
		ret = -EEXIST;
	else if ((flags & XATTR_REPLACE) && err)
		ret = -ENODATA;
	else if (val)
		ret = rr_err_ino(rfs, ext2fs_xattr_set(h, name, val, len), ino);
	else if (!err)
		ret = rr_err_ino(rfs, ext2fs_xattr_remove(h, name), ino);
	ext2fs_xattrs_close(&h);
	/* Any attribute change invalidates what xattr_get() remembers. */
	rr_ixattr_changed(rfs, ino);
	return ret;
}

int xattr_set_locked(struct rr_fs *rfs, ext2_ino_t ino, const char *name, const void *val,
		     size_t len, int flags)
{
	mode_t perm;
	int ret, equiv, is_access = !strcmp(name, ACL_ACCESS_XATTR);
	int kill_sgid = !!(flags & RR_XATTR_ACL_KILL_SGID);

	flags &= ~RR_XATTR_ACL_KILL_SGID;

	if (!known_namespace(name))
		return -EOPNOTSUPP;
	if (strlen(name) > 255)
		return -ERANGE;
	if (len > rfs->bsize && !ext2fs_has_feature_ea_inode(rfs->fs->super))
		return -ENOSPC;	/* without ea_inode a value must fit in one block */
	if (!strcmp(name, ACL_DEFAULT_XATTR)) {
		struct ext2_inode_large in;

		ret = inode_load(rfs, ino, &in);
		if (ret)
			return ret;
		if (!LINUX_S_ISDIR(in.i_mode))
			return -EACCES;
	}
	if (is_access || !strcmp(name, ACL_DEFAULT_XATTR)) {
		ret = acl_to_mode(val, len, &perm, &equiv);
		if (ret)
			return ret;
		if (is_access && equiv) {
			/* The mode says it all: keep no ACL, as ext4. */
			ret = set_raw(rfs, ino, name, NULL, 0, flags & XATTR_CREATE);
			return ret ? ret : after_change(rfs, ino, &perm, kill_sgid);
		}
	}
	ret = set_raw(rfs, ino, name, val, len, flags);
	return ret ? ret : after_change(rfs, ino, is_access ? &perm : NULL, kill_sgid);
}

int xattr_set(struct rr_fs *rfs, ext2_ino_t ino, const char *name, const void *val, size_t len,
	      int flags)
{
	int ret;

	rr_fs_lock(rfs);
	ret = xattr_set_locked(rfs, ino, name, val, len, flags);
	rr_fs_end_op(rfs);
	return ret;
}

int xattr_remove(struct rr_fs *rfs, ext2_ino_t ino, const char *name)
{
	int ret;

	if (!known_namespace(name))
		return -ENODATA;
	rr_fs_lock(rfs);
	ret = set_raw(rfs, ino, name, NULL, 0, XATTR_REPLACE);
	if (!ret)
		ret = after_change(rfs, ino, NULL, 0);
	rr_fs_end_op(rfs);
	return ret;
}

/* chmod of an inode with an access ACL: the ACL follows.  Caller holds the fs lock. */
int xattr_acl_chmod(struct rr_fs *rfs, ext2_ino_t ino, mode_t mode)
{
	void *val = NULL;
	size_t len;
	int ret = xattr_get_locked(rfs, ino, ACL_ACCESS_XATTR, &val, &len);

	if (ret == -ENODATA)
		return 0;
	if (!ret)
		ret = acl_chmod(val, len, mode);
	if (!ret)
		ret = set_raw(rfs, ino, ACL_ACCESS_XATTR, val, len, 0);
	free(val);
	return ret;
}

/*
 * A new inode in dir: its parent's default ACL becomes its access ACL (and
 * a directory's default ACL); without one, the umask applies.  *mode is the
 * requested mode on entry and the one to create with on return.  Caller
 * holds the fs lock and calls xattr_acl_apply() once the inode exists.
 */
int xattr_acl_prepare(struct rr_fs *rfs, ext2_ino_t dir, mode_t *mode, mode_t umask,
		      struct rr_acl_init *ai)
{
	int ret;

	memset(ai, 0, sizeof(*ai));
	ret = get_remembered(rfs, dir, ACL_DEFAULT_XATTR, &ai->dflt, &ai->dflt_len, 1);
	if (ret == -ENODATA) {
		*mode &= ~umask;
		return 0;
	}
	if (ret)
		return ret;
	if (S_ISLNK(*mode))
		return 0;
	return acl_inherit(ai->dflt, ai->dflt_len, mode, &ai->acc, &ai->acc_len);
}

int xattr_acl_apply(struct rr_fs *rfs, ext2_ino_t ino, mode_t mode, struct rr_acl_init *ai)
{
	int ret = 0;

	if (ai->acc)
		ret = set_raw(rfs, ino, ACL_ACCESS_XATTR, ai->acc, ai->acc_len, 0);
	if (!ret && ai->dflt && S_ISDIR(mode))
		ret = set_raw(rfs, ino, ACL_DEFAULT_XATTR, ai->dflt, ai->dflt_len, 0);
	return ret;
}

void xattr_acl_done(struct rr_acl_init *ai)
{
	free(ai->acc);
	free(ai->dflt);
	memset(ai, 0, sizeof(*ai));
}

// SPDX-License-Identifier: GPL-2.0
/*
 * Extended attributes through libext2fs's xattr handles: in-inode space
 * first, then an xattr block (allocated through our allocator's callback).
 * POSIX ACLs are translated between the VFS and ext4 formats by libext2fs.
 */
#include "xattr.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

static int known_namespace(const char *name)
{
	static const char *const prefixes[] = { "user.", "trusted.", "security.",
						"system.posix_acl_access", "system.posix_acl_default" };
	size_t i;

	for (i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (!strncmp(name, prefixes[i], strlen(prefixes[i])))
			return 1;
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
	return rr_err(err);
}

int xattr_get(struct rr_fs *rfs, ext2_ino_t ino, const char *name, void **val, size_t *len)
{
	struct ext2_xattr_handle *h;
	void *v = NULL;
	int ret;

	if (!known_namespace(name))
		return -ENODATA;
	rr_fs_lock(rfs);
	ret = xopen(rfs, ino, &h);
	if (!ret) {
		ret = rr_err(ext2fs_xattr_get(h, name, &v, len));
		ext2fs_xattrs_close(&h);
	}
	rr_fs_unlock(rfs);
	if (ret)
		return ret;
	*val = malloc(*len ? *len : 1);
	if (*val)
		memcpy(*val, v, *len);
	ext2fs_free_mem(&v);
	return *val ? 0 : -ENOMEM;
}

struct list_ctx {
	char *buf;
	size_t len, cap;
	int err;
};

static int list_cb(char *name, char *value, size_t value_len, void *data)
{
	struct list_ctx *c = data;
	size_t n = strlen(name) + 1;

	(void)value;
	(void)value_len;
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

int xattr_list(struct rr_fs *rfs, ext2_ino_t ino, char **names, size_t *len)
{
	struct ext2_xattr_handle *h;
	struct list_ctx c = { 0 };
	int ret;

	rr_fs_lock(rfs);
	ret = xopen(rfs, ino, &h);
	if (!ret) {
		ret = rr_err(ext2fs_xattrs_iterate(h, list_cb, &c));
		ext2fs_xattrs_close(&h);
	}
	rr_fs_unlock(rfs);
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

/* After a change: ctime, as every attribute change is an inode change. */
static int touch_ctime(struct rr_fs *rfs, ext2_ino_t ino)
{
	struct ext2_inode_large in;
	int ret = inode_load(rfs, ino, &in);

	if (ret)
		return ret;
	inode_touch(&in, RR_CTIME);
	return inode_write(rfs, ino, &in);
}

int xattr_set(struct rr_fs *rfs, ext2_ino_t ino, const char *name, const void *val, size_t len,
	      int flags)
{
	struct ext2_xattr_handle *h;
	void *old = NULL;
	size_t oldlen;
	errcode_t err;
	int ret;

	if (!known_namespace(name))
		return -EOPNOTSUPP;
	if (strlen(name) > 255)
		return -ERANGE;
	if (len > rfs->bsize)
		return -ENOSPC;	/* ext4 without ea_inode: a value must fit in one block */
	rr_fs_lock(rfs);
	ret = xopen(rfs, ino, &h);
	if (ret)
		goto out;
	err = ext2fs_xattr_get(h, name, &old, &oldlen);
	if (!err)
		ext2fs_free_mem(&old);
	if (err && err != EXT2_ET_EA_KEY_NOT_FOUND)
		ret = rr_err(err);
	else if ((flags & XATTR_CREATE) && !err)
		ret = -EEXIST;
	else if ((flags & XATTR_REPLACE) && err)
		ret = -ENODATA;
	else
		ret = rr_err(ext2fs_xattr_set(h, name, val, len));
	ext2fs_xattrs_close(&h);
	if (!ret)
		ret = touch_ctime(rfs, ino);
out:
	rr_fs_unlock(rfs);
	return ret;
}

int xattr_remove(struct rr_fs *rfs, ext2_ino_t ino, const char *name)
{
	struct ext2_xattr_handle *h;
	void *old = NULL;
	size_t oldlen;
	errcode_t err;
	int ret;

	if (!known_namespace(name))
		return -ENODATA;
	rr_fs_lock(rfs);
	ret = xopen(rfs, ino, &h);
	if (ret)
		goto out;
	err = ext2fs_xattr_get(h, name, &old, &oldlen);
	if (!err) {
		ext2fs_free_mem(&old);
		ret = rr_err(ext2fs_xattr_remove(h, name));
	} else {
		ret = err == EXT2_ET_EA_KEY_NOT_FOUND ? -ENODATA : rr_err(err);
	}
	ext2fs_xattrs_close(&h);
	if (!ret)
		ret = touch_ctime(rfs, ino);
out:
	rr_fs_unlock(rfs);
	return ret;
}

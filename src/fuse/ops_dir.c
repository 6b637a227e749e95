// SPDX-License-Identifier: GPL-2.0
/*
 * FUSE requests on open directories: a listing is taken at offset 0 and
 * served from the handle, so that entries added or removed meanwhile
 * neither repeat nor vanish from one pass.
 */
#include "ops_int.h"
#include "dir.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct rr_dirh {
	struct rr_dirlist list;
	int loaded;
};

void rr_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct rr_dirh *dh = calloc(1, sizeof(*dh));

	(void)ino;
	if (!dh) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fi->fh = (uintptr_t)dh;
	if (fuse_reply_open(req, fi) == -ENOENT)
		free(dh);
}

static void do_readdir(fuse_req_t req, fuse_ino_t fino, size_t size, off_t off,
		       struct fuse_file_info *fi, int plus)
{
	struct rr_fs *rfs = rr_fs_of(req);
	struct rr_dirh *dh = (struct rr_dirh *)(uintptr_t)fi->fh;
	struct rr_inode *dir;
	char *buf, *p;
	size_t rem = size, i;
	int ret;

	/* Offset 0 is a fresh opendir or a rewinddir: take a new snapshot. */
	if (off == 0 || !dh->loaded) {
		dir_list_free(&dh->list);
		ret = dir_list(rfs, e2ino(fino), &dh->list);
		if (ret) {
			fuse_reply_err(req, -ret);
			return;
		}
		dh->loaded = 1;
		dir = rfs->opts.diratime ? ops_node(rfs, fino) : NULL;
		if (dir) {
			inode_accessed(rfs, dir);
			rr_iunpin(rfs, dir);
		}
	}
	buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	p = buf;
	for (i = (size_t)off; i < dh->list.n; i++) {
		struct rr_dirent *d = &dh->list.v[i];
		size_t n;

		if (plus) {
			struct fuse_entry_param e = { 0 };
			int dots = !strcmp(d->name, ".") || !strcmp(d->name, "..");
			struct ext2_inode_large in;
			struct rr_inode *ri = NULL;

			if (!dots) {
				ret = dir_entry_ref(rfs, e2ino(fino), &dh->list, d, &ri, &in);
				if (ret == -ENOENT)
					continue;	/* gone since the listing */
				if (ret) {
					/* Unreadable: a plain entry, no reference. */
					ri = NULL;
					e.attr.st_ino = d->ino;
					e.attr.st_mode = (mode_t)DTTOIF(d->type);
				} else {
					ops_fill_entry(rfs, d->ino, &in, &e);
				}
			} else {
				e.attr.st_ino = d->ino;
				e.attr.st_mode = S_IFDIR;
			}
			n = fuse_add_direntry_plus(req, p, rem, d->name, &e, (off_t)(i + 1));
			if (n > rem) {
				if (ri)
					rr_iput(rfs, ri, 1, 0);
				break;
			}
		} else {
			struct stat st = { .st_ino = d->ino, .st_mode = (mode_t)DTTOIF(d->type) };

			n = fuse_add_direntry(req, p, rem, d->name, &st, (off_t)(i + 1));
			if (n > rem)
				break;
		}
		p += n;
		rem -= n;
	}
	fuse_reply_buf(req, buf, size - rem);
	free(buf);
}

void rr_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, 0);
}

void rr_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, 1);
}

void rr_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct rr_dirh *dh = (struct rr_dirh *)(uintptr_t)fi->fh;

	(void)ino;
	dir_list_free(&dh->list);
	free(dh);
	fuse_reply_err(req, 0);
}

// SPDX-License-Identifier: GPL-2.0
/*
 * rrmap's files: every inode in use, its extents, and where its blocks are.
 *
 * An extent here is a leaf entry of the extent tree, as debugfs "ex" lists
 * it; for a block-mapped (ext2/3) file, a run of blocks contiguous both in
 * the file and on disk, as the kernel's FIEMAP reports it.  A fragment is a
 * run that is where the previous one leads on disk, which is what filefrag
 * counts as "N extents found": an extent that starts on disk right after
 * the previous one, or as far after it as it is in the file (a hole
 * skipping as many blocks on disk), does not count again.
 *
 * Corrupt trees must not crash or hang us: leaves must come in increasing
 * logical order and lie inside the filesystem, and a file may not visit
 * more tree entries than the filesystem has blocks.
 */
#include "rrmap.h"

#include <et/com_err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One file being walked. */
struct mfile_walk {
	struct map_image *m;
	ext2_ino_t ino;
	bool count_data;	/* add its blocks to the groups' data */
	uint64_t extents, frags;
	uint64_t next_lblk;	/* first logical block after the last extent */
	uint64_t next_pblk;	/* first physical block after the last extent */
	bool have_last;
	struct map_extent *out;	/* --file: the extents themselves */
	uint64_t nout, capout;
	bool corrupt;
};

/* Blocks [b, b + len) hold this file's data or metadata. */
static void mfile_count(struct mfile_walk *w, uint64_t b, uint64_t len)
{
	struct map_image *m = w->m;
	uint64_t first = m->fs->super->s_first_data_block, bpg = EXT2_BLOCKS_PER_GROUP(m->fs->super);

	if (!w->count_data)
		return;
	while (len) {
		dgrp_t g = (b - first) / bpg;
		struct map_group *x = &m->groups[g];
		uint64_t n = x->first + x->nblocks - b;

		if (n > len)
			n = len;
		x->data += n;
		b += n;
		len -= n;
	}
}

static bool mfile_in_fs(const struct map_image *m, uint64_t b, uint64_t len)
{
	return b >= m->fs->super->s_first_data_block && len <= m->blocks && b <= m->blocks - len;
}

/* One mapping of the file, in logical order. */
static int mfile_extent(struct mfile_walk *w, uint64_t lblk, uint64_t pblk, uint64_t len, bool unwritten)
{
	if (!len || !mfile_in_fs(w->m, pblk, len) || (w->have_last && lblk < w->next_lblk))
		return -1;
	if (!w->have_last || (pblk != w->next_pblk && pblk != w->next_pblk + (lblk - w->next_lblk)))
		w->frags++;
	w->extents++;
	w->have_last = true;
	w->next_lblk = lblk + len;
	w->next_pblk = pblk + len;
	mfile_count(w, pblk, len);
	if (w->out || w->capout) {
		if (w->nout == w->capout) {
			struct map_extent *n;

			w->capout = w->capout ? 2 * w->capout : 16;
			n = realloc(w->out, w->capout * sizeof(*n));
			if (!n)
				return -1;
			w->out = n;
		}
		w->out[w->nout++] = (struct map_extent){ lblk, pblk, len, unwritten };
	}
	return 0;
}

static int mfile_walk_extents(struct mfile_walk *w, struct ext2_inode *inode)
{
	struct map_image *m = w->m;
	ext2_extent_handle_t h;
	struct ext2fs_extent e;
	uint64_t visits = 0;
	errcode_t err;
	int op = EXT2_EXTENT_ROOT;

	err = ext2fs_extent_open2(m->fs, w->ino, inode, &h);
	if (err)
		return -1;
	for (;; op = EXT2_EXTENT_NEXT) {
		err = ext2fs_extent_get(h, op, &e);
		/* the end, or an empty tree */
		if (err == EXT2_ET_EXTENT_NO_NEXT)
			break;
		if (err || ++visits > 2 * m->blocks + 16)
			goto bad;
		if (e.e_flags & EXT2_EXTENT_FLAGS_SECOND_VISIT)
			continue;
		if (e.e_flags & EXT2_EXTENT_FLAGS_LEAF) {
			if (mfile_extent(w, e.e_lblk, e.e_pblk, e.e_len,
					 e.e_flags & EXT2_EXTENT_FLAGS_UNINIT))
				goto bad;
		} else {
			/* an index entry: the tree block below it */
			if (!mfile_in_fs(m, e.e_pblk, 1))
				goto bad;
			mfile_count(w, e.e_pblk, 1);
		}
	}
	ext2fs_extent_free(h);
	return 0;
bad:
	ext2fs_extent_free(h);
	return -1;
}

/* Block-mapped files: merge what block_iterate gives into runs. */
struct mfile_run {
	struct mfile_walk *w;
	uint64_t lblk, pblk, len;
	int err;
};

static int mfile_run_flush(struct mfile_run *r)
{
	int ret = r->len ? mfile_extent(r->w, r->lblk, r->pblk, r->len, false) : 0;

	r->len = 0;
	return ret;
}

static int mfile_block(ext2_filsys fs, blk64_t *blocknr, e2_blkcnt_t blockcnt, blk64_t ref_blk,
		       int ref_offset, void *priv)
{
	struct mfile_run *r = priv;

	(void)fs;
	(void)ref_blk;
	(void)ref_offset;
	if (!mfile_in_fs(r->w->m, *blocknr, 1)) {
		r->err = 1;
		return BLOCK_ABORT;
	}
	if (blockcnt < 0) {
		/* an indirect block */
		mfile_count(r->w, *blocknr, 1);
		return 0;
	}
	if (r->len && (uint64_t)blockcnt == r->lblk + r->len && *blocknr == r->pblk + r->len) {
		r->len++;
		return 0;
	}
	if (mfile_run_flush(r)) {
		r->err = 1;
		return BLOCK_ABORT;
	}
	r->lblk = blockcnt;
	r->pblk = *blocknr;
	r->len = 1;
	return 0;
}

static int mfile_walk_blocks(struct mfile_walk *w)
{
	struct mfile_run r = { .w = w };
	errcode_t err;

	err = ext2fs_block_iterate3(w->m->fs, w->ino, BLOCK_FLAG_READ_ONLY, NULL, mfile_block, &r);
	if (err || r.err || mfile_run_flush(&r))
		return -1;
	return 0;
}

static int mfile_walk(struct mfile_walk *w, struct ext2_inode *inode)
{
	struct map_image *m = w->m;
	blk64_t acl;

	if (inode->i_flags & EXT4_INLINE_DATA_FL)
		return 0;
	acl = ext2fs_file_acl_block(m->fs, inode);
	if (acl) {
		if (!mfile_in_fs(m, acl, 1))
			return -1;
		mfile_count(w, acl, 1);
	}
	if (!ext2fs_inode_has_valid_blocks2(m->fs, inode))
		return 0;
	if (inode->i_flags & EXT4_EXTENTS_FL)
		return mfile_walk_extents(w, inode);
	return mfile_walk_blocks(w);
}

int mfile_push(struct map_image *m, uint64_t extents, uint64_t frags)
{
	if (m->nfiles == m->cap) {
		uint64_t cap = m->cap ? 2 * m->cap : 1024;
		uint32_t *e = realloc(m->extents, cap * sizeof(*e));

		if (!e)
			return -1;
		m->extents = e;
		e = realloc(m->frags, cap * sizeof(*e));
		if (!e)
			return -1;
		m->frags = e;
		m->cap = cap;
	}
	m->extents[m->nfiles] = extents > UINT32_MAX ? UINT32_MAX : extents;
	m->frags[m->nfiles] = frags > UINT32_MAX ? UINT32_MAX : frags;
	m->nfiles++;
	return 0;
}

int mfile_scan(struct map_image *m)
{
	ext2_filsys fs = m->fs;
	ext2_inode_scan scan;
	struct ext2_inode *inode;
	unsigned int isize = EXT2_INODE_SIZE(fs->super);
	ext2_ino_t ino;
	errcode_t err;
	int ret = -1;

	inode = malloc(isize);
	if (!inode) {
		fprintf(stderr, "rrmap: out of memory\n");
		return -1;
	}
	err = ext2fs_open_inode_scan(fs, 0, &scan);
	if (err) {
		mfs_error(m, err, "cannot scan the inodes");
		free(inode);
		return -1;
	}
	for (;;) {
		struct mfile_walk w = { .m = m };
		uint16_t type;

		err = ext2fs_get_next_inode_full(scan, &ino, inode, isize);
		if (err) {
			mfs_error(m, err, "while scanning the inodes");
			goto out;
		}
		if (!ino)
			break;
		if (ino > fs->super->s_inodes_count || !ext2fs_test_inode_bitmap2(fs->inode_map, ino) ||
		    !inode->i_links_count)
			continue;
		if (ino != EXT2_ROOT_INO && ino < EXT2_FIRST_INODE(fs->super))
			continue;
		type = inode->i_mode & LINUX_S_IFMT;
		if (type != LINUX_S_IFREG && type != LINUX_S_IFDIR && type != LINUX_S_IFLNK)
			continue;
		w.ino = ino;
		w.count_data = true;
		if (mfile_walk(&w, inode)) {
			fprintf(stderr, "rrmap: %s: inode %u: corrupt block map or extent tree\n", m->path, ino);
			goto out;
		}
		if (type == LINUX_S_IFDIR) {
			m->ndirs++;
			m->groups[ext2fs_group_of_ino(fs, ino)].dirs++;
		} else if (type == LINUX_S_IFLNK) {
			m->nsymlinks++;
		} else if (mfile_push(m, w.extents, w.frags)) {
			fprintf(stderr, "rrmap: out of memory\n");
			goto out;
		} else {
			m->groups[ext2fs_group_of_ino(fs, ino)].files++;
		}
	}
	ret = 0;
out:
	ext2fs_close_inode_scan(scan);
	free(inode);
	return ret;
}

int mfile_extents(struct map_image *m, const char *path, struct map_extent **out, uint64_t *n,
		  uint64_t *size)
{
	struct mfile_walk w = { .m = m };
	struct ext2_inode_large inode;
	ext2_ino_t ino;
	errcode_t err;

	while (*path == '/')
		path++;
	err = ext2fs_namei_follow(m->fs, EXT2_ROOT_INO, EXT2_ROOT_INO, *path ? path : ".", &ino);
	if (err) {
		fprintf(stderr, "rrmap: %s: %s: %s\n", m->path, path, error_message(err));
		return -1;
	}
	memset(&inode, 0, sizeof(inode));
	err = ext2fs_read_inode_full(m->fs, ino, (struct ext2_inode *)&inode, sizeof(inode));
	if (err) {
		fprintf(stderr, "rrmap: %s: %s: %s\n", m->path, path, error_message(err));
		return -1;
	}
	/* collect the extents: a non-zero capacity asks mfile_extent to keep them */
	w.ino = ino;
	w.out = malloc(16 * sizeof(*w.out));
	if (!w.out)
		return -1;
	w.capout = 16;
	if (mfile_walk(&w, (struct ext2_inode *)&inode)) {
		fprintf(stderr, "rrmap: %s: %s (inode %u): corrupt block map or extent tree\n", m->path,
			path, ino);
		free(w.out);
		return -1;
	}
	*out = w.out;
	*n = w.nout;
	*size = EXT2_I_SIZE(&inode);
	return 0;
}

static int mfile_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Mean, nearest-rank percentiles, max and files above one of v[0..n). */
int mfile_dist(struct map_dist *d, const uint32_t *v, uint64_t n)
{
	uint32_t *s;
	double sum = 0;

	memset(d, 0, sizeof(*d));
	d->n = n;
	if (!n)
		return 0;
	s = malloc(n * sizeof(*s));
	if (!s)
		return -1;
	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), mfile_cmp);
	for (uint64_t i = 0; i < n; i++) {
		sum += s[i];
		d->over_one += s[i] > 1;
	}
	d->mean = sum / n;
	/* nearest rank: the smallest value with at least p % of the files at or below it */
	d->p50 = s[(n * 50 + 99) / 100 - 1];
	d->p99 = s[(n * 99 + 99) / 100 - 1];
	d->max = s[n - 1];
	free(s);
	return 0;
}

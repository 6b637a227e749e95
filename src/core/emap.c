// SPDX-License-Identifier: GPL-2.0
/*
 * The block map of a file: an in-memory sorted array of extents that the
 * data path consults without libext2fs, and the changes to the on-disk tree
 * (extent tree, or block map for old ext2/3 files) that keep it true.
 *
 * The array is loaded on first use under the fs lock, read under the
 * inode's rw lock (shared), and changed only with rw held exclusively.  Any
 * change that this file does not make itself (punch, fallocate, truncate)
 * drops it, and the next user reloads it.
 */
#include "rrfs.h"
#include "log.h"
#include "rrfuse/grow.h"

#include <errno.h>
#include <ext2fs/ext3_extents.h>
#include <stdlib.h>
#include <string.h>


void emap_drop(struct rr_inode *ri)
{
	free(ri->emap.v);
	memset(&ri->emap, 0, sizeof(ri->emap));
	atomic_store_explicit(&ri->emap_loaded, 0, memory_order_release);
}

static int emap_reserve(struct rr_emap *m, uint32_t extra)
{
	return rr_grow(&m->v, sizeof(*m->v), &m->cap, (size_t)m->n + extra, 8);
}

/* Append while loading: merges physically and logically contiguous runs. */
static int emap_append(struct rr_emap *m, uint32_t lblk, uint32_t len, uint64_t pblk, int uninit)
{
	struct rr_ext *last = m->n ? &m->v[m->n - 1] : NULL;

	if (last && last->lblk + last->len == lblk && last->pblk + last->len == pblk &&
	    last->uninit == (uint32_t)uninit && (uint64_t)last->len + len <= UINT32_MAX) {
		last->len += len;
		return 0;
	}
	if (emap_reserve(m, 1))
		return -ENOMEM;
	m->v[m->n++] = (struct rr_ext){ .lblk = lblk, .len = len, .pblk = pblk, .uninit = (uint32_t)uninit };
	return 0;
}

struct blockmap_ctx {
	struct rr_emap *m;
	errcode_t err;
};

static int load_blockmap_cb(ext2_filsys fs, blk64_t *blocknr, e2_blkcnt_t blockcnt, blk64_t ref_blk,
			    int ref_offset, void *priv)
{
	struct blockmap_ctx *c = priv;

	(void)ref_blk, (void)ref_offset;
	if (blockcnt < 0)
		return 0;
	if (*blocknr < fs->super->s_first_data_block || *blocknr >= ext2fs_blocks_count(fs->super) ||
	    (uint64_t)blockcnt >= (1ULL << 32)) {
		c->err = EXT2_ET_BAD_BLOCK_NUM;	/* a corrupt block map: the file gives EIO */
		return BLOCK_ABORT;
	}
	if (emap_append(c->m, (uint32_t)blockcnt, 1, *blocknr, 0)) {
		c->err = EXT2_ET_NO_MEMORY;
		return BLOCK_ABORT;
	}
	return 0;
}

/* The block map of an ext2/3-style (indirect) file. */
static errcode_t load_blockmap(ext2_filsys fs, ext2_ino_t ino, struct rr_emap *m)
{
	struct blockmap_ctx c = { .m = m };
	errcode_t err = ext2fs_block_iterate3(fs, ino, BLOCK_FLAG_READ_ONLY | BLOCK_FLAG_DATA_ONLY, NULL,
					      load_blockmap_cb, &c);

	return err ? err : c.err;
}

/* The extent tree's root in the inode, when it is the only node (depth 0) and looks sane; else NULL. */
static struct ext3_extent_header *root_leaf(struct ext2_inode_large *in)
{
	struct ext3_extent_header *eh = (struct ext3_extent_header *)in->i_block;
	unsigned int max = (sizeof(in->i_block) - sizeof(*eh)) / sizeof(struct ext3_extent);

	if (!(in->i_flags & EXT4_EXTENTS_FL) || ext2fs_le16_to_cpu(eh->eh_magic) != EXT3_EXT_MAGIC ||
	    eh->eh_depth || ext2fs_le16_to_cpu(eh->eh_max) != max ||
	    ext2fs_le16_to_cpu(eh->eh_entries) > max)
		return NULL;
	return eh;
}

void emap_root_init(struct ext2_inode_large *in)
{
	struct ext3_extent_header *eh = (struct ext3_extent_header *)in->i_block;

	memset(in->i_block, 0, sizeof(in->i_block));
	eh->eh_magic = ext2fs_cpu_to_le16(EXT3_EXT_MAGIC);
	eh->eh_max = ext2fs_cpu_to_le16((sizeof(in->i_block) - sizeof(*eh)) / sizeof(struct ext3_extent));
	in->i_flags |= EXT4_EXTENTS_FL;
}

static void ext_get(const struct ext3_extent *e, struct ext2fs_extent *out)
{
	unsigned int len = ext2fs_le16_to_cpu(e->ee_len);

	out->e_lblk = ext2fs_le32_to_cpu(e->ee_block);
	out->e_pblk = ext2fs_le32_to_cpu(e->ee_start) +
		      ((uint64_t)ext2fs_le16_to_cpu(e->ee_start_hi) << 32);
	out->e_flags = len > EXT_INIT_MAX_LEN ? EXT2_EXTENT_FLAGS_UNINIT : 0;
	out->e_len = len > EXT_INIT_MAX_LEN ? len - EXT_INIT_MAX_LEN : len;
}

/* Append a leaf extent read from the tree to m, refusing what the kernel would. */
static errcode_t load_one(ext2_filsys fs, struct rr_emap *m, const struct ext2fs_extent *ex)
{
	if (!ex->e_len)
		return 0;
	if (m->n && ex->e_lblk < (uint64_t)m->v[m->n - 1].lblk + m->v[m->n - 1].len)
		return EXT2_ET_EXTENT_HEADER_BAD;	/* overlapping or unsorted */
	if (ex->e_pblk < fs->super->s_first_data_block ||
	    ex->e_pblk + ex->e_len > ext2fs_blocks_count(fs->super))
		return EXT2_ET_BAD_BLOCK_NUM;
	if (emap_append(m, (uint32_t)ex->e_lblk, ex->e_len, ex->e_pblk,
			!!(ex->e_flags & EXT2_EXTENT_FLAGS_UNINIT)))
		return EXT2_ET_NO_MEMORY;
	return 0;
}

/* The tree through libext2fs's handle: any depth, and the -o check's independent view. */
static errcode_t load_tree(ext2_filsys fs, ext2_ino_t ino, struct ext2_inode_large *in,
			   struct rr_emap *m)
{
	ext2_extent_handle_t h;
	struct ext2fs_extent ex;
	errcode_t err;
	int op = EXT2_EXTENT_ROOT, want = 0;
	uint64_t want_lblk = 0;

	err = ext2fs_extent_open2(fs, ino, (struct ext2_inode *)in, &h);
	if (err)
		return err;
	for (;;) {
		err = ext2fs_extent_get(h, op, &ex);
		op = EXT2_EXTENT_NEXT;
		if (err == EXT2_ET_EXTENT_NO_NEXT) {
			err = 0;
			break;
		}
		if (err)
			break;
		if (ex.e_flags & EXT2_EXTENT_FLAGS_SECOND_VISIT)
			continue;
		/* The first key of a node is the key its parent index gives it, as the kernel checks. */
		if (want && ex.e_lblk != want_lblk) {
			err = EXT2_ET_EXTENT_HEADER_BAD;
			break;
		}
		want = !(ex.e_flags & EXT2_EXTENT_FLAGS_LEAF);
		want_lblk = ex.e_lblk;
		if (want)
			continue;
		err = load_one(fs, m, &ex);
		if (err)
			break;
	}
	ext2fs_extent_free(h);
	return err;
}

static errcode_t load_extents(ext2_filsys fs, ext2_ino_t ino, struct ext2_inode_large *in,
			      struct rr_emap *m)
{
	struct ext3_extent_header *eh = root_leaf(in);
	struct ext2fs_extent ex;
	errcode_t err = 0;
	unsigned int i;

	if (!eh)
		return load_tree(fs, ino, in, m);
	/* All in the inode (a small file): read there, without a handle. */
	for (i = 0; !err && i < ext2fs_le16_to_cpu(eh->eh_entries); i++) {
		ext_get((struct ext3_extent *)(eh + 1) + i, &ex);
		err = load_one(fs, m, &ex);
	}
	return err;
}

/* Make sure ri->emap is loaded.  Caller holds ri->rw (either mode). */
int emap_ensure(struct rr_fs *rfs, struct rr_inode *ri)
{
	struct ext2_inode_large in;
	struct rr_emap m = { 0 };
	errcode_t err;

	if (atomic_load_explicit(&ri->emap_loaded, memory_order_acquire))
		return 0;
	rr_fs_lock(rfs);
	/* Shared holders of rw may race here; the fs lock orders them. */
	if (atomic_load_explicit(&ri->emap_loaded, memory_order_acquire)) {
		rr_fs_end_op(rfs);
		return 0;
	}
	err = ext2fs_read_inode_full(rfs->fs, ri->ino, (struct ext2_inode *)&in, sizeof(in));
	/*
	 * Inline data is refused at mount, so the flag here is corruption; and
	 * libext2fs would call the inode's blocks invalid, hiding its real map.
	 */
	if (!err && (in.i_flags & EXT4_INLINE_DATA_FL))
		err = EXT2_ET_EXTENT_HEADER_BAD;
	if (!err && ext2fs_inode_has_valid_blocks2(rfs->fs, (struct ext2_inode *)&in)) {
		if (in.i_flags & EXT4_EXTENTS_FL)
			err = load_extents(rfs->fs, ri->ino, &in, &m);
		else
			err = load_blockmap(rfs->fs, ri->ino, &m);
	}
	if (err) {
		rr_fs_end_op(rfs);
		free(m.v);
		/* A corrupt map is a filesystem error, as ext4_ext_check_inode's. */
		return rr_err_ino(rfs, err, ri->ino) == -ENOMEM ? -ENOMEM : -EIO;
	}
	ri->emap = m;
	ri->extents = !!(in.i_flags & EXT4_EXTENTS_FL);
	atomic_store_explicit(&ri->emap_loaded, 1, memory_order_release);
	rr_fs_end_op(rfs);
	return 0;
}

/*
 * What maps lblk: out->pblk (0 for a hole), out->uninit, and out->len, the
 * number of blocks from lblk on that map the same way (for a hole: up to the
 * next extent, or UINT32_MAX).
 */
void emap_lookup(const struct rr_emap *m, uint64_t lblk, struct rr_ext *out)
{
	uint32_t lo = 0, hi = m->n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if ((uint64_t)m->v[mid].lblk + m->v[mid].len <= lblk)
			lo = mid + 1;
		else
			hi = mid;
	}
	out->lblk = (uint32_t)lblk;
	if (lo < m->n && m->v[lo].lblk <= lblk) {
		const struct rr_ext *e = &m->v[lo];

		out->pblk = e->pblk + (lblk - e->lblk);
		out->len = (uint32_t)(e->lblk + e->len - lblk);
		out->uninit = e->uninit;
	} else {
		out->pblk = 0;
		out->uninit = 0;
		out->len = lo < m->n ? (uint32_t)(m->v[lo].lblk - lblk) : UINT32_MAX;
	}
}

/* Set [lblk, lblk+len) to map to pblk in the cached array, whatever it mapped before. */
void emap_cache_set(struct rr_emap *m, uint32_t lblk, uint32_t len, uint64_t pblk, int uninit)
{
	uint64_t end = (uint64_t)lblk + len;
	uint32_t i, j, out = 0;
	struct rr_ext *tmp;

	if (emap_reserve(m, 2)) {
		/* Cannot grow: forget the cache rather than keep it wrong. */
		free(m->v);
		memset(m, 0, sizeof(*m));
		return;
	}
	tmp = malloc((m->n + 2) * sizeof(*tmp));
	if (!tmp) {
		free(m->v);
		memset(m, 0, sizeof(*m));
		return;
	}
	for (i = 0; i < m->n && (uint64_t)m->v[i].lblk + m->v[i].len <= lblk; i++)
		tmp[out++] = m->v[i];
	/* Head piece of an extent that overlaps the start. */
	if (i < m->n && m->v[i].lblk < lblk) {
		tmp[out] = m->v[i];
		tmp[out].len = lblk - m->v[i].lblk;
		out++;
	}
	tmp[out++] = (struct rr_ext){ .lblk = lblk, .len = len, .pblk = pblk, .uninit = (uint32_t)uninit };
	for (j = i; j < m->n && m->v[j].lblk < end; j++) {
		uint64_t e_end = (uint64_t)m->v[j].lblk + m->v[j].len;

		if (e_end > end) {
			/* Tail piece of an extent that overlaps the end. */
			tmp[out] = m->v[j];
			tmp[out].lblk = (uint32_t)end;
			tmp[out].pblk += end - m->v[j].lblk;
			tmp[out].len = (uint32_t)(e_end - end);
			out++;
		}
	}
	for (; j < m->n; j++)
		tmp[out++] = m->v[j];
	/* Merge the new entry with contiguous neighbours. */
	for (i = 0, j = 0; i < out; i++) {
		if (j && tmp[j - 1].lblk + tmp[j - 1].len == tmp[i].lblk &&
		    tmp[j - 1].pblk + tmp[j - 1].len == tmp[i].pblk && tmp[j - 1].uninit == tmp[i].uninit &&
		    (uint64_t)tmp[j - 1].len + tmp[i].len <= UINT32_MAX)
			tmp[j - 1].len += tmp[i].len;
		else
			tmp[j++] = tmp[i];
	}
	memcpy(m->v, tmp, j * sizeof(*tmp));
	m->n = j;
	free(tmp);
}

/* How many extents start at or before lblk (so v[that - 1] is the last of them). */
static uint32_t extents_upto(const struct rr_emap *m, uint64_t lblk)
{
	uint32_t lo = 0, hi = m->n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (m->v[mid].lblk <= lblk)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static __thread uint32_t req_pid;

void rr_set_req_pid(uint32_t pid)
{
	req_pid = pid;
}

/*
 * Where a regular file with no block yet starts (kernel:
 * ext4_inode_to_goal_block).  With flex groups of 4 or more, the first
 * group of the inode's flex group is left to directories and metadata:
 * every file of a flex group aims at its second group's first block, so
 * files written together start side by side.  Without delayed allocation
 * the writer's pid spreads writers over 16 slices of that group.
 */
static uint64_t inode_goal(struct rr_fs *rfs, ext2_ino_t ino)
{
	ext2_filsys fs = rfs->fs;
	unsigned int lf = fs->super->s_log_groups_per_flex;
	dgrp_t group = ext2fs_group_of_ino(fs, ino);
	uint64_t start, last = ext2fs_blocks_count(fs->super) - 1, span;

	if (ext2fs_has_feature_flex_bg(fs->super) && lf >= 2 && lf < 32)
		group = (group & ~((1u << lf) - 1)) + 1;
	if (group >= fs->group_desc_count)
		return fs->super->s_first_data_block;
	start = ext2fs_group_first_block2(fs, group);
	if (rfs->opts.delalloc)
		return start;
	span = start + EXT2_BLOCKS_PER_GROUP(fs->super) <= last ? EXT2_BLOCKS_PER_GROUP(fs->super) :
								  last - start;
	return start + (uint64_t)(req_pid % 16) * (span / 16);
}

/*
 * A physical goal for lblk (kernel: ext4_ext_find_goal): in line with the
 * nearest extent at or before it, or else with the file's first extent
 * (as far before that one as lblk is), or for a file without blocks
 * where its inode's files start.
 */
uint64_t emap_goal(struct rr_fs *rfs, struct rr_inode *ri, uint64_t lblk)
{
	const struct rr_emap *m = &ri->emap;
	uint32_t lo = extents_upto(m, lblk);

	if (lo > 0) {
		const struct rr_ext *e = &m->v[lo - 1];

		return e->pblk + (lblk - e->lblk);
	}
	if (m->n && m->v[0].pblk > m->v[0].lblk - lblk)
		return m->v[0].pblk - (m->v[0].lblk - lblk);
	return inode_goal(rfs, ri->ino);
}

/*
 * What the allocator wants to know about the hole at lblk: the goal, and
 * the file's allocated blocks on either side (normalisation trims its
 * window to them and sits next to them).
 */
void emap_alloc_hint(struct rr_fs *rfs, struct rr_inode *ri, uint64_t lblk, struct rr_alloc_req *req)
{
	const struct rr_emap *m = &ri->emap;
	uint32_t lo = extents_upto(m, lblk);

	req->goal = emap_goal(rfs, ri, lblk);
	req->isize = ri->size;
	memset(&req->nbr, 0, sizeof(req->nbr));
	if (lo > 0 && m->v[lo - 1].lblk + (uint64_t)m->v[lo - 1].len <= lblk) {
		const struct rr_ext *e = &m->v[lo - 1];

		req->nbr.lleft = e->lblk + (uint64_t)e->len - 1;
		req->nbr.pleft = e->pblk + e->len - 1;
	}
	if (lo < m->n) {
		req->nbr.lright = m->v[lo].lblk;
		req->nbr.pright = m->v[lo].pblk;
	}
}

/* The extent after the handle's current one in the same leaf (the handle moves to it), or 0. */
static int next_in_leaf(ext2_extent_handle_t h, struct ext2fs_extent *out)
{
	struct ext2_extent_info info;

	if (ext2fs_extent_get_info(h, &info) || info.curr_entry >= info.num_entries)
		return 0;
	return !ext2fs_extent_get(h, EXT2_EXTENT_NEXT_SIB, out);
}

static int joins(const struct ext2fs_extent *a, const struct ext2fs_extent *b, uint32_t max)
{
	return a->e_lblk + a->e_len == b->e_lblk && a->e_pblk + a->e_len == b->e_pblk &&
	       (a->e_flags & EXT2_EXTENT_FLAGS_UNINIT) == (b->e_flags & EXT2_EXTENT_FLAGS_UNINIT) &&
	       (uint64_t)a->e_len + b->e_len <= max;
}

/*
 * h is on the extent at or before lblk (or its leaf's first), as
 * ext2fs_extent_goto leaves it; if the leaf is full, the insertion splits
 * the tree: tell the allocator where the kernel would put the new blocks.
 * ext4_ext_split puts each near the data being mapped (ext4_ext_find_goal:
 * the nearest extent's block plus the logical distance); libext2fs aims
 * just before the leaf's first extent, which for a file mapped in order is
 * the start of the file.  When every level is full the tree first grows in
 * depth, one block more: libext2fs's goal for it is the kernel's (before
 * the root's first child), unless the root is the leaf, which the kernel
 * moves where the inode's data starts (ext4_ext_grow_indepth).  The
 * handle is back on its extent after.
 */
static void tree_split_goal(struct rr_fs *rfs, ext2_ino_t ino, ext2_extent_handle_t h, uint64_t lblk,
			    const struct ext2fs_extent *cur)
{
	struct ext2_extent_info info;
	struct ext2fs_extent up;
	uint64_t goal, first = rfs->fs->super->s_first_data_block;
	unsigned int keep = 1;
	int level;

	/* Without an allocator (unit tests) libext2fs allocates, with its own goals. */
	if (!rfs->alloc || ext2fs_extent_get_info(h, &info) || info.num_entries < info.max_entries)
		return;
	if (!info.max_depth) {
		rr_alloc_tree_goal(rfs->alloc, ino, inode_goal(rfs, ino), 0);
		return;
	}
	if (cur->e_lblk <= lblk)
		goal = cur->e_pblk + (lblk - cur->e_lblk);
	else
		goal = cur->e_pblk >= cur->e_lblk - lblk ? cur->e_pblk - (cur->e_lblk - lblk) : first;
	if (goal < first || goal >= ext2fs_blocks_count(rfs->fs->super))
		goal = first;	/* as mballoc takes a goal off the filesystem */
	for (level = info.curr_level; level > 0 && keep; level--) {
		if (ext2fs_extent_get(h, EXT2_EXTENT_UP, &up) || ext2fs_extent_get_info(h, &info) ||
		    info.num_entries < info.max_entries)
			keep = 0;
	}
	if (info.curr_level != info.max_depth)
		(void)ext2fs_extent_goto(h, lblk);	/* NOT_FOUND: back on cur */
	rr_alloc_tree_goal(rfs->alloc, ino, goal, keep);
}

/*
 * Insert one extent of at most the maximum length into the tree, merged
 * with the extent before and/or after it in the leaf when they are
 * contiguous, as the kernel's ext4_ext_try_to_merge does: parallel writes
 * of one stream arrive out of order, and without the merge a file written
 * in one go would keep one extent per write.
 */
static errcode_t tree_insert(struct rr_fs *rfs, ext2_ino_t ino, ext2_extent_handle_t h, uint64_t lblk,
			     uint64_t pblk, uint32_t len, int uninit)
{
	struct ext2fs_extent cur, right, nx = { .e_pblk = pblk, .e_lblk = lblk, .e_len = len,
						.e_flags = uninit ? EXT2_EXTENT_FLAGS_UNINIT : 0 };
	uint32_t max = uninit ? EXT_UNINIT_MAX_LEN : EXT_INIT_MAX_LEN;
	int flags = 0, left = 0, have_right = 0;
	errcode_t err;

	err = ext2fs_extent_goto(h, lblk);
	if (!err)
		return EXT2_ET_EXTENT_HEADER_BAD;	/* already mapped: caller's bug or corruption */
	if (err != EXT2_ET_EXTENT_NOT_FOUND)
		return err;
	err = ext2fs_extent_get(h, EXT2_EXTENT_CURRENT, &cur);
	if (err == EXT2_ET_NO_CURRENT_NODE)
		return ext2fs_extent_insert(h, 0, &nx) ?: ext2fs_extent_fix_parents(h);
	if (err)
		return err;
	tree_split_goal(rfs, ino, h, lblk, &cur);
	if (cur.e_lblk > lblk) {
		right = cur;		/* before the leaf's first extent */
		have_right = 1;
	} else {
		left = joins(&cur, &nx, max);
		have_right = next_in_leaf(h, &right);
	}
	if (have_right && joins(&nx, &right, max)) {
		if (left && (uint64_t)cur.e_len + len + right.e_len <= max) {
			/* Both sides: the left one swallows the new run and the right extent. */
			err = ext2fs_extent_delete(h, 0) ?: ext2fs_extent_goto(h, cur.e_lblk);
			cur.e_len += len + right.e_len;
			return err ?: ext2fs_extent_replace(h, 0, &cur) ?: ext2fs_extent_fix_parents(h);
		}
		if (!left) {
			/* The right one grows down to the new run (the handle is on it). */
			right.e_lblk = lblk;
			right.e_pblk = pblk;
			right.e_len += len;
			return ext2fs_extent_replace(h, 0, &right) ?: ext2fs_extent_fix_parents(h);
		}
	}
	if (left) {
		err = have_right ? ext2fs_extent_goto(h, cur.e_lblk) : 0;
		cur.e_len += len;
		return err ?: ext2fs_extent_replace(h, 0, &cur) ?: ext2fs_extent_fix_parents(h);
	}
	if (have_right && cur.e_lblk < lblk) {
		err = ext2fs_extent_goto(h, cur.e_lblk);
		if (err)
			return err;
	}
	if (cur.e_lblk < lblk)
		flags = EXT2_EXTENT_INSERT_AFTER;
	return ext2fs_extent_insert(h, flags, &nx) ?: ext2fs_extent_fix_parents(h);
}

static void ext_put(struct ext3_extent *e, const struct ext2fs_extent *x)
{
	e->ee_block = ext2fs_cpu_to_le32((__u32)x->e_lblk);
	e->ee_start = ext2fs_cpu_to_le32((__u32)x->e_pblk);
	e->ee_start_hi = ext2fs_cpu_to_le16((__u16)(x->e_pblk >> 32));
	e->ee_len = ext2fs_cpu_to_le16((__u16)(x->e_len +
		((x->e_flags & EXT2_EXTENT_FLAGS_UNINIT) ? EXT_INIT_MAX_LEN : 0)));
}

/*
 * tree_insert() for a tree that is all in the inode (a small file, the
 * common case): the same merges on the four entries in place, without an
 * extent handle, which allocates and writes the inode once per step.  0:
 * done; -EAGAIN: the handle's work (a split, an overlap to report).
 */
static int root_insert(struct ext2_inode_large *in, uint64_t lblk, uint64_t pblk, uint32_t len,
		       int uninit)
{
	struct ext3_extent_header *eh = root_leaf(in);
	struct ext3_extent *e = (struct ext3_extent *)(eh + 1);
	struct ext2fs_extent l = { 0 }, r, nx = { .e_pblk = pblk, .e_lblk = lblk, .e_len = len,
					  .e_flags = uninit ? EXT2_EXTENT_FLAGS_UNINIT : 0 };
	uint32_t max = uninit ? EXT_UNINIT_MAX_LEN : EXT_INIT_MAX_LEN;
	unsigned int n, p;
	int left, right;

	if (!eh)
		return -EAGAIN;
	n = ext2fs_le16_to_cpu(eh->eh_entries);
	for (p = 0; p < n; p++) {
		ext_get(&e[p], &r);
		if (r.e_lblk > lblk)
			break;
	}
	if (p) {
		ext_get(&e[p - 1], &l);
		if (lblk < l.e_lblk + l.e_len)
			return -EAGAIN;		/* already mapped */
	}
	left = p && joins(&l, &nx, max);
	right = p < n && (ext_get(&e[p], &r), joins(&nx, &r, max));
	if (right && left && (uint64_t)l.e_len + len + r.e_len <= max) {
		l.e_len += len + r.e_len;
		ext_put(&e[p - 1], &l);
		memmove(&e[p], &e[p + 1], (n - p - 1) * sizeof(*e));
		memset(&e[n - 1], 0, sizeof(*e));
		eh->eh_entries = ext2fs_cpu_to_le16((__u16)(n - 1));
	} else if (right && !left) {
		r.e_lblk = lblk;
		r.e_pblk = pblk;
		r.e_len += len;
		ext_put(&e[p], &r);
	} else if (left) {
		l.e_len += len;
		ext_put(&e[p - 1], &l);
	} else {
		if (n >= ext2fs_le16_to_cpu(eh->eh_max))
			return -EAGAIN;
		memmove(&e[p + 1], &e[p], (n - p) * sizeof(*e));
		ext_put(&e[p], &nx);
		eh->eh_entries = ext2fs_cpu_to_le16((__u16)(n + 1));
	}
	return 0;
}

/*
 * The block that lblk of a directory or file maps to, read from an extent
 * tree that is all in the inode: 0 with *pblk (0 for a hole), -EAGAIN
 * where libext2fs has to walk the tree or judge an unwritten block.
 */
int emap_root_bmap(struct ext2_inode_large *in, uint64_t lblk, uint64_t *pblk)
{
	struct ext3_extent_header *eh = root_leaf(in);
	struct ext3_extent *e = (struct ext3_extent *)(eh + 1);
	struct ext2fs_extent x;
	unsigned int i, n;

	if (!eh)
		return -EAGAIN;
	n = ext2fs_le16_to_cpu(eh->eh_entries);
	*pblk = 0;
	for (i = 0; i < n; i++) {
		ext_get(&e[i], &x);
		if (lblk >= x.e_lblk && lblk < x.e_lblk + x.e_len) {
			if (x.e_flags & EXT2_EXTENT_FLAGS_UNINIT)
				return -EAGAIN;
			*pblk = x.e_pblk + (lblk - x.e_lblk);
			return 0;
		}
	}
	return 0;
}

/*
 * -o check: after every change, the cached map must equal the tree on disk.
 * A difference is a bug in rrfuse: logged with both views, then abort().
 */
static void emap_verify(struct rr_fs *rfs, struct rr_inode *ri, struct ext2_inode_large *in)
{
	struct rr_emap chk = { 0 };
	errcode_t err = 0;
	uint32_t i;
	int bad;

	err = load_tree(rfs->fs, ri->ino, in, &chk);
	if (err || chk.n != ri->emap.n)
		rr_log(LOG_ERR, "check: inode %u: tree has %u extents (%s), cache %u", ri->ino, chk.n,
		       err ? error_message(err) : "ok", ri->emap.n);
	/* An unreadable tree is corruption on disk, reported by the next reader; not ours. */
	bad = !err && chk.n != ri->emap.n;
	for (i = 0; !err && i < chk.n && i < ri->emap.n; i++) {
		const struct rr_ext *a = &chk.v[i], *b = &ri->emap.v[i];

		if (a->lblk != b->lblk || a->len != b->len || a->pblk != b->pblk || a->uninit != b->uninit) {
			rr_log(LOG_ERR, "check: inode %u extent %u: tree %u+%u->%llu, cache %u+%u->%llu",
			       ri->ino, i, a->lblk, a->len, (unsigned long long)a->pblk, b->lblk, b->len,
			       (unsigned long long)b->pblk);
			bad = 1;
			break;
		}
	}
	free(chk.v);
	if (bad)
		abort();
}

/*
 * Map [lblk, lblk+len) of a hole to freshly allocated pblk.., written or
 * (uninit, extent-mapped files only) unwritten.  Caller holds ri->rw
 * exclusively and the fs lock; in is the inode as on disk and is written
 * back with its new block count.
 */
int emap_map(struct rr_fs *rfs, struct rr_inode *ri, struct ext2_inode_large *in, uint64_t lblk,
	     uint64_t pblk, uint32_t len, int uninit)
{
	int ret = emap_tree_map(rfs, ri->ino, in, lblk, pblk, len, uninit);

	if (ret) {
		emap_drop(ri);
		return ret;
	}
	emap_cache_set(&ri->emap, (uint32_t)lblk, len, pblk, uninit);
	if (!ri->emap.v)
		atomic_store_explicit(&ri->emap_loaded, 0, memory_order_release);
	ret = inode_write(rfs, ri->ino, in);
	/*
	 * Extent-mapped files only: an ext2/3 block map damaged on disk can
	 * map one block twice, and the cache then differs by no fault of ours.
	 */
	if (!ret && rfs->opts.check && (in->i_flags & EXT4_EXTENTS_FL))
		emap_verify(rfs, ri, in);
	return ret;
}

/* The on-disk half of emap_map(), for inodes with no rr_inode yet; in is not written. */
int emap_tree_map(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in, uint64_t lblk,
		  uint64_t pblk, uint32_t len, int uninit)
{
	ext2_filsys fs = rfs->fs;
	errcode_t err;

	if (lblk + len > (1ULL << 32))
		return -EFBIG;
	/* One extent at most: a run is in the tree whole or not at all, so the caller's free is right. */
	if (len > (uninit ? EXT_UNINIT_MAX_LEN : EXT_INIT_MAX_LEN))
		return -EINVAL;
	if ((in->i_flags & EXT4_EXTENTS_FL) && !root_insert(in, lblk, pblk, len, uninit)) {
		err = 0;
	} else if (in->i_flags & EXT4_EXTENTS_FL) {
		ext2_extent_handle_t h;

		err = ext2fs_extent_open2(fs, ino, (struct ext2_inode *)in, &h);
		if (!err) {
			err = tree_insert(rfs, ino, h, lblk, pblk, len, uninit);
			if (rfs->alloc)
				rr_alloc_tree_done(rfs->alloc);
			ext2fs_extent_free(h);
		}
	} else if (uninit) {
		err = EXT2_ET_OP_NOT_SUPPORTED;	/* no unwritten blocks without extents */
	} else {
		uint32_t i;

		/* Block-mapped (ext2/3) files: one pointer at a time, indirect blocks as needed. */
		err = 0;
		for (i = 0; i < len && !err; i++) {
			blk64_t b = pblk + i;

			err = ext2fs_bmap2(fs, ino, (struct ext2_inode *)in, NULL, BMAP_ALLOC | BMAP_SET,
					   lblk + i, NULL, &b);
		}
		/* The caller frees the whole run on failure: unhook what was set. */
		while (err && i-- > 1) {
			blk64_t zero = 0;

			ext2fs_bmap2(fs, ino, (struct ext2_inode *)in, NULL, BMAP_SET, lblk + i - 1, NULL, &zero);
		}
	}
	if (err) {
		rr_log(LOG_ERR, "inode %u: cannot map blocks %llu+%u: %s", ino, (unsigned long long)lblk,
		       len, error_message(err));
		return rr_err_ino(rfs, err, ino);
	}
	ext2fs_iblk_add_blocks(fs, (struct ext2_inode *)in, len);
	return 0;
}

/*
 * e2fsprogs 1.47.0's ext2fs_punch() refuses an extent that ends on the last
 * block of the filesystem (an off-by-one, fixed in later releases) and leaves
 * the file half freed.  Free that one block here, so that what remains of the
 * range passes.  Caller holds the fs lock; in is reread when changed.
 */
static errcode_t punch_fs_last_block(ext2_filsys fs, ext2_ino_t ino, struct ext2_inode_large *in,
				     uint64_t first, uint64_t last)
{
	blk64_t end = ext2fs_blocks_count(fs->super);
	ext2_extent_handle_t h;
	struct ext2fs_extent ex;
	errcode_t err;
	int op = EXT2_EXTENT_ROOT, freed = 0;

	if (!(in->i_flags & EXT4_EXTENTS_FL) || !ext2fs_test_block_bitmap2(fs->block_map, end - 1))
		return 0;
	err = ext2fs_extent_open2(fs, ino, (struct ext2_inode *)in, &h);
	if (err)
		return err;
	while (!(err = ext2fs_extent_get(h, op, &ex))) {
		op = EXT2_EXTENT_NEXT_LEAF;
		if (!(ex.e_flags & EXT2_EXTENT_FLAGS_LEAF) || !ex.e_len || ex.e_pblk + ex.e_len != end)
			continue;
		if (ex.e_lblk + ex.e_len - 1 < first || ex.e_lblk + ex.e_len - 1 > last)
			break;
		if (ex.e_len > 1) {
			ex.e_len--;
			err = ext2fs_extent_replace(h, 0, &ex);
		} else {
			err = ext2fs_extent_delete(h, 0);
		}
		freed = !err;
		break;
	}
	ext2fs_extent_free(h);
	if (err == EXT2_ET_EXTENT_NO_NEXT)
		err = 0;
	if (!freed)
		return err;
	ext2fs_block_alloc_stats2(fs, end - 1, -1);
	err = ext2fs_read_inode_full(fs, ino, (struct ext2_inode *)in, sizeof(*in));
	if (!err)
		err = ext2fs_iblk_sub_blocks(fs, (struct ext2_inode *)in, 1);
	if (!err)
		err = ext2fs_write_inode_full(fs, ino, (struct ext2_inode *)in, sizeof(*in));
	return err;
}

/*
 * Free the blocks [first, last] (inclusive) of a file, and the tree blocks
 * left empty.  Caller holds the fs lock; in is updated and written.
 */
int emap_tree_punch(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in, uint64_t first,
		    uint64_t last)
{
	errcode_t err;

	if (in->i_flags & EXT4_INLINE_DATA_FL)
		return -EIO;	/* as in emap_ensure() */
	if (!ext2fs_inode_has_valid_blocks2(rfs->fs, (struct ext2_inode *)in))
		return 0;
	err = punch_fs_last_block(rfs->fs, ino, in, first, last);
	if (!err)
		err = ext2fs_punch(rfs->fs, ino, (struct ext2_inode *)in, NULL, first, last);
	return rr_err_ino(rfs, err, ino);
}

/*
 * Turn the unwritten blocks [lblk, lblk+len) into written ones, splitting
 * unwritten extents where the range ends inside them.  Same locking as
 * emap_map().
 */
int emap_mark_init(struct rr_fs *rfs, struct rr_inode *ri, struct ext2_inode_large *in,
		   uint64_t lblk, uint32_t len)
{
	ext2_extent_handle_t h = NULL;
	struct ext2fs_extent ex, piece;
	uint64_t end = lblk + len;
	errcode_t err;

	err = ext2fs_extent_open2(rfs->fs, ri->ino, (struct ext2_inode *)in, &h);
	while (!err && lblk < end) {
		uint64_t s, e, ex_end;

		err = ext2fs_extent_goto(h, lblk);
		if (err)
			break;
		err = ext2fs_extent_get(h, EXT2_EXTENT_CURRENT, &ex);
		if (err)
			break;
		ex_end = ex.e_lblk + ex.e_len;
		s = lblk;
		e = end < ex_end ? end : ex_end;
		if (!(ex.e_flags & EXT2_EXTENT_FLAGS_UNINIT)) {
			lblk = e;
			continue;
		}
		if (s > ex.e_lblk) {
			/* Keep the unwritten head; the written part follows it. */
			piece = ex;
			piece.e_len = (__u32)(s - ex.e_lblk);
			err = ext2fs_extent_replace(h, 0, &piece);
			if (err)
				break;
			piece.e_lblk = s;
			piece.e_pblk = ex.e_pblk + (s - ex.e_lblk);
			piece.e_len = (__u32)(e - s);
			piece.e_flags &= ~EXT2_EXTENT_FLAGS_UNINIT;
			err = ext2fs_extent_insert(h, EXT2_EXTENT_INSERT_AFTER, &piece);
		} else {
			piece = ex;
			piece.e_len = (__u32)(e - s);
			piece.e_flags &= ~EXT2_EXTENT_FLAGS_UNINIT;
			err = ext2fs_extent_replace(h, 0, &piece);
		}
		if (!err && e < ex_end) {
			/* The unwritten tail after the written part. */
			piece.e_lblk = e;
			piece.e_pblk = ex.e_pblk + (e - ex.e_lblk);
			piece.e_len = (__u32)(ex_end - e);
			piece.e_flags = ex.e_flags;
			err = ext2fs_extent_insert(h, EXT2_EXTENT_INSERT_AFTER, &piece);
		}
		if (!err)
			err = ext2fs_extent_fix_parents(h);
		lblk = e;
	}
	if (h)
		ext2fs_extent_free(h);
	/* The tree changed in several places: simplest to reload the cache. */
	emap_drop(ri);
	if (err)
		return rr_err_ino(rfs, err, ri->ino);
	return inode_write(rfs, ri->ino, in);
}

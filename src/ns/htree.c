// SPDX-License-Identifier: GPL-2.0
/*
 * Turning a full one-block directory into an htree, as ext4 does when a
 * directory outgrows its first block (dir_index).  libext2fs keeps indexed
 * directories indexed as they grow (ext2fs_link splits leaves and adds
 * index levels) but never indexes a linear one.
 *
 * Layout made here: block 0 becomes the dx root ("." and "..", root info,
 * two index entries), blocks 1 and 2 are leaves holding the old entries and
 * the new one, split by hash.  Leaves are written before the root that
 * points to them.  The new entry is placed here rather than by a following
 * ext2fs_link(): libext2fs 1.47's dx_link failed the first insertion into a
 * freshly indexed directory (and succeeded on a second call), for reasons
 * not found yet.
 */
#include "htree.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct hent {
	struct ext2_dir_entry *de;
	ext2_dirhash_t hash, minor;
};

errcode_t htree_name_hash(ext2_filsys fs, int hv, const char *name, size_t len,
			  ext2_dirhash_t *hash, ext2_dirhash_t *minor)
{
	return ext2fs_dirhash2(hv, name, (int)len, NULL, 0, fs->super->s_hash_seed, hash, minor);
}

static int hent_cmp(const void *a, const void *b)
{
	const struct hent *x = a, *y = b;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	if (x->minor != y->minor)
		return x->minor < y->minor ? -1 : 1;
	return 0;
}

/* Space for entries in a leaf: all of it but the checksum tail. */
static unsigned int leaf_space(ext2_filsys fs)
{
	return fs->blocksize - (ext2fs_has_feature_metadata_csum(fs->super) ?
				sizeof(struct ext2_dir_entry_tail) : 0);
}

/*
 * The record length of the entry at off, 0 if it is sound: at least 8,
 * a multiple of 4 (the next entry is aligned), inside the block.  -EIO
 * otherwise, as libext2fs's directory walk calls such a leaf corrupt.
 * Decoded here rather than by ext2fs_get_rec_len, a library call for each
 * entry of each scan: below 64 KiB blocks the field is the length; at 64 KiB
 * 0 and 65535 stand for the whole block and the two low bits carry bits 16-17.
 */
static inline int entry_rec(ext2_filsys fs, const char *block, unsigned int off, unsigned int *rec)
{
	const struct ext2_dir_entry *de = (const struct ext2_dir_entry *)(block + off);
	unsigned int raw = ext2fs_le16_to_cpu(de->rec_len);

	if (fs->blocksize < 65536)
		*rec = raw;
	else if (raw == 0 || raw == 65535)
		*rec = fs->blocksize;
	else
		*rec = (raw & 65532) | ((raw & 3) << 16);
	if (*rec < 8 || *rec % 4 || off + *rec > fs->blocksize)
		return -EIO;
	return 0;
}

/* Does the entry de (its name inside its record) hold name? */
static int entry_is(const struct ext2_dir_entry *de, const char *name, size_t len)
{
	/* The last byte first: names in a directory often share their start (f00001, f00002). */
	return de->inode && len && (size_t)ext2fs_dirent_name_len(de) == len && de->name[len - 1] == name[len - 1] &&
	       !memcmp(de->name, name, len);
}

/* Pack entries v[0..n) into a fresh leaf block. */
static int fill_leaf(ext2_filsys fs, char *buf, struct hent *v, size_t n)
{
	unsigned int off = 0, space = leaf_space(fs), i;

	memset(buf, 0, fs->blocksize);
	if (!n) {
		struct ext2_dir_entry *de = (struct ext2_dir_entry *)buf;

		if (ext2fs_set_rec_len(fs, space, de))
			return -EIO;
	}
	for (i = 0; i < n; i++) {
		struct ext2_dir_entry *de = (struct ext2_dir_entry *)(buf + off);
		int nlen = ext2fs_dirent_name_len(v[i].de);
		unsigned int rec = ext2fs_dir_rec_len((__u8)nlen, 0);

		if (off + rec > space)
			return -ENOSPC;
		de->inode = v[i].de->inode;
		ext2fs_dirent_set_name_len(de, nlen);
		ext2fs_dirent_set_file_type(de, ext2fs_dirent_file_type(v[i].de));
		memcpy(de->name, v[i].de->name, (size_t)nlen);
		if (ext2fs_set_rec_len(fs, i + 1 == n ? space - off : rec, de))
			return -EIO;
		off += rec;
	}
	if (ext2fs_has_feature_metadata_csum(fs->super))
		ext2fs_initialize_dirent_tail(fs, EXT2_DIRENT_TAIL(buf, fs->blocksize));
	return 0;
}

/*
 * The entries of a directory's only block, hashed into v (at most cap),
 * "." and ".." left out (*dotdot: the parent); 0, -EIO on a damaged block
 * or a full v.
 */
static int collect_entries(struct rr_fs *rfs, ext2_ino_t dir, char *block, int hv, struct hent *v, size_t cap,
			   size_t *n, ext2_ino_t *dotdot)
{
	ext2_filsys fs = rfs->fs;
	struct ext2_dir_entry *de;
	unsigned int off, rec;
	int nlen, ret;

	for (off = 0; off < leaf_space(fs); off += rec) {
		de = (struct ext2_dir_entry *)(block + off);
		if (entry_rec(fs, block, off, &rec))
			return -EIO;
		nlen = ext2fs_dirent_name_len(de);
		if (!de->inode)
			continue;
		if (off == 0 || (nlen == 2 && de->name[0] == '.' && de->name[1] == '.')) {
			if (off)
				*dotdot = de->inode;
			continue;
		}
		if (*n == cap)
			return -EIO;
		v[*n].de = de;
		ret = rr_err_ino(rfs, htree_name_hash(fs, hv, de->name, (size_t)nlen, &v[*n].hash, &v[*n].minor), dir);
		if (ret)
			return ret;
		(*n)++;
	}
	return 0;
}

/* A new index root: ".", ".." covering the block, then two leaves (1, 2) split at hash split. */
static void fill_root(ext2_filsys fs, char *root, ext2_ino_t dir, ext2_ino_t dotdot, __u32 split)
{
	unsigned int csum = ext2fs_has_feature_metadata_csum(fs->super) ? sizeof(struct ext2_dx_tail) : 0;
	struct ext2_dir_entry *de;
	struct ext2_dx_root_info *info;
	struct ext2_dx_countlimit *cl;
	struct ext2_dx_entry *ent;

	memset(root, 0, fs->blocksize);
	de = (struct ext2_dir_entry *)root;
	de->inode = dir;
	ext2fs_dirent_set_name_len(de, 1);
	ext2fs_dirent_set_file_type(de, EXT2_FT_DIR);
	de->name[0] = '.';
	ext2fs_set_rec_len(fs, 12, de);
	de = (struct ext2_dir_entry *)(root + 12);
	de->inode = dotdot;
	ext2fs_dirent_set_name_len(de, 2);
	ext2fs_dirent_set_file_type(de, EXT2_FT_DIR);
	de->name[0] = de->name[1] = '.';
	ext2fs_set_rec_len(fs, fs->blocksize - 12, de);
	info = (struct ext2_dx_root_info *)(root + 24);
	info->hash_version = (__u8)fs->super->s_def_hash_version;
	info->info_length = sizeof(*info);
	cl = (struct ext2_dx_countlimit *)(root + 24 + sizeof(*info));
	cl->limit = ext2fs_cpu_to_le16((fs->blocksize - (24 + sizeof(*info)) - csum) /
				       sizeof(struct ext2_dx_entry));
	cl->count = ext2fs_cpu_to_le16(2);
	ent = (struct ext2_dx_entry *)cl;
	ent[0].block = ext2fs_cpu_to_le32(1);
	ent[1].hash = ext2fs_cpu_to_le32(split);
	ent[1].block = ext2fs_cpu_to_le32(2);
}

/*
 * Where n entries sorted by hash split into two leaves (*mid: the second's
 * first), and the hash the index names for it: where the hash changes, so
 * each hash lives in one leaf, else marked continued.
 */
static __u32 split_at(const struct hent *v, size_t n, size_t *mid)
{
	size_t m;
	__u32 split;

	for (m = n / 2; m < n && v[m].hash == v[m - 1].hash; m++)
		;
	if (m == n)
		for (m = n / 2; m > 1 && v[m].hash == v[m - 1].hash; m--)
			;
	split = v[m].hash & ~1u;
	if (m > 0 && v[m].hash == v[m - 1].hash)
		split |= 1;	/* continued: a lookup must look at both leaves */
	*mid = m;
	return split;
}

int htree_index_dir(struct rr_fs *rfs, ext2_ino_t dir, const char *name, ext2_ino_t ino, int ftype)
{
	union {
		struct ext2_dir_entry de;
		char raw[sizeof(struct ext2_dir_entry) + EXT2_NAME_LEN];
	} newde;
	ext2_filsys fs = rfs->fs;
	struct ext2_inode_large in;
	struct rr_alloc_req req = { .ino = dir, .len = 1, .flags = RR_ALLOC_METADATA };
	struct rr_extent ex1 = { 0 }, ex2 = { 0 };
	struct hent *v = NULL;
	char *root = NULL, *leaf = NULL;
	ext2_ino_t dotdot = 0;
	blk64_t pblk0;
	size_t n = 0, cap, mid;
	__u32 split;
	int hv, ret;

	ret = inode_load(rfs, dir, &in);
	if (ret)
		return ret;
	if (!ext2fs_has_feature_dir_index(fs->super) || (in.i_flags & (EXT2_INDEX_FL | EXT4_INLINE_DATA_FL)) ||
	    EXT2_I_SIZE(&in) != fs->blocksize)
		return -ENOSPC;	/* not ours to index: the caller grows it linearly */
	ret = rr_err_ino(rfs, ext2fs_bmap2(fs, dir, (struct ext2_inode *)&in, NULL, 0, 0, NULL, &pblk0), dir);
	if (!ret && !pblk0)
		ret = -EIO;
	root = malloc(fs->blocksize);
	leaf = malloc(fs->blocksize);
	cap = fs->blocksize / 12;
	v = calloc(cap, sizeof(*v));
	if (!ret && (!root || !leaf || !v))
		ret = -ENOMEM;
	if (!ret)
		ret = rr_err_ino(rfs, ext2fs_read_dir_block4(fs, pblk0, root, 0, dir), dir);
	if (ret)
		goto out;

	hv = fs->super->s_def_hash_version;
	if (hv <= EXT2_HASH_TEA && (fs->super->s_flags & EXT2_FLAGS_UNSIGNED_HASH))
		hv += 3;
	ret = collect_entries(rfs, dir, root, hv, v, cap, &n, &dotdot);
	if (ret)
		goto out;
	if (!dotdot || n < 2 || n == cap) {
		ret = -EIO;
		goto out;
	}
	/* The entry that did not fit goes in with the others. */
	memset(&newde, 0, sizeof(newde));
	newde.de.inode = ino;
	ext2fs_dirent_set_name_len(&newde.de, (int)strlen(name));
	ext2fs_dirent_set_file_type(&newde.de, ftype);
	memcpy(newde.de.name, name, strlen(name));
	v[n].de = &newde.de;
	ret = rr_err_ino(rfs, htree_name_hash(fs, hv, name, strlen(name), &v[n].hash, &v[n].minor), dir);
	if (ret)
		goto out;
	n++;
	qsort(v, n, sizeof(*v), hent_cmp);
	split = split_at(v, n, &mid);

	req.goal = pblk0 + 1;
	ret = rr_alloc_blocks(rfs->alloc, &req, &ex1);
	if (!ret)
		ret = rr_alloc_blocks(rfs->alloc, &req, &ex2);
	if (ret)
		goto out;
	ret = fill_leaf(fs, leaf, v, mid);
	if (!ret)
		ret = rr_err_ino(rfs, ext2fs_write_dir_block4(fs, ex1.pblk, leaf, 0, dir), dir);
	if (!ret)
		ret = fill_leaf(fs, leaf, v + mid, n - mid);
	if (!ret)
		ret = rr_err_ino(rfs, ext2fs_write_dir_block4(fs, ex2.pblk, leaf, 0, dir), dir);
	if (!ret)
		ret = emap_tree_map(rfs, dir, &in, 1, ex1.pblk, 1, 0);
	if (!ret)
		ret = emap_tree_map(rfs, dir, &in, 2, ex2.pblk, 1, 0);
	if (ret)
		goto out;

	fill_root(fs, root, dir, dotdot, split);
	ret = rr_err_ino(rfs, ext2fs_write_dir_block4(fs, pblk0, root, 0, dir), dir);
	if (ret)
		goto out;
	in.i_flags |= EXT2_INDEX_FL;
	ret = rr_err_ino(rfs, ext2fs_inode_size_set(fs, (struct ext2_inode *)&in, 3ULL * fs->blocksize), dir);
	if (!ret)
		ret = inode_write(rfs, dir, &in);
out:
	if (ret && ex1.len && !(in.i_flags & EXT2_INDEX_FL)) {
		/* Not linked into the directory yet (or unwound by the caller's fsck): give back. */
		if (EXT2_I_SIZE(&in) == fs->blocksize && in.i_blocks == 0) {
			rr_free_blocks(rfs->alloc, ex1.pblk, ex1.len);
			if (ex2.len)
				rr_free_blocks(rfs->alloc, ex2.pblk, ex2.len);
		}
	}
	free(v);
	free(root);
	free(leaf);
	return ret;
}

/*
 * The checksum of a directory leaf of dir (in: dir as on disk) whose tail
 * sits at the block's end, where rrfuse and ext4 put it: the sum
 * libext2fs's ext2fs_dirent_csum makes, without its walk of the entries to
 * find the tail (twice per verify) and its read of the inode for the
 * generation, which cost more than the sum itself.  Set (set) or check it:
 * 1 good (or set), 0 wrong; -1: no tail there, libext2fs must judge.
 */
static int leaf_csum(ext2_filsys fs, ext2_ino_t dir, const struct ext2_inode_large *in, char *buf,
		     int set)
{
	struct ext2_dir_entry_tail *t;
	__u32 v, crc;

	t = (struct ext2_dir_entry_tail *)(buf + fs->blocksize - sizeof(*t));
	if (t->det_reserved_zero1 || ext2fs_le16_to_cpu(t->det_rec_len) != sizeof(*t) ||
	    ext2fs_le16_to_cpu(t->det_reserved_name_len) != EXT2_DIR_NAME_LEN_CSUM)
		return -1;
	v = ext2fs_cpu_to_le32(dir);
	crc = ext2fs_crc32c_le(fs->csum_seed, (unsigned char *)&v, sizeof(v));
	v = ext2fs_cpu_to_le32(in->i_generation);
	crc = ext2fs_crc32c_le(crc, (unsigned char *)&v, sizeof(v));
	crc = ext2fs_crc32c_le(crc, (unsigned char *)buf, fs->blocksize - sizeof(*t));
	if (set)
		t->det_checksum = ext2fs_cpu_to_le32(crc);
	return set || ext2fs_le32_to_cpu(t->det_checksum) == crc;
}

/* Is a leaf's own sum to be taken (metadata_csum, not told to ignore sums)? */
static int leaf_summed(ext2_filsys fs)
{
	return ext2fs_has_feature_metadata_csum(fs->super) &&
	       !(fs->flags & EXT2_FLAG_IGNORE_CSUM_ERRORS);
}

/*
 * The fs's two directory-block buffers (allocated on first use), so that
 * a lookup or an add does not allocate: a heap grown and trimmed again
 * for every 4 KiB buffer cost a page fault per request.  Fs lock held.
 */
static int dir_bufs(struct rr_fs *rfs, char **a, char **b)
{
	int i;

	for (i = 0; i < 2; i++)
		if (!rfs->dirblk[i] && !(rfs->dirblk[i] = malloc(rfs->fs->blocksize)))
			return -ENOMEM;
	*a = rfs->dirblk[0];
	*b = rfs->dirblk[1];
	return 0;
}

/* Directory block pblk of dir (in: dir as on disk), its sum checked if verify. */
static int leaf_read(struct rr_fs *rfs, ext2_ino_t dir, const struct ext2_inode_large *in, blk64_t pblk,
		     char *buf, int verify)
{
	ext2_filsys fs = rfs->fs;
	int ret = rr_err_ino(rfs, io_channel_read_blk64(fs->io, pblk, 1, buf), dir);

	/* A leaf that fails the quick check gets libext2fs's verdict (a dx node always does). */
	if (!ret && verify && leaf_summed(fs) && leaf_csum(fs, dir, in, buf, 0) != 1)
		ret = rr_err_ino(rfs, ext2fs_read_dir_block4(fs, pblk, buf, 0, dir), dir);
	return ret;
}

/* A changed leaf back to pblk, its sum set: by libext2fs when the tail is not where rrfuse puts it. */
static int leaf_write(struct rr_fs *rfs, ext2_ino_t dir, const struct ext2_inode_large *in, blk64_t pblk,
		      char *buf)
{
	ext2_filsys fs = rfs->fs;
	if (leaf_summed(fs) && leaf_csum(fs, dir, in, buf, 1) == 1)
		return rr_err_ino(rfs, io_channel_write_blk64(fs->io, pblk, 1, buf), dir);
	return rr_err_ino(rfs, ext2fs_write_dir_block4(fs, pblk, buf, 0, dir), dir);
}

/* A directory block by logical number.  Caller holds the fs lock. */
static int read_lblk(struct rr_fs *rfs, ext2_ino_t dir, struct ext2_inode_large *in, blk64_t lblk,
		     char *buf, blk64_t *pblk, int verify)
{
	ext2_filsys fs = rfs->fs;
	uint64_t b;
	int ret = emap_root_bmap(in, lblk, &b);

	if (!ret)
		*pblk = b;
	else
		ret = rr_err_ino(rfs, ext2fs_bmap2(fs, dir, (struct ext2_inode *)in, NULL, 0, lblk, NULL, pblk),
				 dir);
	if (ret)
		return ret;
	if (!*pblk)
		return -EIO;
	return leaf_read(rfs, dir, in, *pblk, buf, verify);
}

/* Where leaf_find found a name: its entry's offset and the one before it (UINT_MAX: none). */
struct leaf_hit {
	unsigned int off, prev;
};

/* Scan one leaf for name; 1 found (*ino, and *hit if not NULL), 0 not, <0 error. */
static int leaf_find(ext2_filsys fs, const char *buf, const char *name, size_t len, ext2_ino_t *ino,
		     struct leaf_hit *hit)
{
	unsigned int off, rec, prev = UINT_MAX;

	for (off = 0; off + 8 <= fs->blocksize; prev = off, off += rec) {
		const struct ext2_dir_entry *de = (const struct ext2_dir_entry *)(buf + off);

		if (entry_rec(fs, buf, off, &rec))
			return -EIO;
		if ((size_t)ext2fs_dirent_name_len(de) + 8 > rec)
			return -EIO;	/* name runs past its record: corrupt leaf */
		if (entry_is(de, name, len)) {
			*ino = de->inode;
			if (hit)
				*hit = (struct leaf_hit){ off, prev };
			return 1;
		}
	}
	return 0;
}

/* Where a name's hash leads in an index: the entries of its last level and the chosen one. */
struct dx_pos {
	struct ext2_dx_entry *ent;
	unsigned int i, count, levels;
	int hash_version;	/* as the root gives it */
	ext2_dirhash_t hash;
	blk64_t child;		/* logical block of the leaf ent[i] names */
};

/*
 * Walk dir's index (in: dir as on disk) to the leaf name belongs in, as
 * libext2fs's dx_lookup does; node holds the last index block read,
 * its checksum verified if verify.  -EAGAIN: not indexed, or the index looks wrong (the caller falls back
 * to libext2fs, which says what is wrong).
 */
static int descend(struct rr_fs *rfs, ext2_ino_t dir, struct ext2_inode_large *in, const char *name,
		   size_t len, char *node, struct dx_pos *p, int verify)
{
	ext2_filsys fs = rfs->fs;
	struct ext2_dx_root_info *info;
	struct ext2_dx_countlimit *cl;
	ext2_dirhash_t minor;
	unsigned int level, limit, lo, hi, csum;
	blk64_t pblk, nblocks;
	int hv, ret;

	if (!(in->i_flags & EXT2_INDEX_FL) || !ext2fs_has_feature_dir_index(fs->super))
		return -EAGAIN;
	nblocks = EXT2_I_SIZE(in) / fs->blocksize;
	csum = ext2fs_has_feature_metadata_csum(fs->super) ? sizeof(struct ext2_dx_tail) : 0;
	ret = read_lblk(rfs, dir, in, 0, node, &pblk, verify);
	if (ret)
		return ret;
	info = (struct ext2_dx_root_info *)(node + 24);
	p->hash_version = info->hash_version;
	p->levels = info->indirect_levels + 1u;
	if (info->reserved_zero || info->info_length != 8 || p->levels > 3 ||
	    (p->levels > 2 && !ext2fs_has_feature_largedir(fs->super)))
		return -EAGAIN;
	hv = info->hash_version;
	if (hv <= EXT2_HASH_TEA && (fs->super->s_flags & EXT2_FLAGS_UNSIGNED_HASH))
		hv += 3;
	ret = rr_err_ino(rfs, htree_name_hash(fs, hv, name, len, &p->hash, &minor), dir);
	if (ret)
		return ret;
	cl = (struct ext2_dx_countlimit *)(node + 24 + info->info_length);
	for (level = 0;; level++) {
		p->count = ext2fs_le16_to_cpu(cl->count);
		limit = ext2fs_le16_to_cpu(cl->limit);
		if (!p->count || p->count > limit ||
		    (size_t)((char *)cl - node) + limit * sizeof(*p->ent) + csum > fs->blocksize)
			return -EAGAIN;
		p->ent = (struct ext2_dx_entry *)cl;
		/* The last entry whose hash is <= ours (entry 0 stands for hash 0). */
		lo = 1;
		hi = p->count;
		while (lo < hi) {
			unsigned int mid = lo + (hi - lo) / 2;

			if (ext2fs_le32_to_cpu(p->ent[mid].hash) <= p->hash)
				lo = mid + 1;
			else
				hi = mid;
		}
		p->i = lo - 1;
		p->child = ext2fs_le32_to_cpu(p->ent[p->i].block) & EXT4_DX_BLOCK_MASK;
		if (p->child == 0 || p->child >= nblocks)
			return -EAGAIN;
		if (level + 1 == p->levels)
			return 0;
		ret = read_lblk(rfs, dir, in, p->child, node, &pblk, verify);
		if (ret)
			return ret;
		cl = (struct ext2_dx_countlimit *)(node + 8);
	}
}

/* A linear directory of one block: a lookup or a new entry is that block's business alone. */
static int one_block_linear(ext2_filsys fs, const struct ext2_inode_large *in)
{
	return !(in->i_flags & (EXT2_INDEX_FL | EXT4_INLINE_DATA_FL)) &&
	       EXT2_I_SIZE(in) == fs->blocksize;
}

/*
 * Find name through the index: the leaf that holds it by hash, then the
 * following leaves while the hash continues there; or in the one block of
 * a small linear directory.  *leaf gets the block's physical number.
 * -EAGAIN: neither applies (or the index looks wrong); the caller scans
 * with libext2fs.
 */
int htree_find(struct rr_fs *rfs, ext2_ino_t dir, const char *name, ext2_ino_t *ino, blk64_t *leaf)
{
	ext2_filsys fs = rfs->fs;
	struct ext2_inode_large in;
	struct dx_pos p;
	size_t len = strlen(name);
	blk64_t pblk;
	int ret;
	char *node, *lbuf;

	ret = inode_load(rfs, dir, &in);
	if (!ret)
		ret = dir_bufs(rfs, &node, &lbuf);
	if (ret)
		return ret;
	if (one_block_linear(fs, &in)) {
		/* A damaged block is left to libext2fs's scan, which names the damage. */
		ret = read_lblk(rfs, dir, &in, 0, lbuf, &pblk, 1);
		ret = ret ? -EAGAIN : leaf_find(fs, lbuf, name, len, ino, NULL);
		if (ret > 0)
			*leaf = pblk;
		return ret > 0 ? 0 : ret < 0 ? -EAGAIN : -ENOENT;
	}
	ret = descend(rfs, dir, &in, name, len, node, &p, 0);
	if (ret)
		return ret;
	/* Leaf level: ent[i] in node is the leaf; the hash may continue in ent[i + 1]. */
	for (;;) {
		ret = read_lblk(rfs, dir, &in, p.child, lbuf, &pblk, 1);
		if (!ret)
			ret = leaf_find(fs, lbuf, name, len, ino, NULL);
		if (ret > 0)
			*leaf = pblk;
		if (ret)
			return ret > 0 ? 0 : ret;
		if (p.i + 1 >= p.count)
			/* Continuation into the next index block: left to the linear scan. */
			return p.levels > 1 ? -EAGAIN : -ENOENT;
		if ((ext2fs_le32_to_cpu(p.ent[p.i + 1].hash) & ~1u) != (p.hash & ~1u) ||
		    !(ext2fs_le32_to_cpu(p.ent[p.i + 1].hash) & 1))
			return -ENOENT;
		p.i++;
		p.child = ext2fs_le32_to_cpu(p.ent[p.i].block) & EXT4_DX_BLOCK_MASK;
		if (p.child == 0 || p.child >= EXT2_I_SIZE(&in) / fs->blocksize)
			return -EAGAIN;
	}
}

/*
 * Put name in the directory block buf where libext2fs's ext2fs_link would
 * (its link_proc over the block's entries, empty ones included): each
 * entry first swallows an unused one after it; a used entry with room
 * behind its name is cut short and the new name goes in the space left;
 * an unused one that is long enough takes it.  1: placed; 0: no room;
 * -EIO: a damaged block.  The same bytes as libext2fs, so that an image
 * does not depend on which of the two added the name.
 */
static int block_link(ext2_filsys fs, char *buf, const char *name, size_t len, ext2_ino_t ino,
		      int ftype)
{
	unsigned int bs = fs->blocksize, off, rec, need = EXT2_DIR_REC_LEN(len), min;
	unsigned int tail = ext2fs_has_feature_metadata_csum(fs->super) ?
			    sizeof(struct ext2_dir_entry_tail) : 0;

	for (off = 0; off + 8 < bs; off += rec) {
		struct ext2_dir_entry *de = (struct ext2_dir_entry *)(buf + off), *next;

		if (entry_rec(fs, buf, off, &rec) || ext2fs_dirent_name_len(de) + 8u > rec)
			return -EIO;
		if (!de->inode && tail && off == bs - tail && de->rec_len == tail &&
		    de->name_len == EXT2_DIR_NAME_LEN_CSUM)
			continue;	/* the checksum tail */
		next = (struct ext2_dir_entry *)(buf + off + rec);
		if (off + rec < bs - (8 + tail) && !next->inode && off + rec + next->rec_len <= bs) {
			rec += next->rec_len;
			if (ext2fs_set_rec_len(fs, rec, de))
				return -EIO;
		}
		if (de->inode) {
			min = EXT2_DIR_REC_LEN(ext2fs_dirent_name_len(de));
			if (rec < min + need)
				continue;
			if (ext2fs_set_rec_len(fs, min, de))
				return -EIO;
			next = (struct ext2_dir_entry *)(buf + off + min);
			next->inode = 0;
			ext2fs_dirent_set_name_len(next, 0);
			ext2fs_dirent_set_file_type(next, 0);
			if (ext2fs_set_rec_len(fs, rec - min, next))
				return -EIO;
			rec = min;	/* the new unused entry is the next one looked at */
			continue;
		}
		if (rec < need)
			continue;
		de->inode = ino;
		ext2fs_dirent_set_name_len(de, (int)len);
		memcpy(de->name, name, len);
		if (ext2fs_has_feature_filetype(fs->super))
			ext2fs_dirent_set_file_type(de, ftype & 0x7);
		return 1;
	}
	return 0;
}

int htree_add(struct rr_fs *rfs, ext2_ino_t dir, const char *name, ext2_ino_t ino, int ftype)
{
	ext2_filsys fs = rfs->fs;
	struct ext2_inode_large in;
	struct dx_pos p = { 0 };
	size_t len = strlen(name);
	blk64_t pblk;
	char *node, *buf;
	int ret = inode_load(rfs, dir, &in);

	if (ret)
		return ret;
	/* Names that libext2fs hashes or stores otherwise are its business. */
	if (in.i_flags & (EXT4_CASEFOLD_FL | EXT4_ENCRYPT_FL) || !len || len > EXT2_NAME_LEN)
		return -EAGAIN;
	ret = dir_bufs(rfs, &node, &buf);
	if (!ret && !one_block_linear(fs, &in)) {
		/* Index blocks verified, as dx_lookup reads them. */
		ret = descend(rfs, dir, &in, name, len, node, &p, 1);
		/* The hashes dx_lookup takes; it refuses a directory with any other. */
		if (!ret && p.hash_version != EXT2_HASH_LEGACY &&
		    p.hash_version != EXT2_HASH_HALF_MD4 && p.hash_version != EXT2_HASH_TEA)
			ret = -EAGAIN;
	}
	if (!ret)
		ret = read_lblk(rfs, dir, &in, p.child, buf, &pblk, 1);
	if (ret)
		return ret;
	/* No room: libext2fs splits the leaf (or the caller indexes the block). */
	if (block_link(fs, buf, name, len, ino, ftype) <= 0)
		return -EAGAIN;
	return leaf_write(rfs, dir, &in, pblk, buf);
}

/*
 * Remove name from the directory block at pblk (a leaf htree_find named),
 * as ext2fs_unlink does: the entry's space joins the one before it.
 */
int htree_remove_in_block(struct rr_fs *rfs, ext2_ino_t dir, blk64_t pblk, const char *name)
{
	ext2_filsys fs = rfs->fs;
	struct ext2_inode_large in;
	struct leaf_hit hit;
	ext2_ino_t found;
	unsigned int rec;
	char *buf = NULL, *spare;
	int ret = inode_load(rfs, dir, &in);

	if (!ret)
		ret = dir_bufs(rfs, &buf, &spare);
	if (!ret)
		ret = leaf_read(rfs, dir, &in, pblk, buf, 1);
	if (!ret)
		ret = leaf_find(fs, buf, name, strlen(name), &found, &hit);
	if (ret <= 0)
		return ret ? ret : -ENOENT;
	/* Sound: leaf_find checked both records. */
	entry_rec(fs, buf, hit.off, &rec);
	if (hit.prev == UINT_MAX)
		((struct ext2_dir_entry *)(buf + hit.off))->inode = 0;
	else if ((ret = rr_err_ino(rfs, ext2fs_set_rec_len(fs, hit.off - hit.prev + rec,
						      (struct ext2_dir_entry *)(buf + hit.prev)), dir)))
		return ret;
	return leaf_write(rfs, dir, &in, pblk, buf);
}

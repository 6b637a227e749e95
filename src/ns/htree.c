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
static int collect_entries(ext2_filsys fs, ext2_ino_t dir, char *block, int hv, struct hent *v, size_t cap,
			   size_t *n, ext2_ino_t *dotdot)
{
	struct ext2_dir_entry *de;
	unsigned int off, rec;
	int nlen, ret;

	for (off = 0; off < leaf_space(fs); off += rec) {
		de = (struct ext2_dir_entry *)(block + off);
		if (ext2fs_get_rec_len(fs, de, &rec) || rec < 8 || off + rec > fs->blocksize)
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
		ret = rr_err_ino(htree_name_hash(fs, hv, de->name, (size_t)nlen, &v[*n].hash, &v[*n].minor), dir);
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
	ret = rr_err_ino(ext2fs_bmap2(fs, dir, (struct ext2_inode *)&in, NULL, 0, 0, NULL, &pblk0), dir);
	if (!ret && !pblk0)
		ret = -EIO;
	root = malloc(fs->blocksize);
	leaf = malloc(fs->blocksize);
	cap = fs->blocksize / 12;
	v = calloc(cap, sizeof(*v));
	if (!ret && (!root || !leaf || !v))
		ret = -ENOMEM;
	if (!ret)
		ret = rr_err_ino(ext2fs_read_dir_block4(fs, pblk0, root, 0, dir), dir);
	if (ret)
		goto out;

	hv = fs->super->s_def_hash_version;
	if (hv <= EXT2_HASH_TEA && (fs->super->s_flags & EXT2_FLAGS_UNSIGNED_HASH))
		hv += 3;
	ret = collect_entries(fs, dir, root, hv, v, cap, &n, &dotdot);
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
	ret = rr_err_ino(htree_name_hash(fs, hv, name, strlen(name), &v[n].hash, &v[n].minor), dir);
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
		ret = rr_err_ino(ext2fs_write_dir_block4(fs, ex1.pblk, leaf, 0, dir), dir);
	if (!ret)
		ret = fill_leaf(fs, leaf, v + mid, n - mid);
	if (!ret)
		ret = rr_err_ino(ext2fs_write_dir_block4(fs, ex2.pblk, leaf, 0, dir), dir);
	if (!ret)
		ret = emap_tree_map(rfs, dir, &in, 1, ex1.pblk, 1, 0);
	if (!ret)
		ret = emap_tree_map(rfs, dir, &in, 2, ex2.pblk, 1, 0);
	if (ret)
		goto out;

	fill_root(fs, root, dir, dotdot, split);
	ret = rr_err_ino(ext2fs_write_dir_block4(fs, pblk0, root, 0, dir), dir);
	if (ret)
		goto out;
	in.i_flags |= EXT2_INDEX_FL;
	ret = rr_err_ino(ext2fs_inode_size_set(fs, (struct ext2_inode *)&in, 3ULL * fs->blocksize), dir);
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

/* A directory block by logical number.  Caller holds the fs lock. */
static int read_lblk(ext2_filsys fs, ext2_ino_t dir, struct ext2_inode_large *in, blk64_t lblk,
		     char *buf, blk64_t *pblk, int verify)
{
	int ret = rr_err_ino(ext2fs_bmap2(fs, dir, (struct ext2_inode *)in, NULL, 0, lblk, NULL, pblk), dir);

	if (ret)
		return ret;
	if (!*pblk)
		return -EIO;
	if (verify)
		return rr_err_ino(ext2fs_read_dir_block4(fs, *pblk, buf, 0, dir), dir);
	return rr_err_ino(io_channel_read_blk64(fs->io, *pblk, 1, buf), dir);
}

/* Scan one leaf for name; 1 found, 0 not, <0 error. */
static int leaf_find(ext2_filsys fs, const char *buf, const char *name, size_t len, ext2_ino_t *ino)
{
	unsigned int off, rec;

	for (off = 0; off + 8 <= fs->blocksize; off += rec) {
		const struct ext2_dir_entry *de = (const struct ext2_dir_entry *)(buf + off);

		if (ext2fs_get_rec_len(fs, (struct ext2_dir_entry *)de, &rec) || rec < 8 ||
		    off + rec > fs->blocksize)
			return -EIO;
		if ((size_t)ext2fs_dirent_name_len(de) + 8 > rec)
			return -EIO;	/* name runs past its record: corrupt leaf */
		if (de->inode && (size_t)ext2fs_dirent_name_len(de) == len && !memcmp(de->name, name, len)) {
			*ino = de->inode;
			return 1;
		}
	}
	return 0;
}

/*
 * Find name through the index: the leaf that holds it by hash, then the
 * following leaves while the hash continues there.  *leaf gets the leaf's
 * physical block.  -EAGAIN: the index cannot be used (not indexed, or it
 * looks wrong); the caller scans linearly.
 */
int htree_find(struct rr_fs *rfs, ext2_ino_t dir, const char *name, ext2_ino_t *ino, blk64_t *leaf)
{
	ext2_filsys fs = rfs->fs;
	struct ext2_inode_large in;
	struct ext2_dx_root_info *info;
	struct ext2_dx_countlimit *cl;
	struct ext2_dx_entry *ent;
	ext2_dirhash_t hash, minor;
	size_t len = strlen(name);
	unsigned int levels, level, count, limit, i, lo, hi, csum;
	blk64_t pblk, nblocks, child = 0;
	int hv, ret;
	char *node, *lbuf;

	ret = inode_load(rfs, dir, &in);
	if (ret)
		return ret;
	if (!(in.i_flags & EXT2_INDEX_FL) || !ext2fs_has_feature_dir_index(fs->super))
		return -EAGAIN;
	nblocks = EXT2_I_SIZE(&in) / fs->blocksize;
	csum = ext2fs_has_feature_metadata_csum(fs->super) ? sizeof(struct ext2_dx_tail) : 0;
	node = malloc(fs->blocksize);
	lbuf = malloc(fs->blocksize);
	if (!node || !lbuf) {
		ret = -ENOMEM;
		goto out;
	}
	ret = read_lblk(fs, dir, &in, 0, node, &pblk, 0);
	if (ret)
		goto out;
	info = (struct ext2_dx_root_info *)(node + 24);
	levels = info->indirect_levels + 1u;
	if (info->reserved_zero || info->info_length != 8 || levels > 3 ||
	    (levels > 2 && !ext2fs_has_feature_largedir(fs->super))) {
		ret = -EAGAIN;
		goto out;
	}
	hv = info->hash_version;
	if (hv <= EXT2_HASH_TEA && (fs->super->s_flags & EXT2_FLAGS_UNSIGNED_HASH))
		hv += 3;
	ret = rr_err_ino(htree_name_hash(fs, hv, name, len, &hash, &minor), dir);
	if (ret)
		goto out;
	cl = (struct ext2_dx_countlimit *)(node + 24 + info->info_length);
	for (level = 0;; level++) {
		count = ext2fs_le16_to_cpu(cl->count);
		limit = ext2fs_le16_to_cpu(cl->limit);
		if (!count || count > limit ||
		    (size_t)((char *)cl - node) + limit * sizeof(*ent) + csum > fs->blocksize) {
			ret = -EAGAIN;
			goto out;
		}
		ent = (struct ext2_dx_entry *)cl;
		/* The last entry whose hash is <= ours (entry 0 stands for hash 0). */
		lo = 1;
		hi = count;
		while (lo < hi) {
			unsigned int mid = lo + (hi - lo) / 2;

			if (ext2fs_le32_to_cpu(ent[mid].hash) <= hash)
				lo = mid + 1;
			else
				hi = mid;
		}
		i = lo - 1;
		child = ext2fs_le32_to_cpu(ent[i].block) & EXT4_DX_BLOCK_MASK;
		if (child == 0 || child >= nblocks) {
			ret = -EAGAIN;
			goto out;
		}
		if (level + 1 == levels)
			break;
		ret = read_lblk(fs, dir, &in, child, node, &pblk, 0);
		if (ret)
			goto out;
		cl = (struct ext2_dx_countlimit *)(node + 8);
	}
	/* Leaf level: ent[i] in node is the leaf; the hash may continue in ent[i + 1]. */
	for (;;) {
		ret = read_lblk(fs, dir, &in, child, lbuf, &pblk, 1);
		if (ret)
			goto out;
		ret = leaf_find(fs, lbuf, name, len, ino);
		if (ret > 0) {
			*leaf = pblk;
			ret = 0;
			goto out;
		}
		if (ret < 0)
			goto out;
		if (i + 1 >= count) {
			/* Continuation into the next index block: left to the linear scan. */
			ret = levels > 1 ? -EAGAIN : -ENOENT;
			goto out;
		}
		if ((ext2fs_le32_to_cpu(ent[i + 1].hash) & ~1u) != (hash & ~1u) ||
		    !(ext2fs_le32_to_cpu(ent[i + 1].hash) & 1)) {
			ret = -ENOENT;
			goto out;
		}
		i++;
		child = ext2fs_le32_to_cpu(ent[i].block) & EXT4_DX_BLOCK_MASK;
		if (child == 0 || child >= nblocks) {
			ret = -EAGAIN;
			goto out;
		}
	}
out:
	free(node);
	free(lbuf);
	return ret;
}

/*
 * Remove name from the directory block at pblk (a leaf htree_find named),
 * as ext2fs_unlink does: the entry's space joins the one before it.
 */
int htree_remove_in_block(struct rr_fs *rfs, ext2_ino_t dir, blk64_t pblk, const char *name)
{
	ext2_filsys fs = rfs->fs;
	size_t len = strlen(name);
	struct ext2_dir_entry *prev = NULL;
	unsigned int off, rec, prec;
	char *buf = malloc(fs->blocksize);
	int ret;

	if (!buf)
		return -ENOMEM;
	ret = rr_err_ino(ext2fs_read_dir_block4(fs, pblk, buf, 0, dir), dir);
	for (off = 0; !ret && off + 8 <= fs->blocksize; off += rec) {
		struct ext2_dir_entry *de = (struct ext2_dir_entry *)(buf + off);

		if (ext2fs_get_rec_len(fs, de, &rec) || rec < 8 || off + rec > fs->blocksize) {
			ret = -EIO;
			break;
		}
		if ((size_t)ext2fs_dirent_name_len(de) + 8 > rec) {
			ret = -EIO;
			break;
		}
		if (de->inode && (size_t)ext2fs_dirent_name_len(de) == len && !memcmp(de->name, name, len)) {
			if (prev && !ext2fs_get_rec_len(fs, prev, &prec)) {
				ret = rr_err_ino(ext2fs_set_rec_len(fs, prec + rec, prev), dir);
			} else {
				de->inode = 0;
			}
			if (!ret)
				ret = rr_err_ino(ext2fs_write_dir_block4(fs, pblk, buf, 0, dir), dir);
			free(buf);
			return ret;
		}
		prev = de;
	}
	free(buf);
	return ret ? ret : -ENOENT;
}

// SPDX-License-Identifier: GPL-2.0
/*
 * Opening, checking, committing and closing the filesystem; the fs lock; the
 * one place where libext2fs error codes become errnos.
 */
#include "rrfs.h"
#include "io.h"
#include "log.h"
#include "orphan.h"
#include "error.h"
#include "mountinfo.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * Every fs-locked section starts with the blocks that file data took
 * without the lock applied to libext2fs (so it sees them, and the maps it
 * writes never point at blocks its bitmaps call free), and ends with the
 * allocator's choices for libext2fs's own allocations settled.
 */
void rr_fs_lock(struct rr_fs *rfs)
{
	pthread_mutex_lock(&rfs->lock);
	if (rfs->alloc)
		rr_alloc_sync(rfs->alloc);
}

void rr_fs_unlock(struct rr_fs *rfs)
{
	if (rfs->alloc)
		rr_alloc_settle(rfs->alloc);
	pthread_mutex_unlock(&rfs->lock);
}

static void host_lock(void *rfs)
{
	rr_fs_lock(rfs);
}

static void host_unlock(void *rfs)
{
	rr_fs_unlock(rfs);
}

void rr_fs_dirty(struct rr_fs *rfs)
{
	rfs->dirty = 1;
}

int rr_err_at(errcode_t err, ext2_ino_t ino, const char *func, unsigned int line)
{
	if (!err)
		return 0;
	/* The io manager and libc return plain errnos; an I/O error was recorded below us. */
	if (err > 0 && err < 4096) {
		rr_error_attribute(ino, func, line);
		return -(int)err;
	}
	switch (err) {
	case EXT2_ET_NO_MEMORY:
		return -ENOMEM;
	case EXT2_ET_RO_FILSYS:
	case EXT2_ET_RO_UNSUPP_FEATURE:
		return -EROFS;
	case EXT2_ET_DIR_NO_SPACE:
	case EXT2_ET_BLOCK_ALLOC_FAIL:
	case EXT2_ET_INODE_ALLOC_FAIL:
	case EXT2_ET_EA_NO_SPACE:
	case EXT2_ET_TOOSMALL:
		return -ENOSPC;
	case EXT2_ET_FILE_NOT_FOUND:
		return -ENOENT;
	case EXT2_ET_DIR_EXISTS:
	case EXT2_ET_FILE_EXISTS:
		return -EEXIST;
	case EXT2_ET_TOO_MANY_REFS:
		return -EMLINK;
	case EXT2_ET_EA_KEY_NOT_FOUND:
		return -ENODATA;
	case EXT2_ET_FILE_TOO_BIG:
	case EXT2_ET_EXTENT_NOT_SUPPORTED:
		return -EFBIG;
	case EXT2_ET_UNIMPLEMENTED:
	case EXT2_ET_OP_NOT_SUPPORTED:
		return -EOPNOTSUPP;
	case EXT2_ET_NO_DIRECTORY:
		return -ENOTDIR;
	case EXT2_ET_INVALID_ARGUMENT:
		return -EINVAL;
	default:
		/* Corruption, checksum failures, bad block numbers: EIO, logged, errors= applies. */
		if (ino)
			rr_log(LOG_ERR, "filesystem error in %s, inode %u: %s", func, ino, error_message(err));
		else
			rr_log(LOG_ERR, "filesystem error in %s: %s", func, error_message(err));
		rr_fs_error_at(err, ino, 0, func, line);
		return -EIO;
	}
}

static const struct {
	__u32 mask;
	const char *name;
} bad_incompat[] = {
	{ EXT2_FEATURE_INCOMPAT_COMPRESSION, "compression" },
	{ EXT3_FEATURE_INCOMPAT_JOURNAL_DEV, "journal_dev" },
	{ EXT4_FEATURE_INCOMPAT_DIRDATA, "dirdata" },
	{ EXT4_FEATURE_INCOMPAT_INLINE_DATA, "inline_data" },
	{ EXT4_FEATURE_INCOMPAT_ENCRYPT, "encrypt" },
	{ EXT4_FEATURE_INCOMPAT_CASEFOLD, "casefold" },
}, ro_compat_ro[] = {
	{ EXT4_FEATURE_RO_COMPAT_QUOTA, "quota" },
	{ EXT4_FEATURE_RO_COMPAT_BIGALLOC, "bigalloc" },
	{ EXT4_FEATURE_RO_COMPAT_REPLICA, "replica" },
	{ EXT4_FEATURE_RO_COMPAT_READONLY, "read-only" },
	{ EXT4_FEATURE_RO_COMPAT_VERITY, "verity" },
	{ EXT4_FEATURE_RO_COMPAT_SHARED_BLOCKS, "shared_blocks" },
};

static int feature_check(ext2_filsys fs, char *msg, size_t msglen)
{
	struct ext2_super_block *sb = fs->super;
	size_t i;

	if (sb->s_rev_level > EXT2_DYNAMIC_REV) {
		snprintf(msg, msglen, "unsupported revision level %u", sb->s_rev_level);
		return -EINVAL;
	}
	for (i = 0; i < sizeof(bad_incompat) / sizeof(bad_incompat[0]); i++)
		if (sb->s_feature_incompat & bad_incompat[i].mask) {
			snprintf(msg, msglen, "unsupported incompat feature '%s'", bad_incompat[i].name);
			return -EOPNOTSUPP;
		}
	if (sb->s_feature_incompat & ~(EXT2_LIB_FEATURE_INCOMPAT_SUPP | EXT4_FEATURE_INCOMPAT_MMP)) {
		snprintf(msg, msglen, "unknown incompat features 0x%x",
			 sb->s_feature_incompat & ~(EXT2_LIB_FEATURE_INCOMPAT_SUPP | EXT4_FEATURE_INCOMPAT_MMP));
		return -EOPNOTSUPP;
	}
	if (sb->s_feature_incompat & EXT3_FEATURE_INCOMPAT_RECOVER) {
		snprintf(msg, msglen, "the journal needs recovery: run 'e2fsck -fy' on the image first");
		return -EUCLEAN;
	}
	return 0;
}

/* Names the ro_compat feature that keeps rrfuse from writing the image in buf, or NULL. */
static const char *unwritable_feature(ext2_filsys fs, char *buf, size_t len)
{
	__u32 ro_compat = fs->super->s_feature_ro_compat;
	size_t i;

	if (ro_compat & ~EXT2_LIB_FEATURE_RO_COMPAT_SUPP) {
		snprintf(buf, len, "unknown ro_compat features 0x%x",
			 ro_compat & ~EXT2_LIB_FEATURE_RO_COMPAT_SUPP);
		return buf;
	}
	for (i = 0; i < sizeof(ro_compat_ro) / sizeof(ro_compat_ro[0]); i++)
		if (ro_compat & ro_compat_ro[i].mask) {
			snprintf(buf, len, "feature '%s'", ro_compat_ro[i].name);
			return buf;
		}
	return NULL;
}

static int orphans_pending(ext2_filsys fs)
{
	return fs->super->s_last_orphan || ext2fs_has_feature_orphan_present(fs->super);
}

/* One run of static metadata for rr_check_desc: what a clash with it is called. */
struct meta_run {
	uint64_t start, len;
	errcode_t err;		/* 0: superblock or descriptors (their clashes are not checked) */
};

/*
 * Add a run to r[0..*n).  flex_bg puts a flex group's bitmaps and inode
 * tables next to each other: a run of the same kind that continues the last
 * one of its kind is merged into it (they cannot overlap), so there is
 * little left to sort.  last[k]: index of the last run of kind k, or -1.
 */
static void meta_add(struct meta_run *r, size_t *n, ssize_t last[3], int k, uint64_t start,
		     uint64_t len, errcode_t err)
{
	if (last[k] >= 0 && r[last[k]].start + r[last[k]].len == start) {
		r[last[k]].len += len;
		return;
	}
	r[*n] = (struct meta_run){ start, len, err };
	last[k] = (ssize_t)(*n)++;
}

static int meta_run_cmp(const void *a, const void *b)
{
	const struct meta_run *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/*
 * The checks of ext2fs_check_desc, in O(groups log groups) time and no
 * bitmap: every group's block bitmap, inode bitmap and inode table lie in
 * the filesystem (in their group without flex_bg) and overlap neither each
 * other nor any group's superblock and descriptor blocks.  ext2fs_check_desc
 * marks every inode table block in a bitmap of the whole filesystem: on a
 * 16 TiB image that was 512 MiB of bit array, or a second of red-black tree
 * updates, on every mount.  Here the runs are sorted and neighbours compared.
 */
errcode_t rr_check_desc(ext2_filsys fs)
{
	uint64_t blocks = ext2fs_blocks_count(fs->super), first = fs->super->s_first_data_block;
	uint64_t last = blocks - 1, end = 0, old_desc_blocks;
	int flex = ext2fs_has_feature_flex_bg(fs->super);
	size_t n = 0, i, end_run = 0;
	ssize_t last_of[3] = { -1, -1, -1 };
	errcode_t err = 0;
	struct meta_run *r;
	dgrp_t g;

	if (ext2fs_has_feature_meta_bg(fs->super))
		old_desc_blocks = fs->super->s_first_meta_bg;
	else
		old_desc_blocks = fs->desc_blocks + fs->super->s_reserved_gdt_blocks;
	r = malloc(sizeof(*r) * 6 * (size_t)fs->group_desc_count);
	if (!r)
		return EXT2_ET_NO_MEMORY;
	for (g = 0; g < fs->group_desc_count; g++) {
		blk64_t super_blk, old_desc, new_desc, b;
		blk_t used;

		ext2fs_super_and_bgd_loc2(fs, g, &super_blk, &old_desc, &new_desc, &used);
		/* As ext2fs_reserve_super_and_bgd reserves them. */
		if (super_blk || g == 0)
			r[n++] = (struct meta_run){ super_blk, 1, 0 };
		if (old_desc && old_desc < blocks)
			r[n++] = (struct meta_run){ old_desc, old_desc + old_desc_blocks > blocks ?
						    blocks - old_desc : old_desc_blocks, 0 };
		if (new_desc)
			r[n++] = (struct meta_run){ new_desc, 1, 0 };
		if (!flex) {
			first = ext2fs_group_first_block2(fs, g);
			last = ext2fs_group_last_block2(fs, g);
		}
		b = ext2fs_block_bitmap_loc(fs, g);
		if (b < first || b > last) {
			err = EXT2_ET_GDESC_BAD_BLOCK_MAP;
			goto out;
		}
		meta_add(r, &n, last_of, 0, b, 1, EXT2_ET_GDESC_BAD_BLOCK_MAP);
		b = ext2fs_inode_bitmap_loc(fs, g);
		if (b < first || b > last) {
			err = EXT2_ET_GDESC_BAD_INODE_MAP;
			goto out;
		}
		meta_add(r, &n, last_of, 1, b, 1, EXT2_ET_GDESC_BAD_INODE_MAP);
		b = ext2fs_inode_table_loc(fs, g);
		if (b < first || b + fs->inode_blocks_per_group - 1 > last) {
			err = EXT2_ET_GDESC_BAD_INODE_TABLE;
			goto out;
		}
		meta_add(r, &n, last_of, 2, b, fs->inode_blocks_per_group, EXT2_ET_GDESC_BAD_INODE_TABLE);
	}
	qsort(r, n, sizeof(*r), meta_run_cmp);
	for (i = 0; i < n; i++) {
		/* Overlaps the run reaching furthest so far: a clash unless both are descriptors. */
		if (i && r[i].start < end && (r[i].err || r[end_run].err)) {
			err = r[i].err ? r[i].err : r[end_run].err;
			goto out;
		}
		if (!i || r[i].start + r[i].len > end) {
			end = r[i].start + r[i].len;
			end_run = i;
		}
	}
out:
	free(r);
	return err;
}

/* The group's block (or inode) bitmap block rr_read_bitmaps reads, or 0 for none. */
static blk64_t bitmap_to_read(ext2_filsys fs, dgrp_t g, int inode)
{
	blk64_t b = inode ? ext2fs_inode_bitmap_loc(fs, g) : ext2fs_block_bitmap_loc(fs, g);

	if (b >= ext2fs_blocks_count(fs->super))
		return 0;
	if (ext2fs_has_group_desc_csum(fs) &&
	    ext2fs_bg_flags_test(fs, g, inode ? EXT2_BG_INODE_UNINIT : EXT2_BG_BLOCK_UNINIT) &&
	    ext2fs_group_desc_csum_verify(fs, g))
		return 0;
	return b;
}

/*
 * Ask the kernel for every bitmap block rr_read_bitmaps will read, before
 * it reads them one by one: with flex_bg a 16 TiB image has 8192 of them,
 * 2 GiB apart, and waiting for each in turn was most of its mount time on
 * a cold cache.  Only through our io manager (the unit tests use unix_io).
 */
static void bitmaps_readahead(ext2_filsys fs)
{
	int inode;
	dgrp_t g;

	for (g = 0; g < fs->group_desc_count; g++)
		for (inode = 0; inode < 2; inode++) {
			blk64_t b = bitmap_to_read(fs, g, inode);

			if (b)
				io_channel_cache_readahead(fs->io, b, 1);
		}
}

/*
 * ext2fs_read_bitmaps, without the work for groups that were never
 * initialised.  libext2fs's reader hands every group's bitmap to the
 * in-memory map, a zeroed buffer for BLOCK_UNINIT and INODE_UNINIT ones:
 * 131072 of them on a 16 TiB image, a second of mount time.  Here those
 * groups cost only what ext2fs_read_bitmaps adds for them afterwards (their
 * superblock, descriptors, bitmaps and inode table marked in use), and
 * nothing is read for them.  The maps come from fs->default_bitmap_type.
 */
errcode_t rr_read_bitmaps(ext2_filsys fs)
{
	uint32_t bnbytes = EXT2_CLUSTERS_PER_GROUP(fs->super) / 8;
	uint32_t inbytes = EXT2_INODES_PER_GROUP(fs->super) / 8;
	int nocsum = !!(fs->flags & EXT2_FLAG_IGNORE_CSUM_ERRORS);
	int flags = fs->flags;
	char *buf = NULL;
	errcode_t err;
	dgrp_t g;

	if (fs->block_map || fs->inode_map)
		return ext2fs_read_bitmaps(fs);
	bitmaps_readahead(fs);
	err = ext2fs_get_mem(fs->blocksize, &buf);
	if (!err)
		err = ext2fs_allocate_block_bitmap(fs, "block bitmap", &fs->block_map);
	if (!err)
		err = ext2fs_allocate_inode_bitmap(fs, "inode bitmap", &fs->inode_map);
	for (g = 0; !err && g < fs->group_desc_count; g++) {
		blk64_t b = bitmap_to_read(fs, g, 0);

		if (b) {
			err = io_channel_read_blk64(fs->io, b, 1, buf);
			if (err)
				err = EXT2_ET_BLOCK_BITMAP_READ;
			else if (!nocsum && !ext2fs_block_bitmap_csum_verify(fs, g, buf, (int)bnbytes))
				err = EXT2_ET_BLOCK_BITMAP_CSUM_INVALID;
			else
				err = ext2fs_set_block_bitmap_range2(fs->block_map,
								     ext2fs_group_first_block2(fs, g),
								     bnbytes * 8, buf);
			if (err)
				break;
		}
		b = bitmap_to_read(fs, g, 1);
		if (b) {
			err = io_channel_read_blk64(fs->io, b, 1, buf);
			if (err)
				err = EXT2_ET_INODE_BITMAP_READ;
			else if (!nocsum && !ext2fs_inode_bitmap_csum_verify(fs, g, buf, (int)inbytes))
				err = EXT2_ET_INODE_BITMAP_CSUM_INVALID;
			else
				err = ext2fs_set_inode_bitmap_range2(fs->inode_map,
								     (uint64_t)g * EXT2_INODES_PER_GROUP(fs->super) + 1,
								     inbytes * 8, buf);
		}
	}
	/* As ext2fs_read_bitmaps: an uninitialised group's own metadata is in use. */
	for (g = 0; !err && g < fs->group_desc_count; g++) {
		blk64_t b;

		if (!ext2fs_bg_flags_test(fs, g, EXT2_BG_BLOCK_UNINIT))
			continue;
		ext2fs_reserve_super_and_bgd(fs, g, fs->block_map);
		if ((b = ext2fs_inode_table_loc(fs, g)))
			ext2fs_mark_block_bitmap_range2(fs->block_map, b, fs->inode_blocks_per_group);
		if ((b = ext2fs_block_bitmap_loc(fs, g)))
			ext2fs_mark_block_bitmap2(fs->block_map, b);
		if ((b = ext2fs_inode_bitmap_loc(fs, g)))
			ext2fs_mark_block_bitmap2(fs->block_map, b);
	}
	ext2fs_free_mem(&buf);
	if (err) {
		if (fs->block_map)
			ext2fs_free_block_bitmap(fs->block_map);
		if (fs->inode_map)
			ext2fs_free_inode_bitmap(fs->inode_map);
		fs->block_map = NULL;
		fs->inode_map = NULL;
	}
	/* Reading is not a change: nothing to write back. */
	fs->flags = (fs->flags & ~(EXT2_FLAG_BB_DIRTY | EXT2_FLAG_IB_DIRTY)) |
		    (flags & (EXT2_FLAG_BB_DIRTY | EXT2_FLAG_IB_DIRTY));
	return err;
}

/*
 * What the kernel checks before it trusts an image: that it fits on the
 * device, and that the group descriptors are sane and their checksums right.
 */
static int geometry_check(ext2_filsys fs, const char *device, char *msg, size_t msglen)
{
	blk64_t dev_blocks = 0;
	errcode_t err;
	dgrp_t g;

	err = ext2fs_get_device_size2(device, (int)fs->blocksize, &dev_blocks);
	if (!err && dev_blocks && ext2fs_blocks_count(fs->super) > dev_blocks) {
		snprintf(msg, msglen, "%s: the filesystem has %llu blocks but the image or device holds only %llu: truncated?",
			 device, (unsigned long long)ext2fs_blocks_count(fs->super),
			 (unsigned long long)dev_blocks);
		return -EINVAL;
	}
	for (g = 0; g < fs->group_desc_count; g++)
		if (!ext2fs_group_desc_csum_verify(fs, g)) {
			snprintf(msg, msglen, "%s: group descriptor %u checksum is wrong: run e2fsck", device, g);
			return -EUCLEAN;
		}
	err = rr_check_desc(fs);
	if (err) {
		snprintf(msg, msglen, "%s: corrupt group descriptors (%s): run e2fsck", device, error_message(err));
		return -EUCLEAN;
	}
	return 0;
}

/* Blocks that hold static metadata, as the kernel leaves them out of f_blocks. */
static uint64_t overhead_blocks(ext2_filsys fs)
{
	struct ext2_super_block *sb = fs->super;
	uint64_t total = sb->s_first_data_block;
	dgrp_t g;

	if (sb->s_overhead_clusters)
		return sb->s_overhead_clusters;
	for (g = 0; g < fs->group_desc_count; g++) {
		blk64_t super_blk, old_desc, new_desc;
		blk_t used = 0;

		ext2fs_super_and_bgd_loc2(fs, g, &super_blk, &old_desc, &new_desc, &used);
		total += used + 2 + fs->inode_blocks_per_group;
	}
	if (sb->s_journal_inum) {
		struct ext2_inode in;

		if (!ext2fs_read_inode(fs, sb->s_journal_inum, &in))
			total += ext2fs_get_stat_i_blocks(fs, &in) / (fs->blocksize / 512);
	}
	return total;
}

/*
 * Open the image through our io manager, read-write if rw.  *devro: it
 * refused writing (a read-only file or device), so it is open read-only.
 */
static errcode_t open_image(const char *device, int rw, int *devro, ext2_filsys *fs)
{
	/*
	 * FORCE: libext2fs would refuse unknown features without naming them;
	 * feature_check() does.  SKIP_MMP: multi-mount protection starts only
	 * once the image is accepted (mmp_begin), so a refusal writes nothing.
	 */
	int flags = EXT2_FLAG_64BITS | EXT2_FLAG_EXCLUSIVE | EXT2_FLAG_FORCE | EXT2_FLAG_SKIP_MMP;
	errcode_t err;

	*devro = 0;
	io_set_readonly(!rw);
	err = ext2fs_open2(device, NULL, flags | (rw ? EXT2_FLAG_RW : 0), 0, 0, rr_io_manager, fs);
	if (rw && (err == EACCES || err == EROFS || err == EPERM)) {
		io_set_readonly(1);
		err = ext2fs_open2(device, NULL, flags, 0, 0, rr_io_manager, fs);
		*devro = !err;
	}
	/*
	 * Bitmaps as red-black trees of extents, not bit arrays: a bit array is
	 * a bit per block whether used or not (512 MiB of block bitmap for 16
	 * TiB), filled at mount; the tree grows with the number of used and free
	 * extents.  The engine tests bits through its buddies, not this map.
	 */
	if (!err)
		(*fs)->default_bitmap_type = EXT2FS_BMAP64_RBTREE;
	return err;
}

/*
 * A read-only mount still finishes a crash's orphans, as the kernel's does
 * ("orphan cleanup on readonly fs"), unless the image cannot be written.
 * Returns 1 when fs was reopened read-write for that, 0 otherwise.
 */
static int want_readonly_cleanup(const char *device, const char *unwritable, ext2_filsys *fs)
{
	int devro;

	if (!orphans_pending(*fs) || ((*fs)->super->s_state & EXT2_ERROR_FS))
		return 0;
	if (unwritable) {
		rr_log(LOG_WARNING, "%s is not writable by rrfuse: skipping orphan cleanup", unwritable);
		return 0;
	}
	ext2fs_close_free(fs);
	if (!open_image(device, 1, &devro, fs) && !devro)
		return 1;
	rr_log(LOG_WARNING, "write access unavailable, skipping orphan cleanup");
	if (!devro)
		open_image(device, 0, &devro, fs);
	return 0;
}

/* Metadata that cannot be read or written: a filesystem error (the data path's are not). */
static errcode_t metadata_io_error(unsigned long block, errcode_t error, const char *what)
{
	rr_log(LOG_ERR, "I/O error %s metadata block %lu: %s", what, block, error_message(error));
	rr_fs_io_error(error, block);
	return error;
}

static errcode_t metadata_read_error(io_channel ch, unsigned long block, int count, void *data,
				     size_t size, int actual, errcode_t error)
{
	(void)ch, (void)count, (void)data, (void)size, (void)actual;
	return metadata_io_error(block, error, "reading");
}

static errcode_t metadata_write_error(io_channel ch, unsigned long block, int count,
				      const void *data, size_t size, int actual, errcode_t error)
{
	(void)ch, (void)count, (void)data, (void)size, (void)actual;
	return metadata_io_error(block, error, "writing");
}

/*
 * Multi-mount protection, for a writable mount of an image that has it: as
 * e2fsck and the kernel, watch the MMP block for twice its check interval
 * (so mounting takes that long), then mark it in use until unmount (then
 * clean again); another node, e2fsck or kernel finds it taken meanwhile.
 */
static int mmp_begin(ext2_filsys fs, const char *device, char *msg, size_t msglen)
{
	errcode_t err;

	if (!ext2fs_has_feature_mmp(fs->super) || !(fs->flags & EXT2_FLAG_RW))
		return 0;
	rr_log(LOG_NOTICE, "%s: multi-mount protection: making sure no other node uses it", device);
	fs->flags &= ~EXT2_FLAG_SKIP_MMP;
	err = ext2fs_mmp_start(fs);
	if (!err)
		return 0;
	fs->flags |= EXT2_FLAG_SKIP_MMP;	/* leave the MMP block to whoever holds it */
	snprintf(msg, msglen, "%s: multi-mount protection: %s", device, error_message(err));
	return -EBUSY;
}

int rr_fs_open(struct rr_fs *rfs, const char *device, const struct rr_opts *opts, char *msg,
	       size_t msglen)
{
	ext2_filsys fs = NULL;
	const char *unwritable;
	struct rr_mnt mnt;
	char why[64];
	errcode_t err;
	int ret, ro = opts->ro, devro;

	memset(rfs, 0, sizeof(*rfs));
	rfs->opts = *opts;
	rfs->device = device;
	pthread_mutex_init(&rfs->lock, NULL);
	pthread_mutex_init(&rfs->commit_lock, NULL);
	pthread_cond_init(&rfs->commit_cond, NULL);
	pthread_mutex_init(&rfs->delayed.lock, NULL);

	/* Mounted already: say where, at once (a lock held by no mount is waited for: src/io.c). */
	if (!rr_mnt_of(device, &mnt)) {
		snprintf(msg, msglen, "%s is in use: mounted on %s (%s), and an image is mounted once at a time",
			 device, mnt.target, mnt.fstype);
		return -EBUSY;
	}
	err = open_image(device, !ro, &devro, &fs);
	if (devro) {
		/* A read-only image file or device: like the kernel, fall back to ro. */
		rr_log(LOG_WARNING, "%s is write-protected: mounting read-only", device);
		ro = 1;
	}
	if (err) {
		if (err == EBUSY)
			snprintf(msg, msglen, "%s is in use (mounted, or opened by another program)", device);
		else if (err == EXT2_ET_BAD_MAGIC)
			snprintf(msg, msglen, "%s: not an ext2/3/4 filesystem (bad superblock magic)", device);
		else
			snprintf(msg, msglen, "%s: %s", device, error_message(err));
		return -EINVAL;
	}
	ret = feature_check(fs, msg, msglen);
	if (!ret)
		ret = geometry_check(fs, device, msg, msglen);
	if (ret) {
		fs->flags &= ~(EXT2_FLAG_DIRTY | EXT2_FLAG_BB_DIRTY | EXT2_FLAG_IB_DIRTY);
		ext2fs_close_free(&fs);
		return ret;
	}
	if (fs->blocksize > 65536 || EXT2FS_CLUSTER_RATIO(fs) != 1) {
		snprintf(msg, msglen, "unsupported block/cluster size");
		ext2fs_close_free(&fs);
		return -EOPNOTSUPP;
	}
	unwritable = unwritable_feature(fs, why, sizeof(why));
	if (devro && orphans_pending(fs))
		rr_log(LOG_WARNING, "write access unavailable, skipping orphan cleanup");
	if (unwritable && !ro) {
		rr_log(LOG_WARNING, "%s is not writable by rrfuse: mounting read-only", unwritable);
		ro = 1;
	} else if (ro && !devro) {
		rfs->ro_cleanup = want_readonly_cleanup(device, unwritable, &fs);
		if (!fs) {
			snprintf(msg, msglen, "%s: cannot reopen the image", device);
			return -EIO;
		}
	}
	ret = mmp_begin(fs, device, msg, msglen);
	if (ret) {
		ext2fs_close_free(&fs);
		return ret;
	}
	err = rr_read_bitmaps(fs);
	if (err) {
		snprintf(msg, msglen, "%s: cannot read bitmaps: %s", device, error_message(err));
		ext2fs_close_free(&fs);
		return -EIO;
	}

	rfs->fs = fs;
	rfs->dev = io_dev_of(fs->io);
	rfs->bsize = fs->blocksize;
	rfs->bbits = (unsigned int)(__builtin_ctz(fs->blocksize));
	ret = io_set_direct(rfs->dev, rfs->opts.direct, msg, msglen);
	if (ret) {
		ext2fs_close_free(&fs);
		rfs->fs = NULL;
		return ret;
	}
	rfs->orig_state = fs->super->s_state;
	if (!(fs->super->s_state & EXT2_VALID_FS))
		rr_log(LOG_WARNING, "warning: mounting unchecked fs, running e2fsck is recommended");
	else if (fs->super->s_state & EXT2_ERROR_FS)
		rr_log(LOG_WARNING, "warning: mounting fs with errors, running e2fsck is recommended");

	ret = rr_itab_init(&rfs->itab);
	if (!rfs->opts.alloc.policy[0])
		rr_alloc_tunables_default(&rfs->opts.alloc);
	/* -o check also has the allocator verify its buddies after every change. */
	rfs->opts.alloc.check |= (unsigned int)rfs->opts.check;
	if (!ret && (!ro || rfs->ro_cleanup))
		ret = rr_alloc_attach(fs, &rfs->opts.alloc, &rfs->alloc);
	if (rfs->alloc)
		rr_alloc_set_lock(rfs->alloc, host_lock, host_unlock, rfs);
	if (!ret && (!ro || rfs->ro_cleanup)) {
		ret = orphan_init(rfs, msg, msglen);
		if (ret && ret != -ENOMEM) {
			rr_log(LOG_WARNING, "%s: %s: %s; run e2fsck", device, msg,
			       ro ? "skipping orphan cleanup" : "mounting read-only");
			ro = 1;
			rfs->ro_cleanup = 0;
			rr_alloc_detach(rfs->alloc);
			rfs->alloc = NULL;
			ret = 0;
		}
	}
	if (ret) {
		if (ret == -ENOMEM)
			snprintf(msg, msglen, "out of memory");
		orphan_destroy(rfs);
		if (rfs->alloc)
			rr_alloc_detach(rfs->alloc);
		ext2fs_close_free(&rfs->fs);
		return ret;
	}
	if (ro && !rfs->ro_cleanup)
		fs->flags &= ~EXT2_FLAG_RW;
	fs->io->read_error = metadata_read_error;
	fs->io->write_error = metadata_write_error;
	rr_error_attach(rfs, opts->errors);
	rfs->ro = ro;
	rfs->opts.ro = ro;
	rfs->overhead = overhead_blocks(fs);
	return 0;
}

/*
 * The superblock's primary copy, written now: the orphan list's updates are
 * ordered against inode writes (the commit writes it with everything else
 * otherwise).  Caller holds the fs lock.  libext2fs's flush writes only what
 * differs from orig_super, so orig_super learns what is on disk.
 */
int rr_fs_write_super(struct rr_fs *rfs)
{
	ext2_filsys fs = rfs->fs;
	struct ext2_super_block sb = *fs->super;
	errcode_t err;
	int ret;

#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	ext2fs_swap_super(&sb);
#endif
	err = ext2fs_superblock_csum_set(fs, &sb);
	if (err)
		return rr_err(err);
	ret = rr_err(io_channel_write_byte(fs->io, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE, &sb));
	if (!ret && fs->orig_super)
		memcpy(fs->orig_super, &sb, SUPERBLOCK_SIZE);
	return ret;
}

/* "orphan cleanup on readonly fs": writable for as long as that takes. */
static int cleanup_readonly(struct rr_fs *rfs)
{
	int ret;

	rr_log(LOG_NOTICE, "orphan cleanup on readonly fs");
	rfs->ro = 0;
	orphan_cleanup(rfs);
	ret = rr_fs_commit(rfs, 1);
	rfs->ro = 1;
	rfs->ro_cleanup = 0;
	ext2fs_mmp_stop(rfs->fs);	/* read-only from here: the MMP block is clean again */
	rfs->fs->flags &= ~EXT2_FLAG_RW;
	rr_alloc_detach(rfs->alloc);
	rfs->alloc = NULL;
	return ret;
}

/*
 * Record the mount in the superblock: from here on a crash leaves an image
 * that e2fsck checks in full.  Nothing is written to the image before this.
 * Then finish the orphans a crash left, as the kernel does at mount.
 */
int rr_fs_mark_mounted(struct rr_fs *rfs)
{
	ext2_filsys fs = rfs->fs;

	int ret;

	if (rfs->ro)
		return rfs->ro_cleanup ? cleanup_readonly(rfs) : 0;
	fs->super->s_state &= (__u16)~EXT2_VALID_FS;
	fs->super->s_mnt_count++;
	fs->super->s_mtime = (__u32)time(NULL);
	ext2fs_mark_super_dirty(fs);
	rfs->mounted = 1;
	ret = rr_fs_commit(rfs, 1);
	/* After the mark: a crash while finishing orphans leaves an unclean image. */
	if (!ret && orphans_pending(fs)) {
		orphan_cleanup(rfs);
		ret = rr_fs_commit(rfs, 1);
	}
	return ret;
}

/* At each commit: the MMP block is still ours (libext2fs rewrites it at most once a minute). */
static void mmp_check(struct rr_fs *rfs)
{
	ext2_filsys fs = rfs->fs;
	errcode_t err;

	if (!ext2fs_has_feature_mmp(fs->super) || (fs->flags & EXT2_FLAG_SKIP_MMP) ||
	    !(fs->flags & EXT2_FLAG_RW))
		return;
	err = ext2fs_mmp_update2(fs, 0);
	if (err) {
		rr_log(LOG_CRIT, "multi-mount protection: %s: another node writes this filesystem",
		       error_message(err));
		rr_fs_error(err, 0, fs->super->s_mmp_block);
	}
}

int rr_fs_commit(struct rr_fs *rfs, int sync)
{
	ext2_filsys fs = rfs->fs;
	errcode_t err = 0;
	int ret;

	/* After errors=remount-ro, what was done before the error still reaches the image. */
	if (rfs->ro && !rfs->mounted)
		return 0;
	rr_fs_lock(rfs);
	rr_error_commit(rfs);
	orphan_commit(rfs);
	mmp_check(rfs);
	if (fs->flags & (EXT2_FLAG_DIRTY | EXT2_FLAG_BB_DIRTY | EXT2_FLAG_IB_DIRTY) || rfs->dirty) {
		err = ext2fs_flush2(fs, EXT2_FLAG_FLUSH_NO_SYNC);
		if (!err)
			rfs->dirty = 0;
	}
	rr_fs_unlock(rfs);
	if (err)
		return rr_err(err);
	if (sync) {
		ret = rr_err(io_channel_flush(rfs->fs->io));
		if (ret)
			return ret;
	}
	return 0;
}

/*
 * mount -o remount,ro|rw, told by rrfuse's remount command beside the
 * kernel's own remount (FUSE does not pass that on).  As ext4_remount: to
 * read-only, delayed data gets its blocks, everything is committed and the
 * superblock says "clean" again; to read-write, it says "in use" and
 * changes are accepted.  The image stays open for writing underneath, so
 * rw comes back only for a mount that started read-write.
 */
int rr_fs_remount(struct rr_fs *rfs, int ro, char *err, size_t errlen)
{
	ext2_filsys fs = rfs->fs;
	int ret;

	if (!fs)
		return -ESHUTDOWN;
	if (!ro) {
		if (!rfs->alloc || !(fs->flags & EXT2_FLAG_RW)) {
			snprintf(err, errlen, "mounted read-only from the start: unmount and mount read-write");
			return -EROFS;
		}
		if (!rfs->ro)
			return 0;
		rr_fs_lock(rfs);
		fs->super->s_state &= (__u16)~EXT2_VALID_FS;
		fs->super->s_mtime = (__u32)time(NULL);
		ext2fs_mark_super_dirty(fs);
		rfs->mounted = 1;
		rr_fs_unlock(rfs);
		ret = rr_fs_commit(rfs, 1);
		if (ret) {
			snprintf(err, errlen, "cannot write the superblock: %s", strerror(-ret));
			return ret;
		}
		atomic_store(&rfs->ro, 0);
		return 0;
	}
	if (rfs->ro && !rfs->mounted)
		return 0;
	ret = data_flush_all(rfs);
	if (!ret)
		ret = rr_fs_commit(rfs, 0);
	if (ret) {
		snprintf(err, errlen, "writing out before going read-only: %s", strerror(-ret));
		return ret;
	}
	rr_fs_lock(rfs);
	atomic_store(&rfs->ro, 1);
	rr_error_commit(rfs);
	orphan_commit(rfs);
	fs->super->s_state = rfs->orig_state;
	fs->super->s_wtime = (__u32)time(NULL);
	ext2fs_mark_super_dirty(fs);
	ret = rr_err(ext2fs_flush2(fs, EXT2_FLAG_FLUSH_NO_SYNC));
	if (!ret)
		rfs->mounted = 0;	/* clean: nothing more to write until rw */
	rr_fs_unlock(rfs);
	if (!ret)
		ret = rr_err(io_channel_flush(rfs->fs->io));
	if (ret)
		snprintf(err, errlen, "cannot write the superblock: %s", strerror(-ret));
	return ret;
}

static void *commit_main(void *arg)
{
	struct rr_fs *rfs = arg;
	struct timespec ts;
	int ret;

	pthread_mutex_lock(&rfs->commit_lock);
	while (!rfs->commit_stop) {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += rfs->opts.commit_secs;
		pthread_cond_timedwait(&rfs->commit_cond, &rfs->commit_lock, &ts);
		if (rfs->commit_stop)
			break;
		pthread_mutex_unlock(&rfs->commit_lock);
		/* Periodic writeback: delayed data gets its blocks, then the metadata goes out. */
		ret = data_flush_all(rfs);
		if (ret)
			rr_log(LOG_ERR, "writing delayed data failed: %s", strerror(-ret));
		ret = rr_fs_commit(rfs, 1);
		if (ret)
			rr_log(LOG_ERR, "periodic commit failed: %s", strerror(-ret));
		pthread_mutex_lock(&rfs->commit_lock);
	}
	pthread_mutex_unlock(&rfs->commit_lock);
	return NULL;
}

void rr_fs_start_commit_thread(struct rr_fs *rfs)
{
	if (rfs->ro || !rfs->opts.commit_secs)
		return;
	if (pthread_create(&rfs->commit_thread, NULL, commit_main, rfs) == 0)
		rfs->commit_running = 1;
	else
		rr_log(LOG_ERR, "cannot start the commit thread: metadata reaches the image at fsync and unmount only");
}

int rr_fs_close(struct rr_fs *rfs)
{
	errcode_t err;
	int ret = 0;

	if (rfs->commit_running) {
		pthread_mutex_lock(&rfs->commit_lock);
		rfs->commit_stop = 1;
		pthread_cond_signal(&rfs->commit_cond);
		pthread_mutex_unlock(&rfs->commit_lock);
		pthread_join(rfs->commit_thread, NULL);
		rfs->commit_running = 0;
	}
	if (!rfs->fs)
		return 0;
	if (!rfs->ro && data_flush_all(rfs))
		rr_log(LOG_ERR, "unmount: delayed data could not be written: it is lost");
	rr_itab_destroy(rfs);
	free(rfs->delayed.inos);
	rfs->delayed.inos = NULL;
	if (rfs->mounted) {
		orphan_commit(rfs);
		/*
		 * Every file is closed and forgotten now: what is still listed
		 * (a truncate that failed, say with ENOSPC halfway) is finished
		 * here, as the mount would, so that a clean image has no orphans.
		 */
		if (orphans_pending(rfs->fs) || rfs->orphans.of_used) {
			rr_log(LOG_NOTICE, "unmount: finishing orphans left on the list");
			orphan_cleanup(rfs);
			orphan_commit(rfs);
		}
		/* A clean unmount: the state the image had when we mounted it, and any error since. */
		rr_error_commit(rfs);
		rfs->fs->super->s_state = rfs->orig_state;
		if (rfs->fs->super->s_last_orphan || rfs->orphans.of_used) {
			rr_log(LOG_WARNING, "orphans left on the list: leaving the image marked not clean; "
			       "the next mount or e2fsck finishes them");
			rfs->fs->super->s_state &= (__u16)~EXT2_VALID_FS;
		}
		rfs->fs->super->s_wtime = (__u32)time(NULL);
		ext2fs_mark_super_dirty(rfs->fs);
	}
	if (rfs->alloc)
		rr_alloc_detach(rfs->alloc);
	rfs->alloc = NULL;
	if (rfs->mounted) {
		err = ext2fs_flush2(rfs->fs, 0);
		if (err)
			ret = rr_err(err);
	}
	if (!rfs->mounted)
		rfs->fs->flags &= ~(EXT2_FLAG_DIRTY | EXT2_FLAG_BB_DIRTY | EXT2_FLAG_IB_DIRTY);
	err = ext2fs_close_free(&rfs->fs);
	if (err && !ret)
		ret = rr_err(err);
	orphan_destroy(rfs);
	rr_error_detach();
	return ret;
}

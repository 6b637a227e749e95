/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rrmap: what an allocator left on an ext4 image, read offline and
 * read-only through libext2fs.  One struct map_image per image: the scans
 * fill it (map_fs.c: geometry, free space, groups; map_files.c: files and
 * their extents), the outputs read it (map_out.c: text and JSON;
 * map_png.c: the picture).
 */
#ifndef RRMAP_H
#define RRMAP_H

#include <ext2fs/ext2fs.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define RRMAP_MAX_IMAGES 16	/* images side by side in one picture: more would not be readable */
#define MAP_HIST 64	/* free-extent buckets: bucket i holds extents of 2^i to 2^(i+1) - 1 blocks */

struct map_group {
	uint64_t first;		/* first block */
	uint64_t nblocks;	/* blocks in the group (the last may be short) */
	uint64_t used;		/* blocks the block bitmap marks in use (metadata included) */
	uint64_t data;		/* blocks of files, directories, symlinks: data, extent-tree and xattr
				 * blocks of the root directory and inodes from s_first_ino on */
	uint64_t free_extents;	/* free runs, cut at the group's edges */
	uint64_t largest_free;	/* longest of them, blocks */
	uint64_t dirs, files;	/* directory and regular-file inodes in the group's inode table
				 * (the root directory and inodes from s_first_ino on) */
	bool has_super;		/* holds the superblock or a backup */
	bool flex_leader;	/* first group of a flex group: holds its bitmaps and inode tables */
};

/* Per-file figures, summarised by rrmap.c. */
struct map_dist {
	uint64_t n;
	double mean;
	uint64_t p50, p99, max;	/* nearest rank */
	uint64_t over_one;	/* files with more than one */
};

struct map_image {
	const char *path;
	const char *label;	/* --label, or NULL */
	ext2_filsys fs;

	uint64_t blocks;	/* blocks in the filesystem */
	unsigned int blocksize;
	dgrp_t ngroups;
	unsigned int flex;	/* groups per flex group (1 without flex_bg) */
	struct map_group *groups;

	/* files (regular files from s_first_ino on) */
	uint64_t nfiles, ndirs, nsymlinks;
	uint32_t *extents;	/* leaf extents of each file, as debugfs "ex" lists them */
	uint32_t *frags;	/* physically discontiguous runs: filefrag's "N extents found" */
	uint64_t cap;
	struct map_dist ext_dist, frag_dist;

	/* free space, as e2freefrag sees it: runs are not cut at group edges */
	uint64_t free_blocks, free_extents, min_free, max_free;
	uint64_t hist_count[MAP_HIST], hist_blocks[MAP_HIST];

	/* groups */
	uint64_t touched;	/* groups with data > 0 */
	double used_mean, used_cv;	/* used blocks per group: mean, stddev / mean */
	double data_cv;		/* the same of data blocks */
};

/* One extent of --file, in the terms of filefrag -v. */
struct map_extent {
	uint64_t lblk, pblk, len;
	bool unwritten;
};

/* map_fs.c */
int mfs_open(struct map_image *m, const char *path);
/* The geometry and groups of fs, opened by the caller (mfs_open opens, then calls it). */
int mfs_init(struct map_image *m, ext2_filsys fs);
int mfs_scan_free(struct map_image *m);
void mfs_close(struct map_image *m);
void mfs_error(const struct map_image *m, errcode_t err, const char *what);

/* map_files.c */
int mfile_scan(struct map_image *m);
int mfile_extents(struct map_image *m, const char *path, struct map_extent **out, uint64_t *n,
		  uint64_t *size);
/* One more file with these leaf extents and fragments: 0, or -1 out of memory. */
int mfile_push(struct map_image *m, uint64_t extents, uint64_t frags);
/* d: mean, nearest-rank percentiles, max and count above one of v[0..n): 0, or -1 out of memory. */
int mfile_dist(struct map_dist *d, const uint32_t *v, uint64_t n);

/* map_out.c */
void mout_text(struct map_image *m, bool groups);
void mout_json(FILE *f, struct map_image *ms, int n, bool groups);
void mout_file_text(const struct map_image *m, const char *path, const struct map_extent *e,
		    uint64_t n, uint64_t size);
void mout_file_json(const struct map_image *m, const char *path, const struct map_extent *e,
		    uint64_t n, uint64_t size);
uint64_t mout_fragments(const struct map_extent *e, uint64_t n);

/* map_png.c */
int mpng_write(struct map_image *ms, int n, const char *out);

#endif

// SPDX-License-Identifier: GPL-2.0
/*
 * Inode placement as the kernel's ext4 makes it (find_group_orlov and
 * find_group_other in fs/ext4/ialloc.c), so that a tree written through
 * rrfuse has its inodes in the groups the kernel would have chosen.
 * libext2fs's ext2fs_new_inode takes the first free inode from the parent's
 * group on, which packs a whole tree into one flex group.
 *
 *  - A directory made in the root, or in a directory marked TOPDIR
 *    (chattr +T), is spread: from a flex group its name's hash decides, the
 *    one with the fewest directories among those with at least the average
 *    free inodes and free clusters.
 *  - Any other directory stays in its parent's flex group (or the one its
 *    parent's last new inode went to) unless that holds too many
 *    directories or too few free inodes or clusters; then the next that
 *    does not.
 *  - Any other inode goes to its parent's flex group; when that is full,
 *    the directory rule above picks another.
 *  - Within a flex group, inodes are packed at its first groups; within the
 *    group, the first free inode is taken (and the groups after it, if
 *    another took the last).
 *
 * The kernel reads the counts from counters it keeps in memory: per flex
 * group, exact, and here sums over the group descriptors, which hold the
 * same numbers; for the whole filesystem, per-CPU counters that lag (struct
 * ialloc_counts models them).  The kernel's in-memory i_last_alloc_group is
 * the caller's to keep (struct ialloc_parent.last).
 */
#include "ialloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Free inodes, free clusters and directories of some groups. */
struct counts {
	uint64_t free_inodes, free_clusters, used_dirs;
};

/* The filesystem in flex groups, and its totals when a rule needs them. */
struct geo {
	ext2_filsys fs;
	unsigned int log;	/* log2 of groups per flex group; 0: each group is its own */
	dgrp_t ngroups;
	dgrp_t nflex;
	struct counts total;
};

static dgrp_t group_of(ext2_filsys fs, ext2_ino_t ino)
{
	return (ino - 1) / EXT2_INODES_PER_GROUP(fs->super);
}

static void count_groups(ext2_filsys fs, uint64_t first, uint64_t end, struct counts *c)
{
	memset(c, 0, sizeof(*c));
	if (end > fs->group_desc_count)
		end = fs->group_desc_count;
	for (uint64_t g = first; g < end; g++) {
		c->free_inodes += ext2fs_bg_free_inodes_count(fs, (dgrp_t)g);
		c->free_clusters += ext2fs_bg_free_blocks_count(fs, (dgrp_t)g);
		c->used_dirs += ext2fs_bg_used_dirs_count(fs, (dgrp_t)g);
	}
}

static void geo_init(ext2_filsys fs, struct geo *o)
{
	unsigned int log = fs->super->s_log_groups_per_flex;

	/* The kernel ignores a flex size it would refuse, and one without flex_bg. */
	if (!ext2fs_has_feature_flex_bg(fs->super) || log < 1 || log > 31)
		log = 0;
	o->fs = fs;
	o->log = log;
	o->ngroups = fs->group_desc_count;
	o->nflex = (dgrp_t)(((uint64_t)o->ngroups + (1ULL << log) - 1) >> log);
	memset(&o->total, 0, sizeof(o->total));
}

static void flex_counts(const struct geo *o, dgrp_t flex, struct counts *c)
{
	count_groups(o->fs, (uint64_t)flex << o->log, ((uint64_t)flex + 1) << o->log, c);
}

static void counts_init(ext2_filsys fs, struct ialloc_counts *c)
{
	long ncpus = sysconf(_SC_NPROCESSORS_ONLN);
	struct counts t;

	count_groups(fs, 0, fs->group_desc_count, &t);
	/* The kernel's percpu_counter_batch: twice the CPUs, at least 32. */
	c->batch = ncpus > 16 ? 2 * ncpus : 32;
	c->free_inodes = (int64_t)t.free_inodes;
	c->dirs = (int64_t)t.used_dirs;
	c->free_clusters = (int64_t)t.free_clusters;
	c->inodes_pending = c->dirs_pending = 0;
	c->inited = 1;
}

static void pend(int64_t *shared, int64_t *pending, int64_t amount, int64_t batch)
{
	*pending += amount;
	if (*pending >= batch || -*pending >= batch) {
		*shared += *pending;
		*pending = 0;
	}
}

void ialloc_counts_change(ext2_filsys fs, struct ialloc_counts *c, int inodes, int dirs)
{
	if (!c->inited)
		counts_init(fs, c);
	if (inodes)
		pend(&c->free_inodes, &c->inodes_pending, inodes, c->batch);
	if (dirs)
		pend(&c->dirs, &c->dirs_pending, dirs, c->batch);
}

static uint64_t positive(int64_t v)
{
	return v > 0 ? (uint64_t)v : 0;
}

/* The whole-fs totals t (exact) as the kernel would read them. */
static void as_kernel_reads(ext2_filsys fs, struct ialloc_counts *c, struct counts *t)
{
	int64_t drift;

	if (!c)
		return;
	if (!c->inited)
		counts_init(fs, c);
	drift = (int64_t)t->free_clusters - c->free_clusters;
	if (drift >= c->batch || -drift >= c->batch)
		c->free_clusters = (int64_t)t->free_clusters;
	t->free_inodes = positive(c->free_inodes);
	t->used_dirs = positive(c->dirs);
	t->free_clusters = positive(c->free_clusters);
}

/* Inodes are packed at the start of a flex group's inode tables, as its blocks are. */
static int first_with_inodes(const struct geo *o, dgrp_t flex, dgrp_t *group)
{
	uint64_t g = (uint64_t)flex << o->log, end = g + (1ULL << o->log);

	for (; g < end && g < o->ngroups; g++)
		if (ext2fs_bg_free_inodes_count(o->fs, (dgrp_t)g)) {
			*group = (dgrp_t)g;
			return 0;
		}
	return -1;
}

/*
 * Where a top-level directory's search starts: the kernel hashes the name
 * with half-MD4 and the image's seed whatever the image's own hash version,
 * so that the same tree lands in the same flex groups on every image.
 */
static dgrp_t name_start(const struct geo *o, const char *name)
{
	ext2_dirhash_t hash, minor;

	if (name && !ext2fs_dirhash2(EXT2_HASH_HALF_MD4, name, (int)strlen(name), NULL, 0, o->fs->super->s_hash_seed,
				     &hash, &minor))
		return hash % o->nflex;
	return (dgrp_t)((uint32_t)random() % o->nflex);
}

/* At least the average free inodes and clusters, and the fewest directories; ties to the first. */
static int orlov_top(const struct geo *o, const char *name, dgrp_t *flex)
{
	uint64_t avefreei = o->total.free_inodes / o->nflex;
	uint64_t avefreec = o->total.free_clusters / o->nflex;
	uint64_t best = EXT2_INODES_PER_GROUP(o->fs->super);
	dgrp_t start = name_start(o, name);
	int ret = -1;

	for (dgrp_t i = 0; i < o->nflex; i++) {
		dgrp_t f = (dgrp_t)(((uint64_t)start + i) % o->nflex);
		struct counts c;

		flex_counts(o, f, &c);
		if (!c.free_inodes || c.used_dirs >= best || c.free_inodes < avefreei ||
		    c.free_clusters < avefreec)
			continue;
		*flex = f;
		best = c.used_dirs;
		ret = 0;
	}
	return ret;
}

/*
 * The first flex group from the parent's that is not crowded: under the
 * average directories plus a sixteenth of its inodes, and no more than a
 * quarter of a flex group's inodes and clusters short of the averages.
 */
static int orlov_near(const struct geo *o, const struct ialloc_parent *p, dgrp_t *flex)
{
	const struct ext2_super_block *sb = o->fs->super;
	uint64_t flex_size = 1ULL << o->log;
	uint64_t avefreei = o->total.free_inodes / o->nflex;
	uint64_t avefreec = o->total.free_clusters / o->nflex;
	uint64_t max_dirs = o->total.used_dirs / o->nflex + EXT2_INODES_PER_GROUP(sb) * flex_size / 16;
	int64_t min_inodes = (int64_t)avefreei - (int64_t)(EXT2_INODES_PER_GROUP(sb) * flex_size / 4);
	int64_t min_clusters = (int64_t)avefreec - (int64_t)(EXT2_CLUSTERS_PER_GROUP(sb) * flex_size / 4);
	/* The kernel starts where this directory's last new inode went. */
	dgrp_t start = p->last < o->ngroups ? p->last : group_of(o->fs, p->ino);

	if (min_inodes < 1)
		min_inodes = 1;
	if (min_clusters < 0)
		min_clusters = 0;
	start >>= o->log;
	for (dgrp_t i = 0; i < o->nflex; i++) {
		dgrp_t f = (dgrp_t)(((uint64_t)start + i) % o->nflex);
		struct counts c;

		flex_counts(o, f, &c);
		if (c.used_dirs >= max_dirs || c.free_inodes < (uint64_t)min_inodes ||
		    c.free_clusters < (uint64_t)min_clusters)
			continue;
		*flex = f;
		return 0;
	}
	return -1;
}

/* No flex group suits: the first group from the parent's with the average free inodes, else any. */
static int orlov_fallback(const struct geo *o, const struct ialloc_parent *p, dgrp_t *group)
{
	dgrp_t start = group_of(o->fs, p->ino);
	uint64_t avefreei = o->total.free_inodes / o->ngroups;

	for (;;) {
		for (dgrp_t i = 0; i < o->ngroups; i++) {
			dgrp_t g = (dgrp_t)(((uint64_t)start + i) % o->ngroups);
			__u32 n = ext2fs_bg_free_inodes_count(o->fs, g);

			if (n && n >= avefreei) {
				*group = g;
				return 0;
			}
		}
		if (!avefreei)
			return -1;
		avefreei = 0;
	}
}

static int find_group_orlov(ext2_filsys fs, struct ialloc_counts *cnt, const struct ialloc_parent *p,
			    int mode, const char *name, dgrp_t *group)
{
	int top = S_ISDIR(mode) && (p->ino == EXT2_ROOT_INO || (p->flags & EXT2_TOPDIR_FL));
	struct geo o;
	dgrp_t flex;
	int ret;

	geo_init(fs, &o);
	count_groups(fs, 0, o.ngroups, &o.total);
	as_kernel_reads(fs, cnt, &o.total);
	ret = top ? orlov_top(&o, name, &flex) : orlov_near(&o, p, &flex);
	if (!ret && !first_with_inodes(&o, flex, group))
		return 0;
	return orlov_fallback(&o, p, group);
}

static int has_room(ext2_filsys fs, dgrp_t g)
{
	return ext2fs_bg_free_inodes_count(fs, g) && ext2fs_bg_free_blocks_count(fs, g);
}

/*
 * Without flex groups: the parent's group if it has room; else a quadratic
 * probe from a start moved by the parent's number, so that the files of one
 * directory stay together but those of directories sharing a group do not;
 * else the first group with a free inode at all.
 */
static int other_no_flex(ext2_filsys fs, const struct ialloc_parent *p, dgrp_t *group)
{
	dgrp_t n = fs->group_desc_count, parent = group_of(fs, p->ino), g;

	if (has_room(fs, parent)) {
		*group = parent;
		return 0;
	}
	g = (dgrp_t)(((uint64_t)parent + p->ino) % n);
	for (uint64_t i = 1; i < n; i <<= 1) {
		g = (dgrp_t)((g + i) % n);
		if (has_room(fs, g)) {
			*group = g;
			return 0;
		}
	}
	for (dgrp_t i = 0; i < n; i++) {
		g = (dgrp_t)(((uint64_t)parent + 1 + i) % n);
		if (ext2fs_bg_free_inodes_count(fs, g)) {
			*group = g;
			return 0;
		}
	}
	return -1;
}

static int find_group_other(ext2_filsys fs, struct ialloc_counts *cnt, const struct ialloc_parent *p,
			    int mode, dgrp_t *group)
{
	struct geo o;

	geo_init(fs, &o);
	if (!o.log)
		return other_no_flex(fs, p, group);
	if (!first_with_inodes(&o, group_of(fs, p->ino) >> o.log, group))
		return 0;
	if (p->last < o.ngroups && !first_with_inodes(&o, p->last >> o.log, group))
		return 0;
	/* The parent's flex group is full: the directory rule finds another (not the top-level one: mode is no directory's). */
	return find_group_orlov(fs, cnt, p, mode, NULL, group);
}

int ialloc_find_group(ext2_filsys fs, struct ialloc_counts *c, const struct ialloc_parent *p, int mode,
		      const char *name, dgrp_t *group)
{
	if (!fs->group_desc_count)
		return -1;
	if (S_ISDIR(mode))
		return find_group_orlov(fs, c, p, mode, name, group);
	return find_group_other(fs, c, p, mode, group);
}

/*
 * Without a journal, the kernel passes over an inode freed less than a
 * minute ago (360 s while its table block is dirty, none once the block
 * has left its cache), so that the inode's freed state reaches the disk
 * before it is used again: a crash then never finds an old and a new use
 * of one inode.  There is no cache state to ask here: a minute for every
 * inode.  Only a preference: when
 * every free inode of the group is that recent, the kernel takes the last
 * one it saw.  The kernel has no bound; this scan stops after RECENT_SCAN
 * recent inodes, so that recreating a large deleted tree stays linear.
 */
#define RECENT_SECONDS 60
#define RECENT_SCAN 256

static int recently_freed(ext2_filsys fs, ext2_ino_t ino, __u32 now)
{
	ext2_ino_t ipg = EXT2_INODES_PER_GROUP(fs->super);
	dgrp_t g = group_of(fs, ino);
	struct ext2_inode in;

	/* Past the group's high-water mark no inode was ever used: nothing to read. */
	if (ext2fs_has_group_desc_csum(fs) &&
	    (ino - 1) % ipg >= ipg - ext2fs_bg_itable_unused(fs, g))
		return 0;
	/* Unchecked: a bad checksum makes libext2fs 1.47 cache the bad copy under another number. */
	if (ext2fs_read_inode2(fs, ino, &in, sizeof(in), READ_INODE_NOCSUM) || !in.i_dtime)
		return 0;
	return (__s32)(in.i_dtime - now) < 0 && (__s32)(now - (in.i_dtime + RECENT_SECONDS)) < 0;
}

static ext2_ino_t skip_recent(ext2_filsys fs, ext2_ino_t ino)
{
	ext2_ino_t ipg = EXT2_INODES_PER_GROUP(fs->super);
	ext2_ino_t last = (group_of(fs, ino) + 1) * ipg;
	__u32 now = (__u32)time(NULL);
	ext2_ino_t next;

	for (int n = 0; n < RECENT_SCAN && recently_freed(fs, ino, now); n++) {
		if (ino == last || ext2fs_find_first_zero_inode_bitmap2(fs->inode_map, ino + 1, last, &next))
			break;
		ino = next;
	}
	return ino;
}

errcode_t ialloc_new(ext2_filsys fs, struct ialloc_counts *c, const struct ialloc_parent *p, int mode,
		     const char *name, ext2_ino_t *ino, dgrp_t *group)
{
	ext2_ino_t ipg = EXT2_INODES_PER_GROUP(fs->super);
	errcode_t err;
	dgrp_t g;

	/* No group with a free inode: from the parent's, where libext2fs will say so. */
	if (ialloc_find_group(fs, c, p, mode, name, &g))
		g = group_of(fs, p->ino);
	*group = g;
	/*
	 * libext2fs's search from the group's first inode: the kernel's
	 * first free bit, on to the next groups, and the same descriptor
	 * updates for a group whose inode table was never initialised.
	 */
	err = ext2fs_new_inode(fs, g * ipg + 1, mode, NULL, ino);
	if (!err && !ext2fs_has_feature_journal(fs->super))
		*ino = skip_recent(fs, *ino);
	return err;
}

// SPDX-License-Identifier: GPL-2.0
/*
 * rrmap's reports: text for people, JSON (the same figures) for scripts,
 * and one file's extents in filefrag -v's layout.
 */
#include "rrmap.h"

#include <inttypes.h>
#include <stdio.h>

static double mout_pct(uint64_t a, uint64_t b)
{
	return b ? 100.0 * a / b : 0;
}

/*
 * A bucket's edges as e2freefrag labels them: both in the unit of the lower
 * edge ("512K...1024K-", then "1M...2M-").
 */
static void mout_bucket(char *buf, size_t len, uint64_t lo)
{
	static const char units[] = "KMGTPE";
	int u = 0;
	uint64_t l = lo >> 10;

	while (l >= 1024 && units[u + 1]) {
		l >>= 10;
		u++;
	}
	snprintf(buf, len, "%5" PRIu64 "%c...%5" PRIu64 "%c-", l, units[u], 2 * l, units[u]);
}

static void mout_dist_text(const char *what, const struct map_dist *d)
{
	printf("%s: mean %.2f, p50 %" PRIu64 ", p99 %" PRIu64 ", max %" PRIu64
	       "; files with more than one: %" PRIu64 " (%.1f %%)\n",
	       what, d->mean, d->p50, d->p99, d->max, d->over_one, mout_pct(d->over_one, d->n));
}

void mout_text(struct map_image *m, bool groups)
{
	uint64_t bpg = EXT2_BLOCKS_PER_GROUP(m->fs->super);
	int i;

	printf("rrmap: %s%s%s%s\n", m->path, m->label ? " (" : "", m->label ? m->label : "",
	       m->label ? ")" : "");
	printf("filesystem: %" PRIu64 " blocks of %u bytes, %u groups of %" PRIu64 " blocks, %u groups per flex group\n",
	       m->blocks, m->blocksize, m->ngroups, bpg, m->flex);
	printf("files: %" PRIu64 " regular, %" PRIu64 " directories, %" PRIu64 " symlinks\n", m->nfiles,
	       m->ndirs, m->nsymlinks);
	mout_dist_text("extents per file", &m->ext_dist);
	mout_dist_text("fragments per file (filefrag's count)", &m->frag_dist);

	printf("\nfree space: %" PRIu64 " blocks (%.1f %%) in %" PRIu64 " free extents\n", m->free_blocks,
	       mout_pct(m->free_blocks, m->blocks), m->free_extents);
	/* e2freefrag's lines, its rounding too (average in whole blocks, then KB) */
	printf("Min. free extent: %" PRIu64 " KB \nMax. free extent: %" PRIu64 " KB\nAvg. free extent: %" PRIu64
	       " KB\nNum. free extent: %" PRIu64 "\n\n",
	       m->min_free * m->blocksize >> 10, m->max_free * m->blocksize >> 10,
	       m->free_extents ? m->free_blocks / m->free_extents * m->blocksize >> 10 : 0, m->free_extents);
	printf("HISTOGRAM OF FREE EXTENT SIZES:\n");
	printf("%s :  %12s  %12s  %s\n", "Extent Size Range", "Free extents", "Free Blocks", "Percent");
	for (i = 0; i < MAP_HIST; i++) {
		char range[48];

		if (!m->hist_count[i])
			continue;
		mout_bucket(range, sizeof(range), (uint64_t)m->blocksize << i);
		printf("%s  :  %12" PRIu64 "  %12" PRIu64 "  %6.2f%%\n", range, m->hist_count[i],
		       m->hist_blocks[i], mout_pct(m->hist_blocks[i], m->free_blocks));
	}

	printf("\ngroups: %u; touched (holding file, directory or symlink blocks): %" PRIu64 " (%.1f %%)\n",
	       m->ngroups, m->touched, mout_pct(m->touched, m->ngroups));
	printf("used blocks per group: mean %.1f, cv %.3f; data blocks per group: cv %.3f\n", m->used_mean,
	       m->used_cv, m->data_cv);
	if (!groups)
		return;
	printf("\n%8s %14s %9s %9s %9s %9s %9s %7s %7s  %s\n", "group", "first block", "blocks", "used", "data",
	       "free ext", "largest", "dirs", "files", "flags");
	for (dgrp_t g = 0; g < m->ngroups; g++) {
		struct map_group *x = &m->groups[g];

		printf("%8u %14" PRIu64 " %9" PRIu64 " %9" PRIu64 " %9" PRIu64 " %9" PRIu64 " %9" PRIu64 " %7" PRIu64
		       " %7" PRIu64 "  %s%s\n",
		       g, x->first, x->nblocks, x->used, x->data, x->free_extents, x->largest_free, x->dirs,
		       x->files, x->has_super ? "S" : "", x->flex_leader ? "F" : "");
	}
}

static void mout_json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = *s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void mout_dist_json(FILE *f, const char *key, const struct map_dist *d)
{
	fprintf(f, "  \"%s\": {\"mean\": %.4f, \"p50\": %" PRIu64 ", \"p99\": %" PRIu64 ", \"max\": %" PRIu64
	       ", \"more_than_one\": %" PRIu64 ", \"share_more_than_one\": %.4f},\n",
	       key, d->mean, d->p50, d->p99, d->max, d->over_one, d->n ? (double)d->over_one / d->n : 0);
}

static void mout_json_one(FILE *f, struct map_image *m, bool groups)
{
	int i;
	bool sep = false;

	fprintf(f, "{\n  \"image\": ");
	mout_json_str(f, m->path);
	fprintf(f, ", \"label\": ");
	if (m->label)
		mout_json_str(f, m->label);
	else
		fprintf(f, "null");
	fprintf(f, ",\n  \"blocks\": %" PRIu64 ", \"block_size\": %u, \"groups\": %u, \"blocks_per_group\": %u"
	       ", \"groups_per_flex\": %u,\n",
	       m->blocks, m->blocksize, m->ngroups, EXT2_BLOCKS_PER_GROUP(m->fs->super), m->flex);
	fprintf(f, "  \"files\": %" PRIu64 ", \"directories\": %" PRIu64 ", \"symlinks\": %" PRIu64 ",\n",
	       m->nfiles, m->ndirs, m->nsymlinks);
	mout_dist_json(f, "extents_per_file", &m->ext_dist);
	mout_dist_json(f, "fragments_per_file", &m->frag_dist);
	fprintf(f, "  \"free_blocks\": %" PRIu64 ", \"free_extents\": %" PRIu64 ", \"min_free_extent\": %" PRIu64
	       ", \"max_free_extent\": %" PRIu64 ",\n",
	       m->free_blocks, m->free_extents, m->min_free, m->max_free);
	fprintf(f, "  \"free_histogram\": [");
	for (i = 0; i < MAP_HIST; i++) {
		if (!m->hist_count[i])
			continue;
		fprintf(f, "%s\n    {\"min_blocks\": %" PRIu64 ", \"max_blocks\": %" PRIu64 ", \"extents\": %" PRIu64
		       ", \"blocks\": %" PRIu64 "}",
		       sep ? "," : "", (uint64_t)1 << i, ((uint64_t)1 << (i + 1)) - 1, m->hist_count[i],
		       m->hist_blocks[i]);
		sep = true;
	}
	fprintf(f, "\n  ],\n");
	fprintf(f, "  \"groups_touched\": %" PRIu64 ", \"share_groups_touched\": %.4f, \"used_per_group_mean\": %.4f"
	       ", \"used_per_group_cv\": %.4f, \"data_per_group_cv\": %.4f",
	       m->touched, m->ngroups ? (double)m->touched / m->ngroups : 0, m->used_mean, m->used_cv,
	       m->data_cv);
	if (groups) {
		fprintf(f, ",\n  \"group_table\": [");
		for (dgrp_t g = 0; g < m->ngroups; g++) {
			struct map_group *x = &m->groups[g];

			fprintf(f, "%s\n    {\"group\": %u, \"first\": %" PRIu64 ", \"blocks\": %" PRIu64
			       ", \"used\": %" PRIu64 ", \"data\": %" PRIu64 ", \"free_extents\": %" PRIu64
			       ", \"largest_free\": %" PRIu64 ", \"dirs\": %" PRIu64 ", \"files\": %" PRIu64
			       ", \"superblock\": %s, \"flex_leader\": %s}",
			       g ? "," : "", g, x->first, x->nblocks, x->used, x->data, x->free_extents,
			       x->largest_free, x->dirs, x->files, x->has_super ? "true" : "false", x->flex_leader ? "true" : "false");
		}
		fprintf(f, "\n  ]");
	}
	fprintf(f, "\n}");
}

void mout_json(FILE *f, struct map_image *ms, int n, bool groups)
{
	if (n > 1)
		fprintf(f, "[\n");
	for (int i = 0; i < n; i++) {
		mout_json_one(f, &ms[i], groups);
		fputs(i + 1 < n ? ",\n" : "\n", f);
	}
	if (n > 1)
		fprintf(f, "]\n");
}

/* Where extent i would start if it followed extent i - 1 on disk, holes included (filefrag's "expected"). */
static uint64_t mout_expected(const struct map_extent *e, uint64_t i)
{
	return e[i - 1].pblk + (e[i].lblk - e[i - 1].lblk);
}

/* Extent i starts a new fragment: it follows extent i - 1 neither right after it nor across the hole. */
static bool mout_new_fragment(const struct map_extent *e, uint64_t i)
{
	return !i || (e[i].pblk != e[i - 1].pblk + e[i - 1].len && e[i].pblk != mout_expected(e, i));
}

uint64_t mout_fragments(const struct map_extent *e, uint64_t n)
{
	uint64_t f = 0;

	for (uint64_t i = 0; i < n; i++)
		f += mout_new_fragment(e, i);
	return f;
}

/*
 * filefrag -v's flags, in its order and with its punctuation: the flags
 * joined by commas, then ",eof" on the extent that reaches the file's size
 * (so an extent with no other flag shows ",eof", as filefrag prints it).
 */
static const char *mout_flags(const struct map_extent *e, uint64_t i, uint64_t n, uint64_t size,
			      unsigned int bs, char *buf, size_t len)
{
	bool last = i + 1 == n, eof = (e[i].lblk + e[i].len) * bs >= size;

	snprintf(buf, len, "%s%s%s%s", last ? "last" : "", last && e[i].unwritten ? "," : "",
		 e[i].unwritten ? "unwritten" : "", eof ? ",eof" : "");
	return buf;
}

void mout_file_text(const struct map_image *m, const char *path, const struct map_extent *e, uint64_t n,
		    uint64_t size)
{
	uint64_t nf = mout_fragments(e, n);

	printf("File size of %s is %" PRIu64 " (%" PRIu64 " blocks of %u bytes)\n", path, size,
	       (size + m->blocksize - 1) / m->blocksize, m->blocksize);
	printf(" ext:     logical_offset:        physical_offset: length:   expected: flags:\n");
	for (uint64_t i = 0; i < n; i++) {
		char exp[24] = "", flags[48];

		if (i && mout_new_fragment(e, i))
			snprintf(exp, sizeof(exp), "%" PRIu64 ":", mout_expected(e, i));
		printf("%4" PRIu64 ": %8" PRIu64 "..%8" PRIu64 ": %10" PRIu64 "..%10" PRIu64 ": %6" PRIu64
		       ": %11s %s\n",
		       i, e[i].lblk, e[i].lblk + e[i].len - 1, e[i].pblk, e[i].pblk + e[i].len - 1, e[i].len, exp,
		       mout_flags(e, i, n, size, m->blocksize, flags, sizeof(flags)));
	}
	printf("%s: %" PRIu64 " extent%s found\n", path, nf, nf == 1 ? "" : "s");
}

void mout_file_json(const struct map_image *m, const char *path, const struct map_extent *e, uint64_t n,
		    uint64_t size)
{
	printf("{\n  \"image\": ");
	mout_json_str(stdout, m->path);
	printf(", \"file\": ");
	mout_json_str(stdout, path);
	printf(",\n  \"size\": %" PRIu64 ", \"block_size\": %u, \"extents\": %" PRIu64 ", \"fragments\": %" PRIu64
	       ",\n  \"extent_list\": [",
	       size, m->blocksize, n, mout_fragments(e, n));
	for (uint64_t i = 0; i < n; i++)
		printf("%s\n    {\"logical\": %" PRIu64 ", \"physical\": %" PRIu64 ", \"length\": %" PRIu64
		       ", \"unwritten\": %s}",
		       i ? "," : "", e[i].lblk, e[i].pblk, e[i].len, e[i].unwritten ? "true" : "false");
	printf("\n  ]\n}\n");
}

// SPDX-License-Identifier: GPL-2.0
/*
 * rrmap: what the allocator did, read offline from an ext4 image or device.
 *
 *   rrmap IMAGE|DEVICE [IMAGE2 ...] [--groups] [--json] [--png OUT.png]
 *         [--label TEXT ...]
 *   rrmap IMAGE --file PATH [--json]
 *
 * Files and their extents, free-space fragmentation (e2freefrag's buckets),
 * and per block group the used blocks, free extents and largest free
 * extent; the share of groups touched and how evenly the groups are used.
 * --png draws one cell per group (or per run of groups on big devices),
 * the images side by side.  Read-only: nothing is ever written to an image.
 *
 * Exit status: 0, 1 if an image cannot be read or is corrupt, 2 for a usage
 * error.
 */
#include "rrmap.h"
#include "tool.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
	fprintf(f, "usage: rrmap IMAGE|DEVICE [IMAGE2 ...] [--groups] [--json] [--png OUT.png]\n"
		   "             [--label TEXT ...]\n"
		   "       rrmap IMAGE|DEVICE --file PATH [--json]\n\n"
		   "What the block allocator left on an ext4 filesystem, read-only.\n\n"
		   "    --groups       a line per block group: used blocks, blocks of files, free\n"
		   "                   extents, largest free extent\n"
		   "    --json         the same figures as JSON (an array for several images)\n"
		   "    --png OUT.png  a map of the groups, coloured by used fraction; several images\n"
		   "                   side by side\n"
		   "    --label TEXT   names the images in order (e.g. the policy), in reports and title\n"
		   "    --file PATH    that file's extents, as filefrag -v shows them\n"
		   "    -h, --help     this help\n"
		   "    -V, --version\n");
}

static int rrmap_scan(struct map_image *m)
{
	if (mfile_scan(m) || mfs_scan_free(m))
		return -1;
	if (mfile_dist(&m->ext_dist, m->extents, m->nfiles) || mfile_dist(&m->frag_dist, m->frags, m->nfiles)) {
		fprintf(stderr, "rrmap: out of memory\n");
		return -1;
	}
	return 0;
}

static int rrmap_file(struct map_image *m, const char *path, bool json)
{
	struct map_extent *e;
	uint64_t n, size;

	if (mfile_extents(m, path, &e, &n, &size))
		return -1;
	if (json)
		mout_file_json(m, path, e, n, size);
	else
		mout_file_text(m, path, e, n, size);
	free(e);
	return 0;
}

int main(int argc, char **argv)
{
	int groups = 0, json = 0; /* flags getopt_long sets itself (it returns 0 for them) */
	const struct option opts[] = {
		{ "groups", no_argument, &groups, 1 },
		{ "json", no_argument, &json, 1 },
		{ "png", required_argument, NULL, 'p' },
		{ "label", required_argument, NULL, 'l' },
		{ "file", required_argument, NULL, 'f' },
		TOOL_OPTIONS_END
	};
	struct map_image ms[RRMAP_MAX_IMAGES];
	const char *labels[RRMAP_MAX_IMAGES], *png = NULL, *file = NULL;
	int nlabels = 0, n, i, c, ret = 1;

	while ((c = getopt_long(argc, argv, "hV", opts, NULL)) != -1) {
		switch (c) {
		case 0: break;
		case 'p': png = optarg; break;
		case 'f': file = optarg; break;
		case 'l':
			if (nlabels == RRMAP_MAX_IMAGES) {
				fprintf(stderr, "rrmap: at most %d labels\n", RRMAP_MAX_IMAGES);
				return 2;
			}
			labels[nlabels++] = optarg;
			break;
		default: return tool_answer(c, "rrmap", usage);
		}
	}
	n = argc - optind;
	if (n < 1 || n > RRMAP_MAX_IMAGES || nlabels > n || (file && (n > 1 || png || groups))) {
		usage(stderr);
		return 2;
	}
	memset(ms, 0, sizeof(ms));
	for (i = 0; i < n; i++) {
		ms[i].label = i < nlabels ? labels[i] : NULL;
		if (mfs_open(&ms[i], argv[optind + i]))
			goto out;
		if (file) {
			ret = rrmap_file(&ms[i], file, json) ? 1 : 0;
			goto out;
		}
		if (rrmap_scan(&ms[i]))
			goto out;
	}
	if (png && mpng_write(ms, n, png))
		goto out;
	if (json) {
		mout_json(stdout, ms, n, groups);
	} else {
		for (i = 0; i < n; i++) {
			if (i)
				printf("\n");
			mout_text(&ms[i], groups);
		}
	}
	ret = fflush(stdout) ? 1 : 0;
out:
	for (i = 0; i < n; i++)
		mfs_close(&ms[i]);
	return ret;
}

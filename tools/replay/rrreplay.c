// SPDX-License-Identifier: GPL-2.0
/*
 * rrreplay: an allocation trace (the kernel's ext4 tracepoints as tracefs
 * prints them, or rrfuse's -o alloc_trace, which prints the same) replayed
 * through the allocator engine and a policy of choice, without FUSE.
 *
 *   rrreplay [-o allocator=NAME,max_prealloc_kb=KB,...] [-t OUT] [-d M,N] TRACE IMAGE
 *
 * The image is the starting point (the one the trace began on, or a fresh
 * mke2fs of the same geometry); it is opened read-only and never written:
 * the replay lives in memory.  Each ext4_request_blocks is asked again, its
 * answer compared with the trace's own (the ext4_mballoc_alloc or
 * ext4_mballoc_prealloc line of the same inode that follows it); each
 * ext4_free_blocks frees what the replay gave for those blocks.
 *
 * Block numbers in the trace are the trace's placements; the replay places
 * elsewhere once it disagrees.  So trace blocks are translated: a map from
 * the blocks the trace handed out to the replay's blocks for the same file
 * and logical blocks (runs of them, runmap.h) carries goals, neighbours
 * (pleft, pright) and frees over.  A trace block the map does not know was in use before the trace
 * began, and is the same block in the replay (it is freed only if the
 * replay has not given it to something else).  A request the replay
 * answers shorter than the trace did is asked again for the rest, one
 * answered longer gives the excess back, so that both sides hold the same
 * logical blocks afterwards.  ext4_discard_preallocations drops the
 * file's preallocations, as at its last close (enable that event too when
 * capturing the kernel's).
 *
 * A freed block is free for data again once the transaction that freed it
 * has committed (data=ordered: ext4_free_blocks hands data blocks to the
 * commit's callback too).  When the trace holds jbd2's jbd2_start_commit
 * and jbd2_end_commit lines, frees wait for them as in rrfuse's daemon
 * (the engine's rr_alloc_commit_begin and _end, which also write those
 * lines into the replay's own trace): those before a commit starts are
 * given back when it ends, the others with the next.  Without them a free
 * is free at once, and a workload that reuses space between commits
 * (aging: deletes, then writes within the commit interval) gets back
 * blocks the kernel could not use yet.  Not in the trace, so not
 * replayed: i_size (taken as the end of the file's furthest request) and
 * delayed-allocation reservations.
 *
 * -m FILE writes the layout the replay leaves, as rrmap --groups --json
 * prints an image's (rrmap's own code: the same figures): free space from
 * the engine's block bitmap once the preallocations are dropped and the
 * frees committed, and each file's extents from the blocks the replay
 * gave the trace's data requests (a block's owner: inode and logical
 * block), cut where logical or physical order breaks and at ext4's 32768
 * blocks an extent.  "Groups touched" counts the groups holding blocks of
 * the trace's requests, data and metadata (extent trees, directories),
 * and the starting image's files as they were (its inode table is the
 * replay's: a file the trace extends or deletes is counted twice).
 */
#include "rrfuse/alloc.h"
#include "rrmap.h"
#include "runmap.h"
#include "tool.h"

#include <errno.h>
#include <ext2fs/ext3_extents.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NO_VAL UINT64_MAX

/*
 * Open-addressed map of uint64 keys (stored + 1, 0 = empty); a value NO_VAL
 * is a deleted key.  The replay's files' sizes, by inode number (blocks are
 * in run maps: runmap.h).
 */
struct umap {
	uint64_t *k, *v;
	size_t cap, n;
};

static int umap_grow(struct umap *m);

/*
 * 32 consecutive keys share a stretch of 32 slots, stretches scattered by a
 * hash: the inode numbers of a directory's files, which follow each other,
 * touch a few cache lines.
 */
static size_t umap_slot(const struct umap *m, uint64_t key)
{
	uint64_t h = ((key + 1) >> 5) * 0x9E3779B97F4A7C15ull;
	size_t i = (size_t)(((h >> 32) << 5) | ((key + 1) & 31)) & (m->cap - 1);

	while (m->k[i] && m->k[i] != key + 1)
		i = (i + 1) & (m->cap - 1);
	return i;
}

static int umap_put(struct umap *m, uint64_t key, uint64_t val)
{
	size_t i;

	if ((m->n + 1) * 2 > m->cap && umap_grow(m))
		return -1;
	i = umap_slot(m, key);
	if (!m->k[i]) {
		m->k[i] = key + 1;
		m->n++;
	}
	m->v[i] = val;
	return 0;
}

static uint64_t umap_get(const struct umap *m, uint64_t key)
{
	size_t i;

	if (!m->cap)
		return NO_VAL;
	i = umap_slot(m, key);
	return m->k[i] ? m->v[i] : NO_VAL;
}

static void umap_free(struct umap *m)
{
	free(m->k);
	free(m->v);
	*m = (struct umap){ 0 };
}

static int umap_grow(struct umap *m)
{
	struct umap g = { .cap = m->cap ? m->cap * 2 : 1024 };
	size_t i;

	g.k = calloc(g.cap, sizeof(*g.k));
	g.v = calloc(g.cap, sizeof(*g.v));
	if (!g.k || !g.v) {
		free(g.k);
		free(g.v);
		return -1;
	}
	for (i = 0; i < m->cap; i++)
		if (m->k[i] && m->v[i] != NO_VAL)
			umap_put(&g, m->k[i] - 1, m->v[i]);
	free(m->k);
	free(m->v);
	*m = g;
	return 0;
}

/* One event of the trace, as the replay needs it. */
enum ev_kind { EV_REQUEST, EV_ANSWER, EV_FREE, EV_DISCARD, EV_COMMIT_START, EV_COMMIT_END };

struct ev {
	enum ev_kind kind;
	int meta;		/* request: not file data (no HINT_DATA) */
	int closed;		/* request: its answer says HINT_NOPREALLOC (link_answers); answer: says it */
	uint64_t wend;		/* request: where its answer's window ends, an open file's (0: none) */
	uint32_t wlen;		/* request: that window's length */
	int cpu;		/* the CPU the trace names */
	uint32_t ino, len;
	uint64_t lblk, goal, lleft, lright, pleft, pright;	/* request; free: goal = block */
	uint32_t group;		/* answer: the request's own blocks, as ext4trace.placed() */
	int32_t start;
};

struct replay {
	struct rr_alloc *a;
	ext2_filsys fs;
	uint32_t first, bpg, bsize;
	struct runmap fwd, rev;	/* trace blocks -> replay blocks; the reverse */
	struct umap isize;	/* ino -> the end of its furthest request */
	int nomem;		/* a map could not grow: the figures are not to be trusted */
	struct {
		uint32_t ino, len;
		uint64_t lblk;
		int meta;
		struct rr_extent got;
	} pend[64];		/* requests waiting for the trace's answer */
	unsigned int npend;
	int layout;		/* -m: keep own */
	struct runmap own;	/* replay blocks -> inode << 32 | logical block of files' data, or OWN_META */
	int commits;		/* the trace has jbd2's commit lines: frees wait for them */
	uint64_t reqs, answered, same_start, same_group, same_len, failed;
};

/* The number after " key " in a line, or 0. */
static uint64_t num_after(const char *s, const char *key)
{
	const char *p = strstr(s, key);

	return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

/*
 * An open file's window, as the answer's normalised goal gives it (none
 * for a closed or a small file's): the replay's clue to the file's size,
 * which no trace line has (do_request).
 */
static void stream_window(const char *s, struct ev *e)
{
	const char *g = strstr(s, " goal ");
	unsigned int gl, glb;
	int gg, gs;

	if (strstr(s, "STREAM_ALLOC") && g && sscanf(g, " goal %d/%d/%u@%u", &gg, &gs, &gl, &glb) == 4) {
		e->wend = (uint64_t)glb + gl;
		e->wlen = gl;
	}
}

/* The request's own part of an answer line's result: ext4trace.placed() in C. */
static int parse_answer(const char *s, int prealloc, struct ev *e)
{
	unsigned int og, ol, olb, rg, rl, rlb;
	int os, rs;
	const char *o = strstr(s, " orig "), *r = strstr(s, " result ");
	uint64_t lo, hi;

	if (!o || !r || sscanf(o, " orig %u/%d/%u@%u", &og, &os, &ol, &olb) != 4 ||
	    sscanf(r, " result %u/%d/%u@%u", &rg, &rs, &rl, &rlb) != 4)
		return -1;
	e->kind = EV_ANSWER;
	e->ino = (uint32_t)num_after(s, " inode ");
	e->closed = strstr(s, "HINT_NOPREALLOC") != NULL;
	e->group = rg;
	stream_window(s, e);
	if (prealloc || strstr(s, "HINT_GRP_ALLOC")) {
		e->start = rs;
		e->len = ol < rl ? ol : rl;
		return 0;
	}
	lo = olb > rlb ? olb : rlb;
	hi = (uint64_t)olb + ol < (uint64_t)rlb + rl ? (uint64_t)olb + ol : (uint64_t)rlb + rl;
	e->start = rs + (int32_t)(lo - rlb);
	e->len = hi > lo ? (uint32_t)(hi - lo) : 0;
	return 0;
}

/* One line: 1 with *e filled, 0 for a line of no interest, -1 for a malformed one. */
static int parse_line(const char *line, const char *dev, struct ev *e)
{
	const char *s;

	memset(e, 0, sizeof(*e));
	if (!(s = strstr(line, ": ext4_")) && !(s = strstr(line, ": jbd2_")))
		return 0;
	e->cpu = strchr(line, '[') ? atoi(strchr(line, '[') + 1) : 0;
	if (dev && !strstr(s, dev))
		return 0;
	if (!strncmp(s, ": ext4_request_blocks: ", 23)) {
		e->kind = EV_REQUEST;
		e->meta = !strstr(s, "HINT_DATA");
		e->ino = (uint32_t)num_after(s, " ino ");
		e->len = (uint32_t)num_after(s, " len ");
		e->lblk = num_after(s, " lblk ");
		e->goal = num_after(s, " goal ");
		e->lleft = num_after(s, " lleft ");
		e->lright = num_after(s, " lright ");
		e->pleft = num_after(s, " pleft ");
		e->pright = num_after(s, " pright ");
		return e->len ? 1 : -1;
	}
	if (!strncmp(s, ": ext4_mballoc_alloc: ", 22) || !strncmp(s, ": ext4_mballoc_prealloc: ", 25))
		return parse_answer(s, s[14] == 'p', e) ? -1 : 1;
	if (!strncmp(s, ": ext4_discard_preallocations: ", 31)) {
		e->kind = EV_DISCARD;
		e->ino = (uint32_t)num_after(s, " ino ");
		return 1;
	}
	if (!strncmp(s, ": jbd2_start_commit: ", 21) || !strncmp(s, ": jbd2_end_commit: ", 19)) {
		e->kind = s[7] == 's' ? EV_COMMIT_START : EV_COMMIT_END;
		return 1;
	}
	if (!strncmp(s, ": ext4_free_blocks: ", 20)) {
		e->kind = EV_FREE;
		e->ino = (uint32_t)num_after(s, " ino ");
		e->goal = num_after(s, " block ");
		e->len = (uint32_t)num_after(s, " count ");
		return 1;
	}
	return 0;
}

/* A trace block as the replay's: mapped, or (from before the trace) itself. */
static uint64_t xlate(struct replay *r, uint64_t blk)
{
	uint64_t v = blk ? runmap_get(&r->fwd, blk, NO_VAL) : NO_VAL;

	return v == NO_VAL ? blk : v;
}

/* Goal: the block after the replay's pleft when the trace's goal followed its pleft. */
static uint64_t xlate_goal(struct replay *r, const struct ev *e)
{
	uint64_t prev = e->goal ? runmap_get(&r->fwd, e->goal - 1, NO_VAL) : NO_VAL;

	if (prev != NO_VAL)
		return prev + 1;
	return xlate(r, e->goal);
}

static int do_request(struct replay *r, const struct ev *e)
{
	uint64_t end = e->lblk + e->len, seen = umap_get(&r->isize, e->ino);
	struct rr_alloc_req req = {
		.ino = e->ino, .lblk = e->lblk, .len = e->len, .goal = xlate_goal(r, e),
		.flags = e->meta ? RR_ALLOC_METADATA
				 : RR_ALLOC_DATA | RR_ALLOC_USE_ROOT_RESV | (e->closed ? RR_ALLOC_CLOSED : 0),
		.nbr = { .lleft = e->lleft, .pleft = xlate(r, e->pleft), .lright = e->lright,
			 .pright = xlate(r, e->pright) },
	};
	unsigned int i = r->npend < 64 ? r->npend++ : 63;

	/* Small files share their CPU's locality group: the trace's CPU, not ours. */
	rr_alloc_use_cpu(e->cpu);
	if (seen == NO_VAL || seen < end)
		umap_put(&r->isize, e->ino, seen = end);
	/*
	 * The kernel's window follows the file's size (ext4_mb_normalize_request:
	 * a file written in full before its writeback asks 8 MiB windows from
	 * its first request on, where the blocks seen so far would give 4 MiB):
	 * a size its window covers, up to 2 MiB; from 4 MiB the table picks a
	 * window for sizes past it, so one block more.
	 */
	if (e->wend) {
		uint64_t hint = e->wend + ((uint64_t)e->wlen * r->bsize >= (4u << 20));

		if (hint > seen)
			umap_put(&r->isize, e->ino, seen = hint);
	}
	req.isize = seen * r->bsize;
	r->reqs++;
	r->pend[i].ino = e->ino;
	r->pend[i].lblk = e->lblk;
	r->pend[i].len = e->len;
	r->pend[i].meta = e->meta;
	if (rr_alloc_blocks(r->a, &req, &r->pend[i].got)) {
		r->pend[i].got.len = 0;
		r->failed++;
	}
	return 0;
}

/* Trace blocks [tblk, tblk + n) are the replay's [rblk, rblk + n). */
static void map_blocks(struct replay *r, uint64_t tblk, uint64_t rblk, uint32_t n)
{
	/*
	 * The same blocks on both sides need no entry: a block the map does not
	 * hold is itself (xlate), and its free finds it in use (do_free).  No
	 * entry of the run is stale: its trace blocks and replay blocks were
	 * free until now, and a free drops both sides' entries.
	 */
	if (tblk == rblk)
		return;
	if (runmap_put(&r->fwd, tblk, n, rblk, 0) || runmap_put(&r->rev, rblk, n, tblk, 0))
		r->nomem = 1;
}

#define OWN_META (NO_VAL - 1)	/* own: a metadata request's block (extent tree, directory) */

/* Replay blocks [pblk, pblk + n) hold the file's data from key (inode << 32 | logical block) on, or metadata. */
static void own_blocks(struct replay *r, uint64_t pblk, uint64_t key, uint32_t n)
{
	if (runmap_put(&r->own, pblk, n, key, key == OWN_META))
		r->nomem = 1;
}

/*
 * The trace's answer to a waiting request of the same inode: compared with
 * the replay's, then the two sides made to hold the same logical blocks
 * (the replay asked again for what it lacks, its excess given back).
 */
static void do_answer(struct replay *r, const struct ev *e)
{
	uint64_t tblk = r->first + (uint64_t)e->group * r->bpg + (uint64_t)(int64_t)e->start;
	struct rr_extent got;
	uint32_t done = 0;
	unsigned int i;

	for (i = 0; i < r->npend && r->pend[i].ino != e->ino; i++)
		;
	if (i == r->npend || !e->len)
		return;
	got = r->pend[i].got;
	r->answered++;
	r->same_start += got.len && got.pblk == tblk;
	r->same_group += got.len && (got.pblk - r->first) / r->bpg == e->group;
	r->same_len += got.len == e->len;
	while (got.len && done < e->len) {
		uint32_t n = got.len < e->len - done ? got.len : e->len - done;
		struct rr_alloc_req req = { .ino = e->ino, .lblk = r->pend[i].lblk + done + n,
					    .flags = RR_ALLOC_DATA | RR_ALLOC_USE_ROOT_RESV };

		map_blocks(r, tblk + done, got.pblk, n);
		if (r->layout)
			own_blocks(r, got.pblk, r->pend[i].meta ? OWN_META :
				   (uint64_t)e->ino << 32 | (r->pend[i].lblk + done), n);
		if (n < got.len)
			rr_free_blocks(r->a, got.pblk + n, got.len - n);
		done += n;
		req.len = e->len - done;
		req.goal = got.pblk + n;
		req.isize = umap_get(&r->isize, e->ino) * r->bsize;
		if (!req.len || rr_alloc_blocks(r->a, &req, &got))
			break;
	}
	memmove(&r->pend[i], &r->pend[i + 1], (r->npend - i - 1) * sizeof(r->pend[0]));
	r->npend--;
}

/*
 * The engine's commit, asked for when data finds no free space but blocks
 * that wait for a commit: a replay commits only where its trace did (its
 * jbd2 lines), so the request fails there.
 */
static int no_commit(void *arg)
{
	(void)arg;
	return -1;
}

/*
 * Free the replay's blocks for the trace's [blk, blk + n), a run of
 * consecutive ones at a time.  The file's size as the replay knew it goes:
 * a delete's inode number comes back as a new, empty file (its first
 * request must not look like the old file's stream), and a truncate's next
 * request says the size again.
 */
/* Replay blocks [v, v + n) to be freed: runs of consecutive ones freed together. */
struct free_acc {
	uint64_t run, len;
};

static void free_add(struct replay *r, struct free_acc *f, uint64_t v, uint64_t n)
{
	if (r->layout && runmap_del(&r->own, v, n))
		r->nomem = 1;
	if (f->len && v == f->run + f->len && f->len + n <= UINT32_MAX) {
		f->len += n;
		return;
	}
	if (f->len)
		rr_free_blocks(r->a, f->run, (uint32_t)f->len);
	f->run = v;
	f->len = n;
}

/*
 * Trace blocks [t, end) that no run of the trace's maps: the same blocks
 * in the replay when they were in use before the trace (in the bitmap and
 * not given by the replay to another of the trace's blocks).
 */
static void free_unmapped(struct replay *r, struct free_acc *f, uint64_t t, uint64_t end)
{
	uint64_t nblocks = ext2fs_blocks_count(r->fs->super);

	while (t < end) {
		struct runmap_run other;
		uint64_t stop;

		if (runmap_at(&r->rev, t, &other)) {
			t += other.len < end - t ? other.len : end - t;
			continue;
		}
		stop = other.len && other.key < end ? other.key : end;
		if (stop > nblocks)
			stop = nblocks;
		while (t < stop) {
			blk64_t used, unused;

			/* The runs of blocks in use, not block by block: a delete frees whole files. */
			if (ext2fs_find_first_set_block_bitmap2(r->fs->block_map, t, stop - 1, &used))
				break;
			if (ext2fs_find_first_zero_block_bitmap2(r->fs->block_map, used, stop - 1, &unused))
				unused = stop;
			free_add(r, f, used, unused - used);
			t = unused;
		}
		t = other.len && other.key < end ? other.key : end;
	}
}

/*
 * Free the replay's blocks for the trace's [blk, blk + n), a run of
 * consecutive ones at a time.  The file's size as the replay knew it goes:
 * a delete's inode number comes back as a new, empty file (its first
 * request must not look like the old file's stream), and a truncate's next
 * request says the size again.
 */
static void do_free(struct replay *r, const struct ev *e)
{
	uint64_t t = e->goal, end = e->goal + e->len;
	struct free_acc f = { 0 };

	if (e->ino)
		umap_put(&r->isize, e->ino, NO_VAL);
	while (t < end) {
		struct runmap_run run;
		uint64_t k;

		if (!runmap_at(&r->fwd, t, &run)) {
			k = run.len && run.key < end ? run.key : end;
			free_unmapped(r, &f, t, k);
			t = k;
			continue;
		}
		k = run.len < end - t ? run.len : end - t;
		if (runmap_del(&r->fwd, t, k) || runmap_del(&r->rev, run.val, k))
			r->nomem = 1;
		free_add(r, &f, run.val, k);
		t += k;
	}
	if (f.len)
		rr_free_blocks(r->a, f.run, (uint32_t)f.len);
}

/* The trace's events, in order; *n of them.  NULL after a message. */
static struct ev *load(const char *path, const char *dev, size_t *n)
{
	FILE *f = fopen(path, "re");
	struct ev *v = NULL, e;
	size_t cap = 0, lineno = 0;
	char line[1024];
	int ret;

	if (!f) {
		fprintf(stderr, "rrreplay: %s: %s\n", path, strerror(errno));
		return NULL;
	}
	*n = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		ret = parse_line(line, dev, &e);
		if (ret < 0)
			fprintf(stderr, "rrreplay: %s:%zu: not a line of the kernel's format, skipped\n", path, lineno);
		if (ret <= 0)
			continue;
		if (*n == cap) {
			struct ev *w = realloc(v, (cap = cap ? cap * 2 : 4096) * sizeof(*v));

			if (!w) {
				free(v);
				fclose(f);
				fprintf(stderr, "rrreplay: out of memory\n");
				return NULL;
			}
			v = w;
		}
		v[(*n)++] = e;
	}
	fclose(f);
	return v;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: rrreplay [-o OPTION[,OPTION...]] [-t OUT] [-d MAJOR,MINOR] TRACE IMAGE\n\n"
		   "Replay an ext4 allocation trace (the kernel's tracefs text of ext4_request_blocks,\n"
		   "ext4_mballoc_alloc, ext4_mballoc_prealloc and ext4_free_blocks, or rrfuse's\n"
		   "-o alloc_trace) through rrfuse's allocator, starting from IMAGE (read, never\n"
		   "written), and print how many requests were placed as the trace placed them.\n\n"
		   "    -o OPTIONS   allocator tunables as rrfuse's mount options: allocator=NAME\n"
		   "                 (regular, rralloc, firstfit, a NAME.so or a path to one),\n"
		   "                 max_prealloc_kb=KB, mb_stream_req=N, ...\n"
		   "    -t OUT       write the replay's own trace to OUT (the same format)\n"
		   "    -m OUT       write the layout the replay leaves to OUT, as rrmap --groups --json\n"
		   "                 prints an image's\n"
		   "    -d M,N       only the lines of device M,N\n"
		   "    -h, --help   this help\n"
		   "    -V, --version\n");
}

/* -o's comma-separated NAME=VALUE list into t: 0, or -1 after saying which is refused. */
static int set_options(struct rr_alloc_tunables *t, char *opts)
{
	char err[256], *save = NULL, *o;

	for (o = strtok_r(opts, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(o, '=');

		if (eq)
			*eq = 0;
		if (!strcmp(o, "rralloc") && !eq) {
			o = "allocator";
			eq = "=rralloc";
		}
		if (rr_alloc_tunable_set(t, o, eq ? eq + 1 : "", err, sizeof(err))) {
			fprintf(stderr, "rrreplay: %s\n", err);
			return -1;
		}
	}
	return rr_alloc_policy_check(t, err, sizeof(err)) ? fprintf(stderr, "rrreplay: %s\n", err), -1 : 0;
}

static int open_image(const char *path, const struct rr_alloc_tunables *t, struct replay *r)
{
	errcode_t err = ext2fs_open(path, EXT2_FLAG_64BITS, 0, 0, unix_io_manager, &r->fs);
	int ret;

	if (!err)
		err = ext2fs_read_bitmaps(r->fs);
	if (err) {
		fprintf(stderr, "rrreplay: %s: cannot open the image (libext2fs error %ld)\n", path, (long)err);
		return -1;
	}
	ret = rr_alloc_attach(r->fs, t, &r->a);
	if (ret) {
		fprintf(stderr, "rrreplay: %s: the allocator refused the image: %s\n", path, strerror(-ret));
		return -1;
	}
	r->first = r->fs->super->s_first_data_block;
	r->bpg = r->fs->super->s_blocks_per_group;
	r->bsize = r->fs->blocksize;
	return 0;
}

/*
 * Whether a file was closed when it was asked for is not in its request's
 * line; the kernel says it in the answer's flags: HINT_NOPREALLOC is what
 * ext4_mb_group_or_file sets for a closed file's data to its end (a
 * delayed allocation written back after close), which takes exactly what
 * it asks for and no window.  Each answer marks the last request of its
 * inode before it, so that the replay asks as the kernel did.
 */
static int link_answers(struct ev *v, size_t n)
{
	struct umap last = { 0 };
	size_t i;
	uint64_t k;

	for (i = 0; i < n; i++) {
		if (v[i].kind == EV_REQUEST && !v[i].meta && umap_put(&last, v[i].ino, i))
			break;
		if (v[i].kind == EV_ANSWER && (k = umap_get(&last, v[i].ino)) != NO_VAL) {
			v[k].closed = v[i].closed;
			v[k].wend = v[i].wend;
			v[k].wlen = v[i].wlen;
			umap_put(&last, v[i].ino, NO_VAL);
		}
	}
	umap_free(&last);
	return i < n ? -1 : 0;
}

static void replay_all(struct replay *r, const struct ev *v, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (v[i].kind == EV_REQUEST)
			do_request(r, &v[i]);
		else if (v[i].kind == EV_ANSWER)
			do_answer(r, &v[i]);
		else if (v[i].kind == EV_DISCARD)
			rr_alloc_discard_inode(r->a, v[i].ino);
		else if (v[i].kind == EV_COMMIT_START)
			rr_alloc_commit_begin(r->a);
		else if (v[i].kind == EV_COMMIT_END)
			rr_alloc_commit_end(r->a);
		else
			do_free(r, &v[i]);
	}
}

struct owned {
	uint64_t key, pblk, len;	/* inode << 32 | logical block (or OWN_META); the replay's blocks */
};

static int owned_cmp(const void *a, const void *b)
{
	const struct owned *x = a, *y = b;

	return x->key < y->key ? -1 : x->key > y->key;
}

struct owned_list {
	struct owned *o;
	size_t n, cap;
};

static int owned_push(void *arg, const struct runmap_run *run)
{
	struct owned_list *l = arg;

	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 1024;
		struct owned *o = realloc(l->o, cap * sizeof(*o));

		if (!o)
			return -1;
		l->o = o;
		l->cap = cap;
	}
	l->o[l->n++] = (struct owned){ .key = run->val, .pblk = run->key, .len = run->len };
	return 0;
}

/*
 * The files' part of the layout (rrmap's map_image: files, leaf extents and
 * fragments per file, data blocks per group) from the owners of the
 * replay's blocks, a run of them at a time: within a run, blocks follow
 * each other on both sides.  0, or -1 out of memory.
 */
static int layout_files(struct replay *r, struct map_image *m)
{
	struct owned_list l = { 0 };
	size_t i, j, files;

	if (runmap_each(&r->own, owned_push, &l)) {
		free(l.o);
		return -1;
	}
	/* Metadata last: a block of the groups' data, of no file's extents. */
	if (l.n)
		qsort(l.o, l.n, sizeof(*l.o), owned_cmp);
	for (j = l.n; j && l.o[j - 1].key == OWN_META; j--)
		;
	for (i = 0, files = j; i < files; i = j) {
		/* cur: the blocks of the extent being counted, which stops at EXT_INIT_MAX_LEN */
		uint64_t ext = 1 + (l.o[i].len - 1) / EXT_INIT_MAX_LEN, frag = 1, cur = (l.o[i].len - 1) % EXT_INIT_MAX_LEN + 1;

		for (j = i + 1; j < files && l.o[j].key >> 32 == l.o[i].key >> 32; j++) {
			const struct owned *p = &l.o[j - 1], *q = &l.o[j];
			int phys = q->pblk == p->pblk + p->len;
			uint64_t total = (phys && q->key == p->key + p->len ? cur : 0) + q->len;

			frag += !phys;
			ext += (total - 1) / EXT_INIT_MAX_LEN + (total == q->len);
			cur = (total - 1) % EXT_INIT_MAX_LEN + 1;
		}
		if (mfile_push(m, ext, frag)) {	/* after the starting image's own files (mfile_scan) */
			free(l.o);
			return -1;
		}
	}
	for (i = 0; i < l.n; i++) {
		uint64_t b = l.o[i].pblk, end = b + l.o[i].len;

		while (b < end) {
			dgrp_t g = ext2fs_group_of_blk2(m->fs, b);
			uint64_t next = ext2fs_group_first_block2(m->fs, g) + EXT2_BLOCKS_PER_GROUP(m->fs->super);
			uint64_t k = (next < end ? next : end) - b;

			if (g < m->ngroups)
				m->groups[g].data += k;
			b += k;
		}
	}
	free(l.o);
	return mfile_dist(&m->ext_dist, m->extents, m->nfiles) || mfile_dist(&m->frag_dist, m->frags, m->nfiles);
}

/* -m: the layout the replay leaves, as rrmap --groups --json prints an image's.  0 or -1. */
static int write_layout(struct replay *r, const char *path, const char *image)
{
	struct map_image m = { .path = image, .label = "rrreplay" };
	FILE *f;
	int ret = -1;

	/* As the image after an unmount: preallocations dropped, every free committed. */
	rr_alloc_discard_all(r->a);
	rr_alloc_commit_begin(r->a);
	rr_alloc_commit_end(r->a);
	/*
	 * rrmap's scans say what failed, naming the image; the files' part (before
	 * the free-space scan, which sums the groups' data) can only run out of memory.
	 */
	if (mfs_init(&m, r->fs) || mfile_scan(&m)) {
		fprintf(stderr, "rrreplay: no layout written to %s\n", path);
	} else if (layout_files(r, &m)) {
		fprintf(stderr, "rrreplay: out of memory for the layout\n");
	} else if (mfs_scan_free(&m)) {
		fprintf(stderr, "rrreplay: no layout written to %s\n", path);
	} else if (!(f = fopen(path, "we"))) {
		fprintf(stderr, "rrreplay: %s: %s\n", path, strerror(errno));
	} else {
		mout_json(f, &m, 1, true);
		ret = fclose(f) ? -1 : 0;
		if (ret)
			fprintf(stderr, "rrreplay: %s: %s\n", path, strerror(errno));
	}
	free(m.groups);
	free(m.extents);
	free(m.frags);
	return ret;
}

static double pct(uint64_t x, uint64_t of)
{
	return of ? 100.0 * (double)x / (double)of : 0.0;
}

int main(int argc, char *argv[])
{
	static const struct option longopts[] = { TOOL_OPTIONS_END };
	struct rr_alloc_tunables t;
	struct replay r = { 0 };
	const char *out = NULL, *layout = NULL;
	char dev[32] = "", *opts = NULL;
	struct timespec t0, t1;
	struct ev *v;
	size_t n, i;
	double secs;
	int c, ret;

	rr_alloc_tunables_default(&t);
	while ((c = getopt_long(argc, argv, "o:t:m:d:hV", longopts, NULL)) != -1) {
		if (c == 'o')
			opts = optarg;
		else if (c == 'm')
			layout = optarg;
		else if (c == 't')
			out = optarg;
		else if (c == 'd')
			snprintf(dev, sizeof(dev), "dev %s ", optarg);
		else
			return tool_answer(c, "rrreplay", usage);
	}
	if (argc - optind != 2) {
		usage(stderr);
		return 2;
	}
	if ((opts && set_options(&t, opts)) || open_image(argv[optind + 1], &t, &r))
		return 1;
	v = load(argv[optind], dev[0] ? dev : NULL, &n);
	if (!v)
		return 1;
	for (i = 0; i < n && !r.commits; i++)
		r.commits = v[i].kind == EV_COMMIT_END;
	if (r.commits)
		rr_alloc_set_commit(r.a, no_commit, NULL);
	if (link_answers(v, n)) {
		fprintf(stderr, "rrreplay: out of memory\n");
		free(v);
		return 1;
	}
	if (out) {
		FILE *f = fopen(out, "we");

		if (!f) {
			fprintf(stderr, "rrreplay: %s: %s\n", out, strerror(errno));
			return 1;
		}
		rr_alloc_set_trace(r.a, f, out, 0, 0);
	}
	r.layout = layout != NULL;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	replay_all(&r, v, n);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("policy %s\nrequests %llu\nanswered %llu\nfailed %llu\n", t.policy, (unsigned long long)r.reqs,
	       (unsigned long long)r.answered, (unsigned long long)r.failed);
	printf("same_start %llu %.1f%%\nsame_group %llu %.1f%%\nsame_len %llu %.1f%%\n",
	       (unsigned long long)r.same_start, pct(r.same_start, r.answered), (unsigned long long)r.same_group,
	       pct(r.same_group, r.answered), (unsigned long long)r.same_len, pct(r.same_len, r.answered));
	printf("seconds %.6f\nrequests_per_second %.0f\n", secs, secs > 0 ? (double)r.reqs / secs : 0.0);
	printf("frees_wait_for_commits %s\n", r.commits ? "yes" : "no");
	if (r.nomem)
		fprintf(stderr, "rrreplay: out of memory for the block maps: the figures above are not the replay's\n");
	ret = r.nomem || (layout && write_layout(&r, layout, argv[optind + 1]));
	rr_alloc_detach(r.a);
	ext2fs_close_free(&r.fs);
	runmap_free(&r.fwd);
	runmap_free(&r.rev);
	umap_free(&r.isize);
	runmap_free(&r.own);
	free(v);
	return ret ? 1 : 0;
}

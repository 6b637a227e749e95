// SPDX-License-Identifier: GPL-2.0
/*
 * rrftl: replay a block trace through a page-mapped flash translation layer
 * model and report what the trace would cost a flash device.
 *
 *   rrftl TRACE --capacity BYTES --op PERCENT [--erase-kb N] [--page-kb N]
 *         [--gc greedy|cost-benefit|lrw] [--no-trim] [--streams 1|2]
 *         [--warmup BYTES] [--interval PAGES] [--json]
 *   rrftl --generate seq|random|fill-random|fill-hotcold --capacity BYTES [--writes N]
 *         [--bs BYTES] [--seed N] [--hot R/F]  (a synthetic trace on stdout)
 *
 * The trace is fio's iolog version 3 ("fio version 3 iolog", then lines
 * "TIME FILE ACTION [OFFSET LENGTH]"), the format `fio --read_iolog`
 * replays and rrfuse's -o trace= is to write.  Version 2 (no TIME) is read
 * too.  Offsets are device offsets: every file of the trace is taken as
 * the one device.
 *
 * The model: the host's address space (--capacity) is mapped page by page
 * (--page-kb) onto flash with op % more pages, grouped in erase blocks
 * (--erase-kb).  Writes go to the open block of their stream; when a new
 * block is needed and only FTL_GC_RESERVE_BLOCKS are free, garbage
 * collection picks a victim (greedy: fewest valid pages; cost-benefit: the
 * best (1 - u) * age / (1 + u), Rosenblum and Ousterhout, "The design and
 * implementation of a log-structured file system", SOSP 1991; lrw: the
 * least recently written, i.e. FIFO, the policy Desnoyers' non-uniform
 * traffic model is exact for), copies its
 * valid pages to the GC stream's open block and erases it.  TRIM
 * invalidates whole pages inside the range (--no-trim: ignored, as a device
 * without discard support).  A write that covers part of a page programs the
 * whole page (a read-modify-write inside the device).
 *
 * Over-provisioning is spare / user, as SSD data sheets give it (7 %: 128
 * GiB of flash for 120 GB sold) and as the analytic models the tests check
 * against define it: physical pages = user pages * (1 + op / 100), rounded
 * up to whole erase blocks.  The GC reserve and the open blocks come out of
 * that spare, as they do in a real device.
 *
 * Write amplification is flash page programs (host + GC copies) / host page
 * writes, counted after --warmup bytes of host writes (the published
 * steady-state figures assume a device that has been filled and then
 * overwritten long enough to forget its initial state).
 *
 * What the model is checked against (tests/tools/test_rrftl.py): uniform
 * random single-page overwrites of a filled device under greedy GC reach the
 * steady state A = a / (a + W0(-a e^-a)), a = 1 + op, of Desnoyers,
 * "Analytic modeling of SSD write performance", SYSTOR 2012 (and "Analytic
 * models of SSD write performance", ACM TOS 10(4), 2014: derived for FIFO
 * cleaning, which greedy approaches as blocks hold more pages) and of Xiang
 * and Kurkoski, "An improved analytic expression for write amplification in
 * NAND flash", ICNC 2012 (greedy, op = (T - U) / U as here); Hu et al.,
 * "Write amplification analysis in flash-based solid state drives", SYSTOR
 * 2009, simulate greedy cleaning under the same workload.  With 1 MiB blocks
 * of 4 KiB pages the model gives 8.19, 4.92 and 2.49 at 7, 12 and 28 % where
 * the formula gives 7.82, 4.85 and 2.48: the GC reserve and the open block
 * come out of the spare, which weighs most when the spare is small.
 *
 * Exit status: 0, 1 for a bad trace (the message gives the line), 2 for a
 * usage error or a geometry GC cannot work with.
 */
#include "tool.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FTL_DEFAULT_PAGE_KB	4	/* flash page, the mapping unit: 4 KiB, as most page-mapped FTLs */
#define FTL_DEFAULT_ERASE_KB	1024	/* erase block: 256 pages of 4 KiB (small for today's NAND, so a
					 * small trace still has many blocks; the analytic greedy result
					 * is for many pages per block) */
#define FTL_GC_RESERVE_BLOCKS	1	/* free blocks kept for GC's copies: GC runs when a stream needs a
					 * block and no more than this many are free */
#define FTL_MAX_STREAMS		2	/* host writes, and GC copies when --streams 2 */
#define FTL_GEN_DEFAULT_BS	4096	/* --generate: bytes per write */
#define FTL_GEN_DEFAULT_SEED	1	/* --generate: PRNG seed */
#define FTL_NONE		UINT32_MAX	/* an unmapped page, no block */

enum ftl_gc { FTL_GC_GREEDY, FTL_GC_COST_BENEFIT, FTL_GC_LRW };

/* One erase block.  Full blocks with v valid pages sit on list v (greedy). */
struct ftl_block {
	uint32_t valid;		/* valid pages */
	uint32_t prev, next;	/* on its valid-count list, when full */
	uint64_t erases;
	uint64_t written_at;	/* flash programs when it was last programmed (its age, for cost-benefit) */
	bool full;
};

struct ftl_frontier {
	uint32_t blk;		/* open block or FTL_NONE */
	uint32_t off;		/* next page in it */
};

/* WA over time: one sample every --interval host page writes. */
struct ftl_sample {
	uint64_t host;		/* host page writes so far */
	double wa_interval, wa_total;
	double live_user, live_flash;
	double erase_mean, erase_cv;
	uint64_t erase_max;
};

struct ftl {
	/* geometry */
	uint64_t page_size;
	uint32_t ppb;		/* pages per erase block */
	uint32_t user_pages, nblocks;
	uint64_t phys_pages;
	double op;
	enum ftl_gc gc;
	bool trim;
	int streams;

	/* state */
	uint32_t *l2p;		/* user page -> flash page */
	uint32_t *p2l;		/* flash page -> user page */
	struct ftl_block *blk;
	uint32_t *free;		/* stack of free blocks */
	uint32_t nfree;
	uint32_t *bucket;	/* head of the list of full blocks with v valid pages */
	uint32_t min_bucket;	/* no full block has fewer valid pages than this */
	struct ftl_frontier fr[FTL_MAX_STREAMS];
	uint64_t mapped;	/* user pages mapped (live) */

	/* counters */
	uint64_t host_writes, gc_writes, erases;	/* pages, pages, blocks */
	uint64_t host_reads, trimmed, trim_ignored, syncs, lines;
	uint64_t base_host, base_flash;	/* at the end of the warmup */
	uint64_t warmup_pages;
	bool warm;

	/* samples */
	uint64_t interval, next_sample, last_host, last_flash;
	struct ftl_sample *samples;
	size_t nsamples, samples_cap;
};

static void *ftl_alloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);

	if (!p) {
		fprintf(stderr, "rrftl: out of memory (%zu x %zu bytes)\n", n, size);
		exit(1);
	}
	return p;
}

static void ftl_list_del(struct ftl *f, uint32_t b)
{
	struct ftl_block *x = &f->blk[b];

	if (x->prev != FTL_NONE)
		f->blk[x->prev].next = x->next;
	else
		f->bucket[x->valid] = x->next;
	if (x->next != FTL_NONE)
		f->blk[x->next].prev = x->prev;
}

static void ftl_list_add(struct ftl *f, uint32_t b)
{
	struct ftl_block *x = &f->blk[b];

	x->prev = FTL_NONE;
	x->next = f->bucket[x->valid];
	if (x->next != FTL_NONE)
		f->blk[x->next].prev = b;
	f->bucket[x->valid] = b;
	if (x->valid < f->min_bucket)
		f->min_bucket = x->valid;
}

static uint64_t ftl_flash_writes(const struct ftl *f)
{
	return f->host_writes + f->gc_writes;
}

/* The flash page of user page lpn is no longer valid. */
static void ftl_invalidate(struct ftl *f, uint32_t lpn)
{
	uint32_t ppn = f->l2p[lpn], b;

	if (ppn == FTL_NONE)
		return;
	b = ppn / f->ppb;
	f->p2l[ppn] = FTL_NONE;
	f->l2p[lpn] = FTL_NONE;
	f->mapped--;
	if (f->blk[b].full) {
		ftl_list_del(f, b);
		f->blk[b].valid--;
		ftl_list_add(f, b);
	} else {
		f->blk[b].valid--;
	}
}

static uint32_t ftl_pick_greedy(struct ftl *f)
{
	while (f->min_bucket <= f->ppb && f->bucket[f->min_bucket] == FTL_NONE)
		f->min_bucket++;
	return f->min_bucket <= f->ppb ? f->bucket[f->min_bucket] : FTL_NONE;
}

static uint32_t ftl_pick_cost_benefit(struct ftl *f)
{
	uint64_t now = ftl_flash_writes(f);
	double best = -1;
	uint32_t b, victim = FTL_NONE;

	for (b = 0; b < f->nblocks; b++) {
		const struct ftl_block *x = &f->blk[b];
		double u, score;

		if (!x->full)
			continue;
		u = (double)x->valid / f->ppb;
		score = (1 - u) * (double)(now - x->written_at + 1) / (1 + u);
		if (score > best) {
			best = score;
			victim = b;
		}
	}
	return victim;
}

/* The full block programmed longest ago: cleaning in the order of writing. */
static uint32_t ftl_pick_lrw(struct ftl *f)
{
	uint32_t b, victim = FTL_NONE;

	for (b = 0; b < f->nblocks; b++)
		if (f->blk[b].full && (victim == FTL_NONE || f->blk[b].written_at < f->blk[victim].written_at))
			victim = b;
	return victim;
}

static uint32_t ftl_pick(struct ftl *f)
{
	switch (f->gc) {
	case FTL_GC_COST_BENEFIT: return ftl_pick_cost_benefit(f);
	case FTL_GC_LRW: return ftl_pick_lrw(f);
	default: return ftl_pick_greedy(f);
	}
}

static void ftl_program(struct ftl *f, int s, uint32_t lpn, bool gc);

/* Collect one victim: copy its valid pages out, erase it. */
static void ftl_gc_one(struct ftl *f)
{
	uint32_t victim, i, base;
	int s = f->streams > 1 ? 1 : 0;

	victim = ftl_pick(f);
	/* LRW may take a block still whole (it goes to the end of the log); the others never need to */
	if (victim == FTL_NONE || (f->gc != FTL_GC_LRW && f->blk[victim].valid == f->ppb)) {
		/* cannot happen with the geometry check of ftl_init; never loop */
		fprintf(stderr, "rrftl: no block to reclaim (over-provisioning too small for this geometry)\n");
		exit(1);
	}
	ftl_list_del(f, victim);
	f->blk[victim].full = false;
	base = victim * f->ppb;
	for (i = 0; i < f->ppb && f->blk[victim].valid; i++) {
		uint32_t lpn = f->p2l[base + i];

		if (lpn == FTL_NONE)
			continue;
		ftl_invalidate(f, lpn);
		ftl_program(f, s, lpn, true);
	}
	f->blk[victim].erases++;
	f->erases++;
	f->free[f->nfree++] = victim;
}

/* A stream's open block that is full joins the GC candidates. */
static void ftl_close(struct ftl *f, struct ftl_frontier *fr)
{
	if (fr->blk == FTL_NONE || fr->off < f->ppb)
		return;
	f->blk[fr->blk].full = true;
	ftl_list_add(f, fr->blk);
	fr->blk = FTL_NONE;
}

static void ftl_program(struct ftl *f, int s, uint32_t lpn, bool gc)
{
	struct ftl_frontier *fr = &f->fr[s];
	uint32_t ppn;

	ftl_close(f, fr);
	if (fr->blk == FTL_NONE) {
		/*
		 * GC's own copies take the reserve; host writes make room first.
		 * With one stream, GC's copies may leave this stream's block open:
		 * then it is the one to write.
		 */
		while (!gc && f->nfree <= FTL_GC_RESERVE_BLOCKS) {
			ftl_gc_one(f);
			ftl_close(f, fr);
		}
		if (fr->blk == FTL_NONE) {
			if (!f->nfree) {
				fprintf(stderr, "rrftl: out of free blocks during garbage collection\n");
				exit(1);
			}
			fr->blk = f->free[--f->nfree];
			fr->off = 0;
		}
	}
	ppn = fr->blk * f->ppb + fr->off++;
	f->p2l[ppn] = lpn;
	f->l2p[lpn] = ppn;
	f->blk[fr->blk].valid++;
	f->blk[fr->blk].written_at = ftl_flash_writes(f);
	f->mapped++;
	if (gc)
		f->gc_writes++;
	else
		f->host_writes++;
}

static void ftl_erase_stats(const struct ftl *f, double *mean, uint64_t *max, double *cv)
{
	double sum = 0, sq = 0, m, var;
	uint32_t b;

	*max = 0;
	for (b = 0; b < f->nblocks; b++) {
		uint64_t e = f->blk[b].erases;

		sum += e;
		if (e > *max)
			*max = e;
	}
	m = sum / f->nblocks;
	for (b = 0; b < f->nblocks; b++)
		sq += (f->blk[b].erases - m) * (f->blk[b].erases - m);
	var = sq / f->nblocks;
	*mean = m;
	*cv = m > 0 ? sqrt(var) / m : 0;
}

static double ftl_ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / b : 0;
}

static void ftl_sample(struct ftl *f)
{
	struct ftl_sample *x;

	if (f->nsamples == f->samples_cap) {
		f->samples_cap = f->samples_cap ? 2 * f->samples_cap : 64;
		f->samples = realloc(f->samples, f->samples_cap * sizeof(*f->samples));
		if (!f->samples) {
			fprintf(stderr, "rrftl: out of memory\n");
			exit(1);
		}
	}
	x = &f->samples[f->nsamples++];
	x->host = f->host_writes;
	x->wa_interval = ftl_ratio(ftl_flash_writes(f) - f->last_flash, f->host_writes - f->last_host);
	x->wa_total = ftl_ratio(ftl_flash_writes(f), f->host_writes);
	x->live_user = (double)f->mapped / f->user_pages;
	x->live_flash = (double)f->mapped / f->phys_pages;
	ftl_erase_stats(f, &x->erase_mean, &x->erase_max, &x->erase_cv);
	f->last_host = f->host_writes;
	f->last_flash = ftl_flash_writes(f);
}

static void ftl_host_write(struct ftl *f, uint32_t lpn)
{
	ftl_invalidate(f, lpn);
	ftl_program(f, 0, lpn, false);
	if (!f->warm && f->host_writes >= f->warmup_pages) {
		f->warm = true;
		f->base_host = f->host_writes;
		f->base_flash = ftl_flash_writes(f);
	}
	if (f->interval && f->host_writes >= f->next_sample) {
		ftl_sample(f);
		f->next_sample += f->interval;
	}
}

static void ftl_init(struct ftl *f, uint64_t capacity, double op, uint64_t page_kb, uint64_t erase_kb)
{
	uint64_t user, phys, need;
	uint32_t b, v;

	f->page_size = page_kb * 1024;
	if (!page_kb || !erase_kb || erase_kb % page_kb || erase_kb / page_kb > UINT32_MAX / 2) {
		fprintf(stderr, "rrftl: the erase block must be a whole number of pages\n");
		exit(2);
	}
	f->ppb = erase_kb / page_kb;
	user = capacity / f->page_size;
	/* phys_pages must fit a uint32_t flash page number */
	if (!user || user >= UINT32_MAX / 2) {
		fprintf(stderr, "rrftl: capacity must be 1 to 2^31 - 1 pages\n");
		exit(2);
	}
	phys = (uint64_t)ceil(user * (1 + op / 100));
	f->nblocks = (phys + f->ppb - 1) / f->ppb;
	f->phys_pages = (uint64_t)f->nblocks * f->ppb;
	if (f->phys_pages >= UINT32_MAX) {
		fprintf(stderr, "rrftl: device too large for the model (2^32 flash pages)\n");
		exit(2);
	}
	/* GC can always free a page only if the full blocks cannot all be valid */
	need = (user + f->ppb - 1) / f->ppb + FTL_GC_RESERVE_BLOCKS + f->streams + 1;
	if (f->nblocks < need) {
		fprintf(stderr, "rrftl: %" PRIu32 " erase blocks cannot hold %" PRIu64
			" user pages with GC (need at least %" PRIu64 "): raise --op or lower --erase-kb\n",
			f->nblocks, user, need);
		exit(2);
	}
	f->user_pages = user;
	f->op = op;
	f->l2p = ftl_alloc(user, sizeof(*f->l2p));
	f->p2l = ftl_alloc(f->phys_pages, sizeof(*f->p2l));
	f->blk = ftl_alloc(f->nblocks, sizeof(*f->blk));
	f->free = ftl_alloc(f->nblocks, sizeof(*f->free));
	f->bucket = ftl_alloc(f->ppb + 1, sizeof(*f->bucket));
	memset(f->l2p, 0xff, user * sizeof(*f->l2p));
	memset(f->p2l, 0xff, f->phys_pages * sizeof(*f->p2l));
	for (v = 0; v <= f->ppb; v++)
		f->bucket[v] = FTL_NONE;
	f->min_bucket = f->ppb + 1;
	/* lowest block first off the stack */
	for (b = 0; b < f->nblocks; b++)
		f->free[f->nblocks - 1 - b] = b;
	f->nfree = f->nblocks;
	for (v = 0; v < FTL_MAX_STREAMS; v++)
		f->fr[v].blk = FTL_NONE;
}

/* ---- the trace ---- */

static void ftl_bad_line(const char *path, uint64_t n, const char *why)
{
	fprintf(stderr, "rrftl: %s:%" PRIu64 ": %s\n", path, n, why);
	exit(1);
}

static bool ftl_parse_u64(const char *s, uint64_t *v)
{
	char *end;

	if (!s || *s < '0' || *s > '9')
		return false;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return !errno && !*end;
}

/* The host pages [first, last] a byte range touches; false if empty. */
static bool ftl_range(const struct ftl *f, uint64_t off, uint64_t len, uint64_t *first, uint64_t *last)
{
	if (!len)
		return false;
	*first = off / f->page_size;
	*last = (off + len - 1) / f->page_size;
	return true;
}

static void ftl_replay(struct ftl *f, const char *path)
{
	FILE *in = strcmp(path, "-") ? fopen(path, "r") : stdin;
	char *line = NULL, *tok[6], *save;
	size_t cap = 0;
	int version = 0, n;
	uint64_t lineno = 0, off, len, p, first, last;

	if (!in) {
		fprintf(stderr, "rrftl: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	while (getline(&line, &cap, in) >= 0) {
		const char *act;

		lineno++;
		line[strcspn(line, "\r\n")] = 0;
		if (!version) {
			if (!strcmp(line, "fio version 3 iolog"))
				version = 3;
			else if (!strcmp(line, "fio version 2 iolog"))
				version = 2;
			else
				ftl_bad_line(path, lineno, "not a fio iolog (want \"fio version 3 iolog\")");
			continue;
		}
		n = 0;
		for (char *t = strtok_r(line, " \t", &save); t && n < 6; t = strtok_r(NULL, " \t", &save))
			tok[n++] = t;
		if (!n)
			continue;
		/* v3: TIME FILE ACTION [OFFSET LENGTH]; v2: FILE ACTION [...] */
		if (version == 3) {
			if (!ftl_parse_u64(tok[0], &p))
				ftl_bad_line(path, lineno, "bad timestamp");
			memmove(tok, tok + 1, --n * sizeof(*tok));
		}
		if (n < 2)
			ftl_bad_line(path, lineno, "want FILE ACTION [OFFSET LENGTH]");
		act = tok[1];
		f->lines++;
		if (!strcmp(act, "add") || !strcmp(act, "open") || !strcmp(act, "close"))
			continue;
		if (!strcmp(act, "sync") || !strcmp(act, "datasync") || !strcmp(act, "wait")) {
			f->syncs += act[0] != 'w';
			continue;
		}
		if (n != 4 || !ftl_parse_u64(tok[2], &off) || !ftl_parse_u64(tok[3], &len))
			ftl_bad_line(path, lineno, "want OFFSET LENGTH after the action");
		if (off > UINT64_MAX - len || off + len > (uint64_t)f->user_pages * f->page_size)
			ftl_bad_line(path, lineno, "beyond --capacity");
		if (!strcmp(act, "read")) {
			if (ftl_range(f, off, len, &first, &last))
				f->host_reads += last - first + 1;
		} else if (!strcmp(act, "write")) {
			if (ftl_range(f, off, len, &first, &last))
				for (p = first; p <= last; p++)
					ftl_host_write(f, p);
		} else if (!strcmp(act, "trim")) {
			/* only pages the range covers whole */
			first = (off + f->page_size - 1) / f->page_size;
			last = (off + len) / f->page_size;
			for (p = first; p < last; p++) {
				if (!f->trim) {
					f->trim_ignored++;
					continue;
				}
				f->trimmed += f->l2p[p] != FTL_NONE;
				ftl_invalidate(f, p);
			}
		} else {
			ftl_bad_line(path, lineno, "unknown action");
		}
	}
	if (ferror(in))
		ftl_bad_line(path, lineno, strerror(errno));
	if (!version)
		ftl_bad_line(path, 0, "empty trace");
	free(line);
	if (in != stdin)
		fclose(in);
}

/* ---- output ---- */

static double ftl_wa(const struct ftl *f)
{
	return ftl_ratio(ftl_flash_writes(f) - f->base_flash, f->host_writes - f->base_host);
}

static void ftl_report(struct ftl *f, const char *path, bool json)
{
	double mean, cv;
	uint64_t max;
	size_t i;
	static const char *const gc_names[] = { [FTL_GC_GREEDY] = "greedy",
		[FTL_GC_COST_BENEFIT] = "cost-benefit", [FTL_GC_LRW] = "lrw" };
	const char *gc = gc_names[f->gc];

	ftl_erase_stats(f, &mean, &max, &cv);
	if (json) {
		printf("{\n  \"trace\": \"");
		for (const char *c = path; *c; c++)
			if (*c == '"' || *c == '\\')
				printf("\\%c", *c);
			else if ((unsigned char)*c < 0x20)
				printf("\\u%04x", *c);
			else
				putchar(*c);
		printf("\",\n  \"page_bytes\": %" PRIu64 ", \"pages_per_block\": %" PRIu32
		       ", \"user_pages\": %" PRIu32 ", \"flash_pages\": %" PRIu64 ", \"blocks\": %" PRIu32
		       ", \"op_percent\": %g,\n  \"gc\": \"%s\", \"trim\": %s, \"streams\": %d,\n",
		       f->page_size, f->ppb, f->user_pages, f->phys_pages, f->nblocks, f->op, gc,
		       f->trim ? "true" : "false", f->streams);
		printf("  \"host_writes\": %" PRIu64 ", \"gc_writes\": %" PRIu64 ", \"host_reads\": %" PRIu64
		       ", \"trimmed\": %" PRIu64 ", \"trim_ignored\": %" PRIu64 ", \"syncs\": %" PRIu64
		       ", \"warmup_pages\": %" PRIu64 ",\n",
		       f->host_writes, f->gc_writes, f->host_reads, f->trimmed, f->trim_ignored, f->syncs,
		       f->base_host);
		printf("  \"write_amplification\": %.4f, \"write_amplification_whole\": %.4f,\n", ftl_wa(f),
		       ftl_ratio(ftl_flash_writes(f), f->host_writes));
		printf("  \"erases\": %" PRIu64 ", \"erase_mean\": %.4f, \"erase_max\": %" PRIu64
		       ", \"erase_cv\": %.4f,\n", f->erases, mean, max, cv);
		printf("  \"live_user\": %.4f, \"live_flash\": %.4f,\n", (double)f->mapped / f->user_pages,
		       (double)f->mapped / f->phys_pages);
		printf("  \"samples\": [");
		for (i = 0; i < f->nsamples; i++) {
			struct ftl_sample *s = &f->samples[i];

			printf("%s\n    {\"host_writes\": %" PRIu64 ", \"wa_interval\": %.4f, \"wa_total\": %.4f, "
			       "\"live_user\": %.4f, \"live_flash\": %.4f, \"erase_mean\": %.4f, "
			       "\"erase_max\": %" PRIu64 ", \"erase_cv\": %.4f}",
			       i ? "," : "", s->host, s->wa_interval, s->wa_total, s->live_user, s->live_flash,
			       s->erase_mean, s->erase_max, s->erase_cv);
		}
		printf("\n  ]\n}\n");
		return;
	}
	printf("trace: %s (%" PRIu64 " lines)\n", path, f->lines);
	printf("device: %" PRIu32 " user pages of %" PRIu64 " KiB, %" PRIu64 " flash pages (op %.2f %% of user, "
	       "%.2f %% of flash), %" PRIu32 " erase blocks of %" PRIu32 " pages; gc %s, trim %s, %d stream%s\n",
	       f->user_pages, f->page_size / 1024, f->phys_pages, f->op,
	       100.0 * (f->phys_pages - f->user_pages) / f->phys_pages, f->nblocks, f->ppb, gc,
	       f->trim ? "honoured" : "ignored", f->streams, f->streams > 1 ? "s" : "");
	printf("host: %" PRIu64 " page writes, %" PRIu64 " page reads, %" PRIu64 " pages trimmed%s, %" PRIu64
	       " syncs\n", f->host_writes, f->host_reads, f->trim ? f->trimmed : f->trim_ignored,
	       f->trim ? "" : " (ignored)", f->syncs);
	printf("flash: %" PRIu64 " page programs (%" PRIu64 " GC copies), %" PRIu64 " erases\n",
	       ftl_flash_writes(f), f->gc_writes, f->erases);
	if (f->base_host)
		printf("measured after a warmup of %" PRIu64 " host page writes; whole trace: %.2f\n",
		       f->base_host, ftl_ratio(ftl_flash_writes(f), f->host_writes));
	if (!f->warm)
		printf("warning: the trace ended inside the warmup: nothing measured\n");
	printf("write amplification: %.2f\n", ftl_wa(f));
	printf("erase count: mean %.2f, max %" PRIu64 ", cv %.3f\n", mean, max, cv);
	printf("live fraction: %.4f of the user capacity, %.4f of the flash\n",
	       (double)f->mapped / f->user_pages, (double)f->mapped / f->phys_pages);
	if (f->nsamples) {
		printf("\n%14s %10s %10s %10s %10s %10s %10s %10s\n", "host writes", "WA (intv)", "WA (total)",
		       "live/user", "live/flash", "erase mean", "erase max", "erase cv");
		for (i = 0; i < f->nsamples; i++) {
			struct ftl_sample *s = &f->samples[i];

			printf("%14" PRIu64 " %10.3f %10.3f %10.4f %10.4f %10.2f %10" PRIu64 " %10.3f\n", s->host,
			       s->wa_interval, s->wa_total, s->live_user, s->live_flash, s->erase_mean,
			       s->erase_max, s->erase_cv);
		}
	}
}

/* ---- synthetic traces ---- */

/* splitmix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014) */
static uint64_t gen_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform in [0, n) without modulo bias (rejection). */
static uint64_t gen_below(uint64_t *state, uint64_t n)
{
	uint64_t limit = UINT64_MAX - UINT64_MAX % n, x;

	do
		x = gen_next(state);
	while (x >= limit);
	return x % n;
}

/* Hot/cold traffic: hot_writes % of the writes go to the first hot_space % of the slots. */
struct gen_skew {
	double hot_writes, hot_space;
};

/* A random slot: uniform, or uniform within the hot or the cold part. */
static uint64_t gen_slot(uint64_t *state, uint64_t slots, const struct gen_skew *skew)
{
	uint64_t hot;

	if (!skew)
		return gen_below(state, slots);
	hot = (uint64_t)((double)slots * skew->hot_space / 100);
	if (hot < 1)
		hot = 1;
	if (hot >= slots)
		return gen_below(state, slots);
	if ((double)gen_below(state, 1000000) < skew->hot_writes * 10000)
		return gen_below(state, hot);
	return hot + gen_below(state, slots - hot);
}

/*
 * seq: --writes writes of --bs going round the device from offset 0;
 * random: uniformly random aligned slots; fill-random: the whole device in
 * order first (as the analytic models assume), then --writes random ones;
 * fill-hotcold: the same with --hot R/F: R % of the writes to F % of the
 * device (uniform within each part).
 */
static int gen_trace(const char *kind, uint64_t capacity, uint64_t writes, uint64_t bs, uint64_t seed,
		     const struct gen_skew *skew)
{
	const char *dev = "/dev/rrftl";
	uint64_t slots = bs ? capacity / bs : 0, t = 0, i, state = seed;
	bool hotcold = !strcmp(kind, "fill-hotcold");
	bool fill = hotcold || !strcmp(kind, "fill-random"), random = fill || !strcmp(kind, "random");

	if (!random && strcmp(kind, "seq")) {
		fprintf(stderr, "rrftl: --generate seq, random, fill-random or fill-hotcold\n");
		return 2;
	}
	if (!slots) {
		fprintf(stderr, "rrftl: --capacity must hold at least one --bs\n");
		return 2;
	}
	printf("fio version 3 iolog\n%" PRIu64 " %s add\n%" PRIu64 " %s open\n", t, dev, t, dev);
	if (fill)
		for (i = 0; i < slots; i++)
			printf("%" PRIu64 " %s write %" PRIu64 " %" PRIu64 "\n", t++, dev, i * bs, bs);
	for (i = 0; i < writes; i++) {
		uint64_t slot = random ? gen_slot(&state, slots, hotcold ? skew : NULL) : i % slots;

		printf("%" PRIu64 " %s write %" PRIu64 " %" PRIu64 "\n", t++, dev, slot * bs, bs);
	}
	printf("%" PRIu64 " %s close\n", t, dev);
	return fflush(stdout) ? 1 : 0;
}

/* ---- options ---- */

static void usage(FILE *f)
{
	fprintf(f, "usage: rrftl TRACE --capacity BYTES --op PERCENT [--erase-kb N] [--page-kb N]\n"
		   "             [--gc greedy|cost-benefit|lrw] [--no-trim] [--streams 1|2]\n"
		   "             [--warmup BYTES] [--interval PAGES] [--json]\n"
		   "       rrftl --generate seq|random|fill-random|fill-hotcold --capacity BYTES [--writes N]\n"
		   "             [--bs BYTES] [--seed N] [--hot R/F]\n\n"
		   "Replay a fio iolog (version 3) through a page-mapped FTL model.\n\n"
		   "    --capacity BYTES  the host's address space (K, M, G, T suffixes: binary)\n"
		   "    --op PERCENT      over-provisioning, spare / user (7 = 7 %%)\n"
		   "    --erase-kb N      erase block (default %d)\n"
		   "    --page-kb N       flash page, the mapping unit (default %d)\n"
		   "    --gc POLICY       victim selection: greedy (default), cost-benefit or lrw (oldest)\n"
		   "    --no-trim         ignore trims (a device without discard)\n"
		   "    --streams N       1: GC copies share the host's open block (default); 2: their own\n"
		   "    --warmup BYTES    host writes before the measurement starts (default 0)\n"
		   "    --interval PAGES  a WA sample every PAGES host page writes (default: the capacity;\n"
		   "                      0: none)\n"
		   "    --json            the same figures as JSON\n"
		   "    --generate KIND   write a synthetic trace to stdout: seq (--writes writes going round\n"
		   "                      the device), random (uniform), fill-random (fill in order, then\n"
		   "                      --writes random writes), fill-hotcold (the same, R %% of the\n"
		   "                      writes to F %% of the device: --hot R/F, default 80/20); --bs\n"
		   "                      bytes each (default %d), --seed\n",
		FTL_DEFAULT_ERASE_KB, FTL_DEFAULT_PAGE_KB, FTL_GEN_DEFAULT_BS);
}

static bool parse_size(const char *s, uint64_t *v)
{
	char *end;
	unsigned long long x;
	int shift = 0;

	if (!s || *s < '0' || *s > '9')
		return false;
	errno = 0;
	x = strtoull(s, &end, 10);
	if (errno)
		return false;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	}
	if (*end || (shift && x > (UINT64_MAX >> shift)))
		return false;
	*v = (uint64_t)x << shift;
	return true;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "capacity", required_argument, NULL, 'c' },
		{ "op", required_argument, NULL, 'o' },
		{ "erase-kb", required_argument, NULL, 'e' },
		{ "page-kb", required_argument, NULL, 'p' },
		{ "gc", required_argument, NULL, 'g' },
		{ "no-trim", no_argument, NULL, 'T' },
		{ "streams", required_argument, NULL, 's' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "interval", required_argument, NULL, 'i' },
		{ "json", no_argument, NULL, 'j' },
		{ "generate", required_argument, NULL, 'G' },
		{ "writes", required_argument, NULL, 'W' },
		{ "bs", required_argument, NULL, 'b' },
		{ "seed", required_argument, NULL, 'S' },
		{ "hot", required_argument, NULL, 'H' },
		TOOL_OPTIONS_END
	};
	struct ftl f = { .gc = FTL_GC_GREEDY, .trim = true, .streams = 1 };
	uint64_t capacity = 0, page_kb = FTL_DEFAULT_PAGE_KB, erase_kb = FTL_DEFAULT_ERASE_KB;
	uint64_t warmup = 0, interval = UINT64_MAX, writes = 0, bs = FTL_GEN_DEFAULT_BS;
	uint64_t seed = FTL_GEN_DEFAULT_SEED, streams;
	double op = -1;
	bool json = false, have_op = false;
	const char *generate = NULL;
	struct gen_skew skew = { 80, 20 };
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "hV", opts, NULL)) != -1) {
		bool ok = true;

		switch (c) {
		case 'c': ok = parse_size(optarg, &capacity); break;
		case 'o':
			errno = 0;
			op = strtod(optarg, &end);
			ok = !errno && end != optarg && !*end && op > 0 && op <= 1000;
			have_op = true;
			break;
		case 'e': ok = parse_size(optarg, &erase_kb) && erase_kb; break;
		case 'p': ok = parse_size(optarg, &page_kb) && page_kb; break;
		case 'g':
			if (!strcmp(optarg, "greedy"))
				f.gc = FTL_GC_GREEDY;
			else if (!strcmp(optarg, "cost-benefit"))
				f.gc = FTL_GC_COST_BENEFIT;
			else if (!strcmp(optarg, "lrw"))
				f.gc = FTL_GC_LRW;
			else
				ok = false;
			break;
		case 'T': f.trim = false; break;
		case 's':
			ok = parse_size(optarg, &streams) && streams >= 1 && streams <= FTL_MAX_STREAMS;
			f.streams = ok ? (int)streams : 1;
			break;
		case 'w': ok = parse_size(optarg, &warmup); break;
		case 'i': ok = parse_size(optarg, &interval); break;
		case 'j': json = true; break;
		case 'G': generate = optarg; break;
		case 'W': ok = parse_size(optarg, &writes); break;
		case 'b': ok = parse_size(optarg, &bs) && bs; break;
		case 'S': ok = parse_size(optarg, &seed); break;
		case 'H':
			ok = sscanf(optarg, "%lf/%lf%c", &skew.hot_writes, &skew.hot_space, &(char){ 0 }) == 2 &&
			     skew.hot_writes >= 0 && skew.hot_writes <= 100 &&
			     skew.hot_space > 0 && skew.hot_space < 100;
			break;
		default: return tool_answer(c, "rrftl", usage);
		}
		if (!ok) {
			fprintf(stderr, "rrftl: bad value: %s\n", optarg);
			return 2;
		}
	}
	if (!capacity) {
		fprintf(stderr, "rrftl: --capacity is required\n");
		usage(stderr);
		return 2;
	}
	if (generate)
		return optind == argc ? gen_trace(generate, capacity, writes, bs, seed, &skew) : 2;
	if (optind != argc - 1 || !have_op) {
		usage(stderr);
		return 2;
	}
	ftl_init(&f, capacity, op, page_kb, erase_kb);
	f.warmup_pages = (warmup + f.page_size - 1) / f.page_size;
	f.warm = !f.warmup_pages;
	f.interval = interval == UINT64_MAX ? f.user_pages : interval;
	f.next_sample = f.interval;
	ftl_replay(&f, argv[optind]);
	if (f.interval && f.host_writes > f.last_host)
		ftl_sample(&f);
	ftl_report(&f, argv[optind], json);
	free(f.l2p);
	free(f.p2l);
	free(f.blk);
	free(f.free);
	free(f.bucket);
	free(f.samples);
	return 0;
}

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Runs of consecutive keys mapped to consecutive values (or each to one
 * value, "flat"): a block map whose cost follows the requests, not their
 * lengths.  A replay maps a 32768-block request in one entry, and a
 * delete of a whole file drops its runs, not its blocks one by one.
 */
#ifndef RUNMAP_H
#define RUNMAP_H

#include <stddef.h>
#include <stdint.h>

struct runmap_node;

struct runmap {
	struct runmap_node *root;
	size_t n;		/* runs */
	uint64_t seed;		/* the treap's priorities */
};

/* One run: keys [key, key + len) map to val (+ the offset unless flat). */
struct runmap_run {
	uint64_t key, val, len;
	int flat;
};

/* [key, key + len) to val on (flat: each to val), replacing what they held.  0, or -1 out of memory. */
int runmap_put(struct runmap *m, uint64_t key, uint64_t len, uint64_t val, int flat);
/* Drop [key, key + len).  0, or -1 out of memory (splitting a run). */
int runmap_del(struct runmap *m, uint64_t key, uint64_t len);
/*
 * The run holding key, clipped to start at key (1), or else the first run
 * after key (0, *out that run whole; out->len 0 when there is none).
 */
int runmap_at(const struct runmap *m, uint64_t key, struct runmap_run *out);
/* The value of key, or fallback when no run holds it. */
uint64_t runmap_get(const struct runmap *m, uint64_t key, uint64_t fallback);
/* Each run in key order; stops at fn's first nonzero answer, which it returns. */
int runmap_each(const struct runmap *m, int (*fn)(void *arg, const struct runmap_run *run), void *arg);
void runmap_free(struct runmap *m);

#endif

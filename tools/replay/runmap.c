// SPDX-License-Identifier: GPL-2.0
/*
 * The run map as a treap keyed by the runs' first keys: runs never overlap,
 * so the run holding a key is the last one starting at or before it.
 * Splitting and merging by key keep each operation to the tree's depth
 * (logarithmic, expected, whatever the order the runs come in: a replay's
 * blocks mostly grow).
 */
#include "runmap.h"

#include <stdlib.h>

struct runmap_node {
	struct runmap_run run;
	uint64_t prio;
	struct runmap_node *l, *r;
};

static uint64_t next_prio(struct runmap *m)
{
	uint64_t x = m->seed ? m->seed : 0x9E3779B97F4A7C15ull;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return m->seed = x;
}

/* t split into the runs starting before key (*a) and the others (*b). */
static void split(struct runmap_node *t, uint64_t key, struct runmap_node **a, struct runmap_node **b)
{
	if (!t) {
		*a = *b = NULL;
	} else if (t->run.key < key) {
		split(t->r, key, &t->r, b);
		*a = t;
	} else {
		split(t->l, key, a, &t->l);
		*b = t;
	}
}

/* Every run of a before every run of b. */
static struct runmap_node *merge(struct runmap_node *a, struct runmap_node *b)
{
	if (!a || !b)
		return a ? a : b;
	if (a->prio > b->prio) {
		a->r = merge(a->r, b);
		return a;
	}
	b->l = merge(a, b->l);
	return b;
}

static struct runmap_node *last(struct runmap_node *t)
{
	while (t && t->r)
		t = t->r;
	return t;
}

static void free_all(struct runmap_node *t)
{
	while (t) {
		struct runmap_node *r = t->r;

		free_all(t->l);
		free(t);
		t = r;
	}
}

static struct runmap_node *new_node(struct runmap *m, uint64_t key, uint64_t len, uint64_t val, int flat)
{
	struct runmap_node *t = malloc(sizeof(*t));

	if (!t)
		return NULL;
	*t = (struct runmap_node){ .run = { .key = key, .val = val, .len = len, .flat = flat }, .prio = next_prio(m) };
	m->n++;
	return t;
}

/* The part of run p from key on, as a run of its own (p keeps the part before). */
static struct runmap_node *cut_tail(struct runmap *m, struct runmap_node *p, uint64_t key)
{
	uint64_t off = key - p->run.key;
	struct runmap_node *q = new_node(m, key, p->run.len - off, p->run.flat ? p->run.val : p->run.val + off,
					 p->run.flat);

	if (q)
		p->run.len = off;
	return q;
}

int runmap_del(struct runmap *m, uint64_t key, uint64_t len)
{
	uint64_t end = key + len;
	struct runmap_node *a, *mid = NULL, *b, *p, *tail = NULL;

	if (!len)
		return 0;
	split(m->root, key, &a, &b);
	p = last(a);
	if (p && p->run.key + p->run.len > key) {
		/* A run from before key reaching into the range: keep its head, and its tail past end. */
		if (p->run.key + p->run.len > end && !(tail = cut_tail(m, p, end)))
			goto nomem;
		p->run.len = key - p->run.key;
	}
	split(b, end, &mid, &b);
	p = last(mid);
	if (p && p->run.key + p->run.len > end && !(tail = cut_tail(m, p, end)))
		goto nomem;
	while (mid) {
		/* Every run of mid is dropped (the last one's tail, if any, cut off above). */
		struct runmap_node *l = mid->l, *r = mid->r;

		free(mid);
		m->n--;
		mid = merge(l, r);
	}
	m->root = merge(a, merge(tail, b));
	return 0;
nomem:
	m->root = merge(a, merge(mid, b));
	return -1;
}

int runmap_put(struct runmap *m, uint64_t key, uint64_t len, uint64_t val, int flat)
{
	struct runmap_node *a, *b, *p, *t;

	if (!len)
		return 0;
	if (runmap_del(m, key, len))
		return -1;
	split(m->root, key, &a, &b);
	p = last(a);
	if (p && p->run.key + p->run.len == key && p->run.flat == flat &&
	    (flat ? p->run.val == val : p->run.val + p->run.len == val)) {
		p->run.len += len;	/* continues the run before it */
		m->root = merge(a, b);
		return 0;
	}
	if (!(t = new_node(m, key, len, val, flat))) {
		m->root = merge(a, b);
		return -1;
	}
	m->root = merge(merge(a, t), b);
	return 0;
}

int runmap_at(const struct runmap *m, uint64_t key, struct runmap_run *out)
{
	const struct runmap_node *t = m->root, *floor = NULL, *ceil = NULL;

	while (t) {
		if (t->run.key <= key) {
			floor = t;
			t = t->r;
		} else {
			ceil = t;
			t = t->l;
		}
	}
	if (floor && key - floor->run.key < floor->run.len) {
		uint64_t off = key - floor->run.key;

		*out = floor->run;
		out->key = key;
		out->len -= off;
		out->val += floor->run.flat ? 0 : off;
		return 1;
	}
	if (ceil)
		*out = ceil->run;
	else
		*out = (struct runmap_run){ 0 };
	return 0;
}

uint64_t runmap_get(const struct runmap *m, uint64_t key, uint64_t fallback)
{
	struct runmap_run r;

	return runmap_at(m, key, &r) ? r.val : fallback;
}

static int each(const struct runmap_node *t, int (*fn)(void *arg, const struct runmap_run *run), void *arg)
{
	int ret;

	for (; t; t = t->r) {
		if ((ret = each(t->l, fn, arg)) || (ret = fn(arg, &t->run)))
			return ret;
	}
	return 0;
}

int runmap_each(const struct runmap *m, int (*fn)(void *arg, const struct runmap_run *run), void *arg)
{
	return each(m->root, fn, arg);
}

void runmap_free(struct runmap *m)
{
	free_all(m->root);
	*m = (struct runmap){ 0 };
}

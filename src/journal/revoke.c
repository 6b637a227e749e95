// SPDX-License-Identifier: GPL-2.0
/*
 * The revoke table: open addressing on the block number.  A journal holds
 * at most a few hundred thousand records; a table kept at most half full
 * finds each in a probe or two.
 */
#include "revoke.h"

#include <errno.h>
#include <stdlib.h>

#define JRV_MIN_CAP ((size_t)1024)

void jrv_init(struct jrv_table *t)
{
	t->blocks = NULL;
	t->seqs = NULL;
	t->cap = t->used = 0;
}

void jrv_free(struct jrv_table *t)
{
	free(t->blocks);
	free(t->seqs);
	jrv_init(t);
}

static size_t slot_of(uint64_t block, size_t cap)
{
	/* A multiplicative hash: neighbouring blocks (a freed extent) spread. */
	return (size_t)((block * 0x9e3779b97f4a7c15ULL) >> 17) & (cap - 1);
}

static size_t find(const struct jrv_table *t, uint64_t key)
{
	size_t i = slot_of(key, t->cap);

	while (t->blocks[i] && t->blocks[i] != key)
		i = (i + 1) & (t->cap - 1);
	return i;
}

static int grow(struct jrv_table *t)
{
	struct jrv_table n = { .cap = t->cap ? t->cap * 2 : JRV_MIN_CAP };
	size_t i, k;

	n.blocks = calloc(n.cap, sizeof(*n.blocks));
	n.seqs = calloc(n.cap, sizeof(*n.seqs));
	if (!n.blocks || !n.seqs) {
		free(n.blocks);
		free(n.seqs);
		return -ENOMEM;
	}
	for (i = 0; i < t->cap; i++)
		if (t->blocks[i]) {
			k = find(&n, t->blocks[i]);
			n.blocks[k] = t->blocks[i];
			n.seqs[k] = t->seqs[i];
		}
	n.used = t->used;
	jrv_free(t);
	*t = n;
	return 0;
}

int jrv_add(struct jrv_table *t, uint64_t block, uint32_t seq)
{
	uint64_t key = block + 1;
	size_t i;

	if (!key)
		return 0;	/* no block of any filesystem: nothing to keep from replay */
	if ((t->used + 1) * 2 > t->cap && grow(t))
		return -ENOMEM;
	i = find(t, key);
	if (!t->blocks[i]) {
		t->blocks[i] = key;
		t->seqs[i] = seq;
		t->used++;
	} else if (jrv_tid_after(seq, t->seqs[i])) {
		t->seqs[i] = seq;
	}
	return 0;
}

int jrv_revoked(const struct jrv_table *t, uint64_t block, uint32_t seq)
{
	size_t i;

	if (!t->cap || !(block + 1))
		return 0;
	i = find(t, block + 1);
	return t->blocks[i] && !jrv_tid_after(seq, t->seqs[i]);
}

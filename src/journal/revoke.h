/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The revoke records recovery collects: for each revoked filesystem block,
 * the latest transaction that revoked it.  A block logged in a transaction
 * up to that one must not be replayed (its home may belong to someone else
 * by now); a later transaction's copy is replayed.
 */
#ifndef RRFUSE_JOURNAL_REVOKE_H
#define RRFUSE_JOURNAL_REVOKE_H

#include <stddef.h>
#include <stdint.h>

struct jrv_table {
	uint64_t *blocks;	/* block + 1; 0 is an empty slot */
	uint32_t *seqs;
	size_t cap, used;	/* cap: a power of two */
};

/* Transaction ids wrap around: a is after b when a - b is positive as a signed number. */
static inline int jrv_tid_after(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) > 0;
}

void jrv_init(struct jrv_table *t);
void jrv_free(struct jrv_table *t);
/* Block revoked in transaction seq: 0 or -ENOMEM. */
int jrv_add(struct jrv_table *t, uint64_t block, uint32_t seq);
/* Is block's copy in transaction seq revoked? */
int jrv_revoked(const struct jrv_table *t, uint64_t block, uint32_t seq);

#endif

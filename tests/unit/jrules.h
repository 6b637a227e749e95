/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The journal writer's ordering rules (src/journal/writer.h) as checks on
 * a record of the writes and flushes that reached the device (jtest.h's
 * struct jt_rec), with the test's marks in it: 'L' where jw_log was
 * called, 'R' where it returned 0 (a home write after it is that
 * transaction's), 'C' where jw_close was called.
 *
 * check_rules() holds the rules, on any record:
 *   1, 2  between the flush before a commit block and that block, only
 *         the journal superblock is written (file data, descriptors,
 *         copies and revoke blocks are all durable before the commit);
 *   3     a flush comes right after a commit block, before jw_log returns;
 *   4     every journal superblock write comes after a flush that follows
 *         the last home write before it (the log stops holding a
 *         transaction only once its home writes are durable);
 *   -     when jw_log returns, the durable superblock names that
 *         transaction at its first descriptor (so a crash from then on
 *         replays it);
 *   -     no log write lands on a block of a transaction the durable
 *         superblock still has replayed (the ring never overruns);
 *   -     jw_close ends with a superblock saying "empty", then a flush.
 * It also counts flushes per transaction and the transactions that wrap.
 */
#ifndef RRFUSE_TESTS_JRULES_H
#define RRFUSE_TESTS_JRULES_H

#include "jtest.h"

struct jt_txn {
	unsigned int flushes;	/* between jw_log's call and its return */
	int emptied;		/* the log was said empty first */
	int wrapped;		/* its blocks run from the ring's end to its start */
	uint32_t first;		/* its first descriptor's journal block */
};

struct jt_check {
	uint32_t seq0;		/* the first transaction's id */
	size_t ntxn;
	struct jt_txn *txn;
};

enum jt_what { JW_NONE, JW_SB, JW_DESC, JW_COMMIT, JW_REVOKE, JW_COPY, JW_HOME };
static const char *const jt_what_name[] = { "?", "superblock", "descriptor", "commit", "revoke", "logged copy", "home or file data" };

struct jt_cls {
	enum jt_what what;
	uint32_t seq;		/* SB: s_sequence; log blocks: their transaction; HOME: the one returned last */
	uint32_t start;		/* SB: s_start */
	int64_t logical;	/* journal block, or -1 */
	int homed;		/* HOME: a transaction had returned before it */
};

/* What each recorded event is, by where it went and what it holds. */
static struct jt_cls *classify(const struct jt_rec *r, const struct jnl *j)
{
	struct jt_cls *c = calloc(r->n ? r->n : 1, sizeof(*c));
	uint32_t cur = 0, returned = 0;
	int have_returned = 0;

	ck_assert_ptr_nonnull(c);
	for (size_t i = 0; i < r->n; i++) {
		const struct jt_ev *e = &r->ev[i];

		c[i].logical = -1;
		if (e->kind == JT_MARK && e->mark == 'R') {
			returned = e->arg;
			have_returned = 1;
		}
		if (e->kind != JT_WRITE)
			continue;
		c[i].logical = jt_logical(j, e->blk);
		if (c[i].logical < 0) {
			c[i].what = JW_HOME;
			c[i].seq = returned;
			c[i].homed = have_returned;
		} else if (c[i].logical == 0) {
			const struct jf_superblock *sb = (const void *)e->data;

			c[i].what = JW_SB;
			c[i].seq = be32toh(sb->s_sequence);
			c[i].start = be32toh(sb->s_start);
		} else if (jf_be32_at(e->data) == JF_MAGIC) {
			uint32_t type = jf_be32_at(e->data + 4);

			c[i].seq = jf_be32_at(e->data + 8);
			ck_assert_msg(type == JF_DESCRIPTOR_BLOCK || type == JF_COMMIT_BLOCK || type == JF_REVOKE_BLOCK,
				      "event %zu: journal block %lld of type %u", i, (long long)c[i].logical, type);
			c[i].what = type == JF_DESCRIPTOR_BLOCK ? JW_DESC : type == JF_COMMIT_BLOCK ? JW_COMMIT : JW_REVOKE;
			if (type == JF_DESCRIPTOR_BLOCK)
				cur = c[i].seq;
			ck_assert_msg(c[i].seq == cur, "event %zu: block of transaction %u among those of %u",
				      i, c[i].seq, cur);
		} else {
			/* Not a journal block: a copy, after its descriptor (escaping keeps copies so). */
			c[i].what = JW_COPY;
			c[i].seq = cur;
		}
	}
	return c;
}

static struct jt_txn *txn_of(struct jt_check *k, uint32_t seq)
{
	size_t t = seq - k->seq0;

	ck_assert_msg(t < 4096, "transaction %u before the first (%u)", seq, k->seq0);
	if (t >= k->ntxn) {
		k->txn = realloc(k->txn, (t + 1) * sizeof(*k->txn));
		ck_assert_ptr_nonnull(k->txn);
		memset(k->txn + k->ntxn, 0, (t + 1 - k->ntxn) * sizeof(*k->txn));
		k->ntxn = t + 1;
	}
	return &k->txn[t];
}

/* Index of the last flush before i, or -1. */
static ssize_t flush_before(const struct jt_rec *r, size_t i)
{
	while (i-- > 0)
		if (r->ev[i].kind == JT_FLUSH)
			return (ssize_t)i;
	return -1;
}

/* Index of the superblock write durable at event i (the last before the last flush), or -1. */
static ssize_t durable_sb(const struct jt_rec *r, const struct jt_cls *c, size_t i)
{
	ssize_t f = flush_before(r, i);

	while (f-- > 0)
		if (c[f].what == JW_SB)
			return f;
	return -1;
}

static void check_rules(const struct jt_rec *r, const struct jnl *j, struct jt_check *k)
{
	struct jt_cls *c = classify(r, j);
	/* owner[seq - seq0][journal block]: the transaction wrote that block. */
	unsigned char **owner = NULL;
	size_t nowner = 0, i;
	ssize_t last_home = -1;
	uint32_t open_seq = 0, prev_logical = 0;
	int in_log = 0;

	for (i = 0; i < r->n; i++) {
		const struct jt_ev *e = &r->ev[i];

		if (e->kind == JT_MARK && e->mark == 'L') {
			if (!k->ntxn && !k->txn)
				k->seq0 = e->arg;
			txn_of(k, e->arg);
			open_seq = e->arg;
			in_log = 1;
			prev_logical = 0;
		} else if (e->kind == JT_MARK && e->mark == 'R') {
			struct jt_txn *t = txn_of(k, e->arg);
			ssize_t s = durable_sb(r, c, i);

			in_log = 0;
			ck_assert_msg(s >= 0, "transaction %u: jw_log returned with no superblock durable", e->arg);
			ck_assert_msg(c[s].seq == e->arg && c[s].start == t->first,
				      "transaction %u: jw_log returned with the durable superblock naming %u at block %u, "
				      "not it at block %u", e->arg, c[s].seq, c[s].start, t->first);
		} else if (e->kind == JT_FLUSH && in_log) {
			txn_of(k, open_seq)->flushes++;
		}
		if (e->kind != JT_WRITE)
			continue;
		switch (c[i].what) {
		case JW_HOME:
			/* After a transaction returned (before the first one, only file data is written). */
			if (c[i].homed)
				last_home = (ssize_t)i;
			break;
		case JW_SB:
			/* Rule 4: what was written home before this is durable before it. */
			if (last_home >= 0)
				ck_assert_msg(flush_before(r, i) > last_home,
					      "rule 4: journal superblock (sequence %u, start %u) written at event %zu "
					      "before a flush after the home write at event %zd",
					      c[i].seq, c[i].start, i, last_home);
			if (in_log && !c[i].start)
				txn_of(k, open_seq)->emptied = 1;
			break;
		case JW_COMMIT: {
			ssize_t f = flush_before(r, i);

			/* Rules 1 and 2: nothing but the superblock between the last flush and the commit. */
			ck_assert_msg(f >= 0, "rule 2: commit of transaction %u with no flush before it", c[i].seq);
			for (ssize_t x = f + 1; x < (ssize_t)i; x++)
				ck_assert_msg(r->ev[x].kind != JT_WRITE || c[x].what == JW_SB,
					      "rules 1-2: block %llu (%s) written at event %zd after the last flush "
					      "before the commit of transaction %u (event %zu)",
					      (unsigned long long)r->ev[x].blk, jt_what_name[c[x].what], x, c[i].seq, i);
			/* Rule 3: the commit durable before jw_log returns, so before any home write. */
			ck_assert_msg(i + 1 < r->n && r->ev[i + 1].kind == JT_FLUSH,
				      "rule 3: no flush right after the commit of transaction %u (event %zu)",
				      c[i].seq, i);
		}
			/* fall through */
		case JW_DESC:
		case JW_REVOKE:
		case JW_COPY: {
			struct jt_txn *t = txn_of(k, c[i].seq);
			uint32_t l = (uint32_t)c[i].logical;
			ssize_t s = durable_sb(r, c, i);
			size_t x = c[i].seq - k->seq0;

			ck_assert_msg(in_log && c[i].seq == open_seq, "log block of transaction %u written outside its jw_log",
				      c[i].seq);
			ck_assert_msg(l >= j->first && l < j->last, "log block %u outside the ring [%u, %u)", l,
				      j->first, j->last);
			if (c[i].what == JW_DESC && !t->first)
				t->first = l;
			if (prev_logical && l < prev_logical)
				t->wrapped = 1;
			prev_logical = l;
			/* The ring: no block of a transaction a replay would still read is overwritten. */
			if (s >= 0 && c[s].start)
				for (uint32_t y = c[s].seq; y != c[i].seq; y++)
					ck_assert_msg(y - k->seq0 >= nowner || !owner[y - k->seq0][l],
						      "log block %u of transaction %u overwrites one of transaction %u, "
						      "which the durable superblock still has replayed", l, c[i].seq, y);
			if (x >= nowner) {
				owner = realloc(owner, (x + 1) * sizeof(*owner));
				ck_assert_ptr_nonnull(owner);
				for (; nowner <= x; nowner++) {
					owner[nowner] = calloc(j->maxlen, 1);
					ck_assert_ptr_nonnull(owner[nowner]);
				}
			}
			owner[x][l] = 1;
			break;
		}
		default:
			break;
		}
	}
	for (i = 0; i < nowner; i++)
		free(owner[i]);
	free(owner);
	free(c);
}

/* jw_close's end: a superblock saying the log is empty, then a flush, last of all. */
static void check_closed(const struct jt_rec *r, const struct jnl *j, uint32_t next_seq)
{
	ssize_t s = -1;

	ck_assert_msg(r->n && r->ev[r->n - 1].kind == JT_FLUSH, "jw_close did not end with a flush");
	for (size_t i = 0; i < r->n; i++)
		if (r->ev[i].kind == JT_WRITE && jt_logical(j, r->ev[i].blk) == 0)
			s = (ssize_t)i;
	ck_assert_msg(s >= 0, "jw_close wrote no superblock");
	{
		const struct jf_superblock *sb = (const void *)r->ev[s].data;

		ck_assert_msg(!sb->s_start && be32toh(sb->s_sequence) == next_seq,
			      "jw_close left the superblock at start %u, sequence %u (next %u)",
			      be32toh(sb->s_start), be32toh(sb->s_sequence), next_seq);
	}
}

#endif

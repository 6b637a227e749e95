// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests: the journal writer's ordering rules (src/journal/writer.h),
 * checked on the sequence of writes and flushes it sends down, recorded by
 * a channel of the test's own (jtest.h) over a small image's device.  The
 * test plays the metadata cache's part: it calls jw_log, writes the
 * blocks home once it returned, calls jw_checkpointed, and marks each of
 * those points in the record, so that the checks can say which
 * transaction a home write belongs to and what the writer had done by the
 * time jw_log returned.
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
static const char *const jt_what_name[] = { "?", "superblock", "descriptor", "commit", "revoke", "logged copy", "home" };

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

struct jt_env {
	char path[64];
	ext2_filsys fs;
	io_channel rec;
	struct jnl map;		/* the journal's map and geometry, for the checks */
	struct jw *w;
	blk64_t base;		/* free blocks for the transactions' homes */
	unsigned int nblk;
	unsigned char **buf;
};

static void env_open(struct jt_env *v, const char *mkfs, unsigned int nblk)
{
	char msg[256];

	v->fs = jt_image(v->path, mkfs);
	ck_assert_msg(!jnl_open(v->fs, &v->map, msg, sizeof(msg)), "%s", msg);
	v->rec = jt_rec_new(v->fs);
	ck_assert_msg(!jw_open(v->fs, v->rec, &v->w, msg, sizeof(msg)), "jw_open: %s", msg);
	v->nblk = nblk;
	v->base = jt_free_run(v->fs, nblk);
	v->buf = calloc(nblk, sizeof(*v->buf));
	for (unsigned int i = 0; i < nblk; i++)
		v->buf[i] = malloc(v->fs->blocksize);
}

/*
 * One transaction as the cache makes one: n blocks from the first+k*step,
 * logged, then written home, then jw_checkpointed; the record marked.
 * jw_log's result.
 */
static int txn(struct jt_env *v, unsigned int first, unsigned int n, unsigned int version, int home)
{
	blk64_t *blks = calloc(n, sizeof(*blks));
	const unsigned char **data = calloc(n, sizeof(*data));
	uint64_t count;
	uint32_t seq;
	int ret;

	jw_stats(v->w, &count, &seq);
	for (unsigned int i = 0; i < n; i++) {
		unsigned int k = (first + i) % v->nblk;

		blks[i] = v->base + k;
		jt_fill(v->buf[k], v->fs->blocksize, blks[i], version);
		data[i] = v->buf[k];
	}
	jt_mark(v->rec, 'L', seq);
	ret = jw_log(v->w, n, blks, data);
	if (!ret) {
		jt_mark(v->rec, 'R', seq);
		for (unsigned int i = 0; home && i < n; i++)
			ck_assert_int_eq(io_channel_write_blk64(v->rec, blks[i], 1, data[i]), 0);
		ck_assert_int_eq(jw_checkpointed(v->w), 0);
	}
	free(blks);
	free(data);
	return ret;
}

static void env_close(struct jt_env *v, struct jt_check *k, int fsck)
{
	uint64_t count;
	uint32_t next;

	jw_stats(v->w, &count, &next);
	jt_mark(v->rec, 'C', next);
	ck_assert_int_eq(jw_close(v->w), 0);
	check_rules(v->rec->private_data, &v->map, k);
	check_closed(v->rec->private_data, &v->map, next);
	jnl_close(&v->map);
	jt_rec_free(v->rec);
	for (unsigned int i = 0; i < v->nblk; i++)
		free(v->buf[i]);
	free(v->buf);
	ck_assert_int_eq(ext2fs_close_free(&v->fs), 0);
	if (fsck)
		ck_assert_msg(jt_fsck(v->path) == 0, "e2fsck -fn %s is not clean", v->path);
	unlink(v->path);
}

/* Transactions of a tenth of the ring: two flushes each, none empties the log, the ring wraps. */
START_TEST(steady_state_wraps)
{
	static const unsigned int sizes[] = { 1, 5, 61, 62, 63, 100, 124, 125, 126, 90, 110, 120, 3, 130, 77 };
	struct jt_env v = { 0 };
	struct jt_check k = { 0 };
	unsigned int at = 0, wrapped = 0;
	size_t t, n = sizeof(sizes) / sizeof(sizes[0]);

	env_open(&v, JT_MKFS, 512);
	for (t = 0; t < n; t++) {
		ck_assert_int_eq(txn(&v, at, sizes[t], (unsigned int)t + 1, 1), 0);
		at += sizes[t];
	}
	env_close(&v, &k, 1);
	ck_assert_uint_eq(k.ntxn, n);
	for (t = 0; t < n; t++) {
		ck_assert_msg(k.txn[t].flushes == 2, "transaction %zu (%u blocks): %u flushes, not 2", t, sizes[t],
			      k.txn[t].flushes);
		ck_assert(!k.txn[t].emptied);
		wrapped += k.txn[t].wrapped;
	}
	ck_assert_msg(wrapped >= 1, "no transaction wrapped round the ring");
	free(k.txn);
}
END_TEST

/* The same without checksums and 64-bit tags (8-byte tags, no tails): the rules do not change. */
START_TEST(steady_state_plain)
{
	struct jt_env v = { 0 };
	struct jt_check k = { 0 };
	unsigned int at = 0, wrapped = 0;

	env_open(&v, JT_MKFS " -O ^metadata_csum,^64bit", 512);
	for (unsigned int t = 0; t < 10; t++, at += 150)
		ck_assert_int_eq(txn(&v, at, 150, t + 1, 1), 0);
	env_close(&v, &k, 1);
	for (size_t t = 0; t < k.ntxn; t++) {
		ck_assert_uint_eq(k.txn[t].flushes, 2);
		wrapped += k.txn[t].wrapped;
	}
	ck_assert(wrapped >= 1);
	free(k.txn);
}
END_TEST

/*
 * Transactions near the journal's capacity: each would reach the live one,
 * so the log is emptied first (a flush, the superblock, a flush) and then
 * written as usual: four flushes.  One over capacity is refused unwritten.
 */
START_TEST(near_capacity)
{
	struct jt_env v = { 0 };
	struct jt_check k = { 0 };
	size_t cap;

	env_open(&v, JT_MKFS, 1100);
	cap = jw_capacity(v.w);
	ck_assert_uint_gt(cap, 900);
	ck_assert_uint_lt(cap, v.map.last - v.map.first);
	ck_assert_int_eq(txn(&v, 0, (unsigned int)cap, 1, 1), 0);
	ck_assert_int_eq(txn(&v, 7, (unsigned int)cap, 2, 1), 0);
	ck_assert_int_eq(txn(&v, 3, (unsigned int)cap - 1, 3, 1), 0);
	{
		size_t before = ((struct jt_rec *)v.rec->private_data)->n;
		blk64_t b[1] = { v.base };

		ck_assert_int_eq(jw_log(v.w, cap + 1, b, NULL), -EFBIG);
		ck_assert_uint_eq(((struct jt_rec *)v.rec->private_data)->n, before);
	}
	ck_assert_int_eq(txn(&v, 0, 10, 4, 1), 0);
	env_close(&v, &k, 1);
	ck_assert_uint_eq(k.ntxn, 4);
	ck_assert_uint_eq(k.txn[0].flushes, 2);		/* over the empty log of jw_open */
	ck_assert(!k.txn[0].emptied);
	ck_assert_uint_eq(k.txn[1].flushes, 4);
	ck_assert(k.txn[1].emptied);
	ck_assert_uint_eq(k.txn[2].flushes, 4);
	ck_assert(k.txn[2].emptied);
	/* Ten blocks after one of capacity-1: they wrap, or fit, but never need the log emptied. */
	ck_assert_uint_eq(k.txn[3].flushes, 4 - 2 * !k.txn[3].emptied);
	free(k.txn);
}
END_TEST

/* A transaction that frees blocks the live one logged: its revoke blocks are log blocks like the rest. */
START_TEST(revokes_ordered)
{
	struct jt_env v = { 0 };
	struct jt_check k = { 0 };
	struct jt_rec *r;
	size_t revoke_blocks = 0;

	env_open(&v, JT_MKFS, 600);
	r = v.rec->private_data;
	ck_assert_int_eq(txn(&v, 0, 300, 1, 1), 0);
	/* Every block of the live transaction freed: 300 records, three revoke blocks of 1 KiB (125 8-byte records each). */
	jw_revoke(v.w, v.base, 300);
	ck_assert_int_eq(txn(&v, 300, 20, 2, 1), 0);
	for (size_t i = 0; i < r->n; i++)
		if (r->ev[i].kind == JT_WRITE && jt_logical(&v.map, r->ev[i].blk) > 0 &&
		    jf_be32_at(r->ev[i].data) == JF_MAGIC && jf_be32_at(r->ev[i].data + 4) == JF_REVOKE_BLOCK)
			revoke_blocks++;
	ck_assert_uint_eq(revoke_blocks, 3);
	/* The next transaction revokes nothing: the one it follows freed nothing. */
	ck_assert_int_eq(txn(&v, 400, 20, 3, 1), 0);
	env_close(&v, &k, 1);
	for (size_t t = 0; t < k.ntxn; t++)
		ck_assert_uint_eq(k.txn[t].flushes, 2);
	free(k.txn);
}
END_TEST

/* A flush that fails: jw_log says -EIO, nothing goes home, the writer refuses every later transaction. */
START_TEST(flush_error_aborts)
{
	struct jt_env v = { 0 };
	struct jt_rec *r;
	size_t before;

	env_open(&v, JT_MKFS, 64);
	r = v.rec->private_data;
	ck_assert_int_eq(txn(&v, 0, 10, 1, 1), 0);
	r->fail_flush = 1;
	ck_assert_int_eq(txn(&v, 10, 10, 2, 1), -EIO);
	r->fail_flush = 0;
	before = r->n;
	ck_assert_int_eq(txn(&v, 20, 10, 3, 1), -EIO);
	ck_assert_int_eq(jw_checkpointed(v.w), -EIO);
	/* Only the test's mark: the writer wrote nothing. */
	ck_assert_uint_eq(r->n, before + 1);
	/* Aborted, jw_close leaves the log as it is (a replay's business). */
	ck_assert_int_eq(jw_close(v.w), 0);
	ck_assert_uint_eq(r->n, before + 1);
	jnl_close(&v.map);
	jt_rec_free(v.rec);
	for (unsigned int i = 0; i < v.nblk; i++)
		free(v.buf[i]);
	free(v.buf);
	ext2fs_close_free(&v.fs);
	unlink(v.path);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("jwriter");
	TCase *tc = tcase_create("rules");

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, NULL, jt_cleanup);
	tcase_add_test(tc, steady_state_wraps);
	tcase_add_test(tc, steady_state_plain);
	tcase_add_test(tc, near_capacity);
	tcase_add_test(tc, revokes_ordered);
	tcase_add_test(tc, flush_error_aborts);
	suite_add_tcase(s, tc);
	return unit_run(s);
}

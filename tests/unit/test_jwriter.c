// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests: the journal writer's ordering rules (src/journal/writer.h),
 * checked (jrules.h) on the sequence of writes and flushes it sends down,
 * recorded by a channel of the test's own (jtest.h) over a small image's
 * device.  The test plays the metadata cache's part: it calls jw_log,
 * writes the blocks home once it returned, calls jw_checkpointed, and
 * marks each of those points in the record, so that the checks can say
 * which transaction a home write belongs to and what the writer had done
 * by the time jw_log returned.  test_jstack.c runs the same checks under
 * the real metadata cache.
 */
#include "jrules.h"

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
	v->base = jt_free_run(v->fs, nblk + 1);
	v->buf = calloc(nblk + 1, sizeof(*v->buf));
	for (unsigned int i = 0; i <= nblk; i++)
		v->buf[i] = malloc(v->fs->blocksize);
}

/*
 * One transaction as a commit makes one: a block of file data written
 * first (the data path's, rule 1), then n of the homes from first on
 * (round the nblk of them) logged at version, written home (when home is
 * set), jw_checkpointed; the record marked.  jw_log's result.
 */
static int txn(struct jt_env *v, unsigned int first, unsigned int n, unsigned int version, int home)
{
	blk64_t *blks = calloc(n, sizeof(*blks));
	const unsigned char **data = calloc(n, sizeof(*data));
	uint64_t count;
	uint32_t seq;
	int ret;

	jw_stats(v->w, &count, &seq);
	/* File data, in the block after the homes: durable with the log blocks, before the commit. */
	jt_fill(v->buf[v->nblk], v->fs->blocksize, v->base + v->nblk, version);
	ck_assert_int_eq(io_channel_write_blk64(v->rec, v->base + v->nblk, 1, v->buf[v->nblk]), 0);
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
	for (unsigned int i = 0; i <= v->nblk; i++)
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
	/* Only the test's own: its file data and its mark; the writer wrote nothing. */
	ck_assert_uint_eq(r->n, before + 2);
	/* Aborted, jw_close leaves the log as it is (a replay's business). */
	ck_assert_int_eq(jw_close(v.w), 0);
	ck_assert_uint_eq(r->n, before + 2);
	jnl_close(&v.map);
	jt_rec_free(v.rec);
	for (unsigned int i = 0; i <= v.nblk; i++)
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

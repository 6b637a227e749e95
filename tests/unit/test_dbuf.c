// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests: the delayed-allocation buffer (src/data/dbuf.c) against a plain
 * byte array that models a file's holes, through random writes, reads,
 * truncates and flushes of its front run; plus the run shapes the flush
 * relies on (a file written in order is one run) and the space promised
 * (dbuf_missing, dbuf_prefix).
 */
#include "unit.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "dbuf.h"

#define BB 10			/* 1 KiB blocks: small, so runs meet often */
#define BS (1u << BB)
#define NBLK 96

/* The model: bytes, and which blocks are held. */
struct model {
	char bytes[NBLK * BS];
	char held[NBLK];
};

static uint64_t held_blocks(const struct model *m)
{
	uint64_t n = 0;
	int i;

	for (i = 0; i < NBLK; i++)
		n += m->held[i];
	return n;
}

static void check_same(const struct rr_dbuf *d, const struct model *m)
{
	static char got[NBLK * BS];
	uint32_t i;

	ck_assert_uint_eq(atomic_load(&d->blocks), held_blocks(m));
	dbuf_read(d, BB, 0, got, sizeof(got));
	ck_assert(!memcmp(got, m->bytes, sizeof(got)));
	/* Sorted, apart, sized. */
	for (i = 0; i < d->cnt; i++) {
		ck_assert_uint_ge(d->v[i].mapped, (size_t)d->v[i].n << BB);
		ck_assert_uint_ge(d->v[i].hw, d->v[i].n);
		ck_assert_uint_gt(d->v[i].n, 0);
		if (i)
			ck_assert_uint_gt(d->v[i].lblk, d->v[i - 1].lblk + d->v[i - 1].n);
	}
	for (i = 0; i < NBLK; i++)
		ck_assert_uint_eq(dbuf_missing(d, i, 1), !m->held[i]);
}

START_TEST(random_against_model)
{
	static struct model m;
	struct rr_dbuf d = { 0 };
	int step;

	srand(20261203 + (unsigned int)_i);
	memset(&m, 0, sizeof(m));
	for (step = 0; step < 3000; step++) {
		int op = rand() % 10;

		if (op < 6) {
			uint64_t pos = (uint64_t)(rand() % (NBLK * BS - 1));
			uint64_t len = 1 + (uint64_t)(rand() % (int)(op < 3 ? 2 * BS : 12 * BS));
			char src[12 * BS];
			uint64_t b;

			if (pos + len > NBLK * BS)
				len = NBLK * BS - pos;
			for (b = 0; b < len; b++)
				src[b] = (char)(rand() | 1);
			ck_assert_int_eq(dbuf_write(&d, BB, pos, src, len), 0);
			memcpy(m.bytes + pos, src, len);
			for (b = pos / BS; b <= (pos + len - 1) / BS; b++)
				m.held[b] = 1;
		} else if (op < 8) {
			uint64_t size = (uint64_t)(rand() % (NBLK * BS)), keep = (size + BS - 1) / BS, b;
			uint64_t before = held_blocks(&m), dropped;

			dropped = dbuf_truncate(&d, BB, size);
			memset(m.bytes + size, 0, sizeof(m.bytes) - size);
			for (b = keep; b < NBLK; b++)
				m.held[b] = 0;
			ck_assert_uint_eq(dropped, before - held_blocks(&m));
		} else if (d.cnt) {
			/* A flush of part of the first run: those bytes are on disk, holes no more. */
			uint32_t n = 1 + (uint32_t)rand() % d.v[0].n;
			uint64_t b, s = d.v[0].lblk;

			dbuf_consume(&d, BB, 0, n);
			for (b = s; b < s + n; b++) {
				m.held[b] = 0;
				memset(m.bytes + b * BS, 0, BS);
			}
		}
		check_same(&d, &m);
	}
	ck_assert_uint_eq(dbuf_clear(&d), held_blocks(&m));
	ck_assert_uint_eq(d.cnt, 0);
}
END_TEST

START_TEST(in_order_is_one_run)
{
	struct rr_dbuf d = { 0 };
	char page[4096];
	uint64_t off;

	memset(page, 7, sizeof(page));
	for (off = 0; off < (8u << 20); off += sizeof(page))
		ck_assert_int_eq(dbuf_write(&d, 12, off, page, sizeof(page)), 0);
	ck_assert_uint_eq(d.cnt, 1);
	ck_assert_uint_eq(d.v[0].lblk, 0);
	ck_assert_uint_eq(d.v[0].n, 2048);
	/* Backwards, two files' pages interleaved into one buffer: still one run each side. */
	ck_assert_int_eq(dbuf_write(&d, 12, 20u << 20, page, 4096), 0);
	ck_assert_int_eq(dbuf_write(&d, 12, (20u << 20) - 4096, page, 4096), 0);
	ck_assert_uint_eq(d.cnt, 2);
	ck_assert_uint_eq(d.v[1].n, 2);
	/* Filling the gap joins them. */
	ck_assert_int_eq(dbuf_write(&d, 12, 8u << 20, page, 4096), 0);
	ck_assert_uint_eq(d.cnt, 2);
	{
		static char big[(12u << 20) - 4096];

		memset(big, 1, sizeof(big));
		ck_assert_int_eq(dbuf_write(&d, 12, (8u << 20) + 4096, big, sizeof(big)), 0);
	}
	ck_assert_uint_eq(d.cnt, 1);
	ck_assert_uint_eq(atomic_load(&d.blocks), 5121);	/* blocks 0 .. 5120 */
	dbuf_clear(&d);
}
END_TEST

/*
 * The kernel writes a file back in several requests at once, which arrive
 * out of order: a gap filled later joins the runs into the first one in
 * place (its mapping is not copied), and a big run consumed from its front
 * hands whole pages back without moving the rest.
 */
START_TEST(out_of_order_joins_in_place)
{
	struct rr_dbuf d = { 0 };
	static char mib[1u << 20];
	char *first;
	uint64_t k, order[] = { 0, 2, 1, 4, 3, 6, 5, 7 };

	for (k = 0; k < 8; k++) {
		memset(mib, (int)order[k] + 1, sizeof(mib));
		ck_assert_int_eq(dbuf_write(&d, 12, order[k] << 20, mib, sizeof(mib)), 0);
		if (k == 0)
			ck_assert_int_eq(dbuf_write(&d, 12, 8u << 20, mib, 4096), 0);	/* grows the mapping */
	}
	ck_assert_uint_eq(d.cnt, 1);
	ck_assert_uint_eq(d.v[0].n, 2049);
	first = d.v[0].buf;
	memset(mib, 9, sizeof(mib));
	ck_assert_int_eq(dbuf_write(&d, 12, (8u << 20) + 4096, mib, 4096), 0);
	ck_assert_ptr_eq(d.v[0].buf, first);
	dbuf_consume(&d, 12, 0, 512);
	ck_assert_ptr_eq(d.v[0].buf, first + (2u << 20));
	ck_assert_uint_eq(d.v[0].lblk, 512);
	dbuf_read(&d, 12, 2u << 20, mib, sizeof(mib));
	ck_assert_int_eq(mib[0], 3);
	ck_assert_int_eq(mib[sizeof(mib) - 1], 3);
	dbuf_read(&d, 12, 7u << 20, mib, sizeof(mib));
	ck_assert_int_eq(mib[0], 8);
	ck_assert_uint_eq(atomic_load(&d.blocks), 2050 - 512);
	dbuf_clear(&d);
}
END_TEST

START_TEST(promise_and_prefix)
{
	struct rr_dbuf d = { 0 };
	char b[BS] = { 1 };

	/* Held: 10..19 and 30..34. */
	ck_assert_int_eq(dbuf_write(&d, BB, 10 * BS, b, 1), 0);
	ck_assert_int_eq(dbuf_truncate(&d, BB, 11 * BS), 0);
	{
		static char ten[10 * BS], five[5 * BS];

		ck_assert_int_eq(dbuf_write(&d, BB, 10 * BS, ten, sizeof(ten)), 0);
		ck_assert_int_eq(dbuf_write(&d, BB, 30 * BS, five, sizeof(five)), 0);
	}
	ck_assert_uint_eq(dbuf_missing(&d, 0, 40), 40 - 15);
	ck_assert_uint_eq(dbuf_missing(&d, 12, 5), 0);
	ck_assert_uint_eq(dbuf_missing(&d, 15, 20), 10);
	/* With 5 blocks to promise from 0: 0..4, then 5..9 would need more. */
	ck_assert_uint_eq(dbuf_prefix(&d, 0, 40, 5), 5);
	/* With 10: 0..9 and the held 10..19 come free. */
	ck_assert_uint_eq(dbuf_prefix(&d, 0, 40, 10), 20);
	ck_assert_uint_eq(dbuf_prefix(&d, 0, 40, 12), 22);
	ck_assert_uint_eq(dbuf_prefix(&d, 0, 40, 25), 40);
	ck_assert_uint_eq(dbuf_prefix(&d, 12, 3, 0), 3);
	ck_assert_uint_eq(dbuf_prefix(&d, 20, 5, 0), 0);
	dbuf_clear(&d);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("dbuf");
	TCase *tc = tcase_create("dbuf");

	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, random_against_model, 0, 4);
	tcase_add_test(tc, in_order_is_one_run);
	tcase_add_test(tc, out_of_order_joins_in_place);
	tcase_add_test(tc, promise_and_prefix);
	suite_add_tcase(s, tc);
	return unit_run(s);
}

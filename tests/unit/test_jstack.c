// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests: the journal writer under rrfuse's own I/O stack (io/layer.h),
 * as the mount wires it (src/core/journaling.c): the metadata cache (cache.c)
 * over fault injection (fail.c) over the write recorder (record.c) over
 * the device (dev.c), the writer as the cache's write-back hook.  The
 * test dirties blocks through the cache and flushes it, as commits do;
 * the recorder's file is read back and held to the same rules as
 * test_jwriter.c's record (jrules.h).  So the cache's part is checked
 * too: nothing home before jw_log returned, write-backs larger than a
 * transaction cut in several, and a journal write that fails sends
 * nothing home.
 *
 * The marks the checks need ('L', 'R', 'C') cannot go into the
 * recorder's file; each is kept with the file's size when it was made
 * (the recorder appends each write when it has returned, under a lock) and
 * put back in place when the file is read.
 */
#include "jrules.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "cache.h"
#include "layer.h"
#include "record.h"

struct js_mark {
	off_t pos;
	int mark;
	uint32_t arg;
};

struct js_env {
	char path[64], rec[96], pre[96];
	ext2_filsys fs;
	struct jnl map;
	struct jw *w;
	blk64_t base;
	unsigned int nblk;
	struct js_mark marks[64];
	size_t nmarks;
	uint64_t too_big;
	int log_failures;
};

static void js_mark(struct js_env *v, int mark, uint32_t arg)
{
	struct stat st;

	ck_assert_uint_lt(v->nmarks, sizeof(v->marks) / sizeof(v->marks[0]));
	ck_assert_int_eq(stat(v->rec, &st), 0);
	v->marks[v->nmarks++] = (struct js_mark){ st.st_size, mark, arg };
}

/* The cache's hooks, as src/core/journaling.c's, with the marks. */
static int cb_log(void *arg, size_t n, const blk64_t *blks, const unsigned char *const *data)
{
	struct js_env *v = arg;
	uint64_t count;
	uint32_t seq;
	int ret;

	jw_stats(v->w, &count, &seq);
	js_mark(v, 'L', seq);
	ret = jw_log(v->w, n, blks, data);
	if (ret)
		v->log_failures++;
	else
		js_mark(v, 'R', seq);
	return ret;
}

static int cb_checkpointed(void *arg)
{
	return jw_checkpointed(((struct js_env *)arg)->w);
}

static void cb_abort(void *arg)
{
	jw_abort(((struct js_env *)arg)->w);
}

static void cb_too_big(void *arg, size_t n)
{
	(void)n;
	((struct js_env *)arg)->too_big++;
}

/* The image opened through the whole stack (faults: RRFUSE_IO_FAIL's value, or NULL), the journal on. */
static void js_open(struct js_env *v, unsigned int nblk, const char *faults)
{
	ext2_filsys fs;
	struct io_cache_journal cj;
	char msg[256];

	memset(v, 0, sizeof(*v));
	fs = jt_image(v->path, JT_MKFS);
	v->nblk = nblk;
	v->base = jt_free_run(fs, nblk);
	ck_assert_int_eq(ext2fs_close_free(&fs), 0);
	/* The image before the mount: crash states are rebuilt from it. */
	snprintf(v->pre, sizeof(v->pre), "%.64s.pre", v->path);
	jt_track(v->pre);
	{
		char cmd[256];

		snprintf(cmd, sizeof(cmd), "cp --sparse=always %s %s", v->path, v->pre);
		ck_assert_int_eq(system(cmd), 0);
	}
	snprintf(v->rec, sizeof(v->rec), "%.64s.rec", v->path);
	jt_track(v->rec);
	/* Read by the managers' open only. */
	setenv("RRFUSE_IO_RECORD", v->rec, 1);
	if (faults)
		setenv("RRFUSE_IO_FAIL", faults, 1);
	ck_assert_int_eq(ext2fs_open2(v->path, NULL, EXT2_FLAG_RW | EXT2_FLAG_64BITS, 0, 0, rr_cache_io_manager,
				      &v->fs), 0);
	unsetenv("RRFUSE_IO_RECORD");
	unsetenv("RRFUSE_IO_FAIL");
	ck_assert_msg(!jnl_open(v->fs, &v->map, msg, sizeof(msg)), "%s", msg);
	ck_assert_msg(!jw_open(v->fs, io_cache_lower(v->fs->io), &v->w, msg, sizeof(msg)), "jw_open: %s", msg);
	cj = (struct io_cache_journal){
		.log = cb_log, .checkpointed = cb_checkpointed, .abort = cb_abort, .too_big = cb_too_big,
		.arg = v, .capacity = jw_capacity(v->w), .want = jw_capacity(v->w) / 2,
	};
	ck_assert_int_eq(io_cache_set_journal(v->fs->io, &cj), 0);
}

/* Blocks [k0, k0+n) of the homes dirtied at version ver in the cache, then a flush (a commit). */
static errcode_t js_commit(struct js_env *v, unsigned int k0, unsigned int n, unsigned int ver)
{
	unsigned char *buf = malloc(v->fs->blocksize);

	for (unsigned int i = 0; i < n; i++) {
		blk64_t b = v->base + (k0 + i) % v->nblk;

		jt_fill(buf, v->fs->blocksize, b, ver);
		ck_assert_int_eq(io_channel_write_blk64(v->fs->io, b, 1, buf), 0);
	}
	free(buf);
	return io_channel_flush(v->fs->io);
}

/* The recorder's file as a struct jt_rec, the marks put back where they were made. */
static void js_read_record(struct js_env *v, struct jt_rec *r)
{
	int fd = open(v->rec, O_RDONLY);
	char magic[8];
	struct rr_rec h;
	size_t m = 0;
	off_t pos = sizeof(magic);

	memset(r, 0, sizeof(*r));
	r->bsize = v->fs ? v->fs->blocksize : 1024;
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(read(fd, magic, sizeof(magic)), sizeof(magic));
	ck_assert_mem_eq(magic, RR_REC_MAGIC, sizeof(magic));
	for (;;) {
		ssize_t got;

		for (; m < v->nmarks && v->marks[m].pos <= pos; m++) {
			struct jt_ev *e = jt_push(r, JT_MARK);

			e->mark = v->marks[m].mark;
			e->arg = v->marks[m].arg;
		}
		got = read(fd, &h, sizeof(h));
		if (!got)
			break;
		ck_assert_int_eq(got, sizeof(h));
		pos += sizeof(h);
		if (h.type == RR_REC_FLUSH) {
			jt_push(r, JT_FLUSH);
			continue;
		}
		/* Metadata only here, in whole blocks: no file data, no zeroing or discard. */
		ck_assert_int_eq(h.type, RR_REC_WRITE);
		ck_assert_uint_eq(h.off % r->bsize, 0);
		ck_assert_uint_eq(h.len % r->bsize, 0);
		for (uint64_t o = 0; o < h.len; o += r->bsize) {
			struct jt_ev *e = jt_push(r, JT_WRITE);

			e->blk = (h.off + o) / r->bsize;
			e->data = malloc(r->bsize);
			ck_assert_int_eq(read(fd, e->data, r->bsize), (ssize_t)r->bsize);
		}
		pos += (off_t)h.len;
	}
	close(fd);
}

static void js_free_record(struct jt_rec *r)
{
	for (size_t i = 0; i < r->n; i++)
		free(r->ev[i].data);
	free(r->ev);
}

/*
 * Commits of every size up to past a transaction's, through the stack;
 * the recorder's file read back into r (the caller frees it, js_done
 * closes the rest).  The transactions' count and the id after them.
 */
static void js_workload(struct js_env *v, struct jt_rec *r, uint64_t *transactions, uint32_t *next)
{
	static const unsigned int sizes[] = { 1, 40, 200, 300, 250, 280, 10 };
	struct io_cache_stats st;
	unsigned int at = 0, ver = 1;
	uint64_t count;
	size_t cap;

	js_open(v, 1400, NULL);
	cap = jw_capacity(v->w);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); at += sizes[i++])
		ck_assert_int_eq(js_commit(v, at, sizes[i], ver++), 0);
	/* More dirty blocks than a transaction holds: two transactions, no longer atomic. */
	ck_assert_int_eq(js_commit(v, 0, (unsigned int)cap + 100, ver++), 0);
	ck_assert_uint_eq(v->too_big, 1);
	ck_assert_int_eq(io_cache_stats(v->fs->io, &st), 0);
	ck_assert_uint_eq(st.split, 1);
	ck_assert_uint_eq(st.transactions, sizeof(sizes) / sizeof(sizes[0]) + 2);
	*transactions = st.transactions;
	ck_assert_int_eq(io_cache_set_journal(v->fs->io, NULL), 0);
	jw_stats(v->w, &count, next);
	js_mark(v, 'C', *next);
	ck_assert_int_eq(jw_close(v->w), 0);
	js_read_record(v, r);
}

static void js_done(struct js_env *v)
{
	jnl_close(&v->map);
	ck_assert_int_eq(ext2fs_close_free(&v->fs), 0);
}

/* The rules hold on what reached the device; the ring wraps; the big write-back is two transactions. */
START_TEST(cache_writeback_rules)
{
	struct js_env v;
	struct jt_check k = { 0 };
	struct jt_rec r;
	uint64_t transactions;
	uint32_t next;
	unsigned int wrapped = 0;

	js_workload(&v, &r, &transactions, &next);
	check_rules(&r, &v.map, &k);
	check_closed(&r, &v.map, next);
	ck_assert_uint_eq(k.ntxn, transactions);
	for (size_t t = 0; t < k.ntxn; t++) {
		/* The two halves of the big one: the second reaches the first, so the log is emptied first. */
		ck_assert_msg(k.txn[t].flushes == (k.txn[t].emptied ? 4U : 2U), "transaction %zu: %u flushes", t,
			      k.txn[t].flushes);
		wrapped += k.txn[t].wrapped;
	}
	ck_assert(wrapped >= 1);
	js_free_record(&r);
	free(k.txn);
	js_done(&v);
	ck_assert_int_eq(jt_fsck(v.path), 0);
}
END_TEST

/* Which writes after the last durable flush a crash state keeps (the device may have done any of them). */
enum js_keep {
	JS_NONE,	/* none: the durable state alone */
	JS_META,	/* the journal's own blocks (superblock, descriptors, revokes, commits), no copies, no homes */
	JS_DATA,	/* the logged copies and home writes, none of the journal's own */
};

static int js_kept(const struct js_env *v, const struct jt_ev *e, enum js_keep keep)
{
	int64_t l = jt_logical(&v->map, e->blk);
	int meta = l == 0 || (l > 0 && jf_be32_at(e->data) == JF_MAGIC);

	return keep == JS_META ? meta : keep == JS_DATA ? !meta : 0;
}

/*
 * The state a power cut leaves when the device made durable every write
 * before event f (a flush, or the record's start) and, of those from it up
 * to event to (the next flush, or the record's end), the ones keep names: rebuilt from the image before the
 * mount, then needs_recovery and jr_recover.  Each home must then hold its
 * copy from the last transaction whose commit block the state has (or
 * what it held before the mount), and, when fsck, e2fsck find the image
 * clean.  A copy is taken as there once its commit is: that is rule 2.
 */
static void crash_state(struct js_env *v, const struct jt_rec *r, const char *crash, size_t f, size_t to,
			enum js_keep keep, int fsck)
{
	ssize_t *last = malloc(v->nblk * sizeof(*last)), *pending = malloc(v->nblk * sizeof(*pending));
	unsigned char *want = malloc(r->bsize), *got = malloc(r->bsize);
	char cmd[320], msg[256];
	uint32_t cur = 0;
	ext2_filsys fs;
	int fd, pre, ret;

	snprintf(cmd, sizeof(cmd), "cp --sparse=always %s %s", v->pre, crash);
	ck_assert_int_eq(system(cmd), 0);
	fd = open(crash, O_WRONLY);
	ck_assert_int_ge(fd, 0);
	for (unsigned int k = 0; k < v->nblk; k++)
		last[k] = pending[k] = -1;
	for (size_t i = 0; i < to; i++) {
		const struct jt_ev *e = &r->ev[i];
		int kept;
		int64_t l;

		if (e->kind != JT_WRITE)
			continue;
		kept = i < f || js_kept(v, e, keep);
		if (kept)
			ck_assert_int_eq(pwrite(fd, e->data, r->bsize, (off_t)(e->blk * r->bsize)), (ssize_t)r->bsize);
		l = jt_logical(&v->map, e->blk);
		if (l <= 0)
			continue;
		if (jf_be32_at(e->data) == JF_MAGIC) {
			uint32_t type = jf_be32_at(e->data + 4), seq = jf_be32_at(e->data + 8);

			if (type == JF_DESCRIPTOR_BLOCK && seq != cur) {
				cur = seq;
				for (unsigned int k = 0; k < v->nblk; k++)
					pending[k] = -1;
			}
			/* The oracle: a transaction is there once its commit block is. */
			if (type == JF_COMMIT_BLOCK && kept)
				for (unsigned int k = 0; k < v->nblk; k++)
					if (pending[k] >= 0)
						last[k] = pending[k];
		} else {
			blk64_t home;

			memcpy(&home, e->data, sizeof(home));
			ck_assert(home >= v->base && home < v->base + v->nblk);
			pending[home - v->base] = (ssize_t)i;
		}
	}
	close(fd);
	ck_assert_int_eq(ext2fs_open(crash, EXT2_FLAG_RW | EXT2_FLAG_64BITS, 0, 0, unix_io_manager, &fs), 0);
	ext2fs_set_feature_journal_needs_recovery(fs->super);
	ext2fs_mark_super_dirty(fs);
	ck_assert_int_eq(ext2fs_close_free(&fs), 0);
	ck_assert_int_eq(ext2fs_open(crash, EXT2_FLAG_RW | EXT2_FLAG_64BITS, 0, 0, unix_io_manager, &fs), 0);
	ck_assert_int_eq(io_channel_set_options(fs->io, "cache=off"), 0);
	ret = jr_recover(fs, msg, sizeof(msg));
	ext2fs_free(fs);
	ck_assert_msg(!ret, "crash after event %zu (kept %d up to %zu): jr_recover: %s", f, keep, to, msg);
	fd = open(crash, O_RDONLY);
	pre = open(v->pre, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_ge(pre, 0);
	for (unsigned int k = 0; k < v->nblk; k++) {
		if (last[k] >= 0)
			memcpy(want, r->ev[last[k]].data, r->bsize);
		else
			ck_assert_int_eq(pread(pre, want, r->bsize, (off_t)((v->base + k) * r->bsize)), (ssize_t)r->bsize);
		ck_assert_int_eq(pread(fd, got, r->bsize, (off_t)((v->base + k) * r->bsize)), (ssize_t)r->bsize);
		ck_assert_msg(!memcmp(want, got, r->bsize),
			      "crash after event %zu (kept %d up to %zu): home %u does not hold its last committed copy "
			      "(event %zd)", f, keep, to, k, last[k]);
	}
	close(fd);
	close(pre);
	if (fsck)
		ck_assert_msg(jt_fsck(crash) == 0, "crash after event %zu (kept %d up to %zu): e2fsck -fn is not clean",
			      f, keep, to);
	free(last);
	free(pending);
	free(want);
	free(got);
}

/*
 * A power cut at each flush of that workload, the device having done
 * none, or only some kinds, of the writes sent after it before the next:
 * the writer's rules are what makes every such state recoverable.
 */
START_TEST(crash_states)
{
	struct js_env v;
	struct jt_rec r;
	uint64_t transactions;
	uint32_t next;
	char crash[128];
	size_t points = 0, f = 0;

	js_workload(&v, &r, &transactions, &next);
	snprintf(crash, sizeof(crash), "%.64s.crash", v.path);
	jt_track(crash);
	for (size_t p = 0; p <= r.n; p++) {
		int writes = 0;

		if (p < r.n && r.ev[p].kind != JT_FLUSH)
			continue;
		/* [f, p): the writes since the last flush, which the device may have done or not. */
		for (size_t i = f; i < p; i++)
			writes += r.ev[i].kind == JT_WRITE;
		crash_state(&v, &r, crash, f, p, JS_NONE, 1);
		if (writes) {
			crash_state(&v, &r, crash, f, p, JS_META, 0);
			crash_state(&v, &r, crash, f, p, JS_DATA, 0);
		}
		points++;
		f = p;
	}
	ck_assert_uint_ge(points, 2 * transactions);
	js_free_record(&r);
	js_done(&v);
}
END_TEST

/*
 * A write into the log that fails (a bad sector under the journal): the
 * commit fails, none of its blocks reaches home, and the writer refuses
 * every later transaction, so nothing more reaches home either.
 */
START_TEST(journal_write_fails)
{
	struct js_env v;
	struct jt_rec r;
	char faults[64];
	ext2_filsys fs;
	char msg[256];
	struct jnl j;
	size_t homes = 0;

	/* The journal's block 40 (in its 4 KiB unit of the device): the second commit's log blocks reach it. */
	{
		char path[64];

		fs = jt_image(path, JT_MKFS);
		ck_assert_msg(!jnl_open(fs, &j, msg, sizeof(msg)), "%s", msg);
		snprintf(faults, sizeof(faults), "w:%llu", (unsigned long long)(jt_physical(&j, 40) * fs->blocksize / 4096));
		jnl_close(&j);
		ext2fs_close_free(&fs);
	}
	js_open(&v, 200, faults);
	ck_assert_int_eq(js_commit(&v, 0, 30, 1), 0);
	ck_assert_int_ne(js_commit(&v, 30, 30, 2), 0);
	ck_assert_int_eq(v.log_failures, 1);
	ck_assert_int_ne(js_commit(&v, 60, 5, 3), 0);
	ck_assert_int_eq(v.log_failures, 2);
	js_read_record(&v, &r);
	/* Home writes: the first commit's 30, and none after. */
	for (size_t i = 0; i < r.n; i++)
		if (r.ev[i].kind == JT_WRITE && jt_logical(&v.map, r.ev[i].blk) < 0) {
			ck_assert_uint_ge(r.ev[i].blk, v.base);
			ck_assert_uint_lt(r.ev[i].blk, v.base + 30);
			homes++;
		}
	ck_assert_uint_eq(homes, 30);
	js_free_record(&r);
	/* What is still dirty is dropped unwritten, as a crash would drop it. */
	io_cache_forget(v.fs->io, v.base, v.nblk);
	ck_assert_int_eq(io_cache_set_journal(v.fs->io, NULL), 0);
	ck_assert_int_eq(jw_close(v.w), 0);
	jnl_close(&v.map);
	ext2fs_free(v.fs);
}
END_TEST

/* Settings come as ext2fs_open2's io_options: the layer that owns one takes it, the device refuses the rest. */
START_TEST(settings_as_io_options)
{
	static const char *const bad[] = { "cache_mb=x", "cache_mb=", "nosuch=1", "trace=0" };
	struct io_cache_stats st;
	char path[64];
	ext2_filsys fs = jt_image(path, JT_MKFS);
	size_t i;

	ck_assert_int_eq(ext2fs_close_free(&fs), 0);
	/* Switched off: the calls that name a cache find none, and the channel under it is the device. */
	ck_assert_int_eq(ext2fs_open2(path, "cache_mb=0", EXT2_FLAG_RW | EXT2_FLAG_64BITS, 0, 0, io_stack_top(), &fs), 0);
	ck_assert_int_eq(io_cache_stats(fs->io, &st), -1);
	ck_assert_ptr_eq(io_cache_lower(fs->io), io_bottom(fs->io));
	ck_assert_int_eq(ext2fs_read_bitmaps(fs), 0);
	ck_assert_int_eq(ext2fs_close_free(&fs), 0);
	/* A bound of its own, in blocks of the image's size. */
	ck_assert_int_eq(ext2fs_open2(path, "cache_mb=4", EXT2_FLAG_RW | EXT2_FLAG_64BITS, 0, 0, io_stack_top(), &fs), 0);
	ck_assert_int_eq(io_cache_stats(fs->io, &st), 0);
	ck_assert_uint_eq(st.max, (4u << 20) / fs->blocksize);
	ck_assert_int_eq(ext2fs_close_free(&fs), 0);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_int_eq(ext2fs_open2(path, bad[i], EXT2_FLAG_64BITS, 0, 0, io_stack_top(), &fs),
				 EXT2_ET_INVALID_ARGUMENT);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("jstack");
	TCase *tc = tcase_create("stack");

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, NULL, jt_cleanup);
	tcase_add_test(tc, cache_writeback_rules);
	tcase_add_test(tc, crash_states);
	tcase_add_test(tc, journal_write_fails);
	tcase_add_test(tc, settings_as_io_options);
	suite_add_tcase(s, tc);
	return unit_run(s);
}

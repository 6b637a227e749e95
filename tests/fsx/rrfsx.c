/*
 * rrfsx - seeded, reproducible random-operation file tester for rrfuse.
 *
 * Every thread owns FILES_PER_THREAD files (t<i>_f<j>) that exist both in the
 * directory under test and in a reference directory on an ordinary local
 * filesystem.  Each thread draws random operations from its own PRNG (seeded
 * from the global seed and the thread index), applies every operation to
 * both copies and verifies that the file under test behaves exactly like the
 * reference: same data on read / mmap read, same size after every operation,
 * full-content comparison every K operations and at the end.
 *
 * Usage:
 *   rrfsx [-s SEED] [-n OPS_TOTAL] [-t THREADS] [-f FILES_PER_THREAD]
 *         [-m MAXFILESIZE] [-c CHECK_EVERY] [-X op,op,...] [-k] [-v]
 *         DIR_UNDER_TEST REFDIR
 *
 * Hidden self-test option:
 *   --inject-bug[=OPNUM]  thread 0 flips one byte of the first write it
 *                         performs at or after its op #OPNUM (default 1) on
 *                         the tested side only, then verifies the file; rrfsx
 *                         must report a data mismatch and exit 1.
 *
 * Exit status: 0 all OK, 1 a mismatch / failure was detected, 2 usage or
 * setup error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define MAXIO   (1024 * 1024)   /* largest single read / write */
#define BLK     4096            /* "block" used for alignment bias */
#define LOGN    32              /* per-thread op history kept for reports */

enum {
	OP_WRITE, OP_READ, OP_MAPREAD, OP_TRUNCATE,
	OP_FALLOC, OP_FALLOC_KEEP, OP_PUNCH, OP_ZERO, OP_ZERO_KEEP,
	OP_FSYNC, OP_FDATASYNC, OP_REOPEN,
	OP_NR,
	/* pseudo operations, only used in the log */
	OP_OPEN = OP_NR, OP_CHECK, OP_CLOSE, OP_UNLINK,
	OP_ALL
};

static const char *const op_names[OP_ALL] = {
	[OP_WRITE] = "write",
	[OP_READ] = "read",
	[OP_MAPREAD] = "mapread",
	[OP_TRUNCATE] = "truncate",
	[OP_FALLOC] = "falloc",
	[OP_FALLOC_KEEP] = "falloc_keep",
	[OP_PUNCH] = "punch_hole",
	[OP_ZERO] = "zero_range",
	[OP_ZERO_KEEP] = "zero_keep",
	[OP_FSYNC] = "fsync",
	[OP_FDATASYNC] = "fdatasync",
	[OP_REOPEN] = "reopen",
	[OP_OPEN] = "open",
	[OP_CHECK] = "check",
	[OP_CLOSE] = "close",
	[OP_UNLINK] = "unlink",
};

static const unsigned default_weights[OP_NR] = {
	[OP_WRITE] = 30,
	[OP_READ] = 20,
	[OP_MAPREAD] = 8,
	[OP_TRUNCATE] = 8,
	[OP_FALLOC] = 4,
	[OP_FALLOC_KEEP] = 3,
	[OP_PUNCH] = 6,
	[OP_ZERO] = 4,
	[OP_ZERO_KEEP] = 3,
	[OP_FSYNC] = 2,
	[OP_FDATASYNC] = 2,
	[OP_REOPEN] = 5,
};

static int falloc_mode(int op)
{
	switch (op) {
	case OP_FALLOC:      return 0;
	case OP_FALLOC_KEEP: return FALLOC_FL_KEEP_SIZE;
	case OP_PUNCH:       return FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
	case OP_ZERO:        return FALLOC_FL_ZERO_RANGE;
	case OP_ZERO_KEEP:   return FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE;
	default:             return -1;
	}
}

/* ------------------------------------------------------------------------ */
/* configuration and global state                                            */

static struct {
	uint64_t seed;
	long long nops;
	int nthreads;
	int nfiles;
	long long maxsize;
	long long check_every;
	int verbose;
	int keep;
	long long inject_at;    /* -1: no injection */
	const char *tdir, *rdir;
	unsigned weights[OP_NR];
	char disabled[256];     /* -X argument, for the reproduce line */
} cfg;

static int g_tdirfd = -1, g_rdirfd = -1;
static long g_pagesize;
static atomic_int g_failed;
static atomic_int g_unsupported[OP_NR];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static const unsigned char g_zeros[65536];

/* ------------------------------------------------------------------------ */
/* per-thread state                                                          */

struct tfile {
	char name[48];
	int tfd, rfd;
	int append;
	long long cap;          /* soft size limit, re-rolled on reopen */
};

struct logent {
	long long opnum;
	int op, file;
	long long off, len;
	long long res;
	long long size;         /* reference size after the op, -1 unknown */
	int err;
	const char *note;
};

struct thr {
	int idx;
	pthread_t tid;
	uint64_t rng;
	long long nops;         /* ops assigned to this thread */
	long long opnum;        /* current op number (1-based) */
	long long done;         /* ops completed */
	struct tfile *files;
	struct logent log[LOGN];
	long long nlog;
	unsigned char *wbuf, *tbuf, *rbuf;
	int injected;
	int failed;
};

/* ------------------------------------------------------------------------ */
/* PRNG: splitmix64                                                          */

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));

	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

/* in [0, n); 0 if n == 0 (modulo bias is negligible: n is far below 2^64) */
static uint64_t rnd(struct thr *t, uint64_t n)
{
	if (n == 0)
		return 0;
	return rng_next(&t->rng) % n;
}

/* uniform in [0, n] for a non-negative signed bound */
static long long rnd_upto(struct thr *t, long long n)
{
	if (n <= 0)
		return 0;
	return (long long)rnd(t, (uint64_t)n + 1);
}

static void fill_random(struct thr *t, unsigned char *buf, size_t len)
{
	size_t i = 0;

	while (i < len) {
		uint64_t v = rng_next(&t->rng);
		size_t n = len - i < 8 ? len - i : 8;

		memcpy(buf + i, &v, n);
		i += n;
	}
}

/* ------------------------------------------------------------------------ */
/* small helpers                                                             */

static const char *errstr(int e, char *buf, size_t n)
{
	const char *name = strerrorname_np(e);
	const char *desc = strerrordesc_np(e);

	snprintf(buf, n, "%s (%s)", name ? name : "E?", desc ? desc : "unknown error");
	return buf;
}

static void app(char *buf, size_t sz, size_t *pos, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void app(char *buf, size_t sz, size_t *pos, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*pos >= sz)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf + *pos, sz - *pos, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	*pos += (size_t)n;
	if (*pos > sz)
		*pos = sz;
}

static long long min_ll(long long a, long long b) { return a < b ? a : b; }

static int fsize(int fd, long long *out)
{
	struct stat st;

	*out = 0;
	if (fstat(fd, &st) != 0)
		return -1;
	*out = (long long)st.st_size;
	return 0;
}

/* read up to len bytes (stopping only at EOF); returns bytes read or -1 */
static ssize_t pread_full(int fd, unsigned char *buf, size_t len, long long off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t r = pread(fd, buf + done, len - done, (off_t)(off + (long long)done));

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (r == 0)
			break;
		done += (size_t)r;
	}
	return (ssize_t)done;
}

static int write_full(int fd, const unsigned char *buf, size_t len, long long off, int append)
{
	size_t done = 0;

	while (done < len) {
		ssize_t r;

		if (append)
			r = write(fd, buf + done, len - done);
		else
			r = pwrite(fd, buf + done, len - done, (off_t)(off + (long long)done));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (r == 0) {
			errno = EIO;
			return -1;
		}
		done += (size_t)r;
	}
	return 0;
}

static int write_zeros(int fd, long long off, long long len)
{
	while (len > 0) {
		size_t n = (size_t)min_ll(len, (long long)sizeof(g_zeros));

		if (write_full(fd, g_zeros, n, off, 0) != 0)
			return -1;
		off += (long long)n;
		len -= (long long)n;
	}
	return 0;
}

/* ------------------------------------------------------------------------ */
/* SIGBUS protection for mmap reads                                          */

static _Thread_local sigjmp_buf *volatile tls_jmp;   /* volatile: the store must not be elided around memcpy */

static void sigbus_handler(int sig, siginfo_t *si, void *uc)
{
	(void)si;
	(void)uc;
	if (tls_jmp)
		siglongjmp(*tls_jmp, 1);
	signal(sig, SIG_DFL);
	raise(sig);
}

static __attribute__((noinline)) int guarded_copy(void *dst, const void *src, size_t n)
{
	sigjmp_buf jb;

	if (sigsetjmp(jb, 1)) {
		tls_jmp = NULL;
		return -1;
	}
	tls_jmp = &jb;
	memcpy(dst, src, n);
	tls_jmp = NULL;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* logging and failure reporting                                             */

static struct logent *logop(struct thr *t, int op, int fidx, long long off, long long len)
{
	struct logent *e = &t->log[t->nlog++ % LOGN];

	e->opnum = t->opnum;
	e->op = op;
	e->file = fidx;
	e->off = off;
	e->len = len;
	e->res = 0;
	e->size = -1;
	e->err = 0;
	e->note = NULL;
	return e;
}

static void fmt_ent(char *buf, size_t n, const struct thr *t, const struct logent *e)
{
	char eb[128];
	size_t pos = 0;

	app(buf, n, &pos, "#%-7lld %-10s %-11s ", e->opnum,
	    e->file >= 0 ? t->files[e->file].name : "-", op_names[e->op]);
	if (e->op == OP_TRUNCATE)
		app(buf, n, &pos, "size %lld -> %lld", e->off, e->len);
	else
		app(buf, n, &pos, "off=%-9lld len=%-8lld", e->off, e->len);
	if (e->err)
		app(buf, n, &pos, " -> %s", errstr(e->err, eb, sizeof(eb)));
	else
		app(buf, n, &pos, " -> %lld", e->res);
	if (e->size >= 0)
		app(buf, n, &pos, " size=%lld", e->size);
	if (e->note)
		app(buf, n, &pos, " [%s]", e->note);
}

static void vlog(struct thr *t, const struct logent *e)
{
	char buf[512];

	if (!cfg.verbose)
		return;
	fmt_ent(buf, sizeof(buf), t, e);
	pthread_mutex_lock(&g_lock);
	printf("T%d %s\n", t->idx, buf);
	pthread_mutex_unlock(&g_lock);
}

static void repro_line(char *buf, size_t n)
{
	size_t pos = 0;

	app(buf, n, &pos, "rrfsx -s %" PRIu64 " -n %lld -t %d -f %d -m %lld -c %lld",
	    cfg.seed, cfg.nops, cfg.nthreads, cfg.nfiles, cfg.maxsize, cfg.check_every);
	if (cfg.disabled[0])
		app(buf, n, &pos, " -X %s", cfg.disabled);
	if (cfg.inject_at >= 0)
		app(buf, n, &pos, " --inject-bug=%lld", cfg.inject_at);
	app(buf, n, &pos, " %s %s", cfg.tdir, cfg.rdir);
}

static int fail(struct thr *t, int fidx, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail(struct thr *t, int fidx, const char *fmt, ...)
{
	char msg[4096], line[512];
	va_list ap;
	long long first, i;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);

	t->failed = 1;
	if (atomic_exchange(&g_failed, 1))
		return -1;      /* another thread already reported */

	pthread_mutex_lock(&g_lock);
	fflush(stdout);
	fprintf(stderr, "\nrrfsx: FAILURE: seed %" PRIu64 ", thread %d, file %s, op #%lld\n",
		cfg.seed, t->idx, fidx >= 0 ? t->files[fidx].name : "-", t->opnum);
	if (fidx >= 0)
		fprintf(stderr, "  tested file: %s/%s\n  reference  : %s/%s\n",
			cfg.tdir, t->files[fidx].name, cfg.rdir, t->files[fidx].name);
	fprintf(stderr, "  %s\n", msg);
	first = t->nlog > LOGN ? t->nlog - LOGN : 0;
	fprintf(stderr, "  last %lld ops of thread %d (oldest first, last one failed):\n",
		t->nlog - first, t->idx);
	for (i = first; i < t->nlog; i++) {
		fmt_ent(line, sizeof(line), t, &t->log[i % LOGN]);
		fprintf(stderr, "    %s\n", line);
	}
	repro_line(line, sizeof(line));
	fprintf(stderr, "  reproduce: %s\n", line);
	fflush(stderr);
	pthread_mutex_unlock(&g_lock);
	return -1;
}

/* describe the first difference between tested (a) and reference (b) data */
static void describe_diff(char *out, size_t sz, const unsigned char *a,
			  const unsigned char *b, size_t n, long long base)
{
	size_t first = n, last = 0, cnt = 0, i, start, end;
	size_t pos = 0;

	for (i = 0; i < n; i++) {
		if (a[i] != b[i]) {
			if (first == n)
				first = i;
			last = i;
			cnt++;
		}
	}
	if (first == n) {
		app(out, sz, &pos, "no difference?");
		return;
	}
	app(out, sz, &pos,
	    "first differing byte at file offset %lld (0x%llx); %zu of %zu compared bytes differ, last at %lld",
	    base + (long long)first, (unsigned long long)(base + (long long)first), cnt, n,
	    base + (long long)last);
	start = first >= 8 ? first - 8 : 0;
	end = start + 24 < n ? start + 24 : n;
	app(out, sz, &pos, "\n  bytes from offset %lld:", base + (long long)start);
	app(out, sz, &pos, "\n    tested   :");
	for (i = start; i < end; i++)
		app(out, sz, &pos, " %02x", a[i]);
	app(out, sz, &pos, "\n    reference:");
	for (i = start; i < end; i++)
		app(out, sz, &pos, " %02x", b[i]);
	app(out, sz, &pos, "\n               ");
	for (i = start; i < end; i++)
		app(out, sz, &pos, "%s", a[i] != b[i] ? " ^^" : "   ");
}

static int fail_data(struct thr *t, int fidx, const char *what,
		     const unsigned char *tb, const unsigned char *rb, size_t n, long long base)
{
	char d[2048];

	describe_diff(d, sizeof(d), tb, rb, n, base);
	return fail(t, fidx, "DATA MISMATCH (%s of [%lld, %lld)): %s", what, base,
		    base + (long long)n, d);
}

static int fail_test_err(struct thr *t, int fidx, struct logent *e, int err, const char *what)
{
	char eb[128];

	if (e)
		e->err = err;
	return fail(t, fidx, "%s on the tested file failed: %s (the reference did not fail)",
		    what, errstr(err, eb, sizeof(eb)));
}

static int fail_ref_err(struct thr *t, int fidx, struct logent *e, int err, const char *what)
{
	char eb[128];

	if (e)
		e->err = err;
	return fail(t, fidx, "%s on the REFERENCE file failed: %s (problem with REFDIR, not the tested fs)",
		    what, errstr(err, eb, sizeof(eb)));
}

/* ------------------------------------------------------------------------ */
/* checks                                                                    */

static int check_size(struct thr *t, int fidx, const char *after)
{
	struct tfile *f = &t->files[fidx];
	long long ts, rs;

	if (fsize(f->rfd, &rs) != 0)
		return fail_ref_err(t, fidx, NULL, errno, "fstat");
	if (fsize(f->tfd, &ts) != 0)
		return fail_test_err(t, fidx, NULL, errno, "fstat");
	t->log[(t->nlog - 1) % LOGN].size = rs;
	if (ts != rs)
		return fail(t, fidx, "SIZE MISMATCH after %s: tested file has size %lld, reference %lld",
			    after, ts, rs);
	return 0;
}

static int check_file(struct thr *t, int fidx, const char *why)
{
	struct tfile *f = &t->files[fidx];
	struct logent *e = logop(t, OP_CHECK, fidx, 0, 0);
	long long ts, rs, off;

	e->note = why;
	if (fsize(f->rfd, &rs) != 0)
		return fail_ref_err(t, fidx, e, errno, "fstat");
	if (fsize(f->tfd, &ts) != 0)
		return fail_test_err(t, fidx, e, errno, "fstat");
	e->len = rs;
	if (ts != rs)
		return fail(t, fidx, "SIZE MISMATCH in full compare (%s): tested file has size %lld, reference %lld",
			    why, ts, rs);
	for (off = 0; off < rs; off += MAXIO) {
		size_t n = (size_t)min_ll(MAXIO, rs - off);
		ssize_t rr, tr;

		rr = pread_full(f->rfd, t->rbuf, n, off);
		if (rr < 0)
			return fail_ref_err(t, fidx, e, errno, "pread (full compare)");
		if ((size_t)rr != n)
			return fail(t, fidx, "reference short read %zd of %zu at %lld", rr, n, off);
		tr = pread_full(f->tfd, t->tbuf, n, off);
		if (tr < 0)
			return fail_test_err(t, fidx, e, errno, "pread (full compare)");
		if (tr != rr)
			return fail(t, fidx, "SHORT READ in full compare: pread at %lld returned %zd bytes, expected %zd (size %lld)",
				    off, tr, rr, rs);
		if (memcmp(t->tbuf, t->rbuf, n) != 0)
			return fail_data(t, fidx, "full-file compare", t->tbuf, t->rbuf, n, off);
	}
	e->res = rs;
	e->size = rs;
	vlog(t, e);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* operations                                                                */

/* random I/O length: biased toward small and block-aligned sizes */
static size_t pick_len(struct thr *t, int *aligned)
{
	unsigned r = (unsigned)rnd(t, 100);
	size_t len;

	*aligned = 0;
	if (r < 30)
		len = 1 + rnd(t, 512);
	else if (r < 50)
		len = 1 + rnd(t, 8192);
	else if (r < 75) {
		len = BLK * (1 + rnd(t, 16));
		*aligned = 1;
	} else if (r < 90)
		len = 1 + rnd(t, 128 * 1024);
	else if (r < 96) {
		len = BLK * (1 + rnd(t, MAXIO / BLK));
		*aligned = 1;
	} else
		len = 1 + rnd(t, MAXIO);
	return len;
}

/*
 * Each file has a soft size cap so that small, medium and large files all
 * get exercised (otherwise growing operations push every file toward -m).
 */
static void roll_cap(struct thr *t, struct tfile *f)
{
	unsigned r = (unsigned)rnd(t, 100);

	if (r < 20)
		f->cap = 64 * 1024;
	else if (r < 45)
		f->cap = 1024 * 1024;
	else
		f->cap = cfg.maxsize;
	if (f->cap > cfg.maxsize)
		f->cap = cfg.maxsize;
}

/* current reference size and the limit growing operations must respect */
static int ref_size(struct thr *t, int fidx, long long *size, long long *lim)
{
	struct tfile *f = &t->files[fidx];

	*size = 0;
	*lim = 0;
	if (fsize(f->rfd, size) != 0)
		return fail_ref_err(t, fidx, NULL, errno, "fstat");
	if (*size > cfg.maxsize)
		*size = cfg.maxsize;  /* cannot happen, but keep the arithmetic sane */
	*lim = f->cap > *size ? f->cap : *size;
	return 0;
}

static int op_write(struct thr *t, int fidx)
{
	struct tfile *f = &t->files[fidx];
	long long size, off, max;
	unsigned r;
	int aligned, inject = 0;
	size_t len;
	struct logent *e;

	if (ref_size(t, fidx, &size, &max))
		return -1;
	len = pick_len(t, &aligned);
	if ((long long)len > max)
		len = (size_t)max;
	r = (unsigned)rnd(t, 100);
	if (r < 50)                     /* somewhere inside / at EOF */
		off = rnd_upto(t, size);
	else if (r < 75)                /* straddling EOF: extends the file */
		off = size - rnd_upto(t, min_ll(size, (long long)len));
	else if (r < 88)                /* beyond EOF, possibly far: leaves a hole */
		off = size + rnd_upto(t, max - size);
	else
		off = rnd_upto(t, max);
	if (aligned)
		off &= ~(long long)(BLK - 1);
	if (off + (long long)len > max) {
		if (off < max && rnd(t, 2))
			len = (size_t)(max - off);
		else
			off = max - (long long)len;
	}
	fill_random(t, t->wbuf, len);

	if (f->append) {
		/* O_APPEND: the data lands at EOF whatever we ask for; only the
		 * hard limit applies, the soft cap would stop appends too soon */
		off = size;
		if (off + (long long)len > cfg.maxsize)
			len = (size_t)(cfg.maxsize - off);
	}
	e = logop(t, OP_WRITE, fidx, off, (long long)len);
	if (f->append)
		e->note = "O_APPEND";
	if (len == 0) {
		e->note = "skipped: O_APPEND file at max size";
		vlog(t, e);
		return 0;
	}

	if (write_full(f->rfd, t->wbuf, len, off, f->append) != 0)
		return fail_ref_err(t, fidx, e, errno, "write");
	if (cfg.inject_at >= 0 && t->idx == 0 && !t->injected && t->opnum >= cfg.inject_at) {
		t->wbuf[len / 2] ^= 0xA5;
		t->injected = 1;
		inject = 1;
		e->note = "INJECTED CORRUPTION (--inject-bug)";
	}
	if (write_full(f->tfd, t->wbuf, len, off, f->append) != 0)
		return fail_test_err(t, fidx, e, errno, f->append ? "write (O_APPEND)" : "pwrite");
	e->res = (long long)len;
	if (check_size(t, fidx, "write"))
		return -1;
	vlog(t, e);
	if (inject)
		return check_file(t, fidx, "after injected corruption");
	return 0;
}

static int op_read(struct thr *t, int fidx)
{
	struct tfile *f = &t->files[fidx];
	long long size, off, max;
	int aligned;
	size_t len;
	ssize_t rr, tr;
	struct logent *e;

	if (ref_size(t, fidx, &size, &max))
		return -1;
	len = pick_len(t, &aligned);
	if (rnd(t, 100) < 10)
		off = size + rnd_upto(t, 2 * BLK);  /* at / beyond EOF */
	else
		off = rnd_upto(t, size);
	if (aligned)
		off &= ~(long long)(BLK - 1);
	e = logop(t, OP_READ, fidx, off, (long long)len);
	e->size = size;

	rr = pread_full(f->rfd, t->rbuf, len, off);
	if (rr < 0)
		return fail_ref_err(t, fidx, e, errno, "pread");
	tr = pread_full(f->tfd, t->tbuf, len, off);
	if (tr < 0)
		return fail_test_err(t, fidx, e, errno, "pread");
	e->res = tr;
	if (tr != rr)
		return fail(t, fidx, "READ LENGTH MISMATCH: pread(off=%lld, len=%zu) returned %zd bytes, reference %zd",
			    off, len, tr, rr);
	if (memcmp(t->tbuf, t->rbuf, (size_t)rr) != 0)
		return fail_data(t, fidx, "pread", t->tbuf, t->rbuf, (size_t)rr, off);
	vlog(t, e);
	return 0;
}

static int op_mapread(struct thr *t, int fidx)
{
	struct tfile *f = &t->files[fidx];
	long long size, tsize, off, aoff, max;
	int aligned;
	size_t len, delta;
	ssize_t rr;
	void *m;
	struct logent *e;

	if (ref_size(t, fidx, &size, &max))
		return -1;
	if (size == 0) {
		e = logop(t, OP_MAPREAD, fidx, 0, 0);
		e->note = "skipped: empty file";
		vlog(t, e);
		return 0;
	}
	off = (long long)rnd(t, (uint64_t)size);
	len = pick_len(t, &aligned);
	if (aligned)
		off &= ~(long long)(BLK - 1);
	if ((long long)len > size - off)
		len = (size_t)(size - off);
	e = logop(t, OP_MAPREAD, fidx, off, (long long)len);
	e->size = size;

	/* never touch the mapping beyond the tested file's EOF (SIGBUS) */
	if (fsize(f->tfd, &tsize) != 0)
		return fail_test_err(t, fidx, e, errno, "fstat");
	if (tsize != size)
		return fail(t, fidx, "SIZE MISMATCH before mmap: tested %lld, reference %lld", tsize, size);

	aoff = off & ~(long long)(g_pagesize - 1);
	delta = (size_t)(off - aoff);
	m = mmap(NULL, delta + len, PROT_READ, MAP_SHARED, f->tfd, (off_t)aoff);
	if (m == MAP_FAILED)
		return fail_test_err(t, fidx, e, errno, "mmap(PROT_READ, MAP_SHARED)");
	if (guarded_copy(t->tbuf, (unsigned char *)m + delta, len) != 0) {
		munmap(m, delta + len);
		return fail(t, fidx, "SIGBUS while reading the mapping of [%lld, %lld) (file size %lld)",
			    off, off + (long long)len, size);
	}
	if (munmap(m, delta + len) != 0)
		return fail_test_err(t, fidx, e, errno, "munmap");

	rr = pread_full(f->rfd, t->rbuf, len, off);
	if (rr < 0)
		return fail_ref_err(t, fidx, e, errno, "pread");
	if ((size_t)rr != len)
		return fail(t, fidx, "reference short read %zd of %zu at %lld", rr, len, off);
	e->res = (long long)len;
	if (memcmp(t->tbuf, t->rbuf, len) != 0)
		return fail_data(t, fidx, "mmap read", t->tbuf, t->rbuf, len, off);
	vlog(t, e);
	return 0;
}

static int op_truncate(struct thr *t, int fidx)
{
	struct tfile *f = &t->files[fidx];
	long long size, ns, max;
	unsigned r;
	struct logent *e;

	if (ref_size(t, fidx, &size, &max))
		return -1;
	r = (unsigned)rnd(t, 100);
	if (r < 45)
		ns = rnd_upto(t, size);                     /* shrink */
	else if (r < 65)                                    /* grow a little */
		ns = size + rnd_upto(t, min_ll(max - size, 2 * BLK));
	else if (r < 85)                                    /* grow, maybe a lot */
		ns = size + rnd_upto(t, max - size);
	else
		ns = rnd_upto(t, max);
	if (rnd(t, 100) < 30)
		ns &= ~(long long)(BLK - 1);
	e = logop(t, OP_TRUNCATE, fidx, size, ns);
	if (ftruncate(f->rfd, (off_t)ns) != 0)
		return fail_ref_err(t, fidx, e, errno, "ftruncate");
	if (ftruncate(f->tfd, (off_t)ns) != 0)
		return fail_test_err(t, fidx, e, errno, "ftruncate");
	if (check_size(t, fidx, "ftruncate"))
		return -1;
	vlog(t, e);
	return 0;
}

/* apply fallocate to the reference, emulating modes the reference fs lacks */
static int ref_fallocate(struct tfile *f, int mode, long long off, long long len, struct logent *e)
{
	long long size, end = off + len, zend;
	int fl, ret = 0;

	if (fallocate(f->rfd, mode, (off_t)off, (off_t)len) == 0)
		return 0;
	if (errno != EOPNOTSUPP)
		return -1;
	e->note = "emulated on reference";
	if (fsize(f->rfd, &size) != 0)
		return -1;
	zend = end < size ? end : size;
	/* pwrite() on an O_APPEND fd appends on Linux: drop O_APPEND meanwhile */
	fl = fcntl(f->rfd, F_GETFL);
	if (fl < 0 || ((fl & O_APPEND) && fcntl(f->rfd, F_SETFL, fl & ~O_APPEND) != 0))
		return -1;
	if ((mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) && zend > off)
		ret = write_zeros(f->rfd, off, zend - off);
	if (ret == 0 && !(mode & FALLOC_FL_KEEP_SIZE) && end > size)
		ret = ftruncate(f->rfd, (off_t)end);
	if ((fl & O_APPEND) && fcntl(f->rfd, F_SETFL, fl) != 0)
		ret = -1;
	return ret;
}

static int op_fallocate(struct thr *t, int fidx, int op)
{
	struct tfile *f = &t->files[fidx];
	int mode = falloc_mode(op), aligned = 0;
	long long size, off, len, max;
	unsigned r;
	struct logent *e;

	if (ref_size(t, fidx, &size, &max))
		return -1;
	r = (unsigned)rnd(t, 100);
	if (r < 60)
		off = rnd_upto(t, size);
	else if (r < 80)
		off = size - rnd_upto(t, min_ll(size, 64 * 1024));
	else
		off = rnd_upto(t, max);
	r = (unsigned)rnd(t, 100);
	if (r < 40) {
		len = BLK * (1 + (long long)rnd(t, 64));
		aligned = 1;
	} else if (r < 80)
		len = 1 + (long long)rnd(t, 64 * 1024);
	else
		len = 1 + (long long)rnd(t, MAXIO);
	if (aligned)
		off &= ~(long long)(BLK - 1);
	if (off >= max)
		off = max - 1;
	if (off + len > max)
		len = max - off;
	e = logop(t, op, fidx, off, len);

	if (atomic_load(&g_unsupported[op])) {
		e->note = "skipped: mode unsupported by tested fs";
		vlog(t, e);
		return 0;
	}
	if (fallocate(f->tfd, mode, (off_t)off, (off_t)len) != 0) {
		int err = errno;
		char eb[128], eb2[128];

		e->err = err;
		if (err == EOPNOTSUPP) {
			e->note = "unsupported by tested fs; mode disabled";
			if (!atomic_exchange(&g_unsupported[op], 1)) {
				pthread_mutex_lock(&g_lock);
				printf("rrfsx: note: tested fs returns EOPNOTSUPP for fallocate mode %s (0x%x); no longer using it\n",
				       op_names[op], (unsigned)mode);
				fflush(stdout);
				pthread_mutex_unlock(&g_lock);
			}
			vlog(t, e);
			return 0;
		}
		/* see what the reference says, for the report */
		if (ref_fallocate(f, mode, off, len, e) == 0)
			snprintf(eb2, sizeof(eb2), "the reference succeeded");
		else
			errstr(errno, eb2, sizeof(eb2));
		return fail(t, fidx, "fallocate(mode=%s) on the tested file failed: %s (reference: %s)",
			    op_names[op], errstr(err, eb, sizeof(eb)), eb2);
	}
	if (ref_fallocate(f, mode, off, len, e) != 0)
		return fail_ref_err(t, fidx, e, errno, "fallocate / emulation");
	if (check_size(t, fidx, op_names[op]))
		return -1;
	vlog(t, e);
	return 0;
}

static int op_sync(struct thr *t, int fidx, int op)
{
	struct tfile *f = &t->files[fidx];
	struct logent *e = logop(t, op, fidx, 0, 0);
	int r;

	/* the reference lives on a local fs; syncing it proves nothing */
	r = op == OP_FSYNC ? fsync(f->tfd) : fdatasync(f->tfd);
	if (r != 0)
		return fail_test_err(t, fidx, e, errno, op_names[op]);
	if (check_size(t, fidx, op_names[op]))
		return -1;
	vlog(t, e);
	return 0;
}

static int op_reopen(struct thr *t, int fidx)
{
	struct tfile *f = &t->files[fidx];
	int append = rnd(t, 100) < 30;
	int trunc = rnd(t, 100) < 4;
	int flags = O_RDWR | (append ? O_APPEND : 0) | (trunc ? O_TRUNC : 0);
	static const char *const notes[4] = {
		"O_RDWR", "O_RDWR|O_APPEND", "O_RDWR|O_TRUNC", "O_RDWR|O_APPEND|O_TRUNC"
	};
	struct logent *e = logop(t, OP_REOPEN, fidx, 0, 0);
	int fd;

	e->note = notes[(append ? 1 : 0) | (trunc ? 2 : 0)];
	close(f->rfd);
	f->rfd = openat(g_rdirfd, f->name, flags);
	if (f->rfd < 0)
		return fail_ref_err(t, fidx, e, errno, "open");
	fd = f->tfd;
	f->tfd = -1;
	if (close(fd) != 0)
		return fail_test_err(t, fidx, e, errno, "close");
	f->tfd = openat(g_tdirfd, f->name, flags);
	if (f->tfd < 0)
		return fail_test_err(t, fidx, e, errno, "open");
	f->append = append;
	roll_cap(t, f);
	if (check_size(t, fidx, "reopen"))
		return -1;
	vlog(t, e);
	return 0;
}

static int pick_op(struct thr *t)
{
	unsigned total = 0, r;
	int i;

	for (i = 0; i < OP_NR; i++)
		total += cfg.weights[i];
	r = (unsigned)rnd(t, total);
	for (i = 0; i < OP_NR; i++) {
		if (r < cfg.weights[i])
			return i;
		r -= cfg.weights[i];
	}
	return OP_READ;
}

static int do_op(struct thr *t, int fidx, int op)
{
	switch (op) {
	case OP_WRITE:      return op_write(t, fidx);
	case OP_READ:       return op_read(t, fidx);
	case OP_MAPREAD:    return op_mapread(t, fidx);
	case OP_TRUNCATE:   return op_truncate(t, fidx);
	case OP_FALLOC:
	case OP_FALLOC_KEEP:
	case OP_PUNCH:
	case OP_ZERO:
	case OP_ZERO_KEEP:  return op_fallocate(t, fidx, op);
	case OP_FSYNC:
	case OP_FDATASYNC:  return op_sync(t, fidx, op);
	case OP_REOPEN:     return op_reopen(t, fidx);
	}
	return 0;
}

/* ------------------------------------------------------------------------ */
/* thread body                                                               */

static int open_files(struct thr *t, int flags)
{
	int j;

	for (j = 0; j < cfg.nfiles; j++) {
		struct tfile *f = &t->files[j];
		struct logent *e = logop(t, OP_OPEN, j, 0, 0);

		e->note = (flags & O_CREAT) ? "O_RDWR|O_CREAT|O_TRUNC" : "O_RDONLY";
		f->rfd = openat(g_rdirfd, f->name, flags, 0644);
		if (f->rfd < 0)
			return fail_ref_err(t, j, e, errno, "open");
		f->tfd = openat(g_tdirfd, f->name, flags, 0644);
		if (f->tfd < 0)
			return fail_test_err(t, j, e, errno, "open");
		f->append = 0;
		vlog(t, e);
	}
	return 0;
}

static int close_files(struct thr *t)
{
	int j;

	for (j = 0; j < cfg.nfiles; j++) {
		struct tfile *f = &t->files[j];
		struct logent *e = logop(t, OP_CLOSE, j, 0, 0);
		int fd = f->tfd;

		close(f->rfd);
		f->rfd = -1;
		f->tfd = -1;
		if (close(fd) != 0)
			return fail_test_err(t, j, e, errno, "close");
		vlog(t, e);
	}
	return 0;
}

static int run_thread(struct thr *t)
{
	int j;

	if (open_files(t, O_RDWR | O_CREAT | O_TRUNC))
		return -1;
	for (j = 0; j < cfg.nfiles; j++)
		roll_cap(t, &t->files[j]);
	for (t->opnum = 1; t->opnum <= t->nops; t->opnum++) {
		int fidx, op;

		if (atomic_load(&g_failed))
			return -1;
		fidx = (int)rnd(t, (uint64_t)cfg.nfiles);
		op = pick_op(t);
		if (do_op(t, fidx, op))
			return -1;
		t->done++;
		if (cfg.check_every > 0 && t->opnum % cfg.check_every == 0)
			for (j = 0; j < cfg.nfiles; j++)
				if (check_file(t, j, "periodic"))
					return -1;
	}
	t->opnum = t->nops;

	for (j = 0; j < cfg.nfiles; j++)
		if (check_file(t, j, "final"))
			return -1;
	if (close_files(t))
		return -1;
	/* everything must survive close/release: verify through fresh fds */
	if (open_files(t, O_RDONLY))
		return -1;
	for (j = 0; j < cfg.nfiles; j++)
		if (check_file(t, j, "final, after reopen"))
			return -1;
	if (close_files(t))
		return -1;
	if (!cfg.keep) {
		for (j = 0; j < cfg.nfiles; j++) {
			struct logent *e = logop(t, OP_UNLINK, j, 0, 0);

			if (unlinkat(g_rdirfd, t->files[j].name, 0) != 0)
				return fail_ref_err(t, j, e, errno, "unlink");
			if (unlinkat(g_tdirfd, t->files[j].name, 0) != 0)
				return fail_test_err(t, j, e, errno, "unlink");
		}
	}
	return 0;
}

static void *thread_main(void *arg)
{
	struct thr *t = arg;

	run_thread(t);
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* main                                                                      */

static void usage(FILE *fp)
{
	fprintf(fp,
		"usage: rrfsx [-s SEED] [-n OPS_TOTAL] [-t THREADS] [-f FILES_PER_THREAD]\n"
		"             [-m MAXFILESIZE] [-c CHECK_EVERY] [-X OP[,OP...]] [-k] [-v]\n"
		"             DIR_UNDER_TEST REFDIR\n"
		"  -s SEED     PRNG seed (default: time based, printed)\n"
		"  -n N        total number of operations, split across threads (default 20000)\n"
		"  -t T        threads (default 4)\n"
		"  -f F        files per thread (default 2)\n"
		"  -m SIZE     maximum file size, suffixes K/M/G allowed (default 8M)\n"
		"  -c K        full-file compare every K ops of each thread, 0 = only at the end (default 500)\n"
		"  -X OPS      disable operations (comma separated): write, read, mapread, truncate,\n"
		"              falloc, falloc_keep, punch_hole, zero_range, zero_keep, fsync,\n"
		"              fdatasync, reopen\n"
		"  -k          keep the files at the end (they are always kept on failure)\n"
		"  -v          log every operation\n"
		"REFDIR must be on an ordinary local filesystem (e.g. /tmp).\n"
		"Exit status: 0 OK, 1 failure detected, 2 usage/setup error.\n");
}

static int parse_ll(const char *s, long long *out, int allow_suffix)
{
	char *end;
	unsigned long long v;
	unsigned long long mul = 1;

	errno = 0;
	if (*s == '-')
		return -1;
	v = strtoull(s, &end, 0);
	if (errno || end == s)
		return -1;
	if (allow_suffix && *end) {
		switch (*end) {
		case 'k': case 'K': mul = 1ULL << 10; break;
		case 'm': case 'M': mul = 1ULL << 20; break;
		case 'g': case 'G': mul = 1ULL << 30; break;
		default: return -1;
		}
		end++;
		if (*end == 'i' || *end == 'I')
			end++;
		if (*end == 'b' || *end == 'B')
			end++;
	}
	if (*end)
		return -1;
	if (v > (unsigned long long)LLONG_MAX / mul)
		return -1;
	*out = (long long)(v * mul);
	return 0;
}

static int disable_ops(const char *arg)
{
	char buf[256], *tok, *save = NULL;
	int i;

	snprintf(buf, sizeof(buf), "%s", arg);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		for (i = 0; i < OP_NR; i++)
			if (strcmp(tok, op_names[i]) == 0)
				break;
		if (i == OP_NR) {
			fprintf(stderr, "rrfsx: unknown operation '%s' for -X\n", tok);
			return -1;
		}
		cfg.weights[i] = 0;
		if (cfg.disabled[0])
			strncat(cfg.disabled, ",", sizeof(cfg.disabled) - strlen(cfg.disabled) - 1);
		strncat(cfg.disabled, op_names[i], sizeof(cfg.disabled) - strlen(cfg.disabled) - 1);
	}
	return 0;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "inject-bug", optional_argument, NULL, 1 },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct sigaction sa;
	struct stat st1, st2;
	struct thr *threads;
	long long v, total = 0;
	int c, i, seeded = 0, failed = 0, wsum = 0;
	double t0, el;

	cfg.nops = 20000;
	cfg.nthreads = 4;
	cfg.nfiles = 2;
	cfg.maxsize = 8LL << 20;
	cfg.check_every = 500;
	cfg.inject_at = -1;
	memcpy(cfg.weights, default_weights, sizeof(cfg.weights));

	while ((c = getopt_long(argc, argv, "s:n:t:f:m:c:X:kvh", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (parse_ll(optarg, &v, 0))
				goto bad;
			cfg.seed = (uint64_t)v;
			seeded = 1;
			break;
		case 'n':
			if (parse_ll(optarg, &v, 0))
				goto bad;
			cfg.nops = v;
			break;
		case 't':
			if (parse_ll(optarg, &v, 0) || v < 1 || v > 1024)
				goto bad;
			cfg.nthreads = (int)v;
			break;
		case 'f':
			if (parse_ll(optarg, &v, 0) || v < 1 || v > 10000)
				goto bad;
			cfg.nfiles = (int)v;
			break;
		case 'm':
			if (parse_ll(optarg, &v, 1) || v < 1 || v > (1LL << 40))
				goto bad;
			cfg.maxsize = v;
			break;
		case 'c':
			if (parse_ll(optarg, &v, 0))
				goto bad;
			cfg.check_every = v;
			break;
		case 'X':
			if (disable_ops(optarg))
				goto bad;
			break;
		case 'k':
			cfg.keep = 1;
			break;
		case 'v':
			cfg.verbose = 1;
			break;
		case 1:
			cfg.inject_at = 1;
			if (optarg && (parse_ll(optarg, &cfg.inject_at, 0) || cfg.inject_at < 1))
				goto bad;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			goto bad;
		}
	}
	if (argc - optind != 2)
		goto bad;
	cfg.tdir = argv[optind];
	cfg.rdir = argv[optind + 1];
	for (i = 0; i < OP_NR; i++)
		wsum += (int)cfg.weights[i];
	if (wsum == 0) {
		fprintf(stderr, "rrfsx: all operations disabled\n");
		return 2;
	}
	if (!seeded) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		cfg.seed = ((uint64_t)ts.tv_sec * 1000003ULL) ^ (uint64_t)ts.tv_nsec ^
			   ((uint64_t)getpid() << 32);
		cfg.seed %= 1000000000ULL;  /* short enough to retype */
	}

	g_pagesize = sysconf(_SC_PAGESIZE);
	if (g_pagesize <= 0)
		g_pagesize = 4096;
	g_tdirfd = open(cfg.tdir, O_RDONLY | O_DIRECTORY);
	if (g_tdirfd < 0) {
		fprintf(stderr, "rrfsx: %s: %s\n", cfg.tdir, strerror(errno));
		return 2;
	}
	g_rdirfd = open(cfg.rdir, O_RDONLY | O_DIRECTORY);
	if (g_rdirfd < 0) {
		fprintf(stderr, "rrfsx: %s: %s\n", cfg.rdir, strerror(errno));
		return 2;
	}
	if (fstat(g_tdirfd, &st1) == 0 && fstat(g_rdirfd, &st2) == 0 &&
	    st1.st_dev == st2.st_dev && st1.st_ino == st2.st_ino) {
		fprintf(stderr, "rrfsx: DIR_UNDER_TEST and REFDIR must be different directories\n");
		return 2;
	}

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = sigbus_handler;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);

	threads = calloc((size_t)cfg.nthreads, sizeof(*threads));
	if (!threads) {
		fprintf(stderr, "rrfsx: out of memory\n");
		return 2;
	}
	for (i = 0; i < cfg.nthreads; i++) {
		struct thr *t = &threads[i];
		uint64_t s = cfg.seed;
		int j;

		t->idx = i;
		t->rng = rng_next(&s) ^ (UINT64_C(0xD1B54A32D192ED03) * (uint64_t)(i + 1));
		(void)rng_next(&t->rng);
		t->nops = cfg.nops / cfg.nthreads + (i < cfg.nops % cfg.nthreads ? 1 : 0);
		t->files = calloc((size_t)cfg.nfiles, sizeof(*t->files));
		t->wbuf = malloc(MAXIO);
		t->tbuf = malloc(MAXIO);
		t->rbuf = malloc(MAXIO);
		if (!t->files || !t->wbuf || !t->tbuf || !t->rbuf) {
			fprintf(stderr, "rrfsx: out of memory\n");
			return 2;
		}
		for (j = 0; j < cfg.nfiles; j++) {
			snprintf(t->files[j].name, sizeof(t->files[j].name), "t%d_f%d", i, j);
			t->files[j].tfd = t->files[j].rfd = -1;
		}
	}

	printf("rrfsx: seed %" PRIu64 ", %lld ops, %d threads x %d files, max size %lld, check every %lld, test %s, ref %s\n",
	       cfg.seed, cfg.nops, cfg.nthreads, cfg.nfiles, cfg.maxsize, cfg.check_every,
	       cfg.tdir, cfg.rdir);
	fflush(stdout);

	t0 = now();
	for (i = 0; i < cfg.nthreads; i++) {
		int err = pthread_create(&threads[i].tid, NULL, thread_main, &threads[i]);

		if (err) {
			fprintf(stderr, "rrfsx: pthread_create: %s\n", strerror(err));
			return 2;
		}
	}
	for (i = 0; i < cfg.nthreads; i++) {
		pthread_join(threads[i].tid, NULL);
		total += threads[i].done;
		if (threads[i].failed)
			failed = 1;
	}
	el = now() - t0;
	if (atomic_load(&g_failed))
		failed = 1;

	printf("rrfsx: %.2f s, %.0f ops/s\n", el, el > 0 ? (double)total / el : 0.0);
	printf("rrfsx: %lld ops, %d threads, seed %" PRIu64 ": %s\n",
	       total, cfg.nthreads, cfg.seed, failed ? "FAILED" : "OK");
	fflush(stdout);

	for (i = 0; i < cfg.nthreads; i++) {
		free(threads[i].files);
		free(threads[i].wbuf);
		free(threads[i].tbuf);
		free(threads[i].rbuf);
	}
	free(threads);
	close(g_tdirfd);
	close(g_rdirfd);
	return failed ? 1 : 0;

bad:
	usage(stderr);
	return 2;
}

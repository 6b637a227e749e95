// SPDX-License-Identifier: GPL-2.0
/*
 * A file's delayed-allocation buffer (see dbuf.h).  Here in the data layer,
 * its only user; the type stays in the core (src/core/dbuf_type.h), as the
 * in-memory inode holds one.
 */
#include "dbuf.h"
#include "rrfuse/grow.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/*
 * A run of up to HEAP_MAX bytes lives on the heap: scattered small writes
 * (a sparse file's) make one run each, and were each a mapping the
 * process's would run out (vm.max_map_count, 65530) long before the
 * kernel's page cache would stop holding such pages.  Larger runs are
 * mappings, at most MAPS_MAX of them at once; past that the writer's
 * buffer goes out (-ENOMEM).
 */
#define HEAP_MAX (32u << 10)
#define MAPS_MAX 16384
#define MIN_MAP (64u << 10)
/*
 * Freed mappings of MIN_MAP up to POOL_MAX bytes (powers of two) are kept,
 * zeroed, for the next ones of their size: a munmap in a multithreaded
 * process is a TLB shootdown on every CPU (a tenth of the daemon's time
 * creating 4 KiB files), and a new mapping faults again, a page at a time
 * below huge-page sizes.  Those come and go at the rate of the writeback
 * requests that arrive out of order (the kernel sends several at once and
 * the daemon's threads take them as they come): a run for each, copied
 * into its neighbour when the gap fills (411 MiB of new mappings, 170 000
 * page faults, for a 1 GiB file written in order).  POOL_BYTES a size.
 */
#define POOL_MAX (4u << 20)
#define POOL_SIZES 7		/* MIN_MAP << 0 .. POOL_MAX */
#define POOL_BYTES (4u << 20)

static struct {
	pthread_mutex_t lock;
	char *buf[POOL_SIZES][POOL_BYTES / MIN_MAP];	/* protected by lock */
	unsigned int n[POOL_SIZES];			/* protected by lock */
} pool = { .lock = PTHREAD_MUTEX_INITIALIZER };

/*
 * The mappings made here and not yet unmapped, the pool's included: the
 * process's, as the limit they answer to (vm.max_map_count) and the pool
 * above are, not a mount's.
 */
static atomic_uint maps;

/* Memory of this size is the heap's: a mapping starts larger and never shrinks to it (dbuf_consume). */
static int on_heap(size_t bytes)
{
	return bytes <= HEAP_MAX;
}

/* The pool's size class for a mapping of bytes, or -1 when it keeps none such. */
static int pool_class(size_t bytes)
{
	int c;

	for (c = 0; c < POOL_SIZES; c++)
		if (bytes == (size_t)MIN_MAP << c)
			return c;
	return -1;
}

/* A run's memory: whole pages, and from MIN_MAP up to POOL_MAX a power of two the pool can keep. */
static size_t page_round(size_t bytes)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), sz = MIN_MAP;

	if (on_heap(bytes) || bytes > POOL_MAX)
		return (bytes + pg - 1) & ~(pg - 1);
	while (sz < bytes)
		sz <<= 1;
	return sz;
}

static char *mem_new(size_t bytes)
{
	int c = pool_class(bytes);
	char *buf = NULL;
	void *p;

	if (on_heap(bytes)) {
		/* Page aligned, as a device opened O_DIRECT takes it. */
		buf = aligned_alloc((size_t)sysconf(_SC_PAGESIZE), bytes);
		if (buf)
			memset(buf, 0, bytes);
		return buf;
	}
	if (c >= 0) {
		pthread_mutex_lock(&pool.lock);
		if (pool.n[c])
			buf = pool.buf[c][--pool.n[c]];
		pthread_mutex_unlock(&pool.lock);
		if (buf)
			return buf;
	}
	if (atomic_fetch_add(&maps, 1) >= MAPS_MAX) {
		atomic_fetch_sub(&maps, 1);
		return NULL;
	}
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		atomic_fetch_sub(&maps, 1);
		return NULL;
	}
	return p;
}

/* Past 2 MiB a buffer is likely a big file's: huge pages fault in 512 times less often. */
static void mem_advise(char *p, size_t bytes)
{
	if (bytes >= (2u << 20))
		madvise(p, bytes, MADV_HUGEPAGE);
}

/* used: the bytes of the mapping ever written (all of it when not known). */
static void mem_free(char *buf, size_t mapped, size_t used)
{
	int c = pool_class(mapped);

	if (on_heap(mapped)) {
		free(buf);
		return;
	}
	if (c >= 0) {
		memset(buf, 0, used < mapped ? used : mapped);
		pthread_mutex_lock(&pool.lock);
		if ((size_t)pool.n[c] * mapped < POOL_BYTES) {
			pool.buf[c][pool.n[c]++] = buf;
			buf = NULL;
		}
		pthread_mutex_unlock(&pool.lock);
		if (!buf)
			return;
	}
	munmap(buf, mapped);
	atomic_fetch_sub(&maps, 1);
}

static void run_free(struct rr_drun *r, unsigned int bbits)
{
	mem_free(r->buf, r->mapped, (size_t)r->hw << bbits);
}

static uint64_t run_end(const struct rr_drun *r)
{
	return r->lblk + r->n;
}

/* The first run that ends at or after lblk (so touches or follows it); cnt if none. */
static uint32_t first_from(const struct rr_dbuf *d, uint64_t lblk)
{
	uint32_t lo = 0, hi = d->cnt;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (run_end(&d->v[mid]) < lblk)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

uint64_t dbuf_missing(const struct rr_dbuf *d, uint64_t lblk, uint64_t n)
{
	uint64_t end = lblk + n, held = 0;
	uint32_t i;

	for (i = first_from(d, lblk); i < d->cnt && d->v[i].lblk < end; i++) {
		uint64_t s = d->v[i].lblk > lblk ? d->v[i].lblk : lblk;
		uint64_t e = run_end(&d->v[i]) < end ? run_end(&d->v[i]) : end;

		if (e > s)
			held += e - s;
	}
	return n - held;
}

uint64_t dbuf_prefix(const struct rr_dbuf *d, uint64_t lblk, uint64_t n, uint64_t missing)
{
	uint64_t pos = lblk, end = lblk + n;
	uint32_t i = first_from(d, lblk);

	while (pos < end) {
		uint64_t gap_end = end, s;

		while (i < d->cnt && run_end(&d->v[i]) <= pos)
			i++;
		if (i < d->cnt && d->v[i].lblk <= pos) {
			/* Held: free to take. */
			s = run_end(&d->v[i]);
			pos = s < end ? s : end;
			continue;
		}
		if (i < d->cnt && d->v[i].lblk < end)
			gap_end = d->v[i].lblk;
		if (gap_end - pos > missing)
			return pos + missing - lblk;
		missing -= gap_end - pos;
		pos = gap_end;
	}
	return n;
}

/* Make room for one more run at index i. */
static int insert_slot(struct rr_dbuf *d, uint32_t i)
{
	if (rr_grow(&d->v, sizeof(*d->v), &d->cap, (size_t)d->cnt + 1, 4))
		return -ENOMEM;
	memmove(d->v + i + 1, d->v + i, (d->cnt - i) * sizeof(*d->v));
	d->cnt++;
	return 0;
}

/*
 * Room in r's memory for bytes (at least twice what it had): a mapping
 * grows in place or moves without a copy (mremap); a run on the heap is
 * copied into new memory, only its blocks: the rest is zero there.
 */
static int grow(struct rr_drun *r, unsigned int bbits, size_t bytes)
{
	size_t mapped = page_round(bytes > 2 * r->mapped ? bytes : 2 * r->mapped);
	char *p;

	if (on_heap(r->mapped)) {
		p = mem_new(mapped);
		if (!p)
			return -ENOMEM;
		memcpy(p, r->buf, (size_t)r->n << bbits);
		mem_free(r->buf, r->mapped, 0);
		r->hw = r->n;
	} else {
		p = mremap(r->buf, r->mapped, mapped, MREMAP_MAYMOVE);
		if (p == MAP_FAILED)
			return -ENOMEM;
	}
	r->buf = p;
	r->mapped = mapped;
	mem_advise(r->buf, mapped);
	return 0;
}

/*
 * Make the buffer hold blocks [first, end) as part of one run; returns
 * that run's index or -ENOMEM.  New blocks are zero.
 */
static int64_t cover(struct rr_dbuf *d, unsigned int bbits, uint64_t first, uint64_t end)
{
	uint32_t i = first_from(d, first), j = i, k;
	uint64_t s, e, had = 0;
	struct rr_drun *r;
	char *buf;

	while (j < d->cnt && d->v[j].lblk <= end)
		j++;
	/* Runs i .. j-1 overlap or touch [first, end). */
	if (i == j) {
		size_t mapped = page_round((size_t)(end - first) << bbits);

		buf = mem_new(mapped);
		if (!buf || insert_slot(d, i)) {
			if (buf)
				mem_free(buf, mapped, 0);
			return -ENOMEM;
		}
		d->v[i] = (struct rr_drun){ .lblk = first, .n = (uint32_t)(end - first),
					    .hw = (uint32_t)(end - first), .mapped = mapped, .buf = buf };
		atomic_fetch_add(&d->blocks, end - first);
		return i;
	}
	r = &d->v[i];
	if (r->lblk <= first) {
		/*
		 * Grown at its end only, in place: a file written in order, or
		 * the next pages arriving before the ones between (the kernel
		 * writes back several requests at once); the runs it reaches
		 * are copied into it, never it into a new mapping.
		 */
		uint64_t n = (end > run_end(&d->v[j - 1]) ? end : run_end(&d->v[j - 1])) - r->lblk;

		if ((n << bbits) > r->mapped && grow(r, bbits, (size_t)n << bbits))
			return -ENOMEM;
		if (n > r->n) {
			/* Blocks used before (a truncate, a flush) hold old bytes; the rest is still zero. */
			if (r->hw > r->n)
				memset(r->buf + ((size_t)r->n << bbits), 0,
				       (size_t)((n < r->hw ? n : r->hw) - r->n) << bbits);
			if (n > r->hw)
				r->hw = (uint32_t)n;
			for (k = i + 1; k < j; k++) {
				memcpy(r->buf + ((size_t)(d->v[k].lblk - r->lblk) << bbits), d->v[k].buf,
				       (size_t)d->v[k].n << bbits);
				had += d->v[k].n;
				run_free(&d->v[k], bbits);
			}
			memmove(d->v + i + 1, d->v + j, (d->cnt - j) * sizeof(*d->v));
			d->cnt -= j - i - 1;
			atomic_fetch_add(&d->blocks, n - r->n - had);
			r->n = (uint32_t)n;
		}
		return i;
	}
	/* Grown at its front: joined in a new mapping. */
	s = first < r->lblk ? first : r->lblk;
	e = end > run_end(&d->v[j - 1]) ? end : run_end(&d->v[j - 1]);
	{
		size_t mapped = page_round((size_t)(e - s) << bbits);

		buf = mem_new(mapped);
		if (!buf)
			return -ENOMEM;
		for (k = i; k < j; k++) {
			memcpy(buf + ((size_t)(d->v[k].lblk - s) << bbits), d->v[k].buf,
			       (size_t)d->v[k].n << bbits);
			had += d->v[k].n;
			run_free(&d->v[k], bbits);
		}
		memmove(d->v + i + 1, d->v + j, (d->cnt - j) * sizeof(*d->v));
		d->cnt -= j - i - 1;
		d->v[i] = (struct rr_drun){ .lblk = s, .n = (uint32_t)(e - s), .hw = (uint32_t)(e - s),
					    .mapped = mapped, .buf = buf };
	}
	atomic_fetch_add(&d->blocks, e - s - had);
	return i;
}

int dbuf_write(struct rr_dbuf *d, unsigned int bbits, uint64_t pos, const char *src, uint64_t len)
{
	uint64_t first = pos >> bbits, end = ((pos + len - 1) >> bbits) + 1;
	int64_t i;

	if (!len)
		return 0;
	i = cover(d, bbits, first, end);
	if (i < 0)
		return (int)i;
	memcpy(d->v[i].buf + (pos - (d->v[i].lblk << bbits)), src, (size_t)len);
	return 0;
}

void dbuf_read(const struct rr_dbuf *d, unsigned int bbits, uint64_t pos, char *dst, uint64_t len)
{
	uint64_t end = pos + len;
	uint32_t i;

	memset(dst, 0, (size_t)len);
	for (i = first_from(d, pos >> bbits); i < d->cnt; i++) {
		uint64_t rs = d->v[i].lblk << bbits, re = run_end(&d->v[i]) << bbits;
		uint64_t s = rs > pos ? rs : pos, e = re < end ? re : end;

		if (rs >= end)
			break;
		if (e > s)
			memcpy(dst + (s - pos), d->v[i].buf + (s - rs), (size_t)(e - s));
	}
}

uint64_t dbuf_truncate(struct rr_dbuf *d, unsigned int bbits, uint64_t size)
{
	uint64_t keep = (size + ((uint64_t)1 << bbits) - 1) >> bbits, dropped = 0;
	uint64_t tail = size & (((uint64_t)1 << bbits) - 1);

	while (d->cnt && run_end(&d->v[d->cnt - 1]) > keep) {
		struct rr_drun *r = &d->v[d->cnt - 1];

		if (r->lblk >= keep) {
			dropped += r->n;
			run_free(r, bbits);
			d->cnt--;
		} else {
			dropped += run_end(r) - keep;
			r->n = (uint32_t)(keep - r->lblk);
		}
	}
	if (tail && d->cnt && run_end(&d->v[d->cnt - 1]) == keep) {
		struct rr_drun *r = &d->v[d->cnt - 1];

		memset(r->buf + ((size_t)(keep - 1 - r->lblk) << bbits) + tail, 0,
		       (size_t)(((uint64_t)1 << bbits) - tail));
	}
	atomic_fetch_sub(&d->blocks, dropped);
	return dropped;
}

void dbuf_consume(struct rr_dbuf *d, unsigned int bbits, uint32_t i, uint32_t n)
{
	struct rr_drun *r = &d->v[i];

	if (n >= r->n) {
		n = r->n;
		run_free(r, bbits);
		memmove(d->v + i, d->v + i + 1, (d->cnt - i - 1) * sizeof(*d->v));
		d->cnt--;
	} else {
		size_t cut = (size_t)n << bbits;

		/*
		 * Whole pages are handed back and the run starts further on: a
		 * big file's buffer goes out in requests of a few MiB, and
		 * moving the rest down each time costs as much as the file.
		 */
		if (cut % (size_t)sysconf(_SC_PAGESIZE) == 0 && !on_heap(r->mapped - cut)) {
			munmap(r->buf, cut);
			r->buf += cut;
			r->mapped -= cut;
			r->hw = r->hw > n ? r->hw - n : 0;
		} else {
			memmove(r->buf, r->buf + cut, (size_t)(r->n - n) << bbits);
		}
		r->lblk += n;
		r->n -= n;
	}
	atomic_fetch_sub(&d->blocks, n);
}

uint64_t dbuf_clear(struct rr_dbuf *d)
{
	uint64_t n = atomic_load(&d->blocks);
	uint32_t i;

	for (i = 0; i < d->cnt; i++)
		mem_free(d->v[i].buf, d->v[i].mapped, d->v[i].mapped);
	free(d->v);
	d->v = NULL;
	d->cnt = d->cap = 0;
	atomic_store(&d->blocks, 0);
	return n;
}

// SPDX-License-Identifier: GPL-2.0
/*
 * rr_cache: the metadata block cache, an io_manager in the stack (layer.h).
 *
 * Coherence with the data path, which writes the same device through its
 * own handle (io_data_write), is why there was no cache before.  The rules,
 * and where each is kept:
 *  - A block freed as metadata and reused for file data is never
 *    overwritten later by a stale cached copy: every data write is offered
 *    to this layer before the device writes it (cache_data, layer.h), and
 *    the copy is dropped, dirty or not (and a block known by its sum
 *    forgets it: the device no longer holds those bytes).  Write-back holds the cache lock
 *    while it writes, so a data write either waits for it or has dropped
 *    the block before write-back looks.
 *  - A block the device manager zeroes or discards is dropped first
 *    (cache_zeroout, cache_discard).
 *  - Writes addressed in bytes (the superblock, rr_fs_write_super) go to the
 *    device after every dirty block: the superblock never names what is
 *    not on the device yet (the orphan list's head, in a commit).  A write
 *    of part of it (libext2fs's flush writes only the words that changed,
 *    each run apart) patches its block here instead (write_byte_staged),
 *    and the write-back writes that block last: the superblock reaches the
 *    device in one write, never its fields without their checksum.
 *  - Blocks freed are not reused for file data before the commit that
 *    frees them is on disk: the allocator keeps them (allocators/mballoc.c,
 *    free_freed and rr_alloc_blocks; the commit brackets it, src/core/commit.c).
 *    Metadata may take them sooner, since it reaches the device only
 *    through this cache, at that same commit.
 *  - A block a commit frees is forgotten, dirty or not, before that commit
 *    writes anything (io_cache_forget, called by src/core/commit.c): its bytes
 *    are nobody's, and a transaction must not log them (writer.h).
 *  - Under a journal (io_cache_set_journal): no block reaches home before
 *    the transaction that holds it is committed (writeback_journaled), and
 *    write-back happens only at a flush, never to make room (make_room)
 *    nor for a byte write (cache_write_byte).
 * Every entry point takes cache.lock, taken after the fs lock (callers hold
 * it for metadata) and before nothing.  The channel's error handlers (which
 * record the error, and may write the superblock through this cache) run
 * after it is released.
 */
#include "cache.h"
#include "layer.h"
#include "sum.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The longest run of blocks one write-back syscall carries. */
#define CACHE_RUN_MAX 256
/* Dirty blocks may fill this share of the cache (in 1/8) before they are written back. */
#define CACHE_DIRTY_EIGHTHS 6
/* At least this many blocks, whatever cache_mb says (0 turns the cache off instead). */
#define CACHE_MIN_BLOCKS 64
/*
 * Blocks of one read at least this long are kept by their sum only: a
 * write of the same bytes is skipped, without a copy held.  The group
 * descriptors read at open are such a read (2048 blocks on 16 TiB, which
 * libext2fs keeps in memory itself and writes whole at every commit).
 */
#define CACHE_SUM_RUN 64
/* Hash chains of the blocks kept by their sum. */
#define CACHE_SUM_BUCKETS 1024

struct cache_ent {
	blk64_t blk;
	struct cache_ent *hnext;	/* hash chain */
	struct cache_ent *prev, *next;	/* recency: most recent after the head */
	int dirty;
	unsigned char data[];
};

/* A block the device holds, known by its sum (io/sum.h) only. */
struct sum_ent {
	blk64_t blk;
	uint64_t sum;
	struct sum_ent *next;
};

struct cache {
	struct io_layer layer;	/* first: the stack's view */
	/*
	 * The bound, MiB, and cache_mb=0's "no cache": every transfer goes
	 * straight down and the cache's calls say there is none.  Set at open
	 * (set_option, from ext2fs_open2's io_options) before the channel is
	 * anyone else's; read without the lock.
	 */
	unsigned int mb;
	int off;
	pthread_mutex_t lock;
	/* protected by lock: */
	struct sum_ent *sums[CACHE_SUM_BUCKETS];
	size_t nsums;
	struct cache_ent **hash;
	size_t nbuckets;
	struct cache_ent lru;		/* sentinel of the recency list */
	size_t n, ndirty, max;
	unsigned int bsize;
	struct io_cache_stats st;
	/* The first write-back failure not yet reported (werr 0: none). */
	errcode_t werr;
	blk64_t werr_blk;
	int werr_count;
	struct io_cache_journal jnl;	/* jnl.log NULL: no journal */
	/* Lock-free reads: want blocks are dirty under a journal. */
	atomic_int full;
};

/* ch's cache, or NULL when ch is none or one switched off. */
static struct cache *cache_of(io_channel ch)
{
	struct cache *c = ch->manager == rr_cache_io_manager ? ch->private_data : NULL;

	return c && !c->off ? c : NULL;
}

io_channel io_cache_lower(io_channel ch)
{
	struct io_layer *l;

	for (; (l = io_layer_of(ch)) && l->lower; ch = l->lower)
		if (ch->manager == rr_cache_io_manager)
			return l->lower;
	return ch;
}

static size_t bucket(const struct cache *c, blk64_t blk)
{
	return (size_t)((blk * 0x9E3779B97F4A7C15ULL) >> 20) & (c->nbuckets - 1);
}

static struct cache_ent *lookup(struct cache *c, blk64_t blk)
{
	struct cache_ent *e;

	for (e = c->hash[bucket(c, blk)]; e; e = e->hnext)
		if (e->blk == blk)
			return e;
	return NULL;
}

static struct sum_ent **sum_slot(struct cache *c, blk64_t blk)
{
	struct sum_ent **p = &c->sums[(blk * 0x9E3779B97F4A7C15ULL) >> 54];

	while (*p && (*p)->blk != blk)
		p = &(*p)->next;
	return p;
}

static void sum_drop(struct cache *c, blk64_t blk)
{
	struct sum_ent **p, *e;

	if (!c->nsums)
		return;
	p = sum_slot(c, blk);
	if (!(e = *p))
		return;
	*p = e->next;
	free(e);
	c->nsums--;
}

/* Keep blk by its sum (no memory: not kept, and its next write goes out). */
static void sum_keep(struct cache *c, blk64_t blk, const void *data)
{
	struct sum_ent **p = sum_slot(c, blk);

	if (!*p) {
		if (!(*p = calloc(1, sizeof(**p))))
			return;
		(*p)->blk = blk;
		c->nsums++;
	}
	(*p)->sum = io_block_sum(data, c->bsize);
}

/* Does the device hold data at blk, by the sum kept? */
static int sum_same(struct cache *c, blk64_t blk, const void *data)
{
	struct sum_ent *e = c->nsums ? *sum_slot(c, blk) : NULL;

	return e && e->sum == io_block_sum(data, c->bsize);
}

static void sums_drop_range(struct cache *c, blk64_t blk, uint64_t count)
{
	size_t i;

	if (!c->nsums)
		return;
	if (count <= c->nsums) {
		for (; count; count--, blk++)
			sum_drop(c, blk);
		return;
	}
	for (i = 0; i < CACHE_SUM_BUCKETS; i++) {
		struct sum_ent **p = &c->sums[i], *e;

		while ((e = *p)) {
			if (e->blk >= blk && e->blk - blk < count) {
				*p = e->next;
				free(e);
				c->nsums--;
			} else {
				p = &e->next;
			}
		}
	}
}

static void lru_unlink(struct cache_ent *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
}

static void lru_front(struct cache *c, struct cache_ent *e)
{
	e->next = c->lru.next;
	e->prev = &c->lru;
	c->lru.next->prev = e;
	c->lru.next = e;
}

static void drop(struct cache *c, struct cache_ent *e)
{
	struct cache_ent **p = &c->hash[bucket(c, e->blk)];

	while (*p != e)
		p = &(*p)->hnext;
	*p = e->hnext;
	lru_unlink(e);
	if (e->dirty)
		c->ndirty--;
	c->n--;
	free(e);
}

/* The device's content of [blk, blk+count) changes underneath: copies and sums go. */
static void drop_range(struct cache *c, blk64_t blk, uint64_t count)
{
	struct cache_ent *e, *next;

	sums_drop_range(c, blk, count);
	if (!c->n)
		return;
	if (count > c->n) {
		/* Wider than the cache: walk the cache, not the range. */
		for (e = c->lru.next; e != &c->lru; e = next) {
			next = e->next;
			if (e->blk >= blk && e->blk - blk < count)
				drop(c, e);
		}
		return;
	}
	for (; count; count--, blk++) {
		e = lookup(c, blk);
		if (e)
			drop(c, e);
	}
}

/* Bytes [offset, offset+size) lie in the primary superblock, and are not all of it. */
static int part_of_super(unsigned long offset, int size)
{
	return offset >= SUPERBLOCK_OFFSET && size > 0 &&
	       offset + (unsigned long)size <= SUPERBLOCK_OFFSET + SUPERBLOCK_SIZE &&
	       (unsigned long)size < SUPERBLOCK_SIZE;
}

static int by_block(const void *a, const void *b)
{
	const struct cache_ent *x = *(struct cache_ent *const *)a, *y = *(struct cache_ent *const *)b;

	return x->blk < y->blk ? -1 : x->blk > y->blk;
}

/* Blocks v[0..k) (in block order, the superblock's perhaps last) to their homes, runs merged into one write each; all clean after. */
static errcode_t write_home(struct cache *c, struct cache_ent **v, size_t k)
{
	unsigned char *run = NULL;
	errcode_t err = 0;
	size_t i, start, longest = 1;

	for (start = 0; start < k; start = i) {
		for (i = start + 1; i < k && i - start < CACHE_RUN_MAX && v[i]->blk == v[i - 1]->blk + 1; i++)
			;
		if (i - start > longest)
			longest = i - start;
	}
	/* Sized to the longest run: the most a commit usually writes is a few blocks. */
	if (longest > 1 && !(run = malloc(longest * c->bsize)))
		return EXT2_ET_NO_MEMORY;
	for (start = 0; start < k && !err; start = i) {
		for (i = start + 1; i < k && i - start < CACHE_RUN_MAX && v[i]->blk == v[i - 1]->blk + 1; i++)
			;
		if (i - start == 1) {
			err = io_channel_write_blk64(c->layer.lower, v[start]->blk, 1, v[start]->data);
		} else {
			size_t j;

			for (j = start; j < i; j++)
				memcpy(run + (j - start) * c->bsize, v[j]->data, c->bsize);
			err = io_channel_write_blk64(c->layer.lower, v[start]->blk, (int)(i - start), run);
		}
		if (err && !c->werr) {
			c->werr = err;
			c->werr_blk = v[start]->blk;
			c->werr_count = (int)(i - start);
		}
		if (!err) {
			c->st.writes++;
			c->st.written += i - start;
		}
		/* Failed or not, clean: what cannot be written is reported once, not retried forever. */
		for (; start < i; start++) {
			v[start]->dirty = 0;
			c->ndirty--;
		}
		if (err)
			break;
	}
	free(run);
	return err;
}

/*
 * Under a journal: v[0..k) in transactions of at most the journal's
 * capacity, each committed (jnl.log) before its blocks go home (the
 * writer's rule 3); the writer keeps it in the log until they are durable
 * (rule 4).
 * A transaction that cannot be committed leaves its blocks dirty and
 * unwritten: nothing half done reaches home.
 */
static errcode_t writeback_journaled(struct cache *c, struct cache_ent **v, size_t k)
{
	const struct io_cache_journal *j = &c->jnl;
	const unsigned char **data;
	blk64_t *blks;
	errcode_t err = 0;
	size_t s, n, i;

	blks = malloc((j->capacity < k ? j->capacity : k) * sizeof(*blks));
	data = malloc((j->capacity < k ? j->capacity : k) * sizeof(*data));
	if (!blks || !data) {
		free(blks);
		free(data);
		return EXT2_ET_NO_MEMORY;
	}
	if (k > j->capacity) {
		c->st.split++;
		j->too_big(j->arg, k);
	}
	for (s = 0; s < k && !err; s += n) {
		n = k - s < j->capacity ? k - s : j->capacity;
		for (i = 0; i < n; i++) {
			blks[i] = v[s + i]->blk;
			data[i] = v[s + i]->data;
		}
		if (j->log(j->arg, n, blks, data)) {
			err = EXT2_ET_SHORT_WRITE;
			if (!c->werr) {
				c->werr = err;
				c->werr_blk = blks[0];
				c->werr_count = 1;
			}
			break;
		}
		c->st.transactions++;
		/* Durable at the next transaction's first flush (rule 4): the log keeps this one till then. */
		err = write_home(c, v + s, n);
		if (err)
			j->abort(j->arg);	/* the log holds the only good copy: it stays */
		else if (j->checkpointed(j->arg))
			err = EXT2_ET_SHORT_WRITE;
	}
	free(blks);
	free(data);
	return err;
}

/*
 * Every dirty block to the device, in block order.  *flushed (may be NULL):
 * the device was flushed after them (a journal's checkpoint).
 */
static errcode_t writeback_flushed(struct cache *c, int *flushed)
{
	struct cache_ent **v, *e;
	errcode_t err;
	size_t k = 0;

	if (flushed)
		*flushed = 0;
	if (!c->ndirty)
		return 0;
	v = malloc(c->ndirty * sizeof(*v));
	if (!v)
		return EXT2_ET_NO_MEMORY;
	for (e = c->lru.next; e != &c->lru; e = e->next)
		if (e->dirty)
			v[k++] = e;
	qsort(v, k, sizeof(*v), by_block);
	if (c->jnl.log) {
		err = writeback_journaled(c, v, k);
		if (flushed)
			*flushed = !err;
		atomic_store(&c->full, c->ndirty >= c->jnl.want);
	} else {
		/* The superblock's block last (the byte-write rule above): it names what the rest holds. */
		if (k > 1 && v[0]->blk == SUPERBLOCK_OFFSET / c->bsize) {
			e = v[0];
			memmove(v, v + 1, (k - 1) * sizeof(*v));
			v[k - 1] = e;
		}
		err = write_home(c, v, k);
	}
	free(v);
	return err;
}

static errcode_t writeback(struct cache *c)
{
	return writeback_flushed(c, NULL);
}

/* After the lock is released: the channel's handler hears of a failed write-back. */
static errcode_t report(io_channel ch, errcode_t err)
{
	struct cache *c = ch->private_data;
	errcode_t werr;
	blk64_t blk;
	int count;

	pthread_mutex_lock(&c->lock);
	werr = c->werr;
	blk = c->werr_blk;
	count = c->werr_count;
	c->werr = 0;
	pthread_mutex_unlock(&c->lock);
	if (!werr)
		return err;
	if (ch->write_error)
		return ch->write_error(ch, (unsigned long)blk, count, NULL, (size_t)count * c->bsize, 0, werr);
	return err ? err : werr;
}

/* Room for one more block: the least recently used clean block goes. */
static errcode_t make_room(struct cache *c)
{
	struct cache_ent *e;
	errcode_t err;

	if (c->jnl.log) {
		/* Mid-operation: nothing goes home here; past the bound until the fs commits. */
		for (e = c->lru.prev; c->n >= c->max && e != &c->lru;) {
			struct cache_ent *prev = e->prev;

			if (!e->dirty)
				drop(c, e);
			e = prev;
		}
		return 0;
	}
	if (c->ndirty >= c->max / 8 * CACHE_DIRTY_EIGHTHS) {
		err = writeback(c);
		if (err)
			return err;
	}
	while (c->n >= c->max) {
		for (e = c->lru.prev; e != &c->lru && e->dirty; e = e->prev)
			;
		if (e == &c->lru)
			return writeback(c);	/* all dirty: written, then evictable */
		drop(c, e);
	}
	return 0;
}

static struct cache_ent *insert(struct cache *c, blk64_t blk, const void *data)
{
	struct cache_ent *e;

	if (make_room(c))
		return NULL;
	e = malloc(sizeof(*e) + c->bsize);
	if (!e)
		return NULL;
	e->blk = blk;
	e->dirty = 0;
	memcpy(e->data, data, c->bsize);
	e->hnext = c->hash[bucket(c, blk)];
	c->hash[bucket(c, blk)] = e;
	lru_front(c, e);
	c->n++;
	return e;
}

static void clear(struct cache *c)
{
	while (c->lru.next != &c->lru)
		drop(c, c->lru.next);
	sums_drop_range(c, 0, ~0ULL);
}

/* Empty, for blocks of bsize bytes: the bound in blocks, a hash table to match. */
static errcode_t shape(struct cache *c, unsigned int bsize)
{
	size_t buckets;

	clear(c);
	c->bsize = bsize;
	c->max = (size_t)c->mb * 1024 * 1024 / bsize;
	if (c->max < CACHE_MIN_BLOCKS)
		c->max = CACHE_MIN_BLOCKS;
	for (buckets = 1024; buckets < c->max; buckets <<= 1)
		;
	free(c->hash);
	c->nbuckets = buckets;
	c->hash = calloc(buckets, sizeof(*c->hash));
	if (!c->hash) {
		c->nbuckets = 0;
		c->max = 0;
		return EXT2_ET_NO_MEMORY;
	}
	return 0;
}

/* The stack's data callback: file data is about to be read or written at [off, off+len). */
static int cache_data(struct io_layer *l, int write, uint64_t off, uint64_t len,
		      const struct iovec *iov, int iovcnt)
{
	struct cache *c = (struct cache *)l;
	uint64_t first, last;

	(void)iov;
	(void)iovcnt;
	if (!write || !len || c->off)
		return 0;
	pthread_mutex_lock(&c->lock);
	if (c->n || c->nsums) {
		first = off / c->bsize;
		last = (off + len - 1) / c->bsize;
		c->st.dropped += c->n;
		drop_range(c, first, last - first + 1);
		c->st.dropped -= c->n;
	}
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/*
 * Always a layer, at the default bound: the bound (cache_mb) comes as an
 * io_option, which libext2fs hands over only once the channel is open;
 * cache_mb=0 then switches it off (cache_set_option).
 */
static errcode_t cache_open(const char *name, int flags, io_channel *channel)
{
	struct cache *c;
	io_channel ch;
	errcode_t err;

	err = io_stacked_open(rr_cache_io_manager, name, flags, 1, sizeof(*c), channel);
	if (err)
		return err;
	ch = *channel;
	c = ch->private_data;
	c->mb = IO_CACHE_MB_DEFAULT;
	c->lru.next = c->lru.prev = &c->lru;
	err = shape(c, (unsigned int)ch->block_size);
	if (err) {
		io_channel lower = c->layer.lower;

		free(c->hash);
		io_stacked_free(ch);
		io_channel_close(lower);
		*channel = NULL;
		return err;
	}
	pthread_mutex_init(&c->lock, NULL);
	c->layer.data = cache_data;
	return 0;
}

static errcode_t cache_close(io_channel ch)
{
	struct cache *c = ch->private_data;
	errcode_t err, lerr;

	if (--ch->refcount > 0)
		return 0;
	pthread_mutex_lock(&c->lock);
	err = writeback(c);
	clear(c);
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_destroy(&c->lock);
	free(c->hash);
	lerr = io_stacked_close(ch);
	return err ? err : lerr;
}

static errcode_t cache_set_blksize(io_channel ch, int blksize)
{
	struct cache *c = ch->private_data;
	errcode_t err;

	pthread_mutex_lock(&c->lock);
	err = writeback(c);
	if (!err)
		err = io_channel_set_blksize(c->layer.lower, blksize);
	if (!err && (unsigned int)blksize != c->bsize)
		err = shape(c, (unsigned int)blksize);
	if (!err)
		ch->block_size = blksize;
	pthread_mutex_unlock(&c->lock);
	return report(ch, err);
}

/*
 * cache_mb=N: the bound, MiB; 0 switches the cache off (what it holds
 * written back and dropped first).  Any other option is for the layers
 * below.
 */
static errcode_t cache_set_option(io_channel ch, const char *option, const char *arg)
{
	struct cache *c = ch->private_data;
	unsigned long mb;
	char *end;
	errcode_t err;

	if (strcmp(option, "cache_mb"))
		return io_stacked_set_option(ch, option, arg);
	if (!arg || !*arg)
		return EXT2_ET_INVALID_ARGUMENT;
	errno = 0;
	mb = strtoul(arg, &end, 10);
	if (*end || errno || mb > UINT_MAX)
		return EXT2_ET_INVALID_ARGUMENT;
	pthread_mutex_lock(&c->lock);
	err = writeback(c);
	if (!err) {
		c->mb = (unsigned int)mb;
		c->off = !mb;
		if (c->off)
			clear(c);
		else
			err = shape(c, c->bsize);
	}
	pthread_mutex_unlock(&c->lock);
	return report(ch, err);
}

/* Switched off: a block transfer goes straight down; this channel's handler hears of a failure. */
static errcode_t pass_down(io_channel ch, int write, unsigned long long block, int count, void *data)
{
	io_channel lower = ((struct cache *)ch->private_data)->layer.lower;
	errcode_t err;

	err = write ? io_channel_write_blk64(lower, block, count, data) :
		      io_channel_read_blk64(lower, block, count, data);
	if (err && write && ch->write_error)
		return ch->write_error(ch, (unsigned long)block, count, data, io_count_bytes(ch, count), 0, err);
	if (err && !write && ch->read_error)
		return ch->read_error(ch, (unsigned long)block, count, data, io_count_bytes(ch, count), 0, err);
	return err;
}

/* Is any block of [blk, blk+count) dirty here? */
static int any_dirty(struct cache *c, blk64_t blk, uint64_t count)
{
	struct cache_ent *e;

	if (!c->ndirty)
		return 0;
	for (e = c->lru.next; e != &c->lru; e = e->next)
		if (e->dirty && e->blk >= blk && e->blk - blk < count)
			return 1;
	return 0;
}

/* The bytes [off, off+len) at buf learn what the cache's dirty blocks hold there. */
static void overlay_dirty(struct cache *c, uint64_t off, uint64_t len, void *buf)
{
	uint64_t b;

	for (b = off / c->bsize; len && b <= (off + len - 1) / c->bsize; b++) {
		struct cache_ent *e = lookup(c, b);
		uint64_t bstart = b * c->bsize, from = off > bstart ? off : bstart;
		uint64_t to = off + len < bstart + c->bsize ? off + len : bstart + c->bsize;

		if (e && e->dirty)
			memcpy((char *)buf + (from - off), e->data + (from - bstart), to - from);
	}
}

/* Under a journal, a block just made dirty may fill the transaction: the fs hears of it. */
static void mark_dirty(struct cache *c, struct cache_ent *e)
{
	if (e->dirty)
		return;
	e->dirty = 1;
	c->ndirty++;
	if (c->jnl.log && c->ndirty >= c->jnl.want)
		atomic_store(&c->full, 1);
}

static errcode_t cache_read_blk64(io_channel ch, unsigned long long block, int count, void *data)
{
	struct cache *c = ch->private_data;
	unsigned char *p = data;
	struct cache_ent *e;
	errcode_t err = 0;
	int i, miss = 0;

	if (c->off)
		return pass_down(ch, 0, block, count, data);
	pthread_mutex_lock(&c->lock);
	if (count < 0) {
		/* Bytes (the superblock at open): from the device, after what is dirty there. */
		uint64_t bytes = (uint64_t)-count;

		if (c->jnl.log) {
			/* Nothing goes home outside a commit: the device's bytes, then what is dirty here. */
			err = io_channel_read_blk64(c->layer.lower, block, count, data);
			if (!err)
				overlay_dirty(c, (uint64_t)block * c->bsize, bytes, data);
		} else if (any_dirty(c, block, (bytes + c->bsize - 1) / c->bsize)) {
			err = writeback(c);
		}
		if (!err && !c->jnl.log)
			err = io_channel_read_blk64(c->layer.lower, block, count, data);
		pthread_mutex_unlock(&c->lock);
		return report(ch, err);
	}
	for (i = 0; i < count && !miss; i++)
		miss = !lookup(c, block + (unsigned int)i);
	if (miss) {
		c->st.misses += (uint64_t)count;
		err = io_channel_read_blk64(c->layer.lower, block, count, data);
		if (err) {
			pthread_mutex_unlock(&c->lock);
			if (ch->read_error)
				return ch->read_error(ch, (unsigned long)block, count, data,
						      (size_t)count * c->bsize, 0, err);
			return err;
		}
	} else {
		c->st.hits += (uint64_t)count;
	}
	for (i = 0; i < count; i++, p += c->bsize) {
		e = lookup(c, block + (unsigned int)i);
		if (e) {
			/* What the cache holds is newer than the device's. */
			memcpy(p, e->data, c->bsize);
			lru_unlink(e);
			lru_front(c, e);
		} else if (count >= CACHE_SUM_RUN) {
			sum_keep(c, block + (unsigned int)i, p);
		} else {
			insert(c, block + (unsigned int)i, p);
		}
	}
	pthread_mutex_unlock(&c->lock);
	return report(ch, 0);
}

/*
 * The bytes patch their blocks here (read first if need be), dirty: under
 * a journal for the next transaction, else for the next write-back.
 */
static errcode_t write_byte_staged(struct cache *c, unsigned long offset, int size, const void *data)
{
	unsigned char *buf;
	uint64_t b;
	errcode_t err = 0;

	if (size <= 0)
		return 0;
	buf = malloc(c->bsize);
	if (!buf)
		return EXT2_ET_NO_MEMORY;
	for (b = offset / c->bsize; !err && b <= (offset + (unsigned long)size - 1) / c->bsize; b++) {
		uint64_t bstart = b * c->bsize, from = offset > bstart ? offset : bstart;
		uint64_t to = offset + (unsigned long)size < bstart + c->bsize ? offset + (unsigned long)size
								     : bstart + c->bsize;
		struct cache_ent *e = lookup(c, b);

		if (!e) {
			err = io_channel_read_blk64(c->layer.lower, b, 1, buf);
			if (!err && !(e = insert(c, b, buf)))
				err = EXT2_ET_NO_MEMORY;
			if (err)
				break;
		}
		sum_drop(c, b);
		memcpy(e->data + (from - bstart), (const char *)data + (from - offset), to - from);
		mark_dirty(c, e);
	}
	free(buf);
	return err;
}

static errcode_t cache_write_byte(io_channel ch, unsigned long offset, int size, const void *data)
{
	struct cache *c = ch->private_data;
	struct cache_ent *e;
	errcode_t err;
	uint64_t b;

	if (c->off)
		return io_channel_write_byte(c->layer.lower, offset, size, data);
	pthread_mutex_lock(&c->lock);
	if (c->jnl.log || part_of_super(offset, size)) {
		err = write_byte_staged(c, offset, size, data);
		pthread_mutex_unlock(&c->lock);
		return report(ch, err);
	}
	err = writeback(c);
	if (!err)
		err = io_channel_write_byte(c->layer.lower, offset, size, data);
	/* Clean copies of the blocks it touched learn the new bytes; sums are stale. */
	for (b = offset / c->bsize; !err && size > 0 && b <= (offset + (unsigned long)size - 1) / c->bsize; b++) {
		uint64_t bstart = b * c->bsize, from = offset > bstart ? offset : bstart;
		uint64_t to = offset + (unsigned long)size < bstart + c->bsize ? offset + (unsigned long)size
								     : bstart + c->bsize;

		sum_drop(c, b);
		e = lookup(c, b);
		if (e)
			memcpy(e->data + (from - bstart), (const char *)data + (from - offset), to - from);
	}
	pthread_mutex_unlock(&c->lock);
	return report(ch, err);
}

static errcode_t cache_write_blk64(io_channel ch, unsigned long long block, int count,
				   const void *data)
{
	struct cache *c = ch->private_data;
	const unsigned char *p = data;
	struct cache_ent *e;
	errcode_t err = 0;
	int i;

	if (c->off)
		return pass_down(ch, 1, block, count, (void *)data);
	/* Bytes (the superblock at 1024-byte blocks): as a byte write. */
	if (count < 0)
		return cache_write_byte(ch, (unsigned long)(block * c->bsize), -count, data);
	pthread_mutex_lock(&c->lock);
	for (i = 0; i < count; i++, p += c->bsize) {
		e = lookup(c, block + (unsigned int)i);
		if (e) {
			lru_unlink(e);
			lru_front(c, e);
			if (!memcmp(e->data, p, c->bsize))
				continue;	/* unchanged: nothing to write */
			memcpy(e->data, p, c->bsize);
		} else {
			if (sum_same(c, block + (unsigned int)i, p))
				continue;	/* the device holds these bytes */
			sum_drop(c, block + (unsigned int)i);
			e = insert(c, block + (unsigned int)i, p);
			if (!e && c->jnl.log) {
				err = EXT2_ET_NO_MEMORY;	/* home now would be outside a transaction */
				break;
			}
			if (!e) {
				/* No memory: this block goes to the device now, in order. */
				err = writeback(c);
				if (!err)
					err = io_channel_write_blk64(c->layer.lower, block + (unsigned int)i, 1, p);
				if (err)
					break;
				continue;
			}
		}
		mark_dirty(c, e);
	}
	pthread_mutex_unlock(&c->lock);
	return report(ch, err);
}

static errcode_t cache_flush(io_channel ch)
{
	struct cache *c = ch->private_data;
	errcode_t err;

	int flushed;

	pthread_mutex_lock(&c->lock);
	err = writeback_flushed(c, &flushed);
	pthread_mutex_unlock(&c->lock);
	err = report(ch, err);
	/* A journal's checkpoint ended with a flush already. */
	return err || flushed ? err : io_channel_flush(c->layer.lower);
}

void io_cache_forget(io_channel ch, blk64_t blk, uint64_t count)
{
	struct cache *c = cache_of(ch);

	if (!c || !count)
		return;
	pthread_mutex_lock(&c->lock);
	c->st.forgotten += c->n;
	drop_range(c, blk, count);
	c->st.forgotten -= c->n;
	pthread_mutex_unlock(&c->lock);
}

int io_cache_set_journal(io_channel ch, const struct io_cache_journal *j)
{
	struct cache *c = cache_of(ch);

	if (!c)
		return -1;
	pthread_mutex_lock(&c->lock);
	if (j)
		c->jnl = *j;
	else
		memset(&c->jnl, 0, sizeof(c->jnl));
	atomic_store(&c->full, j && c->ndirty >= j->want);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

int io_cache_journal_full(io_channel ch)
{
	struct cache *c = cache_of(ch);

	return c && atomic_load_explicit(&c->full, memory_order_relaxed);
}

int io_cache_stats(io_channel ch, struct io_cache_stats *st)
{
	struct cache *c = cache_of(ch);

	if (!c)
		return -1;
	pthread_mutex_lock(&c->lock);
	*st = c->st;
	st->blocks = c->n;
	st->dirty = c->ndirty;
	st->max = c->max;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* Zeroed or discarded below: the device's content is the truth, cached copies go first. */
static errcode_t drop_then(io_channel ch, unsigned long long block, unsigned long long count,
			   errcode_t (*op)(io_channel, unsigned long long, unsigned long long))
{
	struct cache *c = ch->private_data;
	errcode_t err;

	pthread_mutex_lock(&c->lock);
	drop_range(c, block, count);
	err = op(c->layer.lower, block, count);
	pthread_mutex_unlock(&c->lock);
	return err;
}

static errcode_t cache_zeroout(io_channel ch, unsigned long long block, unsigned long long count)
{
	return drop_then(ch, block, count, io_channel_zeroout);
}

static errcode_t cache_discard(io_channel ch, unsigned long long block, unsigned long long count)
{
	return drop_then(ch, block, count, io_channel_discard);
}

static struct struct_io_manager cache_manager =
	IO_LAYER_MANAGER(cache, "rrfuse metadata cache", cache_set_blksize,
			 cache_set_option, io_stacked_readahead);

io_manager rr_cache_io_manager = &cache_manager;

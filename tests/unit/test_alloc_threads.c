// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests: the allocator with requests running at once, as the daemon
 * runs them, on a real image without a mount.  File data is allocated
 * without the "fs lock" (RR_ALLOC_NOLOCK) by several threads while another
 * thread, holding the lock, has libext2fs allocate and free metadata
 * blocks through the callbacks and frees file extents.  The lock here is a
 * mutex whose release settles libext2fs's choices (rr_alloc_settle), as
 * the daemon's.  Writers map what they took under it now and then
 * (rr_alloc_mapped, as the daemon's map_run), and give some back unmapped
 * (map_run's failure path).
 *
 * At the end no block was handed out twice, every block mapped is in
 * libext2fs's bitmap and none held unmapped is, the free count is exact,
 * and the buddies equal the bitmaps (check is on: every mapping verifies
 * the groups it changed).  Run under ThreadSanitizer by tools/run-tests.sh.
 */
#include "unit.h"
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rrfuse/alloc.h"
#include "../../allocators/mballoc.h"

#define WRITERS 4
#define ROUNDS 400
#define MAXEXT (WRITERS * ROUNDS * 2)

static char img[64];
static ext2_filsys fs;
static struct rr_alloc *a;
static pthread_mutex_t big = PTHREAD_MUTEX_INITIALIZER;
static uint64_t start_free;

static void big_lock(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&big);
}

static void big_unlock(void *arg)
{
	(void)arg;
	rr_alloc_settle(a);
	pthread_mutex_unlock(&big);
}

static void setup_opts(unsigned int group_prealloc)
{
	struct rr_alloc_tunables t;

	/* 128 MiB of 1 KiB blocks: 16 groups, so requests meet in the same groups. */
	fs = unit_image(img, "128M", "-b 1024 -m 5");
	rr_alloc_tunables_default(&t);
	t.check = 1;
	t.mb_stats = 1;
	t.mb_group_prealloc = group_prealloc;
	ck_assert_int_eq(rr_alloc_attach(fs, &t, &a), 0);
	rr_alloc_set_lock(a, big_lock, big_unlock, NULL);
	start_free = ext2fs_free_blocks_count(fs->super);
}

static void setup(void)
{
	setup_opts(512);
}

static void teardown(void)
{
	big_lock(NULL);
	rr_alloc_verify(a);
	big_unlock(NULL);
	rr_alloc_detach(a);
	ext2fs_close_free(&fs);
	unlink(img);
}

/* Extents handed out and still owned, by writer. */
struct writer {
	int id;
	unsigned int seed;
	struct rr_extent ext[ROUNDS * 2];
	int n;
	int nmapped;		/* ext[0..nmapped) are mapped, the rest held */
	int given_back;		/* blocks given back unmapped */
	int enospc;
	int root;
	int keep_pas;		/* never takes the lock: no PA discard, no mapping */
	int bad;		/* an answer that is neither an extent nor ENOSPC (checked by the main thread) */
};

/* Under the lock: map what w holds (the last extent given back instead, if give_back). */
static void map_held(struct writer *w, int give_back)
{
	if (give_back && w->n > w->nmapped) {
		struct rr_extent *e = &w->ext[--w->n];
		uint64_t free = ext2fs_free_blocks_count(fs->super);

		ck_assert(ext2fs_test_block_bitmap_range2(fs->block_map, e->pblk, e->len));
		rr_free_blocks(a, e->pblk, e->len);
		/* Never on disk: back at once, with no change to libext2fs's counts. */
		ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), free);
		w->given_back += e->len;
	}
	for (; w->nmapped < w->n; w->nmapped++)
		rr_alloc_mapped(a, w->ext[w->nmapped].pblk, w->ext[w->nmapped].len);
}

static void *write_files(void *arg)
{
	struct writer *w = arg;
	/* Each writer: its own files (inodes), written in pieces, some small (locality groups). */
	ext2_ino_t ino = 100 + (ext2_ino_t)w->id * 1000;
	uint64_t lblk = 0;
	int r;

	for (r = 0; r < ROUNDS; r++) {
		struct rr_alloc_req req = { .ino = ino, .lblk = lblk,
					    .len = 1 + (uint32_t)rand_r(&w->seed) % 48,
					    .flags = RR_ALLOC_DATA | RR_ALLOC_NOLOCK |
						     (w->root ? RR_ALLOC_USE_ROOT_RESV : 0) };
		struct rr_extent ex;
		int ret;

		req.isize = (lblk + req.len) * 1024;
		if (lblk && w->n)	/* the last extent may have been given back */
			req.nbr.pleft = req.goal = w->ext[w->n - 1].pblk + w->ext[w->n - 1].len;
		req.nbr.lleft = lblk ? lblk - 1 : 0;
		ret = rr_alloc_blocks(a, &req, &ex);
		if (ret == -ENOSPC) {
			w->enospc++;
			continue;
		}
		if (ret || !ex.len || ex.len > req.len) {
			w->bad = ret ? ret : -1;
			break;
		}
		w->ext[w->n++] = ex;
		lblk += ex.len;
		if (!w->keep_pas && rand_r(&w->seed) % 4 == 0) {
			big_lock(NULL);
			map_held(w, rand_r(&w->seed) % 8 == 0);
			big_unlock(NULL);
		}
		/* Now and then a new file: its PAs go, as at a last close. */
		if (!w->keep_pas && rand_r(&w->seed) % 16 == 0) {
			big_lock(NULL);
			rr_alloc_discard_inode(a, ino);
			big_unlock(NULL);
			ino++;
			lblk = 0;
		}
	}
	return NULL;
}

static atomic_int stop;

/* Under the lock: libext2fs's own blocks (extent-tree nodes and the like), kept and freed. */
static void *metadata(void *arg)
{
	blk64_t held[64];
	int n = 0;

	(void)arg;
	while (!atomic_load(&stop)) {
		big_lock(NULL);
		if (n < 64 && ext2fs_alloc_block2(fs, 0, NULL, &held[n]) == 0)
			n++;
		if (n == 64)
			while (n)
				ext2fs_block_alloc_stats2(fs, held[--n], -1);
		big_unlock(NULL);
		/*
		 * Let the writers in: a mutex is not fair, and this loop could
		 * take it back at once every time (seen under ThreadSanitizer,
		 * with -o check's verification inside: writers starved for
		 * minutes).
		 */
		usleep(200);
	}
	big_lock(NULL);
	while (n)
		ext2fs_block_alloc_stats2(fs, held[--n], -1);
	big_unlock(NULL);
	return NULL;
}

static int cmp_ext(const void *x, const void *y)
{
	const struct rr_extent *p = x, *q = y;

	return p->pblk < q->pblk ? -1 : p->pblk > q->pblk;
}

/* All extents: disjoint, mapped, in the bitmap; the free count is the start's minus them. */
static uint64_t check_extents(struct writer *w, int nw)
{
	static struct rr_extent all[MAXEXT];
	uint64_t used = 0;
	int i, j, n = 0;

	for (i = 0; i < nw; i++) {
		ck_assert_int_eq(w[i].nmapped, w[i].n);
		for (j = 0; j < w[i].n; j++)
			all[n++] = w[i].ext[j];
	}
	qsort(all, (size_t)n, sizeof(all[0]), cmp_ext);
	for (i = 0; i < n; i++) {
		if (i)
			ck_assert_msg(all[i - 1].pblk + all[i - 1].len <= all[i].pblk,
				      "blocks %llu..%llu handed out twice",
				      (unsigned long long)all[i].pblk,
				      (unsigned long long)(all[i - 1].pblk + all[i - 1].len - 1));
		for (j = 0; j < (int)all[i].len; j++)
			ck_assert(ext2fs_test_block_bitmap2(fs->block_map, all[i].pblk + (uint64_t)j));
		used += all[i].len;
	}
	return used;
}

static void run_writers(struct writer *w, int nw, int with_metadata)
{
	pthread_t t[WRITERS], m;
	int i;

	atomic_store(&stop, 0);
	if (with_metadata)
		ck_assert_int_eq(pthread_create(&m, NULL, metadata, NULL), 0);
	for (i = 0; i < nw; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, write_files, &w[i]), 0);
	for (i = 0; i < nw; i++)
		pthread_join(t[i], NULL);
	atomic_store(&stop, 1);
	if (with_metadata)
		pthread_join(m, NULL);
	big_lock(NULL);
	for (i = 0; i < nw; i++) {
		ck_assert_int_eq(w[i].bad, 0);
		map_held(&w[i], 0);
	}
	big_unlock(NULL);
}

START_TEST(writers_at_once_never_share_a_block)
{
	static struct writer w[WRITERS];
	uint64_t used;
	int i;

	memset(w, 0, sizeof(w));
	for (i = 0; i < WRITERS; i++) {
		w[i].id = i;
		w[i].seed = 7u + (unsigned int)i;
	}
	run_writers(w, WRITERS, 1);
	big_lock(NULL);
	rr_alloc_discard_all(a);
	used = check_extents(w, WRITERS);
	ck_assert_uint_gt(used, 0);
	for (i = 0; i < WRITERS; i++)
		ck_assert_int_gt(w[i].given_back, 0);
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), start_free - used);
	ck_assert_uint_eq(rr_alloc_free(a), start_free - used);
	ck_assert_uint_eq(atomic_load(&a->claimed), 0);
	/* Freed under the lock, as the daemon frees: every extent goes back. */
	for (i = 0; i < WRITERS; i++)
		while (w[i].n) {
			w[i].n--;
			rr_free_blocks(a, w[i].ext[w[i].n].pblk, w[i].ext[w[i].n].len);
		}
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), start_free);
	big_unlock(NULL);
}
END_TEST

START_TEST(writers_at_once_stop_at_the_reserves)
{
	static struct writer w[WRITERS];
	uint64_t r = ext2fs_r_blocks_count(fs->super), meta = rr_alloc_meta_reserve(a);
	struct rr_alloc_req req = { .len = 64, .flags = RR_ALLOC_DATA };
	struct rr_extent ex;
	int i, rounds, full = 0;

	/* Rounds of writers until each of them meets ENOSPC: the reserves stay whole throughout. */
	memset(w, 0, sizeof(w));
	for (rounds = 0; rounds < 40 && !full; rounds++) {
		full = 1;
		for (i = 0; i < WRITERS; i++) {
			w[i].id = i;
			w[i].seed = 100u * (unsigned int)rounds + (unsigned int)i;
			w[i].enospc = 0;
		}
		run_writers(w, WRITERS, 0);
		big_lock(NULL);
		check_extents(w, WRITERS);
		ck_assert_uint_ge(ext2fs_free_blocks_count(fs->super), r + meta);
		big_unlock(NULL);
		for (i = 0; i < WRITERS; i++) {
			full &= w[i].enospc > 0;
			/* What was handed out stays in use; the record starts again. */
			w[i].n = w[i].nmapped = 0;
		}
	}
	ck_assert(full);
	/* What one writer's short find left over, taken alone: then exactly the reserves are left. */
	while (rr_alloc_blocks(a, &req, &ex) == 0)
		;
	big_lock(NULL);
	rr_alloc_discard_all(a);
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), r + meta);
	ck_assert_uint_eq(rr_alloc_avail(a, 0), 0);
	big_unlock(NULL);
}
END_TEST

/*
 * No lock that every allocation takes: with every group loaded, a writer
 * allocates while another thread holds the fs lock the whole time.  Its
 * blocks reach libext2fs only when they are mapped: a section that takes
 * the lock before that (a commit, say) sees none of them in the bitmap.
 */
START_TEST(allocates_while_the_fs_lock_is_held)
{
	static struct writer w;
	struct timespec until;
	uint64_t used;
	pthread_t t;
	uint32_t g;
	int ret, i;

	for (g = 0; g < a->ngroups; g++)
		ck_assert_int_eq(mb_load_group(a, g), 0);
	memset(&w, 0, sizeof(w));
	w.seed = 3;
	w.keep_pas = 1;
	big_lock(NULL);
	ck_assert_int_eq(pthread_create(&t, NULL, write_files, &w), 0);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 30;
	ret = pthread_timedjoin_np(t, NULL, &until);
	/* Still holding the lock: nothing of it is in libext2fs's counts yet. */
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), start_free);
	big_unlock(NULL);
	if (ret)
		pthread_join(t, NULL);
	ck_assert_msg(ret == 0, "the writer waited for the fs lock");
	ck_assert_int_eq(w.bad, 0);
	ck_assert_int_gt(w.n, 0);
	big_lock(NULL);
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), start_free);
	for (i = 0; i < w.n; i++)
		ck_assert(ext2fs_test_block_bitmap_range2(fs->block_map, w.ext[i].pblk, w.ext[i].len));
	rr_alloc_verify(a);
	map_held(&w, 0);
	used = check_extents(&w, 1);
	ck_assert_uint_eq(ext2fs_free_blocks_count(fs->super), start_free - used);
	big_unlock(NULL);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("alloc_threads");
	TCase *tc = tcase_create("nolock");

	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, writers_at_once_never_share_a_block);
	tcase_add_test(tc, writers_at_once_stop_at_the_reserves);
	tcase_add_test(tc, allocates_while_the_fs_lock_is_held);
	suite_add_tcase(s, tc);
	return unit_run(s);
}

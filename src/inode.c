// SPDX-License-Identifier: GPL-2.0
/*
 * In-memory inodes and on-disk inode helpers.
 *
 * An rr_inode exists while the kernel holds lookups on it or it is open.  It
 * carries the inode's data lock, its cached block map and i_size.  Everything
 * else about the inode lives on disk and is read and written through
 * libext2fs under the fs lock (libext2fs keeps a small inode cache), so there
 * is one copy of each field and nothing to keep coherent.
 *
 * An inode whose last link is removed while in use is freed when its last
 * lookup and open are gone (rr_iput); until then it is on the on-disk orphan
 * list (src/orphan.c), so that a crash cannot leak it.
 */
#include "rrfs.h"
#include "ialloc.h"
#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/sysmacros.h>

int rr_itab_init(struct rr_itab *t)
{
	pthread_mutex_init(&t->lock, NULL);
	t->nbuckets = 4096;
	t->hash = calloc(t->nbuckets, sizeof(*t->hash));
	return t->hash ? 0 : -ENOMEM;
}

static size_t ihash(const struct rr_itab *t, ext2_ino_t ino)
{
	return (ino * 2654435761u) & (t->nbuckets - 1);
}

static void itab_grow(struct rr_itab *t)
{
	size_t i, n = t->nbuckets * 2;
	struct rr_inode **h = calloc(n, sizeof(*h));

	if (!h)
		return;
	for (i = 0; i < t->nbuckets; i++) {
		struct rr_inode *ri = t->hash[i], *next;

		for (; ri; ri = next) {
			size_t b = (ri->ino * 2654435761u) & (n - 1);

			next = ri->hnext;
			ri->hnext = h[b];
			h[b] = ri;
		}
	}
	free(t->hash);
	t->hash = h;
	t->nbuckets = n;
}

static struct rr_inode *itab_find_locked(struct rr_itab *t, ext2_ino_t ino)
{
	struct rr_inode *ri = t->hash ? t->hash[ihash(t, ino)] : NULL;	/* none before rr_itab_init */

	while (ri && ri->ino != ino)
		ri = ri->hnext;
	return ri;
}

struct rr_inode *rr_ifind(struct rr_fs *rfs, ext2_ino_t ino)
{
	struct rr_inode *ri;

	pthread_mutex_lock(&rfs->itab.lock);
	ri = itab_find_locked(&rfs->itab, ino);
	pthread_mutex_unlock(&rfs->itab.lock);
	return ri;
}

/*
 * Find or create the in-memory inode and take one kernel lookup reference.
 * Caller holds the fs lock, so that a name found in a directory and the
 * reference taken on its inode are one step for unlink and forget.
 */
struct rr_inode *rr_iget(struct rr_fs *rfs, ext2_ino_t ino)
{
	struct rr_itab *t = &rfs->itab;
	struct ext2_inode_large in;
	struct rr_inode *ri, *nri;

	pthread_mutex_lock(&t->lock);
	ri = itab_find_locked(t, ino);
	if (ri) {
		ri->nlookup++;
		pthread_mutex_unlock(&t->lock);
		return ri;
	}
	pthread_mutex_unlock(&t->lock);

	/* Not cached: read the inode without holding the table lock (it is a leaf). */
	if (inode_load(rfs, ino, &in))
		return NULL;
	nri = calloc(1, sizeof(*nri));
	if (!nri)
		return NULL;
	nri->ino = ino;
	pthread_rwlock_init(&nri->rw, NULL);
	nri->size = EXT2_I_SIZE(&in);
	nri->extents = !!(in.i_flags & EXT4_EXTENTS_FL);
	atomic_init(&nri->guard, in.i_flags & RR_FL_GUARD);

	pthread_mutex_lock(&t->lock);
	ri = itab_find_locked(t, ino);
	if (ri) {
		/* Another thread won the race; its copy is as good as ours. */
		pthread_rwlock_destroy(&nri->rw);
		free(nri);
	} else {
		ri = nri;
		if (t->count >= t->nbuckets)
			itab_grow(t);
		ri->hnext = t->hash[ihash(t, ino)];
		t->hash[ihash(t, ino)] = ri;
		t->count++;
	}
	ri->nlookup++;
	pthread_mutex_unlock(&t->lock);
	return ri;
}

/* One more open file handle on an inode the kernel holds a reference to. */
void rr_iopen(struct rr_fs *rfs, struct rr_inode *ri)
{
	pthread_mutex_lock(&rfs->itab.lock);
	ri->nopen++;
	pthread_mutex_unlock(&rfs->itab.lock);
}

static void rr_inode_free(struct rr_fs *rfs, struct rr_inode *ri)
{
	if (rfs->hooks && rfs->hooks->evict)
		rfs->hooks->evict(rfs, ri);
	pthread_rwlock_destroy(&ri->rw);
	free(ri);
}

/*
 * The in-memory inode of a request's node, pinned until rr_iunpin(): the
 * kernel may send FORGET and RELEASE for an unlinked file while a WRITE of
 * its pages is still being served on another thread, and the inode (in
 * memory and on disk) must outlive that WRITE.
 */
struct rr_inode *rr_ipin(struct rr_fs *rfs, ext2_ino_t ino)
{
	struct rr_inode *ri;

	pthread_mutex_lock(&rfs->itab.lock);
	ri = itab_find_locked(&rfs->itab, ino);
	if (ri)
		ri->pins++;
	pthread_mutex_unlock(&rfs->itab.lock);
	return ri;
}

/*
 * The chattr +i / +a flags of ino (RR_FL_GUARD bits), from its in-memory
 * inode: the kernel holds every inode it sends a request about, so no disk
 * read is needed.  Any lock context; the itab lock is a leaf.
 */
unsigned int rr_iguard(struct rr_fs *rfs, ext2_ino_t ino)
{
	struct rr_inode *ri;
	unsigned int g = 0;

	pthread_mutex_lock(&rfs->itab.lock);
	ri = itab_find_locked(&rfs->itab, ino);
	if (ri)
		g = atomic_load(&ri->guard);
	pthread_mutex_unlock(&rfs->itab.lock);
	return g;
}

/* Blocks of delayed data ino holds (counted in st_blocks, as ext4 counts its delalloc blocks). */
uint64_t rr_idelayed(struct rr_fs *rfs, ext2_ino_t ino)
{
	struct rr_inode *ri;
	uint64_t n = 0;

	pthread_mutex_lock(&rfs->itab.lock);
	ri = itab_find_locked(&rfs->itab, ino);
	if (ri)
		n = atomic_load(&ri->dbuf.blocks);
	pthread_mutex_unlock(&rfs->itab.lock);
	return n;
}

/* Bump the xattr generation of ino's in-memory inode, if there is one. */
void rr_ixattr_changed(struct rr_fs *rfs, ext2_ino_t ino)
{
	struct rr_inode *ri;

	/* Under the table lock: an inode in the table is not freed meanwhile. */
	pthread_mutex_lock(&rfs->itab.lock);
	ri = itab_find_locked(&rfs->itab, ino);
	if (ri)
		atomic_fetch_add(&ri->xattr_gen, 1);
	pthread_mutex_unlock(&rfs->itab.lock);
}

/* Unhash ri if nothing holds it any more; then the caller frees it. Under itab.lock. */
static int itab_release_locked(struct rr_itab *t, struct rr_inode *ri)
{
	struct rr_inode **pp;

	if (ri->nlookup || ri->nopen || ri->pins)
		return 0;
	for (pp = &t->hash[ihash(t, ri->ino)]; *pp != ri; pp = &(*pp)->hnext)
		;
	*pp = ri->hnext;
	t->count--;
	return 1;
}

/* The last holder frees: the in-memory inode, then an unlinked inode on disk. */
static void rr_inode_gone(struct rr_fs *rfs, struct rr_inode *ri)
{
	ext2_ino_t ino = ri->ino;

	rr_inode_free(rfs, ri);
	if (!rfs->ro)
		inode_free_if_unlinked(rfs, ino);
}

void rr_iunpin(struct rr_fs *rfs, struct rr_inode *ri)
{
	int gone;

	pthread_mutex_lock(&rfs->itab.lock);
	ri->pins--;
	gone = itab_release_locked(&rfs->itab, ri);
	pthread_mutex_unlock(&rfs->itab.lock);
	if (gone)
		rr_inode_gone(rfs, ri);
}

/* Drop nlookup kernel references or one open reference; the last holder frees. */
void rr_iput(struct rr_fs *rfs, struct rr_inode *ri, uint64_t nlookup, int close)
{
	struct rr_itab *t = &rfs->itab;
	ext2_ino_t ino = ri->ino;
	int gone;

	pthread_mutex_lock(&t->lock);
	if (nlookup > ri->nlookup) {
		rr_log(LOG_ERR, "inode %u: forget of %llu lookups, only %llu held", ino,
		       (unsigned long long)nlookup, (unsigned long long)ri->nlookup);
		nlookup = ri->nlookup;
	}
	ri->nlookup -= nlookup;
	if (close && ri->nopen)
		ri->nopen--;
	gone = itab_release_locked(t, ri);
	pthread_mutex_unlock(&t->lock);
	if (gone)
		rr_inode_gone(rfs, ri);
}

/*
 * Free every in-memory inode, deleting those unlinked; the table itself stays,
 * because the unmount's orphan cleanup looks inodes up again after this.
 */
void rr_itab_empty(struct rr_fs *rfs)
{
	struct rr_itab *t = &rfs->itab;
	size_t i;

	if (!t->hash)
		return;
	for (i = 0; i < t->nbuckets; i++) {
		struct rr_inode *ri, *next;

		for (ri = t->hash[i]; ri; ri = next) {
			ext2_ino_t ino = ri->ino;

			next = ri->hnext;
			t->hash[i] = next;
			t->count--;
			rr_inode_free(rfs, ri);
			if (!rfs->ro)
				inode_free_if_unlinked(rfs, ino);
		}
	}
}

void rr_itab_destroy(struct rr_fs *rfs)
{
	rr_itab_empty(rfs);
	free(rfs->itab.hash);
	rfs->itab.hash = NULL;
}

/* Caller holds the fs lock. */
int inode_load(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in)
{
	errcode_t err;

	/*
	 * libext2fs copies only the image's inode size: with 128-byte inodes
	 * the rest (i_extra_isize, the nanoseconds, crtime) would be whatever
	 * the buffer held.
	 */
	memset(in, 0, sizeof(*in));
	err = ext2fs_read_inode_full(rfs->fs, ino, (struct ext2_inode *)in, sizeof(*in));

	/*
	 * libext2fs 1.47 copies an inode into its next cache slot before it
	 * checks the checksum, and on a mismatch leaves the slot's number as
	 * it was: the inode that slot held would read back as this corrupt
	 * one (seen: the root directory as a regular file, ENOTDIR for every
	 * lookup).  Which slot depends on how many inodes were read since
	 * mount, so forget them all.
	 */
	if (err == EXT2_ET_INODE_CSUM_INVALID)
		ext2fs_flush_icache(rfs->fs);
	return rr_err_ino(err, ino);
}

int inode_read(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in)
{
	int ret;

	rr_fs_lock(rfs);
	ret = inode_load(rfs, ino, in);
	rr_fs_end_op(rfs);
	return ret;
}

/* Any change may move mtime or ctime past atime: the next read looks again (inode_accessed). */
static void atime_look_again(struct rr_fs *rfs, ext2_ino_t ino)
{
	struct rr_inode *ri;

	pthread_mutex_lock(&rfs->itab.lock);
	ri = itab_find_locked(&rfs->itab, ino);
	if (ri)
		atomic_store(&ri->atime_quiet, 0);
	pthread_mutex_unlock(&rfs->itab.lock);
}

/* Caller holds the fs lock. */
int inode_write(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in)
{
	int ret = rr_err_ino(ext2fs_write_inode_full(rfs->fs, ino, (struct ext2_inode *)in, sizeof(*in)), ino);

	atime_look_again(rfs, ino);
	return ret;
}

/* Does the large inode's extra space hold the field ending at byte end? */
static int fits(const struct ext2_inode_large *in, size_t end)
{
	return (size_t)EXT2_GOOD_OLD_INODE_SIZE + in->i_extra_isize >= end;
}

/* relatime's day: an access time older than this is renewed by any read. */
#define RR_RELATIME_SECS (24 * 60 * 60)

#define FIELD_END(f) (offsetof(struct ext2_inode_large, f) + sizeof(((struct ext2_inode_large *)0)->f))

/*
 * ext4's timestamps: 32 signed bits of seconds in the base field; in the
 * extra field, two epoch bits that extend the seconds to 34 bits and 30 bits
 * of nanoseconds.
 */
static void ts_encode(const struct timespec *ts, __u32 *base, __u32 *extra)
{
	int64_t s = ts->tv_sec;

	*base = (__u32)(int32_t)s;
	if (extra)
		*extra = (__u32)(((s - (int32_t)s) >> 32) & 3) | ((__u32)ts->tv_nsec << 2);
}

static void ts_decode(__u32 base, const __u32 *extra, struct timespec *ts)
{
	ts->tv_sec = (int32_t)base;
	ts->tv_nsec = 0;
	if (extra) {
		ts->tv_sec += (int64_t)(*extra & 3) << 32;
		ts->tv_nsec = *extra >> 2;
	}
}

void inode_set_time(struct ext2_inode_large *in, int which, const struct timespec *ts)
{
	if (which & RR_ATIME)
		ts_encode(ts, &in->i_atime, fits(in, FIELD_END(i_atime_extra)) ? &in->i_atime_extra : NULL);
	if (which & RR_MTIME)
		ts_encode(ts, &in->i_mtime, fits(in, FIELD_END(i_mtime_extra)) ? &in->i_mtime_extra : NULL);
	if (which & RR_CTIME)
		ts_encode(ts, &in->i_ctime, fits(in, FIELD_END(i_ctime_extra)) ? &in->i_ctime_extra : NULL);
	if ((which & RR_CRTIME) && fits(in, FIELD_END(i_crtime)))
		ts_encode(ts, &in->i_crtime,
			  fits(in, FIELD_END(i_crtime_extra)) ? &in->i_crtime_extra : NULL);
}

static int ts_before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/*
 * The kernel's touch_atime() under relatime (relatime_need_update): a read
 * sets the access time when it is not after the last modification or
 * change, or is a day old; strictatime always, noatime never.  The kernel
 * leaves atime of FUSE inodes to the server (S_NOATIME) and asks again
 * after a READ, so this runs for every READ and READDIR it sends; page
 * cache hits never come here (the kernel's ext4 would count them too).
 */
void inode_accessed(struct rr_fs *rfs, struct rr_inode *ri)
{
	struct ext2_inode_large in;
	struct timespec now, at, mt, ct;
	int64_t quiet = 0;

	if (rfs->ro || rfs->opts.atime == RR_ATIME_NOATIME)
		return;
	clock_gettime(CLOCK_REALTIME_COARSE, &now);
	if (rfs->opts.atime == RR_ATIME_RELATIME && now.tv_sec < atomic_load(&ri->atime_quiet))
		return;
	rr_fs_lock(rfs);
	if (!inode_load(rfs, ri->ino, &in)) {
		inode_get_time(&in, RR_ATIME, &at);
		inode_get_time(&in, RR_MTIME, &mt);
		inode_get_time(&in, RR_CTIME, &ct);
		if ((rfs->opts.atime == RR_ATIME_STRICT || !ts_before(&mt, &at) || !ts_before(&ct, &at) ||
		     now.tv_sec - at.tv_sec >= RR_RELATIME_SECS) &&
		    (at.tv_sec != now.tv_sec || at.tv_nsec != now.tv_nsec)) {
			inode_set_time(&in, RR_ATIME, &now);
			if (!inode_write(rfs, ri->ino, &in))
				at = now;
		}
		if (ts_before(&mt, &at) && ts_before(&ct, &at))
			quiet = at.tv_sec + RR_RELATIME_SECS;
		atomic_store(&ri->atime_quiet, quiet);
	}
	rr_fs_end_op(rfs);
}

int inode_has_crtime(const struct ext2_inode_large *in)
{
	return fits(in, FIELD_END(i_crtime));
}

void inode_get_time(const struct ext2_inode_large *in, int which, struct timespec *ts)
{
	switch (which) {
	case RR_ATIME:
		ts_decode(in->i_atime, fits(in, FIELD_END(i_atime_extra)) ? &in->i_atime_extra : NULL, ts);
		break;
	case RR_MTIME:
		ts_decode(in->i_mtime, fits(in, FIELD_END(i_mtime_extra)) ? &in->i_mtime_extra : NULL, ts);
		break;
	case RR_CTIME:
		ts_decode(in->i_ctime, fits(in, FIELD_END(i_ctime_extra)) ? &in->i_ctime_extra : NULL, ts);
		break;
	default:
		if (fits(in, FIELD_END(i_crtime)))
			ts_decode(in->i_crtime,
				  fits(in, FIELD_END(i_crtime_extra)) ? &in->i_crtime_extra : NULL, ts);
		else
			ts->tv_sec = ts->tv_nsec = 0;
	}
}

void inode_touch(struct ext2_inode_large *in, int which)
{
	struct timespec now;

	clock_gettime(CLOCK_REALTIME_COARSE, &now);
	inode_set_time(in, which, &now);
}

static dev_t inode_rdev(const struct ext2_inode_large *in)
{
	/* Old format in i_block[0], new (large minors) in i_block[1], as ext4. */
	if (in->i_block[0]) {
		__u32 d = in->i_block[0];

		return makedev((d >> 8) & 255, d & 255);
	} else {
		__u32 d = in->i_block[1];

		return makedev((d & 0xfff00) >> 8, (d & 0xff) | ((d >> 12) & 0xfff00));
	}
}

static void inode_set_rdev(struct ext2_inode_large *in, dev_t dev)
{
	unsigned int ma = major(dev), mi = minor(dev);

	if (ma < 256 && mi < 256) {
		in->i_block[0] = (ma << 8) | mi;
		in->i_block[1] = 0;
	} else {
		in->i_block[0] = 0;
		in->i_block[1] = (mi & 0xff) | (ma << 8) | ((mi & ~0xffu) << 12);
	}
}

void inode_stat(struct rr_fs *rfs, ext2_ino_t ino, const struct ext2_inode_large *in, struct stat *st)
{
	struct timespec ts;

	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = in->i_mode;
	st->st_nlink = in->i_links_count;
	if (LINUX_S_ISDIR(in->i_mode) && in->i_links_count == 1 &&
	    ext2fs_has_feature_dir_nlink(rfs->fs->super))
		st->st_nlink = 1;	/* over 65000 subdirectories: "unknown", as ext4 */
	st->st_uid = inode_uid(*in);
	st->st_gid = inode_gid(*in);
	st->st_size = (off_t)EXT2_I_SIZE(in);
	st->st_blksize = rfs->bsize;
	st->st_blocks = (blkcnt_t)ext2fs_get_stat_i_blocks(rfs->fs, (struct ext2_inode *)in);
	/* The table lookup only while some file holds delayed data: stat is a hot path. */
	if (LINUX_S_ISREG(in->i_mode) && atomic_load(&rfs->delayed.blocks))
		st->st_blocks += (blkcnt_t)(rr_idelayed(rfs, ino) << (rfs->bbits - 9));
	if (LINUX_S_ISCHR(in->i_mode) || LINUX_S_ISBLK(in->i_mode))
		st->st_rdev = inode_rdev(in);
	inode_get_time(in, RR_ATIME, &ts);
	st->st_atim = ts;
	inode_get_time(in, RR_MTIME, &ts);
	st->st_mtim = ts;
	inode_get_time(in, RR_CTIME, &ts);
	st->st_ctim = ts;
}

/*
 * The whole on-disk inode: in, then zeros over what a freed inode may have
 * left (in-inode xattrs).  Not ext2fs_write_new_inode(): it copies only the
 * 128-byte base inode, so the nanoseconds, crtime and i_extra_isize set here
 * would be lost.
 */
static errcode_t write_fresh_inode(ext2_filsys fs, ext2_ino_t ino, const struct ext2_inode_large *in)
{
	size_t size = EXT2_INODE_SIZE(fs->super);
	errcode_t err;
	char *buf = calloc(1, size);

	if (!buf)
		return EXT2_ET_NO_MEMORY;
	memcpy(buf, in, size < sizeof(*in) ? size : sizeof(*in));
	err = ext2fs_write_inode_full(fs, ino, (struct ext2_inode *)buf, (int)size);
	free(buf);
	return err;
}

/*
 * A new inode's generation: any value will do for NFS, and it seeds the
 * inode's checksum.  The kernel draws it from a fast generator, as here
 * (splitmix64, seeded once per thread): a getrandom per create was a
 * system call per file.
 */
static __u32 generation(void)
{
	static __thread uint64_t state;
	uint64_t z;

	if (!state && getrandom(&state, sizeof(state), 0) != sizeof(state))
		state = (uint64_t)random() << 32 | (uint64_t)random();
	z = (state += 0x9E3779B97F4A7C15ULL);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return (__u32)(z ^ (z >> 31));
}

/*
 * What the placement needs of dir: its flags for a directory (TOPDIR), and
 * the group of its last new inode from its in-memory inode, which the
 * kernel holds for as long as it holds dir.  Fs lock held.
 */
static void ialloc_parent_of(struct rr_fs *rfs, ext2_ino_t dir, mode_t mode, struct ialloc_parent *p)
{
	struct ext2_inode_large pin;
	struct rr_inode *ri;

	p->ino = dir;
	p->flags = 0;
	p->last = IALLOC_NO_GROUP;
	if (S_ISDIR(mode) && dir != EXT2_ROOT_INO && !inode_load(rfs, dir, &pin))
		p->flags = pin.i_flags;
	pthread_mutex_lock(&rfs->itab.lock);
	ri = itab_find_locked(&rfs->itab, dir);
	if (ri && ri->ialloc_last)
		p->last = ri->ialloc_last - 1;
	pthread_mutex_unlock(&rfs->itab.lock);
}

static void ialloc_remember(struct rr_fs *rfs, ext2_ino_t dir, dgrp_t group)
{
	struct rr_inode *ri;

	pthread_mutex_lock(&rfs->itab.lock);
	ri = itab_find_locked(&rfs->itab, dir);
	if (ri)
		ri->ialloc_last = group + 1;
	pthread_mutex_unlock(&rfs->itab.lock);
}

/*
 * Allocate and initialise a new inode named name in dir (not yet linked
 * anywhere), where the kernel would put it (src/ialloc.c).  Caller holds
 * the fs lock.  Regular files and directories get an empty extent tree
 * when the filesystem has extents.
 */
int inode_new(struct rr_fs *rfs, ext2_ino_t dir, const char *name, mode_t mode, uid_t uid, gid_t gid,
	      dev_t rdev, ext2_ino_t *ino_out, struct ext2_inode_large *in)
{
	ext2_filsys fs = rfs->fs;
	struct ialloc_parent parent;
	ext2_ino_t ino;
	errcode_t err;
	dgrp_t group;
	int isdir = S_ISDIR(mode), tries;

	ialloc_parent_of(rfs, dir, mode, &parent);
	for (tries = 0;; tries++) {
		err = ialloc_new(fs, &rfs->icounts, &parent, (int)mode, name, &ino, &group);
		if (!tries)
			ialloc_remember(rfs, dir, group);
		if (err)
			return rr_err(err);
		/*
		 * A corrupt inode bitmap can offer an inode that is in use;
		 * overwriting it would destroy a file.  Keep it marked, as the
		 * kernel keeps suspect inodes out of use, and look again.
		 */
		err = ext2fs_read_inode_full(fs, ino, (struct ext2_inode *)in, sizeof(*in));
		if (!err && !in->i_links_count && !(in->i_mode && !in->i_dtime) && !rr_ifind(rfs, ino))
			break;
		rr_log(LOG_ERR, "inode bitmap says inode %u is free but it is in use: run e2fsck", ino);
		ext2fs_mark_inode_bitmap2(fs->inode_map, ino);
		ext2fs_mark_ib_dirty(fs);
		if (tries >= 8)
			return -EIO;
	}
	memset(in, 0, sizeof(*in));
	in->i_mode = (__u16)mode;
	in->i_uid = (__u16)uid;
	ext2fs_set_i_uid_high(*in, uid >> 16);
	in->i_gid = (__u16)gid;
	ext2fs_set_i_gid_high(*in, gid >> 16);
	in->i_links_count = 1;
	if (EXT2_INODE_SIZE(fs->super) > EXT2_GOOD_OLD_INODE_SIZE) {
		__u16 want = fs->super->s_want_extra_isize;

		if (!want || want > EXT2_INODE_SIZE(fs->super) - EXT2_GOOD_OLD_INODE_SIZE)
			want = sizeof(struct ext2_inode_large) - EXT2_GOOD_OLD_INODE_SIZE;
		in->i_extra_isize = want;
	}
	inode_touch(in, RR_ATIME | RR_MTIME | RR_CTIME | RR_CRTIME);
	in->i_generation = generation();
	if (S_ISCHR(mode) || S_ISBLK(mode))
		inode_set_rdev(in, rdev);
	if ((S_ISREG(mode) || isdir) && ext2fs_has_feature_extents(fs->super)) {
		ext2_extent_handle_t h;

		/* An empty extent header in i_block, as the kernel makes. */
		err = ext2fs_extent_open2(fs, ino, (struct ext2_inode *)in, &h);
		if (err)
			return rr_err_ino(err, ino);
		ext2fs_extent_free(h);
	}
	err = write_fresh_inode(fs, ino, in);
	if (err)
		return rr_err_ino(err, ino);
	ialloc_counts_change(fs, &rfs->icounts, -1, isdir);
	ext2fs_inode_alloc_stats2(fs, ino, +1, isdir);
	*ino_out = ino;
	return 0;
}

/*
 * Free an inode that has no links left and no users: its blocks, its xattr
 * block, and the inode itself.  Takes the fs lock.
 */
int inode_free_if_unlinked(struct rr_fs *rfs, ext2_ino_t ino)
{
	int ret;

	rr_fs_lock(rfs);
	ret = inode_free_locked(rfs, ino);
	rr_fs_end_op(rfs);
	return ret;
}

/* inode_free_if_unlinked() with the fs lock held by the caller. */
int inode_free_locked(struct rr_fs *rfs, ext2_ino_t ino)
{
	ext2_filsys fs = rfs->fs;
	struct ext2_inode_large in;
	errcode_t err;
	blk64_t xblk;
	int ret = 0;

	err = ext2fs_read_inode_full(fs, ino, (struct ext2_inode *)&in, sizeof(in));
	/*
	 * Freed already (e.g. by a racing path), or still linked: nothing to
	 * do.  Not i_dtime: on an orphan it is the next-orphan link.
	 */
	if (err || in.i_links_count || !in.i_mode || !ext2fs_test_inode_bitmap2(fs->inode_map, ino))
		return rr_err_ino(err, ino);
	rr_alloc_discard_inode(rfs->alloc, ino);
	/* Blocks first, while the inode is still listed: a crash resumes the delete. */
	ret = emap_tree_punch(rfs, ino, &in, 0, ~0ULL);
	if (ret)
		rr_log(LOG_ERR, "inode %u: cannot free its blocks: %s", ino, strerror(-ret));
	xblk = ext2fs_file_acl_block(fs, (struct ext2_inode *)&in);
	if (xblk && !ret) {
		__u32 count = 0;

		err = ext2fs_adjust_ea_refcount3(fs, xblk, NULL, -1, &count, ino);
		if (!err && count == 0)
			ext2fs_block_alloc_stats2(fs, xblk, -1);
		ext2fs_file_acl_block_set(fs, (struct ext2_inode *)&in, 0);
	}
	if (!ret)
		ret = orphan_del(rfs, ino, &in);
	if (!ret) {
		in.i_dtime = (__u32)time(NULL);
		ext2fs_iblk_set(fs, (struct ext2_inode *)&in, 0);
		ret = inode_write(rfs, ino, &in);
		if (!ret) {
			ialloc_counts_change(fs, &rfs->icounts, +1, -LINUX_S_ISDIR(in.i_mode));
			ext2fs_inode_alloc_stats2(fs, ino, -1, LINUX_S_ISDIR(in.i_mode));
		}
	}
	return ret;
}

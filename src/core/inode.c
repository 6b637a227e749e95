// SPDX-License-Identifier: GPL-2.0
/*
 * In-memory inodes (the table) and on-disk inode helpers.  An inode's
 * birth and death (inode_new, the last rr_iput, inode_free_*) are in
 * inode_life.c, above the extent tree and the orphan list they need.
 *
 * An rr_inode exists while the kernel holds lookups on it or it is open.  It
 * carries the inode's data lock, its cached block map and i_size.  Everything
 * else about the inode lives on disk and is read and written through
 * libext2fs under the fs lock (libext2fs keeps a small inode cache), so there
 * is one copy of each field and nothing to keep coherent.
 *
 */
#include "rrfs.h"
#include "log.h"
#include "rrfuse/grow.h"

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

struct rr_inode *rr_itab_find_locked(struct rr_itab *t, ext2_ino_t ino)
{
	struct rr_inode *ri = t->hash ? t->hash[ihash(t, ino)] : NULL;	/* none before rr_itab_init */

	while (ri && ri->ino != ino)
		ri = ri->hnext;
	return ri;
}

/*
 * ino's in-memory inode or NULL, with the table lock taken either way
 * (an inode in the table is not freed meanwhile): itab_unhold() after.
 */
static struct rr_inode *itab_hold(struct rr_fs *rfs, ext2_ino_t ino)
{
	pthread_mutex_lock(&rfs->itab.lock);
	return rr_itab_find_locked(&rfs->itab, ino);
}

static void itab_unhold(struct rr_fs *rfs)
{
	pthread_mutex_unlock(&rfs->itab.lock);
}

struct rr_inode *rr_ifind(struct rr_fs *rfs, ext2_ino_t ino)
{
	struct rr_inode *ri;

	pthread_mutex_lock(&rfs->itab.lock);
	ri = rr_itab_find_locked(&rfs->itab, ino);
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
	ri = rr_itab_find_locked(t, ino);
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
	nri->size = nri->disksize = EXT2_I_SIZE(&in);
	nri->extents = !!(in.i_flags & EXT4_EXTENTS_FL);
	atomic_init(&nri->guard, in.i_flags & RR_FL_GUARD);

	pthread_mutex_lock(&t->lock);
	ri = rr_itab_find_locked(t, ino);
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

void rr_inode_free(struct rr_fs *rfs, struct rr_inode *ri)
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
	struct rr_inode *ri = itab_hold(rfs, ino);

	if (ri)
		ri->pins++;
	itab_unhold(rfs);
	return ri;
}

/*
 * The chattr +i / +a flags of ino (RR_FL_GUARD bits), from its in-memory
 * inode: the kernel holds every inode it sends a request about, so no disk
 * read is needed.  Any lock context; the itab lock is a leaf.
 */
unsigned int rr_iguard(struct rr_fs *rfs, ext2_ino_t ino)
{
	struct rr_inode *ri = itab_hold(rfs, ino);
	unsigned int g = ri ? atomic_load(&ri->guard) : 0;

	itab_unhold(rfs);
	return g;
}

/* Blocks of delayed data ino holds (counted in st_blocks, as ext4 counts its delalloc blocks). */
uint64_t rr_idelayed(struct rr_fs *rfs, ext2_ino_t ino, uint64_t *size)
{
	struct rr_inode *ri = itab_hold(rfs, ino);
	uint64_t n = ri ? atomic_load(&ri->dbuf.blocks) : 0;

	if (n && size)
		*size = __atomic_load_n(&ri->size, __ATOMIC_RELAXED);

	itab_unhold(rfs);
	return n;
}

void rr_iheld_unlinked(struct rr_fs *rfs, ext2_ino_t ino)
{
	struct rr_inode *ri = itab_hold(rfs, ino);

	if (ri)
		atomic_store(&ri->held, 0);
	itab_unhold(rfs);
}

/* Bump the xattr generation of ino's in-memory inode, if there is one. */
void rr_ixattr_changed(struct rr_fs *rfs, ext2_ino_t ino)
{
	struct rr_inode *ri = itab_hold(rfs, ino);

	if (ri)
		atomic_fetch_add(&ri->xattr_gen, 1);
	itab_unhold(rfs);
}

void rr_iabsent_set(struct rr_fs *rfs, ext2_ino_t dir, const char *name)
{
	struct rr_inode *ri = itab_hold(rfs, dir);
	size_t len = strlen(name);

	if (ri && len < sizeof(ri->absent))
		memcpy(ri->absent, name, len + 1);
	else if (ri)
		ri->absent[0] = 0;
	itab_unhold(rfs);
}

int rr_iabsent_take(struct rr_fs *rfs, ext2_ino_t dir, const char *name)
{
	struct rr_inode *ri = itab_hold(rfs, dir);
	int kept = ri && name && ri->absent[0] && !strcmp(ri->absent, name);

	if (ri)
		ri->absent[0] = 0;
	itab_unhold(rfs);
	return kept;
}

void rr_iabsent_clear(struct rr_fs *rfs, ext2_ino_t dir)
{
	rr_iabsent_take(rfs, dir, NULL);
}

/* Unhash ri if nothing holds it any more; then the caller frees it. Under itab.lock. */
int rr_itab_release_locked(struct rr_itab *t, struct rr_inode *ri)
{
	struct rr_inode **pp;

	if (ri->nlookup || ri->nopen || ri->pins || atomic_load(&ri->held))
		return 0;
	for (pp = &t->hash[ihash(t, ri->ino)]; *pp != ri; pp = &(*pp)->hnext)
		;
	*pp = ri->hnext;
	t->count--;
	return 1;
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
	return rr_err_ino(rfs, err, ino);
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
	struct rr_inode *ri = itab_hold(rfs, ino);

	if (ri)
		atomic_store(&ri->atime_quiet, 0);
	itab_unhold(rfs);
}

/*
 * -o check: does the inode break the invariant ext4 keeps for every inode
 * it writes, which e2fsck checks after a crash: no written (initialised)
 * block at or past the end of i_size's last block (unwritten ones may lie
 * there)?  Only the last written extent can break it: found from the
 * tree's end, and put in *ex.  A tree libext2fs cannot read: no (its
 * reader reports it).  Here rather than in emap.c: it reads the tree on
 * disk against i_size, not the cached map, and inode_write's note below
 * needs it; emap.c writes inodes, so inode.c asks nothing of it.
 */
int inode_written_past_size(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in,
			    struct ext2fs_extent *ex)
{
	uint64_t blocks = (EXT2_I_SIZE(in) + rfs->bsize - 1) >> rfs->bbits;
	struct ext2_extent_info info;
	ext2_extent_handle_t h;
	errcode_t err;

	memset(ex, 0, sizeof(*ex));
	if (!LINUX_S_ISREG(in->i_mode) || !(in->i_flags & EXT4_EXTENTS_FL) ||
	    ext2fs_extent_open2(rfs->fs, ino, (struct ext2_inode *)in, &h))
		return 0;
	/* An empty tree: libext2fs's walk would answer from nothing. */
	err = ext2fs_extent_get_info(h, &info);
	if (!err && !info.num_entries)
		err = EXT2_ET_EXTENT_NO_NEXT;
	if (!err)
		err = ext2fs_extent_get(h, EXT2_EXTENT_LAST_LEAF, ex);
	while (!err && (ex->e_flags & EXT2_EXTENT_FLAGS_UNINIT))
		err = ext2fs_extent_get(h, EXT2_EXTENT_PREV_LEAF, ex);
	ext2fs_extent_free(h);
	return !err && ex->e_len && ex->e_lblk + (uint64_t)ex->e_len > blocks;
}

/*
 * -o check: a regular file written is checked at the next commit
 * (commit.c's check_written), with whether it broke the invariant already as
 * libext2fs holds it now, before this write: a damaged image's inode may,
 * and rrfuse's writing into it is no bug of rrfuse's.
 */
static void note_written(struct rr_fs *rfs, ext2_ino_t ino, const struct ext2_inode_large *in)
{
	struct rr_written *w = &rfs->check_written;
	struct ext2_inode_large old;
	struct ext2fs_extent ex;
	int bad = 0;

	/* The same inode again at once (an operation's several writes): its first write said how it was. */
	if (!rfs->opts.check || !LINUX_S_ISREG(in->i_mode) || !(in->i_flags & EXT4_EXTENTS_FL) ||
	    (w->n && w->v[w->n - 1].ino == ino))
		return;
	if (!ext2fs_read_inode_full(rfs->fs, ino, (struct ext2_inode *)&old, sizeof(old)))
		bad = inode_written_past_size(rfs, ino, &old, &ex);
	/* Without memory this one goes unchecked. */
	if (!rr_grow(&w->v, sizeof(*w->v), &w->cap, w->n + 1, 64))
		w->v[w->n++] = (struct rr_written_ino){ .ino = ino, .seq = (uint32_t)w->n, .was_bad = bad };
}

/* Caller holds the fs lock. */
int inode_write(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in)
{
	int ret;

	note_written(rfs, ino, in);
	ret = rr_err_ino(rfs, ext2fs_write_inode_full(rfs->fs, ino, (struct ext2_inode *)in, sizeof(*in)), ino);

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
		if ((rfs->opts.atime == RR_ATIME_STRICT || !rr_ts_before(&mt, &at) || !rr_ts_before(&ct, &at) ||
		     now.tv_sec - at.tv_sec >= RR_RELATIME_SECS) &&
		    (at.tv_sec != now.tv_sec || at.tv_nsec != now.tv_nsec)) {
			inode_set_time(&in, RR_ATIME, &now);
			if (!inode_write(rfs, ri->ino, &in))
				at = now;
		}
		if (rr_ts_before(&mt, &at) && rr_ts_before(&ct, &at))
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

void inode_set_rdev(struct ext2_inode_large *in, dev_t dev)
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
	/*
	 * The table lookup only while some file holds delayed data: stat is a
	 * hot path.  Such a file's size on disk stops where its data on disk
	 * does (struct rr_inode's disksize); the size is the one in memory.
	 */
	if (LINUX_S_ISREG(in->i_mode) && atomic_load(&rfs->delayed.blocks)) {
		uint64_t size = EXT2_I_SIZE(in);

		st->st_blocks += (blkcnt_t)(rr_idelayed(rfs, ino, &size) << (rfs->bbits - 9));
		st->st_size = (off_t)size;
	}
	if (LINUX_S_ISCHR(in->i_mode) || LINUX_S_ISBLK(in->i_mode))
		st->st_rdev = inode_rdev(in);
	inode_get_time(in, RR_ATIME, &ts);
	st->st_atim = ts;
	inode_get_time(in, RR_MTIME, &ts);
	st->st_mtim = ts;
	inode_get_time(in, RR_CTIME, &ts);
	st->st_ctim = ts;
}

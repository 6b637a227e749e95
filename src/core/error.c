// SPDX-License-Identifier: GPL-2.0
/*
 * Filesystem errors: logging, the superblock's error record, and errors=.
 *
 * An error is met anywhere, often deep inside a libext2fs call made under
 * the fs lock, so recording it must not need that lock: the mount's
 * errs.lock (error.h) guards the pending record, and
 * rr_error_commit() moves it into the superblock under the fs lock at the
 * next commit or at unmount.  errors=remount-ro makes rfs->ro true at once,
 * so every later change gets EROFS while what was done before still reaches
 * the image; errors=panic writes the superblock and stops the daemon on the
 * spot (the kernel then fails every call on the mount with ENOTCONN), as the
 * kernel commits the superblock and panics.
 */
#include "error.h"
#include "dev.h"
#include "log.h"
#include "rrfs.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* ext4's s_{first,last}_error_errcode values (ext4_errno_to_code). */
#define RR_ERR_EIO		2
#define RR_ERR_EFSBADCRC	4
#define RR_ERR_EFSCORRUPTED	5

static const char *const names[] = {
	[EXT2_ERRORS_CONTINUE] = "continue",
	[EXT2_ERRORS_RO] = "remount-ro",
	[EXT2_ERRORS_PANIC] = "panic",
};

int rr_errors_parse(const char *s)
{
	int i;

	for (i = EXT2_ERRORS_CONTINUE; i <= EXT2_ERRORS_PANIC; i++)
		if (!strcmp(s, names[i]))
			return i;
	return -1;
}

void rr_error_init(struct rr_fs *rfs)
{
	memset(&rfs->errs, 0, sizeof(rfs->errs));
	pthread_mutex_init(&rfs->errs.lock, NULL);
}

void rr_error_attach(struct rr_fs *rfs, int behaviour)
{
	struct rr_errors *err = &rfs->errs;
	int sb = rfs->fs->super->s_errors;

	pthread_mutex_lock(&err->lock);
	err->attached = 1;
	err->keep_first = rfs->fs->super->s_error_count != 0;
	/* The image's choice unless the mount says otherwise; unknown values mean continue. */
	err->behaviour = behaviour ? behaviour :
		(sb >= EXT2_ERRORS_CONTINUE && sb <= EXT2_ERRORS_PANIC ? sb : EXT2_ERRORS_CONTINUE);
	pthread_mutex_unlock(&err->lock);
}

void rr_error_detach(struct rr_fs *rfs)
{
	pthread_mutex_lock(&rfs->errs.lock);
	rfs->errs.attached = 0;
	pthread_mutex_unlock(&rfs->errs.lock);
}

static uint8_t code_of(errcode_t e)
{
	if (e > 0 && e < 4096)
		return RR_ERR_EIO;
	switch (e) {
	case EXT2_ET_BAD_CRC:
	case EXT2_ET_DIR_CSUM_INVALID:
	case EXT2_ET_EXTENT_CSUM_INVALID:
	case EXT2_ET_INODE_CSUM_INVALID:
	case EXT2_ET_EXT_ATTR_CSUM_INVALID:
	case EXT2_ET_BLOCK_BITMAP_CSUM_INVALID:
	case EXT2_ET_INODE_BITMAP_CSUM_INVALID:
	case EXT2_ET_SB_CSUM_INVALID:
		return RR_ERR_EFSBADCRC;
	default:
		return RR_ERR_EFSCORRUPTED;
	}
}

/* The superblock's primary copy with the error recorded, then the daemon stops. */
static void panic_now(struct rr_fs *rfs)
{
	/* The process's, not the mount's: it is what stops. */
	static atomic_int panicking;

	if (atomic_exchange(&panicking, 1))
		_exit(EXIT_FAILURE);	/* an error while writing the superblock: stop here */
	rr_log(LOG_CRIT, "errors=panic: stopping after a filesystem error; unmount with rrfuse -u");
	if (rfs->mounted) {
		rr_error_commit(rfs);
		rr_fs_write_super(rfs);
		io_channel_flush(rfs->fs->io);
	}
	_exit(EXIT_FAILURE);
}

static void set_func(struct rr_err_record *r, const char *func)
{
	memset(r->func, 0, sizeof(r->func));
	if (func)
		memcpy(r->func, func, strnlen(func, sizeof(r->func)));
}

/*
 * This thread's I/O error whose record still lacks the function that met
 * it: the I/O layer runs on the thread of the libext2fs call that failed,
 * and that call's caller sees the error next.
 */
static __thread unsigned long io_seq;

static void fs_error(struct rr_fs *rfs, errcode_t e, ext2_ino_t ino, uint64_t blk, const char *func,
		     unsigned int line, int from_io)
{
	struct rr_err_record r = { .time = time(NULL), .ino = ino, .blk = blk, .line = line, .code = code_of(e) };
	struct rr_errors *err = &rfs->errs;
	int behaviour, first, attached;

	set_func(&r, func);
	pthread_mutex_lock(&err->lock);
	attached = err->attached;
	behaviour = err->behaviour;
	if (attached) {
		r.seq = ++err->seq;
		if (!err->have_first) {
			err->first = r;
			err->have_first = 1;
		}
		err->last = r;
		err->pending++;
		if (from_io)
			io_seq = r.seq;
	}
	first = err->pending == 1;
	pthread_mutex_unlock(&err->lock);
	if (!attached)
		return;		/* met while mounting (the caller refuses the image) or after unmount */
	if (behaviour == EXT2_ERRORS_PANIC)
		panic_now(rfs);
	if (behaviour == EXT2_ERRORS_RO && !atomic_exchange(&rfs->ro, 1))
		rr_log(LOG_CRIT, "errors=remount-ro: filesystem error; remounting read-only");
	else if (first && behaviour == EXT2_ERRORS_CONTINUE)
		rr_log(LOG_WARNING, "filesystem error recorded in the superblock; run e2fsck after unmounting");
}

void rr_fs_error_at(struct rr_fs *rfs, errcode_t e, ext2_ino_t ino, uint64_t blk, const char *func,
		    unsigned int line)
{
	fs_error(rfs, e, ino, blk, func, line, 0);
}

void rr_fs_io_error(struct rr_fs *rfs, errcode_t e, uint64_t blk)
{
	fs_error(rfs, e, 0, blk, NULL, 0, 1);
}

void rr_error_attribute(struct rr_fs *rfs, ext2_ino_t ino, const char *func, unsigned int line)
{
	struct rr_errors *err = &rfs->errs;
	struct rr_err_record *rs[2] = { &err->first, &err->last };
	unsigned long seq = io_seq;
	size_t i;

	if (!seq)
		return;
	io_seq = 0;
	pthread_mutex_lock(&err->lock);
	for (i = 0; i < 2; i++) {
		if (rs[i]->seq != seq || rs[i]->func[0])
			continue;
		set_func(rs[i], func);
		rs[i]->line = line;
		if (!rs[i]->ino)
			rs[i]->ino = ino;
		err->refined = 1;
	}
	pthread_mutex_unlock(&err->lock);
}

void rr_data_io_error(struct rr_fs *rfs, int write, uint64_t blk, int e)
{
	struct rr_errors *err = &rfs->errs;
	unsigned int i;
	int seen = 0;

	pthread_mutex_lock(&err->lock);
	for (i = 0; i < err->nlogged && i < RR_ERR_LOGGED; i++)
		seen |= err->logged[i] == blk;
	if (!seen)
		err->logged[err->nlogged++ % RR_ERR_LOGGED] = blk;
	pthread_mutex_unlock(&err->lock);
	if (!seen)
		rr_log(LOG_ERR, "I/O error %s block %llu: %s", write ? "writing" : "reading",
		       (unsigned long long)blk, strerror(e));
}

static void put_record(const struct rr_err_record *r, __u32 *time, __u8 *time_hi, __u32 *ino, __u64 *blk,
		       __u8 *func, __u32 *line, __u8 *code)
{
	*time = (__u32)r->time;
	*time_hi = (__u8)(r->time >> 32);
	*ino = r->ino;
	*blk = r->blk;
	memcpy(func, r->func, sizeof(r->func));
	*line = r->line;
	*code = r->code;
}

void rr_error_commit(struct rr_fs *rfs)
{
	struct ext2_super_block *sb = rfs->fs->super;
	struct rr_errors *err = &rfs->errs;
	struct rr_err_record first, last;
	unsigned int n;
	int have_first, keep_first, refined;

	pthread_mutex_lock(&err->lock);
	n = err->pending;
	err->pending = 0;
	refined = err->refined;
	err->refined = 0;
	first = err->first;
	last = err->last;
	have_first = err->have_first;
	keep_first = err->keep_first;
	pthread_mutex_unlock(&err->lock);
	if (!n && !refined)
		return;
	sb->s_state |= EXT2_ERROR_FS;
	rfs->orig_state |= EXT2_ERROR_FS;	/* and it stays after unmount, for e2fsck */
	/* Rewritten while it is this mount's: its caller may have named itself since. */
	if (have_first && !keep_first)
		put_record(&first, &sb->s_first_error_time, &sb->s_first_error_time_hi, &sb->s_first_error_ino,
			   &sb->s_first_error_block, sb->s_first_error_func, &sb->s_first_error_line,
			   &sb->s_first_error_errcode);
	put_record(&last, &sb->s_last_error_time, &sb->s_last_error_time_hi, &sb->s_last_error_ino,
		   &sb->s_last_error_block, sb->s_last_error_func, &sb->s_last_error_line,
		   &sb->s_last_error_errcode);
	sb->s_error_count += n;
	ext2fs_mark_super_dirty(rfs->fs);
}

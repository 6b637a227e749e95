/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Filesystem errors as ext4 handles them (ext4_handle_error): each one is
 * logged, recorded in the superblock's error fields with EXT2_ERROR_FS in
 * s_state (so the next e2fsck checks the filesystem in full), and then the
 * errors= behaviour applies.
 */
#ifndef RRFUSE_ERROR_H
#define RRFUSE_ERROR_H

#include <pthread.h>
#include <stdint.h>
#include <ext2fs/ext2fs.h>

struct rr_fs;

/* What the superblock's s_{first,last}_error_* fields say about one error. */
struct rr_err_record {
	int64_t time;
	ext2_ino_t ino;
	uint64_t blk;
	unsigned int line;
	uint8_t code;
	char func[32];			/* NUL-padded, not terminated when full (as ext4's) */
	unsigned long seq;		/* which error this is, for rr_error_attribute() */
};

/* Data blocks whose failure was logged lately, so that a retrying reader does not flood the log. */
#define RR_ERR_LOGGED 16

/*
 * A mount's errors (rr_fs.errs), kept here until rr_error_commit() writes
 * them into the superblock.  lock: a leaf, taken with or without the fs
 * lock (rrfs.h), guards everything below it.
 */
struct rr_errors {
	pthread_mutex_t lock;
	int attached;			/* recording: between rr_error_attach and _detach */
	int behaviour;
	unsigned int pending;		/* errors not yet in the superblock */
	int refined;			/* a record completed since the last commit */
	int keep_first;			/* the image's first error predates this mount */
	unsigned long seq;		/* errors met so far */
	struct rr_err_record first, last;
	int have_first;
	uint64_t logged[RR_ERR_LOGGED];
	unsigned int nlogged;
};

/* errors=: EXT2_ERRORS_CONTINUE, EXT2_ERRORS_RO or EXT2_ERRORS_PANIC; 0 = the image's s_errors. */
int rr_errors_parse(const char *s);

/* rfs's record, empty and not recording: at the start of rr_fs_open, before anything can fail. */
void rr_error_init(struct rr_fs *rfs);
/*
 * At mount, once rfs->fs is open for good: rfs's errors are recorded from
 * now on, until rr_error_detach (at unmount).  Before, an error is the
 * mount's to refuse the image with, and not recorded.
 */
void rr_error_attach(struct rr_fs *rfs, int behaviour);
void rr_error_detach(struct rr_fs *rfs);

/*
 * A structure of rfs found corrupt (err: a libext2fs code), or metadata
 * I/O that failed (err: an errno).  ino and blk: what it concerns, 0 if
 * unknown; func and line: where it was found, for the superblock's error
 * record.
 */
void rr_fs_error_at(struct rr_fs *rfs, errcode_t err, ext2_ino_t ino, uint64_t blk, const char *func,
		    unsigned int line);
#define rr_fs_error(rfs, err, ino, blk) rr_fs_error_at((rfs), (err), (ino), (blk), __func__, __LINE__)

/*
 * Metadata I/O that failed, met in the I/O layer under some libext2fs call
 * whose caller is not known there: recorded at once, and the caller's
 * rr_err_at() on the same thread names itself in the record
 * (rr_error_attribute).
 */
void rr_fs_io_error(struct rr_fs *rfs, errcode_t err, uint64_t blk);
void rr_error_attribute(struct rr_fs *rfs, ext2_ino_t ino, const char *func, unsigned int line);

/* Data I/O that failed: logged once per block, not a filesystem error (as ext4). */
void rr_data_io_error(struct rr_fs *rfs, int write, uint64_t blk, int err);

/* Under the fs lock, before the superblock is written: record what happened since. */
void rr_error_commit(struct rr_fs *rfs);

#endif

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Filesystem errors as ext4 handles them (ext4_handle_error): each one is
 * logged, recorded in the superblock's error fields with EXT2_ERROR_FS in
 * s_state (so the next e2fsck checks the filesystem in full), and then the
 * errors= behaviour applies.
 */
#ifndef RRFUSE_ERROR_H
#define RRFUSE_ERROR_H

#include <stdint.h>
#include <ext2fs/ext2fs.h>

struct rr_fs;

/* errors=: EXT2_ERRORS_CONTINUE, EXT2_ERRORS_RO or EXT2_ERRORS_PANIC; 0 = the image's s_errors. */
int rr_errors_parse(const char *s);

/* At mount, once the filesystem is open. */
void rr_error_attach(struct rr_fs *rfs, int behaviour);
void rr_error_detach(void);

/*
 * A structure found corrupt (err: a libext2fs code), or metadata I/O that
 * failed (err: an errno).  ino and blk: what it concerns, 0 if unknown;
 * func and line: where it was found, for the superblock's error record.
 */
void rr_fs_error_at(errcode_t err, ext2_ino_t ino, uint64_t blk, const char *func, unsigned int line);
#define rr_fs_error(err, ino, blk) rr_fs_error_at((err), (ino), (blk), __func__, __LINE__)

/*
 * Metadata I/O that failed, met in the I/O layer under some libext2fs call
 * whose caller is not known there: recorded at once, and the caller's
 * rr_err_at() on the same thread names itself in the record
 * (rr_error_attribute).
 */
void rr_fs_io_error(errcode_t err, uint64_t blk);
void rr_error_attribute(ext2_ino_t ino, const char *func, unsigned int line);

/* Data I/O that failed: logged once per block, not a filesystem error (as ext4). */
void rr_data_io_error(int write, uint64_t blk, int err);

/* Under the fs lock, before the superblock is written: record what happened since. */
void rr_error_commit(struct rr_fs *rfs);

#endif

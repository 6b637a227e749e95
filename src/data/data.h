/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The data layer's calls (src/data/data.c): file data read, written, cut and
 * mapped, and the delayed buffer's flushes.  Its callers are the rooms above
 * it, src/fuse/ and src/ns/ (a symlink's target, SETATTR's truncate); the
 * core below reaches it only through the struct rr_data_hooks it is handed
 * at mount (data_hooks, rrfs.h).
 */
#ifndef RRFUSE_DATA_H
#define RRFUSE_DATA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rrfs.h"

ssize_t data_read(struct rr_fs *rfs, struct rr_inode *ri, char *buf, size_t size, uint64_t off);
/*
 * A read to answer straight from the device: *size clamped to the end of
 * the file, *dev the device offset of [off, off+*size) when that lies in
 * one written extent (0 otherwise: data_read copies it).  On success ri->rw
 * stays held shared, so the blocks stay the file's, until data_read_end.
 */
int data_read_begin(struct rr_fs *rfs, struct rr_inode *ri, uint64_t off, size_t *size, uint64_t *dev);
void data_read_end(struct rr_inode *ri);
/*
 * A short count comes with the reason it stopped in *short_err.  delay:
 * the kernel's page cache writes back; holes may take the data into the
 * inode's delayed buffer, their blocks chosen at the flush.
 */
ssize_t data_write(struct rr_fs *rfs, struct rr_inode *ri, const char *buf, size_t size,
		   uint64_t off, int root, int delay, int *short_err);
/* Give the inode's delayed data its blocks.  closed: no writer is left (its size is final). */
int data_flush(struct rr_fs *rfs, struct rr_inode *ri, int closed);
/* The core's calls into this layer, for rr_fs_open (src/fuse/main.c hands them over). */
extern const struct rr_data_hooks data_hooks;
/* data_flush for every inode with delayed data, as enum rr_flush says. */
int data_flush_all(struct rr_fs *rfs, enum rr_flush how);
/* The last writer closed the file: its delayed data is held (the default), or flushed (-o delalloc=close). */
int data_close(struct rr_fs *rfs, struct rr_inode *ri);
/* rrctl -s: delayed data held now, by how many files, the most held at once; the limits on it, in bytes. */
void data_stats(struct rr_fs *rfs, uint64_t *blocks, uint64_t *files, uint64_t *peak, uint64_t *background,
		uint64_t *limit);
/* i_size grown to size, never shrunk: a page the kernel wrote back and rrfuse refused still grew the file. */
int data_grow(struct rr_fs *rfs, struct rr_inode *ri, uint64_t size);
int data_truncate(struct rr_fs *rfs, struct rr_inode *ri, uint64_t size);
int data_fallocate(struct rr_fs *rfs, struct rr_inode *ri, int mode, uint64_t off, uint64_t len,
		   int root);
int64_t data_seek(struct rr_fs *rfs, struct rr_inode *ri, uint64_t off, int whence);
/* A new inode's first data (a slow symlink's target); the fs lock held, in written. */
int data_write_new_file(struct rr_fs *rfs, ext2_ino_t ino, struct ext2_inode_large *in,
			const char *buf, size_t len);

#endif

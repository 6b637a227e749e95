/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The I/O layer: one io_manager that every metadata byte crosses (libext2fs's
 * own I/O, the superblock writes, the orphan file), so a journal can sit here
 * and see every metadata block; and the data path's handle on the same
 * device.  Thread-safe: positional reads and writes only.  The metadata
 * cache (iocache.h) is a manager stacked on this one.
 */
#ifndef RRFUSE_IO_H
#define RRFUSE_IO_H

#include <stdint.h>
#include <sys/uio.h>
#include <ext2fs/ext2fs.h>

extern io_manager rr_io_manager;

/* Set before ext2fs_open2(): open flags the manager adds (O_RDONLY for ro). */
void io_set_readonly(int ro);
/* Set before ext2fs_open2(): the kernel will claim the block device (fuseblk), so no O_EXCL. */
void io_set_shared_bdev(int on);
/* The process holding a flock on fd's file (/proc/locks), 0 if not known. */
long io_lock_holder(int fd);

/*
 * The device under the channel, from the same open: the data path's own
 * handle (file data never crosses libext2fs's channel).  Valid until the
 * channel closes.  Every metadata byte goes through the channel.
 */
struct io_dev;
struct io_dev *io_dev_of(io_channel ch);

/*
 * The data path's transfers.  With direct I/O on (io_set_direct: mode 1 on,
 * 0 off, -1 on for block devices only) a transfer whose offset and length
 * are aligned goes through an O_DIRECT descriptor, so file data is not
 * cached a second time in the device's page cache under the kernel's FUSE
 * cache, and reaches the device when written; anything else takes the
 * buffered descriptor.  The kernel keeps the two coherent (a direct
 * transfer writes back and drops cached pages of its range first).
 */
int io_set_direct(struct io_dev *d, int mode, char *msg, size_t msglen);
int io_direct_align(struct io_dev *d);	/* 0 when off */
int io_data_read(struct io_dev *d, void *buf, size_t len, uint64_t off);
int io_data_writev(struct io_dev *d, struct iovec *iov, int iovcnt, uint64_t off);
int io_data_write(struct io_dev *d, const void *buf, size_t len, uint64_t off);

/*
 * A layer stacked on this one that keeps copies of blocks (the metadata
 * cache) learns here, before every data write, which bytes file data is
 * about to overwrite.  Set before the data path starts; fn may be NULL.
 */
void io_set_data_write_hook(struct io_dev *d, void (*fn)(void *arg, uint64_t off, uint64_t len),
			    void *arg);

#endif

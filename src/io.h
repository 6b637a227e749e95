/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The I/O layer: one io_manager that libext2fs uses for metadata and that the
 * data path uses for file contents, so a journal can later sit here and see
 * every metadata block without changes elsewhere.  Thread-safe: positional
 * reads and writes only, no shared cache.
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

int io_fd(io_channel ch);
/* Data path: whole-buffer positional I/O, retrying short transfers; 0 or -errno. */
int io_pread_all(int fd, void *buf, size_t len, uint64_t off);
int io_pwritev_all(int fd, struct iovec *iov, int iovcnt, uint64_t off);
int io_pwrite_all(int fd, const void *buf, size_t len, uint64_t off);
int io_flush(int fd);

/*
 * The data path's transfers.  With direct I/O on (io_set_direct: mode 1 on,
 * 0 off, -1 on for block devices only) a transfer whose offset and length
 * are aligned goes through an O_DIRECT descriptor, so file data is not
 * cached a second time in the device's page cache under the kernel's FUSE
 * cache, and reaches the device when written; anything else takes the
 * buffered descriptor.  The kernel keeps the two coherent (a direct
 * transfer writes back and drops cached pages of its range first).
 */
int io_set_direct(io_channel ch, int mode, char *msg, size_t msglen);
int io_direct_align(io_channel ch);	/* 0 when off */
int io_data_read(io_channel ch, void *buf, size_t len, uint64_t off);
int io_data_writev(io_channel ch, struct iovec *iov, int iovcnt, uint64_t off);
int io_data_write(io_channel ch, const void *buf, size_t len, uint64_t off);

#endif

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The device manager, the bottom of the I/O stack (layer.h): the image file
 * or block device, opened once for metadata and file data alike.
 * Thread-safe: positional reads and writes only.
 */
#ifndef RRFUSE_IO_DEV_H
#define RRFUSE_IO_DEV_H

#include <stdint.h>
#include <sys/uio.h>
#include <ext2fs/ext2fs.h>

/*
 * Opened read-write only with IO_FLAG_RW (ext2fs_open2's EXT2_FLAG_RW); a
 * block device opened read-write is held with O_EXCL only with
 * IO_FLAG_EXCLUSIVE (EXT2_FLAG_EXCLUSIVE): without it the kernel is to
 * claim the device at mount (fuseblk), and the open only checks that no
 * one has it yet.
 */
extern io_manager rr_io_manager;

/* The process holding a flock on fd's file (/proc/locks), 0 if not known. */
long io_lock_holder(int fd);
/*
 * Does path live on a rotational device, as the kernel's ext4 would see
 * it: a block device's own queue, an image file's through the loop device
 * the kernel would mount it with, which takes its backing device's flag
 * (a partition's disk's), and a file with no block device under it (tmpfs)
 * is not.  1, 0, or 0 when /sys does not say.
 */
int io_dev_rotational(const char *path);

/*
 * The data path's transfers, on the device's own descriptors (file data
 * never crosses libext2fs's channel), each offered first to every layer
 * above the device (layer.h).  ch: the top of the stack (libext2fs's
 * fs->io).  With direct I/O on (io_set_direct: mode 1 on, 0 off, -1 on for
 * block devices only) a transfer whose offset and length are aligned goes
 * through an O_DIRECT descriptor, so file data is not cached a second time
 * in the device's page cache under the kernel's FUSE cache, and reaches
 * the device when written; anything else takes the buffered descriptor.
 * With it off, a write of a MiB or more from aligned memory (held data's
 * write-back) still goes O_DIRECT, where the device's file system allows.
 * The kernel keeps the two coherent (a direct transfer writes back and
 * drops cached pages of its range first).  Thread-safe.
 */
int io_set_direct(io_channel ch, int mode, char *msg, size_t msglen);
int io_data_read(io_channel ch, void *buf, size_t len, uint64_t off);
/*
 * File data at [off, off+len) for the caller to move from *fd itself (a
 * splice): offered to the layers and counted as io_data_read counts it.
 * -EOPNOTSUPP when data bypasses the page cache (-o direct).
 */
int io_data_read_fd(io_channel ch, uint64_t off, size_t len, int *fd);
int io_data_writev(io_channel ch, struct iovec *iov, int iovcnt, uint64_t off);
/*
 * The calling thread's data writes serve an application's direct write (a
 * FUSE WRITE that is not the kernel's writeback of cached pages), on (1)
 * or off (0): they do not start the image's writeback (issue 39).
 */
void io_data_direct(int on);
int io_data_write(io_channel ch, const void *buf, size_t len, uint64_t off);

/* What the device did: calls that moved bytes, metadata and data apart. */
struct io_dev_stats {
	uint64_t meta_reads, meta_writes;	/* through the channel (zeroing counts as writes) */
	uint64_t meta_bytes;			/* written by those writes */
	uint64_t data_reads, data_writes;	/* the data path's */
	uint64_t data_spliced;			/* reads of those moved by splice */
	uint64_t data_runs;			/* syscalls that wrote the data_writes */
	uint64_t wb_starts;			/* writebacks started before a flush asked */
	uint64_t flushes;
};
void io_dev_stats(io_channel ch, struct io_dev_stats *st);

#endif

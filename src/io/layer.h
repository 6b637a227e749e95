/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The I/O stack: io_managers stacked as e2fsprogs stacks undo_io on
 * unix_io.  libext2fs opens the top one; each opens the one below it:
 *
 *   libext2fs, the commit (superblock), the orphan file, the data path
 *     rr_cache_io_manager  cache.c  metadata block cache (-o cache_mb=0: passes all down)
 *     rr_fail_io_manager   fail.c   fault injection (RRFUSE_IO_FAIL unset: absent)
 *     rr_record_io_manager record.c write recorder (RRFUSE_IO_RECORD unset: absent)
 *     rr_io_manager        dev.c    the image file or block device
 *
 * This is the order (layer.c's table builds it, and nothing else names a
 * layer's neighbour): a layer that keeps metadata (the cache) sits above
 * the faults, so a fault shows where the device would show it (at a miss,
 * at write-back).  The journal writer
 * (src/journal/writer.h) is no manager of its own: it is the cache's
 * write-back hook (io_cache_set_journal), which logs the dirty blocks as a
 * transaction through the channel under the cache before it writes them
 * home, so its writes meet fault injection as any.  The write recorder sits
 * just above the device, so it sees what the device sees.  Journal
 * recovery at mount (src/journal/) reads and writes the channel under the
 * cache and fault injection (io_under_faults) directly, on a filesystem
 * handle it then closes unwritten.
 *
 * Settings come with ext2fs_open2, never in globals: what the device's
 * open itself needs in its flags (IO_FLAG_RW, IO_FLAG_EXCLUSIVE: dev.h),
 * the rest in its io_options ("key=value&..."), which libext2fs gives the
 * top channel's set_option once the stack is open, before it reads the
 * superblock; a layer takes its own options (cache.c: cache_mb; dev.c:
 * trace, the mount's block trace) and hands on the others
 * (io_stacked_set_option), and the device refuses what no layer took.
 * Whether fault injection and the recorder are there is the tests' to
 * say, in the environment (fail.h, record.h), read at open.
 *
 * Every metadata byte crosses every layer through the channel.  File data
 * does not cross libext2fs's channel (io_data_*, dev.h), but it is offered
 * to every layer on its way down, top first: the cache drops its copies of
 * the blocks data overwrites, fault injection fails the transfer, and the
 * device moves the bytes.
 */
#ifndef RRFUSE_IO_LAYER_H
#define RRFUSE_IO_LAYER_H

#include <stdint.h>
#include <sys/uio.h>
#include <ext2fs/ext2fs.h>

/* The head of every stacked manager's private data. */
struct io_layer {
	io_channel lower;	/* the channel below; NULL at the device */
	/*
	 * File data is about to be read (write 0) or written (1) at bytes
	 * [off, off+len) of the device, a write's bytes in iov (NULL for a
	 * read): 0, or a negative errno that fails the transfer.  NULL: the
	 * layer has nothing to do with file data.
	 */
	int (*data)(struct io_layer *l, int write, uint64_t off, uint64_t len,
		    const struct iovec *iov, int iovcnt);
};

/* The bytes a transfer of count moves on ch: a negative count is a byte count (io_manager convention). */
uint64_t io_count_bytes(io_channel ch, int count);
/* The manager libext2fs opens: the top of the stack, which opens the rest. */
io_manager io_stack_top(void);
/* The layer under m in the stack, which m's open opens; NULL under the device. */
io_manager io_stack_below(io_manager m);
/* ch's layer, or NULL when ch is no channel of this stack. */
struct io_layer *io_layer_of(io_channel ch);
/* The device's channel at the bottom of ch's stack. */
io_channel io_bottom(io_channel ch);
/* The channel under the cache and fault injection: the recorder when there is one, else the device. */
io_channel io_under_faults(io_channel ch);
/* Offer a data transfer to every layer of ch's stack above the device, top first (iov: a write's bytes). */
int io_layers_data(io_channel ch, int write, uint64_t off, uint64_t len, const struct iovec *iov,
		   int iovcnt);
/*
 * A stacked channel over lower, for manager m: its private data (size
 * bytes, starting with struct io_layer) is zeroed, its lower set.  The
 * caller fills the rest; io_stacked_free undoes it.
 */
errcode_t io_stacked_new(io_manager m, io_channel lower, size_t size, io_channel *out);
/*
 * Open name with the layer below m (io_stack_below), then, when wanted, a
 * stacked channel of m over it (io_stacked_new): 0 with *out the new
 * channel, or the channel below when not wanted; an error with nothing
 * left open.
 */
errcode_t io_stacked_open(io_manager m, const char *name, int flags, int wanted, size_t size,
			  io_channel *out);
void io_stacked_free(io_channel ch);
/* The last reference to a stacked channel goes: the layer below is closed (its error returned), ch freed. */
errcode_t io_stacked_close(io_channel ch);
/* What a stacked manager has nothing to add to: the layer below's. */
errcode_t io_stacked_set_option(io_channel ch, const char *option, const char *arg);
errcode_t io_stacked_readahead(io_channel ch, unsigned long long block, unsigned long long count);
errcode_t io_stacked_set_blksize(io_channel ch, int blksize);
/* Every manager's 32-bit block calls: its own 64-bit ones. */
errcode_t io_read_blk32(io_channel ch, unsigned long block, int count, void *data);
errcode_t io_write_blk32(io_channel ch, unsigned long block, int count, const void *data);

/*
 * A layer's io_manager, the same for every layer: its own open, close,
 * flush, write_byte, 64-bit transfers, discard and zeroout, named
 * PREFIX_open and so on; set_blksize, set_option and cache_readahead as
 * given (a stacked layer's are mostly io_stacked_*); the 32-bit calls
 * through the 64-bit ones.
 */
#define IO_LAYER_MANAGER(prefix, desc, set_blksize_fn, set_option_fn, readahead_fn) \
	{ \
		.magic = EXT2_ET_MAGIC_IO_MANAGER, \
		.name = (desc), \
		.open = prefix##_open, \
		.close = prefix##_close, \
		.set_blksize = (set_blksize_fn), \
		.read_blk = io_read_blk32, \
		.write_blk = io_write_blk32, \
		.flush = prefix##_flush, \
		.write_byte = prefix##_write_byte, \
		.set_option = (set_option_fn), \
		.read_blk64 = prefix##_read_blk64, \
		.write_blk64 = prefix##_write_blk64, \
		.discard = prefix##_discard, \
		.cache_readahead = (readahead_fn), \
		.zeroout = prefix##_zeroout, \
	}

#endif

// SPDX-License-Identifier: GPL-2.0
/* The I/O stack's common parts (see layer.h). */
#include "layer.h"
#include "cache.h"
#include "dev.h"
#include "fail.h"
#include "record.h"

#include <string.h>

/*
 * The stack, top to bottom (the order layer.h gives the reasons for): the
 * one place that says which layer lies on which.  A layer's open opens the
 * entry after its own (io_stack_below), never a manager it names; a layer
 * that is not wanted (its open decides) hands up the channel below it.
 * Addresses of the managers' variables, which are not constants.
 */
static io_manager *const io_stack[] = {
	&rr_cache_io_manager,
	&rr_fail_io_manager,
	&rr_record_io_manager,
	&rr_io_manager,
};
#define IO_STACK_DEPTH (sizeof(io_stack) / sizeof(io_stack[0]))

/* m's place in the stack, 0 at the top; -1 when m is no layer of it. */
static int stack_index(io_manager m)
{
	size_t i;

	for (i = 0; i < IO_STACK_DEPTH; i++)
		if (*io_stack[i] == m)
			return (int)i;
	return -1;
}

io_manager io_stack_top(void)
{
	return *io_stack[0];
}

io_manager io_stack_below(io_manager m)
{
	int i = stack_index(m);

	return i >= 0 && (size_t)i + 1 < IO_STACK_DEPTH ? *io_stack[i + 1] : NULL;
}

struct io_layer *io_layer_of(io_channel ch)
{
	if (!ch || ch->magic != EXT2_ET_MAGIC_IO_CHANNEL || stack_index(ch->manager) < 0)
		return NULL;
	return ch->private_data;
}

uint64_t io_count_bytes(io_channel ch, int count)
{
	return count < 0 ? (uint64_t)-(int64_t)count : (uint64_t)count * (uint64_t)ch->block_size;
}

io_channel io_bottom(io_channel ch)
{
	struct io_layer *l;

	while ((l = io_layer_of(ch)) && l->lower)
		ch = l->lower;
	return ch;
}

io_channel io_under_faults(io_channel ch)
{
	/* The layers above the recorder's place are the cache and fault injection. */
	int floor = stack_index(rr_record_io_manager), i;
	struct io_layer *l;

	while ((i = stack_index(ch->manager)) >= 0 && i < floor && (l = io_layer_of(ch)) && l->lower)
		ch = l->lower;
	return ch;
}

int io_layers_data(io_channel ch, int write, uint64_t off, uint64_t len, const struct iovec *iov,
		   int iovcnt)
{
	struct io_layer *l;
	int ret;

	for (; (l = io_layer_of(ch)) && l->lower; ch = l->lower)
		if (l->data && (ret = l->data(l, write, off, len, iov, iovcnt)))
			return ret;
	return 0;
}

errcode_t io_stacked_new(io_manager m, io_channel lower, size_t size, io_channel *out)
{
	io_channel ch = NULL;
	struct io_layer *l = NULL;
	errcode_t err;

	err = ext2fs_get_memzero(sizeof(*ch), &ch);
	if (!err)
		err = ext2fs_get_memzero(size, &l);
	if (!err)
		err = ext2fs_get_mem(strlen(lower->name) + 1, &ch->name);
	if (err) {
		ext2fs_free_mem(&l);
		ext2fs_free_mem(&ch);
		return err;
	}
	strcpy(ch->name, lower->name);
	l->lower = lower;
	ch->magic = EXT2_ET_MAGIC_IO_CHANNEL;
	ch->manager = m;
	ch->block_size = lower->block_size;
	ch->refcount = 1;
	ch->flags = lower->flags;
	ch->private_data = l;
	*out = ch;
	return 0;
}

errcode_t io_stacked_open(io_manager m, const char *name, int flags, int wanted, size_t size,
			  io_channel *out)
{
	io_channel lower;
	errcode_t err;

	err = io_stack_below(m)->open(name, flags, &lower);
	if (err)
		return err;
	if (!wanted) {
		*out = lower;
		return 0;
	}
	err = io_stacked_new(m, lower, size, out);
	if (err)
		io_channel_close(lower);
	return err;
}

errcode_t io_stacked_set_option(io_channel ch, const char *option, const char *arg)
{
	io_channel lower = ((struct io_layer *)ch->private_data)->lower;

	if (!lower->manager->set_option)
		return EXT2_ET_INVALID_ARGUMENT;
	return lower->manager->set_option(lower, option, arg);
}

errcode_t io_stacked_readahead(io_channel ch, unsigned long long block, unsigned long long count)
{
	return io_channel_cache_readahead(((struct io_layer *)ch->private_data)->lower, block, count);
}

void io_stacked_free(io_channel ch)
{
	ext2fs_free_mem(&ch->private_data);
	ext2fs_free_mem(&ch->name);
	ext2fs_free_mem(&ch);
}

errcode_t io_stacked_close(io_channel ch)
{
	errcode_t err = io_channel_close(((struct io_layer *)ch->private_data)->lower);

	io_stacked_free(ch);
	return err;
}

errcode_t io_stacked_set_blksize(io_channel ch, int blksize)
{
	errcode_t err = io_channel_set_blksize(((struct io_layer *)ch->private_data)->lower, blksize);

	if (!err)
		ch->block_size = blksize;
	return err;
}

errcode_t io_read_blk32(io_channel ch, unsigned long block, int count, void *data)
{
	return ch->manager->read_blk64(ch, block, count, data);
}

errcode_t io_write_blk32(io_channel ch, unsigned long block, int count, const void *data)
{
	return ch->manager->write_blk64(ch, block, count, data);
}

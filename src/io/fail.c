// SPDX-License-Identifier: GPL-2.0
/* rr_fail: fault injection stacked on the device manager (see fail.h). */
#include "fail.h"
#include "layer.h"

#include <errno.h>
#include <stdlib.h>

/* Faults one variable may name; the rest of it is ignored. */
#define FAIL_MAX 8
/* The unit the variable's block numbers count in, bytes (whatever the file system's block size). */
#define FAIL_UNIT 4096

struct fail {
	struct io_layer layer;	/* first: the stack's view */
	int n;
	char op[FAIL_MAX];	/* 'r' or 'w' */
	uint64_t blk[FAIL_MAX];	/* in FAIL_UNIT */
};

/* The faults RRFUSE_IO_FAIL names: how many (0: none, and no layer). */
static int parse(struct fail *f)
{
	const char *s = getenv("RRFUSE_IO_FAIL");
	char *end;

	f->n = 0;
	while (s && *s && f->n < FAIL_MAX) {
		if ((s[0] != 'r' && s[0] != 'w') || s[1] != ':')
			break;
		f->op[f->n] = s[0];
		f->blk[f->n++] = strtoull(s + 2, &end, 10);
		s = *end == ',' ? end + 1 : end;
	}
	return f->n;
}

static int fails(const struct fail *f, char op, uint64_t off, uint64_t len)
{
	int i;

	for (i = 0; i < f->n; i++)
		if (f->op[i] == op && off < (f->blk[i] + 1) * FAIL_UNIT && off + len > f->blk[i] * FAIL_UNIT)
			return 1;
	return 0;
}

static int fail_data(struct io_layer *l, int write, uint64_t off, uint64_t len,
		     const struct iovec *iov, int iovcnt)
{
	(void)iov;
	(void)iovcnt;
	return fails((struct fail *)l, write ? 'w' : 'r', off, len) ? -EIO : 0;
}

static errcode_t fail_open(const char *name, int flags, io_channel *channel)
{
	struct fail probe, *f;
	int wanted = parse(&probe);
	errcode_t err;

	/* Nothing to fail: the device alone. */
	err = io_stacked_open(rr_fail_io_manager, name, flags, wanted, sizeof(*f), channel);
	if (err || !wanted)
		return err;
	f = (*channel)->private_data;
	parse(f);
	f->layer.data = fail_data;
	return 0;
}

static errcode_t fail_close(io_channel ch)
{
	return --ch->refcount > 0 ? 0 : io_stacked_close(ch);
}

/*
 * A block transfer (write 0: read): failed here when it touches a failing
 * block, else the layer below's; this channel's handler hears of either.
 */
static errcode_t transfer(io_channel ch, int write, unsigned long long block, int count, void *data)
{
	struct fail *f = ch->private_data;
	uint64_t len = io_count_bytes(ch, count);
	errcode_t err;

	if (fails(f, write ? 'w' : 'r', block * (uint64_t)ch->block_size, len))
		err = EIO;
	else if (write)
		err = io_channel_write_blk64(f->layer.lower, block, count, data);
	else
		err = io_channel_read_blk64(f->layer.lower, block, count, data);
	if (err && write && ch->write_error)
		return ch->write_error(ch, (unsigned long)block, count, data, (size_t)len, 0, err);
	if (err && !write && ch->read_error)
		return ch->read_error(ch, (unsigned long)block, count, data, (size_t)len, 0, err);
	return err;
}

static errcode_t fail_read_blk64(io_channel ch, unsigned long long block, int count, void *data)
{
	return transfer(ch, 0, block, count, data);
}

static errcode_t fail_write_blk64(io_channel ch, unsigned long long block, int count, const void *data)
{
	return transfer(ch, 1, block, count, (void *)data);
}

static errcode_t fail_write_byte(io_channel ch, unsigned long offset, int size, const void *data)
{
	struct fail *f = ch->private_data;

	if (fails(f, 'w', offset, (uint64_t)size))
		return EIO;
	return io_channel_write_byte(f->layer.lower, offset, size, data);
}

static errcode_t fail_flush(io_channel ch)
{
	struct fail *f = ch->private_data;

	return io_channel_flush(f->layer.lower);
}

static errcode_t fail_zeroout(io_channel ch, unsigned long long block, unsigned long long count)
{
	struct fail *f = ch->private_data;

	if (fails(f, 'w', block * (uint64_t)ch->block_size, count * (uint64_t)ch->block_size))
		return EIO;
	return io_channel_zeroout(f->layer.lower, block, count);
}

static errcode_t fail_discard(io_channel ch, unsigned long long block, unsigned long long count)
{
	struct fail *f = ch->private_data;

	return io_channel_discard(f->layer.lower, block, count);
}

static struct struct_io_manager fail_manager =
	IO_LAYER_MANAGER(fail, "rrfuse fault injection", io_stacked_set_blksize,
			 io_stacked_set_option, io_stacked_readahead);

io_manager rr_fail_io_manager = &fail_manager;

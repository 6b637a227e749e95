// SPDX-License-Identifier: GPL-2.0
/* rr_record: the write recorder stacked on the device manager (see record.h). */
#include "record.h"
#include "layer.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* Pieces of one record's writev: its header and the data's pieces. */
#define REC_IOV_MAX 64

struct record {
	struct io_layer layer;	/* first: the stack's view */
	/* Each record goes out whole, under the lock, so they never interleave. */
	pthread_mutex_t lock;
	int fd;			/* the log, O_APPEND */
};

static int put(struct record *r, uint32_t type, uint64_t off, uint64_t len, uint64_t arg,
	       const struct iovec *data, int n)
{
	struct rr_rec h = { .type = type, .off = off, .len = len, .arg = arg };
	struct iovec v[REC_IOV_MAX + 1];
	size_t want = sizeof(h);
	ssize_t got;
	int i;

	if (n > REC_IOV_MAX)
		return -EINVAL;
	v[0].iov_base = &h;
	v[0].iov_len = sizeof(h);
	for (i = 0; i < n; i++) {
		v[i + 1] = data[i];
		want += data[i].iov_len;
	}
	pthread_mutex_lock(&r->lock);
	got = writev(r->fd, v, n + 1);
	pthread_mutex_unlock(&r->lock);
	if (got == (ssize_t)want)
		return 0;
	rr_log(LOG_ERR, "write recorder: cannot append to RRFUSE_IO_RECORD: %s",
	       got < 0 ? strerror(errno) : "short write");
	return -EIO;
}

static int record_data(struct io_layer *l, int write, uint64_t off, uint64_t len,
		       const struct iovec *iov, int iovcnt)
{
	struct iovec one;
	char *flat;
	int i, ret;

	if (!write)
		return 0;
	if (iovcnt <= REC_IOV_MAX)
		return put((struct record *)l, RR_REC_WRITE, off, len, 0, iov, iovcnt);
	flat = malloc(len);
	if (!flat)
		return -ENOMEM;
	one.iov_base = flat;
	one.iov_len = len;
	for (i = 0; i < iovcnt; i++) {
		memcpy(flat, iov[i].iov_base, iov[i].iov_len);
		flat += iov[i].iov_len;
	}
	ret = put((struct record *)l, RR_REC_WRITE, off, len, 0, &one, 1);
	free(one.iov_base);
	return ret;
}

/* The layer below did err; if nothing failed, the record of what it did. */
static errcode_t done(struct record *r, errcode_t err, uint32_t type, uint64_t off, uint64_t len,
		      uint64_t arg, const struct iovec *data, int n)
{
	if (err)
		return err;
	return put(r, type, off, len, arg, data, n) ? EIO : 0;
}

static errcode_t record_open(const char *name, int flags, io_channel *channel)
{
	const char *path = getenv("RRFUSE_IO_RECORD");
	struct record *r;
	io_channel lower, ch;
	struct stat st;
	errcode_t err;
	int fd;

	err = io_stack_below(rr_record_io_manager)->open(name, flags, &lower);
	if (err || !path || !*path) {
		*channel = lower;	/* nothing to record: the device alone */
		return err;
	}
	/* Appended to, not truncated: the mount may open the stack more than once. */
	errno = 0;
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd < 0 || fstat(fd, &st) ||
	    (!st.st_size && write(fd, RR_REC_MAGIC, 8) != 8)) {
		err = errno ? errno : EIO;
		rr_log(LOG_ERR, "write recorder: cannot open %s: %s", path, strerror((int)err));
		if (fd >= 0)
			close(fd);
		io_channel_close(lower);
		return err;
	}
	err = io_stacked_new(rr_record_io_manager, lower, sizeof(*r), &ch);
	if (err) {
		close(fd);
		io_channel_close(lower);
		return err;
	}
	r = ch->private_data;
	pthread_mutex_init(&r->lock, NULL);
	r->fd = fd;
	r->layer.data = record_data;
	*channel = ch;
	return 0;
}

static errcode_t record_close(io_channel ch)
{
	struct record *r = ch->private_data;

	if (--ch->refcount > 0)
		return 0;
	close(r->fd);
	pthread_mutex_destroy(&r->lock);
	return io_stacked_close(ch);
}

static errcode_t record_read_blk64(io_channel ch, unsigned long long block, int count, void *data)
{
	return io_channel_read_blk64(((struct record *)ch->private_data)->layer.lower, block, count, data);
}

static errcode_t record_write_blk64(io_channel ch, unsigned long long block, int count, const void *data)
{
	struct record *r = ch->private_data;
	struct iovec v = { .iov_base = (void *)data, .iov_len = io_count_bytes(ch, count) };

	return done(r, io_channel_write_blk64(r->layer.lower, block, count, data), RR_REC_WRITE,
		    block * (uint64_t)ch->block_size, v.iov_len, 0, &v, 1);
}

static errcode_t record_write_byte(io_channel ch, unsigned long offset, int size, const void *data)
{
	struct record *r = ch->private_data;
	struct iovec v = { .iov_base = (void *)data, .iov_len = (size_t)size };

	return done(r, io_channel_write_byte(r->layer.lower, offset, size, data), RR_REC_WRITE, offset,
		    (uint64_t)size, 0, &v, 1);
}

static errcode_t record_flush(io_channel ch)
{
	struct record *r = ch->private_data;
	struct stat st;

	/* What the log held when the flush began is what the flush makes durable. */
	if (fstat(r->fd, &st))
		return errno;
	return done(r, io_channel_flush(r->layer.lower), RR_REC_FLUSH, 0, 0, (uint64_t)st.st_size, NULL, 0);
}

static errcode_t record_zeroout(io_channel ch, unsigned long long block, unsigned long long count)
{
	struct record *r = ch->private_data;

	return done(r, io_channel_zeroout(r->layer.lower, block, count), RR_REC_ZERO,
		    block * (uint64_t)ch->block_size, count * (uint64_t)ch->block_size, 0, NULL, 0);
}

static errcode_t record_discard(io_channel ch, unsigned long long block, unsigned long long count)
{
	struct record *r = ch->private_data;

	return done(r, io_channel_discard(r->layer.lower, block, count), RR_REC_DISCARD,
		    block * (uint64_t)ch->block_size, count * (uint64_t)ch->block_size, 0, NULL, 0);
}

static struct struct_io_manager record_manager =
	IO_LAYER_MANAGER(record, "rrfuse write recorder", io_stacked_set_blksize,
			 io_stacked_set_option, io_stacked_readahead);

io_manager rr_record_io_manager = &record_manager;

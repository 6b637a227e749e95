// SPDX-License-Identifier: GPL-2.0
/*
 * The FUSE channel between libfuse and /dev/fuse.  libfuse 3.14 reads every
 * request and writes every reply through these two functions
 * (fuse_session_custom_io), and rrfuse uses that for what libfuse 3.14
 * cannot do itself:
 *
 * - Ask for FUSE_HANDLE_KILLPRIV_V2 (protocol 7.33; libfuse learnt it in
 *   3.16).  Without it the kernel never sets SB_NOSEC on a FUSE superblock,
 *   so every write(2) and truncate first asks for security.capability: a
 *   synchronous round trip per write() of a small file.  With it the kernel
 *   remembers per inode that there is nothing to drop (S_NOSEC), and leaves
 *   dropping the set-id bits to the server.  The INIT reply gets the flag
 *   when the INIT request offered it.
 * - Pass the kernel's "drop the set-id bits" marks to the handlers: libfuse
 *   3.14 drops them when it decodes WRITE and SETATTR.  (OPEN's mark comes
 *   only with O_TRUNC, which rrfuse has the kernel send as a SETATTR: no
 *   FUSE_CAP_ATOMIC_O_TRUNC.)  The
 *   mark is kept for the thread that read the request, which is the thread
 *   that handles it (libfuse's session loops read and process a request in
 *   one thread).  This is why rrfuse never asks for splice reads: a spliced
 *   request's header would not pass through read() here (rr_init).
 * - Carry requests over io_uring (-o io_uring, lib/uring.c): the ring's
 *   threads pass each request through chan_take_request, and the replies
 *   libfuse writes for them come back through chan_writev to their entry;
 *   the INIT reply asks for the ring.
 */
#include "channel.h"
#include "ops.h"
#include "rrfs.h"
#include "rrfuse/rrctl_wire.h"
#include "log.h"
#include "uring.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <linux/fuse.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/*
 * The one FUSE session this daemon serves (src/fuse is its entry point):
 * the ring's callback (lib/uring.c, chan_take_request) carries no context
 * to find it by, so it is here rather than the mount's.
 */
static struct {
	struct rr_fs *rfs;
	struct fuse_session *se;
	int fd;			/* /dev/fuse */
	/* The INIT request's id while its reply is due; 0 otherwise.  What the kernel offered: */
	_Atomic uint64_t init_unique;
	int init_killpriv_v2;
	_Atomic uint64_t requests[RRCTL_NREQ];	/* by opcode, for rrctl -s */
	_Atomic uint64_t request_ns[RRCTL_NREQ];	/* time from the request to its reply, likewise */
} chan;

/* The current request's marks; see chan_req_kills_suidgid and chan_req_is_direct_write. */
#define CHAN_KILL_SUIDGID 1
#define CHAN_DIRECT_WRITE 2
static __thread int chan_mark;

/*
 * The request this thread serves, from its reading to its reply (the
 * thread that reads a request handles it, on /dev/fuse and on the ring):
 * its unique id (0: none), its opcode's counter, when it was read.
 */
static __thread struct {
	uint64_t unique;
	unsigned int op;
	struct timespec t0;
} chan_cur;

static unsigned int op_index(uint32_t opcode)
{
	return opcode < RRCTL_NREQ ? opcode : RRCTL_NREQ - 1;
}

/* What this thread writes: the reply to the request it serves, or else a notification (unique 0). */
static void note_reply(uint64_t unique)
{
	struct timespec t;

	if (!chan_cur.unique || unique != chan_cur.unique)
		return;
	clock_gettime(CLOCK_MONOTONIC, &t);
	atomic_fetch_add_explicit(&chan.request_ns[chan_cur.op],
				  (uint64_t)((t.tv_sec - chan_cur.t0.tv_sec) * 1000000000LL +
					     (t.tv_nsec - chan_cur.t0.tv_nsec)),
				  memory_order_relaxed);
	chan_cur.unique = 0;
}

/* The unique id in the header iov[0], if it is one (0 otherwise, as a notification's). */
static uint64_t reply_unique(const struct iovec *iov, int count)
{
	const struct fuse_out_header *out;

	if (count < 1 || iov[0].iov_len != sizeof(*out))
		return 0;
	out = iov[0].iov_base;
	return out->unique;
}

int chan_req_kills_suidgid(void)
{
	return !!(chan_mark & CHAN_KILL_SUIDGID);
}

int chan_req_is_direct_write(void)
{
	return !!(chan_mark & CHAN_DIRECT_WRITE);
}

/* The fixed part of the request after its header, if the request is that long. */
static const void *request_arg(const void *buf, ssize_t len, size_t argsize)
{
	if ((size_t)len < sizeof(struct fuse_in_header) + argsize)
		return NULL;
	return (const char *)buf + sizeof(struct fuse_in_header);
}

/* What this request asks of rrfuse that libfuse does not pass on. */
static void note_request(const void *buf, ssize_t len)
{
	const struct fuse_in_header *h = buf;
	const struct fuse_write_in *w;
	const struct fuse_setattr_in *sa;
	const struct fuse_init_in *init;

	chan_mark = 0;
	chan_cur.unique = 0;
	rr_set_req_pid(0);
	if ((size_t)len < sizeof(*h))
		return;
	rr_set_req_pid(h->pid);
	atomic_fetch_add_explicit(&chan.requests[op_index(h->opcode)], 1, memory_order_relaxed);
	chan_cur.unique = h->unique;
	chan_cur.op = op_index(h->opcode);
	clock_gettime(CLOCK_MONOTONIC, &chan_cur.t0);
	switch (h->opcode) {
	case FUSE_WRITE:
		if (!(w = request_arg(buf, len, sizeof(*w))))
			break;
		if (w->write_flags & FUSE_WRITE_KILL_SUIDGID)
			chan_mark |= CHAN_KILL_SUIDGID;
		/*
		 * fuse_direct_io() names the writer's lock owner; the page
		 * cache's write-back (FUSE_WRITE_CACHE) and the write-through
		 * of fuse_perform_write() name none, and the latter holds the
		 * range's pages locked until the reply.
		 */
		if ((w->write_flags & (FUSE_WRITE_LOCKOWNER | FUSE_WRITE_CACHE)) == FUSE_WRITE_LOCKOWNER)
			chan_mark |= CHAN_DIRECT_WRITE;
		break;
	case FUSE_SETATTR:
		if ((sa = request_arg(buf, len, sizeof(*sa))))
			chan_mark = sa->valid & FATTR_KILL_SUIDGID ? CHAN_KILL_SUIDGID : 0;
		break;
	case FUSE_INIT:
		init = request_arg(buf, len, offsetof(struct fuse_init_in, flags) + sizeof(init->flags));
		if (!init || init->major != FUSE_KERNEL_VERSION)
			break;
		chan.init_killpriv_v2 = !!(init->flags & FUSE_HANDLE_KILLPRIV_V2);
		atomic_store(&chan.init_unique, h->unique);
		uring_note_init(buf, (size_t)len);
		break;
	}
}

/* A reply: into the ring entry this thread serves, if the reply is its request's, else to /dev/fuse. */
static ssize_t send_reply(int fd, struct iovec *iov, int count)
{
	ssize_t r;

	note_reply(reply_unique(iov, count));
	return uring_send(iov, count, &r) ? r : writev(fd, iov, count);
}

/*
 * FUSE_STATX (7.39), which libfuse 3.14 would answer ENOSYS, so that the
 * kernel stops asking and statx never shows a birth time: answered here.
 * 0 when buf was not a STATX request and goes on to libfuse.
 */
static int answer_statx(int fd, const void *buf, ssize_t len)
{
	const struct fuse_in_header *h = buf;
	struct fuse_out_header out = { .unique = h->unique };
	struct rr_fuse_statx_out sx;
	struct iovec iov[2] = { { &out, sizeof(out) }, { &sx, sizeof(sx) } };
	int ret;

	if (h->opcode != RR_FUSE_STATX)
		return 0;
	ret = request_arg(buf, len, sizeof(struct rr_fuse_statx_in)) ? rr_statx(chan.rfs, h->nodeid, &sx)
								    : -EINVAL;
	out.error = ret;
	out.len = (uint32_t)(sizeof(out) + (ret ? 0 : sizeof(sx)));
	/* A failed reply (the request was interrupted, the mount aborted) has no one to tell. */
	if (send_reply(fd, iov, ret ? 1 : 2) < 0)
		rr_log(LOG_DEBUG, "statx reply: %s", strerror(errno));
	return 1;
}

static ssize_t chan_read(int fd, void *buf, size_t len, void *userdata)
{
	ssize_t n;

	(void)userdata;
	do {
		n = read(fd, buf, len);
		if (n > 0)
			note_request(buf, n);
	} while (n > 0 && (size_t)n >= sizeof(struct fuse_in_header) && answer_statx(fd, buf, n));
	return n;
}

/* The INIT reply, if this is it: it asks for KILLPRIV_V2 too when the kernel offered it. */
static void amend_init_reply(struct iovec *iov, int count)
{
	uint64_t unique = atomic_load(&chan.init_unique);
	const struct fuse_out_header *h = iov[0].iov_base;
	struct fuse_init_out *out;

	if (!unique || count < 2 || iov[0].iov_len != sizeof(*h) || h->unique != unique)
		return;
	atomic_store(&chan.init_unique, 0);
	if (h->error || iov[1].iov_len < offsetof(struct fuse_init_out, flags) + sizeof(out->flags) ||
	    !chan.init_killpriv_v2)
		return;
	out = iov[1].iov_base;
	out->flags |= FUSE_HANDLE_KILLPRIV_V2;
	chan.rfs->killpriv_v2 = 1;
}

static ssize_t chan_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	(void)userdata;
	note_reply(reply_unique(iov, count));
	/* Only the INIT reply is amended: it never goes over the ring, which starts after it. */
	amend_init_reply(iov, count);
	return uring_writev(fd, iov, count);
}

/* Replies spliced from a pipe (libfuse offers FUSE_CAP_SPLICE_WRITE only with this). */
static ssize_t chan_splice_send(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
				unsigned int flags, void *userdata)
{
	ssize_t r;

	(void)userdata;
	note_reply(chan_cur.unique);	/* a reply: rrfuse sends no notification that libfuse splices */
	if (uring_send_pipe(fdin, len, &r))
		return r;
	return splice(fdin, offin, fdout, offout, len, flags);
}

/* A request from the ring (lib/uring.c), as chan_read would have seen it: 1 when answered here. */
static int chan_take_request(const void *buf, size_t len)
{
	note_request(buf, (ssize_t)len);
	return answer_statx(chan.fd, buf, (ssize_t)len);
}

void chan_detach(void)
{
	uring_stop();
}

int chan_attach(struct fuse_session *se, struct rr_fs *rfs)
{
	static const struct fuse_custom_io io = {
		.read = chan_read, .writev = chan_writev, .splice_send = chan_splice_send,
	};

	chan.rfs = rfs;
	chan.se = se;
	chan.fd = fuse_session_fd(se);
	rfs->requests = chan.requests;
	rfs->request_ns = chan.request_ns;
	rfs->ring = uring_stats();
	if (rfs->opts.io_uring && rfs->opts.single)
		rr_log(LOG_NOTICE, "io_uring: not with -s (one thread serves every request); requests stay "
				   "on /dev/fuse");
	else if (rfs->opts.io_uring)
		uring_configure(se, chan_take_request);
	return fuse_session_custom_io(se, &io, chan.fd);
}

// SPDX-License-Identifier: GPL-2.0
/*
 * FUSE requests over io_uring (Linux 6.14, protocol 7.42; fs/fuse/dev_uring.c).
 *
 * The kernel keeps a queue per possible CPU and puts a request on the queue
 * of the CPU its caller runs on.  A queue's entries are buffers the server
 * registered with an IORING_OP_URING_CMD on the /dev/fuse descriptor
 * (FUSE_IO_URING_CMD_REGISTER): the command completes when a request has
 * been copied into the entry, and the server answers by writing the reply
 * into the same buffers and sending FUSE_IO_URING_CMD_COMMIT_AND_FETCH,
 * which also offers the entry for the next request.  The kernel uses the
 * ring only once every queue has an entry waiting; FORGET, INTERRUPT and
 * notifications stay on /dev/fuse, which libfuse's loop keeps reading.
 *
 * One thread per entry, each with an io_uring of its own, pinned to its
 * queue's CPU: an entry the kernel can hand a request to always has a
 * thread waiting on it.  A thread serving several entries would hold the
 * requests queued to the others while its handler waits, and a handler
 * may wait on the kernel: a notification (inval_inode before a reply,
 * lseek's launder) can need a WRITE served first, which the kernel queues
 * on this CPU's queue.  With a thread per entry that WRITE goes to another
 * idle entry, as it goes to another libfuse worker on /dev/fuse.
 *
 * The handlers are libfuse's, unchanged: the entry's header, opcode
 * argument and payload are laid out again as /dev/fuse would deliver them
 * and given to fuse_session_process_buf; the reply libfuse writes through
 * the session's custom I/O (src/fuse/channel.c: chan_writev) comes here
 * (uring_send) for the thread's current entry.  fusefloor speaks it too.  The payload buffer is page-aligned and the request is
 * rebuilt in front of it, so a WRITE's data is not copied.
 */
#define FUSE_USE_VERSION 314
#include "uring.h"
#include "log.h"
#include "rrfuse/fuse_uring.h"

#include <fuse_lowlevel.h>

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Entries, over all queues, when there are few CPUs: about the threads of libfuse's loop (main.c: serve). */
#define URING_THREADS 16
#define URING_MIN_DEPTH 2
/* How often an idle thread looks whether rrfuse is stopping. */
#define URING_IDLE_POLL_MS 500

struct uring_ent {
	struct rr_fuse_uring_req_header hdr;
	struct iovec iov[2];
	struct io_uring ring;
	char *area;		/* page | payload: the request is rebuilt at the end of the first page */
	char *payload;
	uint64_t commit_id;
	unsigned int qid;
	int last_cmd;		/* RR_FUSE_IO_URING_CMD_*: what a failed completion refers to */
	int replied;
	pthread_t thread;
	int started;
	int ring_ok;		/* ring set up: closed by uring_stop, which cancels a waiting command */
};

static struct {
	struct fuse_session *se;
	int (*take)(const void *req, size_t len);
	int offered;		/* the INIT request offered the ring */
	uint64_t init_unique;
	int fd, own_fd;
	size_t payload;
	size_t page;
	unsigned int nent;
	struct uring_ent *ent;
	atomic_int stopping;
	pthread_mutex_t lock;	/* for the start: */
	pthread_cond_t cond;
	unsigned int set_up, failed;	/* threads with their io_uring set up, or failed to */
	int go;			/* 1: register; -1: quit (the INIT reply did not ask for the ring) */
	atomic_int refused;	/* logged once */
	struct rr_ring_stats stats;
} ur = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static __thread struct uring_ent *cur;

/*
 * The kernel's num_possible_cpus(), its number of queues: every one needs
 * an entry before the ring is used.  /sys's list is ranges, "0-3,8-11".
 */
static unsigned int possible_cpus(void)
{
	FILE *f = fopen("/sys/devices/system/cpu/possible", "r");
	unsigned int lo, hi, n = 0;
	int c;

	while (f && fscanf(f, "%u", &lo) == 1) {
		hi = lo;
		c = fgetc(f);
		if (c == '-' && fscanf(f, "%u", &hi) == 1)
			c = fgetc(f);
		if (hi >= lo)
			n += hi - lo + 1;
		if (c != ',')
			break;
	}
	if (f)
		fclose(f);
	return n ? n : (unsigned int)sysconf(_SC_NPROCESSORS_CONF);
}

static void refuse(const char *what, int err)
{
	if (!atomic_exchange(&ur.refused, 1))
		rr_log(LOG_NOTICE, "io_uring: %s: %s; requests stay on /dev/fuse", what, strerror(err));
}

/*
 * Queue a command for e's entry: REGISTER its buffers, or COMMIT_AND_FETCH.
 * The next submit hands it to the kernel: for a commit, the one that also
 * waits for the next request (ent_thread), a system call per request.
 */
static int prep_cmd(struct uring_ent *e, int cmd)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ring);
	struct rr_fuse_uring_cmd_req *req;

	if (!sqe)
		return -EBUSY;
	/* An SQE128: the second half is the command's. */
	memset(sqe, 0, 2 * sizeof(*sqe));
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = ur.fd;
	sqe->cmd_op = (__u32)cmd;
	sqe->addr = (uintptr_t)e->iov;
	sqe->len = 2;
	req = (struct rr_fuse_uring_cmd_req *)sqe->cmd;
	req->qid = (uint16_t)e->qid;
	req->commit_id = cmd == RR_FUSE_IO_URING_CMD_COMMIT_AND_FETCH ? e->commit_id : 0;
	e->last_cmd = cmd;
	return 0;
}

/* Hand the kernel a command for e's entry now. */
static int submit_cmd(struct uring_ent *e, int cmd)
{
	int r = prep_cmd(e, cmd);

	if (r < 0)
		return r;
	r = io_uring_submit(&e->ring);
	return r == 1 ? 0 : r < 0 ? r : -EIO;
}

/* The reply header for the current request, no payload. */
static void reply_error(struct uring_ent *e, int err)
{
	struct fuse_out_header out = {
		.len = sizeof(out), .error = -err, .unique = e->commit_id,
	};

	memcpy(e->hdr.in_out, &out, sizeof(out));
	e->hdr.ring_ent_in_out.payload_sz = 0;
	e->replied = 1;
}

/* The request in e, laid out as /dev/fuse delivers it, through the channel and libfuse. */
static void serve_request(struct uring_ent *e)
{
	struct fuse_in_header in;
	size_t payload = e->hdr.ring_ent_in_out.payload_sz, arg;
	char *req;

	memcpy(&in, e->hdr.in_out, sizeof(in));
	e->commit_id = e->hdr.ring_ent_in_out.commit_id;
	e->replied = 0;
	atomic_fetch_add_explicit(&ur.stats.requests, 1, memory_order_relaxed);
	/* The opcode's argument is what the length leaves beside the header and the payload. */
	if (payload > ur.payload || in.len < sizeof(in) + payload ||
	    (arg = in.len - sizeof(in) - payload) > sizeof(e->hdr.op_in)) {
		rr_log(LOG_ERR, "io_uring: malformed request (opcode %u, length %u, payload %zu)", in.opcode,
		       in.len, payload);
		reply_error(e, EIO);
		return;
	}
	req = e->payload - arg - sizeof(in);
	memcpy(req, &in, sizeof(in));
	memcpy(req + sizeof(in), e->hdr.op_in, arg);
	cur = e;
	if (!ur.take || !ur.take(req, in.len)) {
		struct fuse_buf buf = { .mem = req, .size = in.len };

		fuse_session_process_buf(ur.se, &buf);
	}
	cur = NULL;
	if (!e->replied) {
		/* Every request the ring carries wants a reply; the entry comes back only with one. */
		rr_log(LOG_ERR, "io_uring: no reply to opcode %u: EIO", in.opcode);
		reply_error(e, EIO);
	}
}

int uring_send(const struct iovec *iov, int count, ssize_t *ret)
{
	struct uring_ent *e = cur;
	const struct fuse_out_header *out;
	size_t n = 0;

	if (!e)
		return 0;
	out = count >= 1 && iov[0].iov_len == sizeof(*out) ? iov[0].iov_base : NULL;
	if (!out || out->unique != e->commit_id || e->replied) {
		/*
		 * A notification from a ring thread: on the ring's own
		 * descriptor, which stays open until these threads are
		 * joined (libfuse's is closed at the unmount, before).
		 */
		*ret = writev(ur.fd, iov, count);
		return 1;
	}
	for (int i = 1; i < count; i++) {
		if (iov[i].iov_len > ur.payload - n) {
			errno = EINVAL;
			*ret = -1;
			return 1;
		}
		/* A reply may point into the request it answers, which shares the buffer. */
		memmove(e->payload + n, iov[i].iov_base, iov[i].iov_len);
		n += iov[i].iov_len;
	}
	memcpy(e->hdr.in_out, out, sizeof(*out));
	e->hdr.ring_ent_in_out.payload_sz = (uint32_t)n;
	e->replied = 1;
	*ret = (ssize_t)(sizeof(*out) + n);
	return 1;
}

/* All of len bytes from fd into buf, or -1. */
static int read_full(int fd, void *buf, size_t len)
{
	while (len) {
		ssize_t r = read(fd, buf, len);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		buf = (char *)buf + r;
		len -= (size_t)r;
	}
	return 0;
}

int uring_send_pipe(int pipe_fd, size_t len, ssize_t *ret)
{
	struct uring_ent *e = cur;
	struct fuse_out_header out;

	if (!e)
		return 0;
	if (e->replied) {
		*ret = splice(pipe_fd, NULL, ur.fd, NULL, len, 0);
		return 1;
	}
	*ret = -1;
	if (len < sizeof(out) || len - sizeof(out) > ur.payload) {
		errno = EINVAL;
		return 1;
	}
	if (read_full(pipe_fd, &out, sizeof(out)) || out.unique != e->commit_id ||
	    read_full(pipe_fd, e->payload, len - sizeof(out))) {
		errno = EIO;
		return 1;
	}
	memcpy(e->hdr.in_out, &out, sizeof(out));
	e->hdr.ring_ent_in_out.payload_sz = (uint32_t)(len - sizeof(out));
	e->replied = 1;
	*ret = (ssize_t)len;
	return 1;
}

/* The kernel's word that this connection is over (unmount, abort, a dead daemon's ring). */
static int is_teardown(int err)
{
	return err == -ENOTCONN || err == -ECONNABORTED || err == -ECANCELED || err == -ENODEV;
}

static int ring_init(struct uring_ent *e)
{
	/* Completions run only when the thread waits for them, in its own context. */
	int r = io_uring_queue_init(4, &e->ring,
				    IORING_SETUP_SQE128 | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN);

	if (r == -EINVAL)
		r = io_uring_queue_init(4, &e->ring, IORING_SETUP_SQE128);
	return r;
}

/* Register e's entry; serve what arrives in it until the connection ends or rrfuse stops. */
static void *ent_thread(void *arg)
{
	struct __kernel_timespec idle = { .tv_nsec = URING_IDLE_POLL_MS * 1000000L };
	struct uring_ent *e = arg;
	struct io_uring_cqe *cqe;
	cpu_set_t cpus;
	int r, failed = 0;

	/* The kernel queues a request on its caller's CPU; serving it there keeps it warm. */
	CPU_ZERO(&cpus);
	CPU_SET(e->qid, &cpus);
	pthread_setaffinity_np(pthread_self(), sizeof(cpus), &cpus);
	r = ring_init(e);
	if (r < 0)
		refuse("cannot set up an io_uring", -r);
	/* Registered only once the INIT reply asked for the ring (amend_init_reply, uring_go). */
	pthread_mutex_lock(&ur.lock);
	if (r < 0)
		ur.failed++;
	else
		e->ring_ok = 1;
	ur.set_up++;
	pthread_cond_broadcast(&ur.cond);
	while (!ur.go)
		pthread_cond_wait(&ur.cond, &ur.lock);
	pthread_mutex_unlock(&ur.lock);
	if (r < 0 || ur.go < 0)
		return NULL;
	r = submit_cmd(e, RR_FUSE_IO_URING_CMD_REGISTER);
	if (r < 0) {
		/*
		 * This queue may be left without an entry, and the kernel,
		 * told to use the ring, holds every request until all have
		 * one: a registration it refuses makes it give up the ring.
		 */
		refuse("cannot register a ring entry", -r);
		e->qid = UINT16_MAX;
		submit_cmd(e, RR_FUSE_IO_URING_CMD_REGISTER);
		goto out;
	}
	atomic_fetch_add(&ur.stats.entries, 1);
	for (;;) {
		/* The reply queued below goes out with the wait for the next request. */
		r = io_uring_submit_and_wait_timeout(&e->ring, &cqe, 1, &idle, NULL);
		/* liburing 2.3 returns the count submitted, no completion, when the wait then timed out. */
		if (r >= 0 && !cqe)
			r = -ETIME;
		if (r == -ETIME || r == -EINTR) {
			if (atomic_load(&ur.stopping))
				break;
			continue;
		}
		if (r < 0) {
			/* The reply's submit meets the end of the connection here now. */
			if (!is_teardown(r))
				rr_log(LOG_ERR, "io_uring: waiting for requests: %s", strerror(-r));
			break;
		}
		r = cqe->res;
		io_uring_cqe_seen(&e->ring, cqe);
		if (r < 0) {
			if (is_teardown(r))
				break;
			if (e->last_cmd == RR_FUSE_IO_URING_CMD_REGISTER) {
				refuse("the kernel refused a ring entry", -r);
				break;
			}
			if (r != -ENOENT) {
				rr_log(LOG_ERR, "io_uring: commit of request %llu: %s",
				       (unsigned long long)e->commit_id, strerror(-r));
				break;
			}
			/*
			 * The kernel no longer had the request (it ended
			 * meanwhile): the entry is gone with it.  Offer the
			 * buffers again as a new one.
			 */
			rr_log(LOG_DEBUG, "io_uring: request %llu ended before its reply",
			       (unsigned long long)e->commit_id);
			if (++failed > 8 || submit_cmd(e, RR_FUSE_IO_URING_CMD_REGISTER) < 0)
				break;
			continue;
		}
		failed = 0;
		serve_request(e);
		r = prep_cmd(e, RR_FUSE_IO_URING_CMD_COMMIT_AND_FETCH);
		if (r < 0) {
			rr_log(LOG_ERR, "io_uring: cannot commit a reply: %s", strerror(-r));
			break;
		}
	}
	atomic_fetch_sub(&ur.stats.entries, 1);
out:
	/*
	 * The ring stays mapped until uring_stop: liburing maps it with raw
	 * system calls, and a sanitizer that saw no munmap would take another
	 * thread's ring at the same address for this one.
	 */
	return NULL;
}

/* Wait for the threads started; join them and free what they had.  Under ur.lock for the first. */
static void join_all(void)
{
	for (unsigned int i = 0; ur.ent && i < ur.nent; i++) {
		if (ur.ent[i].started)
			pthread_join(ur.ent[i].thread, NULL);
		if (ur.ent[i].ring_ok)
			io_uring_queue_exit(&ur.ent[i].ring);
		free(ur.ent[i].area);
	}
	free(ur.ent);
	ur.ent = NULL;
	ur.nent = 0;
	if (ur.own_fd)
		close(ur.fd);
	ur.own_fd = 0;
	atomic_store(&ur.stats.wanted, 0);
}

/* Start every entry's thread; 0 once all have their io_uring, or -1 (said once). */
static int start_threads(unsigned int depth)
{
	unsigned int i, started = 0;
	pthread_attr_t attr;
	sigset_t all, old;
	int ret = 0;

	/* The threads take no signals: libfuse's handlers run in the main thread. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	pthread_attr_init(&attr);
	for (i = 0; i < ur.nent; i++) {
		struct uring_ent *e = &ur.ent[i];
		int r;

		e->qid = i / depth;
		e->area = aligned_alloc(ur.page, ur.page + ur.payload);
		if (!e->area) {
			refuse("no memory for the ring", ENOMEM);
			ret = -1;
			break;
		}
		e->payload = e->area + ur.page;
		e->iov[0] = (struct iovec){ &e->hdr, sizeof(e->hdr) };
		e->iov[1] = (struct iovec){ e->payload, ur.payload };
		r = pthread_create(&e->thread, &attr, ent_thread, e);
		if (r) {
			refuse("cannot start a ring thread", r);
			ret = -1;
			break;
		}
		e->started = 1;
		started++;
	}
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_mutex_lock(&ur.lock);
	while (ur.set_up < started)
		pthread_cond_wait(&ur.cond, &ur.lock);
	if (ur.failed)
		ret = -1;
	pthread_mutex_unlock(&ur.lock);
	return ret;
}

/* The INIT reply written (ok) or not: the threads register their entries, or quit. */
static void uring_go(int ok)
{
	pthread_mutex_lock(&ur.lock);
	ur.go = ok ? 1 : -1;
	pthread_cond_broadcast(&ur.cond);
	pthread_mutex_unlock(&ur.lock);
}

/* Every entry's thread started, with its io_uring: 0, or -1 (said once). */
static int prepare(int fd, size_t payload)
{
	unsigned int queues = possible_cpus(), depth;

	ur.page = (size_t)sysconf(_SC_PAGESIZE);
	/* Our own: fuse_session_unmount closes libfuse's before the ring's threads are done. */
	ur.fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (ur.fd < 0) {
		refuse("cannot duplicate /dev/fuse's descriptor", errno);
		return -1;
	}
	ur.own_fd = 1;
	ur.payload = (payload + ur.page - 1) & ~(ur.page - 1);
	depth = URING_THREADS / queues > URING_MIN_DEPTH ? URING_THREADS / queues : URING_MIN_DEPTH;
	ur.nent = queues * depth;
	atomic_store(&ur.stats.queues, queues);
	atomic_store(&ur.stats.wanted, ur.nent);
	ur.ent = calloc(ur.nent, sizeof(*ur.ent));
	if (!ur.ent) {
		refuse("no memory for the ring", ENOMEM);
		join_all();
		return -1;
	}
	if (start_threads(depth)) {
		uring_go(0);
		join_all();
		return -1;
	}
	return 0;
}

void uring_configure(struct fuse_session *se, int (*take)(const void *req, size_t len))
{
	ur.se = se;
	ur.take = take;
}

void uring_note_init(const void *req, size_t len)
{
	const struct fuse_in_header *h = req;
	const struct fuse_init_in *in = (const void *)(h + 1);

	if (!ur.se || len < sizeof(*h) + sizeof(*in) || h->opcode != FUSE_INIT)
		return;
	ur.offered = in->major == FUSE_KERNEL_VERSION && (in->flags & FUSE_INIT_EXT) &&
		     (in->flags2 & RR_FUSE_OVER_IO_URING_FLAGS2);
	ur.init_unique = h->unique;
}

/* The payload the kernel may pass in one request or reply (fs/fuse/dev_uring.c: fuse_uring_create). */
static size_t ring_payload(const struct fuse_init_out *out)
{
	size_t payload = FUSE_MIN_READ_BUFFER, pages = 32;	/* FUSE_DEFAULT_MAX_PAGES_PER_REQ */
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	if (out->flags & FUSE_MAX_PAGES)
		pages = out->max_pages;
	if (payload < out->max_write)
		payload = out->max_write;
	if (payload < pages * page)
		payload = pages * page;
	return payload;
}

/*
 * Before writing a reply to /dev/fuse (fd): if it is the INIT reply and
 * the kernel offered the ring, start a thread per ring entry on every
 * queue (one per possible CPU), each with its io_uring, and once all are,
 * have the reply ask for the ring (FUSE_OVER_IO_URING), after which the
 * kernel holds every request until each queue has an entry: 1.  Then
 * uring_go(1) once the reply is written (the kernel refuses ring commands
 * before), and the threads register their entries; uring_go(0) when it
 * was not, and they quit.  A refusal is logged once; /dev/fuse serves.
 */
static int amend_init_reply(int fd, struct iovec *iov, int count)
{
	const struct fuse_out_header *h = iov[0].iov_base;
	struct fuse_init_out *out;

	if (!ur.se || !ur.init_unique || count < 2 || iov[0].iov_len != sizeof(*h) ||
	    h->unique != ur.init_unique)
		return 0;
	ur.init_unique = 0;
	if (h->error || iov[1].iov_len < offsetof(struct fuse_init_out, flags2) + sizeof(out->flags2))
		return 0;
	if (!ur.offered) {
		rr_log(LOG_NOTICE, "io_uring: the kernel does not offer FUSE over io_uring (Linux 6.14 with "
				   "/sys/module/fuse/parameters/enable_uring set); requests stay on /dev/fuse");
		return 0;
	}
	out = iov[1].iov_base;
	if (prepare(fd, ring_payload(out)))
		return 0;
	out->flags |= FUSE_INIT_EXT;
	out->flags2 |= RR_FUSE_OVER_IO_URING_FLAGS2;
	return 1;
}

ssize_t uring_writev(int fd, struct iovec *iov, int count)
{
	ssize_t r;
	int ring;

	if (uring_send(iov, count, &r))
		return r;
	ring = amend_init_reply(fd, iov, count);
	r = writev(fd, iov, count);
	/* The kernel takes ring commands once it has the INIT reply. */
	if (ring)
		uring_go(r > 0);
	return r;
}

void uring_stop(void)
{
	atomic_store(&ur.stopping, 1);
	join_all();
}

const struct rr_ring_stats *uring_stats(void)
{
	return &ur.stats;
}

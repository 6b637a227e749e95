/* SPDX-License-Identifier: GPL-2.0 */
#ifndef RRFUSE_URING_H
#define RRFUSE_URING_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <stdint.h>

struct fuse_session;

/* What rrctl -s shows (rr_fs.ring). */
struct rr_ring_stats {
	_Atomic uint64_t requests;	/* requests that came over the ring */
	_Atomic uint32_t entries;	/* ring entries registered and served now */
	_Atomic uint32_t wanted;	/* entries started: every queue's */
	_Atomic uint32_t queues;	/* the kernel's queues, one per possible CPU */
};

/*
 * Carry the session's requests over io_uring (protocol 7.42) where the
 * kernel offers it.  take sees each ring request first, laid out as
 * /dev/fuse delivers it, and returns 1 when it answered it (NULL: libfuse
 * gets them all).  FORGET, INTERRUPT and notifications stay on /dev/fuse.
 */
void uring_configure(struct fuse_session *se, int (*take)(const void *req, size_t len));

/* The INIT request read from /dev/fuse, len bytes: whether the kernel offers the ring. */
void uring_note_init(const void *req, size_t len);

/*
 * A reply (or notification) libfuse writes: over the ring when this thread
 * serves a ring entry (uring_send), else to /dev/fuse (fd); the INIT reply
 * asks for the ring there when the kernel offered it, and the ring's
 * threads start once the kernel has it.  writev's answer.
 */
ssize_t uring_writev(int fd, struct iovec *iov, int count);

/* After the session ended and the mount is gone: wait for the ring's threads. */
void uring_stop(void);

/*
 * A reply (iov[0] the fuse_out_header) to the request this thread serves
 * from a ring entry: copied into the entry, committed when the handler
 * returns.  Anything else a ring thread sends (a notification) goes to
 * /dev/fuse through the ring's own descriptor.  1 with *ret the bytes
 * taken (or -1 and errno); 0 when this thread serves no ring entry.
 */
int uring_send(const struct iovec *iov, int count, ssize_t *ret);

/* The same for a reply libfuse spliced into a pipe: len bytes of it, header first. */
int uring_send_pipe(int pipe_fd, size_t len, ssize_t *ret);

const struct rr_ring_stats *uring_stats(void);

#endif

/* SPDX-License-Identifier: GPL-2.0 */
#ifndef RRFUSE_URING_H
#define RRFUSE_URING_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

struct fuse_session;
struct rr_ring_stats;

/*
 * FUSE requests over io_uring (-o io_uring, protocol 7.42), in two steps
 * around the INIT reply.  uring_prepare, before it: start a thread per
 * ring entry, on every queue (one per possible CPU), each with its
 * io_uring; payload: the largest request or reply payload the kernel will
 * pass (max_write, max_pages).  0 when all are ready: the INIT reply may
 * then ask for the ring (FUSE_OVER_IO_URING), after which the kernel holds
 * every request until each queue has an entry.  uring_go(1) once the
 * reply is written (the kernel refuses ring commands before): the threads
 * register their entries.  uring_go(0) when it was not: they quit.
 * FORGET, INTERRUPT and notifications stay on /dev/fuse (fd).  A failure
 * is logged once; /dev/fuse then serves.
 */
int uring_prepare(struct fuse_session *se, int fd, size_t payload);
void uring_go(int ok);

/* After the session ended and the mount is gone: wait for the ring's threads. */
void uring_stop(void);

/*
 * A reply (iov[0] the fuse_out_header) to the request this thread serves
 * from a ring entry: copied into the entry, committed when the handler
 * returns.  1 with *ret the bytes taken (or -1 and errno); 0 when this
 * thread serves no ring entry or the reply is not its request's (a
 * notification): it goes to /dev/fuse.
 */
int uring_send(const struct iovec *iov, int count, ssize_t *ret);

/* The same for a reply libfuse spliced into a pipe: len bytes of it, header first. */
int uring_send_pipe(int pipe_fd, size_t len, ssize_t *ret);

/* The counters rrctl -s shows (rr_fs.ring). */
const struct rr_ring_stats *uring_stats(void);

#endif

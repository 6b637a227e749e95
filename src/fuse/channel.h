/* SPDX-License-Identifier: GPL-2.0 */
#ifndef RRFUSE_CHANNEL_H
#define RRFUSE_CHANNEL_H

struct fuse_session;
struct rr_fs;

/*
 * Put rrfuse between libfuse and /dev/fuse (fuse_session_custom_io), for
 * what libfuse 3.14 cannot negotiate or does not pass on.  Call after
 * fuse_session_mount, before the session loop; rfs->requests then counts
 * the requests read.  0, or a negative errno.
 */
int chan_attach(struct fuse_session *se, struct rr_fs *rfs);

/* After the session ended and the mount is gone: the ring's threads are done (lib/uring.c). */
void chan_detach(void);

/*
 * The request this thread is handling asks rrfuse to drop set-user-ID and
 * set-group-ID (FUSE_WRITE_KILL_SUIDGID on a WRITE, FATTR_KILL_SUIDGID on a
 * SETATTR).  The kernel marks requests so only once it and rrfuse agreed
 * on FUSE_HANDLE_KILLPRIV_V2.
 */
int chan_req_kills_suidgid(void);

/*
 * The request this thread is handling is a WRITE of fuse_direct_io()
 * (O_DIRECT, or a file opened with FOPEN_DIRECT_IO): the kernel holds no
 * lock on the page cache of its range while it waits for the reply, so
 * the handler may ask it to drop those pages.  Every other WRITE may come
 * with the range's pages locked (write-through of fuse_perform_write, a
 * short direct write's buffered fallback, write-back).
 */
int chan_req_is_direct_write(void);

#endif

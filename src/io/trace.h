/* SPDX-License-Identifier: GPL-2.0 */
/*
 * -o trace=FILE: a block trace from inside rrfuse, unprivileged blktrace.
 * Every transfer to or from the device, every flush and every discard, in
 * fio's iolog version 3 ("fio version 3 iolog", then "TIME_US DEVICE
 * ACTION [OFFSET LENGTH]"), so that fio --read_iolog=FILE (with
 * --replay_redirect=/dev/...) replays the same I/O on a real device; what
 * each line was goes to FILE.kinds, one letter a line in the same order.
 */
#ifndef RRFUSE_TRACE_H
#define RRFUSE_TRACE_H

#include <stdint.h>

enum trace_kind {
	TRACE_DATA = 'd',	/* file data */
	TRACE_META = 'm',	/* metadata (libext2fs, the superblock, the orphan file, the journal) */
	TRACE_NONE = '-',	/* flushes and discards, which are of no one kind */
};

enum trace_op { TRACE_READ, TRACE_WRITE, TRACE_SYNC, TRACE_TRIM, TRACE_OPEN, TRACE_CLOSE };

/* A mount's trace: one device's lines, across all its openings, in one file. */
struct io_trace;

/* Start recording to path, naming device in every line: 0 with *out, or -errno (*out NULL). */
int trace_open(const char *path, const char *device, struct io_trace **out);
/*
 * One transfer (len bytes at off), flush or discard; the device opened or
 * closed (the I/O layer's channel: a close also writes everything out, so
 * the trace is complete when whoever waits for the image's lock goes on).
 * Nothing when t is NULL (not recording).  Thread-safe.
 */
void trace_io(struct io_trace *t, enum trace_kind kind, enum trace_op op, uint64_t off, uint64_t len);
/* Stop recording, once no channel has t: 0 or -errno (the first write error); t is freed.  NULL: 0. */
int trace_close(struct io_trace *t);

#endif

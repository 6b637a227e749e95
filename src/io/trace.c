// SPDX-License-Identifier: GPL-2.0
/*
 * The recorder behind -o trace=FILE (trace.h).  fio 3.33 writes and reads
 * version 3 logs with times in microseconds since the log's start; "add"
 * and "open" must come before the first transfer of a file and "close"
 * after the last, and a flush is "sync 0 0", a discard "trim".
 *
 * Cost: one formatted line per transfer under one mutex, into a large
 * stdio buffer, so a line is a memory copy and the file is written a
 * buffer at a time.  Not recording costs a load and a branch.
 *
 * The trace is the mount's: the daemon's entry point opens it before the
 * image and closes it after (src/fuse/main.c), and each opening of the
 * device is handed it as an io_option (src/io/dev.c).
 */
#include "trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* stdio buffer of each file: a write(2) per this many bytes of lines. */
#define TRACE_BUF_BYTES (1u << 20)

static const char *const op_names[] = {
	[TRACE_READ] = "read", [TRACE_WRITE] = "write", [TRACE_SYNC] = "sync", [TRACE_TRIM] = "trim",
	[TRACE_OPEN] = "open", [TRACE_CLOSE] = "close",
};

/* One mount's trace, across every opening of its device (trace.h). */
struct io_trace {
	pthread_mutex_t lock;	/* the two files, in step; a leaf (src/core/rrfs.h) */
	FILE *log, *kinds;
	char *device;
	struct timespec start;
	int err;		/* the first write error */
};

static uint64_t now_us(const struct io_trace *t)
{
	struct timespec n;

	clock_gettime(CLOCK_MONOTONIC, &n);
	return (uint64_t)(n.tv_sec - t->start.tv_sec) * 1000000 +
	       (uint64_t)((n.tv_nsec - t->start.tv_nsec) / 1000);
}

static void trace_free(struct io_trace *t)
{
	pthread_mutex_destroy(&t->lock);
	free(t->device);
	free(t);
}

int trace_open(const char *path, const char *device, struct io_trace **out)
{
	size_t n = strlen(path);
	char *kpath = malloc(n + sizeof(".kinds"));
	struct io_trace *t = calloc(1, sizeof(*t));
	int ret = 0;

	if (!kpath || !t) {
		free(kpath);
		free(t);
		return -ENOMEM;
	}
	pthread_mutex_init(&t->lock, NULL);
	memcpy(kpath, path, n);
	memcpy(kpath + n, ".kinds", sizeof(".kinds"));
	t->log = fopen(path, "we");
	t->kinds = t->log ? fopen(kpath, "we") : NULL;
	t->device = strdup(device);
	if (!t->log || !t->kinds || !t->device) {
		ret = errno ? -errno : -ENOMEM;
		if (t->log)
			fclose(t->log);
		if (t->kinds)
			fclose(t->kinds);
		trace_free(t);
		t = NULL;
	} else {
		setvbuf(t->log, NULL, _IOFBF, TRACE_BUF_BYTES);
		setvbuf(t->kinds, NULL, _IOFBF, TRACE_BUF_BYTES / 8);
		clock_gettime(CLOCK_MONOTONIC, &t->start);
		fprintf(t->log, "fio version 3 iolog\n0 %s add\n", t->device);
	}
	free(kpath);
	*out = t;
	return ret;
}

void trace_io(struct io_trace *t, enum trace_kind kind, enum trace_op op, uint64_t off, uint64_t len)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	/* fio 3.33 reads a sync only with an offset and a length ("sync 0 0"). */
	if (op == TRACE_READ || op == TRACE_WRITE || op == TRACE_TRIM || op == TRACE_SYNC) {
		fprintf(t->log, "%llu %s %s %llu %llu\n", (unsigned long long)now_us(t), t->device,
			op_names[op], (unsigned long long)off, (unsigned long long)len);
	} else {
		fprintf(t->log, "%llu %s %s\n", (unsigned long long)now_us(t), t->device, op_names[op]);
	}
	fputc(kind, t->kinds);
	fputc('\n', t->kinds);
	if (op == TRACE_CLOSE) {
		fflush(t->log);
		fflush(t->kinds);
	}
	if (!t->err && (ferror(t->log) || ferror(t->kinds)))
		t->err = -EIO;
	pthread_mutex_unlock(&t->lock);
}

int trace_close(struct io_trace *t)
{
	int ret;

	if (!t)
		return 0;
	ret = t->err;
	if (fclose(t->log) && !ret)
		ret = -errno;
	if (fclose(t->kinds) && !ret)
		ret = -errno;
	trace_free(t);
	return ret;
}

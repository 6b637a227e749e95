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

static struct {
	pthread_mutex_t lock;	/* the two files, in step */
	FILE *log, *kinds;
	char *device;
	struct timespec start;
	int err;		/* the first write error */
} tr = { .lock = PTHREAD_MUTEX_INITIALIZER };

static uint64_t now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)(t.tv_sec - tr.start.tv_sec) * 1000000 +
	       (uint64_t)((t.tv_nsec - tr.start.tv_nsec) / 1000);
}

int trace_open(const char *path, const char *device)
{
	size_t n = strlen(path);
	char *kpath = malloc(n + sizeof(".kinds"));
	int ret = 0;

	if (!kpath)
		return -ENOMEM;
	memcpy(kpath, path, n);
	memcpy(kpath + n, ".kinds", sizeof(".kinds"));
	tr.log = fopen(path, "we");
	tr.kinds = tr.log ? fopen(kpath, "we") : NULL;
	tr.device = strdup(device);
	if (!tr.log || !tr.kinds || !tr.device) {
		ret = errno ? -errno : -ENOMEM;
		if (tr.log)
			fclose(tr.log);
		if (tr.kinds)
			fclose(tr.kinds);
		free(tr.device);
		tr.log = tr.kinds = NULL;
		tr.device = NULL;
	} else {
		setvbuf(tr.log, NULL, _IOFBF, TRACE_BUF_BYTES);
		setvbuf(tr.kinds, NULL, _IOFBF, TRACE_BUF_BYTES / 8);
		clock_gettime(CLOCK_MONOTONIC, &tr.start);
		fprintf(tr.log, "fio version 3 iolog\n0 %s add\n", tr.device);
	}
	free(kpath);
	return ret;
}

void trace_io(enum trace_kind kind, enum trace_op op, uint64_t off, uint64_t len)
{
	if (!__atomic_load_n(&tr.log, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&tr.lock);
	if (tr.log) {
		/* fio 3.33 reads a sync only with an offset and a length ("sync 0 0"). */
		if (op == TRACE_READ || op == TRACE_WRITE || op == TRACE_TRIM || op == TRACE_SYNC) {
			fprintf(tr.log, "%llu %s %s %llu %llu\n", (unsigned long long)now_us(), tr.device,
				op_names[op], (unsigned long long)off, (unsigned long long)len);
		} else {
			fprintf(tr.log, "%llu %s %s\n", (unsigned long long)now_us(), tr.device, op_names[op]);
		}
		fputc(kind, tr.kinds);
		fputc('\n', tr.kinds);
		if (op == TRACE_CLOSE) {
			fflush(tr.log);
			fflush(tr.kinds);
		}
		if (!tr.err && (ferror(tr.log) || ferror(tr.kinds)))
			tr.err = -EIO;
	}
	pthread_mutex_unlock(&tr.lock);
}

int trace_close(void)
{
	int ret;

	pthread_mutex_lock(&tr.lock);
	if (!tr.log) {
		pthread_mutex_unlock(&tr.lock);
		return 0;
	}
	ret = tr.err;
	if (fclose(tr.log) && !ret)
		ret = -errno;
	if (fclose(tr.kinds) && !ret)
		ret = -errno;
	__atomic_store_n(&tr.log, NULL, __ATOMIC_RELEASE);
	tr.kinds = NULL;
	free(tr.device);
	tr.device = NULL;
	pthread_mutex_unlock(&tr.lock);
	return ret;
}

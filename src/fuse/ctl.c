// SPDX-License-Identifier: GPL-2.0
/*
 * rrctl's commands: check the fixed-size command (version, terminated
 * strings, the caller's right to change values), then ask the allocator
 * under the fs lock (allocators/mb_ctl.c).  The reply is a record; rrctl
 * formats it.
 */
#include "ctl.h"
#include "cache.h"
#include "data.h"
#include "dev.h"
#include "log.h"
#include "rrfs.h"
#include "uring.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/*
 * rrctl's key for the allocation trace, the mount's one key of
 * rrfuse/keys.def: the daemon opens its file, not the allocator.
 */
#define RR_KEY_ALIAS(name, of)
#define RR_KEY_POLICY(name)
#define RR_KEY_POLICY_DIR(name)
#define RR_KEY_MOUNT(name) static const char ctl_trace_key[] = #name;
#include "rrfuse/keys.def"
#undef RR_KEY_ALIAS
#undef RR_KEY_POLICY
#undef RR_KEY_POLICY_DIR
#undef RR_KEY_MOUNT

/* The I/O stack's counters: the device's, the cache's (when there is one). */
static void ctl_io_stats(struct rr_fs *rfs, struct rrctl_stats *s)
{
	struct io_cache_stats c;
	struct io_dev_stats d;

/* rrctl's name for each counter: its source's, after the source's prefix. */
#define RING(f) s->ring_##f = atomic_load_explicit(&rfs->ring->f, memory_order_relaxed);
#define DEV(f) s->io_##f = d.f;
#define CACHE(f) s->cache_##f = c.f;
	for (size_t i = 0; rfs->requests && i < RRCTL_NREQ; i++) {
		s->requests[i] = atomic_load_explicit(&rfs->requests[i], memory_order_relaxed);
		s->request_ns[i] = atomic_load_explicit(&rfs->request_ns[i], memory_order_relaxed);
	}
	if (rfs->ring) {
		RING(requests) RING(entries) RING(wanted) RING(queues)
	}
	io_dev_stats(rfs->fs->io, &d);
	DEV(meta_reads) DEV(meta_writes) DEV(data_reads) DEV(data_spliced) DEV(data_writes) DEV(data_runs)
	DEV(wb_starts) DEV(flushes)
	s->io_meta_blocks = d.meta_bytes / rfs->bsize;
	if (!io_cache_stats(rfs->fs->io, &c)) {
		CACHE(blocks) CACHE(dirty) CACHE(max) CACHE(hits) CACHE(misses) CACHE(writes) CACHE(dropped)
		CACHE(forgotten)
	}
#undef RING
#undef DEV
#undef CACHE
}

int rr_ctl_is_cmd(unsigned int cmd)
{
	return _IOC_TYPE(cmd) == RRCTL_MAGIC;
}

static size_t cmd_size(unsigned int cmd)
{
	switch (cmd) {
	case RRCTL_GET:
	case RRCTL_SET:
		return sizeof(struct rrctl_tunable);
	case RRCTL_GROUPS:
		return sizeof(struct rrctl_groups);
	case RRCTL_STATS:
		return sizeof(struct rrctl_stats);
	case RRCTL_REMOUNT:
		return sizeof(struct rrctl_remount);
	case RRCTL_SYNC:
		return sizeof(struct rrctl_sync);
	default:
		return 0;
	}
}

static int terminated(const char *s, size_t len)
{
	return memchr(s, 0, len) != NULL;
}

/* The image's device numbers for the trace's lines (one mount per daemon). */
static dev_t trace_dev;

void rr_ctl_trace_dev(const char *device)
{
	struct stat st;

	if (!stat(device, &st))
		trace_dev = S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev;
}

int rr_ctl_alloc_trace(struct rr_fs *rfs, FILE *f, const char *name)
{
	return rr_alloc_set_trace(rfs->alloc, f, name, major(trace_dev), minor(trace_dev));
}

/* alloc_trace: its file's name ("" when off); set, a new file (an absolute path) or "" to stop. */
static int ctl_trace(struct rr_fs *rfs, unsigned int cmd, struct rrctl_tunable *t)
{
	FILE *f = NULL;

	if (cmd != RRCTL_SET) {
		snprintf(t->name, sizeof(t->name), "%s", ctl_trace_key);
		rr_alloc_trace_name(rfs->alloc, t->value, sizeof(t->value));
		return 0;
	}
	if (t->value[0] && t->value[0] != '/') {
		snprintf(t->err, sizeof(t->err), "bad value for %s=: '%.60s' (an absolute path; empty stops)",
			 ctl_trace_key, t->value);
		return -EINVAL;
	}
	if (t->value[0] && !(f = fopen(t->value, "we"))) {
		snprintf(t->err, sizeof(t->err), "%s=%.60s: %.50s", ctl_trace_key, t->value, strerror(errno));
		return -EINVAL;
	}
	rr_ctl_alloc_trace(rfs, f, t->value);
	return 0;
}

/* The index'th key of rrctl's listing: the allocator's, then alloc_trace; NULL past the last. */
static const char *ctl_key(unsigned int index)
{
	const char *name = rr_alloc_tunable_name(index);
	unsigned int n;

	if (name)
		return name;
	for (n = 0; rr_alloc_tunable_name(n); n++)
		;
	return index == n ? ctl_trace_key : NULL;
}

/* GET and SET: name and value are the caller's text, checked before use. */
static int ctl_tunable(struct rr_fs *rfs, unsigned int cmd, uid_t uid, struct rrctl_tunable *t)
{
	const char *name;
	int ret;

	if (!terminated(t->name, sizeof(t->name)) || !terminated(t->value, sizeof(t->value)))
		return -EINVAL;
	if (cmd == RRCTL_SET && uid != 0 && uid != getuid())
		return -EPERM;
	memset(t->err, 0, sizeof(t->err));
	t->result = 0;
	rr_fs_lock(rfs);
	name = t->name[0] ? t->name : ctl_key(t->index);
	if (name && !strcmp(name, ctl_trace_key)) {
		ret = ctl_trace(rfs, cmd, t);
	} else if (cmd == RRCTL_SET) {
		ret = rr_alloc_set(rfs->alloc, t->name, t->value, t->err, sizeof(t->err));
	} else if (t->name[0]) {
		ret = rr_alloc_get(rfs->alloc, t->name, t->value, sizeof(t->value), t->err, sizeof(t->err));
	} else if (name) {
		snprintf(t->name, sizeof(t->name), "%s", name);
		ret = rr_alloc_get(rfs->alloc, name, t->value, sizeof(t->value), t->err, sizeof(t->err));
	} else {
		snprintf(t->err, sizeof(t->err), "no tunable %u", t->index);
		ret = -ENOENT;
	}
	rr_fs_end_op(rfs);
	if (cmd == RRCTL_SET && !ret)
		rr_log(LOG_INFO, "rrctl: uid %u set %s=%s", (unsigned int)uid, t->name, t->value);
	t->result = -ret;
	return 0;
}

static void ctl_groups(struct rr_fs *rfs, struct rrctl_groups *g)
{
	uint32_t i, n;
	int ret = 0;

	memset(g->g, 0, sizeof(g->g));
	g->count = 0;
	g->result = 0;
	g->blocksize_bits = rfs->bbits;
	rr_fs_lock(rfs);
	n = rr_alloc_ngroups(rfs->alloc);
	g->ngroups = n;
	for (i = 0; i < RRCTL_GROUPS_PAGE && g->start < n && i < n - g->start && !ret; i++) {
		ret = rr_alloc_group_info(rfs->alloc, g->start + i, &g->g[i]);
		if (!ret)
			g->count++;
	}
	rr_fs_end_op(rfs);
	g->result = -ret;
}

int rr_ctl(struct rr_fs *rfs, unsigned int cmd, uid_t uid, const void *in, size_t in_size,
	   size_t out_size, union rr_ctl_buf *buf, size_t *len)
{
	size_t need = cmd_size(cmd);

	if (!need)
		return -ENOTTY;
	if (in_size < need || out_size < need)
		return -EINVAL;
	memcpy(buf, in, need);
	/* version is the first field of every command. */
	if (buf->t.version != RRCTL_VERSION)
		return -EINVAL;
	if (cmd == RRCTL_REMOUNT) {
		/* The mount's owner is whoever runs the daemon (fusermount3 mounts for the user). */
		if (uid != 0 && uid != getuid())
			return -EPERM;
		*len = need;
		memset(buf->r.err, 0, sizeof(buf->r.err));
		buf->r.result = -rr_fs_remount(rfs, !!buf->r.ro, buf->r.err, sizeof(buf->r.err));
		rr_log(LOG_NOTICE, "remount %s by uid %u: %s", buf->r.ro ? "ro" : "rw", (unsigned int)uid,
		       buf->r.result ? buf->r.err : "done");
		return 0;
	}
	if (cmd == RRCTL_SYNC) {
		/* Anyone who could open the mount point: what syncfs(2) would be. */
		int ret;

		*len = need;
		memset(buf->y.err, 0, sizeof(buf->y.err));
		ret = rr_fs_sync(rfs);
		if (ret)
			snprintf(buf->y.err, sizeof(buf->y.err), "sync failed: %s (the daemon's log says where)",
				 strerror(-ret));
		buf->y.result = -ret;
		return 0;
	}
	/*
	 * Read-only: no allocator is running.  rfs->alloc is set before the
	 * session loop starts and dropped after it ends (a read-only mount's
	 * orphan cleanup detaches it before the loop too), so it is stable here.
	 */
	if (!rfs->alloc)
		return -EROFS;
	*len = need;
	switch (cmd) {
	case RRCTL_GROUPS:
		ctl_groups(rfs, &buf->g);
		return 0;
	case RRCTL_STATS:
		memset(&buf->s, 0, sizeof(buf->s));
		buf->s.version = RRCTL_VERSION;
		rr_fs_lock(rfs);
		rr_alloc_stats(rfs->alloc, &buf->s);
		rr_fs_end_op(rfs);
		ctl_io_stats(rfs, &buf->s);
		data_stats(rfs, &buf->s.delayed_blocks, &buf->s.delayed_files, &buf->s.delayed_peak,
			   &buf->s.dirty_background_bytes, &buf->s.dirty_limit_bytes);
		return 0;
	default:
		return ctl_tunable(rfs, cmd, uid, &buf->t);
	}
}

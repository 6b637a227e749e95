// SPDX-License-Identifier: GPL-2.0
/*
 * -o alloc_trace: every allocation request, preallocation use and free
 * as the line the kernel's tracefs prints for ext4_request_blocks,
 * ext4_mballoc_alloc, ext4_mballoc_prealloc and ext4_free_blocks, and
 * each drop of a file's preallocations (at its writer's last close, before
 * a truncate or delete) as ext4_discard_preallocations, whose len rrfuse
 * fills with the number of preallocations dropped (as
 * /sys/kernel/tracing/events/ext4/EVENT/format gives them on Linux 6.18),
 * so that one parser reads the kernel's trace and rrfuse's
 * (tools/ext4trace.py).  The line head is tracefs's own: the task (this
 * thread's name), its thread id, the CPU it runs on, the five flag
 * columns and CLOCK_MONOTONIC, which is what the kernel's default "local"
 * trace clock counts from too.
 *
 * Fields rrfuse has no value for get what the kernel would print for
 * them where that is known, and 0 where not:
 *  - ext4_free_blocks: ino 0 and mode 00, because a free reaches the
 *    engine as a range of blocks (rr_free_blocks, libext2fs's stats
 *    callback) with no owner; flags empty, as the kernel prints none set.
 *  - ext4_mballoc_alloc: tail 0 and broken 0 (the kernel's ac_tail and
 *    ac_buddy, the stripe search's, which rrfuse does not have), as the
 *    kernel prints for every request that did not end in its aligned
 *    scan.
 *  - libext2fs's own blocks (extent-tree nodes, directories) are
 *    requests of ino 0: they reach the engine through its callbacks,
 *    which name no inode.
 * Flags are the kernel's names for what the request asked (alloc.h's
 * flags: DATA is HINT_DATA, RESERVED the delayed allocation's
 * DELALLOC_RESV|USE_RESV as ext4's writeback asks it, METADATA USE_RESV,
 * USE_ROOT_RESV USE_ROOT_BLKS) and, for ext4_mballoc_alloc, what the
 * engine made of it (HINT_TRY_GOAL, STREAM_ALLOC, HINT_GRP_ALLOC,
 * HINT_NOPREALLOC for a closed file's last request).
 *
 * Cost: off, a relaxed load and a branch at each call site (MB_TRACING);
 * on, a line formatted on the stack and one mutex around a copy into a
 * 1 MiB stdio buffer.  The mutex also keeps the lines whole and in the
 * order the engine made its decisions in.
 */
#include "mb_host.h"
#include "mb_trace.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

/* stdio buffer of the trace file: a write(2) per this many bytes of lines. */
#define MB_TRACE_BUF (1u << 20)
/* The longest line: ext4_mballoc_alloc with every flag set is about 400 bytes. */
#define MB_TRACE_LINE 640

/* The kernel's EXT4_MB_* bits and the names tracefs prints for them, in its order. */
static const struct {
	unsigned int bit;
	const char *name;
} kflag_names[] = {
	{ 0x0001, "HINT_MERGE" }, { 0x0008, "HINT_FIRST" }, { 0x0020, "HINT_DATA" },
	{ 0x0040, "HINT_NOPREALLOC" }, { 0x0080, "HINT_GRP_ALLOC" }, { 0x0100, "HINT_GOAL_ONLY" },
	{ 0x0200, "HINT_TRY_GOAL" }, { 0x0400, "DELALLOC_RESV" }, { 0x0800, "STREAM_ALLOC" },
	{ 0x1000, "USE_ROOT_BLKS" }, { 0x2000, "USE_RESV" }, { 0x4000, "STRICT_CHECK" },
};

static const char *const cr_names[MB_NUM_CRS] = {
	"CR_POWER2_ALIGNED", "CR_GOAL_LEN_FAST", "CR_BEST_AVAIL_LEN", "CR_GOAL_LEN_SLOW", "CR_ANY_FREE",
};

/*
 * The kernel's ac_criteria as its trace prints it: a request its goal
 * served shows the criterion the search would have started from, set
 * before the goal is tried; rrfuse's search had asked about none
 * (MB_NUM_CRS).
 */
static const char *cr_name(const struct mb_ac *ac)
{
	return cr_names[ac->cr < MB_NUM_CRS ? ac->cr : mb_first_cr(ac)];
}

/* "task-pid " of this thread's lines, made once: a thread keeps its name and id. */
static _Thread_local char tl_task[40];

/* The kernel's ar->flags for what this request asked. */
static unsigned int req_kflags(const struct rr_alloc_req *req)
{
	unsigned int k = 0;

	if (req->flags & RR_ALLOC_DATA)
		k |= 0x0020;
	if (req->flags & RR_ALLOC_RESERVED)
		k |= 0x0400 | 0x2000;
	if (req->flags & RR_ALLOC_METADATA)
		k |= 0x2000;
	if (req->flags & RR_ALLOC_USE_ROOT_RESV)
		k |= 0x1000;
	return k;
}

/* __print_flags: the names joined by '|', what no name covers as hex; nothing for none. */
static void kflags_text(unsigned int k, char *buf, size_t len)
{
	size_t i, n = 0;

	buf[0] = 0;
	for (i = 0; i < sizeof(kflag_names) / sizeof(kflag_names[0]) && n < len; i++) {
		if (!(k & kflag_names[i].bit))
			continue;
		n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? "|" : "", kflag_names[i].name);
		k &= ~kflag_names[i].bit;
	}
	if (k && n < len)
		snprintf(buf + n, len - n, "%s0x%x", n ? "|" : "", k);
}

/* tracefs's head of a line, up to and with the device numbers: its length. */
static int head(const struct mb_trace *tr, const char *event, char *buf, size_t len)
{
	struct timespec ts;
	/* The CPU the engine decided for (a replay's is its trace's), so that a replay of this line agrees. */
	int cpu = mb_cpu();

	if (!tl_task[0]) {
		char comm[16];

		if (pthread_getname_np(pthread_self(), comm, sizeof(comm)) || !comm[0])
			snprintf(comm, sizeof(comm), "rrfuse");
		snprintf(tl_task, sizeof(tl_task), "%16s-%-7d", comm, (int)gettid());
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return snprintf(buf, len, "%s [%03d] ..... %5lu.%06lu: %s: dev %u,%u ", tl_task, cpu < 0 ? 0 : cpu,
			(unsigned long)ts.tv_sec, (unsigned long)(ts.tv_nsec / 1000), event, tr->major, tr->minor);
}

/* The free held back, if any, as its line.  Trace lock held. */
static void put_free_locked(struct mb_trace *tr)
{
	if (!tr->free_len)
		return;
	if (tr->f)
		fprintf(tr->f, "%sino 0 mode 00 block %llu count %lu flags \n", tr->free_head,
			(unsigned long long)tr->free_blk, (unsigned long)tr->free_len);
	tr->free_len = 0;
}

/* One line: tracefs's head, then the event's fields; written whole under the trace's lock. */
static void __attribute__((format(printf, 3, 4))) emit(struct rr_alloc *a, const char *event,
							const char *fmt, ...)
{
	struct mb_trace *tr = &a->trace;
	char line[MB_TRACE_LINE];
	va_list ap;
	int n, m;

	n = head(tr, event, line, sizeof(line));
	va_start(ap, fmt);
	m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	n += m < (int)sizeof(line) - n - 1 ? m : (int)sizeof(line) - n - 2;
	line[n++] = '\n';
	pthread_mutex_lock(&tr->lock);
	put_free_locked(tr);
	if (tr->f)
		fwrite_unlocked(line, 1, (size_t)n, tr->f);
	pthread_mutex_unlock(&tr->lock);
}

void mb_trace_request(struct rr_alloc *a, const struct rr_alloc_req *req, uint32_t len)
{
	char flags[256];

	kflags_text(req_kflags(req), flags, sizeof(flags));
	/* The kernel's line ends in a space (its format's). */
	emit(a, "ext4_request_blocks", "ino %lu flags %s len %u lblk %u goal %llu lleft %u lright %u pleft %llu pright %llu ",
	     (unsigned long)req->ino, flags, len, (uint32_t)req->lblk, (unsigned long long)req->goal,
	     (uint32_t)req->nbr.lleft, (uint32_t)req->nbr.lright, (unsigned long long)req->nbr.pleft,
	     (unsigned long long)req->nbr.pright);
}

/* Group, offset in it and logical block of an extent given as a device block: the kernel's g/s/l@lblk. */
static void ext_of(const struct rr_alloc *a, uint64_t pblk, struct mb_ext *ex)
{
	ex->group = (uint32_t)((pblk - a->first_data_block) / a->bpg);
	ex->start = (uint32_t)(pblk - a->first_data_block - (uint64_t)ex->group * a->bpg);
}

void mb_trace_alloc(struct rr_alloc *a, const struct rr_alloc_req *req, const struct mb_ac *ac,
		    const struct rr_extent *out, int exact)
{
	unsigned int k = req_kflags(req);
	struct mb_ext r = ac->b_ex;
	char flags[256];

	if (ac->hints & MB_HINT_TRY_GOAL)
		k |= 0x0200;
	if (ac->hints & MB_HINT_FIRST)
		k |= 0x0008;
	if (ac->hints & MB_HINT_STREAM)
		k |= 0x0800;
	if (ac->hints & MB_HINT_GROUP_ALLOC)
		k |= 0x0080;
	if (exact)
		k |= 0x0040;
	kflags_text(k, flags, sizeof(flags));
	/*
	 * The kernel's result is what the search found (ac_f_ex): with a
	 * preallocation made, the whole window; otherwise the request's own
	 * blocks.
	 */
	if (r.len <= out->len) {
		ext_of(a, out->pblk, &r);
		r.len = out->len;
		r.logical = ac->o_ex.logical;
	} else if (!(ac->hints & MB_HINT_GROUP_ALLOC)) {
		r.logical = ac->o_ex.logical - (out->pblk - mb_block_of(a, &ac->b_ex));
	} else {
		r.logical = ac->o_ex.logical;
	}
	emit(a, "ext4_mballoc_alloc",
	     "inode %lu orig %u/%d/%u@%u goal %u/%d/%u@%u result %u/%d/%u@%u blks %u grps %u cr %s flags %s "
	     "tail 0 broken 0",
	     (unsigned long)ac->ino, ac->o_ex.group, (int)ac->o_ex.start, ac->o_ex.len, (uint32_t)ac->o_ex.logical,
	     ac->g_ex.group, (int)ac->g_ex.start, ac->g_ex.len, (uint32_t)ac->g_ex.logical, r.group,
	     (int)r.start, r.len, (uint32_t)r.logical, ac->found, ac->groups_scanned,
	     cr_name(ac), flags);
}

void mb_trace_prealloc(struct rr_alloc *a, const struct rr_alloc_req *req, uint32_t len,
		       const struct rr_extent *out)
{
	struct mb_ext o = { 0 }, r = { 0 };

	if (req->goal >= a->first_data_block && req->goal < ext2fs_blocks_count(a->fs->super))
		ext_of(a, req->goal, &o);
	ext_of(a, out->pblk, &r);
	emit(a, "ext4_mballoc_prealloc", "inode %lu orig %u/%d/%u@%u result %u/%d/%u@%u", (unsigned long)req->ino,
	     o.group, (int)o.start, len, (uint32_t)req->lblk, r.group, (int)r.start, out->len,
	     (uint32_t)req->lblk);
}

void mb_trace_discard(struct rr_alloc *a, ext2_ino_t ino, const struct mb_pa *gone)
{
	unsigned int n = 0;

	for (; gone; gone = gone->inext)
		n++;
	emit(a, "ext4_discard_preallocations", "ino %lu len: %u", (unsigned long)ino, n);
}

/*
 * libext2fs frees an extent a block at a time (ext2fs_punch): a free that
 * continues the one before it joins its line, as the kernel frees the
 * extent in one ext4_free_blocks.
 */
void mb_trace_free(struct rr_alloc *a, uint64_t blk, uint64_t len)
{
	struct mb_trace *tr = &a->trace;

	pthread_mutex_lock(&tr->lock);
	if (tr->free_len && tr->free_blk + tr->free_len == blk) {
		tr->free_len += len;
	} else {
		put_free_locked(tr);
		head(tr, "ext4_free_blocks", tr->free_head, sizeof(tr->free_head));
		tr->free_blk = blk;
		tr->free_len = len;
	}
	pthread_mutex_unlock(&tr->lock);
}

void mb_trace_commit(struct rr_alloc *a, int end)
{
	unsigned int tid;

	pthread_mutex_lock(&a->trace.lock);
	tid = end ? a->trace.commits : ++a->trace.commits;
	pthread_mutex_unlock(&a->trace.lock);
	if (end)
		emit(a, "jbd2_end_commit", "transaction %u sync 0 head %u", tid, tid);
	else
		emit(a, "jbd2_start_commit", "transaction %u sync 0", tid);
}

/* Close f, saying so if a line was lost: 0 or -errno. */
static int close_trace_file(FILE *f, const char *name)
{
	int bad;

	if (!f)
		return 0;
	bad = ferror(f);
	if (fclose(f) || bad) {
		int err = errno ? errno : EIO;

		mb_log(LOG_ERR, "alloc_trace=%s: writing failed: %s (lines are missing)", name, strerror(err));
		return -err;
	}
	return 0;
}

int rr_alloc_set_trace(struct rr_alloc *a, FILE *f, const char *name, unsigned int major, unsigned int minor)
{
	struct mb_trace *tr = &a->trace;
	char old_name[sizeof(tr->name)];
	FILE *old;

	if (f)
		setvbuf(f, NULL, _IOFBF, MB_TRACE_BUF);
	pthread_mutex_lock(&tr->lock);
	put_free_locked(tr);
	old = tr->f;
	memcpy(old_name, tr->name, sizeof(old_name));
	tr->f = f;
	snprintf(tr->name, sizeof(tr->name), "%s", f && name ? name : "");
	tr->major = major;
	tr->minor = minor;
	atomic_store(&a->tracing, f != NULL);
	pthread_mutex_unlock(&tr->lock);
	/* No line can be on its way into old now: emit writes only under the lock, to tr->f. */
	return close_trace_file(old, old_name);
}

void rr_alloc_trace_name(struct rr_alloc *a, char *buf, size_t len)
{
	pthread_mutex_lock(&a->trace.lock);
	snprintf(buf, len, "%s", a->trace.name);
	pthread_mutex_unlock(&a->trace.lock);
}

/* At each commit's end, so that a reader of the file sees every decision up to the commit. */
void mb_trace_flush(struct rr_alloc *a)
{
	pthread_mutex_lock(&a->trace.lock);
	put_free_locked(&a->trace);
	if (a->trace.f)
		fflush(a->trace.f);
	pthread_mutex_unlock(&a->trace.lock);
}

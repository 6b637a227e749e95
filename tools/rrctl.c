// SPDX-License-Identifier: GPL-2.0
/*
 * rrctl: the running allocator of an rrfuse mount, sysctl-style.
 *
 *   rrctl MNT                 every tunable, "KEY = VALUE" a line
 *   rrctl MNT KEY ...         those tunables
 *   rrctl MNT KEY=VALUE ...   set them (printed back as the daemon keeps them)
 *   rrctl MNT -g              the groups, as /proc/fs/ext4/DEV/mb_groups
 *   rrctl MNT -s              the statistics, as /proc/fs/ext4/DEV/mb_stats
 *   rrctl MNT sync            commit everything now; returns when it is durable
 *
 * Everything goes through ioctls on MNT (include/rrfuse/rrctl_wire.h); the
 * daemon validates, rrctl only formats (lib/mb_format.c).  Exit
 * status: 0, 1 if anything failed (each failure is reported and the other
 * arguments are still done, as sysctl does), 2 for a usage error.
 */
#include "mb_format.h"
#include "rrfuse/fuse_statx.h"
#include "rrfuse/rrctl_wire.h"
#include "tool.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fuse.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

static const char *mnt;

/* The keys: every line of rrfuse/tunables.def, then of rrfuse/keys.def (tests/mount/test_rrctl.py compares). */
static const char *const keys[] = {
#define MB_TUNABLE(name, kind, max, def) #name,
#include "rrfuse/tunables.def"
#undef MB_TUNABLE
#define RR_KEY_ALIAS(name, of) #name,
#define RR_KEY_POLICY(name) #name,
#define RR_KEY_POLICY_DIR(name) #name,
#define RR_KEY_MOUNT(name) #name,
#include "rrfuse/keys.def"
#undef RR_KEY_ALIAS
#undef RR_KEY_POLICY
#undef RR_KEY_POLICY_DIR
#undef RR_KEY_MOUNT
};

/* The keys, comma-separated, wrapped under KEY's text (column 17 to 80). */
static void usage_keys(FILE *f)
{
	size_t i, n = sizeof(keys) / sizeof(keys[0]), col = 0;

	for (i = 0; i < n; i++) {
		const char *sep = i + 1 < n ? "," : "";
		size_t w = 1 + strlen(keys[i]) + strlen(sep);

		if (col && col + w > 80 - 17) {
			fputc('\n', f);
			col = 0;
		}
		fprintf(f, "%*s%s%s", col ? 1 : 17, "", keys[i], sep);
		col += w;
	}
	fputc('\n', f);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: rrctl MOUNTPOINT [KEY | KEY=VALUE ...]\n"
		   "       rrctl MOUNTPOINT -g | -s | sync\n\n"
		   "Show or change the allocator of a mounted rrfuse filesystem, or commit it.\n\n"
		   "    (no KEY)     list every tunable, one KEY = VALUE a line\n"
		   "    KEY          show KEY:\n");
	usage_keys(f);
	fprintf(f, "    KEY=VALUE    set KEY (the mount's owner or root only)\n"
		   "    -g           the block groups, as the kernel's mb_groups\n"
		   "    -s           the allocator statistics, as the kernel's mb_stats\n"
		   "    sync         write everything out now (the kernel's dirty pages, delayed\n"
		   "                 allocation, the metadata as one journal transaction, a device\n"
		   "                 flush) and return when it is durable: sync(1) and syncfs(2)\n"
		   "                 do not reach a FUSE daemon\n"
		   "    -h, --help   this help\n"
		   "    -V, --version\n");
}

/* The ioctl; a message for the failures every command shares.  0 or -1. */
static int ctl(int fd, unsigned long cmd, void *arg, const char *what)
{
	if (!ioctl(fd, cmd, arg))
		return 0;
	switch (errno) {
	case ENOTTY:
	case ENOSYS:
		fprintf(stderr, "rrctl: %s: not an rrfuse mount point (or its rrfuse is too old for rrctl)\n",
			mnt);
		break;
	case EPERM:
		fprintf(stderr, "rrctl: %s: permission denied: only the mount's owner or root may change %s\n",
			mnt, what);
		break;
	case EROFS:
		fprintf(stderr, "rrctl: %s: mounted read-only: no allocator is running\n", mnt);
		break;
	case EINVAL:
		fprintf(stderr, "rrctl: %s: the daemon refused the command (another rrctl version?)\n", mnt);
		break;
	default:
		fprintf(stderr, "rrctl: %s: %s: %s\n", mnt, what, strerror(errno));
	}
	return -1;
}

static void tunable_init(struct rrctl_tunable *t)
{
	memset(t, 0, sizeof(*t));
	t->version = RRCTL_VERSION;
}

/* Show one tunable by name; 0 or -1. */
static int show(int fd, const char *name)
{
	struct rrctl_tunable t;

	tunable_init(&t);
	if (strlen(name) >= sizeof(t.name)) {
		fprintf(stderr, "rrctl: unknown allocator tunable '%s'\n", name);
		return -1;
	}
	strcpy(t.name, name);
	if (ctl(fd, RRCTL_GET, &t, name))
		return -1;
	if (t.result) {
		fprintf(stderr, "rrctl: %s\n", t.err[0] ? t.err : strerror(t.result));
		return -1;
	}
	printf("%s = %s\n", name, t.value);
	return 0;
}

/* Set name=value, then show what the daemon kept (clamped, rounded); 0 or -1. */
static int set_tunable(int fd, const char *arg)
{
	const char *eq = strchr(arg, '=');
	struct rrctl_tunable t;
	size_t n = (size_t)(eq - arg);

	tunable_init(&t);
	if (n >= sizeof(t.name)) {
		fprintf(stderr, "rrctl: unknown allocator tunable '%.*s'\n", (int)n, arg);
		return -1;
	}
	if (strlen(eq + 1) >= sizeof(t.value)) {
		fprintf(stderr, "rrctl: bad value for %.*s=: too long (%zu bytes at most)\n", (int)n, arg,
			sizeof(t.value) - 1);
		return -1;
	}
	memcpy(t.name, arg, n);
	strcpy(t.value, eq + 1);
	/* The daemon opens the file from its own working directory, "/" once in the background. */
	if (!strcmp(t.name, "alloc_trace") && eq[1] && eq[1] != '/') {
		char cwd[PATH_MAX];

		if (!getcwd(cwd, sizeof(cwd)) ||
		    (size_t)snprintf(t.value, sizeof(t.value), "%s/%s", cwd, eq + 1) >= sizeof(t.value)) {
			fprintf(stderr, "rrctl: bad value for alloc_trace=: its absolute path is too long "
				"(%zu bytes at most)\n", sizeof(t.value) - 1);
			return -1;
		}
	}
	if (ctl(fd, RRCTL_SET, &t, "allocator tunables"))
		return -1;
	if (t.result) {
		fprintf(stderr, "rrctl: %s\n", t.err[0] ? t.err : strerror(t.result));
		return -1;
	}
	return show(fd, t.name);
}

static int list_tunables(int fd)
{
	struct rrctl_tunable t;
	uint32_t i;

	for (i = 0;; i++) {
		tunable_init(&t);
		t.index = i;
		if (ctl(fd, RRCTL_GET, &t, "tunables"))
			return -1;
		if (t.result == ENOENT)
			return 0;
		if (t.result) {
			fprintf(stderr, "rrctl: %s\n", t.err[0] ? t.err : strerror(t.result));
			return -1;
		}
		printf("%s = %s\n", t.name, t.value);
	}
}

/* A page of groups at a time, so any number of groups fits the fixed-size ioctl. */
static int groups(int fd)
{
	struct rrctl_groups *g = malloc(sizeof(*g));
	uint32_t start = 0, i;
	int ret = 0;

	if (!g) {
		perror("rrctl");
		return -1;
	}
	mb_format_groups_header(stdout);
	for (;;) {
		memset(g, 0, sizeof(*g));
		g->version = RRCTL_VERSION;
		g->start = start;
		if (ctl(fd, RRCTL_GROUPS, g, "groups")) {
			ret = -1;
			break;
		}
		for (i = 0; i < g->count && i < RRCTL_GROUPS_PAGE; i++)
			mb_format_group(stdout, &g->g[i], g->blocksize_bits);
		if (g->result) {
			/* As the kernel's "#N: I/O error" line, then stop. */
			printf("#%-5u: %s\n", start + g->count, strerror(g->result));
			ret = -1;
			break;
		}
		start += g->count;
		if (!g->count || start >= g->ngroups)
			break;
	}
	free(g);
	return ret;
}

/* The FUSE opcodes (linux/fuse.h) that requests: names. */
static const char *const req_names[RRCTL_NREQ] = {
	[FUSE_LOOKUP] = "lookup", [FUSE_FORGET] = "forget", [FUSE_GETATTR] = "getattr",
	[FUSE_SETATTR] = "setattr", [FUSE_READLINK] = "readlink", [FUSE_SYMLINK] = "symlink",
	[FUSE_MKNOD] = "mknod", [FUSE_MKDIR] = "mkdir", [FUSE_UNLINK] = "unlink", [FUSE_RMDIR] = "rmdir",
	[FUSE_RENAME] = "rename", [FUSE_LINK] = "link", [FUSE_OPEN] = "open", [FUSE_READ] = "read",
	[FUSE_WRITE] = "write", [FUSE_STATFS] = "statfs", [FUSE_RELEASE] = "release",
	[FUSE_FSYNC] = "fsync", [FUSE_SETXATTR] = "setxattr", [FUSE_GETXATTR] = "getxattr",
	[FUSE_LISTXATTR] = "listxattr", [FUSE_REMOVEXATTR] = "removexattr", [FUSE_FLUSH] = "flush",
	[FUSE_INIT] = "init", [FUSE_OPENDIR] = "opendir", [FUSE_READDIR] = "readdir",
	[FUSE_RELEASEDIR] = "releasedir", [FUSE_FSYNCDIR] = "fsyncdir", [FUSE_GETLK] = "getlk",
	[FUSE_SETLK] = "setlk", [FUSE_SETLKW] = "setlkw", [FUSE_ACCESS] = "access",
	[FUSE_CREATE] = "create", [FUSE_INTERRUPT] = "interrupt", [FUSE_BMAP] = "bmap",
	[FUSE_DESTROY] = "destroy", [FUSE_IOCTL] = "ioctl", [FUSE_POLL] = "poll",
	[FUSE_NOTIFY_REPLY] = "notify_reply", [FUSE_BATCH_FORGET] = "batch_forget",
	[FUSE_FALLOCATE] = "fallocate", [FUSE_READDIRPLUS] = "readdirplus", [FUSE_RENAME2] = "rename2",
	[FUSE_LSEEK] = "lseek", [FUSE_COPY_FILE_RANGE] = "copy_file_range", [FUSE_SYNCFS] = "syncfs",
	[FUSE_TMPFILE] = "tmpfile", [RR_FUSE_STATX] = "statx", [RRCTL_NREQ - 1] = "other",
};

/* "requests:" and the count of each opcode seen, in opcode order. */
static void print_requests(const struct rrctl_stats *s)
{
	unsigned long long total = 0;
	size_t i;

	for (i = 0; i < RRCTL_NREQ; i++)
		total += s->requests[i];
	printf("requests: %llu", total);
	for (i = 0; i < RRCTL_NREQ; i++)
		if (s->requests[i])
			printf(", %s %llu", req_names[i] ? req_names[i] : "other",
			       (unsigned long long)s->requests[i]);
	printf("\n");
	/* The ring carries requests once every queue has an entry waiting (fs/fuse/dev_uring.c). */
	if (s->ring_wanted)
		printf("transport: io_uring, %u of %u entries on %u queues; %llu requests over io_uring, "
		       "%llu over /dev/fuse\n", s->ring_entries, s->ring_wanted, s->ring_queues,
		       (unsigned long long)s->ring_requests, total - s->ring_requests);
	else
		printf("transport: /dev/fuse; %llu requests over /dev/fuse\n", total);
	/* What the daemon spent on each, beside the kernel's round trip: the mean, in microseconds. */
	printf("request time:");
	for (i = 0, total = 0; i < RRCTL_NREQ; i++)
		if (s->requests[i] && s->request_ns[i])
			printf("%s %s %.1f us", total++ ? "," : "", req_names[i] ? req_names[i] : "other",
			       (double)s->request_ns[i] / 1e3 / (double)s->requests[i]);
	printf("\n");
}

/*
 * syncfs(2) first: the kernel writes its dirty pages back to the daemon
 * and waits for the replies (on 6.18 a page's writeback ends with its
 * WRITE's reply); then the daemon commits (RRCTL_SYNC).
 */
static int do_sync(int fd)
{
	struct rrctl_sync y;

	if (syncfs(fd)) {
		fprintf(stderr, "rrctl: %s: syncfs: %s\n", mnt, strerror(errno));
		return -1;
	}
	memset(&y, 0, sizeof(y));
	y.version = RRCTL_VERSION;
	if (ctl(fd, RRCTL_SYNC, &y, "sync"))
		return -1;
	if (y.result) {
		fprintf(stderr, "rrctl: %s: %s\n", mnt, y.err[0] ? y.err : strerror(y.result));
		return -1;
	}
	return 0;
}

static int print_stats(int fd)
{
	struct rrctl_stats s;

	memset(&s, 0, sizeof(s));
	s.version = RRCTL_VERSION;
	if (ctl(fd, RRCTL_STATS, &s, "statistics"))
		return -1;
	mb_format_stats(stdout, &s);
	mb_format_refusals(stdout, &s);
	printf("metadata cache: %llu blocks (%llu dirty) of %llu; %llu hits, %llu misses; "
	       "%llu write-back writes; %llu dropped for file data, %llu forgotten when freed\n",
	       (unsigned long long)s.cache_blocks, (unsigned long long)s.cache_dirty,
	       (unsigned long long)s.cache_max, (unsigned long long)s.cache_hits,
	       (unsigned long long)s.cache_misses, (unsigned long long)s.cache_writes,
	       (unsigned long long)s.cache_dropped, (unsigned long long)s.cache_forgotten);
	printf("device: %llu metadata reads, %llu metadata writes, %llu metadata blocks written, "
	       "%llu data reads (%llu spliced), %llu data writes (%llu runs), %llu writebacks started early, "
	       "%llu flushes\n",
	       (unsigned long long)s.io_meta_reads, (unsigned long long)s.io_meta_writes,
	       (unsigned long long)s.io_meta_blocks,
	       (unsigned long long)s.io_data_reads, (unsigned long long)s.io_data_spliced,
	       (unsigned long long)s.io_data_writes, (unsigned long long)s.io_data_runs,
	       (unsigned long long)s.io_wb_starts, (unsigned long long)s.io_flushes);
	printf("delayed data: %llu blocks held in %llu files, at most %llu; writeback from %llu MiB, "
	       "writers write their own from %llu MiB\n",
	       (unsigned long long)s.delayed_blocks, (unsigned long long)s.delayed_files,
	       (unsigned long long)s.delayed_peak, (unsigned long long)(s.dirty_background_bytes >> 20),
	       (unsigned long long)(s.dirty_limit_bytes >> 20));
	print_requests(&s);
	return 0;
}

int main(int argc, char *argv[])
{
	int fd, i, ret = 0;

	if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))
		return tool_answer('h', "rrctl", usage);
	if (argc >= 2 && (!strcmp(argv[1], "-V") || !strcmp(argv[1], "--version")))
		return tool_answer('V', "rrctl", usage);
	if (argc < 2 || argv[1][0] == '-')
		return tool_answer('?', "rrctl", usage);
	mnt = argv[1];
	for (i = 2; i < argc; i++)
		if (argv[i][0] == '-' && (strcmp(argv[i], "-g") && strcmp(argv[i], "-s"))) {
			fprintf(stderr, "rrctl: unknown option '%s'\n", argv[i]);
			usage(stderr);
			return 2;
		}
	/* -g, -s and sync stand alone: their output is a table (or nothing), not KEY = VALUE lines. */
	for (i = 2; i < argc && argc > 3; i++)
		if (!strcmp(argv[i], "-g") || !strcmp(argv[i], "-s") || !strcmp(argv[i], "sync")) {
			usage(stderr);
			return 2;
		}
	fd = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "rrctl: %s: %s\n", mnt, strerror(errno));
		return 1;
	}
	if (argc == 2)
		ret = list_tunables(fd);
	else if (!strcmp(argv[2], "-g"))
		ret = groups(fd);
	else if (!strcmp(argv[2], "-s"))
		ret = print_stats(fd);
	else if (!strcmp(argv[2], "sync"))
		ret = do_sync(fd);
	else
		for (i = 2; i < argc; i++)
			if ((strchr(argv[i], '=') ? set_tunable(fd, argv[i]) : show(fd, argv[i])) < 0)
				ret = -1;
	close(fd);
	if (fflush(stdout)) {
		perror("rrctl: stdout");
		ret = -1;
	}
	return ret ? 1 : 0;
}

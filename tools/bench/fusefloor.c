// SPDX-License-Identifier: GPL-2.0
/*
 * fusefloor: the fastest a FUSE server can be on this machine, for rrbench.
 *
 * A low-level libfuse server that keeps its names and attributes in memory
 * and throws file data away.  It mounts with what rrfuse asks of the kernel
 * (default_permissions, the writeback cache, parallel directory operations,
 * POSIX ACLs, one-second entry and attribute timeouts, the same thread
 * pool), so the kernel sends it the same requests it sends rrfuse; each one
 * costs it a hash lookup.  A metadata workload's rate on it is the ceiling
 * of any FUSE server here: what is left is the kernel's and the machine's
 * cost of a round trip (rrbench W5 with -s floor).
 *
 * Usage as rrbench mounts a daemon: fusefloor IMAGE MOUNTPOINT [-f] [-o ...];
 * "-o no_writeback_cache" on its own turns the writeback cache off, and
 * "-o io_uring" carries the requests over io_uring (rrfuse's lib/uring.c),
 * as they do for rrfuse, and "-o counts=FILE" writes how many requests of
 * each opcode came, "OPCODE COUNT" a line, to FILE at the end (what rrctl -s
 * counts for rrfuse).
 * IMAGE is not opened: it is taken so that the command line is rrfuse's.
 * Not a file system to keep anything in.
 */
#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include "uring.h"

#include <errno.h>
#include <linux/fuse.h>
#include <stdatomic.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define FLOOR_TIMEOUT 1.0	/* entry and attribute timeouts, as rrfuse's RR_TIMEOUT */
#define FLOOR_BUCKETS (1u << 16)	/* name hash chains; the node count is not bounded */
#define FLOOR_BLOCK 4096

struct node {
	fuse_ino_t parent;
	char *name;		/* NULL: the slot is free */
	uint32_t next;		/* next node in the name's hash chain, 0 ends it */
	uint64_t nlookup;
	struct stat st;
};

/* All of it protected by floor_lock: a ceiling needs no finer locking. */
static pthread_mutex_t floor_lock = PTHREAD_MUTEX_INITIALIZER;
static struct node *nodes;	/* by inode number; 0 unused, 1 the root */
static size_t nnodes, cap;
static uint32_t buckets[FLOOR_BUCKETS];
static int no_writeback;	/* -o no_writeback_cache, as rrfuse's */
/* Requests by opcode (the last counts the rest), written to -o counts=FILE at the end. */
#define FLOOR_NOPS 64
static _Atomic unsigned long long op_count[FLOOR_NOPS];

static uint32_t name_hash(fuse_ino_t parent, const char *name)
{
	uint64_t h = 1469598103934665603ull ^ parent;

	while (*name)
		h = (h ^ (unsigned char)*name++) * 1099511628211ull;
	return (uint32_t)(h ^ h >> 32) & (FLOOR_BUCKETS - 1);
}

static fuse_ino_t find(fuse_ino_t parent, const char *name)
{
	for (uint32_t i = buckets[name_hash(parent, name)]; i; i = nodes[i].next)
		if (nodes[i].parent == parent && !strcmp(nodes[i].name, name))
			return i;
	return 0;
}

static void unhash(fuse_ino_t ino)
{
	uint32_t *p = &buckets[name_hash(nodes[ino].parent, nodes[ino].name)];

	while (*p != ino)
		p = &nodes[*p].next;
	*p = nodes[ino].next;
	free(nodes[ino].name);
	nodes[ino].name = NULL;
}

/* A new node, named and hashed; 0 without memory (or for the placeholder). */
static fuse_ino_t add(fuse_ino_t parent, const char *name, mode_t mode, const struct fuse_ctx *ctx)
{
	struct timespec now;
	struct node *n;
	uint32_t h;

	if (nnodes == cap) {
		size_t ncap = cap ? 2 * cap : 1024;
		struct node *nn = realloc(nodes, ncap * sizeof(*nn));

		if (!nn || ncap > UINT32_MAX)
			return 0;
		nodes = nn;
		cap = ncap;
	}
	n = &nodes[nnodes];
	memset(n, 0, sizeof(*n));
	if (!(n->name = strdup(name)))
		return 0;
	clock_gettime(CLOCK_REALTIME_COARSE, &now);
	n->parent = parent;
	n->st.st_ino = nnodes;
	n->st.st_mode = mode;
	n->st.st_nlink = S_ISDIR(mode) ? 2 : 1;
	n->st.st_uid = ctx ? ctx->uid : getuid();
	n->st.st_gid = ctx ? ctx->gid : getgid();
	n->st.st_blksize = FLOOR_BLOCK;
	n->st.st_atim = n->st.st_mtim = n->st.st_ctim = now;
	h = name_hash(parent, name);
	n->next = buckets[h];
	buckets[h] = (uint32_t)nnodes;
	return nnodes++;
}

/* The kernel's reference to ino that a reply of it makes (FORGET gives it back). */
static struct fuse_entry_param lookup_ref(fuse_ino_t ino)
{
	struct fuse_entry_param e = {
		.ino = ino, .generation = 1, .attr_timeout = FLOOR_TIMEOUT,
		.entry_timeout = FLOOR_TIMEOUT, .attr = nodes[ino].st,
	};

	nodes[ino].nlookup++;
	return e;
}

static int live(fuse_ino_t ino)
{
	return ino && ino < nnodes && nodes[ino].st.st_mode;
}

static void floor_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	if (!no_writeback && (conn->capable & FUSE_CAP_WRITEBACK_CACHE))
		conn->want |= FUSE_CAP_WRITEBACK_CACHE;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	if ((conn->capable & FUSE_CAP_POSIX_ACL) && (conn->capable & FUSE_CAP_DONT_MASK))
		conn->want |= FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK;
	conn->want &= ~(unsigned)(FUSE_CAP_ATOMIC_O_TRUNC | FUSE_CAP_SPLICE_READ);
	conn->max_write = 1 << 20;
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	conn->time_gran = 1;
}

static void floor_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param neg = { .ino = 0, .entry_timeout = FLOOR_TIMEOUT };	/* none */
	fuse_ino_t ino;

	pthread_mutex_lock(&floor_lock);
	if ((ino = find(parent, name)))
		neg = lookup_ref(ino);
	fuse_reply_entry(req, &neg);
	pthread_mutex_unlock(&floor_lock);
}

static void forget_one(fuse_ino_t ino, uint64_t n)
{
	if (!live(ino))
		return;
	nodes[ino].nlookup -= n < nodes[ino].nlookup ? n : nodes[ino].nlookup;
	if (!nodes[ino].nlookup && !nodes[ino].st.st_nlink && !nodes[ino].name)
		nodes[ino].st.st_mode = 0;
}

static void floor_forget(fuse_req_t req, fuse_ino_t ino, uint64_t n)
{
	pthread_mutex_lock(&floor_lock);
	forget_one(ino, n);
	pthread_mutex_unlock(&floor_lock);
	fuse_reply_none(req);
}

static void floor_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f)
{
	pthread_mutex_lock(&floor_lock);
	for (size_t i = 0; i < count; i++)
		forget_one(f[i].ino, f[i].nlookup);
	pthread_mutex_unlock(&floor_lock);
	fuse_reply_none(req);
}

static void set_time(struct timespec *t, const struct timespec *to, int now)
{
	if (now)
		clock_gettime(CLOCK_REALTIME_COARSE, t);
	else
		*t = *to;
}

static void floor_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *a, int set,
			  struct fuse_file_info *fi)
{
	struct stat *st;
	struct stat out;

	(void)fi;
	pthread_mutex_lock(&floor_lock);
	if (!live(ino)) {
		pthread_mutex_unlock(&floor_lock);
		fuse_reply_err(req, ENOENT);
		return;
	}
	st = &nodes[ino].st;
	if (set & FUSE_SET_ATTR_MODE)
		st->st_mode = (st->st_mode & S_IFMT) | (a->st_mode & 07777);
	if (set & FUSE_SET_ATTR_UID)
		st->st_uid = a->st_uid;
	if (set & FUSE_SET_ATTR_GID)
		st->st_gid = a->st_gid;
	if (set & FUSE_SET_ATTR_SIZE)
		st->st_size = a->st_size;
	if (set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW))
		set_time(&st->st_atim, &a->st_atim, set & FUSE_SET_ATTR_ATIME_NOW);
	if (set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW))
		set_time(&st->st_mtim, &a->st_mtim, set & FUSE_SET_ATTR_MTIME_NOW);
	if (set & FUSE_SET_ATTR_CTIME)
		st->st_ctim = a->st_ctim;
	out = *st;
	pthread_mutex_unlock(&floor_lock);
	fuse_reply_attr(req, &out, FLOOR_TIMEOUT);
}

static void floor_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	floor_setattr(req, ino, NULL, 0, fi);
}

static void make(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		 struct fuse_file_info *fi)
{
	struct fuse_entry_param e;
	fuse_ino_t ino;

	pthread_mutex_lock(&floor_lock);
	if (find(parent, name)) {
		pthread_mutex_unlock(&floor_lock);
		fuse_reply_err(req, EEXIST);
		return;
	}
	if (!(ino = add(parent, name, mode, fuse_req_ctx(req)))) {
		pthread_mutex_unlock(&floor_lock);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (S_ISDIR(mode))
		nodes[parent].st.st_nlink++;
	clock_gettime(CLOCK_REALTIME_COARSE, &nodes[parent].st.st_mtim);
	nodes[parent].st.st_ctim = nodes[parent].st.st_mtim;
	e = lookup_ref(ino);
	if (fi)
		fuse_reply_create(req, &e, fi);
	else
		fuse_reply_entry(req, &e);
	pthread_mutex_unlock(&floor_lock);
}

static void floor_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	make(req, parent, name, S_IFDIR | (mode & 07777), NULL);
}

static void floor_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
			 struct fuse_file_info *fi)
{
	make(req, parent, name, S_IFREG | (mode & 07777), fi);
}

static void floor_remove(fuse_req_t req, fuse_ino_t parent, const char *name, int dir)
{
	fuse_ino_t ino;
	int err = 0;

	pthread_mutex_lock(&floor_lock);
	if (!(ino = find(parent, name)))
		err = ENOENT;
	else if (dir != !!S_ISDIR(nodes[ino].st.st_mode))
		err = dir ? ENOTDIR : EISDIR;
	else if (dir && nodes[ino].st.st_nlink > 2)
		err = ENOTEMPTY;
	if (!err) {
		unhash(ino);
		nodes[ino].st.st_nlink = 0;
		if (dir)
			nodes[parent].st.st_nlink--;
		clock_gettime(CLOCK_REALTIME_COARSE, &nodes[parent].st.st_mtim);
		nodes[parent].st.st_ctim = nodes[parent].st.st_mtim;
		forget_one(ino, 0);
	}
	pthread_mutex_unlock(&floor_lock);
	fuse_reply_err(req, err);
}

static void floor_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	floor_remove(req, parent, name, 0);
}

static void floor_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	floor_remove(req, parent, name, 1);
}

static void floor_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	fuse_reply_open(req, fi);
}

static void floor_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	static const char zeros[1 << 16];
	off_t end;

	(void)fi;
	pthread_mutex_lock(&floor_lock);
	end = live(ino) ? nodes[ino].st.st_size : 0;
	pthread_mutex_unlock(&floor_lock);
	if (off >= end)
		size = 0;
	else if ((off_t)size > end - off)
		size = (size_t)(end - off);
	fuse_reply_buf(req, zeros, size < sizeof(zeros) ? size : sizeof(zeros));
}

static void floor_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
			struct fuse_file_info *fi)
{
	(void)buf;
	(void)fi;
	pthread_mutex_lock(&floor_lock);
	if (live(ino) && off + (off_t)size > nodes[ino].st.st_size) {
		nodes[ino].st.st_size = off + (off_t)size;
		nodes[ino].st.st_blocks = (nodes[ino].st.st_size + 511) / 512;
	}
	pthread_mutex_unlock(&floor_lock);
	fuse_reply_write(req, size);
}

static void floor_ok(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	fuse_reply_err(req, 0);
}

static void floor_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	(void)datasync;
	floor_ok(req, ino, fi);
}

static void floor_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			  struct fuse_file_info *fi)
{
	char *buf = malloc(size);
	size_t used = 0;
	struct stat st;

	(void)fi;
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	/* The offset of an entry is the next inode number to look at; 1 and 2 are . and .. */
	pthread_mutex_lock(&floor_lock);
	for (off_t i = off; (size_t)i < nnodes + 2; i++) {
		const char *name;
		size_t len;

		memset(&st, 0, sizeof(st));
		if (i < 2) {
			name = i ? ".." : ".";
			st.st_mode = S_IFDIR;
			st.st_ino = i ? (ino == FUSE_ROOT_ID ? ino : nodes[ino].parent) : ino;
		} else {
			fuse_ino_t c = (fuse_ino_t)i - 2;

			if (!c || !nodes[c].name || nodes[c].parent != ino || c == FUSE_ROOT_ID)
				continue;
			name = nodes[c].name;
			st.st_mode = nodes[c].st.st_mode;
			st.st_ino = c;
		}
		len = fuse_add_direntry(req, buf + used, size - used, name, &st, i + 1);
		if (len > size - used)
			break;
		used += len;
	}
	pthread_mutex_unlock(&floor_lock);
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void floor_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs s = {
		.f_bsize = FLOOR_BLOCK, .f_frsize = FLOOR_BLOCK, .f_blocks = 1u << 30,
		.f_bfree = 1u << 30, .f_bavail = 1u << 30, .f_files = 1u << 30,
		.f_ffree = 1u << 30, .f_favail = 1u << 30, .f_namemax = 255,
	};

	(void)ino;
	fuse_reply_statfs(req, &s);
}

static void floor_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	(void)ino;
	(void)name;
	(void)size;
	fuse_reply_err(req, ENODATA);
}

static void floor_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	(void)ino;
	if (size)
		fuse_reply_buf(req, NULL, 0);
	else
		fuse_reply_xattr(req, 0);
}

static const struct fuse_lowlevel_ops floor_ops = {
	.init = floor_init, .lookup = floor_lookup, .forget = floor_forget,
	.forget_multi = floor_forget_multi, .getattr = floor_getattr, .setattr = floor_setattr,
	.mkdir = floor_mkdir, .unlink = floor_unlink, .rmdir = floor_rmdir, .create = floor_create,
	.open = floor_open, .read = floor_read, .write = floor_write,
	.release = floor_ok, .fsync = floor_fsync, .opendir = floor_open, .readdir = floor_readdir,
	.releasedir = floor_ok, .fsyncdir = floor_fsync, .statfs = floor_statfs,
	.getxattr = floor_getxattr, .listxattr = floor_listxattr,
};

static void count_request(const void *buf, size_t len)
{
	const struct fuse_in_header *h = buf;

	if (len >= sizeof(*h))
		atomic_fetch_add_explicit(&op_count[h->opcode < FLOOR_NOPS ? h->opcode : FLOOR_NOPS - 1], 1,
					  memory_order_relaxed);
}

/* A ring request: counted, then libfuse's. */
static int floor_take(const void *req, size_t len)
{
	count_request(req, len);
	return 0;
}

static void write_counts(const char *path)
{
	FILE *f = fopen(path, "w");

	if (!f) {
		perror(path);
		return;
	}
	for (int i = 0; i < FLOOR_NOPS; i++)
		if (op_count[i])
			fprintf(f, "%d %llu\n", i, (unsigned long long)op_count[i]);
	fclose(f);
}

/* /dev/fuse as libfuse would use it, but for the ring's INIT offer and replies (lib/uring.c). */
static ssize_t floor_dev_read(int fd, void *buf, size_t len, void *userdata)
{
	ssize_t n = read(fd, buf, len);

	(void)userdata;
	if (n > 0) {
		count_request(buf, (size_t)n);
		uring_note_init(buf, (size_t)n);
	}
	return n;
}

static ssize_t floor_dev_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	(void)userdata;
	return uring_writev(fd, iov, count);
}

static const struct fuse_custom_io floor_io = { .read = floor_dev_read, .writev = floor_dev_writev };

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_loop_config *cfg;
	struct fuse_session *se;
	const char *mnt = NULL, *counts = NULL;
	int positional = 0, r = 1, ring = 0;

	fuse_opt_add_arg(&args, argv[0]);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-f"))
			continue;	/* always in the foreground */
		if (!strcmp(argv[i], "-o") && i + 1 < argc && !strcmp(argv[i + 1], "no_writeback_cache")) {
			no_writeback = 1;
			i++;
		} else if (!strcmp(argv[i], "-o") && i + 1 < argc && !strcmp(argv[i + 1], "io_uring")) {
			ring = 1;
			i++;
		} else if (!strcmp(argv[i], "-o") && i + 1 < argc && !strncmp(argv[i + 1], "counts=", 7)) {
			counts = argv[++i] + 7;
		} else if (!strcmp(argv[i], "-o") && i + 1 < argc) {
			fuse_opt_add_arg(&args, "-o");
			fuse_opt_add_arg(&args, argv[++i]);
		} else if (argv[i][0] != '-' && positional < 2) {
			if (positional++)
				mnt = argv[i];
		} else {
			fprintf(stderr, "fusefloor: unknown argument %s\n", argv[i]);
			return 2;
		}
	}
	if (!mnt) {
		fprintf(stderr, "usage: fusefloor IMAGE MOUNTPOINT [-f] [-o no_writeback_cache] [-o io_uring] "
				"[-o counts=FILE] [-o FUSE-OPTIONS]\n"
				"  (IMAGE is not opened; nothing written is kept)\n");
		return 2;
	}
	/* Node 0 is a placeholder (inode 0 means "none" to FUSE); node 1 is the root. */
	if (add(0, "", 0, NULL) != 0 || add(0, "/", S_IFDIR | 0755, NULL) != FUSE_ROOT_ID)
		return 1;
	nodes[FUSE_ROOT_ID].parent = FUSE_ROOT_ID;
	fuse_opt_add_arg(&args, "-odefault_permissions,fsname=fusefloor,subtype=fusefloor");
	se = fuse_session_new(&args, &floor_ops, sizeof(floor_ops), NULL);
	if (!se)
		goto out;
	if (fuse_set_signal_handlers(se) || fuse_session_mount(se, mnt))
		goto out_se;
	if (ring)
		uring_configure(se, floor_take);
	fuse_session_custom_io(se, &floor_io, fuse_session_fd(se));
	cfg = fuse_loop_cfg_create();
	if (cfg) {
		fuse_loop_cfg_set_max_threads(cfg, 16);
		fuse_loop_cfg_set_idle_threads(cfg, 10);
		r = fuse_session_loop_mt(se, cfg) ? 1 : 0;
		fuse_loop_cfg_destroy(cfg);
	}
	fuse_session_unmount(se);
	uring_stop();
	if (counts)
		write_counts(counts);
	fuse_remove_signal_handlers(se);
out_se:
	fuse_session_destroy(se);
out:
	fuse_opt_free_args(&args);
	return r;
}

// SPDX-License-Identifier: GPL-2.0
/*
 * rrfuse IMAGE|DEVICE MOUNTPOINT [-o opts]: parse options, check the image,
 * mount, serve, and leave a clean image behind.  Nothing is written to the
 * image until the mount has succeeded.
 */
#include "ops.h"
#include "channel.h"
#include "ctl.h"
#include "data.h"
#include <et/com_err.h>
#include <ext2fs/ext2_err.h>
#include "log.h"
#include "error.h"
#include "rrfs.h"
#include "client.h"
#include "crash.h"
#include "trace.h"
#include "cache.h"
#include "mountinfo.h"
#include "mountopt.h"
#include "utab.h"
#include "rrfuse/num.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef RRFUSE_VERSION
#define RRFUSE_VERSION "0.1"
#endif

/* The largest metadata cache -o cache_mb= takes, MiB. */
#define CACHE_MB_MAX 65536

/*
 * arg, "NAME=VALUE", when NAME is an allocator tunable (or rralloc, the
 * rralloc patch's mount option): set it (the first refusal kept, to be
 * reported before the image is opened).  1 when NAME is not one.
 */
static int alloc_opt(struct rr_cmdline *c, const char *arg)
{
	char name[64], err[sizeof(c->alloc_err)];
	const char *eq;
	size_t n;

	/* Other users reach the mount: policies load only from root's files (libfuse takes it too). */
	if (!strcmp(arg, "allow_other"))
		c->alloc.shared = 1;
	if (!strcmp(arg, "rralloc"))
		arg = "allocator=rralloc";
	eq = strchr(arg, '=');
	n = eq ? (size_t)(eq - arg) : strlen(arg);
	if (n >= sizeof(name))
		return 1;
	memcpy(name, arg, n);
	name[n] = 0;
	if (!rr_alloc_is_tunable(name))
		return 1;
	if (rr_alloc_tunable_set(&c->alloc, name, eq ? eq + 1 : "", err, sizeof(err)) && !c->alloc_err[0])
		snprintf(c->alloc_err, sizeof(c->alloc_err), "%s", err);
	return 0;
}

/* Every tunable of rrfuse/tunables.def with its default (optimize_scan's is decided at mount). */
static void usage_tunables(void)
{
	struct rr_alloc_tunables t;
	char val[300], err[64];
	const char *name;
	unsigned int i;

	rr_alloc_tunables_default(&t);
	for (i = 0; (name = rr_alloc_tunable_name(i)); i++) {
		if (!strcmp(name, "allocator") || !strcmp(name, "policy_dir"))
			continue;
		if (rr_alloc_tunable_get(&t, name, val, sizeof(val), err, sizeof(err)))
			continue;
		printf("    -o %s=N%*s default %s\n", name, strlen(name) < 24 ? (int)(24 - strlen(name)) : 1, "",
		       val);
	}
}

/* The allocator's own lines: the preallocation window's default, the policies of allocators/policies.def. */
static void usage_policies(void)
{
	struct rr_alloc_tunables t;
	char def[32], dir[256], err[64];
	const char *name, *about;
	unsigned int i;

	rr_alloc_tunables_default(&t);
	if (rr_alloc_tunable_get(&t, "mb_max_prealloc_kb", def, sizeof(def), err, sizeof(err)))
		snprintf(def, sizeof(def), "?");
	if (rr_alloc_tunable_get(&t, "policy_dir", dir, sizeof(dir), err, sizeof(err)))
		snprintf(dir, sizeof(dir), "?");
	printf("    -o max_prealloc_kb=KB  largest preallocation window (alias mb_max_prealloc_kb; default %s;\n"
	       "                           smaller values mean %s, others round up to a power of two)\n"
	       "    -o NAME=N              the kernel's mballoc tunables, listed below with its defaults; these\n"
	       "                           and allocator= change live with rrctl MOUNTPOINT KEY=VALUE\n"
	       "    -o policy_dir=DIR      where allocator=NAME finds NAME.so; default\n"
	       "                           %s\n"
	       "    -o allocator=NAME      allocation policy, a NAME.so (rrfuse(8)) or one of\n", def, def, dir);
	for (i = 0; (name = rr_alloc_builtin_policy(i, &about)); i++)
		printf("                             %-10s %s\n", name, about);
}

static void usage(const char *prog)
{
	printf("usage: %s IMAGE|DEVICE MOUNTPOINT [options]\n"
	       "       %s -u MOUNTPOINT\n\n"
	       "Mount an ext4 image or block device through FUSE; with -u, unmount it and return\n"
	       "once the image is complete and the daemon has let go of it.\n\n"
	       "rrfuse options:\n", prog, prog);
	rr_cmdline_usage();
	usage_policies();
	printf("    -o rralloc             the same as allocator=rralloc\n"
	       "    -f                     stay in the foreground: messages to standard error\n"
	       "    -d                     debug: foreground, print every request\n"
	       "    -s                     single-threaded\n"
	       "    -h, --help             this help\n"
	       "    -V, --version          print the version\n\n"
	       "Allocator tunables (the kernel's /sys/fs/ext4/DEV/ names):\n");
	usage_tunables();
	printf("\nFUSE options:\n");
	fuse_cmdline_help();
	fuse_lowlevel_help();
}

/* The mount point exists and is a directory: 0, or -1 after saying why. */
static int check_mountpoint(const char *mnt)
{
	struct stat st;

	if (stat(mnt, &st)) {
		fprintf(stderr, "rrfuse: mount point %s: %s\n", mnt, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "rrfuse: mount point %s: not a directory\n", mnt);
		return -1;
	}
	return 0;
}

/*
 * The option values rrfuse checks itself, into opts: 0, or -1 after a
 * message naming the bad one (before the image is opened: nothing is
 * written).
 */
static int options_to_opts(const struct rr_cmdline *c, const struct fuse_cmdline_opts *fo, struct rr_opts *opts)
{
	char err[256];

	if (c->commit && (rr_parse_u32(c->commit, &opts->commit_secs) || opts->commit_secs > 86400)) {
		fprintf(stderr, "rrfuse: bad value for commit=: '%s' (seconds, 0..86400: decimal, 0x hex, 0 octal)\n",
			c->commit);
		return -1;
	}
	if (c->cache_mb) {
		unsigned int mb;

		if (rr_parse_u32(c->cache_mb, &mb) || mb > CACHE_MB_MAX) {
			fprintf(stderr, "rrfuse: bad value for cache_mb=: '%s' (MiB, 0..%u)\n", c->cache_mb,
				CACHE_MB_MAX);
			return -1;
		}
		opts->cache_mb = mb;
	}
	/*
	 * The data path writes file data to the device before the commit that
	 * maps it starts, and the commit's first flush makes both durable
	 * (src/journal/writer.h, rule 1): ordered's promise at writeback's
	 * cost, so writeback is accepted and keeps it.  Journaling file data
	 * would double every write: not done.
	 */
	if (c->data && strcmp(c->data, "ordered") && strcmp(c->data, "writeback")) {
		if (!strcmp(c->data, "journal"))
			fprintf(stderr, "rrfuse: data=journal is not supported: file data is not journaled "
				"(data=ordered, the default, keeps it ahead of the metadata that maps it)\n");
		else
			fprintf(stderr, "rrfuse: bad value for data=: '%s' (ordered or writeback)\n", c->data);
		return -1;
	}
	if (c->errors && (opts->errors = rr_errors_parse(c->errors)) < 0) {
		fprintf(stderr, "rrfuse: bad value for errors=: '%s' (continue, remount-ro or panic)\n",
			c->errors);
		return -1;
	}
	if (c->alloc_err[0]) {
		fprintf(stderr, "rrfuse: %s\n", c->alloc_err);
		return -1;
	}
	/* A policy that is no built-in loads now (once all options, policy_dir too, are known). */
	if (rr_alloc_policy_check(&c->alloc, err, sizeof(err))) {
		fprintf(stderr, "rrfuse: %s\n", err);
		return -1;
	}
	opts->alloc = c->alloc;
	rr_cmdline_to_opts(c, opts);
	opts->debug = fo->debug;
	opts->single = fo->singlethread;
	return 0;
}

/*
 * -o alloc_trace=FILE: opened before the image (a bad path is refused
 * before anything is written) and before the daemon leaves its working
 * directory; *name its absolute path, for rrctl.  0, or -1 after saying why.
 */
static int alloc_trace_open(const char *path, FILE **f, char *name)
{
	*f = fopen(path, "we");
	if (!*f) {
		fprintf(stderr, "rrfuse: alloc_trace=%s: %s\n", path, strerror(errno));
		return -1;
	}
	if (!realpath(path, name))
		snprintf(name, PATH_MAX, "%s", path);
	return 0;
}

/* What the kernel's mount gets from rrfuse: permissions checked by the kernel, the image's name, fuseblk. */
static void add_mount_args(struct fuse_args *args, const char *device, int blkdev, unsigned int bsize)
{
	char arg[2 * PATH_MAX + 64], real[PATH_MAX];

	/* The kernel checks permissions, as for any local filesystem. */
	fuse_opt_add_arg(args, "-odefault_permissions");
	/* The full path: rrfuse -u finds the image to wait for in mountinfo's source. */
	snprintf(arg, sizeof(arg), "-ofsname=%s,subtype=rrfuse", realpath(device, real) ? real : device);
	fuse_opt_add_arg(args, arg);
	if (blkdev) {
		snprintf(arg, sizeof(arg), "-oblkdev,blksize=%u", bsize);
		fuse_opt_add_arg(args, arg);
	}
}

/* Serve requests until unmount or a signal: libfuse's session loop, threaded unless -s. */
static int serve(struct fuse_session *se, const struct fuse_cmdline_opts *fo)
{
	struct fuse_loop_config *cfg;
	int r;

	if (fo->singlethread)
		return fuse_session_loop(se);
	cfg = fuse_loop_cfg_create();
	fuse_loop_cfg_set_clone_fd(cfg, fo->clone_fd);
	fuse_loop_cfg_set_max_threads(cfg, fo->max_threads && fo->max_threads <= 1024 ? fo->max_threads : 16);
	/* fuse_parse_cmdline leaves UINT_MAX for "not given". */
	fuse_loop_cfg_set_idle_threads(cfg, fo->max_idle_threads && fo->max_idle_threads != UINT_MAX ?
					     fo->max_idle_threads : 10);
	r = fuse_session_loop_mt(se, cfg);
	fuse_loop_cfg_destroy(cfg);
	return r;
}

/*
 * Mount rfs on fo->mountpoint, detach (unless -f), serve until unmount or a
 * signal, and unmount: the exit status.  rfs is closed by the caller.
 */
static int mount_and_serve(struct rr_fs *rfs, struct fuse_args *args, const struct rr_cmdline *c,
			   const struct fuse_cmdline_opts *fo, int blkdev)
{
	struct fuse_session *se;
	int ret = 1, r;

	add_mount_args(args, c->device, blkdev, rfs->bsize);
	se = fuse_session_new(args, &rr_ops, sizeof(rr_ops), rfs);
	if (!se)
		return 1;	/* libfuse printed which option it refused */
	rfs->se = se;
	if (fuse_set_signal_handlers(se))
		goto out_se;
	if (fuse_session_mount(se, fo->mountpoint))
		goto out_sig;
	r = chan_attach(se, rfs);
	if (r) {
		fprintf(stderr, "rrfuse: cannot attach to the FUSE channel: %s\n", strerror(-r));
		goto out_unmount;
	}
	if (!blkdev) {
		char real[PATH_MAX], src[PATH_MAX];

		if (realpath(fo->mountpoint, real) && realpath(c->device, src) && (rfs->utab = strdup(real)))
			rr_utab_add(src, real);
	}
	r = rr_fs_mark_mounted(rfs);
	if (r) {
		fprintf(stderr, "rrfuse: %s: cannot write the superblock: %s\n", c->device, strerror(-r));
		goto out_unmount;
	}
	if (fuse_daemonize(fo->foreground))
		goto out_unmount;
	rr_log_detached();
	rr_crash_handlers();
	rr_fs_start_commit_thread(rfs);
	r = serve(se, fo);
	/* Every way out says why: an unmount, a signal (SIGTERM, SIGINT, SIGHUP), or an error. */
	if (r)
		rr_log(LOG_ERR, "the FUSE session ended with an error (%s): unmounting",
		       strerror(r < 0 ? -r : r));
	else
		rr_log(LOG_INFO, "%s: unmounted, writing the image out", c->device);
	ret = r ? 1 : 0;
out_unmount:
	fuse_session_unmount(se);
	/* After the unmount: a fuseblk mount's DESTROY may come over the ring. */
	chan_detach();
out_sig:
	fuse_remove_signal_handlers(se);
out_se:
	fuse_session_destroy(se);
	return ret;
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts fo = { 0 };
	struct rr_cmdline c = { 0 };
	struct rr_opts opts = { .commit_secs = 5, .writeback = 1, .cache_mb = IO_CACHE_MB_DEFAULT };
	struct rr_fs *rfs = NULL;
	struct stat st;
	FILE *alloc_trace = NULL;
	char msg[512] = "", alloc_trace_name[PATH_MAX];
	int ret = 1, r, blkdev;

	/* rrfuse -u MNT, and umount(8)'s helper: nothing of the mount code below. */
	if (rr_client_is_umount_helper(argv[0]) || (argc > 1 && !strcmp(argv[1], "-u")))
		return rr_client_unmount(argc, argv);
	/* Messages for libext2fs's error codes. */
	initialize_ext2_error_table();
	/* The allocator's messages go where rrfuse's own go: syslog once in the background. */
	rr_alloc_set_log(rr_vlog);
	rr_alloc_tunables_default(&c.alloc);
	if (rr_cmdline_parse(&args, &c, alloc_opt))
		return 1;
	if (c.help) {
		usage(argv[0]);
		ret = 0;
		goto out;
	}
	if (c.version) {
		printf("rrfuse %s (libfuse %s, e2fsprogs libext2fs)\n", RRFUSE_VERSION, fuse_pkgversion());
		ret = 0;
		goto out;
	}
	if (!c.device || !c.mountpoint) {
		fprintf(stderr, "rrfuse: usage: rrfuse IMAGE|DEVICE MOUNTPOINT [-o options] (see --help)\n");
		goto out;
	}
	if (check_mountpoint(c.mountpoint))
		goto out;
	if (c.remount) {
		ret = rr_client_remount(c.mountpoint, c.ro);
		goto out;
	}
	if (fuse_parse_cmdline(&args, &fo) != 0 || !fo.mountpoint)
		goto out;
	r = rr_log_setup(fo.foreground, c.log);
	if (r) {
		fprintf(stderr, "rrfuse: log=%s: %s\n", c.log, strerror(-r));
		goto out;
	}
	if (options_to_opts(&c, &fo, &opts))
		goto out;
	if (c.trace) {
		char real[PATH_MAX];

		r = trace_open(c.trace, realpath(c.device, real) ? real : c.device, &opts.trace);
		if (r) {
			fprintf(stderr, "rrfuse: trace=%s: %s\n", c.trace, strerror(-r));
			goto out;
		}
	}
	if (c.alloc_trace && alloc_trace_open(c.alloc_trace, &alloc_trace, alloc_trace_name))
		goto out;
	rr_ctl_trace_dev(c.device);
	rfs = calloc(1, sizeof(*rfs));
	if (!rfs)
		goto out;
	/*
	 * A block device mounted by root is a fuseblk mount: the kernel then
	 * waits for the daemon's DESTROY at unmount, so umount(8) and
	 * fusermount3 -u return with the image complete.
	 */
	blkdev = geteuid() == 0 && !stat(c.device, &st) && S_ISBLK(st.st_mode);
	opts.fuseblk = blkdev;
	r = rr_fs_open(rfs, c.device, &opts, &data_hooks, msg, sizeof(msg));
	if (r) {
		fprintf(stderr, "rrfuse: %s\n", msg);
		free(rfs);
		rfs = NULL;
		goto out;
	}
	if (rfs->ro && !c.ro)
		fuse_opt_add_arg(&args, "-oro");
	/* Read-only: no allocator, nothing to trace (the file stays empty). */
	if (alloc_trace && rfs->alloc)
		rr_ctl_alloc_trace(rfs, alloc_trace, alloc_trace_name);
	else if (alloc_trace)
		fclose(alloc_trace);
	alloc_trace = NULL;
	if (!rr_iget(rfs, EXT2_ROOT_INO)) {
		fprintf(stderr, "rrfuse: cannot read the root directory\n");
		goto out_fs;
	}
	ret = mount_and_serve(rfs, &args, &c, &fo, blkdev);
out_fs:
	/* Normally done at DESTROY (rr_destroy); here when the session never got that far. */
	if (!rfs->closed && rfs->utab)
		rr_utab_remove(rfs->utab);
	r = rfs->closed ? rfs->close_ret : rr_fs_close(rfs);
	if (r) {
		rr_log(LOG_ERR, "error writing the image at unmount: %s", strerror(-r));
		ret = 1;
	}
	free(rfs->utab);
	free(rfs);
out:
	if (alloc_trace)
		fclose(alloc_trace);
	/* After rr_fs_close: no channel has the trace any more. */
	r = trace_close(opts.trace);
	if (r) {
		rr_log(LOG_ERR, "trace=%s: %s", c.trace, strerror(-r));
		ret = 1;
	}
	rr_cmdline_free(&c);
	free(fo.mountpoint);
	fuse_opt_free_args(&args);
	return ret;
}

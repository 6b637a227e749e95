/* SPDX-License-Identifier: GPL-2.0 */
#ifndef RRFUSE_MOUNTOPT_H
#define RRFUSE_MOUNTOPT_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include "rrfs.h"

struct rr_cmdline;
/*
 * An -o option not in mountopts.def ("NAME" or "NAME=VALUE"): 0 if taken,
 * 1 to pass it on (to libfuse and the kernel).
 */
typedef int (*rr_cmdline_other_fn)(struct rr_cmdline *c, const char *arg);

/* rrfuse's command line: the image, the mount point and the options of mountopts.def. */
struct rr_cmdline {
	rr_cmdline_other_fn other;
	char *device;
	char *mountpoint;	/* as given, for checking before libfuse does */
	int nonopts;
	struct rr_alloc_tunables alloc;
	char alloc_err[160];	/* the first bad allocator option, refused before the image is opened */
#define RR_OPT_STR(field, show, help) char *field;
#define RR_OPT(field, name, value, dflt, kernel, to, show, help) int field;
#define RR_OPT_ALSO(field, name, value, kernel)
#include "mountopts.def"
#undef RR_OPT_STR
#undef RR_OPT
#undef RR_OPT_ALSO
};

/* The defaults of mountopts.def, then args parsed: 0, or -1 (libfuse said why). */
int rr_cmdline_parse(struct fuse_args *args, struct rr_cmdline *c, rr_cmdline_other_fn other);
/* --help's lines for the options of mountopts.def. */
void rr_cmdline_usage(void);
/* The int options whose line says OPTS(member): each to that member of opts (alloc already copied). */
void rr_cmdline_to_opts(const struct rr_cmdline *c, struct rr_opts *opts);
void rr_cmdline_free(struct rr_cmdline *c);

#endif

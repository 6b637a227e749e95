// SPDX-License-Identifier: GPL-2.0
/*
 * rrfuse's own mount options, made from the list in mountopts.def: the
 * parser's table, the defaults, --help's lines, the copy into rr_opts.  What the list does not
 * name goes to the caller (the allocator's tunables), then to libfuse.
 */
#include "mountopt.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --help's column for an option's text; a longer name puts it on the next line. */
#define HELP_COL 27

/*
 * Every name twice: the setter, then a key that passes the option on to
 * the kernel's mount (FUSE_OPT_KEY_KEEP) or not (DISCARD); libfuse
 * processes each entry that matches.
 */
#define RR_KEEP(kernel) ((kernel) ? FUSE_OPT_KEY_KEEP : FUSE_OPT_KEY_DISCARD)
static const struct fuse_opt spec[] = {
#define RR_OPT_STR(field, show, help) { #field "=%s", offsetof(struct rr_cmdline, field), 0 },
#define RR_OPT(field, name, value, dflt, kernel, to, show, help) \
	{ name, offsetof(struct rr_cmdline, field), value }, FUSE_OPT_KEY(name, RR_KEEP(kernel)),
#define RR_OPT_ALSO(field, name, value, kernel) \
	{ name, offsetof(struct rr_cmdline, field), value }, FUSE_OPT_KEY(name, RR_KEEP(kernel)),
#include "mountopts.def"
#undef RR_OPT_STR
#undef RR_OPT
#undef RR_OPT_ALSO
	FUSE_OPT_END
};

static const struct {
	const char *show, *help;
} help[] = {
#define RR_OPT_STR(field, show, help) { show, help },
#define RR_OPT(field, name, value, dflt, kernel, to, show, help) { show, help },
#define RR_OPT_ALSO(field, name, value, kernel)
#include "mountopts.def"
#undef RR_OPT_STR
#undef RR_OPT
#undef RR_OPT_ALSO
};

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct rr_cmdline *c = data;

	(void)outargs;
	switch (key) {
	case FUSE_OPT_KEY_NONOPT:
		if (c->nonopts++ == 0) {
			c->device = strdup(arg);
			return 0;
		}
		if (c->nonopts == 2)
			c->mountpoint = strdup(arg);
		return 1;	/* the mount point: fuse_parse_cmdline takes it */
	case FUSE_OPT_KEY_OPT:
		return c->other ? c->other(c, arg) : 1;
	default:
		return 1;
	}
}

int rr_cmdline_parse(struct fuse_args *args, struct rr_cmdline *c, rr_cmdline_other_fn other)
{
	c->other = other;
#define RR_OPT_STR(field, show, help) c->field = NULL;
#define RR_OPT(field, name, value, dflt, kernel, to, show, help) c->field = dflt;
#define RR_OPT_ALSO(field, name, value, kernel)
#include "mountopts.def"
#undef RR_OPT_STR
#undef RR_OPT
#undef RR_OPT_ALSO
	return fuse_opt_parse(args, c, spec, opt_proc) == -1 ? -1 : 0;
}

void rr_cmdline_usage(void)
{
	size_t i;

	for (i = 0; i < sizeof(help) / sizeof(help[0]); i++) {
		const char *s = help[i].help, *nl;

		if (!help[i].show)
			continue;
		if (strlen(help[i].show) < HELP_COL - 7)
			printf("    -o %-*s", HELP_COL - 7, help[i].show);
		else
			printf("    -o %s\n%*s", help[i].show, HELP_COL, "");
		for (; (nl = strchr(s, '\n')); s = nl + 1)
			printf("%.*s\n%*s", (int)(nl - s), s, HELP_COL, "");
		printf("%s\n", s);
	}
}

void rr_cmdline_to_opts(const struct rr_cmdline *c, struct rr_opts *opts)
{
#define OPTS(member) opts->member =
#define CMDLINE (void)
#define RR_OPT_STR(field, show, help)
#define RR_OPT(field, name, value, dflt, kernel, to, show, help) to c->field;
#define RR_OPT_ALSO(field, name, value, kernel)
#include "mountopts.def"
#undef RR_OPT_STR
#undef RR_OPT
#undef RR_OPT_ALSO
#undef CMDLINE
#undef OPTS
}

void rr_cmdline_free(struct rr_cmdline *c)
{
	free(c->device);
	free(c->mountpoint);
#define RR_OPT_STR(field, show, help) free(c->field);
#define RR_OPT(field, name, value, dflt, kernel, to, show, help)
#define RR_OPT_ALSO(field, name, value, kernel)
#include "mountopts.def"
#undef RR_OPT_STR
#undef RR_OPT
#undef RR_OPT_ALSO
}

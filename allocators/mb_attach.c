// SPDX-License-Identifier: GPL-2.0
/*
 * The allocator's life, above the engine and the policies alike: attach
 * builds the engine (mballoc.c), starts the policy the tunables name
 * (policies.c) and then hands libext2fs's callbacks to the engine; detach
 * logs the statistics (mb_stats) and takes it all down.
 */
#include "mb_format.h"
#include "mb_host.h"
#include "mballoc.h"
#include "policies.h"
#include "rrfuse/rrctl_wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

int rr_alloc_attach(ext2_filsys fs, const struct rr_alloc_tunables *t, struct rr_alloc **out)
{
	struct rr_alloc_tunables defaults;
	const struct mb_policy *policy;
	struct rr_alloc *a;
	char err[512];
	int ret;

	if (!t) {
		rr_alloc_tunables_default(&defaults);
		t = &defaults;
	}
	policy = mb_policy_get(t->policy, t, err, sizeof(err));
	if (!policy) {
		mb_log(LOG_ERR, "%s", err);
		return -EINVAL;
	}
	ret = mb_engine_new(fs, t, &a);
	if (ret)
		return ret;
	a->fallback = &mb_policy_regular;
	ret = mb_policy_switch(a, policy, err, sizeof(err));
	if (ret) {
		mb_log(LOG_ERR, "%s", err);
		rr_alloc_detach(a);
		return ret;
	}
	mb_engine_hook(a);
	*out = a;
	return 0;
}

/* With mb_stats, the statistics at unmount (as the kernel's ext4_mb_release), in rrctl -s's text. */
static void print_stats(struct rr_alloc *a)
{
	struct rrctl_stats st;

	char *text = NULL, *line, *save = NULL;
	size_t len = 0;
	FILE *f;

	memset(&st, 0, sizeof(st));
	rr_alloc_stats(a, &st);
	/* rrctl -s's text, a log line for each of its lines. */
	f = open_memstream(&text, &len);
	if (!f)
		return;
	mb_format_stats(f, &st);
	mb_format_refusals(f, &st);
	if (fclose(f) == 0)
		for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
			mb_log(LOG_INFO, "%s", line);
	free(text);
}

void rr_alloc_detach(struct rr_alloc *a)
{
	if (!a)
		return;
	if (a->t.mb_stats)
		print_stats(a);
	mb_engine_free(a);
}

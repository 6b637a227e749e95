// SPDX-License-Identifier: GPL-2.0
/*
 * utab through libmount's own update code (its locking and file format
 * are libmount's business).  Best effort: an unprivileged daemon cannot
 * write utab and does not need to (fusermount3 unmounts its mounts; the
 * user runs rrfuse -u), and a failure only costs umount(8) the helper.
 */
#include "utab.h"
#include "log.h"

#include <libmount.h>
#include <string.h>
#include <unistd.h>

/* A userspace option: utab keeps only entries with one. */
#define UTAB_OPTS "uhelper=rrfuse"

static void update(const char *source, const char *target)
{
	struct libmnt_update *upd;
	struct libmnt_fs *fs = NULL;
	int ret = -1;

	if (geteuid() != 0)
		return;
	upd = mnt_new_update();
	if (!upd)
		return;
	if (source) {
		fs = mnt_new_fs();
		if (!fs || mnt_fs_set_source(fs, source) || mnt_fs_set_target(fs, target) ||
		    mnt_fs_set_fstype(fs, "fuse.rrfuse") || mnt_fs_set_options(fs, UTAB_OPTS))
			goto out;
	}
	ret = mnt_update_set_fs(upd, 0, source ? NULL : target, fs);
	if (ret == 0)
		ret = mnt_update_table(upd, NULL);
	else if (ret == 1)
		ret = 0;	/* nothing to update */
out:
	if (ret)
		rr_log(LOG_WARNING, "%s: cannot %s libmount's utab entry: umount(8) may not wait for rrfuse",
		       target, source ? "add" : "remove");
	mnt_unref_fs(fs);
	mnt_free_update(upd);
}

void rr_utab_add(const char *source, const char *target)
{
	update(source, target);
}

void rr_utab_remove(const char *target)
{
	update(NULL, target);
}

// SPDX-License-Identifier: GPL-2.0
/*
 * /proc/self/mountinfo, one line a mount:
 *   ID PARENT MAJ:MIN ROOT TARGET MOUNT-OPTS [TAGS...] - FSTYPE SOURCE SUPER-OPTS
 * with space, tab, newline and backslash in paths written as \ooo.  Later
 * lines are mounts on top of earlier ones, so the last match is the mount
 * a path resolves to.
 */
#include "mountinfo.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

/* Undo mountinfo's octal escapes in place. */
static void unescape(char *s)
{
	char *d = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*d++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
			s += 3;
		} else {
			*d++ = *s;
		}
	}
	*d = 0;
}

static void copy(char *dst, size_t len, const char *src)
{
	snprintf(dst, len, "%s", src ? src : "");
	unescape(dst);
}

/* Split one line into m; 0 when it has every field. */
static int parse(char *line, struct rr_mnt *m)
{
	char *save = NULL, *tok, *f[6];
	unsigned int maj, min;
	int n = 0;

	for (tok = strtok_r(line, " \n", &save); tok && n < 6; tok = strtok_r(NULL, " \n", &save))
		f[n++] = tok;
	if (n < 6 || sscanf(f[2], "%u:%u", &maj, &min) != 2)
		return -1;
	m->dev = makedev(maj, min);
	copy(m->target, sizeof(m->target), f[4]);
	copy(m->opts, sizeof(m->opts), f[5]);
	/* Optional tags until the lone "-". */
	while (tok && strcmp(tok, "-"))
		tok = strtok_r(NULL, " \n", &save);
	if (!tok)
		return -1;
	copy(m->fstype, sizeof(m->fstype), strtok_r(NULL, " \n", &save));
	copy(m->source, sizeof(m->source), strtok_r(NULL, " \n", &save));
	return 0;
}

enum find_by { BY_TARGET, BY_SOURCE, BY_SUPER };

/* The last mount whose target, source (a resolved path) or superblock (sb's dev and source) matches. */
static int mnt_find(enum find_by by, const char *path, const struct rr_mnt *sb, struct rr_mnt *out)
{
	char want[PATH_MAX], *line = NULL;
	struct rr_mnt m;
	size_t cap = 0;
	int found = 0;
	FILE *f;

	if (by != BY_SUPER && !realpath(path, want))
		return -errno;
	f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		if (parse(line, &m))
			continue;
		if (by == BY_SUPER ? m.dev == sb->dev && !strcmp(m.source, sb->source)
				   : !strcmp(by == BY_SOURCE ? m.source : m.target, want)) {
			*out = m;
			found = 1;
		}
	}
	free(line);
	fclose(f);
	return found ? 0 : -ENOENT;
}

int rr_mnt_at(const char *path, struct rr_mnt *m)
{
	return mnt_find(BY_TARGET, path, NULL, m);
}

int rr_mnt_of(const char *source, struct rr_mnt *m)
{
	return mnt_find(BY_SOURCE, source, NULL, m);
}

int rr_mnt_still_mounted(const struct rr_mnt *sb)
{
	struct rr_mnt m;
	int ret = mnt_find(BY_SUPER, NULL, sb, &m);

	return ret == -ENOENT ? 0 : ret ? ret : 1;
}

int rr_mnt_is_rrfuse(const struct rr_mnt *m)
{
	return !strcmp(m->fstype, "fuse.rrfuse") || !strcmp(m->fstype, "fuseblk.rrfuse") ||
	       !strcmp(m->fstype, "fuseblk");
}

int rr_mnt_has_opt(const struct rr_mnt *m, const char *opt)
{
	size_t n = strlen(opt);
	const char *p = m->opts;

	while (p && *p) {
		if (!strncmp(p, opt, n) && (p[n] == ',' || !p[n]))
			return 1;
		p = strchr(p, ',');
		if (p)
			p++;
	}
	return 0;
}

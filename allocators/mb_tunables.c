// SPDX-License-Identifier: GPL-2.0
/*
 * The allocator's tunables: names, defaults and validation in one place.
 * Names and defaults are the kernel's (/sys/fs/ext4/DEV/mb_*); each is a
 * mount option and live-tunable with rrctl (rr_alloc_set in mb_ctl.c),
 * both through the same rr_alloc_tunable_set().
 */
#include "mb_tunables.h"
#include "rrfuse/num.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each tunable's default, as MB_DEFAULT_name (mb_max_prealloc_kb's: smaller values mean it). */
enum {
#define MB_TUNABLE(n, k, m, d) MB_DEFAULT_##n = d,
#include "rrfuse/tunables.def"
#undef MB_TUNABLE
};

enum tkind { T_UINT, T_BOOL, T_PREALLOC_KB, T_POLICY, T_POLICY_DIR, T_ALIAS };

struct tunable {
	const char *name;
	size_t off;
	enum tkind kind;
	unsigned int max;
	const char *of;		/* T_ALIAS: the tunable it names */
};

static const struct tunable tunables[] = {
#define MB_TUNABLE(n, k, m, d) { #n, offsetof(struct rr_alloc_tunables, n), k, m, NULL },
#include "rrfuse/tunables.def"
#undef MB_TUNABLE
#define RR_KEY_ALIAS(n, o) { #n, 0, T_ALIAS, 0, #o },
#define RR_KEY_POLICY(n) { #n, 0, T_POLICY, 0, NULL },
#define RR_KEY_POLICY_DIR(n) { #n, 0, T_POLICY_DIR, 0, NULL },
#define RR_KEY_MOUNT(n)
#include "rrfuse/keys.def"
#undef RR_KEY_ALIAS
#undef RR_KEY_POLICY
#undef RR_KEY_POLICY_DIR
#undef RR_KEY_MOUNT
};

void rr_alloc_tunables_default(struct rr_alloc_tunables *t)
{
	memset(t, 0, sizeof(*t));
#define MB_TUNABLE(n, k, m, d) t->n = d;
#include "rrfuse/tunables.def"
#undef MB_TUNABLE
	strcpy(t->policy, "regular");
}

static const struct tunable *lookup(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(tunables) / sizeof(tunables[0]); i++)
		if (!strcmp(tunables[i].name, name))
			return tunables[i].kind == T_ALIAS ? lookup(tunables[i].of) : &tunables[i];
	return NULL;
}

int rr_alloc_is_tunable(const char *name)
{
	return lookup(name) != NULL;
}

int mb_tunable_index(const char *name)
{
	const struct tunable *d = lookup(name);

	return d && d->kind != T_POLICY && d->kind != T_POLICY_DIR ? (int)(d - tunables) : -1;
}

unsigned int mb_tunable_load(const struct rr_alloc_tunables *t, int index)
{
	if (index < 0 || (size_t)index >= sizeof(tunables) / sizeof(tunables[0]) ||
	    tunables[index].kind == T_POLICY || tunables[index].kind == T_POLICY_DIR)
		return 0;
	return __atomic_load_n((const unsigned int *)((const char *)t + tunables[index].off), __ATOMIC_RELAXED);
}

/* The index'th name, aliases left out (rrctl's listing); NULL past the last. */
const char *rr_alloc_tunable_name(unsigned int i)
{
	size_t k, n = 0;

	for (k = 0; k < sizeof(tunables) / sizeof(tunables[0]); k++) {
		if (tunables[k].kind == T_ALIAS)
			continue;
		if (n++ == i)
			return tunables[k].name;
	}
	return NULL;
}

int rr_alloc_tunable_get(const struct rr_alloc_tunables *t, const char *name, char *buf, size_t len,
			 char *err, size_t errlen)
{
	const struct tunable *d = lookup(name);

	if (!d) {
		snprintf(err, errlen, "unknown allocator tunable '%s'", name);
		return -ENOENT;
	}
	if (d->kind == T_POLICY)
		snprintf(buf, len, "%s", t->policy);
	else if (d->kind == T_POLICY_DIR)
		snprintf(buf, len, "%s", t->policy_dir[0] ? t->policy_dir : RRFUSE_POLICY_DIR);
	else if (*(const unsigned int *)((const char *)t + d->off) == RR_TUNABLE_AT_MOUNT)
		snprintf(buf, len, "decided at mount");
	else
		snprintf(buf, len, "%u", *(const unsigned int *)((const char *)t + d->off));
	return 0;
}

int mb_policy_name_ok(const char *name)
{
	size_t i, n = strlen(name);

	if (!n || n >= RR_POLICY_NAME_LEN)
		return 0;
	if (name[0] == '/')
		return 1;
	for (i = 0; i < n; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') ||
		      (name[i] >= '0' && name[i] <= '9') || name[i] == '_' || name[i] == '-'))
			return 0;
	return 1;
}

/* Every policy of policies.def by name, for the messages of a refused allocator=. */
static const char *const policy_names[] = {
#define MB_POLICY(name) #name,
#define MB_PUBLIC_POLICY(name, about) #name,
#include "policies.def"
#undef MB_POLICY
#undef MB_PUBLIC_POLICY
};

void mb_policy_names(char *buf, size_t len)
{
	size_t i, n = 0;

	buf[0] = 0;
	for (i = 0; i < sizeof(policy_names) / sizeof(policy_names[0]) && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", policy_names[i]);
}

/* As the seed patch: below the default clamps to it, otherwise round up to a power of two. */
static int prealloc_kb(unsigned int v, unsigned int *out)
{
	unsigned long long r = 1;

	if (v < MB_DEFAULT_mb_max_prealloc_kb)
		v = MB_DEFAULT_mb_max_prealloc_kb;
	while (r < v)
		r <<= 1;
	if (r > UINT_MAX)
		return -1;
	*out = (unsigned int)r;
	return 0;
}

int rr_alloc_tunable_set(struct rr_alloc_tunables *t, const char *name, const char *value,
			 char *err, size_t errlen)
{
	const struct tunable *d = lookup(name);
	unsigned int v;

	if (!d) {
		snprintf(err, errlen, "unknown allocator tunable '%s'", name);
		return -ENOENT;
	}
	/* A policy that is no built-in is loaded where it is started (attach, rrctl): policy_dir may follow. */
	if (d->kind == T_POLICY) {
		if (!value || !mb_policy_name_ok(value)) {
			char names[128];

			mb_policy_names(names, sizeof(names));
			snprintf(err, errlen, "unknown allocator '%s' (known: %s; or NAME.so in the policy "
				 "directory, or a path to a .so)", value ? value : "", names);
			return -EINVAL;
		}
		snprintf(t->policy, sizeof(t->policy), "%s", value);
		return 0;
	}
	if (d->kind == T_POLICY_DIR) {
		if (!value || value[0] != '/' || strlen(value) >= sizeof(t->policy_dir)) {
			snprintf(err, errlen, "bad value for policy_dir=: '%s' (an absolute path, shorter than %zu)",
				 value ? value : "", sizeof(t->policy_dir));
			return -EINVAL;
		}
		snprintf(t->policy_dir, sizeof(t->policy_dir), "%s", value);
		return 0;
	}
	if (rr_parse_u32(value, &v)) {
		snprintf(err, errlen, "bad value for %s=: '%s' (an unsigned number below 2^32: decimal, 0x hex, 0 octal)", name,
			 value ? value : "");
		return -EINVAL;
	}
	if (d->kind == T_PREALLOC_KB) {
		if (prealloc_kb(v, &v)) {
			snprintf(err, errlen, "bad value for %s=: '%s' (rounded up to a power of two it overflows)",
				 name, value);
			return -EINVAL;
		}
	} else if (v > d->max) {
		snprintf(err, errlen, "bad value for %s=: '%s' (at most %u)", name, value, d->max);
		return -EINVAL;
	}
	*(unsigned int *)((char *)t + d->off) = v;
	return 0;
}

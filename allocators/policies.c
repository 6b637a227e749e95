// SPDX-License-Identifier: GPL-2.0
/*
 * The allocation policies by name, and the one running (see policies.h):
 * the table of the built-in ones, the loading of those built outside
 * rrfuse, and the switch from one to another.
 *
 * Loading: a name with a '/' is that file; another name that is no
 * built-in is NAME.so in the policy directory (-o policy_dir=DIR, else
 * the installed one, RRFUSE_POLICY_DIR).  It must export RRP_SYMBOL with
 * include/rrfuse/policy.h's ABI version, a name and a choose.  When other
 * users can reach the mount (rrfuse runs as root, or -o allow_other), the
 * file must be owned by root and writable by nobody else, as the kernel
 * asks of its modules.  A loaded policy stays loaded until the daemon
 * exits: a request may still run in it after a switch away.
 */
#include "mb_host.h"
#include "mb_plugin.h"
#include "mb_tunables.h"
#include "policies.h"
#include "rrfuse/policy.h"
#include "rrfuse/rrctl_wire.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#define MB_POLICY(name) extern const struct mb_policy mb_policy_##name;
/* Hidden: the engine's own, not a service for loaded policies (policy.sym exports rrp_*). */
#define MB_PUBLIC_POLICY(n, about) \
	extern const struct rrp_policy rrp_policy_##n __attribute__((visibility("hidden"))); \
	const struct mb_policy mb_policy_##n = { .name = #n, .pub = &rrp_policy_##n, \
		.init = mb_plugin_init, .fini = mb_plugin_fini, .choose = mb_plugin_choose };
#include "policies.def"
#undef MB_POLICY
#undef MB_PUBLIC_POLICY

static const struct mb_policy *const mb_policies[] = {
#define MB_POLICY(name) &mb_policy_##name,
#define MB_PUBLIC_POLICY(name, about) &mb_policy_##name,
#include "policies.def"
#undef MB_POLICY
#undef MB_PUBLIC_POLICY
};

/* The built-in policies a user picks (-o allocator=NAME), and what each is. */
static const struct {
	const char *name, *about;
} mb_builtin[] = {
#define MB_POLICY(name)
#define MB_PUBLIC_POLICY(name, about) { #name, about },
#include "policies.def"
#undef MB_POLICY
#undef MB_PUBLIC_POLICY
};

#define NPOLICIES (sizeof(mb_policies) / sizeof(mb_policies[0]))

struct plugin {
	struct mb_policy mb;
	char path[PATH_MAX];
	char name[RR_POLICY_NAME_LEN];
	struct plugin *next;
};

/* The loaded policies, newest first; plugins_lock: the list (a plugin on it never changes). */
static pthread_mutex_t plugins_lock = PTHREAD_MUTEX_INITIALIZER;
static struct plugin *plugins;

static const struct mb_policy *mb_plugin_find(const char *name)
{
	const struct plugin *p;

	pthread_mutex_lock(&plugins_lock);
	for (p = plugins; p && strcmp(p->name, name); p = p->next)
		;
	pthread_mutex_unlock(&plugins_lock);
	return p ? &p->mb : NULL;
}

const struct mb_policy *mb_policy_find(const char *name)
{
	size_t i;

	for (i = 0; i < NPOLICIES; i++)
		if (!strcmp(mb_policies[i]->name, name))
			return mb_policies[i];
	return mb_plugin_find(name);
}

const char *rr_alloc_builtin_policy(unsigned int i, const char **about)
{
	if (i >= sizeof(mb_builtin) / sizeof(mb_builtin[0]))
		return NULL;
	*about = mb_builtin[i].about;
	return mb_builtin[i].name;
}

int rr_alloc_policy_check(const struct rr_alloc_tunables *t, char *err, size_t errlen)
{
	return !t->policy[0] || mb_policy_get(t->policy, t, err, errlen) ? 0 : -EINVAL;
}

/* As the kernel loads modules: for a shared mount, only root's files that nobody else can change. */
static int trusted(const char *path, int shared, char *err, size_t errlen)
{
	struct stat st;

	if (stat(path, &st)) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return 0;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", path);
		return 0;
	}
	if ((shared || geteuid() == 0) && (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)))) {
		snprintf(err, errlen, "not loaded, the mount is shared and the file is %s: %s",
			 st.st_uid ? "not owned by root" : "writable by group or others", path);
		return 0;
	}
	return 1;
}

const struct mb_policy *mb_policy_get(const char *name, const struct rr_alloc_tunables *t, char *err,
				      size_t errlen)
{
	const char *dir = t->policy_dir;
	const struct mb_policy *found_p = mb_policy_find(name);
	const struct rrp_policy *pub;
	struct plugin *p;
	void *dl;

	if (found_p)
		return found_p;
	if (!mb_policy_name_ok(name)) {
		char names[128];

		mb_policy_names(names, sizeof(names));
		snprintf(err, errlen, "unknown allocator '%s' (known: %s; or NAME.so in the policy directory)",
			 name, names);
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (strchr(name, '/'))
		snprintf(p->path, sizeof(p->path), "%s", name);
	else
		snprintf(p->path, sizeof(p->path), "%s/%s.so", dir && dir[0] ? dir : RRFUSE_POLICY_DIR, name);
	if (!trusted(p->path, t->shared, err, errlen)) {
		if (!strchr(name, '/')) {
			char names[128], why[RRCTL_ERR_LEN];

			snprintf(why, sizeof(why), "%s", err);
			mb_policy_names(names, sizeof(names));
			snprintf(err, errlen, "unknown allocator '%s' (known: %s; %s)", name, names, why);
		}
		free(p);
		return NULL;
	}
	dl = dlopen(p->path, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		snprintf(err, errlen, "allocator '%s': %s", name, dlerror());
		free(p);
		return NULL;
	}
	pub = dlsym(dl, RRP_SYMBOL);
	if (!pub || pub->abi != RRP_ABI_VERSION || !pub->name || !pub->choose) {
		if (!pub)
			snprintf(err, errlen, "allocator '%s' exports no %s", name, RRP_SYMBOL);
		else if (pub->abi != RRP_ABI_VERSION)
			snprintf(err, errlen, "allocator '%s' built for policy ABI %u, rrfuse has %u", name,
				 pub->abi, RRP_ABI_VERSION);
		else
			snprintf(err, errlen, "allocator '%s' has no %s in its %s", name,
				 pub->name ? "choose" : "name", RRP_SYMBOL);
		dlclose(dl);
		free(p);
		return NULL;
	}
	snprintf(p->name, sizeof(p->name), "%s", name);
	p->mb.name = p->name;
	p->mb.pub = pub;
	p->mb.init = mb_plugin_init;
	p->mb.fini = mb_plugin_fini;
	p->mb.choose = mb_plugin_choose;
	pthread_mutex_lock(&plugins_lock);
	p->next = plugins;
	plugins = p;
	pthread_mutex_unlock(&plugins_lock);
	mb_log(LOG_INFO, "mballoc: allocator '%s' loaded from %s", pub->name, p->path);
	return &p->mb;
}

/*
 * Start the new policy (its init sets a->policy_priv) and make it the one
 * requests run.  The old one keeps its state until detach, where its fini
 * runs: a request without the fs lock may still be inside it.  A failed
 * start leaves the old one running.
 */
int mb_policy_switch(struct rr_alloc *a, const struct mb_policy *p, char *err, size_t errlen)
{
	void *old_priv = a->policy_priv;
	struct mb_running *run;

	if (p == a->policy)
		return 0;
	run = calloc(1, sizeof(*run));
	a->policy_priv = NULL;
	if (!run || (p->init && p->init(a, p))) {
		free(run);
		a->policy_priv = old_priv;
		snprintf(err, errlen, "allocator '%s' could not start (%s)", p->name,
			 run ? "its init failed" : "out of memory");
		return run ? -EINVAL : -ENOMEM;
	}
	run->policy = p;
	run->priv = a->policy_priv;
	run->retired = atomic_load(&a->run);
	atomic_store(&a->run, run);
	a->policy = p;
	return 0;
}

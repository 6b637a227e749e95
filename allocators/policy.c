// SPDX-License-Identifier: GPL-2.0
/* The table of allocation policies, by name (see policy.h). */
#include "policy.h"

#include <string.h>

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

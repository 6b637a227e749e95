// SPDX-License-Identifier: GPL-2.0
/*
 * The public policy API (include/rrfuse/policy.h) on the engine: the
 * wrapper that runs an rrp_policy as an mb_policy and the services a policy
 * calls (policies.c loads the policies built outside rrfuse).
 *
 * The engine handle is the allocator itself, opaque to policies.  A
 * request is translated for the policy and its answer back into ac->b_ex,
 * which the engine then checks (mb_guard.c) as any policy's.  The
 * wrapper keeps nothing of its own: the policy's pointer is the engine's
 * policy_priv, and a request costs no allocation and no lock.  Services
 * that find free space work on a scratch copy of the request (the
 * policy's search leaves the request alone) and record in it the group
 * generation they saw, so that an answer they found and another request
 * took meanwhile is a lost race, searched again, not a refusal; the
 * criteria search (mb_search.c) runs in the request itself.
 */
#include "mb_host.h"
#include "mb_plugin.h"
#include "mb_tunables.h"
#include "mballoc.h"
#include "rrfuse/policy.h"
#include "rrfuse/rrctl_wire.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define ENGINE(e) ((struct rr_alloc *)(e))
#define HANDLE(a) ((struct rrp_engine *)(a))

_Thread_local struct mb_ac *mb_pub_ac;
_Thread_local int mb_pub_counted;
/* The request as the engine made it, for rrp_regular (a search may have moved the goal in mb_pub_ac). */
static _Thread_local const struct rrp_request *tl_req;

/* ---- the wrapper ---- */

/* The policy's own pointer is the engine's policy_priv: no state of the wrapper's. */
int mb_plugin_init(struct rr_alloc *a, const struct mb_policy *self)
{
	void *priv = NULL;

	if (self->pub->init && self->pub->init(HANDLE(a), &priv))
		return -1;
	a->policy_priv = priv;
	return 0;
}

void mb_plugin_fini(struct rr_alloc *a, const struct mb_policy *self)
{
	if (self->pub->fini)
		self->pub->fini(HANDLE(a), a->policy_priv);
	a->policy_priv = NULL;
}

static uint32_t request_flags(const struct mb_ac *ac)
{
	static const struct {
		uint32_t hint, flag;
	} as[] = {
		{ MB_HINT_DATA, RRP_DATA }, { MB_HINT_STREAM, RRP_STREAM }, { MB_HINT_GROUP_ALLOC, RRP_SMALL },
		{ MB_HINT_TRY_GOAL, RRP_HAS_GOAL }, { MB_HINT_FILE_GOAL, RRP_FILE_GOAL },
		{ MB_HINT_FIRST_WINDOW, RRP_FIRST_WINDOW }, { MB_HINT_WINDOW, RRP_WINDOW },
		{ MB_HINT_MERGE_GOAL, RRP_MERGE_GOAL },
	};
	uint32_t f = 0;

	for (size_t i = 0; i < sizeof(as) / sizeof(as[0]); i++)
		if (ac->hints & as[i].hint)
			f |= as[i].flag;
	return f;
}

/* An extent in blocks as the engine's (group, start); outside the device it stays outside. */
static void to_ext(const struct rr_alloc *a, const struct rrp_extent *x, struct mb_ext *ex)
{
	if (mb_ext_of(a, x->start, x->len, ex)) {
		ex->group = UINT32_MAX;
		ex->start = 0;
		ex->len = x->len;
	}
}

void mb_plugin_choose(struct rr_alloc *a, const struct mb_policy *self, struct mb_ac *ac)
{
	const struct rrp_request r = {
		.ino = ac->ino,
		.flags = request_flags(ac),
		.lblk = ac->o_ex.logical,
		.len = ac->o_ex.len,
		.goal_len = ac->g_ex.len,
		.goal = mb_block_of(a, &ac->g_ex),
		.cpu = mb_cpu_slot(a),
	};
	struct rrp_extent out = { 0, 0 };
	int ret;

	ac->cr = CR_ANY_FREE;
	mb_pub_ac = ac;
	mb_pub_counted = 0;
	tl_req = &r;
	ret = self->pub->choose(HANDLE(a), ac->priv, &r, &out);
	mb_pub_ac = NULL;
	tl_req = NULL;
	if (ret || !out.len) {
		ac->b_ex.len = 0;
		return;
	}
	to_ext(a, &out, &ac->b_ex);
	ac->status = AC_FOUND;
	/* A criteria search counted its own hit. */
	if (!mb_pub_counted && MB_T(a, mb_stats))
		atomic_fetch_add(&a->stats.cr_hits[CR_ANY_FREE], 1);
}

/* ---- services ---- */

uint32_t rrp_groups(const struct rrp_engine *e)
{
	return ENGINE(e)->ngroups;
}

uint32_t rrp_blocks_per_group(const struct rrp_engine *e)
{
	return ENGINE(e)->bpg;
}

uint64_t rrp_first_data_block(const struct rrp_engine *e)
{
	return ENGINE(e)->first_data_block;
}

uint64_t rrp_blocks(const struct rrp_engine *e)
{
	return ext2fs_blocks_count(ENGINE(e)->fs->super);
}

uint32_t rrp_cpus(const struct rrp_engine *e)
{
	return ENGINE(e)->nlg;
}

unsigned int rrp_max_order(const struct rrp_engine *e)
{
	return ENGINE(e)->max_order;
}

int rrp_flex_meta_group(const struct rrp_engine *e, uint32_t g)
{
	return g < ENGINE(e)->ngroups && mb_flex_meta_group(ENGINE(e), g);
}

void rrp_prefetch(struct rrp_engine *e, uint32_t g)
{
	struct rr_alloc *a = ENGINE(e);

	if (g < a->ngroups)
		mb_prefetch(a, g, a->prefetch);
}

uint32_t rrp_stream_group(const struct rrp_engine *e, uint32_t ino)
{
	const struct rr_alloc *a = ENGINE(e);

	return atomic_load(&a->last_groups[ino % a->nr_last_groups]) % a->ngroups;
}

void rrp_set_stream_group(struct rrp_engine *e, uint32_t ino, uint32_t g)
{
	struct rr_alloc *a = ENGINE(e);

	if (g < a->ngroups)
		atomic_store(&a->last_groups[ino % a->nr_last_groups], g);
}

uint32_t rrp_group_free(const struct rrp_engine *e, uint32_t g)
{
	return g < ENGINE(e)->ngroups ? atomic_load(&ENGINE(e)->groups[g].free) : 0;
}

uint32_t rrp_group_fragments(const struct rrp_engine *e, uint32_t g)
{
	return g < ENGINE(e)->ngroups ? atomic_load(&ENGINE(e)->groups[g].fragments) : 0;
}

/* A search on a copy of the running request; what it found is kept in out and, as seen, in the request. */
static struct mb_ac scratch(uint32_t max)
{
	struct mb_ac s;

	if (mb_pub_ac) {
		s = *mb_pub_ac;
	} else {
		memset(&s, 0, sizeof(s));
		s.seen_group = UINT32_MAX;
	}
	s.g_ex.len = max ? max : 1;
	s.b_ex.len = 0;
	s.status = AC_CONTINUE;
	s.cr = CR_ANY_FREE;
	return s;
}

static int found(struct rr_alloc *a, const struct mb_ac *s, struct rrp_extent *out)
{
	if (mb_pub_ac) {
		mb_pub_ac->seen_group = s->seen_group;
		mb_pub_ac->seen_gen = s->seen_gen;
		mb_pub_ac->groups_scanned = s->groups_scanned;
		mb_pub_ac->found = s->found;
	}
	out->start = mb_block_of(a, &s->b_ex);
	out->len = s->b_ex.len;
	return 0;
}

int rrp_first_fit(struct rrp_engine *e, uint64_t from, uint32_t min, uint32_t max, struct rrp_extent *out)
{
	struct rr_alloc *a = ENGINE(e);
	struct mb_ac s = scratch(max);

	if (!min || !mb_first_fit(a, &s, from, min))
		return -1;
	return found(a, &s, out);
}

int rrp_at_goal(struct rrp_engine *e, uint64_t goal, uint32_t len, struct rrp_extent *out)
{
	struct rr_alloc *a = ENGINE(e);
	struct mb_ac s = scratch(len);

	if (!len || mb_ext_of(a, goal, len, &s.g_ex) || s.g_ex.start + len > a->bpg || !mb_find_by_goal(a, &s))
		return -1;
	return found(a, &s, out);
}

int rrp_find_in_group(struct rrp_engine *e, uint32_t g, uint64_t from, uint32_t min, uint32_t max,
		      struct rrp_extent *out)
{
	struct rr_alloc *a = ENGINE(e);
	uint64_t first = a->first_data_block + (uint64_t)g * a->bpg;
	struct mb_group *grp;
	uint32_t pos, s, l;
	int ret = -1;

	if (g >= a->ngroups || !min || max < min || atomic_load(&a->groups[g].free) < min || mb_load_group(a, g))
		return -1;
	grp = &a->groups[g];
	pos = from > first ? (uint32_t)(from - first) : 0;
	pthread_mutex_lock(&grp->lock);
	for (; pos < grp->buddy->nblocks && !mb_buddy_next_run(grp->buddy, pos, &s, &l); pos = s + l) {
		if (l < min)
			continue;
		out->start = first + s;
		out->len = l < max ? l : max;
		/* Seen free now: taken by another request before the engine uses it, it is a lost race. */
		if (mb_pub_ac) {
			mb_pub_ac->seen_group = g;
			mb_pub_ac->seen_gen = grp->gen;
		}
		ret = 0;
		break;
	}
	pthread_mutex_unlock(&grp->lock);
	return ret;
}

int rrp_list_find(struct rrp_engine *e, int list, int order, uint32_t from, uint32_t end)
{
	struct rr_alloc *a = ENGINE(e);

	if (list < 0 || list >= MB_NLISTS || order < 0 || order > (int)a->max_order || from >= end)
		return -1;
	return mb_list_find(a, list, order, from, end > a->ngroups ? a->ngroups : end);
}

/*
 * regular's answer for the request the engine made (not the one passed:
 * a policy may not ask regular about another).  regular's choose runs
 * directly, not through the wrapper, so the calling policy's request
 * stays set; regular calls no policy, so nothing recurses.
 */
int rrp_regular(struct rrp_engine *e, const struct rrp_request *r, struct rrp_extent *out)
{
	(void)r;
	if (!mb_pub_ac || !tl_req)
		return -1;
	return rrp_policy_regular.choose(e, NULL, tl_req, out) || !out->len ? -1 : 0;
}

int rrp_tunable(const struct rrp_engine *e, const char *name, unsigned int *value)
{
	struct rr_alloc *a = ENGINE(e);
	char buf[RRCTL_VALUE_LEN], err[128];

	if (rr_alloc_tunable_get(&a->t, name, buf, sizeof(buf), err, sizeof(err)))
		return -1;
	return sscanf(buf, "%u", value) == 1 ? 0 : -1;
}

int rrp_tunable_id(const char *name)
{
	return mb_tunable_index(name);
}

unsigned int rrp_tunable_get(const struct rrp_engine *e, int id)
{
	return mb_tunable_load(&ENGINE(e)->t, id);
}

void rrp_log(const struct rrp_engine *e, int prio, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	(void)e;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	mb_log(prio, "policy: %s", line);
}

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The tunables' side the engine's files share (mb_tunables.c): a numeric
 * tunable read by index, for the policy API, and what makes an allocator=
 * or policy_dir= value valid.  A leaf: validation needs no policy loaded,
 * so the names come from policies.def, not from the table of policies.
 */
#ifndef RR_MB_TUNABLES_H
#define RR_MB_TUNABLES_H

#include <stddef.h>

#include "rrfuse/alloc.h"

/* Where allocator=NAME finds NAME.so without policy_dir (meson.build sets it from $libdir). */
#ifndef RRFUSE_POLICY_DIR
#define RRFUSE_POLICY_DIR "/usr/local/lib/rrfuse/policies"
#endif

/* A numeric tunable's index by name (-1: none), and its value read as MB_T does (0: no index). */
int mb_tunable_index(const char *name);
unsigned int mb_tunable_load(const struct rr_alloc_tunables *t, int index);
/* Does name look like a policy: a built-in, a plain name (NAME.so) or a path? */
int mb_policy_name_ok(const char *name);
/* "regular, ..." for messages. */
void mb_policy_names(char *buf, size_t len);

#endif

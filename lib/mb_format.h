/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The kernel's text for the allocator's records (include/rrfuse/rrctl_wire.h):
 * /proc/fs/ext4/DEV/mb_groups and mb_stats.  Pure functions of the records,
 * in one place for rrctl and the daemon, unit-tested in tests/unit.
 */
#ifndef RR_MB_FORMAT_H
#define RR_MB_FORMAT_H

#include <stdio.h>

#include "rrfuse/rrctl_wire.h"

/* The header line of mb_groups. */
void mb_format_groups_header(FILE *f);
/* One group's line; orders above blocksize_bits + 1 print 0, as the kernel's. */
void mb_format_group(FILE *f, const struct rrctl_group *g, unsigned int blocksize_bits);
/* mb_stats, or the kernel's "turned off" text when s->enabled is 0. */
void mb_format_stats(FILE *f, const struct rrctl_stats *s);
/* One line: the policy answers the engine refused, by kind, and the policies it switched off. */
void mb_format_refusals(FILE *f, const struct rrctl_stats *s);

#endif

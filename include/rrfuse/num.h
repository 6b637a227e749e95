/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The one rule for every number an option takes (mount options, and the
 * allocator's tunables also as rrctl sets them): the kernel's mount options
 * (fs_parser's fsparam_u32 is kstrtouint with base 0), so a value means on
 * rrfuse what it means on ext4.
 */
#ifndef RRFUSE_NUM_H
#define RRFUSE_NUM_H

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>

/*
 * An unsigned 32-bit number: decimal, 0x hex or 0 octal, after an optional
 * '+'; the whole string, nothing around it.  0, or -1 with *out unchanged.
 */
static inline int rr_parse_u32(const char *s, unsigned int *out)
{
	unsigned long long v;
	char *end;

	if (!s)
		return -1;
	if (*s == '+')
		s++;
	/* strtoull would also take blanks and a sign, which kstrtouint refuses. */
	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || *end || v > UINT_MAX)
		return -1;
	*out = (unsigned int)v;
	return 0;
}

#endif

// SPDX-License-Identifier: GPL-2.0
/* A block's sum (see sum.h). */
#include "sum.h"

#include <string.h>

uint64_t io_block_sum(const void *buf, unsigned int len)
{
	const unsigned char *p = buf;
	uint64_t h = 0x9E3779B97F4A7C15ULL, w;
	unsigned int i;

	for (i = 0; i + 8 <= len; i += 8) {
		memcpy(&w, p + i, 8);
		h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
		h ^= h >> 29;
	}
	return h ? h : 1;
}

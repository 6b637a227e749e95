/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Growing an array by doubling its capacity: the one helper the daemon's
 * lists (the allocator's included, which sees only include/) grow with.
 */
#ifndef RRFUSE_GROW_H
#define RRFUSE_GROW_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/*
 * *(T **)arrayp, with room for *cap elements of size bytes, made to hold at
 * least need: the capacity doubles, from first on an empty array.  0, or
 * -ENOMEM with the array and *cap as they were.
 */
static inline int rr_grow(void *arrayp, size_t size, size_t *cap, size_t need, size_t first)
{
	size_t n = *cap ? *cap : first;
	void *old, *p;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	/* Through memcpy: arrayp points at a T *, not at a void *. */
	memcpy(&old, arrayp, sizeof(old));
	p = realloc(old, n * size);
	if (!p)
		return -ENOMEM;
	memcpy(arrayp, &p, sizeof(p));
	*cap = n;
	return 0;
}

#endif

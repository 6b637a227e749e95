// SPDX-License-Identifier: GPL-2.0
#include "tool.h"

int tool_answer(int c, const char *name, void (*usage)(FILE *f))
{
	switch (c) {
	case 'h':
		usage(stdout);
		return 0;
	case 'V':
		printf("%s %s\n", name, RRFUSE_VERSION);
		return 0;
	default:
		usage(stderr);
		return 2;
	}
}

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What every command-line tool of rrfuse (rrctl, rrftl, rrmap) answers
 * alike: -h and --help print the usage on stdout, -V and --version print
 * "NAME VERSION", both with exit status 0; an unknown option prints the
 * usage on stderr with exit status 2.
 */
#ifndef RR_TOOL_H
#define RR_TOOL_H

#include <getopt.h>
#include <stdio.h>

/* The end of a tool's getopt_long table: --help, --version and the terminator. */
#define TOOL_OPTIONS_END \
	{ "help", no_argument, NULL, 'h' }, { "version", no_argument, NULL, 'V' }, { NULL, 0, NULL, 0 },

/* The exit status for c ('h', 'V', or anything else: a usage error), having answered it. */
int tool_answer(int c, const char *name, void (*usage)(FILE *f));

#endif

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A daemon that dies leaves a record: fatal signals log a last message and
 * a backtrace to the daemon's log (stderr, or syslog once in the
 * background), then die as they would have, with a core dump where the
 * system allows one.
 */
#ifndef RRFUSE_CRASH_H
#define RRFUSE_CRASH_H

void rr_crash_handlers(void);

#endif

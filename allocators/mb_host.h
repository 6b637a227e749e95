/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the host (the daemon, rrreplay) sets for the whole process, and the
 * allocator's files read: where they log (rr_alloc_set_log) and the CPU a
 * thread's requests are made on (rr_alloc_use_cpu).
 */
#ifndef RR_MB_HOST_H
#define RR_MB_HOST_H

void mb_log(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The CPU requests of this thread are made on (rr_alloc_use_cpu, else the one it runs on). */
int mb_cpu(void);

#endif

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The mount's entry in libmount's utab (/run/mount/utab), root only.
 * umount(8) called with an absolute path reads the mount table, and so
 * finds the fuse.rrfuse type and runs /sbin/umount.fuse.rrfuse, only when
 * the mount point has a utab entry; without one it unmounts directly and
 * returns while the daemon still writes.  rrfuse registers one.
 */
#ifndef RRFUSE_UTAB_H
#define RRFUSE_UTAB_H

void rr_utab_add(const char *source, const char *target);
void rr_utab_remove(const char *target);

#endif

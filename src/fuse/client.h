/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rrfuse's commands on a running mount: unmount and wait until the daemon
 * has let go of the image, and remount read-only or read-write.
 */
#ifndef RRFUSE_CLIENT_H
#define RRFUSE_CLIENT_H

/* Is argv[0] the unmount helper's name (umount.fuse.rrfuse, as umount(8) runs it)? */
int rr_client_is_umount_helper(const char *argv0);
/*
 * rrfuse -u [-z] MOUNTPOINT, or umount.fuse.rrfuse MOUNTPOINT [-flnrv]
 * [-t TYPE] [-N NS] (umount(8)'s helper interface): the exit status.
 */
int rr_client_unmount(int argc, char *argv[]);
/* mount -o remount,ro|rw MOUNTPOINT, as mount.fuse3 runs rrfuse for it: the exit status. */
int rr_client_remount(const char *mountpoint, int ro);

#endif

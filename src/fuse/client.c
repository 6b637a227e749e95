// SPDX-License-Identifier: GPL-2.0
/*
 * rrfuse's commands on a running mount.
 *
 * Unmount.  Once the kernel has dropped a plain FUSE mount, umount(2)
 * returns, while the daemon is still writing delayed data and metadata
 * out; only a fuseblk mount's umount waits for the daemon (its DESTROY).
 * The daemon holds a lock on the image (src/io/dev.c) from open to close, so
 * "unmount, then wait for that lock" returns only when the image is
 * complete: this is rrfuse -u, and umount(8) runs it as the helper
 * umount.fuse.rrfuse when that is installed.
 *
 * Remount.  FUSE does not pass a remount on to the daemon, and mount.fuse3
 * runs "rrfuse IMAGE MOUNTPOINT -o remount,..." for it; that command does
 * the kernel's remount and tells the running daemon (RRCTL_REMOUNT) in the
 * order that keeps the image consistent: to ro, the kernel first (no new
 * writes; its dirty pages reach the daemon), then the daemon writes out and
 * marks the image clean; to rw, the daemon first, then the kernel.
 */
#include "client.h"
#include "dev.h"
#include "mountinfo.h"
#include "rrfuse/rrctl_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* How long rrfuse -u waits for the daemon to finish writing the image out. */
#define CLIENT_WAIT_SECS 600
/* Say what is being waited for once the wait has taken this long. */
#define CLIENT_NOTE_MS 1000
#define CLIENT_POLL_MS 10
/*
 * A path walk that crosses the mount holds it for as long as its request
 * takes (a mount of the same image starting beside this unmount resolves
 * the mount point through the old daemon, which may be busy writing): such
 * an EBUSY passes, so umount is tried again for this long before it counts.
 */
#define CLIENT_BUSY_MS 2000
/* umount(8)'s exit status for a failed unmount. */
#define CLIENT_EXIT_UMOUNT_FAILED 32

#define UMOUNT_HELPER "umount.fuse.rrfuse"

int rr_client_is_umount_helper(const char *argv0)
{
	const char *base = strrchr(argv0, '/');

	base = base ? base + 1 : argv0;
	return !strncmp(base, "umount.", 7);
}

static long ms_since(const struct timespec *t0)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
}

/* Unprivileged: fusermount3 unmounts what the user mounted. */
static int run_fusermount(const char *mnt, int lazy)
{
	int status;
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		execlp("fusermount3", "fusermount3", lazy ? "-uz" : "-u", "--", mnt, (char *)NULL);
		fprintf(stderr, "rrfuse: cannot run fusermount3: %s\n", strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EBUSY;
}

/*
 * Wait for the daemon's lock on the image (fd) to go; 0, -ETIMEDOUT, or
 * -EBUSY when the superblock lives on in another mount of it (a bind
 * mount): the daemon goes on serving it.  A mount in another namespace, or
 * a lazily detached one still in use, is not seen: the wait ends when it
 * goes, or after CLIENT_WAIT_SECS.
 */
static int wait_for_daemon(int fd, const struct rr_mnt *m)
{
	const char *source = m->source;
	struct timespec t0;
	int noted = 0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (flock(fd, LOCK_SH | LOCK_NB)) {
		long ms = ms_since(&t0);

		if (errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		if (rr_mnt_still_mounted(m) > 0)
			return -EBUSY;
		if (ms >= CLIENT_WAIT_SECS * 1000L)
			return -ETIMEDOUT;
		/* A note for someone watching; scripts and umount(8) get silence. */
		if (ms >= CLIENT_NOTE_MS && !noted && isatty(STDERR_FILENO)) {
			long pid = io_lock_holder(fd);

			if (pid > 0)
				fprintf(stderr, "rrfuse: waiting for the daemon (process %ld) to finish "
					"writing %s\n", pid, source);
			else
				fprintf(stderr, "rrfuse: waiting for the daemon to finish writing %s\n", source);
			noted = 1;
		}
		usleep(CLIENT_POLL_MS * 1000);
	}
	flock(fd, LOCK_UN);
	return 0;
}

/* umount2 as root, tried again while the mount is only momentarily busy: 0 or -errno. */
static int umount_root(const char *target, int flags)
{
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (umount2(target, flags)) {
		if (errno != EBUSY || ms_since(&t0) >= CLIENT_BUSY_MS)
			return -errno;
		usleep(CLIENT_POLL_MS * 1000);
	}
	return 0;
}

int rr_client_unmount(int argc, char *argv[])
{
	int helper = rr_client_is_umount_helper(argv[0]), lazy = 0, force = 0, fd, ret, i;
	const char *mnt = NULL;
	struct rr_mnt m;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "-u") && !helper)
			continue;
		if (!strcmp(a, "-t") || !strcmp(a, "-N")) {
			i++;	/* umount(8): the type, a namespace */
			continue;
		}
		if (a[0] == '-' && a[1]) {
			lazy |= strchr(a, 'l') || strchr(a, 'z');
			force |= strchr(a, 'f') != NULL;
			continue;
		}
		if (mnt) {
			fprintf(stderr, "rrfuse: unmount one mount point at a time\n");
			return 1;
		}
		mnt = a;
	}
	if (!mnt) {
		fprintf(stderr, "usage: rrfuse -u [-z] MOUNTPOINT\n");
		return 1;
	}
	ret = rr_mnt_at(mnt, &m);
	if (ret) {
		fprintf(stderr, "rrfuse: %s: %s\n", mnt, ret == -ENOENT ? "not mounted" : strerror(-ret));
		return CLIENT_EXIT_UMOUNT_FAILED;
	}
	if (!rr_mnt_is_rrfuse(&m)) {
		fprintf(stderr, "rrfuse: %s is a %s mount, not rrfuse's\n", m.target, m.fstype);
		return CLIENT_EXIT_UMOUNT_FAILED;
	}
	/* Before the unmount: the image the daemon locks, whatever the path names later. */
	fd = open(m.source, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		fprintf(stderr, "rrfuse: %s: %s: cannot wait for the daemon to finish writing it\n",
			m.source, strerror(errno));
	if (geteuid() == 0)
		ret = umount_root(m.target, (lazy ? MNT_DETACH : 0) | (force ? MNT_FORCE : 0));
	else
		ret = run_fusermount(m.target, lazy);
	if (ret) {
		if (geteuid() == 0)
			fprintf(stderr, "rrfuse: unmounting %s: %s\n", m.target, strerror(-ret));
		if (fd >= 0)
			close(fd);
		return CLIENT_EXIT_UMOUNT_FAILED;
	}
	/* Lazy: the daemon finishes when the last user of the mount goes, maybe much later. */
	if (fd < 0 || lazy) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	ret = wait_for_daemon(fd, &m);
	close(fd);
	/* Mounted elsewhere: this mount point is gone, as asked; the last unmount waits. */
	if (ret == -EBUSY)
		return 0;
	if (ret) {
		fprintf(stderr, "rrfuse: %s is still held after %d s: the daemon has not finished; "
			"do not check or mount it yet\n", m.source, CLIENT_WAIT_SECS);
		return 1;
	}
	return 0;
}

/* The per-mount flags a remount must give again or lose. */
static unsigned long mount_flags(const struct rr_mnt *m)
{
	static const struct {
		const char *opt;
		unsigned long flag;
	} keep[] = {
		{ "nosuid", MS_NOSUID }, { "nodev", MS_NODEV }, { "noexec", MS_NOEXEC },
		{ "noatime", MS_NOATIME }, { "nodiratime", MS_NODIRATIME },
		{ "relatime", MS_RELATIME }, { "strictatime", MS_STRICTATIME },
	};
	unsigned long flags = 0;
	size_t i;

	for (i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
		if (rr_mnt_has_opt(m, keep[i].opt))
			flags |= keep[i].flag;
	return flags;
}

/* Tell the daemon; 0 or 1 with the reason printed. */
static int tell_daemon(int dfd, const char *mnt, int ro)
{
	struct rrctl_remount r = { .version = RRCTL_VERSION, .ro = (uint32_t)ro };

	if (ioctl(dfd, RRCTL_REMOUNT, &r)) {
		fprintf(stderr, "rrfuse: %s: the daemon did not take the remount: %s\n", mnt,
			strerror(errno));
		return 1;
	}
	if (r.result) {
		r.err[sizeof(r.err) - 1] = 0;
		fprintf(stderr, "rrfuse: %s: remount %s refused: %s\n", mnt, ro ? "ro" : "rw",
			r.err[0] ? r.err : strerror(r.result));
		return 1;
	}
	return 0;
}

int rr_client_remount(const char *mountpoint, int ro)
{
	unsigned long flags;
	struct rr_mnt m;
	int dfd, ret;

	ret = rr_mnt_at(mountpoint, &m);
	if (ret || !rr_mnt_is_rrfuse(&m)) {
		fprintf(stderr, "rrfuse: remount: %s is not an rrfuse mount\n", mountpoint);
		return 1;
	}
	flags = MS_REMOUNT | mount_flags(&m);
	dfd = open(m.target, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		fprintf(stderr, "rrfuse: %s: %s\n", m.target, strerror(errno));
		return 1;
	}
	if (ro) {
		if (mount(NULL, m.target, NULL, flags | MS_RDONLY, NULL)) {
			fprintf(stderr, "rrfuse: remounting %s read-only: %s\n", m.target,
				errno == EBUSY ? "files are open for writing" : strerror(errno));
			close(dfd);
			return CLIENT_EXIT_UMOUNT_FAILED;
		}
		ret = tell_daemon(dfd, m.target, 1);
	} else {
		ret = tell_daemon(dfd, m.target, 0);
		if (!ret && mount(NULL, m.target, NULL, flags, NULL)) {
			fprintf(stderr, "rrfuse: remounting %s read-write: %s\n", m.target, strerror(errno));
			tell_daemon(dfd, m.target, 1);
			ret = CLIENT_EXIT_UMOUNT_FAILED;
		}
	}
	close(dfd);
	return ret;
}

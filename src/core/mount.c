// SPDX-License-Identifier: GPL-2.0
/*
 * Mounting and unmounting: open the image through the I/O layer, check it
 * (imgcheck.c), attach the allocator and the orphan list, mark it in use and
 * finish what a crash left; at unmount write everything out and mark it
 * clean again.
 */
#include "rrfs.h"
#include "dev.h"
#include "layer.h"
#include "recover.h"
#include "log.h"
#include "orphan.h"
#include "error.h"
#include "imgcheck.h"
#include "mountinfo.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

/* The allocator takes the fs lock itself when an unlocked request must load a group. */
static void host_lock(void *rfs)
{
	rr_fs_lock(rfs);
}

static void host_unlock(void *rfs)
{
	rr_fs_unlock(rfs);
}

/*
 * Open rfs's image through the I/O stack (src/io/layer.h), read-write if
 * rw, with the mount's settings: read-write and exclusive as flags (the
 * device's open needs them), the rest as io_options for the layers that
 * take them.  *devro: it refused writing (a read-only file or device), so
 * it is open read-only.
 */
static errcode_t open_image(const struct rr_fs *rfs, int rw, int *devro, ext2_filsys *fs)
{
	/*
	 * FORCE: libext2fs would refuse unknown features without naming them;
	 * check_features() does.  SKIP_MMP: multi-mount protection starts only
	 * once the image is accepted (mmp_begin), so a refusal writes nothing.
	 * EXCLUSIVE: a block device held with O_EXCL, unless the kernel is to
	 * claim it (fuseblk).
	 */
	int flags = EXT2_FLAG_64BITS | EXT2_FLAG_FORCE | EXT2_FLAG_SKIP_MMP |
		    (rfs->opts.fuseblk ? 0 : EXT2_FLAG_EXCLUSIVE);
	char options[64];
	int n;
	errcode_t err;

	n = snprintf(options, sizeof(options), "cache_mb=%u", rfs->opts.cache_mb);
	if (rfs->opts.trace)
		snprintf(options + n, sizeof(options) - (size_t)n, "&trace=%#" PRIxPTR, (uintptr_t)rfs->opts.trace);
	*devro = 0;
	err = ext2fs_open2(rfs->device, options, flags | (rw ? EXT2_FLAG_RW : 0), 0, 0, io_stack_top(), fs);
	if (rw && (err == EACCES || err == EROFS || err == EPERM)) {
		err = ext2fs_open2(rfs->device, options, flags, 0, 0, io_stack_top(), fs);
		*devro = !err;
	}
	/*
	 * Bitmaps as red-black trees of extents, not bit arrays: a bit array is
	 * a bit per block whether used or not (512 MiB of block bitmap for 16
	 * TiB), filled at mount; the tree grows with the number of used and free
	 * extents.  The engine tests bits through its buddies, not this map.
	 */
	if (!err)
		(*fs)->default_bitmap_type = EXT2FS_BMAP64_RBTREE;
	return err;
}

/*
 * A read-only mount still finishes a crash's orphans, as the kernel's does
 * ("orphan cleanup on readonly fs"), unless the image cannot be written.
 * Returns 1 when fs was reopened read-write for that, 0 otherwise.
 */
static int want_readonly_cleanup(const struct rr_fs *rfs, const char *unwritable, ext2_filsys *fs)
{
	int devro;

	if (!orphans_pending(*fs) || ((*fs)->super->s_state & EXT2_ERROR_FS))
		return 0;
	if (unwritable) {
		rr_log(LOG_WARNING, "%s is not writable by rrfuse: skipping orphan cleanup", unwritable);
		return 0;
	}
	ext2fs_close_free(fs);
	if (!open_image(rfs, 1, &devro, fs) && !devro)
		return 1;
	rr_log(LOG_WARNING, "write access unavailable, skipping orphan cleanup");
	if (!devro)
		open_image(rfs, 0, &devro, fs);
	return 0;
}

/* Metadata that cannot be read or written: a filesystem error (the data path's are not). */
/* ch: the fs's channel, whose app_data attach_errors points at the mount with these handlers. */
static errcode_t metadata_io_error(io_channel ch, unsigned long block, errcode_t error, const char *what)
{
	rr_log(LOG_ERR, "I/O error %s metadata block %lu: %s", what, block, error_message(error));
	rr_fs_io_error(ch->app_data, error, block);
	return error;
}

static errcode_t metadata_read_error(io_channel ch, unsigned long block, int count, void *data,
				     size_t size, int actual, errcode_t error)
{
	(void)count, (void)data, (void)size, (void)actual;
	return metadata_io_error(ch, block, error, "reading");
}

static errcode_t metadata_write_error(io_channel ch, unsigned long block, int count,
				      const void *data, size_t size, int actual, errcode_t error)
{
	(void)count, (void)data, (void)size, (void)actual;
	return metadata_io_error(ch, block, error, "writing");
}

/*
 * From now on rfs's errors are recorded (error.h), metadata I/O's too: the
 * cache calls these handlers (without its lock) for what fails underneath
 * it, and they find the mount in the channel's app_data, the
 * application's (libext2fs sets it to the fs at open and never reads it).
 */
static void attach_errors(struct rr_fs *rfs, int behaviour)
{
	rfs->fs->io->app_data = rfs;
	rfs->fs->io->read_error = metadata_read_error;
	rfs->fs->io->write_error = metadata_write_error;
	rr_error_attach(rfs, behaviour);
}

/*
 * Multi-mount protection, for a writable mount of an image that has it: as
 * e2fsck and the kernel, watch the MMP block for twice its check interval
 * (so mounting takes that long), then mark it in use until unmount (then
 * clean again); another node, e2fsck or kernel finds it taken meanwhile.
 */
static int mmp_begin(ext2_filsys fs, const char *device, char *msg, size_t msglen)
{
	errcode_t err;

	if (!ext2fs_has_feature_mmp(fs->super) || !(fs->flags & EXT2_FLAG_RW))
		return 0;
	rr_log(LOG_NOTICE, "%s: multi-mount protection: making sure no other node uses it", device);
	fs->flags &= ~EXT2_FLAG_SKIP_MMP;
	err = ext2fs_mmp_start(fs);
	if (!err)
		return 0;
	fs->flags |= EXT2_FLAG_SKIP_MMP;	/* leave the MMP block to whoever holds it */
	snprintf(msg, msglen, "%s: multi-mount protection: %s", device, error_message(err));
	return -EBUSY;
}

/*
 * The kernel crashed, or was shut down, with the image mounted: its journal
 * holds what it made durable.  Replayed here as the kernel's mount replays
 * it, on the image opened read-write for the purpose even for a read-only
 * mount ("recovery required on readonly filesystem"); then the image is
 * opened again from scratch, since the replay may have rewritten the
 * superblock, descriptors and bitmaps libext2fs read.  norecovery: a
 * read-only mount without replay (*unreplayed set), as the kernel's.
 * On failure *fs is closed.
 */
static int recover_journal(const struct rr_fs *rfs, int ro, int devro, int norecovery, ext2_filsys *fs,
			   int *unreplayed, char *msg, size_t msglen)
{
	const char *device = rfs->device;
	errcode_t err = 0;
	int ret, dro = 0;

	*unreplayed = 0;
	if (norecovery) {
		if (!ro) {
			snprintf(msg, msglen, "%s: the journal needs recovery: norecovery (noload) skips it only on a read-only mount (-o ro)",
				 device);
			ext2fs_close_free(fs);
			return -EINVAL;
		}
		rr_log(LOG_WARNING, "%s: norecovery: the journal needing recovery is not replayed: what it holds is not seen, "
		       "and nothing is written", device);
		*unreplayed = 1;
		return 0;
	}
	if (!devro && !((*fs)->flags & EXT2_FLAG_RW)) {
		ext2fs_close_free(fs);
		err = open_image(rfs, 1, &dro, fs);
	}
	if (devro || err || dro) {
		if (*fs)
			ext2fs_close_free(fs);
		snprintf(msg, msglen, "%s: the journal needs recovery but the image is not writable: cannot proceed "
			 "(mount with -o ro,norecovery)", device);
		return -EROFS;
	}
	if (ro)
		rr_log(LOG_INFO, "%s: recovery required on readonly filesystem: write access enabled for it", device);
	ret = mmp_begin(*fs, device, msg, msglen);
	if (!ret)
		ret = jr_recover(*fs, msg, msglen);
	/*
	 * Nothing libext2fs read before the replay may be written back over
	 * it: closed as read-only (a read-write close may write the superblock).
	 */
	if (ext2fs_has_feature_mmp((*fs)->super) && !((*fs)->flags & EXT2_FLAG_SKIP_MMP))
		ext2fs_mmp_stop(*fs);
	(*fs)->flags &= ~(EXT2_FLAG_RW | EXT2_FLAG_DIRTY | EXT2_FLAG_BB_DIRTY | EXT2_FLAG_IB_DIRTY);
	ext2fs_close_free(fs);
	if (ret)
		return ret;
	err = open_image(rfs, !ro, &dro, fs);
	if (err) {
		snprintf(msg, msglen, "%s: cannot open the image again after journal recovery: %s", device,
			 error_message(err));
		return -EIO;
	}
	return 0;
}

/*
 * How long a mount of the image may take to go away before a new one is
 * refused: an unmount may be under way (umount in the background, then
 * mount at once: fstests generic/604).  Its daemon's last writes are waited
 * for afterwards, on the image's lock (src/io/dev.c).
 */
#define MOUNTED_GRACE_MS 2000
#define MOUNTED_POLL_MS 20

/* Has m gone within the grace period?  1 once it has, 0 if it stays. */
static int mount_goes_away(const struct rr_mnt *m)
{
	int waited;

	for (waited = 0; waited < MOUNTED_GRACE_MS; waited += MOUNTED_POLL_MS) {
		if (rr_mnt_still_mounted(m) == 0)
			return 1;
		usleep(MOUNTED_POLL_MS * 1000);
	}
	return rr_mnt_still_mounted(m) == 0;
}

/*
 * Open the image and check it as the kernel would before mounting: not
 * mounted elsewhere, features and geometry, the journal replayed if it
 * needs recovery (checked again after).  *ro is set when the device is
 * write-protected (*devro).  0 with *fsp open, or -errno with msg.
 */
static int open_checked(const struct rr_fs *rfs, int norecovery, int *ro, int *devro, int *unreplayed,
			ext2_filsys *fsp, char *msg, size_t msglen)
{
	const char *device = rfs->device;
	struct rr_mnt mnt;
	errcode_t err;
	int ret;

	/* Mounted already, and staying: say where. */
	if (!rr_mnt_of(device, &mnt) && !mount_goes_away(&mnt)) {
		snprintf(msg, msglen, "%s is in use: mounted on %s (%s), and an image is mounted once at a time",
			 device, mnt.target, mnt.fstype);
		return -EBUSY;
	}
	err = open_image(rfs, !*ro, devro, fsp);
	if (*devro) {
		/* A read-only image file or device: like the kernel, fall back to ro. */
		rr_log(LOG_WARNING, "%s is write-protected: mounting read-only", device);
		*ro = 1;
	}
	if (err) {
		if (err == EBUSY)
			snprintf(msg, msglen, "%s is in use (mounted, or opened by another program)", device);
		else if (err == EXT2_ET_BAD_MAGIC)
			snprintf(msg, msglen, "%s: not an ext2/3/4 filesystem (bad superblock magic)", device);
		else
			snprintf(msg, msglen, "%s: %s", device, error_message(err));
		return -EINVAL;
	}
	ret = check_features(*fsp, msg, msglen);
	if (!ret)
		ret = check_geometry(*fsp, device, msg, msglen);
	/* As the kernel: the superblock and descriptors are checked before the journal is loaded, and after. */
	if (!ret && ext2fs_has_feature_journal_needs_recovery((*fsp)->super)) {
		ret = recover_journal(rfs, *ro, *devro, norecovery, fsp, unreplayed, msg, msglen);
		if (!ret && !*unreplayed)
			ret = check_features(*fsp, msg, msglen);
		if (!ret && !*unreplayed)
			ret = check_geometry(*fsp, device, msg, msglen);
		if (!ret && !*unreplayed && ext2fs_has_feature_journal_needs_recovery((*fsp)->super)) {
			snprintf(msg, msglen, "%s: the journal still needs recovery after the replay", device);
			ret = -EIO;
		}
	}
	if (ret) {
		if (*fsp) {
			(*fsp)->flags &= ~(EXT2_FLAG_DIRTY | EXT2_FLAG_BB_DIRTY | EXT2_FLAG_IB_DIRTY);
			ext2fs_close_free(fsp);
		}
		return ret;
	}
	if ((*fsp)->blocksize > 65536 || EXT2FS_CLUSTER_RATIO(*fsp) != 1) {
		snprintf(msg, msglen, "unsupported block/cluster size");
		ext2fs_close_free(fsp);
		return -EOPNOTSUPP;
	}
	return 0;
}

/* The allocator's tunables that the mount decides when the options leave them open. */
static void alloc_defaults(struct rr_fs *rfs, const char *device)
{
	if (!rfs->opts.alloc.policy[0])
		rr_alloc_tunables_default(&rfs->opts.alloc);
	/* -o check also has the allocator verify its buddies after every change. */
	rfs->opts.alloc.check |= (unsigned int)rfs->opts.check;
	/* As ext4_mb_init (MB_DEFAULT_LINEAR_LIMIT on a rotational device). */
	if (rfs->opts.alloc.mb_max_linear_groups == RR_TUNABLE_AT_MOUNT)
		rfs->opts.alloc.mb_max_linear_groups = io_dev_rotational(device) ? 4 : 0;
}

int rr_fs_open(struct rr_fs *rfs, const char *device, const struct rr_opts *opts,
	       const struct rr_data_hooks *hooks, char *msg, size_t msglen)
{
	ext2_filsys fs = NULL;
	const char *unwritable;
	char why[64];
	errcode_t err;
	int ret, ro = opts->ro, devro = 0, unreplayed = 0;

	memset(rfs, 0, sizeof(*rfs));
	rfs->hooks = hooks;
	rfs->opts = *opts;
	rfs->device = device;
	pthread_mutex_init(&rfs->lock, NULL);
	rr_error_init(rfs);
	pthread_mutex_init(&rfs->commit_lock, NULL);
	pthread_cond_init(&rfs->commit_cond, NULL);
	pthread_mutex_init(&rfs->delayed.lock, NULL);
	pthread_mutex_init(&rfs->delayed.writeback, NULL);

	ret = open_checked(rfs, opts->norecovery, &ro, &devro, &unreplayed, &fs, msg, msglen);
	if (ret)
		return ret;
	unwritable = check_unwritable(fs, why, sizeof(why));
	if (devro && orphans_pending(fs))
		rr_log(LOG_WARNING, "write access unavailable, skipping orphan cleanup");
	if (unreplayed && orphans_pending(fs))
		rr_log(LOG_WARNING, "%s: the journal was not replayed: skipping orphan cleanup", device);
	if (unwritable && !ro) {
		rr_log(LOG_WARNING, "%s is not writable by rrfuse: mounting read-only", unwritable);
		ro = 1;
	} else if (ro && !devro && !unreplayed) {
		rfs->ro_cleanup = want_readonly_cleanup(rfs, unwritable, &fs);
		if (!fs) {
			snprintf(msg, msglen, "%s: cannot reopen the image", device);
			return -EIO;
		}
	}
	ret = mmp_begin(fs, device, msg, msglen);
	if (ret) {
		ext2fs_close_free(&fs);
		return ret;
	}
	err = rr_bitmaps_read(fs, &rfs->bitmaps);
	if (err) {
		snprintf(msg, msglen, "%s: cannot read bitmaps: %s", device, error_message(err));
		ext2fs_close_free(&fs);
		return -EIO;
	}

	rfs->fs = fs;
	/*
	 * As the kernel: commits write the primary superblock and group
	 * descriptors, never the backups (what mke2fs, resize2fs or e2fsck
	 * wrote there stays; e2fsck compares their static fields, not counts).
	 * On 16 TiB, the backups were thousands of writes at every commit.
	 */
	fs->flags |= EXT2_FLAG_MASTER_SB_ONLY;
	rfs->dev = fs->io;
	rfs->bsize = fs->blocksize;
	rfs->bbits = (unsigned int)(__builtin_ctz(fs->blocksize));
	ret = io_set_direct(rfs->dev, rfs->opts.direct, msg, msglen);
	if (ret) {
		ext2fs_close_free(&fs);
		rr_bitmaps_free(&rfs->bitmaps);
		rfs->fs = NULL;
		return ret;
	}
	rfs->orig_state = fs->super->s_state;
	if (!(fs->super->s_state & EXT2_VALID_FS))
		rr_log(LOG_WARNING, "warning: mounting unchecked fs, running e2fsck is recommended");
	else if (fs->super->s_state & EXT2_ERROR_FS)
		rr_log(LOG_WARNING, "warning: mounting fs with errors, running e2fsck is recommended");

	ret = rr_itab_init(&rfs->itab);
	alloc_defaults(rfs, device);
	if (!ret && (!ro || rfs->ro_cleanup))
		ret = rr_alloc_attach(fs, &rfs->opts.alloc, &rfs->alloc);
	if (rfs->alloc) {
		rr_alloc_set_lock(rfs->alloc, host_lock, host_unlock, rfs);
		rr_alloc_set_commit(rfs->alloc, rr_fs_commit_for_alloc, rfs);
	}
	if (!ret && (!ro || rfs->ro_cleanup)) {
		ret = orphan_init(rfs, msg, msglen);
		if (ret && ret != -ENOMEM) {
			rr_log(LOG_WARNING, "%s: %s: %s; run e2fsck", device, msg,
			       ro ? "skipping orphan cleanup" : "mounting read-only");
			ro = 1;
			rfs->ro_cleanup = 0;
			rr_alloc_detach(rfs->alloc);
			rfs->alloc = NULL;
			ret = 0;
		}
	}
	if (ret) {
		if (ret == -ENOMEM)
			snprintf(msg, msglen, "out of memory");
		orphan_destroy(rfs);
		if (rfs->alloc)
			rr_alloc_detach(rfs->alloc);
		ext2fs_close_free(&rfs->fs);
		rr_bitmaps_free(&rfs->bitmaps);
		return ret;
	}
	if (ro && !rfs->ro_cleanup)
		fs->flags &= ~EXT2_FLAG_RW;
	attach_errors(rfs, opts->errors);
	rfs->ro = ro;
	rfs->opts.ro = ro;
	rfs->overhead = check_overhead_blocks(fs);
	return 0;
}

/* "orphan cleanup on readonly fs": writable for as long as that takes. */
static int cleanup_readonly(struct rr_fs *rfs)
{
	int ret;

	rr_log(LOG_NOTICE, "orphan cleanup on readonly fs");
	rfs->ro = 0;
	orphan_cleanup(rfs);
	ret = rr_fs_commit(rfs, 1);
	rfs->ro = 1;
	rfs->ro_cleanup = 0;
	ext2fs_mmp_stop(rfs->fs);	/* read-only from here: the MMP block is clean again */
	rfs->fs->flags &= ~EXT2_FLAG_RW;
	rr_alloc_detach(rfs->alloc);
	rfs->alloc = NULL;
	return ret;
}

/*
 * Record in the superblock that the filesystem is in use (at mount, and at a
 * remount read-write).  As the kernel's ext4 (ext4_setup_super): with the
 * journal written, needs_recovery says so and s_state stays valid, so that
 * after a crash a replay is all it takes, the kernel's mount and e2fsck -p
 * check nothing more; without it, s_state loses EXT2_VALID_FS so that
 * e2fsck checks the image in full.  The journal starts first: from here on
 * every commit is a transaction, this one too.
 */
int rr_fs_mark_in_use(struct rr_fs *rfs, int new_mount)
{
	ext2_filsys fs = rfs->fs;
	int ret = rr_journal_start(rfs);

	if (ret)
		return ret;
	rr_fs_lock(rfs);
	if (!rfs->jw)
		fs->super->s_state &= (__u16)~EXT2_VALID_FS;
	if (new_mount)
		fs->super->s_mnt_count++;
	fs->super->s_mtime = (__u32)time(NULL);
	ext2fs_mark_super_dirty(fs);
	rfs->mounted = 1;
	rr_fs_unlock(rfs);
	return rr_fs_commit(rfs, 1);
}

/*
 * Record the mount in the superblock (rr_fs_mark_in_use).  Nothing is
 * written to the image before this.  Then finish the orphans a crash
 * left, as the kernel does at mount.
 */
int rr_fs_mark_mounted(struct rr_fs *rfs)
{
	ext2_filsys fs = rfs->fs;
	int ret;

	if (rfs->ro)
		return rfs->ro_cleanup ? cleanup_readonly(rfs) : 0;
	ret = rr_fs_mark_in_use(rfs, 1);
	/* After the mark: a crash while finishing orphans is replayed, or leaves an unclean image. */
	if (!ret && orphans_pending(fs)) {
		orphan_cleanup(rfs);
		ret = rr_fs_commit(rfs, 1);
	}
	return ret;
}

int rr_fs_close(struct rr_fs *rfs)
{
	errcode_t err;
	int ret = 0;

	if (rfs->commit_running) {
		pthread_mutex_lock(&rfs->commit_lock);
		rfs->commit_stop = 1;
		pthread_cond_signal(&rfs->commit_cond);
		pthread_mutex_unlock(&rfs->commit_lock);
		pthread_join(rfs->commit_thread, NULL);
		rfs->commit_running = 0;
	}
	if (!rfs->fs)
		return 0;
	if (!rfs->ro && rr_fs_flush_delayed(rfs, RR_FLUSH_ALL))
		rr_log(LOG_ERR, "unmount: delayed data could not be written: it is lost");
	rr_itab_empty(rfs);
	free(rfs->delayed.inos);
	rfs->delayed.inos = NULL;
	free(rfs->dirblk[0]);
	free(rfs->dirblk[1]);
	rfs->dirblk[0] = rfs->dirblk[1] = NULL;
	if (rfs->mounted) {
		orphan_commit(rfs);
		/*
		 * Every file is closed and forgotten now: what is still listed
		 * (a truncate that failed, say with ENOSPC halfway) is finished
		 * here, as the mount would, so that a clean image has no orphans.
		 */
		if (orphans_pending(rfs->fs) || rfs->orphans.of_used) {
			rr_log(LOG_NOTICE, "unmount: finishing orphans left on the list");
			orphan_cleanup(rfs);
			orphan_commit(rfs);
		}
		/* A clean unmount: the state the image had when we mounted it, and any error since. */
		rr_error_commit(rfs);
		rfs->fs->super->s_state = rfs->orig_state;
		if (rfs->fs->super->s_last_orphan || rfs->orphans.of_used) {
			rr_log(LOG_WARNING, "orphans left on the list: leaving the image marked not clean; "
			       "the next mount or e2fsck finishes them");
			rfs->fs->super->s_state &= (__u16)~EXT2_VALID_FS;
		}
		rfs->fs->super->s_wtime = (__u32)time(NULL);
		ext2fs_mark_super_dirty(rfs->fs);
	}
	/* Empty since the orphan cleanup dropped what it looked up. */
	rr_itab_destroy(rfs);
	if (rfs->alloc)
		rr_alloc_detach(rfs->alloc);
	rfs->alloc = NULL;
	if (rfs->mounted) {
		err = rr_fs_flush(rfs, 0);
		if (err)
			ret = rr_err(rfs, err);
		/* The last transaction checkpointed, then needs_recovery cleared (the kernel's order). */
		if (!ret)
			ret = rr_journal_stop(rfs);
	}
	if (!rfs->mounted)
		rfs->fs->flags &= ~(EXT2_FLAG_DIRTY | EXT2_FLAG_BB_DIRTY | EXT2_FLAG_IB_DIRTY);
	err = ext2fs_close_free(&rfs->fs);
	if (err && !ret)
		ret = rr_err(rfs, err);
	rr_bitmaps_free(&rfs->bitmaps);
	orphan_destroy(rfs);
	free(rfs->check_written.v);
	rfs->check_written.v = NULL;
	rfs->check_written.n = rfs->check_written.cap = 0;
	rr_error_detach(rfs);
	return ret;
}

/*
 * mount -o remount,ro|rw, told by rrfuse's remount command beside the
 * kernel's own remount (FUSE does not pass that on).  As ext4_remount: to
 * read-only, delayed data gets its blocks, everything is committed and the
 * superblock says "clean" again; to read-write, it says "in use" and
 * changes are accepted.  The image stays open for writing underneath, so
 * rw comes back only for a mount that started read-write.
 */
int rr_fs_remount(struct rr_fs *rfs, int ro, char *err, size_t errlen)
{
	ext2_filsys fs = rfs->fs;
	int ret;

	if (!fs)
		return -ESHUTDOWN;
	if (!ro) {
		if (!rfs->alloc || !(fs->flags & EXT2_FLAG_RW)) {
			snprintf(err, errlen, "mounted read-only from the start: unmount and mount read-write");
			return -EROFS;
		}
		if (!rfs->ro)
			return 0;
		atomic_store(&rfs->ro, 0);
		ret = rr_fs_mark_in_use(rfs, 0);
		if (ret) {
			atomic_store(&rfs->ro, 1);
			snprintf(err, errlen, "cannot start the journal or write the superblock: %s",
				 strerror(-ret));
			return ret;
		}
		return 0;
	}
	if (rfs->ro && !rfs->mounted)
		return 0;
	ret = rr_fs_flush_delayed(rfs, RR_FLUSH_ALL);
	if (!ret)
		ret = rr_fs_commit(rfs, 0);
	if (ret) {
		snprintf(err, errlen, "writing out before going read-only: %s", strerror(-ret));
		return ret;
	}
	rr_fs_lock(rfs);
	atomic_store(&rfs->ro, 1);
	rr_error_commit(rfs);
	orphan_commit(rfs);
	fs->super->s_state = rfs->orig_state;
	fs->super->s_wtime = (__u32)time(NULL);
	ext2fs_mark_super_dirty(fs);
	ret = rr_err(rfs, rr_fs_flush(rfs, EXT2_FLAG_FLUSH_NO_SYNC));
	if (!ret)
		rfs->mounted = 0;	/* clean: nothing more to write until rw */
	rr_fs_end_op(rfs);
	if (!ret)
		ret = rr_err(rfs, io_channel_flush(rfs->fs->io));
	if (!ret)
		ret = rr_journal_stop(rfs);
	if (ret)
		snprintf(err, errlen, "cannot write the superblock: %s", strerror(-ret));
	return ret;
}

void rr_fs_statfs(struct rr_fs *rfs, struct statvfs *st)
{
	struct ext2_super_block *sb = rfs->fs->super;
	uint64_t free_blocks, resv;

	memset(st, 0, sizeof(*st));
	rr_fs_lock(rfs);
	/*
	 * Blocks promised to delayed data are not free (ext4: free minus dirty
	 * clusters), nor those taken by writes still running.
	 */
	free_blocks = rfs->alloc ? rr_alloc_free(rfs->alloc) : ext2fs_free_blocks_count(sb);
	resv = ext2fs_r_blocks_count(sb) + (rfs->alloc ? rr_alloc_meta_reserve(rfs->alloc) : 0);
	st->f_bsize = rfs->bsize;
	st->f_frsize = rfs->bsize;
	st->f_blocks = ext2fs_blocks_count(sb) - rfs->overhead;
	st->f_bfree = free_blocks;
	st->f_bavail = free_blocks > resv ? free_blocks - resv : 0;
	st->f_files = sb->s_inodes_count;
	st->f_ffree = sb->s_free_inodes_count;
	st->f_favail = sb->s_free_inodes_count;
	st->f_namemax = EXT2_NAME_LEN;
	st->f_fsid = *(unsigned long *)sb->s_uuid;
	rr_fs_end_op(rfs);
}

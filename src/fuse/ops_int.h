/* SPDX-License-Identifier: GPL-2.0 */
#ifndef RRFUSE_OPS_INT_H
#define RRFUSE_OPS_INT_H

/* What the files of the FUSE operation table (ops*.c) share. */
#include "ops.h"
#include "dir.h"
#include "rrfs.h"

/* rrfuse is the only writer of the image: the kernel may cache for long. */
#define RR_TIMEOUT 1.0

/*
 * A file handle remembers whether its opener may use the root-reserved
 * blocks: writeback WRITE requests come from the kernel's flusher with no
 * caller credentials of their own.
 */
#define RR_FH_PRIVILEGED 1
#define RR_FH_WRITER 2		/* counted in ri->nwriters */

static inline struct rr_fs *rr_fs_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static inline ext2_ino_t e2ino(fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? EXT2_ROOT_INO : (ext2_ino_t)ino;
}

static inline fuse_ino_t fuseino(ext2_ino_t ino)
{
	return ino == EXT2_ROOT_INO ? FUSE_ROOT_ID : ino;
}

/*
 * How long the kernel may keep an inode's attributes.  Not at all for an
 * immutable one: under the writeback cache a write() reaches rrfuse only
 * as a GETATTR on the open file when the attributes are stale (rr_getattr
 * refuses it), so cached ones would let writes into the page cache.
 */
static inline double attr_timeout(const struct ext2_inode_large *in)
{
	return in->i_flags & EXT2_IMMUTABLE_FL ? 0 : RR_TIMEOUT;
}

/* The in-memory inode of a node the kernel holds a reference to, pinned: rr_iunpin() when done. */
struct rr_inode *ops_node(struct rr_fs *rfs, fuse_ino_t ino);
/* The caller's credentials. */
void ops_cred(fuse_req_t req, struct rr_cred *cr);
/* The caller may use the root-reserved blocks. */
int ops_is_root(fuse_req_t req);
/* 1 if the mount is writable; else replies EROFS and returns 0. */
int ops_check_rw(fuse_req_t req);
void ops_fill_entry(struct rr_fs *rfs, ext2_ino_t ino, const struct ext2_inode_large *in,
		    struct fuse_entry_param *e);
/*
 * A write or an fallocate drops the set-id bits: no SETATTR follows, so the
 * kernel's copy of the mode is stale until it hears.
 */
int ops_drop_suidgid(fuse_req_t req, fuse_ino_t fino);

/* The handlers of ops_file.c, ops_dir.c and ops_ioctl.c, for rr_ops. */
void rr_open(fuse_req_t req, fuse_ino_t fino, struct fuse_file_info *fi);
void rr_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
	       struct fuse_file_info *fi);
void rr_read(fuse_req_t req, fuse_ino_t fino, size_t size, off_t off, struct fuse_file_info *fi);
void rr_write(fuse_req_t req, fuse_ino_t fino, const char *buf, size_t size, off_t off,
	      struct fuse_file_info *fi);
void rr_release(fuse_req_t req, fuse_ino_t fino, struct fuse_file_info *fi);
void rr_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void rr_fallocate(fuse_req_t req, fuse_ino_t fino, int mode, off_t off, off_t len,
		  struct fuse_file_info *fi);
void rr_lseek(fuse_req_t req, fuse_ino_t fino, off_t off, int whence, struct fuse_file_info *fi);
void rr_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void rr_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void rr_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void rr_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void rr_ioctl(fuse_req_t req, fuse_ino_t fino, unsigned int cmd, void *arg, struct fuse_file_info *fi,
	      unsigned flags, const void *in_buf, size_t in_bufsz, size_t out_bufsz);

#endif

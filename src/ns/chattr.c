// SPDX-License-Identifier: GPL-2.0
/*
 * An inode's flags as lsattr shows them and chattr changes them, in both
 * of the kernel's spellings (inode flags and FS_XFLAG_*).
 */
#include "chattr.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

/*
 * The inode flags lsattr shows, as ext4's EXT4_FL_USER_VISIBLE.  chattr's
 * changes reach a FUSE server masked to the VFS's FS_FL_USER_MODIFIABLE (the
 * kernel's fileattr_fill_flags), so the other bits are never changed here.
 */
#define RR_FL_VISIBLE		0x705BDFFFu
#define RR_FL_SETTABLE		FS_FL_USER_MODIFIABLE
/* What FS_IOC_FSSETXATTR sets: the flags of xflag_map below. */
#define RR_FL_XSETTABLE		(EXT2_SYNC_FL | EXT2_IMMUTABLE_FL | EXT2_APPEND_FL | EXT2_NODUMP_FL | \
				 EXT2_NOATIME_FL | EXT4_PROJINHERIT_FL)

/* ext4 inode flags and their FS_IOC_FSGETXATTR names (ext4_iflags_to_xflags). */
static const struct {
	unsigned int fl, xfl;
} xflag_map[] = {
	{ EXT2_SYNC_FL, FS_XFLAG_SYNC },
	{ EXT2_IMMUTABLE_FL, FS_XFLAG_IMMUTABLE },
	{ EXT2_APPEND_FL, FS_XFLAG_APPEND },
	{ EXT2_NODUMP_FL, FS_XFLAG_NODUMP },
	{ EXT2_NOATIME_FL, FS_XFLAG_NOATIME },
	{ EXT4_PROJINHERIT_FL, FS_XFLAG_PROJINHERIT },
};

/* v's bits of one column of xflag_map (to_x: the inode flags) as the other column's. */
static unsigned int map_flags(unsigned int v, int to_x)
{
	unsigned int out = 0;
	size_t i;

	for (i = 0; i < sizeof(xflag_map) / sizeof(xflag_map[0]); i++)
		if (v & (to_x ? xflag_map[i].fl : xflag_map[i].xfl))
			out |= to_x ? xflag_map[i].xfl : xflag_map[i].fl;
	return out;
}

static unsigned int projid_of(const struct ext2_inode_large *in)
{
	size_t end = offsetof(struct ext2_inode_large, i_projid) + sizeof(in->i_projid);

	return (size_t)EXT2_GOOD_OLD_INODE_SIZE + in->i_extra_isize >= end ? in->i_projid : 0;
}

/* want: the new flags, of which only the bits in mask are changed. */
static int set_flags(struct rr_fs *rfs, ext2_ino_t ino, const struct rr_cred *cr, unsigned int want,
		     unsigned int mask)
{
	struct ext2_inode_large in;
	struct rr_inode *ri;
	unsigned int changed;
	int ret;

	if (rfs->ro)
		return -EROFS;
	rr_fs_lock(rfs);
	ret = inode_load(rfs, ino, &in);
	if (ret)
		goto out;
	changed = (in.i_flags ^ want) & mask;
	if (cr->uid != 0 && cr->uid != inode_uid(in))
		ret = -EPERM;		/* inode_owner_or_capable() */
	else if ((changed & RR_FL_GUARD) && cr->uid != 0)
		ret = -EPERM;		/* CAP_LINUX_IMMUTABLE */
	if (ret || !changed)
		goto out;
	in.i_flags = (in.i_flags & ~mask) | (want & mask);
	inode_touch(&in, RR_CTIME);
	ret = inode_write(rfs, ino, &in);
	ri = ret ? NULL : rr_ipin(rfs, ino);
	if (ri) {
		atomic_store(&ri->guard, in.i_flags & RR_FL_GUARD);
		rr_iunpin(rfs, ri);
	}
out:
	rr_fs_end_op(rfs);
	return ret;
}

int chattr_get_flags(struct rr_fs *rfs, ext2_ino_t ino, unsigned int *flags)
{
	struct ext2_inode_large in;
	int ret = inode_read(rfs, ino, &in);

	*flags = ret ? 0 : in.i_flags & RR_FL_VISIBLE;
	return ret;
}

int chattr_set_flags(struct rr_fs *rfs, ext2_ino_t ino, const struct rr_cred *cr, unsigned int flags)
{
	struct ext2_inode_large in;
	int ret = inode_read(rfs, ino, &in);

	return ret ? ret : set_flags(rfs, ino, cr, flags, RR_FL_SETTABLE);
}

int chattr_get_xattr(struct rr_fs *rfs, ext2_ino_t ino, struct fsxattr *fa)
{
	struct ext2_inode_large in;
	int ret = inode_read(rfs, ino, &in);

	memset(fa, 0, sizeof(*fa));
	if (!ret) {
		fa->fsx_xflags = map_flags(in.i_flags, 1);
		fa->fsx_projid = projid_of(&in);
	}
	return ret;
}

int chattr_set_xattr(struct rr_fs *rfs, ext2_ino_t ino, const struct rr_cred *cr, const struct fsxattr *fa)
{
	struct ext2_inode_large in;
	int ret = inode_read(rfs, ino, &in);

	if (ret)
		return ret;
	/* Project ids are not managed here (the quota feature mounts read-only). */
	if ((fa->fsx_xflags & ~map_flags(~0u, 1)) || fa->fsx_projid != projid_of(&in))
		return -EOPNOTSUPP;
	return set_flags(rfs, ino, cr, map_flags(fa->fsx_xflags, 0), RR_FL_XSETTABLE);
}

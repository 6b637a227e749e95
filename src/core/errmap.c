// SPDX-License-Identifier: GPL-2.0
/*
 * The one place where libext2fs error codes become errnos (negative, as
 * everything inside rrfuse returns them); a code that means corruption is a
 * filesystem error, recorded where it was met (error.c).
 */
#include "rrfs.h"
#include "error.h"
#include "log.h"

#include <errno.h>

int rr_err_at(struct rr_fs *rfs, errcode_t err, ext2_ino_t ino, const char *func, unsigned int line)
{
	if (!err)
		return 0;
	/* The io manager and libc return plain errnos; an I/O error was recorded below us. */
	if (err > 0 && err < 4096) {
		rr_error_attribute(rfs, ino, func, line);
		return -(int)err;
	}
	switch (err) {
	case EXT2_ET_NO_MEMORY:
		return -ENOMEM;
	case EXT2_ET_RO_FILSYS:
	case EXT2_ET_RO_UNSUPP_FEATURE:
		return -EROFS;
	case EXT2_ET_DIR_NO_SPACE:
	case EXT2_ET_BLOCK_ALLOC_FAIL:
	case EXT2_ET_INODE_ALLOC_FAIL:
	case EXT2_ET_EA_NO_SPACE:
	case EXT2_ET_TOOSMALL:
		return -ENOSPC;
	case EXT2_ET_FILE_NOT_FOUND:
		return -ENOENT;
	case EXT2_ET_DIR_EXISTS:
	case EXT2_ET_FILE_EXISTS:
		return -EEXIST;
	case EXT2_ET_TOO_MANY_REFS:
		return -EMLINK;
	case EXT2_ET_EA_KEY_NOT_FOUND:
		return -ENODATA;
	case EXT2_ET_FILE_TOO_BIG:
	case EXT2_ET_EXTENT_NOT_SUPPORTED:
		return -EFBIG;
	case EXT2_ET_UNIMPLEMENTED:
	case EXT2_ET_OP_NOT_SUPPORTED:
		return -EOPNOTSUPP;
	case EXT2_ET_NO_DIRECTORY:
		return -ENOTDIR;
	case EXT2_ET_INVALID_ARGUMENT:
		return -EINVAL;
	default:
		/* Corruption, checksum failures, bad block numbers: EIO, logged, errors= applies. */
		if (ino)
			rr_log(LOG_ERR, "filesystem error in %s, inode %u: %s", func, ino, error_message(err));
		else
			rr_log(LOG_ERR, "filesystem error in %s: %s", func, error_message(err));
		rr_fs_error_at(rfs, err, ino, 0, func, line);
		return -EIO;
	}
}

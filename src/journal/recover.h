/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Journal recovery at mount, as the kernel's jbd2 and e2fsck do it: the
 * transactions the kernel committed to the journal of an ext4 image that
 * was not unmounted cleanly are written to their home blocks.
 */
#ifndef RRFUSE_JOURNAL_RECOVER_H
#define RRFUSE_JOURNAL_RECOVER_H

#include <stddef.h>
#include <ext2fs/ext2fs.h>

/*
 * Replay fs's journal (fs opened read-write; its superblock says
 * needs_recovery) straight to the device under fs's I/O stack, flush, mark
 * the journal empty and clear needs_recovery in the superblock on the
 * device.  fs's in-memory state is stale afterwards: the caller closes it
 * (without writing anything) and opens the image again.  0, or a negative
 * errno with the reason in msg: the mount is refused.  Nothing is written
 * when the journal or a tag is found corrupt before the replay; a logged
 * block with a bad checksum is skipped and the rest replayed, as the
 * kernel does, and the journal is then left needing recovery.
 */
int jr_recover(ext2_filsys fs, char *msg, size_t msglen);

#endif

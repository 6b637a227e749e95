/* SPDX-License-Identifier: GPL-2.0 */
#ifndef RRFUSE_ORPHAN_INT_H
#define RRFUSE_ORPHAN_INT_H

/* The orphan list's insides that its recovery at mount (orphan_recover.c) uses. */
#include "orphan.h"
#include "rrfs.h"

/* Under orphans.lock: a new entry for ino in the index (slot -1: on the legacy list), or NULL. */
struct orphan_ent *orphan_ent_new(struct rr_orphans *o, ext2_ino_t ino, int32_t slot);
/* Under orphans.lock: e becomes the newest orphan of the legacy list. */
void orphan_ent_push(struct rr_orphans *o, struct orphan_ent *e);
/* The orphan file's block blk as read at mount: its slots. */
__le32 *orphan_file_slots(struct rr_fs *rfs, unsigned int blk);
/* Under orphans.lock: zero slot, on disk. */
int orphan_file_clear(struct rr_fs *rfs, int32_t slot);

#endif

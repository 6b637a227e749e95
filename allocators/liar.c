// SPDX-License-Identifier: GPL-2.0
/*
 * The "liar" policy: fault injection for the engine's answer checks
 * (mb_guard.c), as -o check is for its invariants.  Of every four
 * requests, data or metadata, one is answered honestly (by regular) and
 * three with a block no allocator may hand out, in turn:
 *  - outside the device: a group past the last, or a run across the last
 *    group's end;
 *  - metadata: group 0's inode table, or the last group's block bitmap;
 *  - in use: the root directory's first block (a directory never gives
 *    its first block back while the filesystem is mounted).
 * The engine must refuse every lie and serve the request by regular, then
 * switch the policy off; the image must stay e2fsck-clean.  At detach the
 * lies told are logged by kind, for the tests to compare with rrctl -s.
 * Nothing else should ever run it.
 */
#include "mb_host.h"
#include "policies.h"

#include <stdlib.h>
#include <syslog.h>

struct liar {
	atomic_uint turn;
	atomic_uint told[MB_NREFUSE];
	uint64_t used_blk;		/* the root directory's first block */
};

static int liar_init(struct rr_alloc *a, const struct mb_policy *self)
{
	struct liar *l = calloc(1, sizeof(*l));
	blk64_t blk = 0;

	(void)self;
	if (!l)
		return -1;
	/* Under the fs lock: libext2fs may be read here. */
	if (ext2fs_bmap2(a->fs, EXT2_ROOT_INO, NULL, NULL, 0, 0, NULL, &blk) || !blk) {
		free(l);
		return -1;
	}
	l->used_blk = blk;
	a->policy_priv = l;
	return 0;
}

static void liar_fini(struct rr_alloc *a, const struct mb_policy *self)
{
	struct liar *l = a->policy_priv;

	(void)self;
	mb_log(LOG_INFO, "liar: lies told: %u outside the device, %u in metadata, %u in use",
	       atomic_load(&l->told[MB_REFUSE_OUTSIDE]), atomic_load(&l->told[MB_REFUSE_METADATA]),
	       atomic_load(&l->told[MB_REFUSE_USED]));
	free(l);
	a->policy_priv = NULL;
}

static void at_block(const struct rr_alloc *a, struct mb_ac *ac, uint64_t blk, uint32_t len)
{
	ac->b_ex.group = (uint32_t)((blk - a->first_data_block) / a->bpg);
	ac->b_ex.start = (uint32_t)((blk - a->first_data_block) % a->bpg);
	ac->b_ex.len = len;
}

static void liar_choose(struct rr_alloc *a, const struct mb_policy *self, struct mb_ac *ac)
{
	struct liar *l = ac->priv;
	unsigned int t = atomic_fetch_add(&l->turn, 1);
	uint32_t last = a->ngroups - 1;
	enum mb_refusal kind;

	(void)self;
	switch (t % 4) {
	case 0:
		ac->priv = NULL;
		mb_policy_regular.choose(a, &mb_policy_regular, ac);
		return;
	case 1:
		kind = MB_REFUSE_OUTSIDE;
		if (t & 4) {
			ac->b_ex.group = a->ngroups;
			ac->b_ex.start = 0;
			ac->b_ex.len = 1;
		} else {
			uint64_t end = ext2fs_blocks_count(a->fs->super);

			at_block(a, ac, end - 1, 2);
		}
		break;
	case 2:
		kind = MB_REFUSE_METADATA;
		at_block(a, ac, t & 4 ? ext2fs_inode_table_loc(a->fs, 0) : ext2fs_block_bitmap_loc(a->fs, last),
			 1);
		break;
	default:
		kind = MB_REFUSE_USED;
		at_block(a, ac, l->used_blk, 1);
		break;
	}
	atomic_fetch_add(&l->told[kind], 1);
	ac->status = AC_FOUND;
}

const struct mb_policy mb_policy_liar = {
	.name = "liar",
	.init = liar_init,
	.fini = liar_fini,
	.choose = liar_choose,
};

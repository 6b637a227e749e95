/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the journal's unit tests share: a small ext4 image with a 1 MiB
 * journal, a recording io_channel to put under the journal writer, and the
 * journal's map (to tell a log block from a home block in what was
 * recorded).
 *
 * The recorder is an io_manager of the test's own, in memory, over the
 * fs's unix_io channel: test_jwriter.c puts it under the writer alone.
 * test_jstack.c uses rrfuse's own recorder (io/record.c), which needs the
 * whole stack, and reads its file back into the same events.
 */
#ifndef RRFUSE_TESTS_JTEST_H
#define RRFUSE_TESTS_JTEST_H

#include "unit.h"

#include <errno.h>
#include <string.h>
#include <sys/wait.h>

#include "journal.h"
#include "writer.h"
#include "recover.h"
#include "layer.h"

/*
 * 1 KiB blocks so that mke2fs's smallest journal (1024 blocks, the least
 * e2fsck accepts) is a ring a test fills with a few transactions.
 */
#define JT_SIZE "24M"
#define JT_MKFS "-b 1024 -J size=1"

enum jt_kind {
	JT_WRITE = 'W',		/* one block written (a multi-block write is split, in order) */
	JT_FLUSH = 'F',
	JT_MARK = 'M',		/* the test's own: where it called what (jt_mark) */
};

struct jt_ev {
	int kind;
	int mark;		/* JT_MARK: what ('L' jw_log called, 'R' it returned, 'C' jw_close called) */
	uint32_t arg;		/* JT_MARK: the transaction id it is about */
	blk64_t blk;		/* JT_WRITE: the filesystem block */
	unsigned char *data;	/* JT_WRITE: a copy of the block written */
};

struct jt_rec {
	io_channel lower;	/* the fs's own channel: every write goes on to it */
	unsigned int bsize;
	struct jt_ev *ev;
	size_t n, cap;
	int fail_flush;		/* fail every flush from now on (a device error) */
};

static inline struct jt_ev *jt_push(struct jt_rec *r, int kind)
{
	struct jt_ev *e;

	if (r->n == r->cap) {
		r->cap = r->cap ? r->cap * 2 : 256;
		r->ev = realloc(r->ev, r->cap * sizeof(*r->ev));
		ck_assert_ptr_nonnull(r->ev);
	}
	e = &r->ev[r->n++];
	memset(e, 0, sizeof(*e));
	e->kind = kind;
	return e;
}

static inline void jt_mark(io_channel ch, int mark, uint32_t arg)
{
	struct jt_ev *e = jt_push(ch->private_data, JT_MARK);

	e->mark = mark;
	e->arg = arg;
}

static errcode_t jt_rec_read(io_channel ch, unsigned long long blk, int count, void *buf)
{
	struct jt_rec *r = ch->private_data;

	return io_channel_read_blk64(r->lower, blk, count, buf);
}

static errcode_t jt_rec_write(io_channel ch, unsigned long long blk, int count, const void *buf)
{
	struct jt_rec *r = ch->private_data;
	const unsigned char *p = buf;
	int i;

	/* The journal writes whole blocks only: a byte count would be a bug here. */
	ck_assert_int_gt(count, 0);
	for (i = 0; i < count; i++) {
		struct jt_ev *e = jt_push(r, JT_WRITE);

		e->blk = blk + (blk64_t)i;
		e->data = malloc(r->bsize);
		ck_assert_ptr_nonnull(e->data);
		memcpy(e->data, p + (size_t)i * r->bsize, r->bsize);
	}
	return io_channel_write_blk64(r->lower, blk, count, buf);
}

static errcode_t jt_rec_flush(io_channel ch)
{
	struct jt_rec *r = ch->private_data;

	if (r->fail_flush)
		return EIO;
	jt_push(r, JT_FLUSH);
	return io_channel_flush(r->lower);
}

static errcode_t jt_rec_set_blksize(io_channel ch, int blksize)
{
	ch->block_size = blksize;
	return 0;
}

static struct struct_io_manager jt_rec_manager = {
	.magic = EXT2_ET_MAGIC_IO_MANAGER,
	.name = "jtest recorder",
	.set_blksize = jt_rec_set_blksize,
	.read_blk = io_read_blk32,
	.write_blk = io_write_blk32,
	.flush = jt_rec_flush,
	.read_blk64 = jt_rec_read,
	.write_blk64 = jt_rec_write,
};

/* A recorder over fs's channel; jt_rec_free undoes it (never io_channel_close: fs owns lower). */
static inline io_channel jt_rec_new(ext2_filsys fs)
{
	io_channel ch = calloc(1, sizeof(*ch));
	struct jt_rec *r = calloc(1, sizeof(*r));

	ck_assert_ptr_nonnull(ch);
	ck_assert_ptr_nonnull(r);
	r->lower = fs->io;
	r->bsize = fs->blocksize;
	ch->magic = EXT2_ET_MAGIC_IO_CHANNEL;
	ch->manager = &jt_rec_manager;
	ch->block_size = (int)fs->blocksize;
	ch->refcount = 1;
	ch->private_data = r;
	return ch;
}

static inline void jt_rec_forget(io_channel ch)
{
	struct jt_rec *r = ch->private_data;

	for (size_t i = 0; i < r->n; i++)
		free(r->ev[i].data);
	r->n = 0;
}

static inline void jt_rec_free(io_channel ch)
{
	struct jt_rec *r = ch->private_data;

	jt_rec_forget(ch);
	free(r->ev);
	free(r);
	free(ch);
}

/* Journal block of filesystem block b, or -1: not the journal's. */
static inline int64_t jt_logical(const struct jnl *j, blk64_t b)
{
	for (size_t i = 0; i < j->nruns; i++)
		if (b >= j->runs[i].physical && b < j->runs[i].physical + j->runs[i].len)
			return (int64_t)(j->runs[i].logical + (b - j->runs[i].physical));
	return -1;
}

/* Filesystem block of journal block l. */
static inline blk64_t jt_physical(const struct jnl *j, uint32_t l)
{
	for (size_t i = 0; i < j->nruns; i++)
		if (l >= j->runs[i].logical && l < j->runs[i].logical + j->runs[i].len)
			return j->runs[i].physical + (l - j->runs[i].logical);
	ck_abort_msg("journal block %u is not mapped", l);
	return 0;
}

/*
 * Files a test made, unlinked after it even when it fails (a failed check
 * leaves the test at once, CK_FORK=no or not): jt_cleanup is every test
 * case's checked teardown.
 */
#define JT_TRACK_MAX 8
static char jt_tracked[JT_TRACK_MAX][128];

static inline void jt_track(const char *path)
{
	for (int i = 0; i < JT_TRACK_MAX; i++)
		if (!jt_tracked[i][0]) {
			snprintf(jt_tracked[i], sizeof(jt_tracked[i]), "%s", path);
			return;
		}
	ck_abort_msg("more than %d files in one test", JT_TRACK_MAX);
}

static void jt_cleanup(void)
{
	for (int i = 0; i < JT_TRACK_MAX; i++)
		if (jt_tracked[i][0]) {
			unlink(jt_tracked[i]);
			jt_tracked[i][0] = 0;
		}
}

/*
 * unit_image's image, its channel uncached: read back through unix_io's
 * own small cache after the writer's first write (superblock and log
 * blocks in one multi-block write), the journal superblock came back as
 * it was before (seen here with e2fsprogs 1.47.0); the tests read what is
 * on the file.
 */
static inline ext2_filsys jt_image(char *path, const char *mkfs_args)
{
	ext2_filsys fs = unit_image(path, JT_SIZE, mkfs_args);

	jt_track(path);
	ck_assert_int_eq(io_channel_set_options(fs->io, "cache=off"), 0);
	return fs;
}

/* n free blocks in a row, past the metadata of the first groups: homes for test blocks. */
static inline blk64_t jt_free_run(ext2_filsys fs, unsigned int n)
{
	blk64_t b;

	ck_assert_int_eq(ext2fs_get_free_blocks2(fs, ext2fs_blocks_count(fs->super) / 2,
						 ext2fs_blocks_count(fs->super) - 1, n, fs->block_map, &b), 0);
	return b;
}

/* A block's test content: its home, a version and a fill that differ from block to block. */
static inline void jt_fill(unsigned char *buf, unsigned int bsize, blk64_t home, unsigned int version)
{
	for (unsigned int i = 0; i < bsize; i++)
		buf[i] = (unsigned char)(home * 131 + version * 7 + i);
	memcpy(buf, &home, sizeof(home));
	memcpy(buf + sizeof(home), &version, sizeof(version));
}

/* "e2fsck -fn" on path: its exit status (0: clean). */
static inline int jt_fsck(const char *path)
{
	char cmd[256];
	int st;

	snprintf(cmd, sizeof(cmd), "e2fsck -fn %s >/dev/null 2>&1", path);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 255;
}

#endif

// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests: journal recovery (jr_recover) on small logs the writer made
 * and a crash left behind, some then edited byte by byte, in the manner of
 * e2fsprogs' tests/j_*: each case states what the home blocks must hold
 * after the replay, what jr_recover answers, and what it leaves in the
 * journal's superblock and the filesystem's needs_recovery flag.
 *
 * A crash is jw_abort then jw_close: the writer frees itself and writes
 * nothing more, so the log stays as the last flush left it (the writer
 * flushes before every jw_log returns, and the channel is uncached).  Home
 * blocks are free blocks of the image, so that whatever they hold, e2fsck
 * has nothing to say; where the log is one e2fsck replays too, its replay
 * (on a copy) is the oracle for ours.
 */
#include "jtest.h"

#include <fcntl.h>

#define NBLK 400

struct jr_env {
	char path[64];
	ext2_filsys fs;
	struct jw *w;
	blk64_t base;			/* NBLK free blocks: the homes */
	unsigned int bsize;
	unsigned int version[NBLK];	/* what each home should hold after the replay */
	unsigned char *buf;
};

/* Home k written with version ver straight to the device (0: what it held before any transaction). */
static void put_home(struct jr_env *v, unsigned int k, unsigned int ver)
{
	jt_fill(v->buf, v->bsize, v->base + k, ver);
	ck_assert_int_eq(io_channel_write_blk64(v->fs->io, v->base + k, 1, v->buf), 0);
}

static void env_open(struct jr_env *v, const char *mkfs)
{
	char msg[256];

	memset(v, 0, sizeof(*v));
	v->fs = jt_image(v->path, mkfs);
	v->bsize = v->fs->blocksize;
	v->buf = malloc(v->bsize);
	v->base = jt_free_run(v->fs, NBLK);
	for (unsigned int k = 0; k < NBLK; k++)
		put_home(v, k, 0);
	ck_assert_msg(!jw_open(v->fs, v->fs->io, &v->w, msg, sizeof(msg)), "jw_open: %s", msg);
}

/*
 * Blocks [k0, k0+n) logged at version ver as one transaction; written home
 * (and so expected at ver whatever the replay does) when home is set.
 * Block k0 begins with the journal magic when magic is set (it is escaped
 * in the log).  The transaction's id.
 */
static uint32_t txn(struct jr_env *v, unsigned int k0, unsigned int n, unsigned int ver, int home, int magic)
{
	blk64_t blks[NBLK];
	unsigned char *data[NBLK];
	uint64_t count;
	uint32_t seq;

	jw_stats(v->w, &count, &seq);
	for (unsigned int i = 0; i < n; i++) {
		blks[i] = v->base + k0 + i;
		data[i] = malloc(v->bsize);
		jt_fill(data[i], v->bsize, blks[i], ver);
	}
	if (magic)
		jf_put_be32(data[0], JF_MAGIC);
	ck_assert_int_eq(jw_log(v->w, n, blks, (const unsigned char *const *)data), 0);
	for (unsigned int i = 0; home && i < n; i++)
		ck_assert_int_eq(io_channel_write_blk64(v->fs->io, blks[i], 1, data[i]), 0);
	ck_assert_int_eq(jw_checkpointed(v->w), 0);
	for (unsigned int i = 0; i < n; i++)
		free(data[i]);
	return seq;
}

/* The daemon killed: the log as the writer left it, needs_recovery set, the image closed. */
static void crash(struct jr_env *v)
{
	jw_abort(v->w);
	ck_assert_int_eq(jw_close(v->w), 0);
	v->w = NULL;
	ext2fs_set_feature_journal_needs_recovery(v->fs->super);
	ext2fs_mark_super_dirty(v->fs);
	ck_assert_int_eq(ext2fs_close_free(&v->fs), 0);
}

/* The journal of the closed image, to edit (jnl_*), and its filesystem; jnl_edit_done closes both. */
static ext2_filsys edit_open(struct jr_env *v, struct jnl *j)
{
	ext2_filsys fs;
	char msg[256];

	ck_assert_int_eq(ext2fs_open(v->path, EXT2_FLAG_RW | EXT2_FLAG_64BITS, 0, 0, unix_io_manager, &fs), 0);
	ck_assert_int_eq(io_channel_set_options(fs->io, "cache=off"), 0);
	ck_assert_msg(!jnl_open(fs, j, msg, sizeof(msg)), "jnl_open: %s", msg);
	return fs;
}

static void edit_done(ext2_filsys fs, struct jnl *j)
{
	ck_assert_int_eq(io_channel_flush(fs->io), 0);
	jnl_close(j);
	ext2fs_free(fs);
}

/* The journal's superblock rewritten to name transaction seq from log block start. */
static void name_transaction(struct jr_env *v, uint32_t seq, uint32_t start)
{
	struct jnl j;
	ext2_filsys fs = edit_open(v, &j);

	j.sb->s_sequence = htobe32(seq);
	j.sb->s_start = htobe32(start);
	ck_assert_int_eq(jnl_write_sb(&j), 0);
	edit_done(fs, &j);
}

/* The first log block of transaction seq at or after block from, by its descriptor's header. */
static uint32_t find_block(struct jr_env *v, uint32_t type, uint32_t seq, uint32_t from)
{
	struct jnl j;
	ext2_filsys fs = edit_open(v, &j);
	unsigned char *b = malloc(j.bsize);
	uint32_t l = from;

	for (uint32_t i = 0; i < j.last - j.first; i++, l = jnl_next(&j, l, 1)) {
		ck_assert_int_eq(jnl_read(&j, l, b), 0);
		if (jf_be32_at(b) == JF_MAGIC && jf_be32_at(b + 4) == type && jf_be32_at(b + 8) == seq)
			break;
	}
	ck_assert_msg(jf_be32_at(b) == JF_MAGIC && jf_be32_at(b + 4) == type && jf_be32_at(b + 8) == seq,
		      "no block of type %u in transaction %u", type, seq);
	free(b);
	edit_done(fs, &j);
	return l;
}

/* Byte off of log block l xor-ed with x. */
static void flip(struct jr_env *v, uint32_t l, size_t off, unsigned char x)
{
	struct jnl j;
	ext2_filsys fs = edit_open(v, &j);
	unsigned char *b = malloc(j.bsize);

	ck_assert_int_eq(jnl_read(&j, l, b), 0);
	b[off] ^= x;
	ck_assert_int_eq(jnl_write(&j, l, 1, b), 0);
	free(b);
	edit_done(fs, &j);
}

/* The journal superblock's s_start and s_sequence now. */
static void journal_state(struct jr_env *v, uint32_t *start, uint32_t *seq)
{
	struct jnl j;
	ext2_filsys fs = edit_open(v, &j);

	*start = be32toh(j.sb->s_start);
	*seq = be32toh(j.sb->s_sequence);
	edit_done(fs, &j);
}

/* jr_recover on the image as rrfuse's mount calls it: its answer, msg its reason. */
static int recover(struct jr_env *v, char *msg, size_t msglen)
{
	ext2_filsys fs;
	int ret;

	msg[0] = 0;
	ck_assert_int_eq(ext2fs_open(v->path, EXT2_FLAG_RW | EXT2_FLAG_64BITS, 0, 0, unix_io_manager, &fs), 0);
	ck_assert_int_eq(io_channel_set_options(fs->io, "cache=off"), 0);
	ck_assert(ext2fs_has_feature_journal_needs_recovery(fs->super));
	ret = jr_recover(fs, msg, msglen);
	/* Its in-memory state is stale: dropped unwritten, as the mount does. */
	ext2fs_free(fs);
	return ret;
}

static int needs_recovery(const char *path)
{
	ext2_filsys fs;
	int r;

	ck_assert_int_eq(ext2fs_open(path, EXT2_FLAG_64BITS, 0, 0, unix_io_manager, &fs), 0);
	r = ext2fs_has_feature_journal_needs_recovery(fs->super);
	ext2fs_close_free(&fs);
	return r;
}

/* Each home of path holds the version v->version says (the first 4 bytes restored when escaped). */
static void check_homes(struct jr_env *v, const char *path, const char *who)
{
	int fd = open(path, O_RDONLY);
	unsigned char *want = malloc(v->bsize), *got = malloc(v->bsize);

	ck_assert_int_ge(fd, 0);
	for (unsigned int k = 0; k < NBLK; k++) {
		ck_assert_int_eq(pread(fd, got, v->bsize, (off_t)((v->base + k) * v->bsize)), (ssize_t)v->bsize);
		jt_fill(want, v->bsize, v->base + k, v->version[k]);
		if (jf_be32_at(got) == JF_MAGIC)
			jf_put_be32(want, JF_MAGIC);
		if (memcmp(want, got, v->bsize)) {
			unsigned int found;

			memcpy(&found, got + sizeof(blk64_t), sizeof(found));
			ck_abort_msg("%s: home %u (block %llu) holds version %u, not %u", who, k,
				     (unsigned long long)(v->base + k), found, v->version[k]);
		}
	}
	close(fd);
	free(want);
	free(got);
}

/* e2fsck's replay of the same log, on a copy: the homes must come out the same. */
static void check_e2fsck_agrees(struct jr_env *v, const char *copy)
{
	check_homes(v, copy, "e2fsck's replay");
	unlink(copy);
}

/* A copy of the image before the replay, replayed by "e2fsck -fy". */
static void e2fsck_replay(struct jr_env *v, char *copy)
{
	char cmd[256];
	int st;

	snprintf(copy, 96, "%.64s.e2fsck", v->path);
	jt_track(copy);
	snprintf(cmd, sizeof(cmd), "cp --sparse=always %s %s && e2fsck -fy %s >/dev/null 2>&1", v->path, copy, copy);
	st = system(cmd);
	/* 0 or 1: clean, or corrected (the replay itself counts as a correction). */
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) <= 1, "e2fsck -fy on the copy: status %d", st);
}

/* What jr_recover's message tells the user after a failed recovery: "e2fsck -fy", then the image is clean. */
static void e2fsck_fixes(struct jr_env *v)
{
	char cmd[256];
	int st;

	snprintf(cmd, sizeof(cmd), "e2fsck -fy %s >/dev/null 2>&1", v->path);
	st = system(cmd);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) <= 1, "e2fsck -fy: status %d", st);
	ck_assert(!needs_recovery(v->path));
	ck_assert_int_eq(jt_fsck(v->path), 0);
}

static void env_done(struct jr_env *v)
{
	if (v->w)
		jw_close(v->w);
	if (v->fs)
		ext2fs_close_free(&v->fs);
	free(v->buf);
	unlink(v->path);
}

/* Log blocks a transaction of n blocks takes (descriptors, copies, commit), csum v3 on 1 KiB blocks. */
static uint32_t span(unsigned int n)
{
	const unsigned int per_desc = (1024 - 12 - 4 - 16) / 16;

	return n + (n + per_desc - 1) / per_desc + 1;
}

/* One committed transaction, not written home: replayed, an escaped block restored, the journal empty after. */
START_TEST(short_log)
{
	struct jr_env v;
	char msg[256], copy[96];
	uint32_t seq, start, next;

	env_open(&v, JT_MKFS);
	seq = txn(&v, 0, 10, 1, 0, 1);
	for (unsigned int k = 0; k < 10; k++)
		v.version[k] = 1;
	crash(&v);
	e2fsck_replay(&v, copy);
	ck_assert_msg(recover(&v, msg, sizeof(msg)) == 0, "%s", msg);
	check_homes(&v, v.path, "jr_recover");
	check_e2fsck_agrees(&v, copy);
	journal_state(&v, &start, &next);
	ck_assert_uint_eq(start, 0);
	/* As the kernel: the next transaction's id skips the one after the last replayed. */
	ck_assert_uint_eq(next, seq + 2);
	ck_assert(!needs_recovery(v.path));
	ck_assert_int_eq(jt_fsck(v.path), 0);
	env_done(&v);
}
END_TEST

/*
 * Transactions round the ring, each written home, the last one not: it is
 * replayed across the ring's end (its first block near the end, its last
 * ones at the start); what earlier ones logged stays as written home.
 */
START_TEST(wrapped_log)
{
	struct jr_env v;
	char msg[256], copy[96];
	uint32_t seq = 0, start, next, s;
	unsigned int t;

	env_open(&v, JT_MKFS);
	/* 150-block transactions (154 log blocks each): the seventh runs from block 925 round to 55. */
	for (t = 0; t < 6; t++) {
		txn(&v, t * 50, 150, t + 1, 1, 0);
		for (unsigned int k = t * 50; k < t * 50 + 150; k++)
			v.version[k] = t + 1;
	}
	seq = txn(&v, 100, 150, 100, 0, 1);
	for (unsigned int k = 100; k < 250; k++)
		v.version[k] = 100;
	crash(&v);
	journal_state(&v, &start, &s);
	ck_assert_uint_eq(s, seq);
	ck_assert_msg(start + span(150) > 1024, "transaction %u at log block %u does not wrap", seq, start);
	e2fsck_replay(&v, copy);
	ck_assert_msg(recover(&v, msg, sizeof(msg)) == 0, "%s", msg);
	check_homes(&v, v.path, "jr_recover");
	check_e2fsck_agrees(&v, copy);
	journal_state(&v, &start, &next);
	ck_assert_uint_eq(start, 0);
	ck_assert_uint_eq(next, seq + 2);
	ck_assert_int_eq(jt_fsck(v.path), 0);
	env_done(&v);
}
END_TEST

/*
 * Three transactions replayed from the first (the superblock naming it, as
 * when the one naming the second never reached the disk): the second
 * revokes three of the first's blocks, the third logs one of them again.
 * The revoked copies are not replayed; the later copy is.
 */
START_TEST(revoked_not_replayed)
{
	struct jr_env v;
	char msg[256], copy[96];
	uint32_t t1, start, next;

	env_open(&v, JT_MKFS);
	t1 = txn(&v, 0, 10, 1, 0, 0);
	jw_revoke(v.w, v.base, 3);
	txn(&v, 20, 5, 2, 0, 0);
	txn(&v, 0, 1, 3, 0, 0);
	txn(&v, 30, 1, 3, 0, 0);	/* after the third: not replayed from the first, it is the fourth */
	crash(&v);
	/* Replay the first three: blocks 1 and 2 revoked by the second, block 0 logged again by the third. */
	name_transaction(&v, t1, 1);
	/* The fourth's commit stops the replay at the third: its commit block zeroed (torn). */
	flip(&v, find_block(&v, JF_COMMIT_BLOCK, t1 + 3, 1), 0, 0xff);
	v.version[0] = 3;
	for (unsigned int k = 3; k < 10; k++)
		v.version[k] = 1;
	for (unsigned int k = 20; k < 25; k++)
		v.version[k] = 2;
	e2fsck_replay(&v, copy);
	ck_assert_msg(recover(&v, msg, sizeof(msg)) == 0, "%s", msg);
	check_homes(&v, v.path, "jr_recover");
	check_e2fsck_agrees(&v, copy);
	journal_state(&v, &start, &next);
	ck_assert_uint_eq(start, 0);
	ck_assert_uint_eq(next, t1 + 4);
	ck_assert_int_eq(jt_fsck(v.path), 0);
	env_done(&v);
}
END_TEST

/*
 * A logged copy that fails its tag's checksum: skipped, the rest replayed,
 * and recovery fails with the journal left needing it (as the kernel; the
 * user runs e2fsck).
 */
START_TEST(bad_block_checksum)
{
	struct jr_env v;
	char msg[256];
	uint32_t seq, desc, start, s;

	env_open(&v, JT_MKFS);
	seq = txn(&v, 0, 10, 1, 0, 0);
	for (unsigned int k = 0; k < 10; k++)
		v.version[k] = k == 4 ? 0 : 1;
	crash(&v);
	desc = find_block(&v, JF_DESCRIPTOR_BLOCK, seq, 1);
	flip(&v, desc + 1 + 4, 500, 0x01);
	ck_assert_int_eq(recover(&v, msg, sizeof(msg)), -EIO);
	ck_assert_msg(strstr(msg, "1 logged blocks could not be read or had a bad checksum"), "%s", msg);
	check_homes(&v, v.path, "jr_recover");
	journal_state(&v, &start, &s);
	ck_assert_uint_eq(start, desc);
	ck_assert_uint_eq(s, seq);
	ck_assert(needs_recovery(v.path));
	e2fsck_fixes(&v);
	env_done(&v);
}
END_TEST

/*
 * The second of two transactions with a bad commit checksum: the first is
 * replayed, the second not, and recovery fails (not async_commit: the
 * kernel calls that corruption).
 */
START_TEST(bad_commit_checksum)
{
	struct jr_env v;
	char msg[256];
	uint32_t t1, t2, start, s;

	env_open(&v, JT_MKFS);
	t1 = txn(&v, 0, 10, 1, 0, 0);
	t2 = txn(&v, 5, 10, 2, 0, 0);
	crash(&v);
	name_transaction(&v, t1, 1);
	flip(&v, find_block(&v, JF_COMMIT_BLOCK, t2, 1), offsetof(struct jf_commit, h_chksum) + 3, 0x10);
	for (unsigned int k = 0; k < 10; k++)
		v.version[k] = 1;
	ck_assert_int_eq(recover(&v, msg, sizeof(msg)), -EUCLEAN);
	ck_assert_msg(strstr(msg, "is corrupt (the 1 before it were replayed)"), "%s", msg);
	check_homes(&v, v.path, "jr_recover");
	journal_state(&v, &start, &s);
	ck_assert_uint_eq(start, 1);
	ck_assert_uint_eq(s, t1);
	ck_assert(needs_recovery(v.path));
	e2fsck_fixes(&v);
	env_done(&v);
}
END_TEST

/* A commit block whose bytes past its 64-byte head are damaged: its head's checksum holds, replayed (kernel 6.12+). */
START_TEST(commit_head_only)
{
	struct jr_env v;
	char msg[256];
	uint32_t seq;

	env_open(&v, JT_MKFS);
	seq = txn(&v, 0, 10, 1, 0, 0);
	for (unsigned int k = 0; k < 10; k++)
		v.version[k] = 1;
	crash(&v);
	flip(&v, find_block(&v, JF_COMMIT_BLOCK, seq, 1), 700, 0x42);
	ck_assert_msg(recover(&v, msg, sizeof(msg)) == 0, "%s", msg);
	check_homes(&v, v.path, "jr_recover");
	ck_assert_int_eq(jt_fsck(v.path), 0);
	env_done(&v);
}
END_TEST

/*
 * The superblock expects a transaction after the one the log holds: that
 * old one is not replayed, and the log is said empty past it.
 */
START_TEST(old_transaction_ignored)
{
	struct jr_env v;
	char msg[256], copy[96];
	uint32_t seq, start, next;

	env_open(&v, JT_MKFS);
	seq = txn(&v, 0, 10, 1, 0, 0);
	crash(&v);
	name_transaction(&v, seq + 1, 1);
	e2fsck_replay(&v, copy);
	ck_assert_msg(recover(&v, msg, sizeof(msg)) == 0, "%s", msg);
	check_homes(&v, v.path, "jr_recover");
	check_e2fsck_agrees(&v, copy);
	journal_state(&v, &start, &next);
	ck_assert_uint_eq(start, 0);
	ck_assert_uint_eq(next, seq + 2);
	ck_assert(!needs_recovery(v.path));
	ck_assert_int_eq(jt_fsck(v.path), 0);
	env_done(&v);
}
END_TEST

/*
 * A crash between the second transaction's log blocks and its commit: the
 * superblock names it (rule 5), it has no commit block, nothing is
 * replayed, and the first one's home writes (durable at the second's first
 * flush) stand.
 */
START_TEST(uncommitted_not_replayed)
{
	struct jr_env v;
	char msg[256];
	uint32_t t2, start, s;

	env_open(&v, JT_MKFS);
	txn(&v, 0, 10, 1, 1, 0);
	t2 = txn(&v, 5, 10, 2, 0, 0);
	for (unsigned int k = 0; k < 10; k++)
		v.version[k] = 1;
	crash(&v);
	journal_state(&v, &start, &s);
	ck_assert_uint_eq(s, t2);
	flip(&v, find_block(&v, JF_COMMIT_BLOCK, t2, 1), 0, 0xff);
	ck_assert_msg(recover(&v, msg, sizeof(msg)) == 0, "%s", msg);
	check_homes(&v, v.path, "jr_recover");
	ck_assert(!needs_recovery(v.path));
	ck_assert_int_eq(jt_fsck(v.path), 0);
	env_done(&v);
}
END_TEST

/* needs_recovery over an empty log: only the flag is cleared. */
START_TEST(empty_log)
{
	struct jr_env v;
	char msg[256];

	env_open(&v, JT_MKFS);
	ck_assert_int_eq(jw_close(v.w), 0);
	v.w = NULL;
	ext2fs_set_feature_journal_needs_recovery(v.fs->super);
	ext2fs_mark_super_dirty(v.fs);
	ck_assert_int_eq(ext2fs_close_free(&v.fs), 0);
	ck_assert_msg(recover(&v, msg, sizeof(msg)) == 0, "%s", msg);
	check_homes(&v, v.path, "jr_recover");
	ck_assert(!needs_recovery(v.path));
	ck_assert_int_eq(jt_fsck(v.path), 0);
	env_done(&v);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("jrecover");
	TCase *tc = tcase_create("recover");

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, NULL, jt_cleanup);
	tcase_add_test(tc, short_log);
	tcase_add_test(tc, wrapped_log);
	tcase_add_test(tc, revoked_not_replayed);
	tcase_add_test(tc, bad_block_checksum);
	tcase_add_test(tc, bad_commit_checksum);
	tcase_add_test(tc, commit_head_only);
	tcase_add_test(tc, old_transaction_ignored);
	tcase_add_test(tc, uncommitted_not_replayed);
	tcase_add_test(tc, empty_log);
	suite_add_tcase(s, tc);
	return unit_run(s);
}

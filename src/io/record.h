/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The write recorder, for the power-loss tests: RRFUSE_IO_RECORD=FILE
 * appends to FILE every write that reaches the device (metadata and file
 * data, with its bytes), every zeroing and discard, and every flush, in the
 * order the device saw them.  A tester (tests/mount/test_power_loss.py)
 * rebuilds from a copy of the image taken before the mount any state a
 * power cut could have left: everything before a flush, plus any subset of
 * what was written after it.  A manager of its own just above the device
 * (layer.h), present only when the variable is set.
 *
 * The file: the 8 bytes RR_REC_MAGIC, then records, each a struct rr_rec
 * (host byte order) and, for RR_REC_WRITE, len bytes of data.  A flush's
 * record is appended when the flush has returned and holds the file's size
 * when it began: a metadata write is recorded when it has returned, so one
 * recorded before that offset is durable once the flush record is there.
 * File data is recorded as it is handed to the device, so a data write in
 * flight when a flush begins counts as before it (the tester never drops it
 * after that flush: a weaker test of that one write, never a false alarm).
 * A transfer that fails is recorded all the same: this is for tests
 * without faults.
 */
#ifndef RRFUSE_IO_RECORD_H
#define RRFUSE_IO_RECORD_H

#include <stdint.h>
#include <ext2fs/ext2fs.h>

#define RR_REC_MAGIC "RRWREC01"

enum rr_rec_type {
	RR_REC_WRITE = 'W',	/* len bytes at off, the data follows */
	RR_REC_ZERO = 'Z',	/* [off, off+len) zeroed */
	RR_REC_DISCARD = 'D',	/* [off, off+len) discarded (reads as zeros on an image file) */
	RR_REC_FLUSH = 'F',	/* a flush returned; arg: the file's size when it began */
};

struct rr_rec {
	uint32_t type;
	uint32_t pad;
	uint64_t off, len, arg;
};

extern io_manager rr_record_io_manager;

#endif

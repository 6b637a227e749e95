/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Fault injection, for the tests of error handling (as e2fsprogs' test_io):
 * RRFUSE_IO_FAIL="r:N,w:M,..." fails with EIO every read (r) or write (w),
 * metadata or file data, that touches the 4 KiB block N of the device, as a
 * bad sector would.  A manager of its own in the stack (layer.h), present
 * only when the variable is set.
 */
#ifndef RRFUSE_IO_FAIL_H
#define RRFUSE_IO_FAIL_H

#include <ext2fs/ext2fs.h>

extern io_manager rr_fail_io_manager;

#endif

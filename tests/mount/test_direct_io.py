"""Buffered reads mixed with asynchronous direct writes (fstests
generic/451): after an io_submit'ed O_DIRECT write completes, a buffered
read of its range returns the new bytes, even when a reader pulled the old
ones into the page cache while the write was in flight."""
import ctypes
import mmap
import os
import threading

import pytest

libc = ctypes.CDLL(None, use_errno=True)
# x86_64 system call numbers (io_setup, io_destroy, io_getevents, io_submit).
SYS_IO_SETUP, SYS_IO_DESTROY, SYS_IO_GETEVENTS, SYS_IO_SUBMIT = 206, 207, 208, 209
IOCB_CMD_PWRITE = 1


class IOCB(ctypes.Structure):
    _fields_ = [("aio_data", ctypes.c_uint64), ("aio_key", ctypes.c_uint32),
                ("aio_rw_flags", ctypes.c_int32), ("aio_lio_opcode", ctypes.c_uint16),
                ("aio_reqprio", ctypes.c_int16), ("aio_fildes", ctypes.c_uint32),
                ("aio_buf", ctypes.c_uint64), ("aio_nbytes", ctypes.c_uint64),
                ("aio_offset", ctypes.c_int64), ("aio_reserved2", ctypes.c_uint64),
                ("aio_flags", ctypes.c_uint32), ("aio_resfd", ctypes.c_uint32)]


class IOEvent(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64),
                ("res", ctypes.c_int64), ("res2", ctypes.c_int64)]


def aio_write_rounds(path, rounds):
    """Rounds of: async direct write of a new byte, wait, buffered read;
    a reader thread keeps reading the block meanwhile.  Stale reads seen."""
    with open(path, "wb") as f:
        f.write(b"\0" * (1 << 20))
    fd_d = os.open(path, os.O_RDWR | os.O_DIRECT)
    fd_b = os.open(path, os.O_RDONLY)
    ctx = ctypes.c_ulong(0)
    assert libc.syscall(SYS_IO_SETUP, 4, ctypes.byref(ctx)) == 0, ctypes.get_errno()
    buf = mmap.mmap(-1, 4096)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            os.pread(fd_b, 4096, 0)

    t = threading.Thread(target=reader)
    t.start()
    stale = 0
    try:
        for i in range(rounds):
            val = bytes([i % 251 + 1]) * 4096
            buf[:] = val
            cb = IOCB(aio_lio_opcode=IOCB_CMD_PWRITE, aio_fildes=fd_d, aio_buf=addr,
                      aio_nbytes=4096, aio_offset=0)
            arr = (ctypes.POINTER(IOCB) * 1)(ctypes.pointer(cb))
            assert libc.syscall(SYS_IO_SUBMIT, ctx, 1, arr) == 1, ctypes.get_errno()
            ev = IOEvent()
            assert libc.syscall(SYS_IO_GETEVENTS, ctx, 1, 1, ctypes.byref(ev), None) == 1
            assert ev.res == 4096, ev.res
            if os.pread(fd_b, 4096, 0) != val:
                stale += 1
    finally:
        stop.set()
        t.join()
        libc.syscall(SYS_IO_DESTROY, ctx)
        os.close(fd_d)
        os.close(fd_b)
    return stale


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86_64 aio system call numbers")
@pytest.mark.parametrize("opts", ["", "no_writeback_cache"])
def test_buffered_read_after_async_direct_write(mount_factory, opts):
    m = mount_factory(size="64M", opts=opts)
    assert aio_write_rounds(m.path("a"), 600) == 0

"""Delayed allocation under -o delalloc=close (rrfuse's older model; the
default's own tests are in test_hold.py): pages the kernel writes back wait
in the daemon, with their blocks promised, and get blocks at close, fsync,
the commit tick or a size limit (src/data/data.c).

sync_file_range(WRITE | WAIT) makes the kernel write a file's cached pages
back (FUSE WRITEs) with no FSYNC and no FLUSH, so the data is then in the
daemon's buffer and nowhere else; POSIX_FADV_DONTNEED drops the clean pages
so that reads come to the daemon.  debugfs reads the live image: with no
metadata cache (cache_mb=0) inodes and extent trees are written through, so
it shows whether blocks were chosen yet.
"""

import ctypes
import mmap
import os
import re
import subprocess
import time

import pytest

from conftest import (RRCTL, Mount, debugfs, fallocate, fsck, image_blocks, kill_daemon, leaf_extents, libc,
                      make_image, pattern, run_mounted, wait_for)

pytestmark = pytest.mark.rrfuse_only

MIB = 1 << 20
SYNC_FILE_RANGE_ALL = 1 | 2 | 4          # WAIT_BEFORE | WRITE | WAIT_AFTER
O_DIRECT = 0o40000


def write_back(fd):
    """The kernel writes the file's dirty pages to the daemon, then forgets them."""
    if libc().sync_file_range(fd, ctypes.c_longlong(0), ctypes.c_longlong(0),
                              SYNC_FILE_RANGE_ALL) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def lengths(image, name):
    """Lengths of the file's extents on the image."""
    return [n for _, _, n in leaf_extents(image, name)]


def free_blocks(mnt):
    return os.statvfs(mnt).f_bfree


def mounted(work, opts="commit=0"):
    """work(image, mnt) on a fresh image under delalloc=close unless opts
    name a delalloc mode, then unmount and e2fsck -fn."""
    image = make_image(size="256M")
    mode = "" if "delalloc" in opts else "delalloc=close"
    opts = ",".join(o for o in (opts, "cache_mb=0", mode) if o)
    return run_mounted(image, lambda mnt: work(image, mnt), opts=opts)


def test_closed_file_gets_exactly_its_size():
    """Each file closed is allocated at once, to its exact size: one extent,
    no preallocation to trim, nothing left behind (files up to 8 MiB: a
    bigger one is written as a stream, see below)."""
    sizes = {"a": 5 * MIB + 123, "b": 7 * MIB, "c": 100 * 1024 + 1}

    def work(image, mnt):
        before = free_blocks(mnt)
        for name, size in sizes.items():
            with open(os.path.join(mnt, name), "wb") as f:
                f.write(pattern(name, size))
        return image, before

    image, before = mounted(work, opts="")
    used = before - image_blocks(image)[1]
    total = 0
    for name, size in sizes.items():
        want = (size + 4095) // 4096
        assert lengths(image, name) == [want], (name, leaf_extents(image, name))
        total += want
    assert used == total


def test_written_back_data_waits_in_the_daemon():
    def work(image, mnt):
        path = os.path.join(mnt, "f")
        data = pattern(1, 3 * MIB + 5)
        before = free_blocks(mnt)
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.write(fd, data)
            write_back(fd)
            # Written back, promised, not allocated.
            assert lengths(image, "f") == []
            assert before - free_blocks(mnt) >= 769
            # Read from the daemon's buffer.
            assert os.pread(fd, len(data) + 10, 0) == data
            assert os.pread(fd, 4096, 3 * MIB - 100) == data[3 * MIB - 100:3 * MIB + 3996]
            # A page rewritten and written back again replaces the buffered one.
            os.pwrite(fd, b"Z" * 5000, MIB - 7)
            write_back(fd)
            data = data[:MIB - 7] + b"Z" * 5000 + data[MIB - 7 + 5000:]
            assert os.pread(fd, len(data), 0) == data
        finally:
            os.close(fd)
        # The release after the last close gives it its blocks (the kernel
        # sends RELEASE without waiting): one extent, exactly its size.
        wait_for(lambda: lengths(image, "f"))
        assert lengths(image, "f") == [769]
        assert before - free_blocks(mnt) == 769
        with open(path, "rb") as f:
            assert f.read() == data

    mounted(work)


def test_commit_tick_gives_blocks_to_an_open_file():
    def work(image, mnt):
        fd = os.open(os.path.join(mnt, "f"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.write(fd, pattern(2, MIB))
            write_back(fd)
            wait_for(lambda: lengths(image, "f"), timeout=10)
            assert sum(lengths(image, "f")) == 256
            assert os.pread(fd, MIB, 0) == pattern(2, MIB)
        finally:
            os.close(fd)

    mounted(work, opts="commit=1")


def test_fsync_gives_blocks():
    def work(image, mnt):
        fd = os.open(os.path.join(mnt, "f"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.write(fd, pattern(3, 2 * MIB))
            os.fsync(fd)
            assert sum(lengths(image, "f")) == 512
        finally:
            os.close(fd)

    mounted(work)


def test_a_stream_is_allocated_as_it_arrives():
    """Past 8 MiB an open file is a stream: written at once, not copied
    through the buffer; its last close makes the next writer buffer again."""
    def work(image, mnt):
        data = pattern(9, 20 * MIB)
        path = os.path.join(mnt, "s")
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            for off in range(0, len(data), MIB):
                os.pwrite(fd, data[off:off + MIB], off)
                write_back(fd)
            # All of it has blocks, the file still open, no fsync.
            assert sum(lengths(image, "s")) == 5120
            assert os.pread(fd, len(data), 0) == data
        finally:
            os.close(fd)
        # The kernel sends that close's RELEASE without waiting for it; a
        # slow daemon (ThreadSanitizer) could see the next open first, and
        # the file would still be a stream.
        time.sleep(1)
        with open(path, "ab") as f:
            f.write(b"t" * 8192)
            f.flush()
            write_back(f.fileno())
            assert sum(lengths(image, "s")) == 5120
        wait_for(lambda: sum(lengths(image, "s")) == 5122)
        assert sum(lengths(image, "s")) == 5122

    mounted(work)


def test_scattered_pages_stay_held_as_the_page_cache_holds_them():
    """A run of its own for each of 1500 scattered pages (held on the heap,
    not each a mapping): all held until fsync, as the kernel's page cache
    holds a sparse file's pages, and then mapped in one pass.  Until
    2026-12-07 the 1025th run sent the buffer out, and a sparse file was
    mapped in several passes, each splitting its extent tree anew."""
    def work(image, mnt):
        fd = os.open(os.path.join(mnt, "sparse"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            for i in range(1500):
                os.pwrite(fd, bytes([i % 251 + 1]) * 4096, i * 8192)
            write_back(fd)
            assert lengths(image, "sparse") == []
            os.fsync(fd)
            assert lengths(image, "sparse") == [1] * 1500
            want = b"".join(bytes([i % 251 + 1]) * 4096 + bytes(4096) for i in range(1500))
            assert os.pread(fd, 1500 * 8192, 0) == want[:-4096]
        finally:
            os.close(fd)

    mounted(work)


def test_nodelalloc_allocates_at_write_back():
    def work(image, mnt):
        fd = os.open(os.path.join(mnt, "f"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.write(fd, pattern(4, MIB))
            write_back(fd)
            assert sum(lengths(image, "f")) == 256
        finally:
            os.close(fd)

    mounted(work, opts="commit=0,nodelalloc")


def test_truncate_and_unlink_give_the_promise_back():
    def work(image, mnt):
        path = os.path.join(mnt, "f")
        base = free_blocks(mnt)
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            data = pattern(5, 4 * MIB)
            os.write(fd, data)
            write_back(fd)
            assert base - free_blocks(mnt) >= 1024
            os.ftruncate(fd, MIB + 10)
            assert base - free_blocks(mnt) < 300
            assert os.pread(fd, 2 * MIB, 0) == data[:MIB + 10]
            # Grown again: the cut-off tail reads as zeros, not as the old bytes.
            os.ftruncate(fd, 2 * MIB)
            data = data[:MIB + 10] + bytes(MIB - 10)
            assert os.pread(fd, 2 * MIB, 0) == data
            os.pwrite(fd, b"r" * 4096, 8192)
            write_back(fd)
            data = data[:8192] + b"r" * 4096 + data[8192 + 4096:]
            rfd = os.open(path, os.O_RDONLY)
            os.unlink(path)
        finally:
            os.close(fd)
        # Unlinked, no writer left: never given blocks, but a reader still reads it.
        try:
            time.sleep(0.2)
            os.posix_fadvise(rfd, 0, 0, os.POSIX_FADV_DONTNEED)
            assert os.pread(rfd, 3 * MIB, 0) == data
        finally:
            os.close(rfd)
        wait_for(lambda: free_blocks(mnt) == base, timeout=10)
        assert free_blocks(mnt) == base

    mounted(work)


def test_direct_write_into_a_file_with_delayed_data():
    """A direct write maps blocks: the buffered data goes first, and the two meet right."""
    def work(image, mnt):
        path = os.path.join(mnt, "f")
        data = bytearray(pattern(6, 2 * MIB))
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        dfd = os.open(path, os.O_RDWR | O_DIRECT)
        try:
            os.write(fd, data)
            write_back(fd)
            buf = mmap.mmap(-1, 65536)
            buf.write(b"D" * 65536)
            assert os.pwritev(dfd, [buf], MIB) == 65536
            data[MIB:MIB + 65536] = b"D" * 65536
            # Direct past the end of the buffered data too.
            assert os.pwritev(dfd, [buf], 3 * MIB) == 65536
            data += bytes(MIB) + b"D" * 65536
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            assert os.pread(fd, len(data) + 1, 0) == bytes(data)
        finally:
            os.close(dfd)
            os.close(fd)

    mounted(work)


def releases(m):
    """RELEASEs the daemon has read (rrctl -s)."""
    out = subprocess.run([RRCTL, m.mnt, "-s"], capture_output=True, text=True, check=True).stdout
    n = re.search(r", release (\d+)", out)
    return int(n.group(1)) if n else 0


def held_blocks(m):
    """Blocks of written data waiting in the daemon for their blocks (rrctl -s)."""
    out = subprocess.run([RRCTL, m.mnt, "-s"], capture_output=True, text=True, check=True).stdout
    return int(re.search(r"^delayed data: (\d+) blocks held", out, re.M).group(1))


def disk_size(image, name):
    out = debugfs(image, "stat /" + name)
    return int(re.search(r"Size: (\d+)", out).group(1))


@pytest.mark.parametrize("mode", ["delalloc=close", ""], ids=["close", "default"])
def test_killed_with_delayed_data_leaves_a_clean_image(mode):
    """Data not yet given blocks is lost with the daemon (as unsynced data
    on ext4); the image stays consistent, and a commit meanwhile (the
    directory's fsync) wrote the file's size only as far as its data had
    reached the disk, as ext4's i_disksize: no file of zeros after a crash.
    Under delalloc=close a closed file's data went at its close; by default
    it is held until written back, as ext4's dirty pages, and a daemon
    killed before that loses it as a kernel crash loses them (README), while
    fsync'd data survives."""
    image = make_image(size="256M")
    m = Mount(image, opts=",".join(o for o in ("commit=0", mode) if o)).mount()
    try:
        before = releases(m)
        with open(m.path("kept"), "wb") as f:
            f.write(pattern(7, MIB))
        with open(m.path("synced"), "wb") as f:
            f.write(pattern(9, MIB))
            f.flush()
            os.fsync(f.fileno())
        # The last close's RELEASE, which gives the blocks, is asynchronous: over
        # io_uring it may come on another CPU's queue after the fsync below.
        wait_for(lambda: releases(m) > before + 1, timeout=10)
        if mode:
            assert wait_for(lambda: held_blocks(m) == 0, timeout=10)
        fd = os.open(m.path("lost"), os.O_CREAT | os.O_RDWR, 0o644)
        os.write(fd, pattern(8, MIB))
        write_back(fd)
        root = os.open(m.mnt, os.O_RDONLY)
        os.fsync(root)
        os.close(root)
        kill_daemon(m)
        try:
            os.close(fd)
        except OSError:
            pass
    finally:
        m.cleanup()
    rc, out = fsck(image)
    assert rc == 0, out
    assert lengths(image, "kept") == ([256] if mode else [])
    assert disk_size(image, "kept") == (MIB if mode else 0)
    assert lengths(image, "lost") == []
    assert disk_size(image, "lost") == 0
    assert disk_size(image, "synced") == MIB and sum(lengths(image, "synced")) == 256


FALLOC_FL_KEEP_SIZE = 1


@pytest.mark.parametrize("opts,writer_open", [("delalloc=close", False), ("delalloc=close", True), ("", False)],
                         ids=["close", "close_open_written_back", "default"])
def test_killed_after_writing_preallocated_blocks_past_eof(opts, writer_open):
    """Issue 38: blocks fallocated past EOF (KEEP_SIZE) are written while a
    hole below them still waits in the daemon, and another file's fsync
    commits.  The inode that commit writes keeps ext4's rule (no written
    block past the size on disk, which the written blocks raise as ext4's
    writeback raises i_disksize): after the kill and the journal's replay,
    e2fsck -fn is clean (it said "i_size is 8000, should be 102400") and
    the file holds what reached the disk, a hole where the buffered block
    was.  Under delalloc=close the close wrote everything (the test waits
    for its RELEASE, asynchronous over io_uring, to have done it); the
    writer kept open (its pages sent by sync_file_range) and the default
    leave that block buffered."""
    image = make_image(size="128M")
    m = Mount(image, opts=",".join(o for o in ("commit=0", opts) if o)).mount()
    head, pre, late = pattern(1, 8000), pattern(2, 20 * 4096), pattern(3, 4096)
    try:
        with open(m.path("f"), "wb") as f:
            f.write(head)
        fd = os.open(m.path("f"), os.O_RDWR)
        fallocate(fd, FALLOC_FL_KEEP_SIZE, 16384, 21 * 4096)
        os.pwrite(fd, pre, 16384)
        os.pwrite(fd, late, 8192)
        if writer_open:
            write_back(fd)
        else:
            os.close(fd)
            if opts == "delalloc=close":
                assert wait_for(lambda: held_blocks(m) == 0, timeout=10)
        with open(m.path("g"), "wb") as g:
            g.write(b"g" * 5000)
            g.flush()
            os.fsync(g.fileno())
        kill_daemon(m)
        if writer_open:
            os.close(fd)
    finally:
        m.cleanup()
    r = subprocess.run(["e2fsck", "-fy", "-E", "journal_only", image], capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    rc, out = fsck(image)
    assert rc == 0, out
    assert disk_size(image, "f") == 16384 + len(pre)
    dump = image + ".f"
    debugfs(image, "dump /f " + dump)
    with open(dump, "rb") as fh:
        data = fh.read()
    os.unlink(dump)
    assert data[:8000] == head and data[16384:] == pre
    held = opts != "delalloc=close" or writer_open
    assert data[8192:12288] == (bytes(4096) if held else late)

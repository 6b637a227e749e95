"""Delayed allocation: pages the kernel writes back wait in the daemon, with
their blocks promised, and get blocks at close, fsync, the commit tick or a
size limit (src/data.c, -o delalloc / nodelalloc).

sync_file_range(WRITE | WAIT) makes the kernel write a file's cached pages
back (FUSE WRITEs) with no FSYNC and no FLUSH, so the data is then in the
daemon's buffer and nowhere else; POSIX_FADV_DONTNEED drops the clean pages
so that reads come to the daemon.  debugfs -c reads the live image: inodes
and extent trees are written through, so it shows whether blocks were
chosen yet.
"""

import ctypes
import os
import re
import subprocess
import time

import pytest

from conftest import Mount, fsck, libc, make_image, run_mounted

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


def extents(image, name, live=True):
    """[(lblk, len, pblk)] of the file, from the image."""
    out = subprocess.run(["debugfs"] + (["-c"] if live else []) + ["-R", "dump_extents /" + name,
                                                                   image],
                         capture_output=True, text=True).stdout
    res = []
    for m in re.finditer(r"^\s*\d+/\s*\d+\s+\d+/\s*\d+\s+(\d+)\s*-\s*(\d+)\s+(\d+)\s*-\s*(\d+)\s+(\d+)",
                         out, re.M):
        res.append((int(m.group(1)), int(m.group(5)), int(m.group(3))))
    return res


def wait_for(cond, timeout=10):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.05)


def image_free_blocks(image):
    out = subprocess.run(["dumpe2fs", "-h", image], capture_output=True, text=True).stdout
    return int(re.search(r"^Free blocks:\s+(\d+)", out, re.M).group(1))


def free_blocks(mnt):
    return os.statvfs(mnt).f_bfree


def pattern(size, seed):
    return bytes((i * 7 + seed) & 0xff for i in range(256)) * (size // 256) + b"x" * (size % 256)


def test_closed_file_gets_exactly_its_size():
    """Each file closed is allocated at once, to its exact size: one extent,
    no preallocation to trim, nothing left behind (files up to 8 MiB: a
    bigger one is written as a stream, see below)."""
    image = make_image(size="256M")
    sizes = {"a": 5 * MIB + 123, "b": 7 * MIB, "c": 100 * 1024 + 1}

    def work(mnt):
        before = free_blocks(mnt)
        for name, size in sizes.items():
            with open(os.path.join(mnt, name), "wb") as f:
                f.write(pattern(size, len(name)))
        return before

    used = run_mounted(image, work) - image_free_blocks(image)
    total = 0
    for name, size in sizes.items():
        ex = extents(image, name, live=False)
        want = (size + 4095) // 4096
        assert [e[1] for e in ex] == [want], (name, ex)
        total += want
    assert used == total


def test_written_back_data_waits_in_the_daemon():
    image = make_image(size="256M")
    m = Mount(image, opts="commit=0").mount()
    try:
        path = m.path("f")
        data = pattern(3 * MIB + 5, 1)
        before = free_blocks(m.mnt)
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.write(fd, data)
            write_back(fd)
            # Written back, promised, not allocated.
            assert extents(image, "f") == []
            assert before - free_blocks(m.mnt) >= 769
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
        wait_for(lambda: extents(image, "f"))
        assert [e[1] for e in extents(image, "f")] == [769]
        assert before - free_blocks(m.mnt) == 769
        with open(path, "rb") as f:
            assert f.read() == data
        m.unmount()
    finally:
        m.cleanup()
    rc, out = fsck(image)
    assert rc == 0, out


def test_commit_tick_gives_blocks_to_an_open_file():
    image = make_image(size="256M")
    m = Mount(image, opts="commit=1").mount()
    try:
        fd = os.open(m.path("f"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.write(fd, pattern(MIB, 2))
            write_back(fd)
            wait_for(lambda: extents(image, "f"))
            assert sum(e[1] for e in extents(image, "f")) == 256
            assert os.pread(fd, MIB, 0) == pattern(MIB, 2)
        finally:
            os.close(fd)
        m.unmount()
    finally:
        m.cleanup()
    rc, out = fsck(image)
    assert rc == 0, out


def test_fsync_gives_blocks():
    image = make_image(size="256M")
    m = Mount(image, opts="commit=0").mount()
    try:
        fd = os.open(m.path("f"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.write(fd, pattern(2 * MIB, 3))
            os.fsync(fd)
            assert sum(e[1] for e in extents(image, "f")) == 512
        finally:
            os.close(fd)
        m.unmount()
    finally:
        m.cleanup()
    rc, out = fsck(image)
    assert rc == 0, out


def test_a_stream_is_allocated_as_it_arrives():
    """Past 8 MiB an open file is a stream: written at once, not copied
    through the buffer; its last close makes the next writer buffer again."""
    image = make_image(size="256M")
    m = Mount(image, opts="commit=0").mount()
    try:
        data = pattern(20 * MIB, 9)
        fd = os.open(m.path("s"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            for off in range(0, len(data), MIB):
                os.pwrite(fd, data[off:off + MIB], off)
                write_back(fd)
            # All of it has blocks, the file still open, no fsync.
            assert sum(e[1] for e in extents(image, "s")) == 5120
            assert os.pread(fd, len(data), 0) == data
        finally:
            os.close(fd)
        with open(m.path("s"), "ab") as f:
            f.write(b"t" * 8192)
            f.flush()
            write_back(f.fileno())
            assert sum(e[1] for e in extents(image, "s")) == 5120
        wait_for(lambda: sum(e[1] for e in extents(image, "s")) == 5122)
        assert sum(e[1] for e in extents(image, "s")) == 5122
        m.unmount()
    finally:
        m.cleanup()
    rc, out = fsck(image)
    assert rc == 0, out


def test_scattered_pages_past_the_run_limit():
    """Every buffered run is a mapping; past 1024 in one file the buffer is
    flushed and writing goes on, the data whole."""
    image = make_image(size="256M")
    m = Mount(image, opts="commit=0").mount()
    try:
        fd = os.open(m.path("sparse"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            for i in range(1500):
                os.pwrite(fd, bytes([i % 251 + 1]) * 4096, i * 8192)
            write_back(fd)
            assert 0 < sum(e[1] for e in extents(image, "sparse")) < 1500
            want = b"".join(bytes([i % 251 + 1]) * 4096 + bytes(4096) for i in range(1500))
            assert os.pread(fd, 1500 * 8192, 0) == want[:-4096]
        finally:
            os.close(fd)
        m.unmount()
    finally:
        m.cleanup()
    rc, out = fsck(image)
    assert rc == 0, out


def test_nodelalloc_allocates_at_write_back():
    image = make_image(size="256M")
    m = Mount(image, opts="commit=0,nodelalloc").mount()
    try:
        fd = os.open(m.path("f"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.write(fd, pattern(MIB, 4))
            write_back(fd)
            assert sum(e[1] for e in extents(image, "f")) == 256
        finally:
            os.close(fd)
        m.unmount()
    finally:
        m.cleanup()
    rc, out = fsck(image)
    assert rc == 0, out


def test_truncate_and_unlink_give_the_promise_back():
    image = make_image(size="256M")
    m = Mount(image, opts="commit=0").mount()
    try:
        base = free_blocks(m.mnt)
        fd = os.open(m.path("f"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            data = pattern(4 * MIB, 5)
            os.write(fd, data)
            write_back(fd)
            assert base - free_blocks(m.mnt) >= 1024
            os.ftruncate(fd, MIB + 10)
            assert base - free_blocks(m.mnt) < 300
            assert os.pread(fd, 2 * MIB, 0) == data[:MIB + 10]
            # Grown again: the cut-off tail reads as zeros, not as the old bytes.
            os.ftruncate(fd, 2 * MIB)
            data = data[:MIB + 10] + bytes(MIB - 10)
            assert os.pread(fd, 2 * MIB, 0) == data
            os.pwrite(fd, b"r" * 4096, 8192)
            write_back(fd)
            data = data[:8192] + b"r" * 4096 + data[8192 + 4096:]
            rfd = os.open(m.path("f"), os.O_RDONLY)
            os.unlink(m.path("f"))
        finally:
            os.close(fd)
        # Unlinked, no writer left: never given blocks, but a reader still reads it.
        try:
            time.sleep(0.2)
            os.posix_fadvise(rfd, 0, 0, os.POSIX_FADV_DONTNEED)
            assert os.pread(rfd, 3 * MIB, 0) == data
        finally:
            os.close(rfd)
        wait_for(lambda: free_blocks(m.mnt) == base)
        assert free_blocks(m.mnt) == base
        m.unmount()
    finally:
        m.cleanup()
    rc, out = fsck(image)
    assert rc == 0, out


def test_direct_write_into_a_file_with_delayed_data():
    """A direct write maps blocks: the buffered data goes first, and the two meet right."""
    image = make_image(size="256M")
    m = Mount(image, opts="commit=0").mount()
    try:
        path = m.path("f")
        data = bytearray(pattern(2 * MIB, 6))
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        dfd = os.open(path, os.O_RDWR | O_DIRECT)
        try:
            os.write(fd, data)
            write_back(fd)
            import mmap
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
        m.unmount()
    finally:
        m.cleanup()
    rc, out = fsck(image)
    assert rc == 0, out


def test_killed_with_delayed_data_leaves_a_clean_image():
    """Data not yet given blocks is lost with the daemon (as unsynced data
    on ext4); the image stays consistent: the file is a hole of its size."""
    image = make_image(size="256M")
    m = Mount(image, opts="commit=0").mount()
    try:
        with open(m.path("kept"), "wb") as f:
            f.write(pattern(MIB, 7))
        fd = os.open(m.path("lost"), os.O_CREAT | os.O_RDWR, 0o644)
        os.write(fd, pattern(MIB, 8))
        write_back(fd)
        fs = os.open(m.mnt, os.O_RDONLY)
        os.fsync(fs)
        os.close(fs)
        m.proc.kill()
        m.proc.wait()
        m.proc = None
        try:
            os.close(fd)
        except OSError:
            pass
        subprocess.run(["fusermount3", "-uz", m.mnt], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        m.mounted = False
        m._close_log()
    finally:
        m.cleanup()
    rc, out = fsck(image)
    assert rc == 0, out
    assert [e[1] for e in extents(image, "kept", live=False)] == [256]
    assert extents(image, "lost", live=False) == []

"""Reads spliced from the image (FUSE_CAP_SPLICE_WRITE): a read that lies in
one written extent goes from the image's page cache to the reader without
a copy in rrfuse; holes, unwritten extents and delayed data are copied as
before.  Every byte is checked against what was written, and the device's
counters (`rrctl -s`) say which way the reads went."""

import mmap
import os
import random

import pytest

from conftest import KERNEL, device_io, pattern

pytestmark = pytest.mark.skipif(KERNEL, reason="counts rrfuse's device reads")

SIZE = 8 << 20
TAIL = b"the end, not a whole block"


def _write(m, name, data):
    p = os.path.join(m.mnt, name)
    with open(p, "wb") as f:
        f.write(data)
    return p


def _check_reads(p, data, seed):
    """Buffered reads at odd offsets and sizes, then O_DIRECT ones."""
    rnd = random.Random(seed)
    fd = os.open(p, os.O_RDONLY)
    try:
        for _ in range(200):
            off = rnd.randrange(0, len(data))
            n = rnd.choice([1, 4095, 4096, 8191, 8192, 65536, 100000, 1 << 20, 3 << 20])
            assert os.pread(fd, n, off) == data[off:off + n], (off, n)
    finally:
        os.close(fd)
    buf = mmap.mmap(-1, 4 << 20)
    fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
    try:
        for _ in range(100):
            off = rnd.randrange(0, len(data) // 4096) * 4096
            n = rnd.choice([4096, 8192, 65536, 1 << 20, 4 << 20])
            k = os.preadv(fd, [memoryview(buf)[:n]], off)
            assert bytes(buf[:k]) == data[off:off + k], (off, n)
    finally:
        os.close(fd)


def test_reads_are_spliced_and_exact(fs):
    data = pattern("splice", SIZE) + TAIL
    p = _write(fs, "f", data)
    fs.remount()
    before = device_io(fs)
    _check_reads(p, data, 1)
    after = device_io(fs)
    assert after["spliced"] > before["spliced"], (before, after)
    assert after["spliced"] <= after["data_reads"]


@pytest.mark.opts("nosplice")
def test_nosplice_copies(fs):
    data = pattern("copy", SIZE) + TAIL
    p = _write(fs, "f", data)
    fs.remount()
    _check_reads(p, data, 2)
    assert device_io(fs)["spliced"] == 0


@pytest.mark.opts("direct")
def test_direct_data_path_copies(fs):
    """-o direct: no page cache of the image to splice from."""
    data = pattern("direct", SIZE) + TAIL
    p = _write(fs, "f", data)
    fs.remount()
    _check_reads(p, data, 3)
    assert device_io(fs)["spliced"] == 0


def test_holes_unwritten_and_delayed_data_read_exact(fs):
    """Only whole written extents are spliced; the rest reads as it did."""
    bs = 4096
    p = os.path.join(fs.mnt, "f")
    written = pattern("w", 64 * bs)
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.pwrite(fd, written, 0)                       # written: spliced
        os.posix_fallocate(fd, 128 * bs, 64 * bs)        # unwritten: zeros
        os.pwrite(fd, written, 256 * bs)                 # after a hole
        os.fsync(fd)
        os.pwrite(fd, b"late" * 4096, 300 * bs)         # delayed until the next commit
    finally:
        os.close(fd)
    expect = bytearray(320 * bs)
    expect[0:64 * bs] = written
    expect[256 * bs:320 * bs] = written
    expect[300 * bs:300 * bs + 4 * 4096] = b"late" * 4096
    expect = bytes(expect)
    with open(p, "rb") as f:
        got = f.read()
    assert got == expect
    fs.remount()
    with open(p, "rb") as f:
        assert f.read() == expect

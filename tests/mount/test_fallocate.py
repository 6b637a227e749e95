"""fallocate(2) modes, punching holes, zeroing ranges, and SEEK_DATA /
SEEK_HOLE on sparse and preallocated files."""
import errno
import os

import pytest

from conftest import pattern, syncfs, fallocate

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10

BS = 4096


SECT_PER_BLOCK = BS // 512



def blocks(fd):
    """st_blocks in 4K blocks, after fsync so delayed allocation is done."""
    os.fsync(fd)
    return os.fstat(fd).st_blocks // SECT_PER_BLOCK


def pread_all(fd, n, off):
    out = b""
    while len(out) < n:
        b = os.pread(fd, n - len(out), off + len(out))
        if not b:
            break
        out += b
    return out


class OpenFile:
    """A file on the mount kept open O_RDWR; unpacks as (path, fd)."""

    def __init__(self, fs, name="file"):
        self.fs = fs
        self.path = os.path.join(fs.mnt, name)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)

    def __iter__(self):
        return iter((self.path, self.fd))

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def remount(self):
        """Close, remount the filesystem, reopen; returns the new fd."""
        self.close()
        self.fs.remount()
        self.fd = os.open(self.path, os.O_RDWR)
        return self.fd


@pytest.fixture
def f(fs):
    """An empty file opened O_RDWR on the mount; (path, fd) = f."""
    of = OpenFile(fs)
    try:
        yield of
    finally:
        of.close()


def _filled(fd, size, seed="data"):
    """Write size bytes at 0 and fsync. A freshly written file on an empty
    filesystem is contiguous, so it owns exactly ceil(size/4K) blocks (the
    extent tree fits in the inode). Tests use that count rather than a
    st_blocks read right after the write, so a stale attribute cache (see
    test_st_blocks_after_write_fsync) does not hide hole-punching results."""
    data = pattern(seed, size)
    os.pwrite(fd, data, 0)
    os.fsync(fd)
    return data


def test_st_blocks_after_write_fsync(f):
    # st_blocks must reflect the allocation once the data is on disk
    # (du, cp --sparse and backup tools rely on it).
    p, fd = f
    _filled(fd, 1 << 20)
    assert os.fstat(fd).st_blocks == (1 << 20) // 512
    assert os.stat(p).st_blocks == (1 << 20) // 512
    os.pwrite(fd, pattern("more", 5000), 2 << 20)
    os.fsync(fd)
    assert os.fstat(fd).st_blocks == ((1 << 20) + 2 * BS) // 512


# ------------------------------------------------------------------ mode 0

def test_mode0_extends_size_and_blocks(f):
    p, fd = f
    fallocate(fd, 0, 0, 1 << 20)
    st = os.fstat(fd)
    assert st.st_size == 1 << 20
    assert 256 <= blocks(fd) <= 256 + 4
    assert pread_all(fd, 1 << 20, 0) == bytes(1 << 20)


def test_mode0_unaligned(f):
    p, fd = f
    fallocate(fd, 0, 1000, 5000)        # bytes 1000..5999: blocks 0 and 1
    assert os.fstat(fd).st_size == 6000
    assert blocks(fd) == 2
    assert pread_all(fd, 10000, 0) == bytes(6000)


def test_mode0_inside_file_keeps_size_and_data(f):
    p, fd = f
    data = _filled(fd, 3 * BS + 17)
    fallocate(fd, 0, 0, 2 * BS)          # already allocated: no-op
    assert os.fstat(fd).st_size == len(data)
    assert pread_all(fd, len(data), 0) == data
    fallocate(fd, 0, BS, 10 * BS)        # grows the file past EOF
    assert os.fstat(fd).st_size == 11 * BS
    assert pread_all(fd, 11 * BS, 0) == data + bytes(11 * BS - len(data))


def test_posix_fallocate(f):
    p, fd = f
    os.posix_fallocate(fd, 0, 300000)
    assert os.fstat(fd).st_size == 300000
    assert blocks(fd) >= (300000 + BS - 1) // BS
    assert pread_all(fd, 300000, 0) == bytes(300000)


def test_mode0_then_write_reads_back(fs, f):
    p, fd = f
    fallocate(fd, 0, 0, 256 * 1024)
    a = pattern("a", 5000)
    b = pattern("b", 3 * BS)
    os.pwrite(fd, a, 8192 + 123)          # unaligned, inside the range
    os.pwrite(fd, b, 50 * BS)             # aligned
    expect = bytearray(256 * 1024)
    expect[8192 + 123:8192 + 123 + len(a)] = a
    expect[50 * BS:50 * BS + len(b)] = b
    assert pread_all(fd, len(expect), 0) == bytes(expect)
    os.fsync(fd)
    assert pread_all(fd, len(expect), 0) == bytes(expect)
    fd = f.remount()
    assert pread_all(fd, len(expect) + 10, 0) == bytes(expect)


# -------------------------------------------------------------- KEEP_SIZE

def test_keep_size_adds_blocks_not_size(f):
    p, fd = f
    os.write(fd, b"0123456789")
    os.fsync(fd)
    fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 1 << 20)
    assert os.fstat(fd).st_size == 10
    assert blocks(fd) == 256
    assert pread_all(fd, 100, 0) == b"0123456789"
    # the preallocated space beyond EOF reads as zeros once the file grows
    os.ftruncate(fd, 512 * 1024)
    assert pread_all(fd, 512 * 1024, 0) == b"0123456789" + bytes(512 * 1024 - 10)
    assert blocks(fd) >= 256


def test_keep_size_write_into_prealloc_beyond_eof(fs, f):
    p, fd = f
    fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 64 * BS)
    assert os.fstat(fd).st_size == 0
    b0 = blocks(fd)
    assert b0 >= 64
    data = pattern("x", 10000)
    os.pwrite(fd, data, 3 * BS + 5)
    os.fsync(fd)
    assert os.fstat(fd).st_size == 3 * BS + 5 + 10000
    assert blocks(fd) == b0               # no new allocation needed
    assert pread_all(fd, 1 << 20, 0) == bytes(3 * BS + 5) + data
    fd = f.remount()
    st = os.fstat(fd)
    assert st.st_size == 3 * BS + 5 + 10000
    assert st.st_blocks // SECT_PER_BLOCK == b0  # prealloc survives remount
    assert pread_all(fd, 1 << 20, 0) == bytes(3 * BS + 5) + data


# ------------------------------------------------------------- PUNCH_HOLE

def test_punch_hole_requires_keep_size(f):
    p, fd = f
    _filled(fd, 4 * BS)
    with pytest.raises(OSError) as ei:
        fallocate(fd, FALLOC_FL_PUNCH_HOLE, 0, BS)
    assert ei.value.errno == errno.EOPNOTSUPP


def test_punch_hole_aligned(fs, f):
    p, fd = f
    data = _filled(fd, 1 << 20)
    b0 = 256
    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 256 * 1024, 128 * 1024)
    assert os.fstat(fd).st_size == 1 << 20
    assert blocks(fd) == b0 - 32
    expect = data[:256 * 1024] + bytes(128 * 1024) + data[384 * 1024:]
    assert pread_all(fd, 1 << 20, 0) == expect
    fd = f.remount()
    assert pread_all(fd, 2 << 20, 0) == expect
    assert os.fstat(fd).st_blocks // SECT_PER_BLOCK == b0 - 32


def test_punch_hole_partial_block_edges(f):
    p, fd = f
    data = _filled(fd, 16 * BS)
    b0 = 16
    # 1000..10999: partial block 0, whole block 1, partial block 2
    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 1000, 10000)
    assert os.fstat(fd).st_size == 16 * BS
    assert blocks(fd) == b0 - 1
    expect = data[:1000] + bytes(10000) + data[11000:]
    assert pread_all(fd, 16 * BS, 0) == expect


def test_punch_hole_within_one_block(f):
    p, fd = f
    data = _filled(fd, 4 * BS)
    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, BS + 100, 200)
    assert blocks(fd) == 4
    assert pread_all(fd, 4 * BS, 0) == data[:BS + 100] + bytes(200) + data[BS + 300:]


def test_punch_hole_unaligned_tail_and_past_eof(f):
    p, fd = f
    size = 5 * BS + 1234
    data = _filled(fd, size)
    b0 = 6
    # from the middle of block 2 to far beyond EOF
    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 2 * BS + 7, 1 << 20)
    assert os.fstat(fd).st_size == size
    assert blocks(fd) == b0 - 3           # blocks 3, 4 and the tail block 5
    assert pread_all(fd, size, 0) == data[:2 * BS + 7] + bytes(size - 2 * BS - 7)


def test_punch_whole_file_then_rewrite(f):
    p, fd = f
    _filled(fd, 64 * BS)
    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 64 * BS)
    assert blocks(fd) == 0
    assert os.fstat(fd).st_size == 64 * BS
    assert pread_all(fd, 64 * BS, 0) == bytes(64 * BS)
    new = pattern("new", 3000)
    os.pwrite(fd, new, 10 * BS + 50)
    assert blocks(fd) == 1
    expect = bytearray(64 * BS)
    expect[10 * BS + 50:10 * BS + 50 + 3000] = new
    assert pread_all(fd, 64 * BS, 0) == bytes(expect)


def test_punch_hole_in_fallocated_range(f):
    p, fd = f
    fallocate(fd, 0, 0, 32 * BS)
    b0 = blocks(fd)
    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 8 * BS, 8 * BS)
    assert blocks(fd) == b0 - 8
    assert os.fstat(fd).st_size == 32 * BS
    assert pread_all(fd, 32 * BS, 0) == bytes(32 * BS)


def test_punch_hole_frees_filesystem_space(fs, f):
    p, fd = f
    _filled(fd, 4 << 20)
    syncfs(fs.mnt)
    free0 = os.statvfs(fs.mnt).f_bfree
    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 2 << 20)
    os.fsync(fd)
    syncfs(fs.mnt)
    assert os.statvfs(fs.mnt).f_bfree >= free0 + 512


# ------------------------------------------------------------- ZERO_RANGE

def test_zero_range_inside_file(f):
    p, fd = f
    data = _filled(fd, 16 * BS)
    b0 = 16
    fallocate(fd, FALLOC_FL_ZERO_RANGE, 1000, 10000)
    assert os.fstat(fd).st_size == 16 * BS
    assert pread_all(fd, 16 * BS, 0) == data[:1000] + bytes(10000) + data[11000:]
    # zeroing keeps (or re-allocates) the range: no blocks are lost
    assert blocks(fd) >= b0


def test_zero_range_aligned(f):
    p, fd = f
    data = _filled(fd, 16 * BS)
    fallocate(fd, FALLOC_FL_ZERO_RANGE, 4 * BS, 4 * BS)
    assert pread_all(fd, 16 * BS, 0) == data[:4 * BS] + bytes(4 * BS) + data[8 * BS:]
    # and the zeroed range can be written again
    w = pattern("w", 100)
    os.pwrite(fd, w, 5 * BS + 1)
    expect = bytearray(data[:4 * BS] + bytes(4 * BS) + data[8 * BS:])
    expect[5 * BS + 1:5 * BS + 101] = w
    assert pread_all(fd, 16 * BS, 0) == bytes(expect)


def test_zero_range_beyond_eof_extends(f):
    p, fd = f
    data = _filled(fd, 3 * BS + 100)
    fallocate(fd, FALLOC_FL_ZERO_RANGE, 2 * BS + 10, 5 * BS)
    new_size = 2 * BS + 10 + 5 * BS
    assert os.fstat(fd).st_size == new_size
    assert pread_all(fd, new_size + 10, 0) == data[:2 * BS + 10] + bytes(5 * BS)
    assert blocks(fd) >= 8


def test_zero_range_keep_size(f):
    p, fd = f
    data = _filled(fd, 3 * BS + 100)
    b0 = 4
    fallocate(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 2 * BS + 10, 10 * BS)
    assert os.fstat(fd).st_size == 3 * BS + 100
    assert pread_all(fd, 1 << 16, 0) == data[:2 * BS + 10] + bytes(BS + 90)
    assert blocks(fd) >= b0 + 8           # space beyond EOF is preallocated
    # growing the file shows zeros, not the old tail bytes
    os.ftruncate(fd, 12 * BS)
    assert pread_all(fd, 12 * BS, 0) == data[:2 * BS + 10] + bytes(10 * BS - 10)


def test_zero_range_on_hole(f):
    p, fd = f
    os.ftruncate(fd, 16 * BS)
    fallocate(fd, FALLOC_FL_ZERO_RANGE, 3 * BS + 5, 2 * BS)
    assert os.fstat(fd).st_size == 16 * BS
    assert pread_all(fd, 16 * BS, 0) == bytes(16 * BS)


# --------------------------------------------------------------- ENOSPC

@pytest.mark.image(size="64M")
def test_fallocate_enospc(fs, f):
    p, fd = f
    with pytest.raises(OSError) as ei:
        fallocate(fd, 0, 0, 1 << 30)
    assert ei.value.errno == errno.ENOSPC
    # the filesystem keeps working and the space comes back after unlink
    f.close()
    os.unlink(p)
    syncfs(fs.mnt)
    q = os.path.join(fs.mnt, "after")
    with open(q, "wb") as fh:
        fh.write(pattern("after", 1 << 20))
    with open(q, "rb") as fh:
        assert fh.read() == pattern("after", 1 << 20)


# ------------------------------------------------------ SEEK_DATA/SEEK_HOLE

M = 1 << 20


def _seek(fd, off, whence):
    try:
        return os.lseek(fd, off, whence)
    except OSError as e:
        return -e.errno


def _make_sparse(path):
    """data at [0, 64K), hole, data at [1M, 1M+4K), hole up to EOF at 2M."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.pwrite(fd, pattern("d1", 64 * 1024), 0)
        os.pwrite(fd, pattern("d2", BS), M)
        os.ftruncate(fd, 2 * M)
    finally:
        os.close(fd)  # FUSE flushes dirty pages on close


def test_seek_data_hole_layout(fs):
    p = os.path.join(fs.mnt, "sparse")
    _make_sparse(p)
    fd = os.open(p, os.O_RDONLY)
    try:
        assert os.fstat(fd).st_size == 2 * M
        SD, SH = os.SEEK_DATA, os.SEEK_HOLE
        assert _seek(fd, 0, SD) == 0
        assert _seek(fd, 0, SH) == 64 * 1024
        assert _seek(fd, 1000, SD) == 1000
        assert _seek(fd, 1000, SH) == 64 * 1024
        assert _seek(fd, 64 * 1024 - 1, SH) == 64 * 1024
        assert _seek(fd, 64 * 1024, SD) == M
        assert _seek(fd, 64 * 1024, SH) == 64 * 1024
        assert _seek(fd, 500000, SD) == M
        assert _seek(fd, 500000, SH) == 500000
        assert _seek(fd, M, SD) == M
        assert _seek(fd, M, SH) == M + BS
        assert _seek(fd, M + 100, SD) == M + 100
        assert _seek(fd, M + 100, SH) == M + BS
        # trailing hole: no more data; the hole runs to EOF
        assert _seek(fd, M + BS, SD) == -errno.ENXIO
        assert _seek(fd, M + BS, SH) == M + BS
        assert _seek(fd, 2 * M - 1, SD) == -errno.ENXIO
        assert _seek(fd, 2 * M - 1, SH) == 2 * M - 1
        # at or past EOF: ENXIO for both
        assert _seek(fd, 2 * M, SD) == -errno.ENXIO
        assert _seek(fd, 2 * M, SH) == -errno.ENXIO
        assert _seek(fd, 3 * M, SD) == -errno.ENXIO
        assert _seek(fd, 3 * M, SH) == -errno.ENXIO
        # the file position moved to the returned offset
        os.lseek(fd, 64 * 1024 + 5, SD)
        assert os.lseek(fd, 0, os.SEEK_CUR) == M
    finally:
        os.close(fd)


def test_seek_data_hole_after_remount(fs):
    p = os.path.join(fs.mnt, "sparse")
    _make_sparse(p)
    fs.remount()
    fd = os.open(p, os.O_RDONLY)
    try:
        assert _seek(fd, 0, os.SEEK_HOLE) == 64 * 1024
        assert _seek(fd, 64 * 1024, os.SEEK_DATA) == M
        assert _seek(fd, M, os.SEEK_HOLE) == M + BS
        assert _seek(fd, M + BS, os.SEEK_DATA) == -errno.ENXIO
        assert pread_all(fd, 64 * 1024, 0) == pattern("d1", 64 * 1024)
        assert pread_all(fd, BS, M) == pattern("d2", BS)
        assert pread_all(fd, 100, M - 100) == bytes(100)
    finally:
        os.close(fd)


def test_seek_fully_sparse_and_empty(fs):
    p = os.path.join(fs.mnt, "holes")
    with open(p, "wb") as fh:
        fh.truncate(5 * M)
    fd = os.open(p, os.O_RDONLY)
    try:
        assert _seek(fd, 0, os.SEEK_DATA) == -errno.ENXIO
        assert _seek(fd, 0, os.SEEK_HOLE) == 0
        assert _seek(fd, 4 * M, os.SEEK_HOLE) == 4 * M
    finally:
        os.close(fd)
    e = os.path.join(fs.mnt, "empty")
    open(e, "wb").close()
    fd = os.open(e, os.O_RDONLY)
    try:
        assert _seek(fd, 0, os.SEEK_DATA) == -errno.ENXIO
        assert _seek(fd, 0, os.SEEK_HOLE) == -errno.ENXIO
    finally:
        os.close(fd)


def test_seek_dense_file(fs):
    p = os.path.join(fs.mnt, "dense")
    with open(p, "wb") as fh:
        fh.write(pattern("dense", 3 * BS + 10))
    fd = os.open(p, os.O_RDONLY)
    try:
        assert _seek(fd, 0, os.SEEK_DATA) == 0
        assert _seek(fd, 5, os.SEEK_DATA) == 5
        # the virtual hole at EOF
        assert _seek(fd, 0, os.SEEK_HOLE) == 3 * BS + 10
        assert _seek(fd, 3 * BS + 10, os.SEEK_DATA) == -errno.ENXIO
    finally:
        os.close(fd)


def test_seek_after_punch_hole(fs, f):
    p, fd = f
    _filled(fd, 32 * BS)
    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 8 * BS, 8 * BS)
    assert _seek(fd, 0, os.SEEK_HOLE) == 8 * BS
    assert _seek(fd, 8 * BS, os.SEEK_DATA) == 16 * BS
    assert _seek(fd, 16 * BS, os.SEEK_HOLE) == 32 * BS


def test_seek_unwritten_extents(fs, f):
    # Preallocated (unwritten) extents read as zeros. Whether SEEK_DATA
    # treats them as data or as a hole is up to the filesystem: POSIX only
    # requires holes to be reported where the file reads zeros, and a hole
    # may always be reported as data. The kernel's ext4 reports unwritten
    # extents without dirty page-cache as holes; libext2fs-based code may
    # report them as data. Accept both, but nothing else.
    p, fd = f
    os.pwrite(fd, pattern("w", BS), 0)             # block 0: written data
    fallocate(fd, 0, BS, 15 * BS)                  # blocks 1..15: unwritten
    os.pwrite(fd, pattern("z", BS), 16 * BS)       # block 16: data
    os.fsync(fd)
    assert os.fstat(fd).st_size == 17 * BS
    assert pread_all(fd, 15 * BS, BS) == bytes(15 * BS)
    assert _seek(fd, 0, os.SEEK_DATA) == 0
    assert _seek(fd, 0, os.SEEK_HOLE) in (BS, 17 * BS)
    assert _seek(fd, BS, os.SEEK_DATA) in (BS, 16 * BS)
    assert _seek(fd, 5 * BS, os.SEEK_DATA) in (5 * BS, 16 * BS)
    assert _seek(fd, 16 * BS, os.SEEK_DATA) == 16 * BS
    assert _seek(fd, 16 * BS, os.SEEK_HOLE) == 17 * BS
    assert _seek(fd, 17 * BS, os.SEEK_DATA) == -errno.ENXIO


@pytest.mark.rrfuse_only
def test_fallocate_maps_only_the_range_asked_for(fs):
    """libext2fs's ext2fs_fallocate maps the whole hole up to the next
    extent: 4 KiB in front of a block at 117 MiB mapped 117 MiB.  As the
    kernel: 4 KiB, one unwritten extent of one block."""
    p = fs.path("far")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, b"x" * 4096, 117 << 20)
        os.fsync(fd)
        before = os.fstat(fd).st_blocks
        fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 4096)
        os.fsync(fd)
        assert os.fstat(fd).st_blocks - before == 8
        assert os.pread(fd, 4096, 0) == b"\0" * 4096
    finally:
        os.close(fd)


@pytest.mark.rrfuse_only
@pytest.mark.image(size="64M", mkfs_args=["-m", "0"])
def test_small_fallocate_on_a_nearly_full_filesystem(fs):
    """A 4 KiB request needs 4 KiB, not the whole hole in front of the next extent."""
    p = fs.path("far")
    with open(p, "wb") as f:
        f.seek(48 << 20)
        f.write(b"y" * 4096)
        os.fsync(f.fileno())
    filler = fs.path("filler")
    sv = os.statvfs(fs.mnt)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        # Leave about 64 blocks free.
        fallocate(fd, 0, 0, max(sv.f_bavail - 64, 1) * sv.f_frsize)
    finally:
        os.close(fd)
    fd = os.open(p, os.O_RDWR)
    try:
        fallocate(fd, FALLOC_FL_KEEP_SIZE, 8192, 4096)
    finally:
        os.close(fd)


@pytest.mark.rrfuse_only
@pytest.mark.image(size="64M", mkfs_args=["-O", "^extent,^flex_bg,^64bit"])
def test_fallocate_on_a_block_mapped_file_is_not_supported(fs):
    """As ext4 (ext4_fallocate): no unwritten blocks without extents."""
    fd = os.open(fs.path("f"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        with pytest.raises(OSError) as e:
            fallocate(fd, 0, 0, 1 << 20)
        assert e.value.errno == errno.EOPNOTSUPP
        os.write(fd, b"still writable")
    finally:
        os.close(fd)


def test_seek_data_finds_writes_not_yet_written_back(fs):
    """fstests' seek_sanity_test: a 1-byte pwrite at offset 2 of an empty
    file, then SEEK_DATA.  With the writeback cache the byte is still in
    the kernel's cache when the daemon is asked; a hole must never be
    reported where a write has landed."""
    fd = os.open(fs.path("s"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, b"a", 2)
        assert os.lseek(fd, 0, os.SEEK_DATA) == 0
        assert os.lseek(fd, 0, os.SEEK_HOLE) == 3
        os.pwrite(fd, b"b", 1 << 20)
        assert os.lseek(fd, 4096, os.SEEK_DATA) == 1 << 20
        assert os.lseek(fd, 0, os.SEEK_HOLE) == 4096
        assert os.lseek(fd, 1 << 20, os.SEEK_HOLE) == (1 << 20) + 1
    finally:
        os.close(fd)

"""Regular files: open flags, read/write round trips, holes, truncate,
unlink, big and many files."""

import errno
import mmap
import os
import random
import stat

import pytest

from conftest import pattern, syncfs, wait_for

MiB = 1 << 20
GiB = 1 << 30


def umask():
    old = os.umask(0)
    os.umask(old)
    return old


def write_all(fd, data, off=None):
    view = memoryview(data)
    done = 0
    while done < len(data):
        if off is None:
            n = os.write(fd, view[done:])
        else:
            n = os.pwrite(fd, view[done:], off + done)
        assert n > 0
        done += n


def read_all(path):
    with open(path, "rb") as f:
        return f.read()


def put(path, data):
    with open(path, "wb") as f:
        f.write(data)


# ----------------------------------------------------------- open flags

def test_create_excl(fs):
    p = fs.path("f")
    fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o640)
    try:
        st = os.fstat(fd)
        assert stat.S_ISREG(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o640 & ~umask()
        assert st.st_size == 0 and st.st_nlink == 1
        assert st.st_uid == os.geteuid() and st.st_gid == os.getegid()
        os.write(fd, b"hello")
    finally:
        os.close(fd)
    with pytest.raises(FileExistsError):
        os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    # O_EXCL on an existing directory and symlink (even dangling)
    os.mkdir(fs.path("d"))
    with pytest.raises(FileExistsError):
        os.open(fs.path("d"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    os.symlink("nowhere", fs.path("dangling"))
    with pytest.raises(FileExistsError):
        os.open(fs.path("dangling"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    assert not os.path.exists(fs.path("nowhere"))
    # O_CREAT without O_EXCL opens the existing file and keeps content
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        assert os.read(fd, 100) == b"hello"
        assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o640 & ~umask()
    finally:
        os.close(fd)
    assert sorted(os.listdir(fs.mnt)) == ["d", "dangling", "f", "lost+found"]


def test_open_errors(fs):
    with pytest.raises(FileNotFoundError):
        os.open(fs.path("missing"), os.O_RDONLY)
    with pytest.raises(FileNotFoundError):
        os.open(fs.path("nodir", "f"), os.O_CREAT | os.O_WRONLY)
    put(fs.path("file"), b"x")
    with pytest.raises(NotADirectoryError):
        os.open(fs.path("file", "f"), os.O_CREAT | os.O_WRONLY)
    os.mkdir(fs.path("dir"))
    with pytest.raises(IsADirectoryError):
        os.open(fs.path("dir"), os.O_WRONLY)
    with pytest.raises(IsADirectoryError):
        os.open(fs.path("dir"), os.O_CREAT | os.O_WRONLY)
    with pytest.raises(OSError) as ei:
        os.open(fs.path("x" * 256), os.O_CREAT | os.O_WRONLY)
    assert ei.value.errno == errno.ENAMETOOLONG
    # 255 bytes is the longest legal name
    put(fs.path("y" * 255), b"long")
    assert read_all(fs.path("y" * 255)) == b"long"
    with pytest.raises(OSError) as ei:
        os.open(fs.path("file"), os.O_RDONLY | os.O_DIRECTORY)
    assert ei.value.errno == errno.ENOTDIR


def test_trunc(fs):
    p = fs.path("t")
    put(p, pattern("t", 3 * MiB + 123))
    fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
    try:
        st = os.fstat(fd)
        assert st.st_size == 0
        os.write(fd, b"new")
    finally:
        os.close(fd)
    assert read_all(p) == b"new"
    # O_TRUNC on an empty file, and O_TRUNC|O_CREAT on a missing one
    fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
    os.close(fd)
    st = os.stat(p)
    assert st.st_size == 0
    assert wait_for(lambda: os.stat(p).st_blocks == 0)
    fd = os.open(fs.path("t2"), os.O_WRONLY | os.O_TRUNC | os.O_CREAT, 0o600)
    os.close(fd)
    assert os.stat(fs.path("t2")).st_size == 0


def test_append(fs):
    p = fs.path("a")
    put(p, b"start\n")
    fd1 = os.open(p, os.O_WRONLY | os.O_APPEND)
    fd2 = os.open(p, os.O_WRONLY | os.O_APPEND)
    try:
        expect = b"start\n"
        for i in range(200):
            line = (b"%d-" % i) * (1 + i % 50) + b"\n"
            fd = fd1 if i % 2 else fd2
            os.write(fd, line)
            expect += line
            # O_APPEND leaves the position at the new end of file
            assert os.lseek(fd, 0, os.SEEK_CUR) == len(expect)
        # lseek has no effect on where O_APPEND writes go
        os.lseek(fd1, 0, os.SEEK_SET)
        os.write(fd1, b"tail")
        expect += b"tail"
    finally:
        os.close(fd1)
        os.close(fd2)
    assert read_all(p) == expect
    with open(p, "ab") as f:
        f.write(b"!")
    assert read_all(p) == expect + b"!"


# ------------------------------------------------------- data round trips

SIZES = [0, 1, 2, 100, 511, 512, 513, 4095, 4096, 4097, 8191, 8192, 8193,
         12 * 4096 - 1, 12 * 4096, 12 * 4096 + 1, 65535, 65536, 65537,
         128 * 1024 - 1, 128 * 1024, 128 * 1024 + 1, MiB - 1, MiB, MiB + 1,
         3 * MiB + 4097]


def test_roundtrip_sizes(fs):
    expect = {}
    for n in SIZES:
        data = pattern(n, n)
        name = "s%d" % n
        put(fs.path(name), data)
        expect[name] = data
    # written in odd chunk sizes through one fd
    for chunk in (1, 7, 1000, 4096, 5000, 65536 + 3):
        data = pattern("c%d" % chunk, 300 * 1024 + chunk)
        fd = os.open(fs.path("c%d" % chunk), os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            for off in range(0, len(data), chunk):
                os.write(fd, data[off:off + chunk])
        finally:
            os.close(fd)
        expect["c%d" % chunk] = data

    def verify():
        for name, data in expect.items():
            st = os.stat(fs.path(name))
            assert st.st_size == len(data), name
            assert read_all(fs.path(name)) == data, name
            # unaligned preads
            fd = os.open(fs.path(name), os.O_RDONLY)
            try:
                for off in (0, 1, 4095, 4096, 4097, len(data) // 2,
                            len(data) - 1, len(data), len(data) + 10):
                    if off < 0:
                        continue
                    got = os.pread(fd, 10000, off)
                    assert got == data[off:off + 10000], (name, off)
            finally:
                os.close(fd)

    verify()
    fs.remount()
    verify()


def test_random_writes_model(fs):
    """Random pwrite/truncate/read against an in-memory model."""
    rng = random.Random(1234)
    p = fs.path("model")
    model = bytearray()
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        for step in range(400):
            op = rng.random()
            if op < 0.6:
                off = rng.choice([rng.randrange(0, 2 * MiB),
                                  rng.randrange(0, len(model) + 1),
                                  rng.randrange(0, 64) * 4096])
                n = rng.choice([1, 100, 4096, 4097, rng.randrange(1, 200000)])
                data = pattern((step, off), n)
                write_all(fd, data, off)
                if off > len(model):
                    model.extend(bytes(off - len(model)))
                model[off:off + n] = data
            elif op < 0.75:
                n = rng.choice([0, rng.randrange(0, len(model) + 1),
                                rng.randrange(0, 3 * MiB), 4096 * 3 + 5])
                os.ftruncate(fd, n)
                if n < len(model):
                    del model[n:]
                else:
                    model.extend(bytes(n - len(model)))
            else:
                off = rng.randrange(0, len(model) + 2)
                n = rng.randrange(0, 300000)
                assert os.pread(fd, n, off) == bytes(model[off:off + n]), step
            assert os.fstat(fd).st_size == len(model), step
    finally:
        os.close(fd)
    assert read_all(p) == bytes(model)
    fs.remount()
    assert read_all(p) == bytes(model)


def test_overwrite_in_place(fs):
    p = fs.path("o")
    base = bytearray(pattern("o", 5 * 4096 + 77))
    put(p, base)
    ino = os.stat(p).st_ino
    fd = os.open(p, os.O_RDWR)
    try:
        for off, n in ((0, 1), (4095, 2), (4096, 4096), (8000, 9000),
                       (len(base) - 1, 1), (len(base) - 10, 20)):
            data = pattern((off, n), n)
            os.pwrite(fd, data, off)
            base[off:off + n] = data
    finally:
        os.close(fd)
    assert read_all(p) == bytes(base)
    assert os.stat(p).st_ino == ino


def test_mmap_shared(fs):
    p = fs.path("m")
    put(p, bytes(3 * 4096))
    with open(p, "r+b") as f:
        mm = mmap.mmap(f.fileno(), 0)
        mm[100:105] = b"hello"
        mm[8190:8194] = b"edge"
        mm.flush()
        mm.close()
    data = read_all(p)
    assert data[100:105] == b"hello" and data[8190:8194] == b"edge"
    assert len(data) == 3 * 4096
    with open(p, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        assert mm[100:105] == b"hello"
        mm.close()
    fs.remount()
    assert read_all(p)[8190:8194] == b"edge"


# ------------------------------------------------------------------ holes

def test_sparse_holes(fs):
    p = fs.path("sparse")
    a, b = pattern("a", 10000), pattern("b", 5000)
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.pwrite(fd, a, 0)
        os.pwrite(fd, b, 10 * MiB + 3)
        os.fsync(fd)
    finally:
        os.close(fd)
    size = 10 * MiB + 3 + len(b)

    def verify():
        st = os.stat(p)
        assert st.st_size == size
        assert st.st_blocks * 512 < 1 * MiB, "hole was allocated"
        data = read_all(p)
        assert data[:len(a)] == a
        assert data[len(a):10 * MiB + 3] == bytes(10 * MiB + 3 - len(a))
        assert data[10 * MiB + 3:] == b
        fd = os.open(p, os.O_RDONLY)
        try:
            assert os.lseek(fd, 0, os.SEEK_DATA) == 0
            h = os.lseek(fd, 0, os.SEEK_HOLE)
            # a filesystem may report the whole file as data
            assert h == size or 12288 <= h <= 10 * MiB
        finally:
            os.close(fd)

    verify()
    fs.remount()
    verify()


def test_truncate_extend_reads_zero(fs):
    """Shrink into the middle of a block, then grow: the tail of that
    block must read as zeros, not as the old data."""
    p = fs.path("tz")
    data = pattern("tz", 3 * 4096)
    put(p, data)
    os.truncate(p, 4096 + 100)
    os.truncate(p, 3 * 4096)
    got = read_all(p)
    assert got[:4096 + 100] == data[:4096 + 100]
    assert got[4096 + 100:] == bytes(2 * 4096 - 100)
    # the same with a write beyond EOF instead of truncate
    put(p, data)
    fd = os.open(p, os.O_RDWR)
    try:
        os.ftruncate(fd, 5000)
        os.pwrite(fd, b"X", 20000)
    finally:
        os.close(fd)
    got = read_all(p)
    assert len(got) == 20001
    assert got[:5000] == data[:5000]
    assert got[5000:20000] == bytes(15000)
    assert got[20000:] == b"X"
    # extend an empty file by truncate only
    p2 = fs.path("grown")
    put(p2, b"")
    os.truncate(p2, 7 * MiB + 5)
    assert os.stat(p2).st_size == 7 * MiB + 5
    assert read_all(p2) == bytes(7 * MiB + 5)
    fs.remount()
    assert read_all(p2) == bytes(7 * MiB + 5)
    assert read_all(p)[5000:20000] == bytes(15000)


@pytest.mark.image(size="8G")
def test_5gib_sparse(fs):
    p = fs.path("big")
    first, last = pattern("first", MiB), pattern("last", MiB)
    size = 5 * GiB
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        write_all(fd, first, 0)
        write_all(fd, last, size - MiB)
        os.fsync(fd)
    finally:
        os.close(fd)

    def verify():
        st = os.stat(p)
        assert st.st_size == size
        assert st.st_blocks * 512 < 16 * MiB
        fd = os.open(p, os.O_RDONLY)
        try:
            assert os.pread(fd, MiB, 0) == first
            assert os.pread(fd, MiB, size - MiB) == last
            for off in (MiB, 2 * MiB - 1, GiB, 2 * GiB - 5, 4 * GiB,
                        4 * GiB + 12345, size - MiB - 8192):
                assert os.pread(fd, 8192, off) == bytes(8192), off
            # crossing from the hole into the data at the end
            got = os.pread(fd, 8192, size - MiB - 4096)
            assert got == bytes(4096) + last[:4096]
            assert os.pread(fd, 100, size - 10) == last[-10:]
            assert os.pread(fd, 100, size) == b""
        finally:
            os.close(fd)

    verify()
    sv = os.statvfs(fs.mnt)
    assert sv.f_bfree * sv.f_frsize > 7 * GiB
    fs.remount()
    verify()


# ----------------------------------------------------- big and many files

def test_several_mib(fs):
    files = {}
    for i, n in enumerate((2 * MiB, 5 * MiB + 1, 8 * MiB - 4096, 9 * MiB + 7)):
        data = pattern("big%d" % i, n)
        fd = os.open(fs.path("big%d" % i), os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            # odd write sizes
            off = 0
            while off < n:
                step = min(n - off, 333333)
                write_all(fd, data[off:off + step])
                off += step
            os.fsync(fd)
        finally:
            os.close(fd)
        files["big%d" % i] = data
    for name, data in files.items():
        assert read_all(fs.path(name)) == data
    fs.remount()
    for name, data in files.items():
        assert os.stat(fs.path(name)).st_size == len(data)
        assert read_all(fs.path(name)) == data


def test_many_files(fs):
    n = 3000
    d = fs.path("many")
    os.mkdir(d)
    for i in range(n):
        with open(os.path.join(d, "file-%05d" % i), "wb") as f:
            f.write(pattern(i, i % 5000))
    fs.remount()
    names = os.listdir(d)
    assert len(names) == n
    assert sorted(names) == ["file-%05d" % i for i in range(n)]
    for i in range(0, n, 7):
        assert read_all(os.path.join(d, "file-%05d" % i)) == pattern(i, i % 5000)
    # delete every third file
    for i in range(0, n, 3):
        os.unlink(os.path.join(d, "file-%05d" % i))
    assert len(os.listdir(d)) == n - len(range(0, n, 3))


@pytest.mark.image(size="2G")
def test_stream_1gib(fs):
    p = fs.path("stream")
    base = bytearray(pattern("stream", MiB))
    count = 1024

    def chunk(i):
        base[0:8] = i.to_bytes(8, "little")
        base[-8:] = (i * 7919).to_bytes(8, "little")
        return bytes(base)

    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        for i in range(count):
            write_all(fd, chunk(i))
        os.fsync(fd)
    finally:
        os.close(fd)
    assert os.stat(p).st_size == count * MiB
    fd = os.open(p, os.O_RDONLY)
    try:
        for i in range(count):
            got = os.read(fd, MiB)
            if len(got) < MiB:
                got += os.read(fd, MiB - len(got))
            assert got == chunk(i), "chunk %d differs" % i
        assert os.read(fd, 1) == b""
    finally:
        os.close(fd)


# ------------------------------------------------------------------ unlink

def test_unlink(fs):
    p = fs.path("u")
    sv0 = os.statvfs(fs.mnt)
    put(p, pattern("u", 4 * MiB))
    syncfs(fs.mnt)
    sv1 = os.statvfs(fs.mnt)
    assert sv1.f_bfree <= sv0.f_bfree - 1024
    assert sv1.f_ffree == sv0.f_ffree - 1
    os.unlink(p)
    assert not os.path.lexists(p)
    with pytest.raises(FileNotFoundError):
        os.stat(p)
    with pytest.raises(FileNotFoundError):
        os.unlink(p)
    assert "u" not in os.listdir(fs.mnt)
    # the space and the inode come back
    assert wait_for(lambda: os.statvfs(fs.mnt).f_bfree >= sv0.f_bfree - 2)
    assert wait_for(lambda: os.statvfs(fs.mnt).f_ffree == sv0.f_ffree)
    # unlink on a directory is refused
    os.mkdir(fs.path("d"))
    with pytest.raises(OSError) as ei:
        os.unlink(fs.path("d"))
    assert ei.value.errno in (errno.EISDIR, errno.EPERM)
    # a new file with the same name is a new empty file
    put(p, b"again")
    assert read_all(p) == b"again"


def test_statvfs(fs):
    sv = os.statvfs(fs.mnt)
    assert sv.f_bsize == 4096 or sv.f_frsize == 4096
    assert sv.f_frsize * sv.f_blocks <= 256 * MiB
    assert sv.f_frsize * sv.f_blocks > 200 * MiB
    assert 0 < sv.f_bavail <= sv.f_bfree <= sv.f_blocks
    assert 0 < sv.f_ffree <= sv.f_files
    assert sv.f_namemax == 255

"""Files that are unlinked (or replaced) while still open."""

import os

from conftest import pattern, syncfs, wait_for

MiB = 1 << 20


def put(path, data):
    with open(path, "wb") as f:
        f.write(data)


def get(path):
    with open(path, "rb") as f:
        return f.read()


def pread_all(fd, n, off):
    parts = []
    while n > 0:
        b = os.pread(fd, n, off)
        if not b:
            break
        parts.append(b)
        n -= len(b)
        off += len(b)
    return b"".join(parts)


def free_blocks(fs):
    return os.statvfs(fs.mnt).f_bfree


def free_inodes(fs):
    return os.statvfs(fs.mnt).f_ffree


def settled(fs):
    syncfs(fs.mnt)
    return free_blocks(fs), free_inodes(fs)


def test_unlink_while_open(fs):
    b0, i0 = settled(fs)
    p = fs.path("f")
    first = pattern("first", 8 * MiB)
    second = pattern("second", 8 * MiB)
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.write(fd, first)
        os.fsync(fd)
        assert free_blocks(fs) <= b0 - 2048
        os.unlink(p)
        assert not os.path.lexists(p)
        assert os.listdir(fs.mnt) == ["lost+found"]
        st = os.fstat(fd)
        assert st.st_nlink == 0 and st.st_size == 8 * MiB
        # keep using the fd
        os.write(fd, second)
        assert os.fstat(fd).st_size == 16 * MiB
        assert pread_all(fd, 8 * MiB, 0) == first
        assert pread_all(fd, 8 * MiB, 8 * MiB) == second
        os.ftruncate(fd, 3 * MiB)
        assert pread_all(fd, 16 * MiB, 0) == first[:3 * MiB]
        os.pwrite(fd, b"tail", 5 * MiB)
        assert pread_all(fd, 4, 5 * MiB) == b"tail"
        os.fsync(fd)
        # a new file with the same name is a different file
        put(p, b"replacement")
        assert os.stat(p).st_ino != os.fstat(fd).st_ino
        assert pread_all(fd, 10, 0) == first[:10]
        assert get(p) == b"replacement"
        os.unlink(p)
        # the space is still in use while the fd is open
        syncfs(fs.mnt)
        assert free_blocks(fs) <= b0 - 700
    finally:
        os.close(fd)
    # close releases the space and the inode (RELEASE/FORGET are async)
    assert wait_for(lambda: free_blocks(fs) >= b0 - 2, timeout=10), \
        (free_blocks(fs), b0)
    assert wait_for(lambda: free_inodes(fs) == i0, timeout=10)


def test_new_file_does_not_reuse_open_inode(fs):
    """The daemon must keep an unlinked-but-open inode alive: a file
    created afterwards must not get it (and its data must not show up
    through the old fd)."""
    fds = []
    try:
        for i in range(20):
            p = fs.path("f%d" % i)
            put(p, pattern(i, 5000))
            fd = os.open(p, os.O_RDONLY)
            fds.append((fd, os.fstat(fd).st_ino))
            os.unlink(p)
        new_inos = set()
        for i in range(20):
            p = fs.path("g%d" % i)
            put(p, b"new file %d" % i)
            new_inos.add(os.stat(p).st_ino)
        assert not new_inos & {ino for _, ino in fds}
        for i, (fd, ino) in enumerate(fds):
            assert os.fstat(fd).st_ino == ino
            assert os.fstat(fd).st_nlink == 0
            assert pread_all(fd, 6000, 0) == pattern(i, 5000)
    finally:
        for fd, _ in fds:
            os.close(fd)
    for i in range(20):
        assert get(fs.path("g%d" % i)) == b"new file %d" % i


def test_two_fds_and_hard_link(fs):
    b0, i0 = settled(fs)
    a, b = fs.path("a"), fs.path("b")
    put(a, pattern("a", 2 * MiB))
    os.link(a, b)
    fd1 = os.open(a, os.O_RDWR)
    fd2 = os.open(b, os.O_RDWR)
    try:
        os.unlink(a)
        assert os.stat(b).st_nlink == 1
        assert os.fstat(fd1).st_nlink == 1
        os.pwrite(fd1, b"via fd1", 100)
        assert pread_all(fd2, 7, 100) == b"via fd1"
        assert get(b)[100:107] == b"via fd1"
        os.unlink(b)
        assert os.fstat(fd2).st_nlink == 0
        assert os.listdir(fs.mnt) == ["lost+found"]
        os.pwrite(fd2, b"via fd2", 3 * MiB)
        assert os.fstat(fd1).st_size == 3 * MiB + 7
        assert pread_all(fd1, 7, 3 * MiB) == b"via fd2"
        os.close(fd1)
        fd1 = -1
        # still alive through fd2
        assert pread_all(fd2, 7, 100) == b"via fd1"
        syncfs(fs.mnt)
        assert free_blocks(fs) <= b0 - 500
        assert free_inodes(fs) == i0 - 1
    finally:
        if fd1 >= 0:
            os.close(fd1)
        os.close(fd2)
    assert wait_for(lambda: free_blocks(fs) >= b0 - 2, timeout=10)
    assert wait_for(lambda: free_inodes(fs) == i0, timeout=10)


def test_rename_over_open_file(fs):
    b0, i0 = settled(fs)
    put(fs.path("target"), pattern("target", 4 * MiB))
    put(fs.path("src"), b"small")
    fd = os.open(fs.path("target"), os.O_RDONLY)
    try:
        os.rename(fs.path("src"), fs.path("target"))
        assert os.fstat(fd).st_nlink == 0
        assert pread_all(fd, 4 * MiB, 0) == pattern("target", 4 * MiB)
        assert get(fs.path("target")) == b"small"
    finally:
        os.close(fd)
    assert wait_for(lambda: free_inodes(fs) == i0 - 1, timeout=10)
    assert wait_for(lambda: free_blocks(fs) >= b0 - 3, timeout=10)


def test_many_unlinked_open_then_remount(fs):
    """Many open-unlinked files, closed in arbitrary order; afterwards
    the image must be clean (no orphans left behind)."""
    b0, i0 = settled(fs)
    fds = []
    for i in range(64):
        p = fs.path("o%d" % i)
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o600)
        os.write(fd, pattern(i, 100000 + i))
        os.unlink(p)
        fds.append(fd)
    for i in list(range(0, 64, 2)) + list(range(1, 64, 2)):
        assert pread_all(fds[i], 200000, 0) == pattern(i, 100000 + i)
        os.close(fds[i])
    assert wait_for(lambda: free_inodes(fs) == i0, timeout=10)
    assert wait_for(lambda: free_blocks(fs) >= b0 - 2, timeout=10)
    fs.remount()
    assert os.listdir(fs.mnt) == ["lost+found"]
    assert free_inodes(fs) == i0


def test_unlinked_dir_open(fs):
    """rmdir of a directory that is open (and is the cwd of a child)."""
    d = fs.path("d")
    os.mkdir(d)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.rmdir(d)
        assert os.fstat(fd).st_nlink == 0
        assert os.listdir(fd) == []
        # creating entries in a deleted directory fails
        try:
            os.open("x", os.O_CREAT | os.O_WRONLY, dir_fd=fd)
            raise AssertionError("create in a removed directory succeeded")
        except FileNotFoundError:
            pass
    finally:
        os.close(fd)
    assert os.stat(fs.mnt).st_nlink == 3

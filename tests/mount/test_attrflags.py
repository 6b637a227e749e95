"""lsattr/chattr (FS_IOC_GETFLAGS/SETFLAGS, FS_IOC_FSGETXATTR/FSSETXATTR):
the flags are ext4's, stored in the inode, and +i / +a are enforced as the
kernel's VFS enforces them on ext4 (EPERM)."""
import errno
import os
import subprocess

import pytest

from conftest import debugfs, fallocate, fsck

pytestmark = pytest.mark.skipif(
    subprocess.run(["which", "chattr"], capture_output=True).returncode != 0,
    reason="needs chattr/lsattr (e2fsprogs)")

IMMUTABLE, APPEND, NODUMP, NOATIME, EXTENTS = 0x10, 0x20, 0x40, 0x80, 0x80000
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 0x01, 0x02


def chattr(*args):
    return subprocess.run(["chattr"] + list(args), capture_output=True, text=True)


def lsattr(path):
    r = subprocess.run(["lsattr", "-d", path], capture_output=True, text=True, check=True)
    return r.stdout.split()[0]


def eperm(fn, *args):
    with pytest.raises(OSError) as e:
        fn(*args)
    assert e.value.errno == errno.EPERM, e.value


def inode_flags(image, path):
    out = debugfs(image, "stat " + path)
    return int(out.split("Flags:")[1].split()[0], 16)


def test_immutable_file(fs):
    p = fs.path("f")
    with open(p, "w") as f:
        f.write("keep\n")
    assert "e" in lsattr(p)
    r = chattr("+i", p)
    assert r.returncode == 0, r.stderr
    assert "i" in lsattr(p)
    eperm(open, p, "a")
    eperm(open, p, "r+")
    eperm(os.truncate, p, 0)
    eperm(os.unlink, p)
    eperm(os.rename, p, fs.path("g"))
    eperm(os.link, p, fs.path("h"))
    eperm(os.chmod, p, 0o600)
    eperm(os.utime, p, (1, 1))
    eperm(os.setxattr, p, "user.x", b"1")
    with open(p) as f:
        assert f.read() == "keep\n"
    r = chattr("-i", p)
    assert r.returncode == 0, r.stderr
    os.chmod(p, 0o600)
    os.unlink(p)


def test_append_only_file(fs):
    p = fs.path("log")
    with open(p, "w") as f:
        f.write("one\n")
    assert chattr("+a", p).returncode == 0
    with open(p, "a") as f:
        f.write("two\n")
    eperm(open, p, "w")
    eperm(open, p, "r+")
    eperm(os.truncate, p, 0)
    eperm(os.unlink, p)
    eperm(os.chmod, p, 0o600)
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    try:
        # Punching a hole would shrink what was appended.
        eperm(fallocate, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096)
    finally:
        os.close(fd)
    with open(p) as f:
        assert f.read() == "one\ntwo\n"
    assert chattr("-a", p).returncode == 0


def test_directory_flags(fs):
    d = fs.path("d")
    os.mkdir(d)
    open(os.path.join(d, "old"), "w").close()
    assert chattr("+i", d).returncode == 0
    eperm(open, os.path.join(d, "new"), "w")
    eperm(os.mkdir, os.path.join(d, "sub"))
    eperm(os.unlink, os.path.join(d, "old"))
    assert chattr("-i", d).returncode == 0
    assert chattr("+a", d).returncode == 0
    open(os.path.join(d, "new"), "w").close()       # entries may come in
    eperm(os.unlink, os.path.join(d, "new"))         # but never leave
    eperm(os.rename, os.path.join(d, "new"), fs.path("out"))
    assert chattr("-a", d).returncode == 0
    os.unlink(os.path.join(d, "new"))


@pytest.mark.opts("allow_other")
def test_flags_are_stored_and_checked(fs, as_user):
    p = fs.path("f")
    open(p, "w").close()
    os.chown(p, 65534, 65534)
    # The owner sets ordinary flags; only root sets i and a; others nothing.
    r = as_user(["chattr", "+dA", p])
    assert r.returncode == 0, r.stderr
    r = as_user(["chattr", "+i", p])
    assert r.returncode != 0 and "not permitted" in r.stderr, r.stderr
    r = as_user(["chattr", "+d", fs.path(".")])
    assert r.returncode != 0
    assert set("dA") <= set(lsattr(p))
    fs.unmount()
    flags = inode_flags(fs.image, "/f")
    assert flags & NODUMP and flags & NOATIME and flags & EXTENTS
    assert not flags & (IMMUTABLE | APPEND)
    rc, out = fsck(fs.image)
    assert rc == 0, out
    fs.mount()
    assert set("dA") <= set(lsattr(p))


FS_IOC_FSGETXATTR, FS_IOC_FSSETXATTR = 0x801C581F, 0x401C5820
FS_XFLAG_NODUMP, FS_XFLAG_NOATIME = 0x80, 0x40


def test_fsxattr_interface(fs):
    """xfs_io's view (struct fsxattr): the same flags, under their xflag names."""
    import fcntl
    import struct
    p = fs.path("x")
    open(p, "w").close()
    fd = os.open(p, os.O_RDONLY)
    try:
        buf = fcntl.ioctl(fd, FS_IOC_FSGETXATTR, bytes(28))
        xflags, extsize, nextents, projid, cow = struct.unpack("5I8x", buf)
        assert xflags == 0 and projid == 0
        fcntl.ioctl(fd, FS_IOC_FSSETXATTR,
                    struct.pack("5I8x", FS_XFLAG_NODUMP | FS_XFLAG_NOATIME, 0, 0, 0, 0))
        xflags = struct.unpack("5I8x", fcntl.ioctl(fd, FS_IOC_FSGETXATTR, bytes(28)))[0]
        assert xflags == FS_XFLAG_NODUMP | FS_XFLAG_NOATIME
    finally:
        os.close(fd)
    assert set("dA") <= set(lsattr(p))


def chattr_moves_ctime(fs, p):
    """chattr +A then -A: each gives a new ctime that stat shows at once
    (fstests generic/277), and the last one is on disk."""
    import time
    before = os.stat(p).st_ctime_ns
    seen = []
    for op in ("+A", "-A"):
        time.sleep(0.01)
        r = chattr(op, p)
        assert r.returncode == 0, r.stderr
        seen.append(os.stat(p).st_ctime_ns)
    assert before < seen[0] < seen[1], (before, seen)
    fs.unmount()
    out = debugfs(fs.image, "stat /" + os.path.basename(p))
    sec, extra = (int(x, 16) for x in out.split("ctime: 0x")[1].split()[0].split(":"))
    assert sec * 10**9 + (extra >> 2) == seen[1]
    fs.mount()


def test_chattr_ctime_directory(fs):
    os.mkdir(fs.path("d"))
    chattr_moves_ctime(fs, fs.path("d"))


@pytest.mark.opts("no_writeback_cache")
def test_chattr_ctime_file(fs):
    open(fs.path("f"), "w").close()
    chattr_moves_ctime(fs, fs.path("f"))


@pytest.mark.rrfuse_only
@pytest.mark.xfail(strict=True, reason="with the writeback cache the kernel keeps a regular "
                   "file's ctime itself and takes none from the server (fuse_get_cache_mask)")
def test_chattr_ctime_file_writeback_cache(fs):
    open(fs.path("f"), "w").close()
    chattr_moves_ctime(fs, fs.path("f"))


def utimensat(path, atime, mtime):
    """utimensat(2) with (sec, nsec) pairs; nsec may be UTIME_NOW/UTIME_OMIT."""
    import ctypes

    class Timespec(ctypes.Structure):
        _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

    libc = ctypes.CDLL(None, use_errno=True)
    ts = (Timespec * 2)(Timespec(*atime), Timespec(*mtime))
    if libc.utimensat(-100, os.fsencode(path), ts, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)


UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2


@pytest.mark.parametrize("kind", ["file", "dir", pytest.param(
    "file", id="file-no_writeback_cache", marks=pytest.mark.opts("no_writeback_cache"))])
def test_append_only_times(fs, kind):
    # fstests generic/079, the kernel's may_setattr(): on an append-only
    # inode, times given explicitly are EPERM (UTIME_OMIT for one of them
    # too); "now" for both (utimes(NULL)) is allowed.
    p = fs.path("a")
    if kind == "dir":
        os.mkdir(p)
    else:
        with open(p, "w") as f:
            f.write("x\n")
    os.utime(p, (1000, 1000))
    assert chattr("+a", p).returncode == 0
    eperm(os.utime, p, (2000, 2000))
    eperm(lambda: os.utime(p, ns=(5, 7)))
    eperm(utimensat, p, (0, UTIME_NOW), (0, UTIME_OMIT))
    eperm(utimensat, p, (0, UTIME_OMIT), (3000, 0))
    eperm(utimensat, p, (0, UTIME_OMIT), (0, UTIME_NOW))
    eperm(utimensat, p, (3000, 0), (0, UTIME_NOW))
    assert os.stat(p).st_mtime == 1000
    os.utime(p)
    assert os.stat(p).st_mtime > 1000 and os.stat(p).st_atime > 1000
    utimensat(p, (0, UTIME_NOW), (0, UTIME_NOW))
    if kind == "file":
        with open(p, "a") as f:     # appending still moves mtime
            f.write("y\n")
    assert chattr("-a", p).returncode == 0


def test_immutable_times(fs):
    p = fs.path("i")
    open(p, "w").close()
    assert chattr("+i", p).returncode == 0
    eperm(os.utime, p)
    eperm(os.utime, p, (1, 1))
    eperm(utimensat, p, (0, UTIME_NOW), (0, UTIME_NOW))
    assert chattr("-i", p).returncode == 0


@pytest.mark.parametrize("opts", ["", pytest.param("no_writeback_cache", marks=pytest.mark.opts(
    "no_writeback_cache"))])
def test_immutable_after_open(fs, opts):
    # fstests generic/553: a descriptor opened for writing before chattr +i
    # can no longer change the file (ext4: generic_write_checks and
    # friends), whatever the call; what was written before stays.  (Reads
    # through it fail too under the writeback cache: see rr_getattr.)
    src, dst = fs.path("src"), fs.path("dst")
    with open(src, "wb") as f:
        f.write(b"s" * 8192)
    fd = os.open(dst, os.O_RDWR | os.O_CREAT, 0o644)
    s = os.open(src, os.O_RDONLY)
    try:
        os.write(fd, b"before\n")
        assert chattr("+i", dst).returncode == 0
        eperm(os.copy_file_range, s, fd, 4096, 0, 0)
        eperm(os.pwrite, fd, b"after", 0)
        os.fstat(fd)                # fresh attributes open no way around it
        eperm(os.pwrite, fd, b"after", 100)
        eperm(fallocate, fd, 0, 0, 65536)
        eperm(os.ftruncate, fd, 0)
    finally:
        os.close(s)
        try:
            os.close(fd)
        except OSError:
            pass
    assert chattr("-i", dst).returncode == 0
    with open(dst, "rb") as f:
        assert f.read() == b"before\n"

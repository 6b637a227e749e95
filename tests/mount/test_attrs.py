"""Inode attribute tests: mode, ownership, timestamps, truncate, special files,
and permission checks as an unprivileged user.

Every test runs through the ``fs`` fixture (rrfuse, or the kernel's ext4 when
RRFUSE_TEST_KERNEL=1), which also fscks the image and cross-checks it with the
kernel at teardown.
"""
import ctypes
import ctypes.util
import errno
import os
import re
import socket
import stat
import time

import pytest

from conftest import debugfs, run_as

UID_A, GID_A = 1001, 1001
UID_B, GID_B = 1002, 1002

# Tests that act as other users need the mount reachable by them (allow_other)
# and the kernel's mode/ACL checks (default_permissions). Both options are
# dropped in kernel mode.
MULTIUSER = pytest.mark.opts("allow_other,default_permissions")

# --------------------------------------------------------------------------
# helpers

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)

AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc.utimensat.argtypes = [ctypes.c_int, ctypes.c_char_p,
                            ctypes.POINTER(_Timespec), ctypes.c_int]
_libc.utimensat.restype = ctypes.c_int


def utimensat(path, atime, mtime, flags=0):
    """atime/mtime: (sec, nsec) tuples; nsec may be UTIME_NOW / UTIME_OMIT."""
    ts = (_Timespec * 2)(_Timespec(*atime), _Timespec(*mtime))
    if _libc.utimensat(AT_FDCWD, os.fsencode(path), ts, flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)


def write_file(path, data=b"", mode=0o644):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def try_call(fn, *args, **kw):
    """Run fn; return its result or the errno of the OSError it raised.
    Used inside run_as() children so no exception has to cross processes."""
    try:
        r = fn(*args, **kw)
        return "ok" if r is None else r
    except OSError as e:
        return e.errno


def _ns(sec, nsec=0):
    return sec * 1_000_000_000 + nsec


# --------------------------------------------------------------------------
# chmod


ALL_MODES = [0o000, 0o644, 0o755, 0o777, 0o4755, 0o2755, 0o1777, 0o7777,
             0o4000, 0o2000, 0o1000, 0o6511, 0o0123]


def test_chmod_file_all_bits(fs):
    # one file per mode (one image for all: each fs test costs a mkfs+fsck)
    for mode in ALL_MODES:
        p = os.path.join(fs.mnt, "f%04o" % mode)
        write_file(p, b"x")
        os.chmod(p, mode)
        st = os.lstat(p)
        assert stat.S_ISREG(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == mode, "%04o" % mode
    fs.remount()
    for mode in ALL_MODES:
        st = os.lstat(os.path.join(fs.mnt, "f%04o" % mode))
        assert stat.S_IMODE(st.st_mode) == mode, "%04o after remount" % mode


def test_chmod_dir_all_bits(fs):
    d = os.path.join(fs.mnt, "d")
    os.mkdir(d)
    for mode in ALL_MODES:
        os.chmod(d, mode)
        st = os.lstat(d)
        assert stat.S_ISDIR(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == mode, "%04o" % mode
    os.chmod(d, 0o755)


def test_chmod_persists_across_remount(fs):
    p = os.path.join(fs.mnt, "f")
    d = os.path.join(fs.mnt, "d")
    write_file(p)
    os.mkdir(d)
    os.chmod(p, 0o4751)
    os.chmod(d, 0o3750)
    fs.remount()
    assert stat.S_IMODE(os.lstat(p).st_mode) == 0o4751
    assert stat.S_IMODE(os.lstat(d).st_mode) == 0o3750


def test_chmod_changes_ctime_not_mtime(fs):
    p = os.path.join(fs.mnt, "f")
    write_file(p, b"data")
    os.utime(p, ns=(_ns(1_000_000_000, 5), _ns(1_000_000_000, 7)))
    st0 = os.lstat(p)
    time.sleep(0.05)
    os.chmod(p, 0o600)
    st1 = os.lstat(p)
    assert st1.st_ctime_ns > st0.st_ctime_ns
    assert st1.st_mtime_ns == st0.st_mtime_ns == _ns(1_000_000_000, 7)
    assert st1.st_atime_ns == _ns(1_000_000_000, 5)
    # ctime is "now" (allow for clock granularity / a slow daemon)
    assert abs(st1.st_ctime - time.time()) < 30


def test_chown_changes_ctime(fs):
    p = os.path.join(fs.mnt, "f")
    write_file(p)
    st0 = os.lstat(p)
    time.sleep(0.05)
    os.chown(p, 4242, 4343)
    st1 = os.lstat(p)
    assert st1.st_ctime_ns > st0.st_ctime_ns
    assert st1.st_mtime_ns == st0.st_mtime_ns


# --------------------------------------------------------------------------
# chown / lchown


def test_chown_file_and_dir(fs):
    p = os.path.join(fs.mnt, "f")
    d = os.path.join(fs.mnt, "d")
    write_file(p)
    os.mkdir(d)
    os.chown(p, 1234, 5678)
    os.chown(d, 4000000000, 3000000000)  # 32-bit ids (high 16 bits in osd2)
    st = os.lstat(p)
    assert (st.st_uid, st.st_gid) == (1234, 5678)
    st = os.lstat(d)
    assert (st.st_uid, st.st_gid) == (4000000000, 3000000000)
    # -1 leaves a field alone
    os.chown(p, -1, 99)
    assert (os.lstat(p).st_uid, os.lstat(p).st_gid) == (1234, 99)
    os.chown(p, 77, -1)
    assert (os.lstat(p).st_uid, os.lstat(p).st_gid) == (77, 99)
    fs.remount()
    st = os.lstat(p)
    assert (st.st_uid, st.st_gid) == (77, 99)
    st = os.lstat(d)
    assert (st.st_uid, st.st_gid) == (4000000000, 3000000000)


def test_lchown_symlink_not_target(fs):
    t = os.path.join(fs.mnt, "target")
    l = os.path.join(fs.mnt, "link")
    write_file(t)
    os.symlink("target", l)
    os.lchown(l, 2001, 2002)
    lst = os.lstat(l)
    assert stat.S_ISLNK(lst.st_mode)
    assert (lst.st_uid, lst.st_gid) == (2001, 2002)
    tst = os.lstat(t)
    assert (tst.st_uid, tst.st_gid) == (0, 0)
    # chown through the link changes the target only
    os.chown(l, 3001, 3002)
    assert (os.lstat(t).st_uid, os.lstat(t).st_gid) == (3001, 3002)
    assert (os.lstat(l).st_uid, os.lstat(l).st_gid) == (2001, 2002)
    assert os.readlink(l) == "target"


def test_chown_clears_setuid_setgid(fs):
    # chown of a non-directory by root clears S_ISUID, and S_ISGID when
    # group-exec is set (Linux VFS semantics, also applied to FUSE mounts).
    p = os.path.join(fs.mnt, "f")
    write_file(p, b"#!/bin/sh\n")
    os.chmod(p, 0o6755)
    os.chown(p, 1500, 1500)
    assert stat.S_IMODE(os.lstat(p).st_mode) == 0o0755


# --------------------------------------------------------------------------
# timestamps


TIMES = [
    (1_700_000_000, 123_456_789),
    (0, 0),
    (0, 1),
    (1, 999_999_999),
    (-1, 0),                     # 1969-12-31T23:59:59
    (-1_000_000_000, 500),       # 1938
    (-(1 << 31), 0),             # 1901-12-13, smallest 32-bit time
    ((1 << 31) - 1, 999_999_999),  # 2038-01-19 03:14:07
    (1 << 31, 0),                # first second past 2038
    (1 << 32, 42),               # 2106
    (1 << 33, 987_654_321),      # 2242
    ((1 << 34) - (1 << 31) - 2, 7),  # 2446-05-10, just below the limit
    # the largest ext4 time; the kernel zeroes nsec at the limits
    ((1 << 34) - (1 << 31) - 1, 0),
]


def test_utime_ns_exact(fs):
    files = []
    for i, (sec, nsec) in enumerate(TIMES):
        p = os.path.join(fs.mnt, "f%02d" % i)
        write_file(p, b"abc")
        a = _ns(sec, nsec)
        m = _ns(sec + 17 if sec <= 0 else sec - 17, (nsec + 3) % 1_000_000_000)
        os.utime(p, ns=(a, m))
        st = os.lstat(p)
        assert (st.st_atime_ns, st.st_mtime_ns) == (a, m), (sec, nsec)
        files.append((p, a, m))
    fs.remount()
    for p, a, m in files:
        st = os.lstat(p)
        assert (st.st_atime_ns, st.st_mtime_ns) == (a, m), p


def test_utime_survives_remount(fs):
    p = os.path.join(fs.mnt, "f")
    d = os.path.join(fs.mnt, "d")
    write_file(p, b"abc")
    os.mkdir(d)
    vals = {p: (_ns(-86400 * 365 * 20, 11), _ns(1 << 33, 999_999_999)),
            d: (_ns((1 << 31) + 5, 1), _ns(-5, 500_000_000))}
    for path, ns in vals.items():
        os.utime(path, ns=ns)
    fs.remount()
    for path, (a, m) in vals.items():
        st = os.lstat(path)
        assert (st.st_atime_ns, st.st_mtime_ns) == (a, m), path


def test_utime_symlink_nofollow(fs):
    t = os.path.join(fs.mnt, "t")
    l = os.path.join(fs.mnt, "l")
    write_file(t)
    os.symlink("t", l)
    os.utime(t, ns=(_ns(1000), _ns(2000)))
    os.utime(l, ns=(_ns(3000, 3), _ns(4000, 4)), follow_symlinks=False)
    assert os.lstat(l).st_mtime_ns == _ns(4000, 4)
    assert os.lstat(l).st_atime_ns == _ns(3000, 3)
    assert os.lstat(t).st_mtime_ns == _ns(2000)
    assert os.lstat(t).st_atime_ns == _ns(1000)


def test_utimensat_now(fs):
    p = os.path.join(fs.mnt, "f")
    write_file(p)
    os.utime(p, ns=(_ns(100, 1), _ns(200, 2)))
    before = time.time()
    utimensat(p, (0, UTIME_NOW), (0, UTIME_NOW))
    after = time.time()
    st = os.lstat(p)
    # coarse kernel clock granularity: allow a little slack
    assert before - 1 <= st.st_atime <= after + 1
    assert before - 1 <= st.st_mtime <= after + 1
    assert st.st_mtime_ns >= st.st_atime_ns - 1_000_000_000


def test_utimensat_omit(fs):
    p = os.path.join(fs.mnt, "f")
    write_file(p)
    os.utime(p, ns=(_ns(100, 1), _ns(200, 2)))
    # set mtime only
    utimensat(p, (0, UTIME_OMIT), (300, 3))
    st = os.lstat(p)
    assert st.st_atime_ns == _ns(100, 1)
    assert st.st_mtime_ns == _ns(300, 3)
    # set atime only
    utimensat(p, (400, 4), (0, UTIME_OMIT))
    st = os.lstat(p)
    assert st.st_atime_ns == _ns(400, 4)
    assert st.st_mtime_ns == _ns(300, 3)
    # both omitted: nothing changes (ctime may or may not change)
    utimensat(p, (0, UTIME_OMIT), (0, UTIME_OMIT))
    st = os.lstat(p)
    assert (st.st_atime_ns, st.st_mtime_ns) == (_ns(400, 4), _ns(300, 3))
    # mtime NOW, atime OMIT
    before = time.time()
    utimensat(p, (0, UTIME_OMIT), (0, UTIME_NOW))
    st = os.lstat(p)
    assert st.st_atime_ns == _ns(400, 4)
    assert st.st_mtime >= before - 1
    fs.remount()
    st2 = os.lstat(p)
    assert st2.st_atime_ns == _ns(400, 4)
    assert st2.st_mtime_ns == st.st_mtime_ns


def test_utimensat_symlink_nofollow_omit(fs):
    t = os.path.join(fs.mnt, "t")
    l = os.path.join(fs.mnt, "l")
    write_file(t)
    os.symlink("t", l)
    os.utime(l, ns=(_ns(10), _ns(20)), follow_symlinks=False)
    utimensat(l, (0, UTIME_OMIT), (55, 5), AT_SYMLINK_NOFOLLOW)
    st = os.lstat(l)
    assert (st.st_atime_ns, st.st_mtime_ns) == (_ns(10), _ns(55, 5))


def test_write_updates_mtime_ctime(fs):
    p = os.path.join(fs.mnt, "f")
    write_file(p, b"abc")
    os.utime(p, ns=(_ns(1000), _ns(1000)))
    st0 = os.lstat(p)
    with open(p, "r+b") as f:
        f.write(b"xyz")
        f.flush()
        os.fsync(f.fileno())
    st1 = os.lstat(p)
    assert st1.st_mtime_ns > st0.st_mtime_ns
    assert st1.st_ctime_ns >= st0.st_ctime_ns
    assert abs(st1.st_mtime - time.time()) < 30


@MULTIUSER
def test_utime_as_owner_and_non_owner(fs):
    p = os.path.join(fs.mnt, "f")
    write_file(p)
    os.chown(p, UID_A, GID_A)
    os.chmod(p, 0o644)
    # the owner may set explicit times
    r = run_as(UID_A, GID_A,
               lambda: try_call(os.utime, p, ns=(_ns(5), _ns(6))))
    assert r == "ok"
    assert os.lstat(p).st_mtime_ns == _ns(6)
    # a non-owner may not set explicit times (EPERM) ...
    r = run_as(UID_B, GID_B,
               lambda: try_call(os.utime, p, ns=(_ns(7), _ns(8))))
    assert r == errno.EPERM
    # ... nor set "now" without write permission (EACCES)
    r = run_as(UID_B, GID_B, lambda: try_call(os.utime, p))
    assert r == errno.EACCES
    assert os.lstat(p).st_mtime_ns == _ns(6)


# --------------------------------------------------------------------------
# truncate


def test_truncate_shrink_grow(fs):
    p = os.path.join(fs.mnt, "f")
    data = os.urandom(3 * 4096 + 123)
    write_file(p, data)
    os.truncate(p, 5000)
    assert os.lstat(p).st_size == 5000
    assert read_file(p) == data[:5000]
    os.truncate(p, 0)
    assert os.lstat(p).st_size == 0
    assert read_file(p) == b""
    os.truncate(p, 1 << 20)
    assert os.lstat(p).st_size == 1 << 20
    assert read_file(p) == bytes(1 << 20)


def test_truncate_grow_reads_zeros(fs):
    p = os.path.join(fs.mnt, "f")
    write_file(p, b"A" * 100)
    os.truncate(p, 10_000_000)
    st = os.lstat(p)
    assert st.st_size == 10_000_000
    with open(p, "rb") as f:
        assert f.read(100) == b"A" * 100
        rest = f.read()
    assert len(rest) == 10_000_000 - 100
    assert rest.count(0) == len(rest)
    # sparse growth should not allocate 10 MB
    assert st.st_blocks * 512 < 1 << 20


def test_truncate_shrink_then_grow_same_block(fs):
    p = os.path.join(fs.mnt, "f")
    write_file(p, b"X" * 8192)
    with open(p, "rb+") as f:
        os.fsync(f.fileno())  # make sure the block is on disk with X's
    os.truncate(p, 100)
    os.truncate(p, 8192)
    assert read_file(p) == b"X" * 100 + bytes(8192 - 100)
    # same again, through an open fd, unaligned, without fsync in between
    fd = os.open(p, os.O_RDWR)
    try:
        os.pwrite(fd, b"Y" * 8192, 0)
        os.ftruncate(fd, 4097)
        os.ftruncate(fd, 8000)
        assert os.pread(fd, 9000, 0) == b"Y" * 4097 + bytes(8000 - 4097)
    finally:
        os.close(fd)
    fs.remount()
    assert read_file(p) == b"Y" * 4097 + bytes(8000 - 4097)


def test_truncate_large_file_frees_blocks(fs):
    p = os.path.join(fs.mnt, "f")
    write_file(p, os.urandom(4 << 20))
    with open(p, "rb+") as f:
        os.fsync(f.fileno())
    b0 = os.lstat(p).st_blocks
    assert b0 >= (4 << 20) // 512
    os.truncate(p, 4096)
    b1 = os.lstat(p).st_blocks
    assert b1 <= 16
    assert os.lstat(p).st_size == 4096


def test_truncate_updates_mtime_ctime(fs):
    p = os.path.join(fs.mnt, "f")
    write_file(p, b"abc")
    os.utime(p, ns=(_ns(1000), _ns(1000)))
    ct0 = os.lstat(p).st_ctime_ns
    time.sleep(0.05)
    os.truncate(p, 1)
    st = os.lstat(p)
    assert st.st_mtime_ns > _ns(1000)
    assert st.st_ctime_ns > ct0


# --------------------------------------------------------------------------
# special files


def test_mkfifo(fs):
    p = os.path.join(fs.mnt, "fifo")
    os.mkfifo(p, 0o640)
    st = os.lstat(p)
    assert stat.S_ISFIFO(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o640 & ~_umask()
    assert st.st_size == 0
    # it works as a fifo
    r = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    w = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(w, b"through the pipe")
        assert os.read(r, 100) == b"through the pipe"
    finally:
        os.close(w)
        os.close(r)
    fs.remount()
    assert stat.S_ISFIFO(os.lstat(p).st_mode)


def test_mknod_fifo(fs):
    p = os.path.join(fs.mnt, "fifo2")
    os.mknod(p, stat.S_IFIFO | 0o600)
    assert stat.S_ISFIFO(os.lstat(p).st_mode)


def test_unix_socket_bind(fs):
    p = os.path.join(fs.mnt, "sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        srv.bind(p)
        srv.listen(1)
        st = os.lstat(p)
        assert stat.S_ISSOCK(st.st_mode)
        cli = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        cli.connect(p)
        conn, _ = srv.accept()
        cli.sendall(b"hello")
        assert conn.recv(5) == b"hello"
        conn.close()
        cli.close()
    finally:
        srv.close()
    # the socket inode stays after close and survives remount
    fs.remount()
    assert stat.S_ISSOCK(os.lstat(p).st_mode)
    os.unlink(p)
    assert not os.path.lexists(p)


def test_mknod_socket(fs):
    p = os.path.join(fs.mnt, "sock2")
    os.mknod(p, stat.S_IFSOCK | 0o755)
    st = os.lstat(p)
    assert stat.S_ISSOCK(st.st_mode)


DEVICES = [
    (stat.S_IFCHR, 1, 3),          # /dev/null
    (stat.S_IFCHR, 4, 64),
    (stat.S_IFBLK, 8, 1),          # sda1
    (stat.S_IFBLK, 7, 0),
    (stat.S_IFCHR, 0, 0),
    (stat.S_IFCHR, 255, 255),      # largest "old" encoding
    (stat.S_IFCHR, 256, 0),        # needs the new (huge) encoding
    (stat.S_IFBLK, 259, 65536),    # NVMe-style large minor
    (stat.S_IFCHR, 4095, 0xFFFFF),  # largest kernel dev_t: 12-bit major, 20-bit minor
    (stat.S_IFBLK, 1, 0x12345),
]


def test_mknod_device_rdev(fs):
    for i, (kind, major, minor) in enumerate(DEVICES):
        p = os.path.join(fs.mnt, "dev%d" % i)
        os.mknod(p, kind | 0o660, os.makedev(major, minor))
        st = os.lstat(p)
        assert stat.S_IFMT(st.st_mode) == kind, p
        assert stat.S_IMODE(st.st_mode) == 0o660 & ~_umask()
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (major, minor), p


def test_mknod_devices_survive_remount(fs):
    paths = []
    for i, (kind, major, minor) in enumerate(DEVICES):
        p = os.path.join(fs.mnt, "dev%d" % i)
        os.mknod(p, kind | 0o600, os.makedev(major, minor))
        paths.append((p, kind, major, minor))
    fs.remount()
    for p, kind, major, minor in paths:
        st = os.lstat(p)
        assert stat.S_IFMT(st.st_mode) == kind, p
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (major, minor), p


def test_mknod_regular_file(fs):
    p = os.path.join(fs.mnt, "reg")
    os.mknod(p, stat.S_IFREG | 0o600)
    st = os.lstat(p)
    assert stat.S_ISREG(st.st_mode) and st.st_size == 0


def test_mknod_existing_eexist(fs):
    p = os.path.join(fs.mnt, "x")
    os.mkfifo(p)
    with pytest.raises(FileExistsError):
        os.mknod(p, stat.S_IFCHR | 0o600, os.makedev(1, 3))


def _disk_times(image, path):
    """{"atime": ns, ...} of path's inode from debugfs (seconds:extra)."""
    out = debugfs(image, "stat " + path)
    times = {}
    for name in ("atime", "mtime", "ctime", "crtime"):
        m = re.search(r"^\s*%s: 0x([0-9a-f]+):([0-9a-f]+)" % name, out, re.M)
        assert m, "no %s with an extra field in:\n%s" % (name, out)
        base, extra = int(m.group(1), 16), int(m.group(2), 16)
        sec = (base - (1 << 32) if base >> 31 else base) + ((extra & 3) << 32)
        times[name] = _ns(sec, extra >> 2)
    return times


def test_special_files_nanosecond_times(fs):
    # fstests generic/423: mknod'd inodes get the same fine timestamps as
    # regular files, through stat and on disk (crtime too).
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        srv.bind(fs.path("sock"))
    finally:
        srv.close()
    os.mkfifo(fs.path("fifo"))
    os.mknod(fs.path("chr"), stat.S_IFCHR | 0o600, os.makedev(1, 3))
    os.mknod(fs.path("blk"), stat.S_IFBLK | 0o600, os.makedev(7, 0))
    write_file(fs.path("reg"))
    names = ("sock", "fifo", "chr", "blk", "reg")
    seen = {}
    for n in names:
        st = os.lstat(fs.path(n))
        seen[n] = {"atime": st.st_atime_ns, "mtime": st.st_mtime_ns, "ctime": st.st_ctime_ns}
        for k, v in seen[n].items():
            # A whole second is what truncation gives; by chance, once in 10^9.
            assert v % 1_000_000_000, "%s %s is a whole second: %d" % (n, k, v)
    fs.unmount()
    for n in names:
        disk = _disk_times(fs.image, "/" + n)
        assert disk["crtime"] % 1_000_000_000, (n, disk)
        for k in ("atime", "mtime", "ctime"):
            assert disk[k] == seen[n][k], (n, k, disk, seen[n])
    fs.mount()


def _umask():
    m = os.umask(0)
    os.umask(m)
    return m


# --------------------------------------------------------------------------
# permission checks as an unprivileged user


@MULTIUSER
def test_eacces_on_root_0600_file(fs):
    p = os.path.join(fs.mnt, "secret")
    write_file(p, b"top secret", 0o600)
    os.chmod(p, 0o600)
    assert run_as(UID_A, GID_A, lambda: try_call(read_file, p)) == errno.EACCES
    assert run_as(UID_A, GID_A,
                  lambda: try_call(os.open, p, os.O_WRONLY)) == errno.EACCES
    # stat is still allowed (search permission on the root dir)
    r = run_as(UID_A, GID_A, lambda: try_call(lambda: os.lstat(p).st_size))
    assert r == len(b"top secret")
    # root still can
    assert read_file(p) == b"top secret"


@MULTIUSER
def test_permission_bits_user_group_other(fs):
    p = os.path.join(fs.mnt, "f")
    write_file(p, b"data")
    os.chown(p, UID_A, GID_B)
    os.chmod(p, 0o640)
    assert run_as(UID_A, GID_A, lambda: try_call(read_file, p)) == b"data"
    assert run_as(UID_B, GID_B, lambda: try_call(read_file, p)) == b"data"
    assert run_as(UID_B, GID_B,
                  lambda: try_call(os.open, p, os.O_WRONLY)) == errno.EACCES
    assert run_as(1003, 1003, lambda: try_call(read_file, p)) == errno.EACCES
    # owner class wins even if it is more restrictive than group
    os.chmod(p, 0o044)
    assert run_as(UID_A, GID_A, lambda: try_call(read_file, p)) == errno.EACCES
    assert run_as(1003, 1003, lambda: try_call(read_file, p)) == b"data"


@MULTIUSER
def test_dir_search_and_write_permission(fs):
    d = os.path.join(fs.mnt, "d")
    os.mkdir(d, 0o755)
    write_file(os.path.join(d, "f"), b"x")
    # no write permission on the dir: cannot create
    r = run_as(UID_A, GID_A,
               lambda: try_call(write_file, os.path.join(d, "new")))
    assert r == errno.EACCES
    # no search permission: cannot reach entries
    os.chmod(d, 0o700)
    r = run_as(UID_A, GID_A, lambda: try_call(os.lstat, os.path.join(d, "f")))
    assert r == errno.EACCES
    r = run_as(UID_A, GID_A, lambda: try_call(os.listdir, d))
    assert r == errno.EACCES
    os.chmod(d, 0o777)
    r = run_as(UID_A, GID_A,
               lambda: try_call(write_file, os.path.join(d, "new"), b"mine"))
    assert r == "ok"
    st = os.lstat(os.path.join(d, "new"))
    assert (st.st_uid, st.st_gid) == (UID_A, GID_A)


@MULTIUSER
def test_non_owner_cannot_chmod_chown(fs):
    p = os.path.join(fs.mnt, "f")
    write_file(p)
    os.chown(p, UID_A, GID_A)
    assert run_as(UID_B, GID_B, lambda: try_call(os.chmod, p, 0o777)) == errno.EPERM
    assert run_as(UID_A, GID_A, lambda: try_call(os.chmod, p, 0o600)) == "ok"
    assert stat.S_IMODE(os.lstat(p).st_mode) == 0o600
    # an unprivileged owner cannot give the file away
    assert run_as(UID_A, GID_A,
                  lambda: try_call(os.chown, p, UID_B, -1)) == errno.EPERM
    assert os.lstat(p).st_uid == UID_A


@MULTIUSER
def test_setgid_cleared_when_owner_not_in_group(fs):
    # An unprivileged owner chmod'ing g+s on a file whose group it is not a
    # member of gets the setgid bit silently cleared.
    p = os.path.join(fs.mnt, "f")
    write_file(p)
    os.chown(p, UID_A, 4444)
    assert run_as(UID_A, GID_A, lambda: try_call(os.chmod, p, 0o2755)) == "ok"
    assert stat.S_IMODE(os.lstat(p).st_mode) == 0o0755


@MULTIUSER
def test_write_by_non_owner_clears_setuid(fs):
    p = os.path.join(fs.mnt, "f")
    write_file(p, b"x")
    os.chmod(p, 0o4777)

    def child():
        fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b"y")
        finally:
            os.close(fd)

    assert run_as(UID_A, GID_A, lambda: try_call(child)) == "ok"
    assert stat.S_IMODE(os.lstat(p).st_mode) == 0o0777
    assert read_file(p) == b"xy"


@MULTIUSER
def test_sticky_dir_deletion_rules(fs):
    d = os.path.join(fs.mnt, "tmp")
    os.mkdir(d)
    os.chmod(d, 0o1777)
    fa = os.path.join(d, "a_file")
    fb = os.path.join(d, "b_file")
    assert run_as(UID_A, GID_A, lambda: try_call(write_file, fa, b"a")) == "ok"
    assert run_as(UID_B, GID_B, lambda: try_call(write_file, fb, b"b")) == "ok"
    # B may not delete or rename A's file in a sticky dir ...
    assert run_as(UID_B, GID_B, lambda: try_call(os.unlink, fa)) == errno.EPERM
    assert run_as(UID_B, GID_B,
                  lambda: try_call(os.rename, fa, os.path.join(d, "x"))) == errno.EPERM
    # ... nor replace it by renaming over it
    assert run_as(UID_B, GID_B, lambda: try_call(os.rename, fb, fa)) == errno.EPERM
    assert read_file(fa) == b"a"
    # but may delete its own
    assert run_as(UID_B, GID_B, lambda: try_call(os.unlink, fb)) == "ok"
    assert not os.path.lexists(fb)
    # the owner of the file may delete it
    assert run_as(UID_A, GID_A, lambda: try_call(os.unlink, fa)) == "ok"
    # the owner of the directory may delete anyone's file
    assert run_as(UID_B, GID_B, lambda: try_call(write_file, fb, b"b")) == "ok"
    os.chown(d, UID_A, GID_A)
    assert run_as(UID_A, GID_A, lambda: try_call(os.unlink, fb)) == "ok"
    # root may delete anything
    assert run_as(UID_B, GID_B, lambda: try_call(write_file, fb, b"b")) == "ok"
    os.unlink(fb)
    assert os.listdir(d) == []


@MULTIUSER
def test_non_sticky_dir_allows_deleting_others_files(fs):
    d = os.path.join(fs.mnt, "shared")
    os.mkdir(d)
    os.chmod(d, 0o777)
    fa = os.path.join(d, "a_file")
    assert run_as(UID_A, GID_A, lambda: try_call(write_file, fa, b"a")) == "ok"
    os.chmod(fa, 0o600)  # file mode does not matter for unlink
    assert run_as(UID_B, GID_B, lambda: try_call(os.unlink, fa)) == "ok"
    assert not os.path.lexists(fa)


@MULTIUSER
def test_sticky_dir_rmdir_other_users_subdir(fs):
    d = os.path.join(fs.mnt, "tmp")
    os.mkdir(d)
    os.chmod(d, 0o1777)
    sub = os.path.join(d, "sub")
    assert run_as(UID_A, GID_A, lambda: try_call(os.mkdir, sub)) == "ok"
    assert run_as(UID_B, GID_B, lambda: try_call(os.rmdir, sub)) == errno.EPERM
    assert run_as(UID_A, GID_A, lambda: try_call(os.rmdir, sub)) == "ok"

"""File handles that outlive the kernel's inode cache: name_to_handle_at,
then (once the kernel has forgotten the inode) open_by_handle_at, as
fstests generic/426, 467, 477 and an NFS export of the mount do.  The
kernel asks LOOKUP(nodeid, ".") and LOOKUP(dir, ".."); a handle of a
deleted inode, or of an inode number since reused, is ESTALE, as on ext4."""
import ctypes
import errno
import os

import pytest

from conftest import require_root

pytestmark = pytest.mark.rrfuse_only

libc = ctypes.CDLL(None, use_errno=True)
MAX_HANDLE_SZ = 128
AT_FDCWD = -100


class FileHandle(ctypes.Structure):
    _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int),
                ("f_handle", ctypes.c_ubyte * MAX_HANDLE_SZ)]


def handle_of(path):
    fh = FileHandle(handle_bytes=MAX_HANDLE_SZ)
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(AT_FDCWD, path.encode(), ctypes.byref(fh),
                              ctypes.byref(mount_id), 0):
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)
    return fh


def open_handle(mnt, fh, flags=os.O_RDONLY):
    mfd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = libc.open_by_handle_at(mfd, ctypes.byref(fh), flags)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        return fd
    finally:
        os.close(mfd)


def forget_all():
    """Make the kernel drop the mount's unused dentries and inodes (FORGET)."""
    os.sync()
    for _ in range(3):
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2\n")


def test_open_by_handle_after_the_kernel_forgot(fs):
    require_root("open_by_handle_at and drop_caches")
    os.makedirs(fs.path("d", "e"))
    with open(fs.path("d", "e", "f"), "wb") as f:
        f.write(b"by handle\n")
    hf = handle_of(fs.path("d", "e", "f"))
    hd = handle_of(fs.path("d", "e"))
    forget_all()
    fd = open_handle(fs.mnt, hf)
    try:
        assert os.read(fd, 100) == b"by handle\n"
    finally:
        os.close(fd)
    forget_all()
    fd = open_handle(fs.mnt, hd, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert os.listdir(fd) == ["f"]
        # The directory's parent is found through "..".
        up = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        try:
            assert os.listdir(up) == ["e"]
        finally:
            os.close(up)
    finally:
        os.close(fd)


def test_handle_of_a_deleted_or_reused_inode_is_stale(fs):
    require_root("open_by_handle_at and drop_caches")
    with open(fs.path("gone"), "w") as f:
        f.write("x")
    h = handle_of(fs.path("gone"))
    ino = os.stat(fs.path("gone")).st_ino
    os.unlink(fs.path("gone"))
    forget_all()
    with pytest.raises(OSError) as e:
        open_handle(fs.mnt, h)
    assert e.value.errno == errno.ESTALE
    # The number comes back with another generation: still the old handle's ESTALE.
    for i in range(64):
        p = fs.path("new%d" % i)
        open(p, "w").close()
        if os.stat(p).st_ino == ino:
            break
    forget_all()
    with pytest.raises(OSError) as e:
        open_handle(fs.mnt, h)
    assert e.value.errno == errno.ESTALE

"""rrctl MNT sync: everything durable now (issue 26).

sync(1) and syncfs(2) never reach a /dev/fuse server (the kernel sends
FUSE_SYNCFS only where fc->sync_fs is set, and only virtiofs sets it), so
without a commit interval (commit=0) nothing written since the last fsync
is on the image.  rrctl MNT sync writes the kernel's dirty pages to the
daemon (syncfs), gives delayed data its blocks, commits the metadata as one
journal transaction and flushes the device: after it, a kill -9 of the
daemon loses nothing.  Anyone who may open the mount may sync, as syncfs.
"""
import os
import subprocess

import pytest

from conftest import (RRCTL, Mount, debugfs, fsck, kill_daemon, make_image, pattern)

pytestmark = pytest.mark.rrfuse_only

MIB = 1 << 20
# name: (seed, size): a few buffered writes of odd sizes, some in a directory.
FILES = {"a": (1, 3 * MIB + 123), "b": (2, 4096), "dir/c": (3, 700 * 1024), "dir/d": (4, 17),
         "dir/sub/e": (5, 2 * MIB)}


def rrctl(*args, **kw):
    if not os.access(RRCTL, os.X_OK):
        pytest.skip("rrctl missing: %s" % RRCTL)
    return subprocess.run([RRCTL] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=120, **kw)


def write_files(mnt):
    os.makedirs(os.path.join(mnt, "dir", "sub"))
    for name, (seed, size) in FILES.items():
        with open(os.path.join(mnt, name), "wb") as f:     # buffered: delalloc in the daemon
            data = pattern(seed, size)
            for off in range(0, size, 64 * 1024):
                f.write(data[off:off + 64 * 1024])


def killed_after(sync):
    """Write FILES with commit=0, `rrctl MNT sync` if sync, kill -9 the
    daemon; e2fsck -fn must be clean either way.  Returns the image."""
    image = make_image(size="256M")
    m = Mount(image, opts="commit=0").mount()
    try:
        write_files(m.mnt)
        if sync:
            r = rrctl(m.mnt, "sync")
            assert r.returncode == 0 and not r.stdout and not r.stderr, r
        else:
            subprocess.run(["sync", "-f", m.mnt], check=True)    # reaches the kernel only
        kill_daemon(m)
    finally:
        m.cleanup()
    rc, out = fsck(image)
    assert rc == 0, out
    return image


def test_sync_makes_everything_durable():
    image = killed_after(sync=True)
    # Offline, as the image is (the commit wrote every block home).
    for name, (seed, size) in FILES.items():
        assert debugfs(image, "stat /" + name).find("Size: %d" % size) >= 0, name
    # And through a new mount, which would replay a journal the kill left behind.
    m = Mount(image).mount()
    try:
        for name, (seed, size) in FILES.items():
            with open(m.path(name), "rb") as f:
                assert f.read() == pattern(seed, size), name
        m.unmount()
    finally:
        m.cleanup()
    rc, out = fsck(image)
    assert rc == 0, out


def test_without_it_syncfs_leaves_the_image_behind():
    """The contrast: syncfs alone reaches the kernel, not the daemon."""
    image = killed_after(sync=False)
    m = Mount(image).mount()
    try:
        complete = []
        for name, (seed, size) in FILES.items():
            try:
                with open(m.path(name), "rb") as f:
                    complete.append(f.read() == pattern(seed, size))
            except FileNotFoundError:
                complete.append(False)
        assert not all(complete), "syncfs made everything durable: does FUSE_SYNCFS reach us now?"
        m.unmount()
    finally:
        m.cleanup()
    rc, out = fsck(image)
    assert rc == 0, out


@pytest.mark.opts("allow_other")
def test_anyone_who_may_open_it_may_sync(fs, as_user):
    with open(fs.path("f"), "wb") as f:
        f.write(pattern(9, MIB))
    r = as_user([RRCTL, fs.mnt, "sync"])
    assert r.returncode == 0, r.stderr


def test_read_only_mount_syncs_nothing(mount_factory):
    m = mount_factory(opts="ro")
    r = rrctl(m.mnt, "sync")
    assert r.returncode == 0, r.stderr


def test_usage(fs):
    r = rrctl(fs.mnt, "sync", "mb_stats")
    assert r.returncode == 2 and "usage" in r.stderr, r

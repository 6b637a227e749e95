"""Access times as the kernel's ext4 keeps them (relatime by default, noatime,
strictatime; nodiratime and diratime for directories): FUSE leaves atime to the server, which sees the reads that
miss the kernel's page cache (a remount empties it).  Each case runs the
same steps on rrfuse and on the kernel's ext4 (loop device) and compares
whether each read moved the access time (fstests generic/192)."""

import os
import subprocess

import pytest

from conftest import Mount, fsck, loop_works, make_image, require_mount_backend

pytestmark = pytest.mark.rrfuse_only


def _steps(m):
    """[did read k move atime?] for: a file whose atime is older than its
    mtime, read; read again; its directory listed; after a write, read."""
    moved = []
    f, d = m.path("d", "f"), m.path("d")
    os.mkdir(d)
    with open(f, "wb") as fh:
        fh.write(b"x" * 8192)
    st = os.stat(f)
    os.utime(f, ns=(st.st_mtime_ns - 100 * 10**9, st.st_mtime_ns))
    os.utime(d, ns=(st.st_mtime_ns - 100 * 10**9, st.st_mtime_ns))

    def cold_read(path, read):
        m.remount()
        before = os.stat(path).st_atime_ns
        read(path)
        moved.append(os.stat(path).st_atime_ns != before)

    cat = lambda p: open(p, "rb").read()
    cold_read(f, cat)
    cold_read(f, cat)
    cold_read(d, os.listdir)
    with open(f, "r+b") as fh:
        fh.write(b"y")
    cold_read(f, cat)
    return moved


def _run(kernel, opts):
    image = make_image(size="64M")
    m = Mount(image, opts=opts, kernel=kernel)
    m.mount()
    try:
        moved = _steps(m)
        m.unmount()
    finally:
        m.cleanup()
    rc, out = fsck(image)
    assert rc == 0, out
    return moved


@pytest.mark.parametrize("opts,want", [("", [True, False, True, True]),
                                       ("noatime", [False, False, False, False]),
                                       ("nodiratime", [True, False, False, True]),
                                       ("diratime", [True, False, True, True])])
def test_reads_move_atime_as_the_kernels(opts, want):
    require_mount_backend()
    got = _run(False, opts)
    assert got == want, got
    if loop_works():
        assert _run(True, opts) == want


def test_strictatime_moves_it_on_every_read():
    require_mount_backend()
    assert _run(False, "strictatime") == [True, True, True, True]
